"""Spark writers into a lake stream: one publish (or landing) per batch, exactly once for streaming.

Rows (``subject``, optional ``data`` and ``headers`` of a type in ``headers.COLUMN_TYPES``,
read by field name; other columns are ignored) go through the engine's publish semantics
(routing check, dedup by ``Nats-Msg-Id``, expectations, limits), so a DataFrame publish
behaves like a batch of ``js.publish`` calls.

Why the publish happens on the driver: a JetStream publish assigns sequences, which must be
one serialised commit per batch. Executors only normalise their rows and hand them back as
Arrow IPC in the commit message (or, when large, as a staging Parquet file under
``<location>/_staging/``); the driver's ``commit`` does the single ``publish_batch``. Both
reach an object store with the sink's ``storage.*`` options (``WriteOptions.storage_options``).

Exactly once (streaming): the commit carries a Delta ``txn`` ``(app id, batchId)`` in the
same Delta commit as the messages, and a batch whose id the stream already holds for that
app id is skipped, so a micro-batch Spark replays after a crash is not stored twice. The app
id is the query's persistent id from ``<checkpointLocation>/metadata`` (a new checkpoint is
a new query, whose batch ids restart at 0), or ``txnAppId`` when given.

At most once per origin message (``dedupByOrigin``, on by default): when the rows carry the
``jetstream`` source's ``stream`` and ``seq`` columns, the target keeps a high-water mark per
origin, the Delta ``txn`` ``("jsspark.origin.<key>", <highest origin seq stored>)``, written in
the same Delta commit as the messages; rows at or below it are dropped before the publish.
An origin is a stream table (its Delta table id: another lake's stream of the same name, or
the stream deleted and created again, is another origin), or a stream on a server (told apart
the same way by its creation time, ``Ingestor.origin``), read by one consumer (a durable's
name; a non-durable query's filters), so two queries into one target keep their own marks.
A streaming sink learns the origins from the sources' offsets of the batch
(``<checkpointLocation>/offsets/<batchId>``, ``planning.Origin``) and matches rows to them by
``stream`` (and ``consumer`` when two sources read streams of the same name); a batch may
hold rows of several origins, each keeps its mark in the one commit. Rows whose origin is
not known that way (another source) are marked per stream name (``jsspark.origin.<stream>``).
So a durable source reset back (``Lake.reset_consumer``) re-delivers without
duplicating what the target holds, a replayed micro-batch stores nothing twice, and a new
checkpoint on the same durable continues cleanly. Why a high-water mark and not a
``Nats-Msg-Id`` per origin message: it is exact however far back a reset goes (a dedup
window expires), costs one number instead of an id per message, and allows several output
rows per origin message. It is what the server's sourcing keeps (the last origin sequence
received); like it, messages skipped by a reset ahead and then reached by a reset back are
below the mark and are not stored. The mark holds back only what the batch read: a row of an
origin message an earlier batch read (at or below where the batch's reading began: the
previous batch's offset, or a reset's ``base``), which a stateful query (a stream-stream join)
emits only now, is stored whatever the mark, with the batch's ``txn`` against a replay.

A batch write (``df.write``) stores every row it is given (only ``Nats-Msg-Id`` dedups), and
reads and moves no mark. It has no source offsets to name its origins, nor a batch id to
replay, so a mark would be keyed by the stream's name alone and would silently drop the rows of
a later batch write at or below it that were never stored (another filter of the same origin,
a backfill of older messages); and which origin messages a batch write stored cannot be told
from the target's messages. A copy that can be run again without duplicates is a
``writeStream`` with a checkpoint and ``trigger(availableNow=True)``.

Landing forms (``form``): ``mirror`` or ``source`` store rows of the live NATS source (columns
``stream``, ``seq``, ``ts_ns``, ``subject``, ``headers``, ``data``) the way a mirror or a sourcing
stream stores its origin's messages, through ``jsspark.live.landing.land_batch`` (the same code
``foreachBatch`` landing uses): mirror keeps the origin sequence and nanosecond time, source
assigns new sequences and adds ``Nats-Stream-Source``. The micro-batch's ``(app id, batchId)``
txn is written in the landing's Delta commit, so a replayed batch is skipped as for a publish.
``dedupByOrigin`` does not apply: a mirror's last sequence already is its origin high-water
mark (a batch at or below it fails as a sequence regression rather than storing twice).

Acks (``ackSource``, on by default): once its Delta commit succeeded, a streaming sink reads
the batch's source offsets from ``<checkpointLocation>/offsets/<batchId>`` (Spark writes them
before the batch runs) and acks each durable ``jetstream`` source up to the batch's end, in
the offset's reset generation. Never earlier: the ack follows the commit, in this process.
The source's own acks (next ``latestOffset``, restart) cover sinks that are not this one.
A live source's rows landed by reference are acked the same way, through the reader's spill
directory (``spill.mark_landed``, ``live.ingestor``).
"""

