"""``format("jetstream")``: lake streams as a Spark batch and streaming source, and as a sink.

Where things run (Spark's Python data source runtime): ``schema``/``reader``/``partitions``
of a batch read in a short-lived planner process on the driver; the streaming calls
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``) in one long-lived driver
process that keeps this reader instance; ``read`` on executors, from a pickled copy that
sees only its ``InputPartition``. So planning state lives in ``Planner`` on the driver and
every partition carries what its task needs (``ReadPartition``).

Admission control follows Spark's Kafka source: ``maxMessagesPerTrigger`` /
``maxBytesPerTrigger`` become the default read limit, ``Trigger.AvailableNow`` reads up to
the stream's last sequence at query start, in bounded batches, and ``minMessagesPerTrigger`` /
``maxTriggerDelay`` hold a batch back until enough messages are there (``pacing``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from jsspark.datasource.pacing import TriggerPacing
from jsspark.datasource.partition import ReadPartition
from jsspark.datasource.redaction import scrubbed
from jsspark.datasource.schema import spark_schema

if TYPE_CHECKING:
    from jsspark.datasource.options import ReadOptions
    from jsspark.datasource.planning import Cursor, Planner

# Executors import this module to unpickle a reader and only call ``read``: option parsing
# and planning (config models, the engine's table code) are imported where they are used,
# on the driver, so a fresh Python worker starts reading sooner.

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _STREAM_BASES: tuple[type, ...] = (DataSourceStreamReader, SupportsTriggerAvailableNow)
    _NO_ADMISSION_CONTROL: str | None = None
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    _STREAM_BASES = (DataSourceStreamReader,)
    import pyspark

    _NO_ADMISSION_CONTROL = (
        f"jetstream: streaming reads need admission control for Python data sources "
        f"(pyspark.sql.streaming.datasource, Apache Spark 4.2 or later), which this Spark's pyspark "
        f"{pyspark.__version__} lacks: without it a batch cannot be planned from where the last one "
        "ended. Run on a Spark 4.2+ runtime; batch reads and the writers work here."
    )


def _require_admission_control() -> None:
    """A streaming read on an older Spark fails at start, saying why, instead of planning every
    batch from the first offset (Spark 4.0/4.1 call ``latestOffset()`` without a start)."""
    if _NO_ADMISSION_CONTROL is not None:  # pragma: no cover - Spark 4.0/4.1
        raise RuntimeError(_NO_ADMISSION_CONTROL)


def default_read_limit(max_messages: int | None, max_bytes: int | None) -> Any:
    """The read limit of ``maxMessagesPerTrigger`` / ``maxBytesPerTrigger`` (``read_limits``
    applies both), for both ``jetstream`` sources, lake and live."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

    if max_messages is not None:
        return ReadMaxRows(max_messages)
    if max_bytes is not None:
        return ReadMaxBytes(max_bytes)
    return ReadAllAvailable()


