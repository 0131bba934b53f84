"""``writeStream.format("jetstream").option("servers", ...)``: publish rows to a JetStream server.

Each task publishes its rows as JetStream publishes (request/reply, so every message gets a
PubAck) with at most ``maxInFlight`` outstanding, and fails with the server's own error
(``APIError`` with its code, err_code and description) if any publish is refused. Spark may
replay a batch (a retried task, or a restart before the commit log): every message carries
``Nats-Msg-Id`` — the ``msgIdColumn`` value, or (where that is null, empty or not chosen) ``<origin
stream>:<origin seq>`` for rows that came from a JetStream source — so the target's duplicate
window drops the replays and a batch never lands twice (the PubAck then says ``duplicate``).
Rows without an id are published at least once. Columns: ``subject`` (or the ``subject`` option), ``data``, optional ``headers``
(``headers.COLUMN_TYPES``, as the lake sink), and optionally ``stream``/``seq`` for the derived id.

Headers go out exactly as the row holds them: every value of a repeated key, in order, values
unchanged (only CR/LF become spaces, as nats-py does). nats-py's ``publish`` takes a dict (one
value per key), so the header block is built here and handed to the connection by
``jsspark.live.client``'s publish hook, the one place jsspark uses nats-py's private publish
path (``Client._send_publish`` and ``_send_command``); its guard checks those before use. If a
future nats-py breaks it, headers a dict can carry still go through nats-py's public API, and a
row with a repeated key fails with an error saying so instead of losing values.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from jsspark.engine import headers as H
from jsspark.engine.arrays import data_column, one_chunk
from jsspark.errors import APIError
from jsspark.live.bulk_publish import can_send
from jsspark.live.client import PublishFailed, check_size, pub_ack, tear_down, unacked, wire_headers
from jsspark.live.options import LiveWriteOptions, parse_live_write_options, redact

MSG_ID = "Nats-Msg-Id"
STALL_GRACE = 0.5  # seconds past publishTimeout, for a publish nats-py has not sent (``unless_late``)


@dataclass
class PublishedMessage(WriterCommitMessage):
    """What a task published: counts the driver can report."""

    published: int
    duplicates: int


def _msg_id(row: dict[str, Any], opts: LiveWriteOptions) -> str | None:
    """The row's ``Nats-Msg-Id``: its ``msgIdColumn`` value; where that is null, empty or not
    chosen, ``<stream>:<seq>`` of the origin message it came from; else none. An empty value
    counts as null: the server reads an empty id (or one of spaces, ``headers.get``) as none,
    so sent it would dedup nothing."""
    if opts.msg_id_column:
        value = row.get(opts.msg_id_column)
        if value is not None and str(value).lstrip(" "):
            return str(value)
    if row.get("stream") is not None and row.get("seq") is not None:
        return f"{row['stream']}:{row['seq']}"
    return None


def _set(pairs: list[tuple[str, str]], key: str, value: str) -> None:
    """Set ``key`` as a dict would: the first occurrence takes ``value`` in its place, later
    ones go; appended if absent."""
    idx = [i for i, (k, _) in enumerate(pairs) if k == key]
    if not idx:
        pairs.append((key, value))
        return
    pairs[idx[0]] = (key, value)
    for i in reversed(idx[1:]):
        del pairs[i]


def _headers(row: dict[str, Any], msg_id: str | None, opts: LiveWriteOptions) -> list[tuple[str, str]] | None:
    """The row's header pairs (repeats and order kept) with the id and expected stream set."""
    pairs = [(str(h["name"]), "" if h["value"] is None else str(h["value"])) for h in row.get("headers") or ()]
    if msg_id is not None:
        _set(pairs, MSG_ID, msg_id)
    if opts.expected_stream:
        _set(pairs, "Nats-Expected-Stream", opts.expected_stream)
    return pairs or None


def _typed(batch: pa.RecordBatch) -> pa.Table:
    """``headers`` and ``data`` typed as the lake sink takes them (``headers.from_column``: a map,
    a struct's fields in any order; binary or string data), so every row reads the same way and
    a type neither sink can publish fails naming its column (an int ``data`` went out as that
    many zero bytes)."""
    table = pa.Table.from_batches([batch])
    names = table.column_names
    if "headers" in names:
        table = table.set_column(names.index("headers"), "headers", H.from_column(table.column("headers")))
    if "data" in names:
        table = table.set_column(names.index("data"), "data", data_column(table))
    return table


def _string(col: pa.Array) -> pa.Array | None:
    """A string or integer column as strings (what ``str(value)`` gives a row); None for another type."""
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t):
        return col.cast(pa.string())
    return None


