"""``writeStream.format("jetstream").option("servers", ...)``: publish rows to a JetStream server.

Each task publishes its rows as JetStream publishes (request/reply, so every message gets a
PubAck) with at most ``maxInFlight`` outstanding, and fails with the server's own error
(``APIError`` with its code, err_code and description) if any publish is refused. Spark may
replay a batch (a retried task, or a restart before the commit log): every message carries
``Nats-Msg-Id`` — the ``msgIdColumn`` value, or ``<origin stream>:<origin seq>`` for rows
that came from a JetStream source — so the target's duplicate window drops the replays and a
batch never lands twice (the PubAck then says ``duplicate``). Rows without an id are published
at least once. Columns: ``subject`` (or the ``subject`` option), ``data``, optional ``headers``
(``array<struct<name,value>>``), and optionally ``stream``/``seq`` for the derived id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from jsspark.errors import APIError
from jsspark.live.options import LiveWriteOptions, parse_live_write_options, redact

MSG_ID = "Nats-Msg-Id"


@dataclass
class PublishedMessage(WriterCommitMessage):
    """What a task published: counts the driver can report."""

    published: int
    duplicates: int


def _msg_id(row: dict[str, Any], opts: LiveWriteOptions) -> str | None:
    if opts.msg_id_column:
        value = row.get(opts.msg_id_column)
        return None if value is None else str(value)
    if row.get("stream") is not None and row.get("seq") is not None:
        return f"{row['stream']}:{row['seq']}"
    return None


def _headers(row: dict[str, Any], msg_id: str | None, opts: LiveWriteOptions) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for h in row.get("headers") or ():
        out[h["name"]] = h["value"]
    if msg_id is not None:
        out[MSG_ID] = msg_id
    if opts.expected_stream:
        out["Nats-Expected-Stream"] = opts.expected_stream
    return out or None


async def publish_batches(opts: LiveWriteOptions, batches: Iterator[pa.RecordBatch]) -> tuple[int, int]:
    """Publish every row with a JetStream ack, ``max_in_flight`` at a time; (published, duplicates)."""
    from jsspark.live.ingestor import _client_class

    nc = _client_class()()
    await nc.connect(**opts.conn.connect_kwargs())
    sem = asyncio.Semaphore(opts.max_in_flight)
    published = duplicates = 0
    failures: list[BaseException] = []

    async def one(subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        nonlocal published, duplicates
        try:
            reply = await nc.request(subject, data, timeout=opts.publish_timeout, headers=headers)
            ack = json.loads(reply.data or b"{}")
            if "error" in ack:
                raise APIError.from_dict(ack["error"])
            published += 1
            duplicates += bool(ack.get("duplicate"))
        except BaseException as e:
            failures.append(e)
        finally:
            sem.release()

    tasks: set[asyncio.Task[None]] = set()
    try:
        for batch in batches:
            for row in batch.to_pylist():
                if failures:
                    raise failures[0]
                subject = row.get("subject") or opts.subject
                if not subject:
                    raise ValueError("jetstream (live) sink: a row has no subject and no subject option is set")
                data = row.get("data")
                payload = b"" if data is None else (data.encode() if isinstance(data, str) else bytes(data))
                await sem.acquire()
                t = asyncio.ensure_future(one(subject, payload, _headers(row, _msg_id(row, opts), opts)))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
        if failures:
            raise failures[0]
        return published, duplicates
    finally:
        await nc.close()


def _run(opts: LiveWriteOptions, batches: Iterator[pa.RecordBatch]) -> PublishedMessage:
    try:
        published, dups = asyncio.run(publish_batches(opts, batches))
    except APIError:
        raise
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


def live_writer(options: Any, streaming: bool) -> LiveWriter | LiveStreamWriter:
    """The dispatch target of ``JetStreamDataSource.writer``/``streamWriter`` with ``servers``."""
    opts = parse_live_write_options(options)
    return LiveStreamWriter(opts) if streaming else LiveWriter(opts)