def read_limits(limit: Any, max_messages: int | None, max_bytes: int | None) -> tuple[int | None, int | None]:
    """(max rows, max bytes) for one batch under Spark's ``limit``; both options apply together,
    as a composite. ``ReadAllAvailable`` (``Trigger.Once``, which ignores read limits): neither."""
    kind = type(limit).__name__
    if kind == "ReadAllAvailable":
        return None, None
    if kind == "ReadMaxRows":
        return int(limit.max_rows), max_bytes
    if kind == "ReadMaxBytes":
        return max_messages, int(limit.max_bytes)
    return max_messages, max_bytes


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Batches of one partition; Spark turns an empty plan into ``InputPartition(None)``."""
    value = partition.value
    if value is None:
        return
    if not isinstance(value, ReadPartition):
        raise TypeError(f"jetstream source: unexpected partition of type {type(value).__name__}")
    from jsspark.datasource.reading import read_partition

    with scrubbed(value.storage_options):
        yield from read_partition(value)


def _executor_state(reader: Any) -> dict[str, Any]:
    """What a reader pickles for its tasks: nothing. Spark ships a reader to executors only
    to call ``read``, and each partition carries all its task needs; the options would make
    every fresh worker import the config models to unpickle them, and a planner holds an
    open ``DeltaTable``."""
    return {}


class JetStreamDataSource(DataSource):
    """The ``jetstream`` format over the lake streams at ``load(location)``/``save(location)``."""

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType | str:
        # Validate here: Spark calls schema() from load(), so bad options fail at load().
        if "servers" in self.options:  # a live JetStream server (jsspark.live)
            from jsspark.datasource.live_source import pin_snapshot

            # Spark reuses this instance for every action: a batch read's snapshot is fixed here.
            self._live_snapshot = pin_snapshot(self.options)
            from jsspark.datasource.options import parse_bool

            if parse_bool("spillReferences", self.options.get("spillReferences", "false")):
                from jsspark.live.spill import REFERENCE_DDL

                return REFERENCE_DDL  # by-reference rows for a landing sink (jobs)
            return spark_schema()
        from jsspark.datasource.options import parse_read_options

        parse_read_options(self.options)
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        if "servers" in self.options:  # a bounded snapshot of a live JetStream stream
            from jsspark.datasource.live_source import live_batch_reader

            return live_batch_reader(self.options, getattr(self, "_live_snapshot", None))
        from jsspark.datasource.options import parse_read_options

        return JetStreamBatchReader(parse_read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _require_admission_control()
        if "servers" in self.options:  # a live JetStream server (jsspark.live)
            from jsspark.datasource.live_source import live_stream_reader

            return live_stream_reader(self.options)
        from jsspark.datasource.options import parse_read_options

        return JetStreamStreamReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        if "servers" in self.options:  # publish to a live JetStream server (jsspark.live)
            from jsspark.live.publisher import live_writer

            return live_writer(self.options, streaming=False, columns=schema.fieldNames())
        from jsspark.datasource.options import parse_write_options
        from jsspark.sink.lake_sink import make_writer

        return make_writer(parse_write_options(self.options), overwrite, streaming=False)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        if "servers" in self.options:  # publish to a live JetStream server (jsspark.live)
            from jsspark.live.publisher import live_writer

            return live_writer(self.options, streaming=True, columns=schema.fieldNames())
        from jsspark.datasource.options import parse_write_options
        from jsspark.sink.lake_sink import make_writer

        return make_writer(parse_write_options(self.options), overwrite, streaming=True)


class JetStreamBatchReader(DataSourceReader):
    """A batch read: what a new consumer with these options would get, up to the stream's
    last message at planning time."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def __getstate__(self) -> dict[str, Any]:
        return _executor_state(self)

    def partitions(self) -> Sequence[InputPartition]:
        from jsspark.datasource.planning import Planner

        with scrubbed(self.opts.storage_options):
            planner = Planner(self.opts)
            return [InputPartition(p) for p in planner.partitions(planner.initial(), None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition)


class JetStreamStreamReader(*_STREAM_BASES):  # type: ignore[misc]
    """A streaming read with stream-sequence offsets (see ``planning``)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._target: int | None = None  # last sequence AvailableNow reads up to
        self._pacing = TriggerPacing(opts.max_trigger_delay)

    def __getstate__(self) -> dict[str, Any]:
        return _executor_state(self)

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            from jsspark.datasource.planning import Planner

            self._planner = Planner(self.opts)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        with scrubbed(self.opts.storage_options):
            return replace(self.planner.initial(bind=True), origin=self.planner.origin).to_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        with scrubbed(self.opts.storage_options):
            self._target = self.planner.latest_available()

    def getDefaultReadLimit(self) -> Any:
        return default_read_limit(self.opts.max_messages, self.opts.max_bytes)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The next batch's end. Spark calls this only once the batch ending at ``start`` is
        committed (commit log written), so a durable consumer is acked up to ``start`` here,
        and a reset of it (by any process) is noticed here: the batch then starts where the
        reset put the consumer and its end offset carries that start (``base``)."""
        with scrubbed(self.opts.storage_options):
            return self._latest(start, limit)

    def _latest(self, start: dict[str, Any] | None, limit: Any) -> dict[str, Any]:
        from jsspark.datasource.planning import Cursor

        base = None
        if start is None:
            cursor = self.planner.initial(bind=True)
        elif (fresh := self.planner.recreated(at := Cursor.from_offset(start))) is not None:
            if fresh is at:  # the stream is not there now (failOnDataLoss=false): no batch yet
                return start
            # the stream was deleted and created again: the batch starts on the new one (``base``)
            cursor, base = fresh, Cursor(fresh.seq, fresh.dseq, fresh.skip, fresh.resume)
        else:
            cursor, base = self.planner.on_planning(Cursor.from_offset(start))
        cursor = replace(cursor, origin=self.planner.origin)  # also on offsets written before origins were
        max_rows, max_bytes = read_limits(limit, self.opts.max_messages, self.opts.max_bytes)
        end = self.planner.latest(cursor, max_rows, max_bytes, self._target)
        if base is not None:
            end = replace(end, base=base)
        elif start is not None and self._held(cursor, end):
            return start  # not enough for a batch yet, and the last one was too recent: Spark asks again
        return end.to_offset()

    def _held(self, cur: Cursor, end: Cursor) -> bool:
        """``minMessagesPerTrigger``: fewer messages than that are there, and ``maxTriggerDelay``
        has not passed since the last batch (``TriggerPacing``). Never in an AvailableNow run,
        which must end, nor on the first batch after a reset (``base``), which must be planned."""
        if self.opts.min_messages is None or self._target is not None or end.seq <= cur.seq:
            return False
        # what ``latest`` planned counted every matching message after ``cur``: the batch and after it
        there = end.pending + end.dseq - cur.dseq if end.pending is not None else self.planner.available(cur)
        full = there >= self.opts.min_messages
        now = time.monotonic()
        if not self._pacing.due(now, full):
            return True
        self._pacing.went(now, full)
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if not self.opts.report_latest_offset:
            return None
        with scrubbed(self.opts.storage_options):
            return {"seq": self.planner.latest_available()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if start == end:
            return []
        from jsspark.datasource.planning import Cursor

        with scrubbed(self.opts.storage_options):
            parts = self.planner.partitions(Cursor.from_offset(start), Cursor.from_offset(end))
        return [InputPartition(p) for p in parts]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: a bound durable consumer is acked there.

        Spark calls this while planning the next batch, after ``latestOffset(end)`` already
        acked ``end``, and never for the last batch of an AvailableNow run. So this is only a
        second chance; acks come from ``latestOffset`` (also on restart) and from the
        ``jetstream`` sink right after its Delta commit. The checkpoint stays the truth.
        """
        from jsspark.datasource.planning import Cursor

        with scrubbed(self.opts.storage_options):
            self.planner.record_delivered(Cursor.from_offset(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition)
