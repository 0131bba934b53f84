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
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from jsspark.config import DeliverPolicy
from jsspark.datasource.options import OptionError, ReadOptions
from jsspark.engine.table import MessageTable, Snapshot
from jsspark.subjects import match_filter

# A partition holds at most this many messages; a batch uses more partitions before bigger ones.
ROWS_PER_PARTITION = 200_000


class DataLossError(RuntimeError):
    """Messages the query should deliver are gone (``failOnDataLoss=true``)."""


@dataclass(frozen=True)
class Cursor:
    """A source offset: last delivered stream sequence, delivered count, pending skip list."""

    seq: int
    dseq: int = 0
    skip: tuple[int, ...] = ()
    resume: int = 0

    def to_offset(self) -> dict[str, Any]:
        """JSON-ready, keys always in the same order (Spark compares offsets as JSON text)."""
        out: dict[str, Any] = {"seq": int(self.seq), "dseq": int(self.dseq)}
        if self.resume > self.seq:
            out["skip"] = [int(s) for s in self.skip]
            out["resume"] = int(self.resume)
        return out

    @classmethod
    def from_offset(cls, offset: dict[str, Any]) -> Cursor:
        return cls(
            int(offset["seq"]),
            int(offset.get("dseq", 0)),
            tuple(int(s) for s in offset.get("skip", ())),
            int(offset.get("resume", 0)),
        )

    def advance(self, seq: int, dseq: int) -> Cursor:
        if seq >= self.resume:
            return Cursor(seq, dseq)
        return Cursor(seq, dseq, tuple(s for s in self.skip if s > seq), self.resume)


def delivery_mask(
    seqs: np.ndarray, subjects: pa.Array | pa.ChunkedArray | None, filters: Sequence[str],
    skip: Sequence[int] = (), resume: int = 0,
) -> np.ndarray:
    """Which stored messages the consumer delivers: filter match, and up to ``resume`` only
    the skip list's sequences."""
    if filters and subjects is not None:
        mask = np.asarray(match_filter(subjects, list(filters)).to_numpy(zero_copy_only=False), dtype=bool)
    else:
        mask = np.ones(len(seqs), dtype=bool)
    if resume:
        early = seqs <= resume
        mask = np.where(early, np.isin(seqs, np.asarray(skip, dtype=np.int64)), mask)
    return mask


@dataclass(frozen=True)
class ReadPartition:
    """One task's work: the wanted messages in ``(lo, hi]`` of a pinned table version.

    Carries all the executor needs (no driver state): where the table is, which version and
    files, which messages are wanted, and the delivery/pending numbers of its first row.
    """

    uri: str
    version: int
    stream: str
    consumer: str | None
    lo: int
    hi: int
    files: tuple[str, ...]
    expected: int
    dseq_base: int
    pending_after: int
    filters: tuple[str, ...] = ()
    skip: tuple[int, ...] = ()
    resume: int = 0
    headers_only: bool = False
    replay_original: bool = False
    rate_limit_bps: int = 0
    fail_on_data_loss: bool = True
    storage_options: dict[str, str] | None = field(default=None)