from __future__ import annotations

import hashlib
import io
import json
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from jsspark.datasource.options import OptionError, WriteOptions
from jsspark.datasource.redaction import redact_storage, scrubbed
from jsspark.engine import headers as H
from jsspark.engine.api import BatchAck
from jsspark.engine.arrays import data_column, subject_column
from jsspark.engine.files import place_filesystem, under
from jsspark.live.spill import is_reference, mark_landed, read_references, referenced_rows

SINK_SCHEMA = pa.schema(
    [pa.field("subject", pa.string()), pa.field("data", pa.binary()), pa.field("headers", H.HEADER_TYPE)]
)
# What a task hands the driver: the publishable columns and each row's origin message, if any.
TASK_SCHEMA = pa.schema(
    [
        *SINK_SCHEMA,
        pa.field("origin_stream", pa.string()),
        pa.field("origin_seq", pa.int64()),
        # the source's consumer column: "" for a non-durable read, null when the rows lack the column
        pa.field("origin_consumer", pa.string()),
    ]
)
# What a task hands the driver with ``form`` set: the origin message as the live source emits it.
FORM_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("ts_ns", pa.int64()),
        pa.field("subject", pa.string()),
        pa.field("headers", H.HEADER_TYPE),
        pa.field("data", pa.binary()),
        pa.field("num_pending", pa.int64()),
    ]
)
ORIGIN_APP_PREFIX = "jsspark.origin."
# Above this many bytes a task stages its rows as Parquet instead of returning them inline.
INLINE_LIMIT_BYTES = 16 * 1024 * 1024
APP_ID_PREFIX = "jsspark.sink."


# -- rows --------------------------------------------------------------------------------------
def normalize(batch: pa.RecordBatch | pa.Table, origin: bool = True) -> pa.Table:
    """The publishable columns of a Spark batch, typed as the engine stores them, and (with
    ``origin``) each row's origin message from the source's ``stream``/``seq`` columns."""
    names = batch.schema.names
    if "subject" not in names:
        raise ValueError(f"writing to a lake stream needs a 'subject' column; got columns {names}")
    n = batch.num_rows
    subject, data, headers = subject_column(batch, "jetstream sink"), data_column(batch), H.headers_column(batch)
    if origin and "stream" in names and "seq" in names:
        o_stream, o_seq = batch.column("stream").cast(pa.string()), batch.column("seq").cast(pa.int64())
    else:
        o_stream, o_seq = pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())
    if origin and "consumer" in names:
        o_consumer = pc.fill_null(batch.column("consumer").cast(pa.string()), "")
    else:
        o_consumer = pa.nulls(n, pa.string())
    return pa.Table.from_arrays([subject, data, headers, o_stream, o_seq, o_consumer], schema=TASK_SCHEMA)


