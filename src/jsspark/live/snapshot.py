"""Batch reads of a live stream: ``spark.read.format("jetstream").option("servers", ...)``.

A batch read is a bounded snapshot: what a new consumer with the read's options (deliver policy,
start sequence or time, filter(s), ``headers_only``) would be delivered, up to the stream's last
sequence when the DataFrame was loaded. Rows have the streaming source's schema and values
(origin seq, nanosecond time, subject, headers with repeats and order kept, data); ``consumer``,
``delivery_seq`` and ``num_pending`` are null, since no consumer delivers them.

How (and why this way):

- **Bounds at ``load()``.** Spark calls ``schema()`` once at ``load()`` and reuses that
  ``DataSource`` instance (pickled) for every action, so ``resolve_bounds`` runs there: one
  ``STREAM.INFO`` for the last sequence and the config, plus one ``STREAM.MSG.GET`` to place a
  ``last`` or ``by_start_time`` start, following the server's ``selectStartingSeqNo``. The read
  is then the stream sequences ``(lo, hi]`` that match the filters; every action on the same
  DataFrame reads the same range (messages removed since by limits or acks are simply gone).
- **No consumer, no acks.** Nothing is created on the server and nothing moves an ack floor, so a
  batch read can look at a WorkQueue or Interest stream without taking anything away. (A consumer
  would not do: on a WorkQueue stream the server refuses a second consumer on the same subjects
  and any non-explicit ack policy; on an Interest stream an ``AckNone`` consumer's deliveries
  count as acks and can remove messages.)
- **Executors read by sequence range, statelessly.** Each partition is a slice of ``(lo, hi]``
  (``PARTITION_SEQS`` sequences, fewer where the stream's messages average more than
  ``PARTITION_BYTES / PARTITION_SEQS`` bytes: a task holds its slice in memory, and 100,000
  messages of 1 MiB would be 100 GiB) that a task reads with nothing but the connection options, so a
  retried task reads the same messages. With ``allow_direct`` a task walks its slice with batched
  direct gets (``$JS.API.DIRECT.GET``, ``batch`` + ``next_by_subj`` per filter: thousands of
  messages per request, answered by the stream without the JetStream API queue). Without it, a
  task walks with ``STREAM.MSG.GET`` ``next_by_subj`` (one message per request: correct on any
  stream, slower; turn ``allow_direct`` on for large reads).
- **An imported JetStream API whose export is not ``response: stream``** (the default, singleton)
  passes only the first reply of each request: a batched direct get loses the rest of its batch
  and its end-of-batch marker. A batch whose next reply does not follow within ``BATCH_GAP`` of
  the last is taken as cut there (the server sends a batch at once): the replies that came are
  its first messages, so the task goes on from after the last with one-reply requests (single
  direct gets, ``SINGLE_WINDOW`` at once; a multi-last one message at a time), which such an
  import does pass, and logs why. ``resolve_bounds`` probes once, so tasks start that way. A slow batch taken for a
  cut one costs speed, never rows: each step goes on from the last message it has.
- **``last_per_subject``**: on a stream with ``max_msgs_per_subject`` 1 every stored message is
  the last of its subject, so it reads like ``all`` (a KV bucket, whatever its size). Otherwise
  it needs ``allow_direct``: one multi-last direct get up to ``hi`` returns exactly the last
  message of each matching subject as of the snapshot (the server answers at most 1024 subjects;
  more fail with its ``413 Too Many Results``).
- **``headers_only``**: the payload is dropped and ``Nats-Msg-Size: <length>`` appended, exactly
  as the server's ``convertToHeadersOnly`` does for a consumer.

Direct-get replies carry the stored header block with ``Nats-Stream``, ``Nats-Subject``,
``Nats-Sequence``, ``Nats-Time-Stamp``, ``Nats-Num-Pending``, ``Nats-Last-Sequence`` appended
(``genHeader``); those six trailing pairs are taken off, so the headers are what was stored.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jsspark.errors import APIError
from jsspark.live.options import Connection, LiveReadOptions, redact

PARTITION_SEQS = 100_000  # stream sequences per partition
PARTITION_BYTES = 256 << 20  # ... fewer, so that a partition holds about this many stored bytes
DIRECT_BATCH = 2_000  # messages per batched direct get
DIRECT_MAX_BYTES = 8 << 20  # ... and at most this many bytes (the server stops early, then EOB)
REPLY_TIMEOUT = 10.0
OUTPUT_ROWS = 10_000
OUTPUT_BYTES = 64 << 20  # a record batch holds at most OUTPUT_ROWS rows and about this many payload bytes
MSG_SIZE = "Nats-Msg-Size"
DIRECT_TAIL = ("Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending",
               "Nats-Last-Sequence")
SINGLE_TAIL = DIRECT_TAIL[:4]  # a direct get without ``batch`` (``dg``)
BATCH_GAP = 2.0  # a batch's replies follow each other at once: none within this after one, the batch was cut
SINGLE_WINDOW = 16  # single direct gets under way at once where batches are cut
NO_MESSAGE = 10037

log = logging.getLogger(__name__)

Row = tuple[str, int, int, list[tuple[str, str]] | None, bytes, None, None]


class SnapshotError(RuntimeError):
    """A batch read of a live stream cannot be done as asked; the text says why (secrets redacted)."""


class CutShort(Exception):
    """A batched direct get whose replies stopped after ``rows`` with no end of batch (see the
    module docstring: an imported API that passes one reply per request)."""

    def __init__(self, rows: list[Row]) -> None:
        super().__init__(f"batch cut after {len(rows)} replies")
        self.rows = rows


@dataclass(frozen=True)
class Bounds:
    """What a batch read returns: stream sequences ``(lo, hi]`` matching the filters, or with
    ``last_per_subject`` the last message of each matching subject up to ``hi``."""

    lo: int
    hi: int
    direct: bool
    last_per_subject: bool = False
    partition_seqs: int = PARTITION_SEQS  # sequences per partition (``PARTITION_BYTES``)
    batched: bool = True  # batched direct gets reach us whole (``probe_batches``)


@dataclass(frozen=True)
class SnapshotPartition:
    """One task's slice: everything a task needs (picklable, no secret in its repr)."""

    conn: Connection
    stream: str
    lo: int
    hi: int
    filters: tuple[str, ...]
    headers_only: bool
    direct: bool
    last_per_subject: bool = False
    batched: bool = True


