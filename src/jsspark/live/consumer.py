"""The origin-side consumer: create (server-managed), bind (user-managed) or recreate (ordered).

Why these three, and why reset rather than recreate for durables (ADR "durable sourcing"):

- **server-managed**: jsspark creates the durable itself with the only configuration that makes
  sourcing reliable: ``ack_policy flow_control`` (acks ride on flow-control replies carrying
  ``Nats-Last-Stream``/``Nats-Last-Consumer``), ``flow_control true``, ``idle_heartbeat 1s``,
  ``max_ack_pending`` (the back-pressure bound: the server stops delivering once that many
  messages are unacked, so the local buffer is bounded), no ``ack_wait`` and
  ``max_deliver -1``. The start position and filter come from the options, as with a
  server-managed stream source.
- **user-managed**: bind to an operator's durable by name + deliver subject. Its
  ``CONSUMER.INFO`` first (10014 when missing), which must say ``flow_control`` (else 10217, the
  server's own refusal text), deliver to the subject given, have no ``deliver_group`` and not be
  paused (``check_bound``); only then the binding proper: a ``$JS.API.CONSUMER.RESET`` with an
  empty body, exactly as nats-server's sourcing does, which restarts delivery at the ack floor + 1.
- server-managed durables carry ``metadata`` ``jsspark: live``: server mode updates only a
  durable it made (``create_durable``), never an operator's of the same name.
- **ordered** (Limits origins only): an ephemeral ``ack_policy none`` push consumer started at
  the next needed sequence; on a gap it is deleted and recreated there, as an ordered consumer
  does. It never acks, so it is refused where deliveries or acks remove messages (Interest,
  WorkQueue: ``Ingestor._check_ordered``).

A durable is never deleted and recreated: on an Interest origin that would drop interest and
lose messages. Gaps and (re)binds use the reset API.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from jsspark.errors import APIError, api_error
from jsspark.live.options import CONSUMER_CONFIG_NAMES, Connection, LiveReadOptions

HEARTBEAT_NS = 1_000_000_000
REQUEST_TIMEOUT = 10.0
# A clustered JetStream answers a stream's or a consumer's request from its leader only: one sent
# while that leader is elected (its node died) gets no answer at all, though the new leader
# answers a request sent a few seconds later. A request that may be sent twice (``resend``) is
# sent again every RESEND_SECONDS within its timeout, the first answer taken (a late answer to
# an earlier send still counts, so a slow server is waited for as long as before).
RESEND_SECONDS = 2.0
# In a server-managed durable's metadata: jsspark created it, so it may update it (create_durable).
OWNER_KEY, OWNER_VALUE = "jsspark", "live"

log = logging.getLogger(__name__)


def _raise_api(resp: dict[str, Any]) -> None:
    """Raise the server's API error with its exact code, err_code and description."""
    err = resp.get("error")
    if err:
        raise APIError.from_dict(err)


class JetStreamNotEnabled(RuntimeError):
    """Nothing answers the JetStream API where requests go (nats.go's "jetstream not enabled")."""


async def js_request(nc: Any, conn: Connection, api: str, body: dict[str, Any] | None,
                     timeout: float = REQUEST_TIMEOUT, resend: bool = False) -> dict[str, Any]:
    """One JetStream API request (``api`` after the prefix, e.g. ``STREAM.INFO.ORDERS``). No
    responders means no JetStream at that prefix: said so, naming the prefix (nats-py's "no
    responders available for request" names nothing). ``resend``: the request may be sent twice
    (a lookup, a durable's creation or reset): unanswered, it is sent again (``RESEND_SECONDS``)."""
    from nats.errors import NoRespondersError

    payload = b"" if body is None else json.dumps(body).encode()
    subject = f"{conn.js_prefix}.{api}"
    try:
        msg = await (_resent(nc, subject, payload, timeout) if resend else nc.request(subject, payload, timeout=timeout))
    except NoRespondersError:
        where = (f"apiPrefix {conn.api_prefix!r}" if conn.api_prefix else
                 f"domain {conn.domain!r} ({conn.js_prefix})" if conn.domain else f"{conn.js_prefix} (no domain)")
        raise JetStreamNotEnabled(f"nats: jetstream not enabled: no JetStream API answers at {where}; JetStream is "
                                  "not enabled on this server or for this account there, or the domain/apiPrefix is "
                                  "wrong") from None
    resp = json.loads(msg.data or b"{}")
    _raise_api(resp)
    return resp