def _msg_ids(table: pa.Table, opts: LiveWriteOptions) -> pa.Array | None:
    """``_msg_id`` of every row as a string column (null: no id); None where a column's type
    would make ``str(value)`` differ from Arrow's cast (the rows then go one at a time)."""
    n, names = table.num_rows, table.column_names
    derived = pa.nulls(n, pa.string())
    if "stream" in names and "seq" in names:
        stream, seq = _string(one_chunk(table.column("stream"))), one_chunk(table.column("seq"))
        if stream is None or not pa.types.is_integer(seq.type):
            return None
        derived = pc.binary_join_element_wise(stream, seq.cast(pa.string()), ":")
    if not opts.msg_id_column or opts.msg_id_column not in names:
        return derived
    chosen = _string(one_chunk(table.column(opts.msg_id_column)))
    if chosen is None:
        return None
    given = pc.fill_null(pc.not_equal(pc.utf8_ltrim(chosen, characters=" "), ""), False)
    return pc.if_else(given, chosen, derived)


def bulk_columns(table: pa.Table, opts: LiveWriteOptions, max_payload: int) -> tuple[pa.Array, pa.Array, pa.Array] | None:
    """The batch as ``bulk_publish`` columns (subjects, header blocks, payloads), exactly what the
    rows one at a time would send; None when some row needs that path: no subject, one nats-py
    refuses, a header name nats-py refuses or a null one, a message over ``max_payload``, an id
    column of another type (the one-at-a-time path raises its error at that row)."""
    n, names = table.num_rows, table.column_names
    subjects = pa.nulls(n, pa.string())
    if "subject" in names:
        given = one_chunk(table.column("subject"))
        if not (pa.types.is_string(given.type) or pa.types.is_large_string(given.type)):
            return None
        subjects = given.cast(pa.string())
        subjects = pc.if_else(pc.fill_null(pc.equal(subjects, ""), False), pa.scalar(None, pa.string()), subjects)
    if opts.subject:
        subjects = pc.fill_null(subjects, opts.subject)
    payloads = pc.fill_null(one_chunk(table.column("data")), b"") if "data" in names else pa.array([b""] * n, pa.binary())
    headers = one_chunk(table.column("headers")) if "headers" in names else pa.nulls(n, H.HEADER_TYPE)
    ids = _msg_ids(table, opts)
    if ids is None:
        return None
    if ids.null_count < n:
        headers = H.set_column(headers, MSG_ID, ids)
    if opts.expected_stream:
        headers = H.set_column(headers, H.EXPECTED_STREAM, pa.array([opts.expected_stream] * n, pa.string()))
    blocks = H.encode_column(headers, newlines_to_spaces=True)
    return (subjects, blocks, payloads) if can_send(subjects, headers, blocks, payloads, max_payload) else None


async def unless_late(aw: Awaitable[Any], oldest: Callable[[], tuple[float, str] | None],
                      timeout: float) -> tuple[float, str] | None:
    """Await ``aw`` unless the publish ``oldest`` names (its start and subject: the oldest one
    under way, or ``None``) goes ``timeout`` (and ``STALL_GRACE``) without being answered first:
    then that publish, and ``aw`` is cancelled. nats-py's request starts its own timeout only
    once its buffer took the message, which it waits for with no time limit past its max
    pending size (a stalled server never drains it); the grace lets that timeout decide where
    it runs. A new ``oldest`` (another object) starts the count again."""
    waiting = asyncio.ensure_future(aw)
    try:
        while not waiting.done():
            first = oldest()
            if first is None:
                await waiting
                break
            due = first[0] + timeout + STALL_GRACE - time.monotonic()
            await asyncio.wait({waiting}, timeout=max(due, 0.0) + 0.001)
            if not waiting.done() and first is oldest():
                return first
    finally:
        waiting.cancel()
    return None


async def _publish_rows(nc: Any, opts: LiveWriteOptions, rows: Iterator[dict[str, Any]], hooked: bool) -> tuple[int, int]:
    """Publish rows one at a time with a JetStream ack, ``max_in_flight`` at a time; (published, duplicates)."""

    def messages() -> Iterator[tuple[str, bytes, Any]]:
        for row in rows:
            subject = row.get("subject") or opts.subject
            if not subject:
                raise PublishFailed("a row has no subject and no subject option is set")
            payload = row.get("data") or b""
            headers = wire_headers(_headers(row, _msg_id(row, opts), opts), hooked)
            check_size(nc, subject, payload, headers)
            yield subject, payload, headers

    return await publish_messages(nc, messages(), opts.max_in_flight, opts.publish_timeout)