def filters_of(opts: LiveReadOptions) -> tuple[str, ...]:
    return opts.filter_subjects or ((opts.filter_subject,) if opts.filter_subject else ())


def rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch of a server time (RFC 3339, nanosecond fraction kept)."""
    from jsspark.config.timestamps import UTCTime

    t = UTCTime.parse(text)
    return calendar.timegm(t.utctimetuple()) * 1_000_000_000 + t.microsecond * 1000 + t.nanosecond


async def connect(conn: Connection) -> Any:
    """A client that keeps raw header blocks (repeated keys); refused credentials fail at once."""
    from jsspark.live.client import open_client

    return await open_client(conn, conn.connect_timeout)


def _check_rules(opts: LiveReadOptions, stream_cfg: dict[str, Any]) -> None:
    """The server's consumer-config rules for these options (a batch read creates no consumer,
    so nobody else would check them): its own codes and texts."""
    from jsspark.config import ConsumerConfig, StreamConfig, check_consumer_config

    wire: dict[str, Any] = {"ack_policy": "explicit", "deliver_policy": opts.deliver_policy,
                            "headers_only": opts.headers_only}
    if opts.opt_start_seq is not None:
        wire["opt_start_seq"] = opts.opt_start_seq
    if opts.opt_start_time is not None:
        wire["opt_start_time"] = opts.opt_start_time
    if opts.filter_subjects:
        wire["filter_subjects"] = list(opts.filter_subjects)
    elif opts.filter_subject:
        wire["filter_subject"] = opts.filter_subject
    if opts.opt_start_time is not None:  # the server's answer to a time it cannot parse (Go's time.Parse)
        from jsspark.config.timestamps import GoTimeError, parse_go_rfc3339

        try:
            parse_go_rfc3339(opts.opt_start_time)
        except GoTimeError as problem:
            raise APIError.from_dict({"code": 400, "err_code": 10025, "description": f"invalid JSON: {problem}"},
                                     field="optStartTime") from None
    check_consumer_config(ConsumerConfig.model_validate(wire), StreamConfig.model_validate(stream_cfg))


async def _msg_get(nc: Any, conn: Connection, stream: str, req: dict[str, Any]) -> dict[str, Any] | None:
    """``STREAM.MSG.GET``: the stored message, or ``None`` for the server's 10037 (no message found)."""
    from jsspark.live.consumer import js_request

    try:
        return (await js_request(nc, conn, f"STREAM.MSG.GET.{stream}", req))["message"]
    except APIError as e:
        if e.err_code == NO_MESSAGE:
            return None
        raise


