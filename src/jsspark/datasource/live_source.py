"""``format("jetstream").option("servers", ...)``: a live JetStream server as a Spark source.

Streaming: the reader's driver process owns the connection and the consumer
(``jsspark.live.ingestor``, whose docstring has the full design: origin-seq offsets, acks only
for what Spark's checkpoint holds, spill files for executors, gap repair by consumer reset).
This module is the Spark glue: offsets are ``{"seq": <origin stream seq>, "origin": <key>}``;
``read()`` on executors only opens the spill files its partition names (on an object store with
the ``storage.<key>`` options the partition carries). Errors leave every method with the storage
secrets scrubbed (``datasource.redaction.scrubbed``), as the lake source's do.

Batch (``spark.read``): a bounded snapshot pinned at ``load()``, read by executors straight from
the server by stream-sequence ranges, with no consumer and no acks (``jsspark.live.snapshot``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from jsspark.datasource.options import OptionError
from jsspark.datasource.redaction import scrubbed
from jsspark.datasource.source import read_limits
from jsspark.live.options import LiveReadOptions, redact
from jsspark.live.snapshot import (
    Bounds,
    SnapshotError,
    SnapshotPartition,
    plan,
    read_snapshot,
    resolve_bounds,
)
from jsspark.live.spill import SpillPartition, read_spill, reference_batch

log = logging.getLogger(__name__)

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _STREAM_BASES: tuple[type, ...] = (DataSourceStreamReader, SupportsTriggerAvailableNow)
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    _STREAM_BASES = (DataSourceStreamReader,)


def _seq(offset: dict[str, Any] | None) -> int | None:
    return None if offset is None else int(offset["seq"])


async def _origin_last_seq(opts: LiveReadOptions) -> int:
    """The origin's last sequence now: what an AvailableNow run reads up to."""
    from jsspark.live.client import open_client
    from jsspark.live.consumer import stream_info

    nc = await open_client(opts.conn, opts.wait_timeout)
    try:
        info = await stream_info(nc, opts.conn, opts.stream)
        return int(info["state"]["last_seq"])
    finally:
        await nc.close()