def normalize_origin(batch: pa.RecordBatch | pa.Table, form: str) -> pa.Table:
    """The origin-message columns a landing form needs, typed as ``engine.ingest`` reads them.
    Every column is required: without the origin's ``seq``/``ts_ns``/``stream`` a mirror or a
    ``Nats-Stream-Source`` header would be invented, not kept."""
    names = batch.schema.names
    missing = [f.name for f in FORM_SCHEMA if f.name not in names and f.name not in ("headers", "data", "num_pending")]
    if missing:
        raise ValueError(
            f"jetstream sink option form={form!r} needs the live source's columns {FORM_SCHEMA.names}; "
            f"missing {missing} (got {names})"
        )
    n = batch.num_rows
    subject, data, headers = subject_column(batch, "jetstream sink"), data_column(batch), H.headers_column(batch)
    return pa.Table.from_arrays(
        [
            batch.column("stream").cast(pa.string()),
            batch.column("seq").cast(pa.int64()),
            batch.column("ts_ns").cast(pa.int64()),
            subject,
            headers,
            data,
            batch.column("num_pending").cast(pa.int64()) if "num_pending" in names else pa.nulls(n, pa.int64()),
        ],
        schema=FORM_SCHEMA,
    )


def landing_frame(df: Any) -> Any:
    """``df`` narrowed to the columns a landing ``form`` reads (``FORM_SCHEMA``), with
    ``headers`` never null (an empty list, which is stored as no headers, exactly as null is).

    Why: Spark hands a Python writer its rows as Arrow batches and, after every row, asks the
    batch for its size (``spark.sql.execution.arrow.maxBytesPerBatch``); for a list column
    whose last values are null, Arrow Java's ``ListVector.setValueCount`` re-fills every null
    slot since the last non-null one on each call, so a batch of header-less messages costs
    O(rows²) in the JVM (300,000 rows: 6.9 s instead of 0.8 s). Dropping the columns no form
    reads saves their conversion as well."""
    from pyspark.sql import functions as F

    cols = []
    for name in FORM_SCHEMA.names:
        if name not in df.columns:
            continue
        if name == "headers":
            empty = F.array().cast(df.schema["headers"].dataType)
            cols.append(F.coalesce(F.col("headers"), empty).alias("headers"))
        else:
            cols.append(F.col(name))
    return df.select(*cols)


# -- task output -------------------------------------------------------------------------------
@dataclass
class LakeSinkMessage(WriterCommitMessage):
    """One task's rows: inline Arrow IPC, or the path of a staged Parquet file."""

    rows: int
    ipc: bytes | None = None
    path: str | None = None
    spill: tuple[str, ...] = ()  # by-reference rows: the live source's spill partitions (JSON)


def staging_dir(location: str, tag: str) -> str:
    return f"{location.rstrip('/')}/_staging/{tag}"


def collect_task(
    batches: Iterable[pa.RecordBatch], location: str, tag: str, inline_limit: int = INLINE_LIMIT_BYTES,
    origin: bool = True, form: str | None = None, storage_options: dict[str, str] | None = None,
) -> LakeSinkMessage:
    """Normalise a task's rows and package them for the driver's commit (the origin-message
    columns when a landing ``form`` is set, else the publishable ones). Rows staged as Parquet
    go under ``<location>/_staging/<tag>/`` (``path``: on ``place_filesystem(location)``)."""
    schema = FORM_SCHEMA if form else TASK_SCHEMA
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return LakeSinkMessage(0)
    if is_reference(first.schema):
        if not form:
            raise ValueError("rows by spill reference (option spillReferences) land only with the sink option form")
        return _references([first, *batches])
    tables = [normalize_origin(b, form) if form else normalize(b, origin) for b in (first, *batches)]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    if table.nbytes <= inline_limit:
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, schema) as w:
            w.write_table(table)
        return LakeSinkMessage(table.num_rows, ipc=sink.getvalue())
    with scrubbed(storage_options):
        filesystem, root = place_filesystem(location, storage_options)
        folder = under(root, f"_staging/{tag}")
        filesystem.create_dir(folder, recursive=True)
        path = f"{folder}/{_task_name()}.parquet"
        pq.write_table(table, path, filesystem=filesystem)
    return LakeSinkMessage(table.num_rows, path=path)


def _references(batches: list[pa.RecordBatch]) -> LakeSinkMessage:
    """A task's by-reference rows: which spill partitions hold its messages, and how many.
    The rows are either all of them (one per message) or only those carrying a reference (the
    job filters the others out before the sink); either way the count is the references' own."""
    refs = [r for b in batches for r in pc.drop_null(b.column("spill")).to_pylist()]
    rows = sum(referenced_rows(r) for r in refs)
    given = sum(b.num_rows for b in batches)
    if given not in (rows, len(refs)):
        raise ValueError(f"rows by spill reference: {given} rows for {len(refs)} references to {rows} messages")
    return LakeSinkMessage(rows, spill=tuple(refs))