@dataclass
class Planner:
    """Plans on the driver; keeps one ``MessageTable`` so snapshots refresh incrementally."""

    opts: ReadOptions
    _table: MessageTable | None = None

    # -- the stream ----------------------------------------------------------------------------
    def table(self) -> MessageTable:
        if self._table is None:
            import jsspark

            uri = jsspark.connect(self.opts.location).stream_uri(self.opts.stream)
            self._table = MessageTable(uri, self.opts.storage_options)
        return self._table

    def snapshot(self) -> Snapshot:
        return self.table().snapshot()

    def first_seq(self, snap: Snapshot) -> int:
        """The stream's first sequence at ``snap`` (from the commit's recorded state)."""
        recorded = self.table().recorded_state(snap)
        if recorded is not None:
            return int(recorded["first_seq"])
        import jsspark

        return int(jsspark.connect(self.opts.location).stream_info(self.opts.stream).state.first_seq)

    # -- start ---------------------------------------------------------------------------------
    def initial(self, bind: bool = False) -> Cursor:
        """Where a new query starts, as the server would start a consumer with this config;
        with ``bind`` and a ``durable_name``, where that durable consumer stands."""
        import jsspark

        lake = jsspark.connect(self.opts.location)
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
        from jsspark.engine.consumers import CONSUMER, Consumer, StreamView

        cfg = self.opts.consumer
        if cfg.rate_limit_bps:
            raise OptionError("rate_limit_bps needs a push consumer; a durable_name binds a pull consumer: drop one")
        name = cfg.durable_name
        lake.add_consumer(self.opts.stream, cfg)
        rec = lake.catalog.get(CONSUMER, self.opts.stream, name)
        if rec is None:  # deleted between create and read
            raise OptionError(f"durable consumer {name!r} on stream {self.opts.stream} disappeared while binding")
        c = Consumer.of(rec)
        st = c.state
        skip = tuple(StreamView.of(lake.stream(self.opts.stream)).skip_list(c.filters, st)) if st.resume else ()
        return Cursor(st.delivered.stream_seq, st.delivered.consumer_seq, skip, st.resume if skip else 0)

    def record_delivered(self, end: Cursor) -> None:
        """Move the durable consumer to ``end`` (delivered, and the ack floor for ack policy
        none): called once Spark has committed the batch that ended there."""
        name = self.opts.consumer.durable_name
        if not name:
            return
        import jsspark

        jsspark.connect(self.opts.location).record_delivered(self.opts.stream, name, end.seq, end.dseq)

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
        """``seq``, ``size`` (and ``subject`` when filtering) of stored messages after ``after``."""
        cond = ds.field("seq") > after
        if upto is not None:
            cond = cond & (ds.field("seq") <= upto)
        cols = ["seq", "size", *(["subject"] if self.opts.filters else [])]
        return self.table().dataset(snap).to_table(columns=cols, filter=cond).sort_by("seq")

    def _wanted(self, rows: pa.Table, cur: Cursor) -> np.ndarray:
        seqs = rows["seq"].to_numpy()
        subjects = rows["subject"] if self.opts.filters else None
        return delivery_mask(seqs, subjects, self.opts.filters, cur.skip, cur.resume)

    def _check_gap(self, snap: Snapshot, cur: Cursor, upto: int) -> None:
        """Messages between the cursor and the stream's first sequence were removed unread."""
        first = self.first_seq(snap)
        if self.opts.fail_on_data_loss and cur.seq + 1 < first and cur.seq < upto:
            lost_to = min(first - 1, upto)
            raise DataLossError(
                f"jetstream source: stream {self.opts.stream}: messages {cur.seq + 1}..{lost_to} were removed "
                f"(purged, deleted or expired by a limit) before this query read them; the stream's first "
                f"sequence is now {first}. Set failOnDataLoss=false to skip them."
            )

    # -- admission control ---------------------------------------------------------------------
    def latest(
        self, cur: Cursor, max_rows: int | None, max_bytes: int | None, target: int | None = None
    ) -> Cursor:
        """The end of the next batch: at most ``max_rows`` messages / ``max_bytes`` stored bytes
        (at least one message), never past ``target`` (``Trigger.AvailableNow``)."""
        snap = self.snapshot()
        last = snap.last_seq if target is None else min(snap.last_seq, target)
        if last <= cur.seq:
            return cur
        self._check_gap(snap, cur, last)
        rows = self._scan(snap, cur.seq, last)
        wanted = self._wanted(rows, cur)
        seqs = rows["seq"].to_numpy()[wanted]
        k = len(seqs)
        if max_rows is not None:
            k = min(k, max_rows)
        if max_bytes is not None and k:
            sizes = np.cumsum(rows["size"].to_numpy()[wanted][:k])
            k = max(1, int(np.searchsorted(sizes, max_bytes, side="right")))
        end = last if k == len(seqs) else int(seqs[k - 1])
        return cur.advance(end, cur.dseq + k)

    def latest_available(self) -> int:
        return self.snapshot().last_seq

    # -- partitions ----------------------------------------------------------------------------
    def partitions(self, start: Cursor, end: Cursor | None) -> list[ReadPartition]:
        """Split ``(start, end]`` (``end=None``: everything now stored) into tasks over one
        pinned version; checks that no planned message has disappeared."""
        snap = self.snapshot()
        upto = snap.last_seq if end is None else end.seq
        if upto <= start.seq:
            return []
        self._check_gap(snap, start, upto)
        rows = self._scan(snap, start.seq, None)
        seqs_all = rows["seq"].to_numpy()
        wanted = self._wanted(rows, start)
        in_range = seqs_all <= upto
        seqs = seqs_all[wanted & in_range]
        tail = int(np.count_nonzero(wanted & ~in_range))
        if end is not None:
            expected = end.dseq - start.dseq
            if len(seqs) < expected and self.opts.fail_on_data_loss:
                raise DataLossError(
                    f"jetstream source: stream {self.opts.stream}: the batch over sequences "
                    f"{start.seq + 1}..{end.seq} must deliver {expected} messages but only {len(seqs)} are "
                    f"still stored (purged, deleted or expired by a limit; first sequence now "
                    f"{self.first_seq(snap)}). Set failOnDataLoss=false to skip them."
                )
        n = len(seqs)
        if n == 0:
            return []
        parts = max(self.opts.min_partitions, math.ceil(n / ROWS_PER_PARTITION))
        if self.opts.replay_original or self.opts.consumer.rate_limit_bps:
            parts = 1  # pacing is per task: one task keeps the stream's pace and rate
        parts = min(parts, n)
        bounds = np.linspace(0, n, parts + 1).astype(np.int64)
        files = self._files(snap)
        base = ReadPartition(
            uri=self.table().uri,
            version=snap.version,
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
            replay_original=self.opts.replay_original,
            rate_limit_bps=int(self.opts.consumer.rate_limit_bps),
            fail_on_data_loss=self.opts.fail_on_data_loss,
            storage_options=self.opts.storage_options,
        )
        out = []
        for i0, i1 in itertools.pairwise(bounds):
            lo = start.seq if i0 == 0 else int(seqs[i0 - 1])
            hi = int(seqs[i1 - 1])
            overlapping = tuple(p for p, fmin, fmax in files if fmax > lo and fmin <= hi)
            skip = tuple(s for s in start.skip if lo < s <= hi)
            out.append(
                replace(
                    base, lo=lo, hi=hi, files=overlapping, expected=int(i1 - i0),
                    dseq_base=start.dseq + int(i0), pending_after=tail + int(n - i1),
                    skip=skip, resume=start.resume if start.resume > lo else 0,
                )
            )
        return out

    def _files(self, snap: Snapshot) -> list[tuple[str, int, int]]:
        """(path, min seq, max seq) of each data file; files without stats span everything."""
        stats = self.table().file_stats(snap)
        if stats.num_rows == 0:
            return []
        paths = stats["path"].to_pylist()
        names = stats.column_names
        lo = stats["min.seq"].to_pylist() if "min.seq" in names else [None] * len(paths)
        hi = stats["max.seq"].to_pylist() if "max.seq" in names else [None] * len(paths)
        big = np.iinfo(np.int64).max
        return [(p, 0 if a is None else int(a), big if b is None else int(b)) for p, a, b in zip(paths, lo, hi, strict=True)]

