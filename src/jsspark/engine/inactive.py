"""When an inactive consumer goes: the server's delete timer (``consumer.dtmr``), applied lazily.

nats-server removes a consumer with an ``inactive_threshold`` (ephemerals: 5 s by default)
once it has been inactive that long (``deleteNotActive``). A lake has no timer: before an
operation reads or changes a stream's consumers or retention, the consumers whose deadline
(``deadline``) has passed are deleted as a consumer delete does, so what the operation sees is
what the server shows after its timer fired.

Activity, as the server counts it for a pull consumer: its creation, an update that changes
``inactive_threshold`` (``updateConfig`` restarts the timer), a pull request (``next_seqs``;
``processNextMsgRequest`` stamps ``waiting.last``), a delivery (``record_delivered``;
``deliverMsg``), any ack (``suppressDeletion``). A push consumer on a lake has no subscriber on
its deliver subject, so only creation, such an update and acks count (``o.active`` is false).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jsspark.config import AckPolicy, ConsumerConfig

if TYPE_CHECKING:
    from jsspark.engine.consumer_state import Consumer

MS = 1_000_000
PULL_JITTER = 100 * MS  # ``updateInactiveThreshold`` adds 100 ms + up to 900 ms to a pull consumer's
ACK_WAIT_DELAY = MS  # ``ackWaitDelay``


def dthresh(cfg: ConsumerConfig) -> int:
    """The timer's period (ns; 0: never): the threshold, for a pull consumer plus the least
    jitter the server adds, so a lake never removes one before a server could."""
    thr = int(cfg.inactive_threshold)
    if thr <= 0:
        return 0
    return thr if cfg.deliver_subject else thr + PULL_JITTER


def tracked(cfg: ConsumerConfig) -> bool:
    """Whether activity is recorded for the consumer (the server: ``dthresh > 0``)."""
    return dthresh(cfg) > 0


def counts_pulls(cfg: ConsumerConfig) -> bool:
    """Whether pulls and deliveries are activity: for a tracked pull consumer (``waiting.last``);
    a push consumer's timer looks only at interest in its deliver subject (and acks)."""
    return tracked(cfg) and not cfg.deliver_subject


def deadline(c: Consumer, num_pending: Callable[[], int]) -> int | None:
    """When ``c`` goes (ns since the epoch), or None: never. A pull consumer with acks pending
    waits for the last delivery's ack wait to pass and then the threshold again (the server
    takes each pending message's delivery time; the lake keeps only the last delivery's,
    ``delivered.last_active_ns``). ``num_pending`` counts its pending acks when asked."""
    period = dthresh(c.config)
    if not period:
        return None
    at = c.last_active_ns + period
    cfg, st = c.config, c.state
    if cfg.deliver_subject or cfg.ack_policy is AckPolicy.NONE or st.delivered.stream_seq <= st.ack_floor.stream_seq:
        return at
    wait = int(cfg.backoff[0]) if cfg.backoff else int(cfg.ack_wait)
    later = st.delivered.last_active_ns + wait + ACK_WAIT_DELAY + period
    if later > at and num_pending():
        return later
    return at