async def publish_messages(nc: Any, messages: Iterator[tuple[str, bytes, Any]], max_in_flight: int, timeout: float,
                           no_responders: Callable[[str], BaseException] | None = None) -> tuple[int, int]:
    """Publish ``messages`` (subject, payload, nats-py headers) one at a time with a JetStream
    ack, ``max_in_flight`` at a time; (published, duplicates). A message ``messages`` cannot
    make (it raises) ends the sending, and what is under way still gets its ack; the first
    failure is raised. No PubAck within ``timeout`` fails (``unless_late``: also while nats-py
    waits for a stalled server), and the connection is then torn down. ``no_responders``: the
    error for a subject no stream captures (else ``unacked``'s)."""
    sem = asyncio.Semaphore(max_in_flight)
    published = duplicates = 0
    timed_out = False
    failures: list[BaseException] = []
    under_way: dict[asyncio.Task[None], tuple[float, str]] = {}  # start and subject of each, oldest first

    from nats.errors import NoRespondersError

    async def one(subject: str, data: bytes, headers: Any) -> None:
        nonlocal published, duplicates, timed_out
        try:
            reply = await nc.request(subject, data, timeout=timeout, headers=headers)
            ack = pub_ack(subject, reply.data)
            published += 1
            duplicates += bool(ack.get("duplicate"))
        except BaseException as e:
            timed_out = timed_out or isinstance(e, asyncio.TimeoutError)
            nobody = no_responders is not None and isinstance(e, NoRespondersError)
            failures.append(no_responders(subject) if nobody else unacked(subject, e, timeout))
        finally:
            sem.release()

    def oldest() -> tuple[float, str] | None:
        return next(iter(under_way.values()), None)

    late = None
    while not failures:
        try:
            message = next(messages, None)
            if message is None:
                break
            subject, payload, headers = message
        except Exception as e:  # a message that cannot be sent: what is under way still gets its ack
            failures.append(e)
            break
        if not sem.locked():
            await sem.acquire()  # a free slot: no wait
        elif (late := await unless_late(sem.acquire(), oldest, timeout)) is not None:
            break
        t = asyncio.ensure_future(one(subject, payload, headers))
        under_way[t] = (time.monotonic(), subject)
        t.add_done_callback(under_way.pop)
    if under_way and late is None:
        late = await unless_late(asyncio.wait(list(under_way)), oldest, timeout)
    if late is not None:
        failures.append(unacked(late[1], TimeoutError(), timeout))
    if late is not None or timed_out:  # a server that answers nothing may read nothing: torn down
        await tear_down(nc, list(under_way))
    if failures:
        raise failures[0]
    return published, duplicates


async def publish_batches(opts: LiveWriteOptions, batches: Iterator[pa.RecordBatch]) -> tuple[int, int]:
    """Publish every row with a JetStream ack, ``max_in_flight`` at a time; (published, duplicates).
    A batch goes in bulk (``bulk_publish``) where ``bulk_columns`` can say exactly what its rows
    would send; else (and without the publish hook) its rows go one at a time."""
    from jsspark.live.bulk_publish import client_class, publish_columns
    from jsspark.live.client import open_client, publish_client_class

    cls, hooked = publish_client_class()
    bulk = client_class(cls) if hooked else None
    nc = await open_client(opts.conn, opts.publish_timeout, bulk or cls)
    published = duplicates = 0
    try:
        for batch in batches:
            table = _typed(batch)
            columns = bulk_columns(table, opts, int(getattr(nc, "max_payload", 0) or 0)) if bulk else None
            if columns is not None:
                p, d = await publish_columns(nc, *columns, opts.max_in_flight, opts.publish_timeout)
            else:
                p, d = await _publish_rows(nc, opts, iter(table.to_pylist()), hooked)
            published, duplicates = published + p, duplicates + d
        return published, duplicates
    finally:
        await nc.close()


def _run(opts: LiveWriteOptions, batches: Iterator[pa.RecordBatch]) -> PublishedMessage:
    try:
        published, dups = asyncio.run(publish_batches(opts, batches))
    except APIError:
        raise
    except PublishFailed as e:
        raise PublishFailed(redact(f"jetstream (live) sink: {e}", opts.conn)) from None
    except Exception as e:
        raise RuntimeError(redact(f"jetstream (live) sink: {type(e).__name__}: {e}", opts.conn)) from None
    return PublishedMessage(published, dups)


class LiveWriter(DataSourceArrowWriter):
    """Batch ``df.write``: publishes are final once acked, so commit has nothing left to do."""

    def __init__(self, opts: LiveWriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessage:
        return _run(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every message was acked by the server in ``write``; nothing is staged."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Acked publishes cannot be withdrawn; a re-run is made harmless by ``Nats-Msg-Id``."""


class LiveStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: as ``LiveWriter``, per micro-batch."""

    def __init__(self, opts: LiveWriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessage:
        return _run(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every message was acked by the server in ``write``; nothing is staged."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Acked publishes cannot be withdrawn; a re-run is made harmless by ``Nats-Msg-Id``."""


def live_writer(options: Any, streaming: bool, columns: list[str] | None = None) -> LiveWriter | LiveStreamWriter:
    """The dispatch target of ``JetStreamDataSource.writer``/``streamWriter`` with ``servers``
    (``columns``: the DataFrame's). A ``msgIdColumn`` it does not have fails here: every row
    would go without an id, and a replayed batch would land twice."""
    opts = parse_live_write_options(options)
    if opts.msg_id_column and columns is not None and opts.msg_id_column not in columns:
        from jsspark.datasource.options import OptionError

        raise OptionError(f"jetstream (live) sink: option msgIdColumn names column {opts.msg_id_column!r}, which "
                          f"the DataFrame does not have (its columns: {', '.join(columns)})")
    return LiveStreamWriter(opts) if streaming else LiveWriter(opts)
