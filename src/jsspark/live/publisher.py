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

Headers go out exactly as the row holds them: every value of a repeated key, in order, values
unchanged (only CR/LF become spaces, as nats-py does). nats-py's ``publish`` takes a dict (one
value per key), so the header block is built here and handed to the connection by
``_PublishHook``, the one place jsspark uses nats-py's private publish path
(``Client._send_publish`` and ``_send_command``); its guard (``_hook_problem``) checks those
before use. If a future nats-py breaks it, headers a dict can carry still go through nats-py's
public API, and a row with a repeated key fails with an error saying so instead of losing values.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from jsspark.engine import headers as H
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


# -- the one use of nats-py's private publish path --------------------------------------------
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP token, as nats-py checks keys
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


class HeaderBlock:
    """A complete ``NATS/1.0`` header block for one publish. Deliberately not a mapping: should
    nats-py ever hand it to code other than the hook, that fails loudly instead of collapsing
    repeated keys."""

    __slots__ = ("block",)

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        for key, _ in pairs:
            if not _HEADER_KEY.fullmatch(key):
                raise ValueError(f"jetstream (live) sink: invalid header name {key!r}")
        self.block = H.encode([(k, v.translate(_NEWLINES)) for k, v in pairs])

    def items(self) -> Any:
        raise RuntimeError("jetstream (live) sink: nats-py sent a header block past jsspark's publish hook "
                           f"(nats-py {_nats_version()} changed Client.publish?); pin nats-py 2.x")


def _nats_version() -> str:
    from importlib.metadata import version

    try:
        return version("nats-py")
    except Exception:  # pragma: no cover - not installed as a distribution
        return "unknown"


def _hook_problem() -> str | None:
    """Why ``_PublishHook`` cannot be used with the installed nats-py, or ``None`` if it can."""
    import inspect

    from nats.aio.client import Client
    from nats.protocol import command

    version = _nats_version()
    if not version.startswith("2."):
        return f"nats-py {version} is not a 2.x release (the hook is tested with 2.16)"
    try:
        params = list(inspect.signature(Client._send_publish).parameters)
    except (AttributeError, TypeError, ValueError):
        return f"nats-py {version} has no Client._send_publish"
    if params != ["self", "subject", "reply", "payload", "payload_size", "headers"]:
        return f"nats-py {version} changed Client._send_publish{tuple(params[1:])}"
    if not all(hasattr(Client, a) for a in ("_send_command", "_flush_pending")) or not hasattr(command, "hpub_cmd"):
        return f"nats-py {version} has no Client._send_command/_flush_pending or protocol hpub_cmd"
    return None


def _client() -> tuple[Any, bool]:
    """A connection, and whether its publishes take a ``HeaderBlock`` (the hook's guard passed)."""
    from jsspark.live.ingestor import _client_class

    base = _client_class()
    if _hook_problem() is not None:
        return base(), False
    from nats.protocol.command import hpub_cmd

    class _PublishHook(base):  # type: ignore[misc, valid-type]
        async def _send_publish(self, subject: str, reply: str, payload: bytes, payload_size: int,
                                headers: Any) -> None:
            if not isinstance(headers, HeaderBlock):
                return await super()._send_publish(subject, reply, payload, payload_size, headers)
            # nats-py's own HPUB path with our block in place of the one it builds from a dict
            self.stats["out_msgs"] += 1
            self.stats["out_bytes"] += payload_size
            await self._send_command(hpub_cmd(subject, reply, headers.block, payload))
            if self._flush_queue is not None and self._flush_queue.empty():
                await self._flush_pending()
            return None

    return _PublishHook(), True


def _wire_headers(pairs: list[tuple[str, str]] | None, hooked: bool) -> Any:
    """What to give ``nc.request(headers=...)``: a ``HeaderBlock`` through the hook, else a dict
    (refused when a key repeats: a dict would keep only its last value)."""
    if not pairs:
        return None
    if hooked:
        return HeaderBlock(pairs)
    keys = [k for k, _ in pairs]
    repeated = next((k for k in keys if keys.count(k) > 1), None)
    if repeated is not None:
        raise RuntimeError(f"jetstream (live) sink: repeated header key {repeated!r} cannot be published: "
                           f"{_hook_problem()}, so only one value per key would reach NATS")
    return dict(pairs)


async def publish_batches(opts: LiveWriteOptions, batches: Iterator[pa.RecordBatch]) -> tuple[int, int]:
    """Publish every row with a JetStream ack, ``max_in_flight`` at a time; (published, duplicates)."""
    nc, hooked = _client()
    await nc.connect(**opts.conn.connect_kwargs())
    sem = asyncio.Semaphore(opts.max_in_flight)
    published = duplicates = 0
    failures: list[BaseException] = []

    async def one(subject: str, data: bytes, headers: Any) -> None:
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
                headers = _wire_headers(_headers(row, _msg_id(row, opts), opts), hooked)
                t = asyncio.ensure_future(one(subject, payload, headers))
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