async def _resent(nc: Any, subject: str, payload: bytes, timeout: float) -> Any:
    """``nc.request`` sent again every ``RESEND_SECONDS`` while none of its sends is answered,
    each waiting until ``timeout`` from the first; the first answer (or error other than a
    timeout) is taken. nats-py's TimeoutError when none is answered in ``timeout``."""
    from nats.errors import TimeoutError as NatsTimeout

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    sends: set[asyncio.Task[Any]] = set()
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise NatsTimeout
            sends.add(asyncio.ensure_future(nc.request(subject, payload, timeout=left)))
            done, sends = await asyncio.wait(sends, timeout=min(RESEND_SECONDS, left),
                                             return_when=asyncio.FIRST_COMPLETED)
            for send in done:
                if not isinstance(send.exception(), TimeoutError):
                    return send.result()
            if not sends and done:  # the last send timed out: so did every other
                raise NatsTimeout
    finally:
        for send in sends:
            send.cancel()
        if sends:
            await asyncio.gather(*sends, return_exceptions=True)


def deliver_subject_for(opts: LiveReadOptions) -> str:
    """A stable deliver subject for a server-managed durable (stable so restarts reuse the
    durable's config unchanged); user-managed uses the operator's. Under the inbox prefix, which
    a job sets to an ``external`` origin's deliver prefix (``jobs.origins.origin_connection``)."""
    if opts.deliver_subject:
        return opts.deliver_subject
    return f"{opts.conn.inbox_prefix}.jsspark.{opts.stream}.{opts.consumer}"


def durable_config(opts: LiveReadOptions) -> dict[str, Any]:
    """The server-managed durable's config (JetStream JSON names)."""
    cfg: dict[str, Any] = {
        "durable_name": opts.consumer,
        "name": opts.consumer,
        "deliver_subject": deliver_subject_for(opts),
        "deliver_policy": opts.deliver_policy,
        "ack_policy": "flow_control",
        "flow_control": True,
        "idle_heartbeat": HEARTBEAT_NS,
        "max_ack_pending": opts.max_ack_pending,
        "max_deliver": -1,
        "replay_policy": "instant",
        "metadata": {OWNER_KEY: OWNER_VALUE},
    }
    if opts.opt_start_seq is not None:
        cfg["opt_start_seq"] = opts.opt_start_seq
    if opts.opt_start_time is not None:
        cfg["opt_start_time"] = opts.opt_start_time
    _filters(cfg, opts)
    return cfg


def ordered_config(opts: LiveReadOptions, start_seq: int | None, deliver_subject: str) -> dict[str, Any]:
    """An ephemeral ordered push consumer from ``start_seq`` (or the options on first start)."""
    cfg: dict[str, Any] = {
        "deliver_subject": deliver_subject,
        "ack_policy": "none",
        "flow_control": True,
        "idle_heartbeat": HEARTBEAT_NS,
        "max_deliver": 1,
        "mem_storage": True,
        "num_replicas": 1,
        "inactive_threshold": 30 * HEARTBEAT_NS,
        "replay_policy": "instant",
    }
    if start_seq is not None:
        cfg["deliver_policy"], cfg["opt_start_seq"] = "by_start_sequence", start_seq
    else:
        cfg["deliver_policy"] = opts.deliver_policy
        if opts.opt_start_seq is not None:
            cfg["opt_start_seq"] = opts.opt_start_seq
        if opts.opt_start_time is not None:
            cfg["opt_start_time"] = opts.opt_start_time
    _filters(cfg, opts)
    return cfg


def _filters(cfg: dict[str, Any], opts: LiveReadOptions) -> None:
    """What to deliver, from the options: filter(s) and ``headers_only``."""
    if opts.headers_only:
        cfg["headers_only"] = True
    if opts.filter_subjects:
        cfg["filter_subjects"] = list(opts.filter_subjects)
    elif opts.filter_subject:
        cfg["filter_subject"] = opts.filter_subject


