"""RePublish as a Structured Streaming job: a lake stream's messages re-sent as a server would.

``start_republish`` reads the lake stream with ``format("jetstream")`` and, in a
``foreachBatch``, computes each batch's republished messages (``engine.republish``) and sends
them to the destination:

- ``{"servers": "nats://...", ...}`` (connection options as ``jsspark.live.options``): a NATS
  server. ``mode="at_most_once"`` (the default, what a server does) sends plain core
  publishes; once connected and before a batch's first publish its id is recorded under the
  checkpoint (``_republish/started``), and a batch Spark replays after a crash is skipped,
  never sent twice (the rest of a batch interrupted mid-way is lost, as a server's republish
  is lost in a crash, or when a stalled destination takes nothing for ``publishTimeout``, which
  fails the batch; a server that cannot be reached fails the batch before anything is recorded, so a restart retries it). ``mode="idempotent"`` sends JetStream publishes (request/reply, waiting for every
  PubAck; a batch in bulk, ``live.bulk_publish``) with ``Nats-Msg-Id: <stream>:<seq>``, so the destination subject must be captured
  by a JetStream stream on that server (else no responders fails the batch); a replayed
  batch is re-sent and that stream's duplicate window drops it: at least once sent, exactly
  once stored within the window. The id replaces the value of the message's own first
  ``Nats-Msg-Id`` (the server dedups on the first one), else it is appended last.
- ``{"location": "...", "stream": optional}``: a lake. Each batch is one ``publish_batch``
  per target stream with the Delta txn ``(jsspark.republish.<query id>, batchId)``, so a
  replayed batch is skipped: exactly once, whatever ``mode``. Without ``stream`` every
  message goes to the one lake stream whose subjects match its subject, as a server routes a
  core publish; a message no stream captures is dropped, as a core publish nobody listens to.

The read is a non-durable consumer (deliver all, filtered on the republish ``src`` where
that filter says the same): republish observes the stream and never acks, so it takes
nothing from a WorkQueue or Interest stream and holds nothing back there. A server
republishes a message when it stores it (``processJetStreamMsg``), so a ``republish`` added
to (or changed on) a stream that already holds messages covers only what is stored after
the update: the stream's own republish starts after the last sequence the update recorded
(``Lake.republish_after``), not at the first message. Messages removed
before the job reads them (limits, purge, delete, or a work-queue consumer's ack) are not
republished (``failOnDataLoss`` is off), and do not count for ``Nats-Last-Sequence``.

The batch is collected on the driver (``maxMessagesPerTrigger`` bounds it, 100,000 by
default, and ``maxBytesPerTrigger``, 64 MiB of stored messages by default: Spark's ``toArrow``
makes one Arrow batch of up to 10,000 rows, and 300 messages of 4 MiB failed it with the JVM's
``OutOfDirectMemoryError``, every restart again), where the last sequence per subject is carried
from batch to batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow.fs import LocalFileSystem

from jsspark.config import RePublish, StreamConfig
from jsspark.engine import headers as H
from jsspark.engine.republish import (
    LastSequences,
    effective_republish,
    lake_last_seqs,
    republish_batch,
    with_republish,
)
from jsspark.errors import APIError

MODES = ("at_most_once", "idempotent")
DEFAULT_MAX_MESSAGES = 100_000
DEFAULT_MAX_BYTES = 64 << 20  # stored bytes per batch (at least one message)
APP_ID_PREFIX = "jsspark.republish."
MARKER_DIR = "_republish"
MSG_ID = "Nats-Msg-Id"
CONNECT_ATTEMPTS = 5  # per server, for a batch's connection (and reconnects while it publishes)
CYCLE = "stream configuration for republish destination forms a cycle"
_READ_COLUMNS = ["seq", "ts_ns", "subject", "headers", "data"]


# -- configuration -----------------------------------------------------------------------------
def check_republish(config: StreamConfig, republish: RePublish | None = None) -> RePublish | None:
    """The republish to run for a stream (``republish``, else the stream's own), with the
    server's defaults, validated against the stream's subjects with the server's errors
    (``forms a cycle``, ``transform ... not valid``). ``None``: nothing to republish."""
    from jsspark.config.validation import _check_republish

    cfg = with_republish(config, republish)
    if cfg is None:
        return None
    _check_republish(cfg, pedantic=False)
    return effective_republish(cfg)


@dataclass(frozen=True)
class ServerDestination:
    conn: Any  # jsspark.live.options.Connection
    max_in_flight: int = 1_000
    publish_timeout: float = 10.0


@dataclass(frozen=True)
class LakeDestination:
    location: str
    stream: str | None = None
    storage_options: dict[str, str] | None = None


def parse_destination(
    destination: Mapping[str, Any], *, origin_location: str, origin_stream: str,
    storage_options: dict[str, str] | None = None,
) -> ServerDestination | LakeDestination:
    """``{"servers": ..., <connection options>, maxInFlight?, publishTimeout?}`` or
    ``{"location": ..., "stream"?, "storage_options"?}``; a lake destination that is the origin
    stream itself is the server's cycle error."""
    from jsspark.datasource.options import OptionError

    keys = {k.lower() for k in destination}
    if "servers" in keys and "location" in keys:
        raise OptionError("republish destination: give either 'servers' (a NATS server) or 'location' (a lake)")
    if "servers" in keys:
        from jsspark.live.options import CONNECTION_OPTIONS, _canonical, _int, _seconds, parse_connection

        opts = _canonical({k: str(v) for k, v in destination.items()},
                          (*CONNECTION_OPTIONS, "maxInFlight", "publishTimeout"))
        timeout = _seconds(opts, "publishTimeout", 10.0, "republish destination")
        return ServerDestination(parse_connection(opts), _int(opts, "maxInFlight", 1_000, 1) or 1_000, timeout)
    if "location" in keys:
        unknown = keys - {"location", "stream", "storage_options"}
        if unknown:
            raise OptionError(f"republish destination: unknown keys {sorted(unknown)} for a lake destination "
                              "(location, stream, storage_options)")
        d = {k.lower(): v for k, v in destination.items()}
        location = str(d["location"]).rstrip("/")
        stream = d.get("stream") or None
        if stream is not None and stream == origin_stream and _same_location(location, origin_location):
            from jsspark.errors import api_error

            raise api_error("JSStreamInvalidConfigF", err=CYCLE)
        return LakeDestination(location, stream, d.get("storage_options", storage_options))
    raise OptionError("republish destination needs 'servers' (a NATS server) or 'location' (a lake)")


def _same_location(a: str, b: str) -> bool:
    from jsspark.engine.files import local_root

    def norm(x: str) -> str:
        local = local_root(x)
        return x.rstrip("/") if local is None else os.path.realpath(local)

    return norm(a) == norm(b)


def _reader_filter(src: str, config: StreamConfig) -> str | None:
    """The consumer filter that selects exactly what ``src`` matches, if there is one: a
    source token that merely starts with ``*`` matches any token (the server's subset quirk),
    a filter token would not, so then the whole stream is read; so it is when the stream
    would refuse the filter (it matches none of its subjects: nothing is republished)."""
    from jsspark.config import ConsumerConfig, check_consumer_config

    if src in ("", ">"):
        return None
    tokens = src.split(".")
    if any(("*" in t or ">" in t) and t not in ("*", ">") for t in tokens):
        return None
    try:
        check_consumer_config(ConsumerConfig(filter_subject=src), config)
    except APIError:
        return None
    return src


# -- checkpoint files --------------------------------------------------------------------------
def _filesystem(path: str) -> tuple[Any, str]:
    """A file system holding the file at ``path`` and its path there: a non-local one through
    delta-rs's object store (the environment's credentials, as for the lake without storage
    options), rooted at its folder; pyarrow's own store knows no ``s3a://``."""
    from jsspark.engine.files import local_root, table_filesystem

    local = local_root(path)
    if local is not None:
        return LocalFileSystem(), os.path.abspath(local)
    folder, _, name = path.rpartition("/")
    return table_filesystem(folder), name


def _read_text(path: str) -> str | None:
    """The file's text; ``None`` only when it is not there. Any other failure (a permission, an
    object store's timeout) fails, naming the file: read as "not there", a restart would send an
    at most once batch that had started again, or store a lake batch again under another app id."""
    filesystem, p = _filesystem(path)
    try:
        with filesystem.open_input_stream(p) as f:
            return f.read().decode()
    except FileNotFoundError:
        return None
    except Exception as e:
        from jsspark.live.spill import describe

        raise CheckpointReadError(f"republish: cannot read the checkpoint file {path}: {describe(e)}; the batch "
                                  "fails before anything is sent or stored (a restart retries it)") from None


class CheckpointReadError(RuntimeError):
    """A republish checkpoint file that is there but could not be read."""


class StartedBatches:
    """The highest batch id whose publishing began, kept durably under the checkpoint (a local
    file is replaced atomically and synced; an object store put is atomic)."""

    def __init__(self, checkpoint: str) -> None:
        self.path = f"{checkpoint.rstrip('/')}/{MARKER_DIR}/started"
        self._last: int | None = None

    def last(self) -> int:
        if self._last is None:
            text = _read_text(self.path)
            self._last = int(json.loads(text)["batch_id"]) if text else -1
        return self._last

    def started(self, batch_id: int) -> bool:
        return batch_id <= self.last()

    def record(self, batch_id: int) -> None:
        body = json.dumps({"batch_id": int(batch_id)}).encode()
        filesystem, p = _filesystem(self.path)
        if not isinstance(filesystem, LocalFileSystem):
            from jsspark.engine.files import put_bytes

            put_bytes(filesystem, p, body)
        else:
            parent = p.rsplit("/", 1)[0]
            filesystem.create_dir(parent, recursive=True)
            tmp = f"{p}.tmp"
            with open(tmp, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
            fd = os.open(parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._last = int(batch_id)


def query_app_id(checkpoint: str) -> str:
    """The Delta txn app id of the query: its persistent id from ``<checkpoint>/metadata``
    (a new checkpoint is a new query whose batch ids restart at 0)."""
    text = _read_text(f"{checkpoint.rstrip('/')}/metadata")
    if text:
        return APP_ID_PREFIX + json.loads(text.splitlines()[0])["id"]
    return APP_ID_PREFIX + "checkpoint-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:32]


# -- publishing --------------------------------------------------------------------------------
def _pairs(cell: list[dict[str, str]] | None) -> list[tuple[str, str]]:
    return [(h["name"], h["value"]) for h in cell or ()]


def storable(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers of a republished message that a JetStream stream will *store*: without
    ``Nats-Stream-Source``, which 2.15 refuses from publishers (10227) and which every
    message of a sourcing stream carries, and without ``Nats-Expected-*`` / ``Nats-Batch-*``,
    checks the message already passed in its own stream (a KV update's expected last subject
    sequence would fail against the destination's sequences, and fail again on every retry). A
    server's own republish keeps them all, and a stream capturing the destination then drops
    that core publish silently; the stored modes (``idempotent``, a lake destination) exist to
    store every message, so they drop these headers instead, as a mirror or source does (the
    message's origin is still in ``Nats-Stream``/``Nats-Sequence``)."""
    return H.without(pairs, drop=(H.STREAM_SOURCE,), drop_prefixes=H.ORIGIN_CHECK_PREFIXES) or []


def with_msg_id(pairs: list[tuple[str, str]], msg_id: str) -> list[tuple[str, str]]:
    """``Nats-Msg-Id: msg_id`` as the id the server sees: the first ``Nats-Msg-Id`` gets the
    value, else it is appended."""
    for i, (k, _) in enumerate(pairs):
        if k == MSG_ID:
            return [*pairs[:i], (MSG_ID, msg_id), *pairs[i + 1:]]
    return [*pairs, (MSG_ID, msg_id)]


def _no_capture(subject: str) -> BaseException:
    return RuntimeError(f"republish (idempotent): no JetStream stream captures {subject!r} on the destination "
                        "server; idempotent mode needs one (its duplicate window drops replays)")


def _bulk_columns(rows: pa.Table, stream: str, max_payload: int) -> tuple[pa.Array, pa.Array, pa.Array] | None:
    """``rows`` as ``bulk_publish`` columns (subjects, header blocks, payloads) for idempotent
    mode: ``storable`` headers with ``with_msg_id``'s id, exactly as the rows one at a time send
    them; None for a batch ``can_send`` does not pass (its rows go one at a time)."""
    from jsspark.engine.arrays import one_chunk
    from jsspark.live.bulk_publish import can_send

    subjects = one_chunk(rows.column("subject"))
    headers = one_chunk(rows.column("headers"))
    payloads = pc.fill_null(one_chunk(rows.column("data")), b"")
    headers = H.without_column(headers, drop=(H.STREAM_SOURCE,), drop_prefixes=H.ORIGIN_CHECK_PREFIXES)
    ids = pc.binary_join_element_wise(stream, one_chunk(rows.column("seq")).cast(pa.string()), ":")
    headers = H.set_column(headers, MSG_ID, ids, keep_later=True)
    blocks = H.encode_column(headers, newlines_to_spaces=True)
    return (subjects, blocks, payloads) if can_send(subjects, headers, blocks, payloads, max_payload) else None


async def publish_to_server(
    dest: ServerDestination, rows: pa.Table, *, stream: str, acked: bool,
    on_connected: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Send ``rows`` (``engine.republish.OUTPUT_SCHEMA``) in order: core publishes then one
    flush (``acked=False``), or JetStream publishes with ``Nats-Msg-Id: <stream>:<seq>``,
    ``max_in_flight`` outstanding, each PubAck checked. ``on_connected`` runs once connected,
    before the first publish. Returns (sent, duplicates). A publish the server does not
    answer (a core one: does not take) within ``publish_timeout`` fails the batch naming its
    subject, also while nats-py waits for a stalled server to drain its buffer (which it does
    with no time limit past its max pending size), and the connection is torn down."""
    from jsspark.live import bulk_publish
    from jsspark.live.client import (
        PublishFailed,
        check_size,
        open_client,
        publish_client_class,
        tear_down,
        wire_headers,
    )
    from jsspark.live.publisher import publish_messages, unless_late

    client_cls, hooked = publish_client_class()  # sends repeated header keys exactly
    bulk_cls = bulk_publish.client_class(client_cls) if hooked else None
    # as the sink connects: refused credentials or TLS fail at once with their own error, an
    # unreachable server fails the batch after publish_timeout (Spark then stops the query)
    nc = await open_client(dest.conn, dest.publish_timeout, bulk_cls or client_cls)
    nc.options["max_reconnect_attempts"] = CONNECT_ATTEMPTS  # a connection lives for one batch
    sent = 0
    try:
        todo: list[tuple[str, bytes, Any]] = []
        if not acked:  # the whole batch fits max_payload, or it fails before it counts as started (none lost)
            for r in rows.to_pylist():
                todo.append((r["subject"], r["data"] or b"", wire_headers(_pairs(r["headers"]), hooked)))
                check_size(nc, *todo[-1])
        if on_connected is not None:
            on_connected()
        # acked publishes go in bulk (the window bounds them); core ones stay a row at a time: in
        # bulk they outran the server's ingest queue, which drops what is over (300,000 in one
        # batch: 250,615 stored, against all of them a row at a time)
        columns = _bulk_columns(rows, stream, int(getattr(nc, "max_payload", 0) or 0)) if bulk_cls and acked else None
        if columns is not None:
            return await bulk_publish.publish_columns(nc, *columns, dest.max_in_flight, dest.publish_timeout,
                                                      no_responders=_no_capture)
        if not acked:
            taking = [(time.monotonic(), todo[0][0] if todo else "")]  # the publish nats-py holds
            unanswered = [False]  # the flush got no PONG: a server that reads nothing

            async def send() -> None:
                nonlocal sent
                for subject, data, headers in todo:
                    taking[0] = (time.monotonic(), subject)
                    await nc.publish(subject, data, headers=headers)
                    sent += 1
                taking[0] = (time.monotonic(), taking[0][1])
                try:
                    await nc.flush(timeout=dest.publish_timeout)
                except TimeoutError:
                    unanswered[0] = True
                    raise PublishFailed(f"the server answered no flush within publishTimeout ({dest.publish_timeout:g} s) "
                                        f"after {sent} publishes, the last to {taking[0][1]!r}: at most once, they "
                                        f"may be lost") from None

            # past its max pending size nats-py waits for a stalled server to drain its buffer with
            # no time limit: a publish it holds for publishTimeout fails the batch
            sending = asyncio.ensure_future(send())
            late = await unless_late(sending, lambda: taking[0], dest.publish_timeout)
            if late is not None or unanswered[0]:
                await tear_down(nc, [sending])  # a server that reads nothing: not drained, torn down
            if late is not None:
                if sending.done() and not sending.cancelled():
                    sending.exception()  # the next publish on the closed connection (a cancellation swallowed)
                raise PublishFailed(f"the server took no publish within publishTimeout ({dest.publish_timeout:g} s): "
                                    f"stalled at the publish to {late[1]!r}")
            await sending  # its error, if any
            return sent, 0

        def messages() -> Iterator[tuple[str, bytes, Any]]:
            for r in rows.to_pylist():
                headers = wire_headers(with_msg_id(storable(_pairs(r["headers"])), f"{stream}:{r['seq']}"), hooked)
                check_size(nc, r["subject"], r["data"] or b"", headers)
                yield r["subject"], r["data"] or b"", headers

        return await publish_messages(nc, messages(), dest.max_in_flight, dest.publish_timeout,
                                      no_responders=_no_capture)
    finally:
        await nc.close()


def publish_to_lake(
    dest: LakeDestination, rows: pa.Table, *, txn: tuple[str, int], lake: Any = None
) -> dict[str, int]:
    """One ``publish_batch`` per target stream with ``txn`` (a replay is skipped); returns how
    many messages each target stream received (0 for a replayed batch)."""
    import jsspark
    from jsspark.engine.lake import STREAM
    from jsspark.subjects import match_filter

    lake = lake or jsspark.connect(dest.location, dest.storage_options)
    if dest.stream is not None:
        cfg = lake.stream_info(dest.stream).config
        targets = [(dest.stream, cfg.subjects or [])]
    else:
        targets = []
        for rec in lake.catalog.list(STREAM):
            c = rec.body["config"]
            if c.get("mirror"):
                continue  # a mirror takes no publishes
            targets.append((rec.stream, c.get("subjects") or []))  # sources only: none
    out: dict[str, int] = {}
    headers = H.to_arrow([storable(_pairs(cell)) or None for cell in rows["headers"].to_pylist()])
    publish = pa.table({"subject": rows["subject"], "data": rows["data"], "headers": headers})
    for name, subjects in targets:
        mine = publish.filter(match_filter(rows["subject"], subjects))
        if not mine.num_rows:
            continue
        ack = lake.publish_batch(name, mine, txn=txn)
        out[name] = 0 if ack.replayed else int(ack.stored)
    return out


# -- the job -----------------------------------------------------------------------------------
@dataclass
class RepublishJob:
    """The ``foreachBatch`` function: one call per micro-batch, on the driver."""

    location: str
    stream: str
    republish: RePublish
    destination: ServerDestination | LakeDestination
    checkpoint: str
    mode: str = "at_most_once"
    storage_options: dict[str, str] | None = None
    carry: LastSequences = field(default_factory=LastSequences)
    stats: dict[str, int] = field(default_factory=lambda: {"batches": 0, "skipped": 0, "sent": 0, "duplicates": 0})
    _lake: Any = field(default=None, repr=False)
    _dest_lake: Any = field(default=None, repr=False)
    _started: StartedBatches | None = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lake"] = state["_dest_lake"] = None
        return state

    @property
    def lake(self) -> Any:
        if self._lake is None:
            import jsspark

            self._lake = jsspark.connect(self.location, self.storage_options)
        return self._lake

    @property
    def started(self) -> StartedBatches:
        if self._started is None:
            self._started = StartedBatches(self.checkpoint)
        return self._started

    @property
    def at_most_once(self) -> bool:
        return isinstance(self.destination, ServerDestination) and self.mode == "at_most_once"

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.at_most_once and self.started.started(batch_id):
            self.carry.reset()  # the batch's messages are not folded in: rebuild the carry
            self.stats["skipped"] += 1
            return
        table = df.select(*_READ_COLUMNS).toArrow()
        self.process(table, batch_id)

    def process(self, table: pa.Table, batch_id: int) -> pa.Table:
        """Republish one batch of stored rows (the Arrow form of the micro-batch)."""
        out = republish_batch(self.stream, self.republish, table, carry=self.carry,
                              lookup=lake_last_seqs(self.lake, self.stream))
        self.stats["batches"] += 1
        if not out.num_rows:
            return out
        dest = self.destination
        if isinstance(dest, LakeDestination):
            if self._dest_lake is None:
                import jsspark

                self._dest_lake = jsspark.connect(dest.location, dest.storage_options)
            counts = publish_to_lake(dest, out, txn=(query_app_id(self.checkpoint), batch_id), lake=self._dest_lake)
            self.stats["sent"] += sum(counts.values())
            return out
        # at most once: recorded once connected (an unreachable server fails the batch, which a
        # restart retries) and before the first publish (a replay must not send again)
        record = (lambda: self.started.record(batch_id)) if self.at_most_once else None
        try:
            sent, dups = asyncio.run(publish_to_server(dest, out, stream=self.stream,
                                                       acked=self.mode == "idempotent", on_connected=record))
        except (APIError, RuntimeError):
            raise
        except Exception as e:  # nats-py errors may echo a URL with credentials
            from jsspark.live.options import redact

            raise RuntimeError(redact(f"republish to {dest.conn!r}: {type(e).__name__}: {e}", dest.conn)) from None
        self.stats["sent"] += sent
        self.stats["duplicates"] += dups
        return out


def start_republish(
    spark: Any,
    *,
    location: str,
    stream: str,
    republish: RePublish | Mapping[str, Any] | None,
    destination: Mapping[str, Any],
    checkpoint: str,
    mode: str = "at_most_once",
    trigger: Mapping[str, Any] | None = None,
    storage_options: dict[str, str] | None = None,
    query_name: str | None = None,
    max_messages_per_trigger: int | None = DEFAULT_MAX_MESSAGES,
    reader_options: Mapping[str, str] | None = None,
    max_bytes_per_trigger: int | None = DEFAULT_MAX_BYTES,
) -> Any:
    """Start republishing lake stream ``stream`` at ``location``; returns the ``StreamingQuery``.

    ``republish``: a ``RePublish`` (or its JSON dict), or ``None`` for the stream's own config.
    It is validated against the stream's subjects first (``APIError`` with the server's text).
    ``destination``: see the module docstring. ``mode``: ``at_most_once`` or ``idempotent``
    (server destinations; a lake destination is exactly once). ``trigger``: keyword arguments of
    ``DataStreamWriter.trigger`` (``{"availableNow": True}``, ``{"processingTime": "5 seconds"}``).
    ``reader_options``: extra ``format("jetstream")`` options (e.g. ``deliver_policy``/
    ``opt_start_seq`` to begin later than the first message). ``storage_options`` are used by
    the engine's lookups; the Spark reader gets them as ``storage.*`` options.
    The query's ``foreachBatch`` function is reachable as ``query._jsspark_republish`` (counters
    in ``.stats``), for tests and monitoring.
    """
    import jsspark
    from jsspark.datasource.options import OptionError, prefixed_storage_options
    from jsspark.engine.files import place

    if mode not in MODES:
        raise OptionError(f"republish mode must be one of {MODES}, got {mode!r}")
    place(checkpoint)  # the job keeps its marks there: a place it cannot reach fails now, not at a batch
    lake = jsspark.connect(location, storage_options)
    config = lake.stream_info(stream).config
    if isinstance(republish, Mapping):
        republish = RePublish.model_validate(dict(republish))
    rp = check_republish(config, republish)
    if rp is None:
        raise OptionError(f"stream {stream} has no republish configured; pass republish={{src, dest}}")
    dest = parse_destination(destination, origin_location=location, origin_stream=stream,
                             storage_options=storage_options)
    job = RepublishJob(location, stream, rp, dest, checkpoint, mode, storage_options)

    reader = spark.readStream.format("jetstream").option("stream", stream).option("failOnDataLoss", "false")
    reader = reader.options(**prefixed_storage_options(storage_options))
    if getattr(config.retention, "value", config.retention) == "workqueue":
        # the server's rule for any pull consumer of a work queue; a non-durable reader never acks,
        # so nothing is removed on republish's account
        reader = reader.option("ack_policy", "explicit")
    if max_messages_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", str(int(max_messages_per_trigger)))
    if max_bytes_per_trigger:
        reader = reader.option("maxBytesPerTrigger", str(int(max_bytes_per_trigger)))
    flt = _reader_filter(rp.src, config)
    if flt is not None and not (reader_options and any(k.lower().startswith("filter") for k in reader_options)):
        reader = reader.option("filter_subject", flt)
    given = {k.lower() for k in reader_options or {}}
    after = lake.republish_after(stream) if republish is None else 0
    if after and not given & {"deliver_policy", "opt_start_seq", "opt_start_time"}:
        # the stream's own republish, set by an update: only what was stored since goes out
        reader = reader.option("deliver_policy", "by_start_sequence").option("opt_start_seq", str(after + 1))
    for k, v in (reader_options or {}).items():
        reader = reader.option(k, str(v))
    writer = reader.load(location).select(*_READ_COLUMNS).writeStream.foreachBatch(job)
    writer = writer.option("checkpointLocation", checkpoint)
    if trigger:
        writer = writer.trigger(**dict(trigger))
    if query_name:
        writer = writer.queryName(query_name)
    query = writer.start()
    query._jsspark_republish = job
    return query


__all__ = [
    "MODES",
    "CheckpointReadError",
    "LakeDestination",
    "RepublishJob",
    "ServerDestination",
    "StartedBatches",
    "check_republish",
    "parse_destination",
    "publish_to_lake",
    "publish_to_server",
    "start_republish",
]
