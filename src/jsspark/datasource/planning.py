"""Driver-side planning for the ``jetstream`` source: start positions, offsets, admission
control, data-loss checks and the split of a batch into sequence-range partitions.

A source offset is a cursor in the stream, not a counter: ``{"seq": S, "dseq": D}`` says the
consumer has delivered every wanted message up to stream sequence ``S``, ``D`` of them in all.
Stored messages never change and new ones always get higher sequences, so the messages of a
range ``(S1, S2]`` can only *shrink* later (purge, delete, limits): a replanned or retried
batch reads exactly the same messages, or the source detects the loss (``D2 - D1`` tells
how many there must be).

A start with a skip list (``deliver_policy`` ``last_per_subject``: only the listed sequences
up to ``resume``, then every wanted message after it) keeps ``skip``/``resume`` in the offset
until the cursor passes ``resume``. Nothing here imports pyspark.

Durable queries (``durable_name``) add ``gen``, the consumer's ``reset_generation`` the
cursor belongs to, and ``durable`` (lake location, stream, consumer name) so a sink in the
same query can ack the batch it committed (``lake_sink``). A reset made by anyone
(``Lake.reset_consumer``, the CLI) bumps the generation; the next ``latestOffset`` sees it and
plans the next batch from where the reset put the consumer. That batch's end offset then
carries ``base``, the cursor the batch starts from, because Spark hands ``partitions`` the
previous end as start: a replayed batch reads the same range from the offset log alone.

Acks: everything up to an offset is acked once the batch that ended there is committed by
the sink, never before. ``latestOffset(start)`` is only called after the batch ending at
``start`` is committed (Spark writes the commit log before planning the next batch), so the
planner acks ``start`` there; this also acks, on restart, the last batch of an AvailableNow
run that Spark never ``commit()``s. Acks carry ``gen``: one planned before a reset is ignored.
The first start of a query (``bound``: where the durable stood when the query bound it) is
not acked: no batch of this query delivered what lies below it.

``max_ack_pending`` (ack policies all/explicit): the server stops delivering when that many
messages are delivered and not acked; a planned batch is delivered and unacked until it
commits, so it holds at most that many wanted messages above the ack floor (``ack_window``).
A paused durable (``pause_until`` ahead) gets empty batches until the pause ends.

A paced read (``replay_policy=original``, ``rate_limit_bps``) is one task per batch; the planner
keeps the consumer's pacing state across batches and hands it to each (``push_pacing``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from jsspark.config import AckPolicy, DeliverPolicy
from jsspark.datasource.options import RATE_LIMIT_DURABLE, OptionError, ReadOptions
from jsspark.datasource.partition import DataLossError, ReadPartition, delivery_mask
from jsspark.datasource.push_pacing import SERVER_MAX_PAYLOAD, Pace, ack_reply_lens, delivered_sizes
from jsspark.engine.schema import stored_size, value_lengths
from jsspark.engine.table import MessageTable, Snapshot

log = logging.getLogger(__name__)

# A partition holds at most this many messages; a batch uses more partitions before bigger ones.
# Each task costs Spark tens of ms (measured, bench/replay.py): few large partitions, in whole
# waves of the cores, beat many small ones; a task holds its stored rows (~75 MB at 100-byte
# payloads) and builds its output a slice at a time.
ROWS_PER_PARTITION = 500_000


def _cores() -> int:
    """Task slots to fill: this machine's cores (exact for ``local[*]``; on a cluster a batch
    big enough to need several partitions gets a multiple of the driver's count)."""
    return os.cpu_count() or 1


def _aligned_bounds(seqs: np.ndarray, parts: int, files: list[tuple[str, int, int, int]]) -> np.ndarray:
    """Positions in ``seqs`` that split it into about ``parts`` equal tasks, each moved to the
    nearest clean cut within one task's length: a sequence no data file spans. A commit's files
    (one per subject partition) interleave over its whole sequence range, so a cut inside that
    range makes both neighbouring tasks decode every one of those files and filter half the rows
    away; cut between commits, each file is read by one task (tasks of up to twice the size are
    cheaper than reading twice)."""
    n = len(seqs)
    even = np.linspace(0, n, parts + 1).astype(np.int64)
    if parts <= 1 or not files:
        return even
    spans = np.array([(f[1], f[2]) for f in files], dtype=np.int64)
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    reach = np.maximum.accumulate(spans[:, 1])
    # a cut at c is clean when every file starting above c starts above everything before it
    clean = reach[:-1][reach[:-1] < spans[1:, 0]]
    cuts = np.searchsorted(seqs, clean, side="right")  # ascending, as ``clean`` is
    if len(cuts):
        cuts = cuts[np.concatenate(([True], cuts[1:] != cuts[:-1]))]  # np.unique would import numpy.ma: 50 ms
    cuts = cuts[(cuts > 0) & (cuts < n)]
    if len(cuts) == 0:
        return even
    reach_rows = n / parts
    out = [0]
    for target in even[1:-1]:
        k = int(np.searchsorted(cuts, target))
        near = min((c for c in cuts[max(0, k - 1) : k + 1]), key=lambda c: abs(int(c) - int(target)))
        pos = int(near) if abs(int(near) - int(target)) <= reach_rows else int(target)
        if pos > out[-1]:
            out.append(pos)
    if out[-1] < n:
        out.append(n)
    return np.array(out, dtype=np.int64)