async def create_durable(nc: Any, opts: LiveReadOptions, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create (or find unchanged) the server-managed durable (``config``: ``durable_config``'s,
    or the fallback's before 2.14); the server validates the config.

    ``action create``: the server answers an existing durable of equal config with it, and
    refuses another config with 10148 (``addConsumerWithAssignmentAndMode``). A durable that
    exists with another config is updated only if jsspark made it (``owned``: options changed
    since); an operator's durable of that name is never taken over."""
    api, config = f"CONSUMER.CREATE.{opts.stream}.{opts.consumer}", config or durable_config(opts)
    try:
        return await js_request(nc, opts.conn, api, {"stream_name": opts.stream, "config": config, "action": "create"},
                                resend=True)
    except APIError as e:
        if e.err_code != 10148:  # consumer already exists (with another config)
            raise
        exists = e
    info = await consumer_info(nc, opts.conn, opts.stream, opts.consumer)
    if not owned(info, opts, config["ack_policy"]):
        raise NotOurDurable(f"{exists}: durable {opts.consumer!r} on stream {opts.stream} exists with another config and "
                            "was not created by jsspark's consumerMode server, so it is not changed to jsspark's; bind "
                            "it with consumerMode user (and its deliverSubject), or give option consumer another name")
    config = kept_start(config, info.get("config") or {}, opts)
    return await js_request(nc, opts.conn, api, {"stream_name": opts.stream, "config": config, "action": "update"},
                            resend=True)


START_KEYS = ("deliver_policy", "opt_start_seq", "opt_start_time")


def kept_start(config: dict[str, Any], existing: dict[str, Any], opts: LiveReadOptions) -> dict[str, Any]:
    """``config`` with the existing durable's start (``deliver_policy``, ``opt_start_seq``,
    ``opt_start_time``), which the server never updates (``checkNewConsumerConfig``: "deliver
    policy can not be updated"). The start only says where a new consumer begins: an existing
    durable resumes at its ack floor (or the checkpoint's offset), so changed start options are
    moot, as Spark's Kafka source ignores ``startingOffsets`` once a query has offsets. A warning
    names them; a filter or ``maxAckPending`` change is still applied."""
    kept = {k: existing[k] for k in START_KEYS if existing.get(k) is not None}
    asked = {k: config[k] for k in START_KEYS if config.get(k) is not None}
    if _same_start(kept, asked):
        return config
    log.warning(
        "jetstream (live): durable %r on stream %s exists with start %s; the options ask for %s, which a durable's "
        "start cannot be changed to: it resumes where it stands (give option consumer another name, or delete the "
        "durable, to start elsewhere)", opts.consumer, opts.stream, _start_text(kept), _start_text(asked))
    return {**{k: v for k, v in config.items() if k not in START_KEYS}, **kept}


def _same_start(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The server's comparison: times as instants, not as text."""
    ta, tb = a.get("opt_start_time"), b.get("opt_start_time")
    if (ta is None) != (tb is None) or (ta is not None and _instant(ta) != _instant(tb)):
        return False
    return a.get("deliver_policy") == b.get("deliver_policy") and a.get("opt_start_seq") == b.get("opt_start_seq")


def _instant(text: str) -> tuple[Any, int]:
    from jsspark.config.timestamps import UTCTime

    u = UTCTime.parse(text)
    return u, u.nanosecond


def _start_text(start: dict[str, Any]) -> str:
    return " ".join(f"{CONSUMER_CONFIG_NAMES[k]}={start[k]}" for k in START_KEYS if k in start) or "deliverPolicy=all"


class NotOurDurable(RuntimeError):
    """Server mode met an existing durable it did not create (``create_durable``)."""


def owned(info: dict[str, Any], opts: LiveReadOptions, ack_policy: str = "flow_control") -> bool:
    """Whether jsspark's server mode created the durable of ``info``: its metadata says so, or
    (made before the mark) a durable with server mode's ack policy (flow control; AckAll or
    explicit before 2.14) delivering to the subject server mode gives it."""
    cfg = info.get("config") or {}
    if (cfg.get("metadata") or {}).get(OWNER_KEY) == OWNER_VALUE:
        return True
    return cfg.get("ack_policy") == ack_policy and cfg.get("deliver_subject") == deliver_subject_for(opts)


async def create_ordered(nc: Any, opts: LiveReadOptions, start_seq: int | None, deliver_subject: str) -> dict[str, Any]:
    body = {"stream_name": opts.stream, "config": ordered_config(opts, start_seq, deliver_subject)}
    return await js_request(nc, opts.conn, f"CONSUMER.CREATE.{opts.stream}", body)


async def delete_consumer(nc: Any, conn: Connection, stream: str, name: str) -> None:
    try:
        await js_request(nc, conn, f"CONSUMER.DELETE.{stream}.{name}", None)
    except APIError as e:
        if e.err_code != 10014:  # consumer not found: already gone (inactive threshold)
            raise


async def consumer_names(nc: Any, conn: Connection, stream: str) -> list[str]:
    """Every consumer's name on ``stream`` (``CONSUMER.NAMES``, page after page)."""
    names: list[str] = []
    while True:
        resp = await js_request(nc, conn, f"CONSUMER.NAMES.{stream}", {"offset": len(names)})
        page = resp.get("consumers") or []
        names.extend(page)
        if not page or len(names) >= int(resp.get("total", 0)):
            return names


async def reset_consumer(nc: Any, conn: Connection, stream: str, name: str, seq: int | None = None) -> dict[str, Any]:
    """``$JS.API.CONSUMER.RESET``: empty body restarts delivery at the ack floor + 1, dseq 1.
    Never sent again on its own (``resend``): a reset only slow to answer (a loaded server)
    would be made twice, and the second restarts delivery under acks already on their way, which
    a work-queue store refuses, leaving acked messages stored. The restart's requests before it
    (the durable's creation or info) are resent, so a leader elected answers them first."""
    return await js_request(nc, conn, f"CONSUMER.RESET.{stream}.{name}", None if seq is None else {"seq": seq})


async def consumer_info(nc: Any, conn: Connection, stream: str, name: str,
                        timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
    return await js_request(nc, conn, f"CONSUMER.INFO.{stream}.{name}", None, timeout, resend=True)


def ack_floor(info: dict[str, Any]) -> int:
    """The origin stream seq up to which a durable's ``CONSUMER.INFO`` shows it acked (0: none)."""
    return int((info.get("ack_floor") or {}).get("stream_seq", 0))


def acks_out_of_order(info: dict[str, Any], acked: int) -> bool:
    """A durable's ``CONSUMER.INFO``, asked after acks up to stream seq ``acked`` reached it, shows
    that an ack of an older delivery generation (before a reset) reached it since: the server
    then drops every ack of the new generation up to that ack's delivery seq
    (``processAckMsgLocked``: ``dseq <= o.adflr``). Two signs, whether or not its store took
    that ack (the info shows the store's ack floor): an ack floor below ``acked``; more pending
    than delivered above the ack floor (acks in order each cover a prefix of the deliveries, so
    every pending message was delivered above it)."""
    delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
    floor_dseq = int((info.get("ack_floor") or {}).get("consumer_seq", 0))
    return ack_floor(info) < acked or int(info.get("num_ack_pending", 0)) > delivered - floor_dseq


async def oldest_stored(nc: Any, conn: Connection, stream: str, config: dict[str, Any],
                        timeout: float = REQUEST_TIMEOUT) -> int | None:
    """The origin's oldest stored message a consumer with ``config`` delivers (its filter
    subjects; every subject without one), by ``STREAM.MSG.GET`` with ``next_by_subj`` from
    seq 1; ``None`` when it stores none."""
    subjects = config.get("filter_subjects") or [config.get("filter_subject") or ">"]
    oldest = None
    for subject in subjects:
        try:
            resp = await js_request(nc, conn, f"STREAM.MSG.GET.{stream}", {"seq": 1, "next_by_subj": subject},
                                    timeout, resend=True)
        except APIError as e:
            if e.err_code == 10037:  # no message found
                continue
            raise
        seq = int(resp["message"]["seq"])
        oldest = seq if oldest is None else min(oldest, seq)
    return oldest


class NotBindable(RuntimeError):
    """A user-mode durable that would deliver nothing to the reader (``check_bound``)."""


def check_bound(info: dict[str, Any], opts: LiveReadOptions) -> None:
    """A durable jsspark reads from must be a flow-control push consumer delivering where we
    listen; otherwise refuse with the server's texts (10217 / 10215) for a source consumer.
    A user-mode durable with a ``deliver_group`` delivers only to a queue subscription of that
    group, and a paused one delivers nothing until its ``pause_until``: both would bind and then
    read nothing, so both are refused, saying why (resume it: ``nats consumer resume``)."""
    cfg = info.get("config") or {}
    if cfg.get("ack_policy") != "flow_control":
        raise api_error("JSSourceConsumerRequiresAckFCErr")
    if opts.mode == "user" and cfg.get("deliver_subject") != opts.deliver_subject:
        raise api_error("JSSourceDurableConsumerCfgInvalid")
    if opts.mode != "user":
        return
    if cfg.get("deliver_group"):
        raise NotBindable(f"durable {opts.consumer!r} on stream {opts.stream} has deliver_group "
                          f"{cfg['deliver_group']!r}: it delivers only to a queue group, which the reader is not; "
                          "remove the deliver_group or use another durable")
    if info.get("paused"):
        raise NotBindable(f"durable {opts.consumer!r} on stream {opts.stream} is paused until {cfg.get('pause_until')} "
                          "and delivers nothing until then; resume it (nats consumer resume) to read from it")


async def stream_info(nc: Any, conn: Connection, stream: str, timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
    return await js_request(nc, conn, f"STREAM.INFO.{stream}", None, timeout, resend=True)