def _task_name() -> str:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:
        ctx = None
    prefix = f"{ctx.stageId()}-{ctx.partitionId()}-{ctx.attemptNumber()}-" if ctx is not None else ""
    return f"{prefix}{uuid.uuid4().hex}"


def load_messages(
    messages: Iterable[WriterCommitMessage | None], location: str, schema: pa.Schema = TASK_SCHEMA,
    storage_options: dict[str, str] | None = None, form: str | None = None,
) -> pa.Table:
    """All tasks' rows in task order (``schema``: what the tasks wrote, for an empty batch); a
    task's by-reference rows are read here, from the spill files (``form``: the landing form)."""
    tables = []
    for m in messages:
        if not isinstance(m, LakeSinkMessage) or not m.rows:
            continue
        if m.spill:
            if not form:
                raise ValueError("rows by spill reference land only with the sink option form")
            tables += [normalize_origin(b, form) for b in read_references(list(m.spill), m.rows, storage_options)]
        elif m.ipc is not None:
            tables.append(pa.ipc.open_stream(m.ipc).read_all())
        elif m.path is not None:
            filesystem, _ = place_filesystem(location, storage_options)
            tables.append(pq.read_table(m.path, filesystem=filesystem))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def remove_staged(
    messages: Iterable[WriterCommitMessage | None], location: str, storage_options: dict[str, str] | None = None
) -> None:
    filesystem, _ = place_filesystem(location, storage_options)
    for m in messages:
        if isinstance(m, LakeSinkMessage) and m.path is not None:
            try:
                filesystem.delete_file(m.path)
            except FileNotFoundError:
                continue


# -- publishing --------------------------------------------------------------------------------
def origin_app_id(key: str) -> str:
    """The Delta txn app id of an origin's high-water mark (``key``: ``Origin.key``, or a stream
    name for rows of an origin the sink cannot identify)."""
    return ORIGIN_APP_PREFIX + key


def origin_keys(table: pa.Table, origins: Iterable[str] = ()) -> pa.Array:
    """Each row's origin key: the one of its stream among the batch's source offsets
    (``planning.Origin`` keys), told apart by the rows' consumer when several sources read
    streams of one name; the stream name when no source offset names it."""
    from jsspark.datasource.planning import Origin

    by_stream: dict[str, list[Origin]] = {}
    for o in map(Origin.parse, origins):
        by_stream.setdefault(o.stream, []).append(o)
    pairs = table.select(["origin_stream", "origin_consumer"]).group_by(
        ["origin_stream", "origin_consumer"], use_threads=False).aggregate([])
    keys: dict[tuple[str, str | None], str] = {}
    for stream, consumer in zip(pairs["origin_stream"].to_pylist(), pairs["origin_consumer"].to_pylist(), strict=True):
        found = by_stream.get(stream, [])
        if len(found) > 1 and consumer is not None:
            found = [o for o in found if (o.consumer or "") == consumer]
        if len(found) > 1:
            raise ValueError(
                f"jetstream sink: rows of origin stream {stream} come from {len(found)} jetstream sources of this "
                "query and cannot be told apart for their origin marks; read each with its own durable_name and "
                "keep the 'consumer' column, or set option dedupByOrigin=false"
            )
        keys[(stream, consumer)] = found[0].key if found else stream
    if len(keys) == 1:
        return pa.repeat(pa.scalar(next(iter(keys.values())), pa.string()), table.num_rows)
    return pa.array(
        [keys[(s, c)] for s, c in zip(table["origin_stream"].to_pylist(), table["origin_consumer"].to_pylist(), strict=True)],
        pa.string(),
    )