def _whole_waves(bounds: np.ndarray, cores: int) -> np.ndarray:
    """``bounds`` with the largest tasks halved until their number is a multiple of ``cores``:
    after cuts moved to commit boundaries, 3 tasks on 2 cores would leave one core idle for a
    third of the batch, which costs more than decoding one commit's files twice."""
    cuts = [int(b) for b in bounds]
    while (len(cuts) - 1) % cores:
        sizes = np.diff(cuts)
        k = int(np.argmax(sizes))
        if sizes[k] < 2:
            break
        cuts.insert(k + 1, cuts[k] + int(sizes[k]) // 2)
    return np.array(cuts, dtype=np.int64)


@dataclass(frozen=True)
class Durable:
    """Which lake consumer a durable query moves: enough for any process to ack it."""

    location: str
    stream: str
    name: str

    def to_json(self) -> dict[str, str]:
        return {"location": self.location, "stream": self.stream, "name": self.name}


@dataclass(frozen=True)
class Origin:
    """Which delivery a batch's rows come from, for a sink's per-origin high-water mark
    (``lake_sink``): the stream name (as the rows' ``stream`` column holds it), the durable
    consumer (the rows' ``consumer``) and ``key``, unique per origin stream table (its Delta
    table id, so neither another lake's stream of that name nor a recreated stream shares
    it) and per consumer (the durable's name; a non-durable query: a digest of its filters).

    In an offset it is the key alone, ``<stream>.<table id>.d.<durable>`` or
    ``<stream>.<table id>.f.<digest>`` (stream and consumer names hold no dots)."""

    stream: str
    consumer: str | None
    key: str

    @classmethod
    def of(cls, stream: str, table_id: str, consumer: str | None, filters: Sequence[str]) -> Origin:
        if consumer:
            return cls(stream, consumer, f"{stream}.{table_id}.d.{consumer}")
        digest = hashlib.sha256(json.dumps(sorted(filters)).encode()).hexdigest()[:16]
        return cls(stream, None, f"{stream}.{table_id}.f.{digest}")

    @classmethod
    def parse(cls, key: str) -> Origin:
        stream, _table, kind, who = key.split(".", 3)
        return cls(stream, who if kind == "d" else None, key)

    @property
    def table_id(self) -> str:
        """The Delta table id of the origin stream's table."""
        return self.key.split(".", 3)[1]


@dataclass(frozen=True)
class Cursor:
    """A source offset: last delivered stream sequence, delivered count, pending skip list;
    for a durable query also the consumer's reset generation, the consumer itself and, on the
    first batch after a reset, the cursor that batch starts from (``base``). A batch's end
    also carries ``pending``: how many matching messages were stored after it when it was
    planned, so a replay of the batch reports the same ``num_pending`` (Spark requires the same
    offsets to give the same rows); an end without it (older checkpoints) counts them at replay."""

    seq: int
    dseq: int = 0
    skip: tuple[int, ...] = ()
    resume: int = 0
    gen: int | None = None
    durable: Durable | None = None
    base: Cursor | None = None
    bound: bool = False  # where a durable stood when the query bound it: no batch of the query ended here
    origin: Origin | None = None
    pending: int | None = None  # matching messages after ``seq`` when this batch end was planned

    def to_offset(self) -> dict[str, Any]:
        """JSON-ready, keys always in the same order (Spark compares offsets as JSON text)."""
        out: dict[str, Any] = {"seq": int(self.seq), "dseq": int(self.dseq)}
        if self.pending is not None:
            out["pending"] = int(self.pending)
        if self.resume > self.seq:
            out["skip"] = [int(s) for s in self.skip]
            out["resume"] = int(self.resume)
        if self.gen is not None:
            out["gen"] = int(self.gen)
        if self.bound:
            out["bound"] = True
        if self.base is not None:
            out["base"] = self.base.to_offset()
        if self.durable is not None:
            out["durable"] = self.durable.to_json()
        if self.origin is not None:
            out["origin"] = self.origin.key
        return out

    @classmethod
    def from_offset(cls, offset: dict[str, Any]) -> Cursor:
        d = offset.get("durable")
        base = offset.get("base")
        o = offset.get("origin")
        return cls(
            int(offset["seq"]),
            int(offset.get("dseq", 0)),
            tuple(int(s) for s in offset.get("skip", ())),
            int(offset.get("resume", 0)),
            int(offset["gen"]) if "gen" in offset else None,
            Durable(str(d["location"]), str(d["stream"]), str(d["name"])) if d else None,
            cls.from_offset(base) if base else None,
            bool(offset.get("bound", False)),
            Origin.parse(str(o)) if o else None,
            int(offset["pending"]) if "pending" in offset else None,
        )

    def advance(self, seq: int, dseq: int) -> Cursor:
        if seq >= self.resume:
            return replace(self, seq=seq, dseq=dseq, skip=(), resume=0, base=None, bound=False, pending=None)
        return replace(
            self, seq=seq, dseq=dseq, skip=tuple(s for s in self.skip if s > seq), base=None, bound=False,
            pending=None,
        )


def settle(lake: Any, cur: Cursor) -> None:
    """Move the durable consumer of ``cur`` to it: delivered, then acked (ack policies all and
    explicit ack cumulatively on a lake; ack none follows delivery). Both carry the cursor's
    reset generation, so after a reset the engine ignores them."""
    assert cur.durable is not None and cur.gen is not None
    stream, name = cur.durable.stream, cur.durable.name
    lake.record_delivered(stream, name, cur.seq, cur.dseq, generation=cur.gen)
    acked = _last_delivered(lake, stream, name, cur.seq)
    if acked:
        lake.ack(stream, name, acked, cur.dseq, generation=cur.gen)


def _last_delivered(lake: Any, stream: str, name: str, seq: int) -> int:
    """The last message at or below ``seq`` on the durable's filter (0: none): what an ack up
    to ``seq`` acks, as a server client acks a message it was delivered. The cursor's ``seq``
    may be one the filter passed over, and a work queue removes the message an ack names
    (``stream.ackMsg``), though it belongs to another consumer."""
    from jsspark.engine.consumer_state import StreamView, filters_of

    filters = filters_of(lake.consumer_info(stream, name).config)
    if not filters:
        return seq
    view = StreamView.of(lake.stream(stream))
    on = view.seqs[view.match(filters) & (view.seqs <= seq)]
    return int(on[-1]) if len(on) else 0


@dataclass
class Planner:
    """Plans on the driver; keeps one ``MessageTable`` so snapshots refresh incrementally."""

    opts: ReadOptions
    _table: MessageTable | None = None
    _lake: Any = None
    _scanned: tuple[tuple[str, int, int], pa.Table] | None = None
    _retention_checked: bool = False
    _lost: tuple[tuple[Any, ...], np.ndarray | None] | None = None
    _origin: Origin | None = None
    _planned: bool = False  # a batch was planned in this process (``on_planning``)
    # a paced read: the consumer's pacing as the server would have it now (``push_pacing``), and
    # the stream's last sequence when this query started (the server replays up to it)
    _pace: Pace | None = None
    _replay_upto: int = 0
    clock: Callable[[], float] = time.time  # epoch seconds: paced tasks run in other processes

    # -- the stream ----------------------------------------------------------------------------
    def lake(self) -> Any:
        """One ``Lake`` per planner: its catalog and stream engines refresh incrementally."""
        if self._lake is None:
            import jsspark

            self._lake = jsspark.connect(self.opts.location, self.opts.storage_options)
        return self._lake

    def table(self) -> MessageTable:
        if self._table is None:
            uri = self.lake().stream_uri(self.opts.stream)
            self._table = MessageTable(uri, self.opts.storage_options)
        return self._table

    @property
    def origin(self) -> Origin:
        """This query's ``Origin`` (stamped on every offset it plans) on the stream's table as
        the newest snapshot found it: another one once the stream is deleted and created again."""
        if self._origin is None:
            self.snapshot()
        assert self._origin is not None
        return self._origin

    @property
    def durable(self) -> Durable | None:
        name = self.opts.consumer.durable_name
        return Durable(self.opts.location, self.opts.stream, name) if name else None

    def snapshot(self) -> Snapshot:
        snap = self.table().snapshot()
        if self._origin is None or self._origin.table_id != snap.table_id:
            self._origin = Origin.of(self.opts.stream, snap.table_id, self.opts.consumer_name, self.opts.filters)
        return snap

    def first_seq(self, snap: Snapshot) -> int:
        """The stream's first sequence at ``snap`` (from the commit's recorded state)."""
        recorded = self.table().recorded_state(snap)
        if recorded is not None:
            return int(recorded["first_seq"])
        return int(self.lake().stream_info(self.opts.stream).state.first_seq)

    # -- start ---------------------------------------------------------------------------------
    def initial(self, bind: bool = False) -> Cursor:
        """Where a new query starts, as the server would start a consumer with this config;
        with ``bind`` and a ``durable_name``, where that durable consumer stands."""
        lake = self.lake()
        if bind and self.opts.consumer.durable_name:
            return self._bind(lake)
        cfg = self.opts.consumer
        start_sequence = getattr(lake, "start_sequence", None)
        if start_sequence is not None:
            start, skip = start_sequence(self.opts.stream, cfg)
            start, skip = int(start), sorted(int(s) for s in skip or ())
        else:
            start, skip = self._fallback_start(cfg.deliver_policy, cfg.opt_start_seq)
        if not skip:
            return Cursor(start - 1)
        resume = max(skip[-1], start - 1)
        return Cursor(min(start, skip[0]) - 1, 0, tuple(skip), resume)

    def _bind(self, lake: Any) -> Cursor:
        """Create the durable consumer (or bind to it when it exists with the same config, as
        the server's create-or-update does) and start at its delivered position."""
        cfg = self.opts.consumer
        if cfg.rate_limit_bps:
            raise OptionError(RATE_LIMIT_DURABLE)
        lake.add_consumer(self.opts.stream, cfg)
        self._recover_retention()
        c = self._consumer()
        self._touch(c)
        return replace(self._cursor_of(c), bound=True)

    def _recover_retention(self) -> None:
        """Once per process, before this query's first ack: remove what an interest or work-queue
        stream keeps only because a crash fell between an ack's floor commit and its removal
        commit (the server's ``checkStateForInterestStream`` when a consumer comes back)."""
        if self._retention_checked:
            return
        self.lake().consumers.check_interest(self.opts.stream)
        self._retention_checked = True

    def _consumer(self) -> Any:
        """The bound durable consumer as the catalog holds it now."""
        from jsspark.engine.consumer_state import Consumer
        from jsspark.engine.consumers import CONSUMER

        name = self.opts.consumer.durable_name
        rec = self.lake().catalog.get(CONSUMER, self.opts.stream, name)
        if rec is None:
            raise OptionError(
                f"durable consumer {name!r} on stream {self.opts.stream} was deleted while the query used it; "
                "restart the query to create it again where its checkpoint stands (a durable with an "
                "inactive_threshold is also deleted when no batch is planned within it: use a longer one, or 0)"
            )
        return Consumer.of(rec)

    def _touch(self, c: Any) -> None:
        """Planning a batch is the query's pull: activity that keeps a durable with an
        ``inactive_threshold`` from being removed (``Consumers.touch``). Recorded once the
        stored activity is older than a tenth of the threshold (at most 1 s), not at every
        planning of an idle query."""
        thr = int(c.config.inactive_threshold)
        if thr > 0 and time.time_ns() - c.last_active_ns > min(thr // 10, 1_000_000_000):
            self.lake().consumers.touch(self.opts.stream, c.name)

    def _cursor_of(self, c: Any) -> Cursor:
        """A cursor at the consumer's delivered position, in its current reset generation.

        A consumer that delivered nothing since it was created or reset stands at a *start*
        position; like the server's start (``selectStartingSeqNo`` clamps to the first seq)
        it begins at the stream's first message when what lies before is gone (a reset back
        on a work-queue stream whose acked messages were removed), instead of reporting loss.
        """
        from jsspark.engine.consumer_state import StreamView

        st = c.state
        lake = self.lake()
        skip = tuple(StreamView.of(lake.stream(self.opts.stream)).skip_list(c.filters, st)) if st.resume else ()
        seq = st.delivered.stream_seq
        if st.delivered.consumer_seq == 0:
            seq = max(seq, self.first_seq(self.snapshot()) - 1)
        # ``resume`` stands with no entries left too: entries removed before they were handed out
        # (``skip_gone``) leave their subjects' older messages undelivered up to it, as on the server
        return Cursor(seq, st.delivered.consumer_seq, skip, st.resume, st.reset_generation, self.durable)

    def _check_stream(self, cur: Cursor) -> None:
        """An offset of another stream: the checkpoint was written by a query reading that one
        (``checkpointLocation`` reused with another ``stream``). As Spark's Kafka source ties a
        checkpoint to its topics, it cannot go on here; not data loss, so ``failOnDataLoss``
        does not change it."""
        if cur.origin is not None and cur.origin.stream != self.opts.stream:
            raise OptionError(
                f"jetstream source: this query reads stream {self.opts.stream} but its checkpoint's offsets are "
                f"on stream {cur.origin.stream}: the checkpointLocation belongs to a query on stream "
                f"{cur.origin.stream}. Start this query with a new checkpointLocation (or read stream "
                f"{cur.origin.stream} from this one)."
            )

    def recreated(self, start: Cursor) -> Cursor | None:
        """A start offset that belongs to an earlier stream of this name (its origin names
        another Delta table: the stream was deleted and created again since the batch ending
        there was planned, while the query ran or was stopped): with ``failOnDataLoss`` a
        ``DataLossError``, else the new stream's start for this query (for a durable, bound as
        ``initialOffset`` binds it), with a warning. ``None`` when ``start`` is on this stream,
        or carries no origin (offsets written before origins were). Checked at every planning.

        While the stream is not there (deleted; maybe being created again) a ``DataLossError``,
        as Spark's Kafka source reports a deleted topic's partitions; with
        ``failOnDataLoss=false`` ``start`` itself: no batch until a stream of this name is."""
        self._check_stream(start)
        try:
            new = self.snapshot().table_id  # the stream as it is now (also moves ``origin`` to it)
        except FileNotFoundError as e:
            what = (f"jetstream source: stream {self.opts.stream} was deleted while this query read it "
                    f"(what it held after sequence {start.seq} is lost)")
            if self.opts.fail_on_data_loss:
                raise DataLossError(f"{what}: {e}. Start the query with a new checkpoint once the stream exists, "
                                    "or set failOnDataLoss=false to wait for it and read it from its start.") from e
            log.warning("%s; failOnDataLoss=false: waiting for a stream of this name", what)
            return start
        if start.origin is None or start.origin.table_id == new:
            return None
        old = start.origin.table_id
        what = (
            f"jetstream source: stream {self.opts.stream} was deleted and created again since this query "
            f"planned its last batch (its offsets are on table {old}, the stream is now table {new})"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{what}: what the old stream held after sequence {start.seq} is lost, and the new stream's "
                "sequences start over. Start the query with a new checkpoint, or set failOnDataLoss=false to "
                "read the new stream from its start."
            )
        fresh = self.initial(bind=True)
        log.warning(
            "%s; failOnDataLoss=false: reading the new stream from its start (sequence %d on, as the "
            "query's deliver policy starts it)", what, fresh.seq + 1,
        )
        return fresh

    def on_planning(self, start: Cursor) -> tuple[Cursor, Cursor | None]:
        """``latestOffset(start)`` for a durable query: ack ``start`` (committed by now), and
        notice a reset. Returns the cursor the next batch starts from and, after a reset, that
        same cursor as the ``base`` the batch's end offset must carry."""
        if self.durable is None:
            return start, None
        if not self._planned:
            self._restore(start)
        self._planned = True
        self._recover_retention()
        self.lake().consumers.expire(self.opts.stream)  # gone if inactive too long before this pull
        c = self._consumer()
        self._touch(c)
        gen = c.state.reset_generation
        if start.gen is None:  # an offset from before generations were recorded: adopt the current one
            start = replace(start, gen=gen, durable=self.durable)
        if gen > start.gen:
            base = self._cursor_of(c)
            return base, Cursor(base.seq, base.dseq, base.skip, base.resume)
        start = replace(start, durable=self.durable)
        if not start.bound:  # a bound start is where the durable stood, not a batch this query committed
            self.settle(start, c)
        return start, None

    def _restore(self, start: Cursor) -> None:
        """A restart (this process's first planning) whose durable does not exist creates it, as
        ``_bind`` creates it, but where the checkpoint stands: deleted while the query was
        stopped when ``start`` was written by a query on this durable (its offsets name it), else
        the checkpoint was written without it (no ``durable_name``, another one, or an older
        jsspark whose offsets named none) and it is created there for the first time. So:
        delivered and acked up to ``start`` (committed, as every start ``latestOffset`` gets),
        in ``start``'s reset generation, with what is left of a skip list. The query then
        delivers nothing twice, and ``_recover_retention`` removes from a work-queue or
        interest stream what that ack floor no longer needs. (An interest stream already lost
        its messages when its last consumer went, as on a server: then the planning fails with
        data loss unless ``failOnDataLoss=false``.)"""
        from jsspark.engine.consumer_state import ConsumerState, Position
        from jsspark.engine.consumers import CONSUMER

        cfg = self.opts.consumer
        self.lake().consumers.expire(self.opts.stream)  # one inactive too long while stopped is gone too
        if self.lake().catalog.get(CONSUMER, self.opts.stream, cfg.durable_name) is not None:
            return
        if cfg.rate_limit_bps:
            raise OptionError(RATE_LIMIT_DURABLE)
        listing = start.resume > start.seq  # skip-list entries are left: handed out up to ``start``
        at = ConsumerState(
            Position(start.dseq, start.seq), Position(start.dseq, start.seq),
            resume=start.resume if listing else 0, skipped_to=start.seq if listing else 0,
            reset_generation=start.gen or 0,
        )
        self.lake().consumers.add(self.opts.stream, cfg, at=at)
        name, stream = cfg.durable_name, self.opts.stream
        wrote = start.durable.name if start.durable is not None else start.origin.consumer if start.origin else None
        if wrote == name:
            what = f"durable consumer {name!r} on stream {stream} was deleted while the query was stopped; created it again"
        elif wrote is not None:
            what = (f"the checkpoint was written by a query on durable consumer {wrote!r}, not {name!r}; created "
                    f"durable consumer {name!r} on stream {stream}")
        elif start.origin is not None:
            what = f"the checkpoint was written by a query without a durable consumer; created durable consumer {name!r} on stream {stream}"
        else:
            what = (f"the checkpoint names no durable consumer (written without durable_name, or by an older "
                    f"jsspark); created durable consumer {name!r} on stream {stream}")
        log.warning("jetstream source: %s at the checkpoint's position (stream sequence %d)", what, start.seq)

    def settle(self, cur: Cursor, consumer: Any = None) -> None:
        """Record delivery and ack everything up to ``cur``: only ever called once the batch
        ending at ``cur`` is committed. Ignored by the engine after a reset (``gen``)."""
        if cur.durable is None or cur.gen is None:
            return
        st = consumer.state if consumer is not None else None
        if st is not None and (st.reset_generation != cur.gen or st.ack_floor.stream_seq >= cur.seq):
            return  # nothing to move: saves two catalog transactions per batch
        settle(self.lake(), cur)

    def record_delivered(self, end: Cursor) -> None:
        """Spark's ``commit(end)``: the batch ending at ``end`` is committed; ack it (usually
        already acked by the sink or the next ``latestOffset``: then nothing is sent, as a repeated
        explicit ack would stamp the ack floor's ``last_active`` again)."""
        from jsspark.engine.consumer_state import Consumer
        from jsspark.engine.consumers import CONSUMER

        rec = self.lake().catalog.get(CONSUMER, end.durable.stream, end.durable.name) if end.durable else None
        self.settle(end, Consumer.of(rec) if rec is not None else None)

    def _fallback_start(self, policy: DeliverPolicy, opt_start_seq: int) -> tuple[int, list[int]]:
        """``all`` and ``by_start_sequence`` without the engine's consumer start positions."""
        if policy is DeliverPolicy.ALL:
            start = 1
        elif policy is DeliverPolicy.BY_START_SEQUENCE:
            start = opt_start_seq
        else:
            raise OptionError(
                f"deliver_policy {policy.value!r} needs the engine's consumer start positions "
                "(Lake.start_sequence), which this jsspark build does not have; use 'all' or 'by_start_sequence'"
            )
        return max(start, self.first_seq(self.snapshot())), []

    # -- reading the index ---------------------------------------------------------------------
    def _scan(self, snap: Snapshot, after: int, upto: int | None) -> pa.Table:
        """``seq``, ``size`` (``subject`` when filtering, also ``ts_ns`` when pacing) of stored messages after ``after``,
        in sequence order. The scan of everything after ``after`` is kept for the version: a
        batch's ``latestOffset`` and ``partitions`` start from the same cursor and read it once."""
        key = (snap.table_id, snap.version, after)
        if self._scanned is None or self._scanned[0] != key:
            paced = self.opts.replay_original or self.opts.consumer.rate_limit_bps
            cols = ["seq", "size", *(["subject"] if self.opts.filters or paced else []), *(["ts_ns"] if paced else [])]
            index = self.lake().stream(self.opts.stream).index_at(snap.version, snap.table_id)
            if index is not None:  # the engine's index (persisted, seq-ordered): a slice, no file read
                seqs = index.seq_array()
                rows = index.rows.select(cols).slice(int(np.searchsorted(seqs, after, side="right")))
                self._scanned = (key, rows.combine_chunks())
            else:
                rows = self.table().dataset(snap).to_table(columns=cols, filter=ds.field("seq") > after)
                order = np.argsort(rows["seq"].to_numpy(), kind="stable")  # sorted runs, one per file
                self._scanned = (key, rows.take(pa.array(order)).combine_chunks())
        rows = self._scanned[1]
        if upto is not None:
            rows = rows.slice(0, int(np.searchsorted(rows["seq"].to_numpy(), upto, side="right")))
        return rows

    def _wanted(self, rows: pa.Table, cur: Cursor) -> np.ndarray | None:
        """Which of ``rows`` the query delivers; ``None``: all of them (no filter, no skip list),
        which spares planning a 10M-message batch its masks and copies."""
        if not self.opts.filters and not cur.resume:
            return None
        seqs = rows["seq"].to_numpy()
        subjects = rows["subject"] if self.opts.filters else None
        return delivery_mask(seqs, subjects, self.opts.filters, cur.skip, cur.resume)

    def _check_gap(self, snap: Snapshot, cur: Cursor, upto: int) -> None:
        """Messages between the cursor and the stream's first sequence were removed unread.

        Loss only if the query wanted one of them: without a filter or skip list every message;
        with one, the removed messages' subjects are read back from the files the Delta log
        added (``MessageTable.stored_since``; gone after vacuum, then loss cannot be ruled out)."""
        first = self.first_seq(snap)
        if not (self.opts.fail_on_data_loss and cur.seq + 1 < first and cur.seq < upto):
            return
        lost_to = min(first - 1, upto)
        detail = ""
        if self.opts.filters or cur.resume:
            lost = self._lost_wanted(snap, cur, lost_to)
            if lost is not None and not len(lost):
                return
            detail = (
                f"; {len(lost)} of them on the query's filter (first {int(lost[0])})" if lost is not None
                else "; their subjects are no longer known (their files were vacuumed or the Delta log cleaned up), "
                "so some may have been on the query's filter"
            )
        raise DataLossError(
            f"jetstream source: stream {self.opts.stream}: messages {cur.seq + 1}..{lost_to} were removed "
            f"(purged, deleted or expired by a limit) before this query read them{detail}; the stream's first "
            f"sequence is now {first}. Set failOnDataLoss=false to skip them."
        )

    def _lost_wanted(self, snap: Snapshot, cur: Cursor, upto: int) -> np.ndarray | None:
        """Sequences in ``(cur.seq, upto]`` (all removed) that the query would have delivered;
        ``None`` when their subjects cannot be read back. Kept per range: a batch's
        ``latestOffset`` and ``partitions`` ask for the same one."""
        key = (snap.table_id, snap.version, cur.seq, upto, cur.skip, cur.resume)
        if self._lost is None or self._lost[0] != key:
            rows = self.table().stored_since(snap, cur.seq, upto, ["seq", "subject"])
            lost = None
            if rows is not None:
                seqs = rows["seq"].to_numpy()
                wanted = self._wanted(rows, cur)
                lost = np.unique(seqs if wanted is None else seqs[wanted])
            self._lost = (key, lost)
        return self._lost[1]

    # -- admission control ---------------------------------------------------------------------
    def ack_window(self, cur: Cursor) -> tuple[int, int] | None:
        """For a durable that acks (policy all/explicit) with a ``max_ack_pending``: its ack
        floor and how many matching messages above it the next batch may still deliver.

        The server stops delivering once ``num_ack_pending`` (delivered above the ack floor, not
        acked) reaches ``max_ack_pending`` (``getNextMsg``). A batch is delivered and not acked
        until it commits, so a batch may hold at most ``max_ack_pending`` minus what is pending
        already; the ack of the previous batch (``on_planning``) normally leaves nothing pending.
        Messages pending before the cursor (delivered by another client, not acked) count.

        A paused durable (``pause_until`` ahead, any ack policy) has no room at all: the server
        delivers nothing while paused (``loopAndGatherMsgs``), so the query plans empty
        batches until the pause ends or the consumer is resumed."""
        from jsspark.engine.consumer_state import pause_left

        if self.durable is None:
            return None
        c = self._consumer()
        if pause_left(c.config):
            return cur.seq, 0
        maxp = int(c.config.max_ack_pending)
        if c.config.ack_policy is AckPolicy.NONE or maxp <= 0:
            return None
        st = c.state
        if cur.gen is not None and st.reset_generation != cur.gen:  # reset since: the next planning sees it
            return cur.seq, maxp
        floor = st.ack_floor.stream_seq
        pending = 0
        if floor < cur.seq:
            pending = self.lake().consumer_info(self.opts.stream, c.name).num_ack_pending
        return floor, maxp - pending

    def latest(
        self, cur: Cursor, max_rows: int | None, max_bytes: int | None, target: int | None = None
    ) -> Cursor:
        """The end of the next batch: at most ``max_rows`` messages / ``max_bytes`` stored bytes
        (at least one message), never past ``target`` (``Trigger.AvailableNow``), and for a
        durable never more than its ``max_ack_pending`` allows (``ack_window``). The end carries
        the matching messages stored after it now (``Cursor.pending``), for ``num_pending``."""
        snap = self.snapshot()
        if cur.origin is not None and cur.origin.table_id != snap.table_id:
            return cur  # the stream was deleted and created again just now: the next planning says so
        last = snap.last_seq if target is None else min(snap.last_seq, target)
        if last <= cur.seq:
            return cur
        self._check_gap(snap, cur, last)
        everything = self._scan(snap, cur.seq, None)  # one scan, kept: ``rows`` is a slice of it
        wanted_all = self._wanted(everything, cur)
        matching = everything.num_rows if wanted_all is None else int(np.count_nonzero(wanted_all))
        rows = self._scan(snap, cur.seq, last)
        wanted = None if wanted_all is None else wanted_all[: rows.num_rows]
        seqs = rows["seq"].to_numpy()
        if wanted is not None:
            seqs = seqs[wanted]
        k = len(seqs)
        if max_rows is not None:
            k = min(k, max_rows)
        window = self.ack_window(cur)
        if window is not None:
            floor, room = window
            acked = int(np.searchsorted(seqs, floor, side="right"))  # re-read below the floor: not pending
            k = min(k, acked + max(room, 0))
            if k == 0:
                return cur
        if max_bytes is not None and k:
            sizes = rows["size"].to_numpy()
            sizes = np.cumsum((sizes if wanted is None else sizes[wanted])[:k])
            k = max(1, int(np.searchsorted(sizes, max_bytes, side="right")))
        end = last if k == len(seqs) else int(seqs[k - 1])
        return replace(cur.advance(end, cur.dseq + k), pending=matching - k)

    def latest_available(self) -> int:
        return self.snapshot().last_seq

    def available(self, cur: Cursor) -> int:
        """How many messages the query would deliver after ``cur`` now, before any read limit:
        what ``minMessagesPerTrigger`` compares, as Kafka's source compares the offsets there."""
        snap = self.snapshot()
        if snap.last_seq <= cur.seq:
            return 0
        rows = self._scan(snap, cur.seq, None)
        wanted = self._wanted(rows, cur)
        return rows.num_rows if wanted is None else int(np.count_nonzero(wanted))

    # -- partitions ----------------------------------------------------------------------------
    def partitions(self, start: Cursor, end: Cursor | None) -> list[ReadPartition]:
        """Split ``(start, end]`` (``end=None``: everything now stored) into tasks over one
        pinned version; checks that no planned message has disappeared."""
        if end is not None and end.durable is not None and self.durable is not None and not self._planned:
            # a restart replays the batch it had planned (stopped before its commit) before it plans
            # anything: a durable deleted while it was stopped is created again at ``start`` first
            self._restore(replace(start, gen=end.gen if end.gen is not None else start.gen))
        if end is not None and end.base is not None:
            start = end.base  # the first batch after a reset starts where the reset put the consumer
        snap = self.snapshot()
        if end is not None and end.origin is not None and self._gone(end, snap):
            return []
        upto = snap.last_seq if end is None else end.seq
        if upto <= start.seq:
            return []
        settled = self._settled(end)
        self._check_gap(snap, replace(start, seq=max(start.seq, settled)), upto)
        rows = self._scan(snap, start.seq, None)
        self._scanned = None  # the batch is planned: nothing reads this range again
        seqs_all = rows["seq"].to_numpy()
        wanted = self._wanted(rows, start)
        if wanted is None:  # the scan is in sequence order
            cut = int(np.searchsorted(seqs_all, upto, side="right"))
            seqs, tail = seqs_all[:cut], len(seqs_all) - cut
            planned: Any = slice(0, cut)
        else:
            in_range = seqs_all <= upto
            planned = wanted & in_range
            seqs = seqs_all[planned]
            tail = int(np.count_nonzero(wanted & ~in_range))
        if end is not None and end.pending is not None:
            tail = end.pending  # as when the batch was planned: a replay gives the same rows
        if end is not None and not self._other_filters(end):
            expected = end.dseq - start.dseq
            if len(seqs) < expected and self.opts.fail_on_data_loss and settled <= start.seq:
                raise DataLossError(
                    f"jetstream source: stream {self.opts.stream}: the batch over sequences "
                    f"{start.seq + 1}..{end.seq} must deliver {expected} messages but only {len(seqs)} are "
                    f"still stored (purged, deleted or expired by a limit; first sequence now "
                    f"{self.first_seq(snap)}). Set failOnDataLoss=false to skip them."
                )
        n = len(seqs)
        if n == 0:
            return []
        by_size = math.ceil(n / ROWS_PER_PARTITION)
        if by_size > 1:  # whole waves: every core busy until the batch's last task
            by_size = math.ceil(by_size / _cores()) * _cores()
        parts = max(self.opts.min_partitions, by_size)
        pace = None
        if self.opts.replay_original or self.opts.consumer.rate_limit_bps:
            parts = 1  # one task releases the batch's messages in order, at the consumer's pace
            pace = self._paced(snap, rows, planned, start.dseq, tail, upto)
        parts = min(parts, n)
        files, direct = self._files(snap)
        bounds = _aligned_bounds(seqs, parts, files)
        if by_size > 1 and parts > 1:
            bounds = _whole_waves(bounds, _cores())
        base = ReadPartition(
            uri=self.table().uri,
            version=snap.version,
            table_id=snap.table_id,
            stream=self.opts.stream,
            consumer=self.opts.consumer_name,
            lo=0,
            hi=0,
            files=(),
            expected=0,
            dseq_base=0,
            pending_after=0,
            filters=tuple(self.opts.filters),
            headers_only=self.opts.consumer.headers_only,
            pace=pace,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            storage_options=self.opts.storage_options,
            table_schema=self.table().dataset(snap).schema if direct else None,
        )
        out = []
        for i0, i1 in itertools.pairwise(bounds):
            lo = start.seq if i0 == 0 else int(seqs[i0 - 1])
            hi = int(seqs[i1 - 1])
            overlapping = [f for f in files if f[2] > lo and f[1] <= hi]
            skip = tuple(s for s in start.skip if lo < s <= hi)
            out.append(
                replace(
                    base, lo=lo, hi=hi, files=tuple(f[0] for f in overlapping),
                    file_sizes=tuple(f[3] for f in overlapping) if direct else (),
                    file_seqs=tuple((f[1], f[2]) for f in overlapping), expected=int(i1 - i0),
                    dseq_base=start.dseq + int(i0), pending_after=tail + int(n - i1),
                    skip=skip, resume=start.resume if start.resume > lo else 0,
                )
            )
        return out

    def _other_filters(self, end: Cursor) -> bool:
        """The batch ending at ``end`` was planned by this query with other filters: stopped (or
        failed) before it committed, then restarted with another ``filter_subject(s)``. Its
        replay reads the range with the filters the query has now, as every later batch does, so
        its planned count says nothing about loss (one removed below the first sequence is still
        found, ``_check_gap``). Told by the offset's origin key, which holds a digest of the
        filters of a query without a durable."""
        o = end.origin
        if o is None or o.consumer is not None or o.table_id != self.origin.table_id or o.key == self.origin.key:
            return False
        log.warning(
            "jetstream source: stream %s: the batch over sequences ..%d was planned with other filters (the query "
            "stopped before it committed); it is read with this query's filters", self.opts.stream, end.seq,
        )
        return True

    def _paced(self, snap: Snapshot, rows: pa.Table, planned: Any, dseq: int, tail: int, upto: int) -> Pace:
        """The pacing state before the batch's first message (``push_pacing``), then advanced
        past the batch's messages (``planned`` of the scanned ``rows``) as the server would
        deliver them from now. The first paced batch of this planner starts it, as a consumer's
        creation starts the server's: full bucket, replaying up to the stream's last sequence.

        Sizes come from the index (no payload read on the driver): the stored size less the file
        store's overhead, so a message with headers counts 4 bytes more here than its task, which
        counts exactly (and ``headers_only`` counts as if it had no headers)."""
        if self._pace is None:
            max_size = int(self.lake().stream(self.opts.stream).config.max_msg_size)
            burst = max_size if max_size > 0 else SERVER_MAX_PAYLOAD
            self._pace = Pace.start(self.opts.replay_original, int(self.opts.consumer.rate_limit_bps), burst)
            self._replay_upto = snap.last_seq
        before = self._pace
        got = rows.select(["seq", "size", "subject", "ts_ns"])
        got = got.slice(planned.start, planned.stop) if isinstance(planned, slice) else got.filter(pa.array(planned))
        n = got.num_rows
        ts = got["ts_ns"].to_numpy()
        subj = value_lengths(got["subject"])
        data = got["size"].to_numpy() - stored_size("", 0, 0) - subj
        ack = ack_reply_lens(self.opts.stream, self.opts.consumer_name, got["seq"].to_numpy(),
                             dseq + 1 + np.arange(n), ts, tail + n - 1 - np.arange(n))
        sizes = delivered_sizes(subj, np.zeros(n, dtype=np.int64), data, ack, self.opts.consumer.headers_only)
        after = before.advance(self.clock(), ts, sizes)
        if after.replay and upto >= max(self._replay_upto, snap.last_seq):
            after = replace(after, replay=False)  # caught up, nothing more stored: replay is over
        self._pace = after
        return before

    def _gone(self, end: Cursor, snap: Snapshot) -> bool:
        """The batch ending at ``end`` was planned on a table the stream no longer is (deleted
        and created again since; a replay after a restart, or a running query's batch): its
        rows are not the new table's at the same sequences. With ``failOnDataLoss`` a
        ``DataLossError``; else the batch is empty and the next planning moves to the new
        stream (``recreated``). Offsets of another stream fail (``_check_stream``)."""
        assert end.origin is not None
        self._check_stream(end)
        if end.origin.table_id == snap.table_id:
            return False
        what = (
            f"jetstream source: stream {self.opts.stream} was deleted and created again after the batch up to "
            f"sequence {end.seq} was planned on table {end.origin.table_id} (the stream is now table "
            f"{snap.table_id}): the batch's messages are lost"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{what}. Start the query with a new checkpoint, or set failOnDataLoss=false to skip them and read "
                "the new stream from its start."
            )
        log.warning("%s; failOnDataLoss=false: the batch is empty", what)
        return True

    def _settled(self, end: Cursor | None) -> int:
        """How far the durable is acked in ``end``'s generation. A batch replayed after a crash
        between the sink's commit (which acks) and Spark's commit log may find its acked
        messages gone from a work-queue or interest stream: that is not data loss."""
        if end is None or end.durable is None or end.gen is None:
            return 0
        st = self._consumer().state
        return st.ack_floor.stream_seq if st.reset_generation == end.gen else 0

    def _files(self, snap: Snapshot) -> tuple[list[tuple[str, int, int, int]], bool]:
        """(path, min seq, max seq, size) of each data file (files without stats span
        everything), and whether the paths are exactly those the version's dataset reads, so
        a task can open them without the Delta log."""
        stats = self.table().file_stats(snap)
        if stats.num_rows == 0:
            return [], False
        paths = stats["path"].to_pylist()
        names = stats.column_names
        lo = stats["min.seq"].to_pylist() if "min.seq" in names else [None] * len(paths)
        hi = stats["max.seq"].to_pylist() if "max.seq" in names else [None] * len(paths)
        size = stats["size_bytes"].to_pylist() if "size_bytes" in names else [None] * len(paths)
        big = np.iinfo(np.int64).max
        files = [
            (p, 0 if a is None else int(a), big if b is None else int(b), -1 if z is None else int(z))
            for p, a, b, z in zip(paths, lo, hi, size, strict=True)
        ]
        # in sequence order: a task reading files that do not interleave (one per commit, as a
        # one-subject stream or a mirror's landing writes them) then holds its rows in stream
        # order, and cuts its output from them instead of sorting (``reading.rows_at``)
        files.sort(key=lambda f: (f[1], f[2]))
        fragments = {f.path for f in self.table().dataset(snap).get_fragments()}
        direct = all(f[3] >= 0 and f[0] in fragments for f in files) and len(fragments) == len(files)
        return files, direct