class LiveStreamReader(*_STREAM_BASES):  # type: ignore[misc]
    """Streaming read of one origin stream through one consumer (see ``jsspark.live``)."""

    def __init__(self, opts: LiveReadOptions) -> None:
        self.opts = opts
        self._ingestor: Any = None
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ingestor"] = None  # a thread and a socket: executors only read spill files
        return state

    def _ing(self, start: dict[str, Any] | None) -> Any:
        """The started ingestor; a first start resumes above ``start`` (Spark's committed
        offset) on the origin stream it names (``Ingestor.start``)."""
        if self._ingestor is None:
            from jsspark.live.legacy import ingestor_for  # the fallback for servers before 2.14

            self._ingestor = ingestor_for(self.opts)
        if not self._ingestor.started:
            self._ingestor.start(_seq(start), None if start is None else start.get("origin"))
        return self._ingestor

    def _begin(self, start: dict[str, Any] | None) -> int | None:
        """``start``'s seq, if it is on the origin stream the reader reads now; after that
        stream was deleted and created again (``failOnDataLoss=false``: else the ingestor has
        failed), the new stream's start: an old stream's seq must never be taken as committed
        on the new one (it would skip and ack the new stream's first messages)."""
        from jsspark.live.ingestor import same_stream

        if start is None:
            return None
        ing = self._ing(start)
        return int(start["seq"]) if same_stream(start.get("origin"), ing.origin) else ing.floor

    def _offset(self, seq: int) -> dict[str, Any]:
        """An offset: the origin seq, and the origin key a sink keeps its per-origin mark by
        (``Ingestor.origin``), as the lake source's offsets carry theirs."""
        return {"seq": int(seq), "origin": self._ingestor.origin}

    def initialOffset(self) -> dict[str, Any]:
        with scrubbed(self.opts.storage_options):
            return self._offset(self._ing(None).floor)

    def prepareForTriggerAvailableNow(self) -> None:
        try:
            self._target = asyncio.run(_origin_last_seq(self.opts))
        except Exception as e:
            raise RuntimeError(redact(f"jetstream (live): stream info for {self.opts.stream!r}: {e}",
                                      self.opts.conn)) from None

    def getDefaultReadLimit(self) -> Any:
        """``maxMessagesPerTrigger`` and ``maxBytesPerTrigger`` (64 MiB by default), as the lake
        source's; under ``Trigger.Once`` (Spark ignores read limits) only ``maxAckPending`` bounds a batch."""
        from jsspark.datasource.source import default_read_limit

        return default_read_limit(self.opts.max_messages, self.opts.max_bytes)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        with scrubbed(self.opts.storage_options):
            ing = self._ing(start)
            begin = self._begin(start)
            if begin is None:
                begin = ing.floor
            max_rows, max_bytes = read_limits(limit, self.opts.max_messages, self.opts.max_bytes)
            return self._offset(ing.latest(begin, max_rows, self._target, max_bytes))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """With ``reportLatestOffset``: the origin's last seq and the consumer's ``num_pending``
        in the query progress (``sources[].latestOffset``), as the lake source reports its last seq."""
        if not self.opts.report_latest_offset or self._ingestor is None or not self._ingestor.started:
            return None
        try:
            return self._ingestor.origin_position()
        except Exception as e:  # progress only: never fail the query for it
            log.warning("jetstream (live): no latest offset for the progress: %s",
                        redact(f"{type(e).__name__}: {e}", self.opts.conn))
            return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        from jsspark.live.ingestor import same_stream

        with scrubbed(self.opts.storage_options):
            ing = self._ing(start)
            lo, hi = self._begin(start), int(end["seq"])
            if not same_stream(end.get("origin"), ing.origin):
                return []  # planned on a stream since deleted (failOnDataLoss=false): its rows are gone
            if lo >= hi:
                return []
            return [InputPartition(p) for p in ing.plan(lo, hi, by_reference=self.opts.spill_references)]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed up to ``end`` (one batch late): acks may now cover it."""
        from jsspark.live.ingestor import same_stream

        if self._ingestor is not None and self._ingestor.started and same_stream(end.get("origin"),
                                                                                  self._ingestor.origin):
            with scrubbed(self.opts.storage_options):
                self._ingestor.commit(int(end["seq"]))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        value = partition.value
        if value is None:
            return
        if not isinstance(value, SpillPartition):
            raise TypeError(f"jetstream (live): unexpected partition {partition!r}")
        if self.opts.spill_references:
            yield reference_batch(value)  # the driver-side landing commit reads the files
            return
        with scrubbed(value.storage_options):
            yield from read_spill(value)

    def stop(self) -> None:
        if self._ingestor is not None:
            with scrubbed(self.opts.storage_options):
                self._ingestor.stop()


def _bounds(opts: LiveReadOptions) -> Bounds:
    try:
        return asyncio.run(resolve_bounds(opts))
    except SnapshotError:
        raise
    except Exception as e:
        from jsspark.errors import APIError

        what = str(e) if isinstance(e, APIError) else f"{type(e).__name__}: {e}"  # an APIError's text names its class
        raise SnapshotError(redact(f"jetstream (live): batch read of stream {opts.stream!r}: {what}",
                                   opts.conn)) from None


def pin_snapshot(options: Any) -> Bounds | None:
    """At ``load()`` (``DataSource.schema``): validate the options, and fix what a batch read
    of this DataFrame returns. ``None`` if the server cannot say now (a streaming query does not
    need it; a batch read then resolves the bounds at its first action and fails there)."""
    opts = live_stream_reader(options).opts
    try:
        return _bounds(opts)
    except Exception:
        return None


class LiveBatchReader(DataSourceReader):
    """``spark.read``: the snapshot ``bounds`` (pinned at ``load()``) in sequence-range partitions."""

    def __init__(self, opts: LiveReadOptions, bounds: Bounds | None) -> None:
        if opts.mode == "user":
            raise OptionError("jetstream (live): consumerMode user binds a durable, which a batch read does not "
                              "(it creates no consumer); give deliverPolicy/filterSubject(s) instead")
        self.opts = opts
        self.bounds = bounds

    def partitions(self) -> Sequence[InputPartition]:
        bounds = self.bounds if self.bounds is not None else _bounds(self.opts)
        return [InputPartition(p) for p in plan(self.opts, bounds)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        value = partition.value
        if value is None:
            return
        if not isinstance(value, SnapshotPartition):
            raise TypeError(f"jetstream (live): unexpected partition {partition!r}")
        yield from read_snapshot(value)


def live_batch_reader(options: Any, bounds: Bounds | None) -> LiveBatchReader:
    """The dispatch target of ``JetStreamDataSource.reader`` when ``servers`` is set."""
    from jsspark.live.options import parse_live_read_options

    return LiveBatchReader(parse_live_read_options(options), bounds)


def live_stream_reader(options: Any) -> LiveStreamReader:
    """The dispatch target of ``JetStreamDataSource.streamReader`` when ``servers`` is set."""
    from jsspark.live.options import parse_live_read_options

    return LiveStreamReader(parse_live_read_options(options))