def batch_starts(offsets: Sequence[dict[str, Any]], previous: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Per origin key, the origin seq a batch's reading of it started after: its offset's
    ``base`` (the first batch after a reset), else the previous batch's offset of that origin.
    An origin with neither (a query's first batch) is left out."""
    before = {o["origin"]: int(o["seq"]) for o in previous if isinstance(o.get("origin"), str) and "seq" in o}
    out = {}
    for o in offsets:
        key, base = o.get("origin"), o.get("base")
        if not isinstance(key, str):
            continue
        if isinstance(base, dict) and "seq" in base:
            out[key] = int(base["seq"])
        elif key in before:
            out[key] = before[key]
    return out


def publish(
    opts: WriteOptions, table: pa.Table, txn: tuple[str, int] | None = None, origins: Iterable[str] = (),
    starts: Mapping[str, int] | None = None,
) -> BatchAck | None:
    """One ``publish_batch`` (one Delta commit): deduplicated by origin when the rows carry
    one (the origins' marks are then the commit's txns; ``origins``: the ``origin`` keys of
    the batch's source offsets), else idempotent per ``txn`` when given.

    ``starts`` (``batch_starts``): where the batch's reading of each origin began. A row of an
    origin message at or below it was read by an earlier batch and comes out only now (a
    stream-stream join matched it late, say): it is no redelivery, so it is stored whatever
    the mark, and the batch's ``txn`` joins the commit to keep a replay of it out.
    ``None``: every row was already stored (nothing committed)."""
    if not table.num_rows:  # an empty micro-batch (e.g. right after a reset): nothing to store or replay
        return None
    lake = commit_lake(opts.location, opts.storage_options)
    if not opts.dedup_by_origin or "origin_stream" not in table.column_names:
        return lake.publish_batch(opts.stream, table.select(SINK_SCHEMA.names), txn=txn)
    # a row names its origin message with both columns: a null seq compares to no mark
    carried = pc.and_(pc.is_valid(table.column("origin_stream")), pc.is_valid(table.column("origin_seq")))
    count = pc.sum(carried).as_py() or 0
    if not count:
        return lake.publish_batch(opts.stream, table.select(SINK_SCHEMA.names), txn=txn)
    if count < table.num_rows:
        raise ValueError(
            f"jetstream sink: {count} of {table.num_rows} rows carry an origin message (non-null columns 'stream' "
            "and 'seq') and the others do not; drop those columns or set option dedupByOrigin=false"
        )
    if "origin_consumer" not in table.column_names:
        table = table.append_column("origin_consumer", pa.nulls(table.num_rows, pa.string()))
    keys = origin_keys(table, origins)
    target = lake.stream(opts.stream).table.snapshot().table
    marks = {k: target.transaction_version(origin_app_id(k)) or 0 for k in pc.unique(keys).to_pylist()}
    where = pc.index_in(keys, pa.array(list(marks), pa.string()))
    mark_of = pc.take(pa.array(list(marks.values()), pa.int64()), where)
    start_of = pc.take(pa.array([(starts or {}).get(k, 0) for k in marks], pa.int64()), where)
    seqs = table.column("origin_seq")
    late = pc.less_equal(seqs, start_of)
    table = table.append_column("origin_key", keys).append_column("late", late)
    fresh = table.filter(pc.or_(pc.greater(seqs, mark_of), late))
    if not fresh.num_rows:
        return None
    fresh = fresh.sort_by([("origin_seq", "ascending")])  # each origin's order, however Spark partitioned
    tops = fresh.filter(pc.invert(fresh.column("late"))).group_by("origin_key", use_threads=False).aggregate(
        [("origin_seq", "max")])
    txns = sorted((origin_app_id(k), max(int(v), marks[k])) for k, v in zip(
        tops["origin_key"].to_pylist(), tops["origin_seq_max"].to_pylist(), strict=True))
    if txn is not None and pc.any(fresh.column("late")).as_py():
        txns.append(txn)
    return lake.publish_batch(opts.stream, fresh.select(SINK_SCHEMA.names), txn=txns[0] if len(txns) == 1 else txns)


def land(opts: WriteOptions, table: pa.Table, txn: tuple[str, int] | None = None) -> BatchAck | None:
    """One landing commit in ``opts.form`` via ``land_batch`` (the single implementation, shared
    with ``foreachBatch`` landing), idempotent per ``txn``. ``None``: an empty batch (nothing
    to store; a replay of it stores nothing either)."""
    from jsspark.live.landing import land_batch

    if not table.num_rows:
        return None
    assert opts.form is not None
    origin = json.loads(opts.origin) if opts.origin else None
    return land_batch(commit_lake(opts.location, opts.storage_options), opts.stream, table, form=opts.form, txn=txn,
                      origin=origin, identity=opts.origin_identity)


# The driver-side commits run in a Python worker that Spark reuses from batch to batch. A lake
# kept there keeps each stream's in-memory index, which a commit advances to its own version,
# so the next batch's commit does not load the index snapshot and the data files since (a fifth
# of the commit's time in the ingest bench, on a stream of 1.5M messages). Nothing goes stale: ``Lake.stream`` reads the
# catalog on every call, and a stream's index is reloaded whenever its Delta version is not the
# one it was advanced to (another writer committed).
_COMMIT_LAKES: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_COMMIT_LAKES_KEPT = 4


def commit_lake(location: str, storage_options: dict[str, str] | None) -> Any:
    """The lake at ``location`` for a driver-side commit, kept for the next one (see above)."""
    import jsspark

    key = (location.rstrip("/"), tuple(sorted((storage_options or {}).items())))
    lake = _COMMIT_LAKES.pop(key, None)
    if lake is None:
        lake = jsspark.connect(location, storage_options)
    _COMMIT_LAKES[key] = lake  # the most recently used last
    while len(_COMMIT_LAKES) > _COMMIT_LAKES_KEPT:
        del _COMMIT_LAKES[next(iter(_COMMIT_LAKES))]
    return lake


def store(
    opts: WriteOptions, messages: list[WriterCommitMessage | None], txn: tuple[str, int] | None,
    offsets: Sequence[dict[str, Any]] = (),
) -> None:
    """The driver's commit of a batch: land it when a ``form`` is set, else publish it
    (``offsets``: the batch's source offsets, which name the lake sources' origins)."""
    with scrubbed(opts.storage_options):
        if opts.form:
            land(opts, load_messages(messages, opts.location, FORM_SCHEMA, opts.storage_options, opts.form), txn)
        else:
            origins = [o["origin"] for o in offsets if isinstance(o.get("origin"), str)]
            previous = source_offsets(opts, txn[1] - 1) if origins and txn is not None and txn[1] > 0 else []
            publish(opts, load_messages(messages, opts.location, TASK_SCHEMA, opts.storage_options), txn, origins,
                    batch_starts(offsets, previous))


def _checkpoint_fs(opts: WriteOptions) -> tuple[Any, str]:
    """The checkpoint's filesystem: with the lake's storage options when it lies on the same
    kind of store (an ``s3://`` checkpoint next to an ``s3://`` lake), else the environment's."""
    assert opts.checkpoint_location is not None
    ck = opts.checkpoint_location
    same = "://" in ck and ck.split("://", 1)[0] == opts.location.split("://", 1)[0]
    return place_filesystem(ck, opts.storage_options if same else None)


def source_offsets(checkpoint_location: str | WriteOptions, batch_id: int) -> list[dict[str, Any]]:
    """The source offsets Spark logged for ``batch_id`` (``offsets/<id>``: a version line, a
    metadata line, then one JSON offset per source); ``checkpoint_location`` or a sink's options."""
    if isinstance(checkpoint_location, WriteOptions):
        filesystem, root = _checkpoint_fs(checkpoint_location)
    else:
        filesystem, root = place_filesystem(checkpoint_location)
    try:
        with filesystem.open_input_stream(under(root, f"offsets/{batch_id}")) as f:
            lines = f.read().decode().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines[2:]:
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def ack_sources(opts: WriteOptions, batch_id: int, offsets: Sequence[dict[str, Any]] | None = None) -> int:
    """Ack the durable ``jetstream`` sources of a committed batch up to its end offsets (read
    from the checkpoint unless given); returns how many were acked. Call only after the batch's
    Delta commit succeeded."""
    if not opts.ack_source or not opts.checkpoint_location:
        return 0
    import jsspark
    from jsspark.datasource.planning import Cursor, settle
    from jsspark.errors import APIError

    acked = 0
    for offset in source_offsets(opts, batch_id) if offsets is None else offsets:
        if "durable" not in offset or "gen" not in offset or "seq" not in offset:
            continue
        cur = Cursor.from_offset(offset)
        assert cur.durable is not None
        # the sink's storage options reach the source's lake when it is the same lake; any other
        # lake is reached with the environment's credentials or acked by the source itself
        same = cur.durable.location.rstrip("/") == opts.location.rstrip("/")
        try:
            settle(jsspark.connect(cur.durable.location, opts.storage_options if same else None), cur)
        except (APIError, OSError) as e:  # deleted consumer, unreachable lake: the data is committed
            # anyway, and the source acks it when it plans its next batch
            text = redact_storage(str(e), opts.storage_options)
            warnings.warn(f"jetstream sink: could not ack {cur.durable.stream}/{cur.durable.name}: {text}",
                          stacklevel=2)
            continue
        acked += 1
    return acked


def query_app_id(opts: WriteOptions) -> str:
    """The txn app id of a streaming query (see the module docstring)."""
    if opts.txn_app_id:
        return opts.txn_app_id
    if not opts.checkpoint_location:
        raise OptionError(
            "writeStream into a lake stream needs option 'checkpointLocation' (its query id makes the "
            "writes exactly once) or an explicit 'txnAppId'"
        )
    filesystem, root = _checkpoint_fs(opts)
    try:
        with filesystem.open_input_stream(under(root, "metadata")) as f:
            query_id = json.loads(f.read().decode().splitlines()[0])["id"]
    except FileNotFoundError:
        # Spark writes the metadata before the first batch; without it the path is the identity.
        digest = hashlib.sha256(opts.checkpoint_location.encode()).hexdigest()[:32]
        return f"{APP_ID_PREFIX}checkpoint-{digest}"
    return f"{APP_ID_PREFIX}{query_id}"


def _tag(opts: WriteOptions) -> str:
    """A staging sub-directory per query (or per batch write) that needs no driver state."""
    key = opts.txn_app_id or opts.checkpoint_location or ""
    return hashlib.sha256(key.encode()).hexdigest()[:16] if key else f"batch-{uuid.uuid4().hex[:16]}"


class LakeBatchWriter(DataSourceArrowWriter):
    """``df.write.format("jetstream").mode("append")``: all rows in one atomic publish, not
    deduplicated by origin (see the module docstring)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.tag = _tag(opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LakeSinkMessage:
        return collect_task(iterator, self.opts.location, self.tag, origin=False,
                            form=self.opts.form, storage_options=self.opts.storage_options)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            store(self.opts, messages, None)
        finally:
            remove_staged(messages, self.opts.location, self.opts.storage_options)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        remove_staged(messages, self.opts.location, self.opts.storage_options)


class LakeStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("jetstream")``: one publish per micro-batch, exactly once."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.tag = _tag(opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LakeSinkMessage:
        return collect_task(iterator, self.opts.location, self.tag, origin=self.opts.dedup_by_origin,
                            form=self.opts.form, storage_options=self.opts.storage_options)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with scrubbed(self.opts.storage_options):
            offsets = source_offsets(self.opts, batchId) if self.opts.checkpoint_location else []
            try:
                store(self.opts, messages, (query_app_id(self.opts), batchId), offsets)
            finally:
                remove_staged(messages, self.opts.location, self.opts.storage_options)
        # only reached once the publish above committed
        ack_sources(self.opts, batchId, offsets)
        if self.opts.ack_source:  # a live source reading by reference acks these rows now
            mark_landed(ref for m in messages if isinstance(m, LakeSinkMessage) and m.spill for ref in m.spill)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        remove_staged(messages, self.opts.location, self.opts.storage_options)


def make_writer(opts: WriteOptions, overwrite: bool, streaming: bool) -> LakeBatchWriter | LakeStreamWriter:
    if overwrite:
        raise OptionError("lake streams are append-only: use mode('append') (or outputMode('append'))")
    if streaming:
        if not (opts.txn_app_id or opts.checkpoint_location):
            query_app_id(opts)  # raises: fail at start, not at the first commit
        return LakeStreamWriter(opts)
    return LakeBatchWriter(opts)