async def resolve_bounds(opts: LiveReadOptions) -> Bounds:
    """The snapshot a batch read with ``opts`` returns, fixed now (see the module docstring)."""
    from jsspark.live.consumer import stream_info

    nc = await connect(opts.conn)
    try:
        info = await stream_info(nc, opts.conn, opts.stream)
        cfg, state = info["config"], info["state"]
        _check_rules(opts, cfg)
        direct = bool(cfg.get("allow_direct"))
        first, last = int(state.get("first_seq", 0)), int(state.get("last_seq", 0))
        filters = filters_of(opts)
        policy, lps = opts.deliver_policy, False
        if opts.opt_start_seq is not None:
            start = opts.opt_start_seq
        elif policy == "all":
            start = first
        elif policy == "last":  # the newest matching message (unfiltered: the last seq, as the server)
            start = last
            if filters:
                found = [await _msg_get(nc, opts.conn, opts.stream, {"last_by_subj": f}) for f in filters]
                seqs = [int(m["seq"]) for m in found if m]
                start = max(seqs) if seqs else last + 1
                last = max([last, *seqs])  # one that arrived since STREAM.INFO: the snapshot is this moment
        elif policy == "last_per_subject":
            if int(cfg.get("max_msgs_per_subject", -1)) == 1:
                start = first  # each stored message is its subject's last (the server does the same)
            elif not direct:
                raise SnapshotError(
                    f"jetstream (live): a batch read with deliverPolicy last_per_subject needs allow_direct on "
                    f"stream {opts.stream!r} (its multi-last direct get returns each subject's last message as of "
                    f"the snapshot); enable allow_direct, or read with deliverPolicy all")
            else:
                start, lps = first, True
        elif policy == "by_start_time":
            m = await _msg_get(nc, opts.conn, opts.stream, {"start_time": opts.opt_start_time, "next_by_subj": ">"})
            start = int(m["seq"]) if m else last + 1
            last = max(last, start) if m else last
        else:  # new
            start = last + 1
        start = max(start, first, 1)
        stored, count = int(state.get("bytes", 0)), int(state.get("messages", 0))
        seqs = max(1, min(PARTITION_SEQS, PARTITION_BYTES * count // stored)) if stored else PARTITION_SEQS
        batched = await probe_batches(nc, opts.conn, opts.stream, start) if direct and start <= last else True
        return Bounds(start - 1, last, direct, lps, seqs, batched)
    finally:
        await nc.close()


async def probe_batches(nc: Any, conn: Connection, stream: str, seq: int) -> bool:
    """Whether a batched direct get reaches us whole: a batch of one at ``seq`` (its message and
    the end of batch), or not through an import that passes one reply per request. Any other
    failure says nothing about that: the tasks meet it and report it as a read's error."""
    sub = await nc.subscribe(nc.new_inbox())
    try:
        await _direct_replies(nc, sub, conn, stream, {"seq": seq, "batch": 1})
    except CutShort:
        _cut_warning(conn, stream)
        return False
    except Exception:  # not about imports: the tasks meet it again and report it as the read's error
        return True
    finally:
        await sub.unsubscribe()
    return True


def plan(opts: LiveReadOptions, bounds: Bounds) -> list[SnapshotPartition]:
    """The partitions of a snapshot: slices of ``bounds.partition_seqs`` stream sequences."""
    base = dict(conn=opts.conn, stream=opts.stream, filters=filters_of(opts), headers_only=opts.headers_only,
                direct=bounds.direct, batched=bounds.batched)
    if bounds.last_per_subject:
        return [SnapshotPartition(lo=bounds.lo, hi=bounds.hi, last_per_subject=True, **base)]  # type: ignore[arg-type]
    step = bounds.partition_seqs
    return [SnapshotPartition(lo=lo, hi=min(lo + step, bounds.hi), **base)  # type: ignore[arg-type]
            for lo in range(bounds.lo, bounds.hi, step)]


# -- executors ---------------------------------------------------------------------------------
def _status(msg: Any) -> str | None:
    hdrs = msg.headers
    return hdrs.get("Status") if hdrs else None


def _direct_row(msg: Any, tail_keys: tuple[str, ...] = DIRECT_TAIL) -> Row:
    """A direct-get reply as a row: the appended headers give subject, seq and time. (The
    server appends them to the stored block as it is, one without the ``NATS/1.0`` line too.)"""
    from jsspark.engine.headers import decode, repaired

    raw = getattr(msg.headers, "raw", b"") if msg.headers else b""
    pairs = decode(repaired(raw))[0] if raw else []
    tail = pairs[-len(tail_keys):]
    if tuple(k for k, _ in tail) != tail_keys:
        raise SnapshotError(f"jetstream (live): unexpected direct get reply headers {[k for k, _ in tail]}")
    stored = pairs[: -len(tail_keys)]
    return (tail[1][1], int(tail[2][1]), rfc3339_ns(tail[3][1]), stored or None, bytes(msg.data), None, None)


def _failed(stream: str, msg: Any) -> SnapshotError:
    desc = msg.headers.get("Description", "")
    return SnapshotError(f"jetstream (live): direct get on stream {stream!r} answered {_status(msg)} {desc}".strip())


async def _direct_replies(nc: Any, sub: Any, conn: Connection, stream: str,
                          req: dict[str, Any]) -> tuple[list[Row], int]:
    """One batched direct get: its messages and the EOB's ``Nats-Num-Pending`` (0 if none).
    ``CutShort`` with the messages that came if no reply follows within ``BATCH_GAP``."""
    import nats.errors

    await nc.publish(f"{conn.js_prefix}.DIRECT.GET.{stream}", json.dumps(req).encode(), reply=sub.subject)
    rows: list[Row] = []
    while True:
        try:
            msg = await sub.next_msg(BATCH_GAP if rows else REPLY_TIMEOUT)
        except nats.errors.TimeoutError:
            if rows:
                raise CutShort(rows) from None
            raise
        status = _status(msg)
        if status is None:
            rows.append(_direct_row(msg))
        elif status == "204":  # end of batch
            return rows, int(msg.headers.get("Nats-Num-Pending", "0") or 0)
        elif status == "404":  # nothing (more) at or after the requested sequence
            return rows, 0
        else:
            raise _failed(stream, msg)


async def _direct_one(nc: Any, p: SnapshotPartition, req: dict[str, Any], tail_keys: tuple[str, ...]) -> Row | None:
    """The first reply of a direct get, the one an import passes: its message, ``None`` for none
    (404, or a batch's end of batch first: a multi-last's subjects all end below ``seq``)."""
    msg = await nc.request(f"{p.conn.js_prefix}.DIRECT.GET.{p.stream}", json.dumps(req).encode(),
                           timeout=REPLY_TIMEOUT)
    status = _status(msg)
    if status in ("404", "204"):
        return None
    if status is not None:
        raise _failed(p.stream, msg)
    return _direct_row(msg, tail_keys)


async def _direct_window(nc: Any, p: SnapshotPartition, subject: str | None, seq: int) -> list[Row]:
    """``SINGLE_WINDOW`` single direct gets at once, at ``seq`` and the sequences after it (up to
    the slice's end): each answers the first message on ``subject`` at or after its sequence,
    so together, in order and without repeats, they are every one up to the highest answered."""
    asked = range(seq, min(seq + SINGLE_WINDOW, p.hi + 1))
    got = await asyncio.gather(*(_direct_one(nc, p, {"seq": k, "next_by_subj": subject or ">"}, SINGLE_TAIL)
                                 for k in asked), return_exceptions=True)
    rows: dict[int, Row] = {}
    for g in got:
        if isinstance(g, BaseException):
            raise g
        if g is not None:
            rows[g[1]] = g
    return [rows[s] for s in sorted(rows)]


def _cut_warning(conn: Connection, stream: str) -> None:
    log.warning("jetstream (live): batched direct gets on stream %r (API %s) stop after their first reply: an "
                "imported JetStream API whose export is not 'response: stream' passes one reply per request; reading "
                "one message per request instead (slower). Export the API with response: stream for batched reads",
                stream, conn.js_prefix)


async def _direct_range(nc: Any, sub: Any, p: SnapshotPartition, subject: str | None,
                        batched: bool) -> tuple[list[Row], bool]:
    """The slice's messages on ``subject`` (all without one), and whether batches still came whole."""
    out: list[Row] = []
    seq = p.lo + 1
    while seq <= p.hi:
        if batched:
            req: dict[str, Any] = {"seq": seq, "batch": DIRECT_BATCH, "max_bytes": DIRECT_MAX_BYTES}
            if subject:
                req["next_by_subj"] = subject
            else:
                req["batch"] = min(DIRECT_BATCH, p.hi - seq + 1)
            try:
                rows, _pending = await _direct_replies(nc, sub, p.conn, p.stream, req)
            except CutShort as cut:
                _cut_warning(p.conn, p.stream)
                rows, batched = cut.rows, False
        else:
            rows = await _direct_window(nc, p, subject, seq)
        if not rows:
            break
        out.extend(r for r in rows if r[1] <= p.hi)
        seq = rows[-1][1] + 1
    return out, batched


async def _multi_last(nc: Any, sub: Any, p: SnapshotPartition) -> list[Row]:
    out: list[Row] = []
    req: dict[str, Any] = {"multi_last": list(p.filters or (">",)), "up_to_seq": p.hi, "max_bytes": DIRECT_MAX_BYTES}
    batched = p.batched
    while True:
        try:
            if batched:
                try:
                    rows, pending = await _direct_replies(nc, sub, p.conn, p.stream, req)
                except CutShort as cut:
                    _cut_warning(p.conn, p.stream)
                    rows, pending, batched = cut.rows, 1, False
            else:  # one message a request: the first reply, the lowest seq at or above req["seq"]
                row = await _direct_one(nc, p, {**req, "batch": 1}, DIRECT_TAIL)
                rows, pending = ([row], 1) if row else ([], 0)
        except SnapshotError as e:
            if "413" in str(e):
                raise SnapshotError(f"{e}: deliverPolicy last_per_subject reads at most 1024 subjects at once "
                                    f"(the server's limit); narrow filterSubjects or read deliverPolicy all") from None
            raise
        out.extend(rows)
        if not rows or not pending:
            return out
        req["seq"] = rows[-1][1] + 1  # the reply stopped at max_bytes (or was cut): the rest are above this


async def _get_range(nc: Any, p: SnapshotPartition, subject: str | None) -> list[Row]:
    from jsspark.engine.headers import decode, repaired

    out: list[Row] = []
    seq = p.lo + 1
    while seq <= p.hi:
        m = await _msg_get(nc, p.conn, p.stream, {"seq": seq, "next_by_subj": subject or ">"})
        if m is None or int(m["seq"]) > p.hi:
            break
        hdrs = decode(repaired(base64.b64decode(m["hdrs"])))[0] if m.get("hdrs") else []
        out.append((m["subject"], int(m["seq"]), rfc3339_ns(m["time"]), hdrs or None,
                    base64.b64decode(m.get("data") or ""), None, None))
        seq = int(m["seq"]) + 1
    return out


async def read_rows(p: SnapshotPartition) -> list[Row]:
    """The partition's messages in stream order."""
    nc = await connect(p.conn)
    try:
        sub = await nc.subscribe(nc.new_inbox(), pending_msgs_limit=-1, pending_bytes_limit=-1)
        if p.last_per_subject:
            rows = await _multi_last(nc, sub, p)
        else:
            per_filter, batched = [], p.batched
            for subject in p.filters or (None,):
                if p.direct:
                    rows, batched = await _direct_range(nc, sub, p, subject, batched)
                    per_filter.append(rows)
                else:
                    per_filter.append(await _get_range(nc, p, subject))
            rows = per_filter[0] if len(per_filter) == 1 else sorted({r[1]: r for f in per_filter for r in f}.values(),
                                                                   key=lambda r: r[1])
        if p.headers_only:
            rows = [(s, q, t, [*(h or ()), (MSG_SIZE, str(len(d)))], b"", None, None) for s, q, t, h, d, _, _ in rows]
        return rows
    finally:
        await nc.close()


def read_snapshot(p: SnapshotPartition) -> Iterator[pa.RecordBatch]:
    """A partition as record batches of the source schema (runs on executors)."""
    from jsspark.live.spill import rows_to_batch

    try:
        rows = asyncio.run(read_rows(p))
    except SnapshotError:
        raise
    except Exception as e:
        raise SnapshotError(redact(f"jetstream (live): reading stream {p.stream!r} seqs {p.lo + 1}..{p.hi}: "
                                   f"{type(e).__name__}: {e}", p.conn)) from None
    i = 0
    while i < len(rows):  # at most OUTPUT_ROWS rows, and one over OUTPUT_BYTES (a binary column holds 2 GiB)
        j, size = i, 0
        while j < len(rows) and j - i < OUTPUT_ROWS and size < OUTPUT_BYTES:
            size += len(rows[j][4])
            j += 1
        yield rows_to_batch(p.stream, None, rows[i:j])  # type: ignore[arg-type]
        rows[i:j] = [None] * (j - i)  # type: ignore[list-item]  # yielded: not held twice
        i = j
