"""When a paced read may release each message: the server's pacing of a push consumer
(``replay_policy=original``, ``rate_limit_bps``), carried across a query's micro-batches.

The server delivers a consumer's messages one at a time, in one goroutine that lives as long
as the consumer (``consumer.go`` ``loopAndGatherMsgs``):

- replay: before each message it waits ``ts - lts`` (the previous delivered message's stored
  time), when that is over 1 ms, counted from where it got to (just after that delivery). It
  replays so until it first finds nothing more to deliver once past the stream's last sequence
  at its start (``o.replay = false`` at ``waitForMsgs`` when ``o.sseq > lseq``); after that it
  delivers at once.
- rate: a token bucket (``setRateLimit``: ``rate.NewLimiter(bps/8, burst)``) that starts full,
  ``burst`` the stream's ``max_msg_size`` or else the max payload (1 MiB). Each message reserves
  its delivered size (``sz``: subject, ack reply, header block and payload, not the stored size)
  and waits until the bucket covers it. A message larger than the burst never goes on a server
  (the reservation fails and the consumer stalls); here it is charged as the burst instead.

A query plans one paced partition per micro-batch. The planner (alive across batches) keeps
this state (``Pace``), hands each partition the state at its first message, and advances it by
what it planned (``advance``); the task releases each message no earlier than ``Pacer.release``
says (times are epoch seconds: the task runs in another process). A task that starts after its
first message was due releases it at once, and its later gaps count from there, as the server
counts from the actual delivery. A restarted query starts afresh, as a new consumer does.
No pyspark or engine import: tasks import this.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

SERVER_MAX_PAYLOAD = 1 << 20  # the server's default max_payload: the burst without a max_msg_size
MIN_REPLAY_DELAY_NS = 1_000_000  # the server waits out a replay gap only when it is over 1 ms
EPHEMERAL_NAME_LEN = 8  # an ephemeral consumer's name (``createConsumerName``: an 8-character hash)
_MSG_SIZE_HEADER_LEN = len("Nats-Msg-Size") + 4  # ": " and CRLF around the value
_EMPTY_HEADER_LEN = len("NATS/1.0\r\n\r\n")


@dataclass(frozen=True)
class Pace:
    """The consumer's pacing state before its next message."""

    replay: bool = False  # still replaying at the original gaps
    rate: float = 0.0  # bytes per second (``rate_limit_bps // 8``); 0: no rate limit
    burst: int = SERVER_MAX_PAYLOAD
    last_ts: int = 0  # stored time (ns) of the previous delivered message; 0: none yet
    last_at: float = 0.0  # when it was released (epoch s)
    tokens: float = float(SERVER_MAX_PAYLOAD)  # the bucket at ``tokens_at``: full to start with
    tokens_at: float = 0.0

    @classmethod
    def start(cls, replay: bool, rate_limit_bps: int, burst: int) -> Pace:
        rate = (rate_limit_bps // 8 or rate_limit_bps / 8) if rate_limit_bps else 0.0
        return cls(replay=replay, rate=float(rate), burst=burst, tokens=float(burst))

    @property
    def paced(self) -> bool:
        return self.replay or bool(self.rate)

    def advance(self, now: float, ts_ns: np.ndarray, sizes: np.ndarray) -> Pace:
        """The state after releasing these messages, the first reached at ``now``."""
        pacer, at = Pacer(self), now
        for ts, size in zip(ts_ns.tolist(), sizes.tolist(), strict=True):
            at = pacer.release(at, ts, size)
            pacer.commit()
        return pacer.pace()


class Pacer:
    """A ``Pace`` advanced message by message (mutable, so no object per message)."""

    __slots__ = ("_next", "base", "last_at", "last_ts", "tokens", "tokens_at")

    def __init__(self, pace: Pace) -> None:
        self.base = pace
        self.last_ts, self.last_at = pace.last_ts, pace.last_at
        self.tokens, self.tokens_at = pace.tokens, pace.tokens_at
        self._next = (self.last_ts, self.last_at, self.tokens, self.tokens_at)

    def release(self, now: float, ts_ns: int, size: int) -> float:
        """When the next message (stored at ``ts_ns``, ``size`` delivered bytes), reached at
        ``now``, may go; ``commit`` then makes it the previous delivered message."""
        p = self.base
        at = now
        if p.replay and self.last_ts and ts_ns - self.last_ts > MIN_REPLAY_DELAY_NS:
            at = max(at, self.last_at + (ts_ns - self.last_ts) / 1e9)
        tokens, tokens_at = self.tokens, self.tokens_at
        if p.rate:  # golang.org/x/time/rate ReserveN(at, size): refill since the last reservation
            tokens = min(float(p.burst), tokens + max(0.0, at - tokens_at) * p.rate) - min(size, p.burst)
            tokens_at = at
            if tokens < 0:
                at += -tokens / p.rate
        self._next = (ts_ns, at, tokens, tokens_at)
        return at

    def commit(self) -> None:
        self.last_ts, self.last_at, self.tokens, self.tokens_at = self._next

    def pace(self) -> Pace:
        return replace(self.base, last_ts=int(self.last_ts), last_at=self.last_at, tokens=self.tokens,
                       tokens_at=self.tokens_at)


_POW10 = 10 ** np.arange(19, dtype=np.int64)


def _digits(values: np.ndarray) -> np.ndarray:
    """Decimal digits of each non-negative integer."""
    return np.searchsorted(_POW10, np.asarray(values, dtype=np.int64), side="right").clip(1).astype(np.int64)


def ack_reply_lens(
    stream: str, consumer: str | None, seqs: np.ndarray, dseqs: np.ndarray, ts_ns: np.ndarray, pending: np.ndarray
) -> np.ndarray:
    """Lengths of the ack reply subjects ``$JS.ACK.<stream>.<consumer>.<dc>.<seq>.<dseq>.<ts>.<pending>``
    (``ackReply``, first delivery) the rate limit counts; an ephemeral consumer's name is 8 long."""
    name = len(consumer.encode()) if consumer else EPHEMERAL_NAME_LEN
    fixed = len("$JS.ACK.") + len(stream.encode()) + 1 + name + len(".1.") + 3  # three dots between numbers
    return fixed + _digits(seqs) + _digits(dseqs) + _digits(ts_ns) + _digits(pending)


def delivered_sizes(
    subject_len: np.ndarray, hdr_len: np.ndarray, data_len: np.ndarray, ack_len: np.ndarray, headers_only: bool
) -> np.ndarray:
    """What the rate limit charges per message (``loopAndGatherMsgs``'s ``sz``): subject, ack
    reply, header block and payload; ``headers_only`` sends the header block plus
    ``Nats-Msg-Size: <payload length>`` (``convertToHeadersOnly``) and no payload."""
    hdr = np.asarray(hdr_len, dtype=np.int64)
    data = np.asarray(data_len, dtype=np.int64)
    if headers_only:
        hdr = np.where(hdr > 0, hdr, _EMPTY_HEADER_LEN) + _MSG_SIZE_HEADER_LEN + _digits(data)
        data = np.zeros_like(data)
    return np.asarray(subject_len, dtype=np.int64) + np.asarray(ack_len, dtype=np.int64) + hdr + data
