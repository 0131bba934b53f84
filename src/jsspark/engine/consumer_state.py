"""A durable consumer's persisted state, and what it derives from the stream's index: what the
server's consumer store keeps (delivered, ack floor, pending acks) and the store queries a
consumer makes (``StreamView``). ``consumers.Consumers`` changes that state, in the catalog.

A consumer is the catalog record ``("consumer", stream, name)`` with body
``{"config": <server JSON>, "state": {...}, "created_ns": ..., ["active_ns": ...]}`` (``active_ns``:
the last activity of a consumer with an ``inactive_threshold``, see ``inactive``). The state is what the server's
consumer store keeps, with the per-message pending map (``o.pending``) mostly derived instead of
stored: a lake reader delivers in stream order and acks cumulatively, so what it has pending
is its filter's messages above the ack floor up to the delivered position, numbered back from
there (``StreamView.pending``). Where that no longer holds, the entries are listed:

    delivered        {consumer_seq, stream_seq, last_active_ns}: the last delivered message
    ack_floor        {consumer_seq, stream_seq, last_active_ns}: everything at or below is acked
    resume           deliver_policy last_per_subject only: the stream's last seq at creation;
                     the skip list is the last message per matching subject at or below it
    skipped_to       the last skip-list entry handed out (a reset keeps the skip list, as the
                     server keeps ``o.lss``); both are 0 once the list is used up
    skipped_below    the ``resume`` of a used-up skip list, until a reset: the messages it
                     jumped over were never delivered, so they are not pending acks
    reset_handed     after a reset during a skip list: the last entry handed out before it; the
                     server's list went on past those (``o.lss``) and the reset cleared their
                     pending acks, so they are neither delivered again nor pending
    skip_gone        [[stream_seq, subject], ...]: skip-list entries removed before they were
                     handed out (a delete, an expiry); the server's list was fixed at creation,
                     so each is skipped and its subject's older message never takes its place
    reset_generation how many resets happened (``consumers`` says what a writer does with it)
    listed           [[stream_seq, consumer_seq], ...]: pending entries the index no longer
                     derives, all at or below ``listed_to``: deliveries under a filter since
                     changed (the server keeps them pending, ``updateConfig``), and the
                     deliveries around one a removal acked (``decStreamPending``) once their
                     numbering has a gap. Above ``listed_to`` pending is derived again.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.config import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from jsspark.config.timestamps import UTCTime
from jsspark.engine import inactive
from jsspark.engine.api import SequenceInfo
from jsspark.engine.arrays import take_rows
from jsspark.engine.catalog import Record
from jsspark.engine.stream import LakeStream
from jsspark.subjects import match_filter


def go_unix_nano(t: UTCTime) -> int:
    """Go's ``t.UnixNano()``, which wraps around in int64 outside 1678-2262: a start time in
    year 2999 reads as a time before every message."""
    return (unix_ns(t) + 2**63) % 2**64 - 2**63


def unix_ns(t: UTCTime) -> int:
    """Nanoseconds since the epoch, unbounded."""
    return calendar.timegm(t.utctimetuple()) * 1_000_000_000 + t.microsecond * 1000 + t.nanosecond


def pause_remaining(until_ns: int, now_ns: int) -> int:
    """What is left of a pause (0: not paused), saturating as Go's ``time.Until`` does."""
    return min(max(until_ns - now_ns, 0), 2**63 - 1)


def pause_left(cfg: ConsumerConfig, now_ns: int | None = None) -> int:
    """What is left of the consumer's pause now (0: not paused): while ``pause_until`` lies
    ahead the server delivers nothing (``loopAndGatherMsgs`` waits, ``isPaused``)."""
    if cfg.pause_until is None:
        return 0
    return pause_remaining(unix_ns(cfg.pause_until), time.time_ns() if now_ns is None else now_ns)


def filters_of(cfg: ConsumerConfig | dict[str, Any]) -> list[str]:
    """The server's ``gatherSubjectFilters``: ``filter_subjects`` plus ``filter_subject``."""
    if isinstance(cfg, ConsumerConfig):
        return [*cfg.filter_subjects, *([cfg.filter_subject] if cfg.filter_subject else [])]
    return [*(cfg.get("filter_subjects") or []), *([cfg["filter_subject"]] if cfg.get("filter_subject") else [])]


def is_filtered(filters: list[str], stream: StreamConfig) -> bool:
    """The server's ``isFiltered``: filters equal to the stream's subjects do not filter."""
    if not filters:
        return False
    subjects = stream.subjects or [stream.name]
    if len(subjects) == 1 and len(filters) == 1:
        return subjects[0] != filters[0]
    return len(subjects) != len(filters) or set(subjects) != set(filters)


# -- persisted state ---------------------------------------------------------------------------
@dataclass
class Position:
    consumer_seq: int = 0
    stream_seq: int = 0
    last_active_ns: int = 0

    def to_json(self) -> dict[str, int]:
        return {"consumer_seq": self.consumer_seq, "stream_seq": self.stream_seq, "last_active_ns": self.last_active_ns}

    @classmethod
    def from_json(cls, d: dict[str, int]) -> Position:
        return cls(int(d["consumer_seq"]), int(d["stream_seq"]), int(d.get("last_active_ns", 0)))

    def info(self) -> SequenceInfo:
        return SequenceInfo(self.consumer_seq, self.stream_seq, self.last_active_ns or None)


@dataclass
class ConsumerState:
    delivered: Position = field(default_factory=Position)
    ack_floor: Position = field(default_factory=Position)
    resume: int = 0
    skipped_to: int = 0
    reset_generation: int = 0
    skipped_below: int = 0
    listed: list[tuple[int, int]] = field(default_factory=list)
    listed_to: int = 0
    skip_gone: list[tuple[int, str]] = field(default_factory=list)
    reset_handed: int = 0

    @classmethod
    def starting_at(cls, sseq: int, resume: int = 0, skipped_to: int = 0, generation: int = 0) -> ConsumerState:
        """A consumer about to deliver ``sseq`` first: ``dseq=1``, floors at ``sseq-1``."""
        return cls(Position(0, sseq - 1), Position(0, sseq - 1), resume, skipped_to, generation)

    def to_json(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered.to_json(),
            "ack_floor": self.ack_floor.to_json(),
            "resume": self.resume,
            "skipped_to": self.skipped_to,
            "reset_generation": self.reset_generation,
            "skipped_below": self.skipped_below,
            "listed": [list(e) for e in self.listed],
            "listed_to": self.listed_to,
            "skip_gone": [list(e) for e in self.skip_gone],
            "reset_handed": self.reset_handed,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConsumerState:
        return cls(
            Position.from_json(d["delivered"]),
            Position.from_json(d["ack_floor"]),
            int(d.get("resume", 0)),
            int(d.get("skipped_to", 0)),
            int(d.get("reset_generation", 0)),
            int(d.get("skipped_below", 0)),
            [(int(s), int(n)) for s, n in d.get("listed", [])],
            int(d.get("listed_to", 0)),
            [(int(s), str(subj)) for s, subj in d.get("skip_gone", [])],
            int(d.get("reset_handed", 0)),
        )


@dataclass(frozen=True)
class Consumer:
    """One catalog record, decoded."""

    stream: str
    name: str
    config: ConsumerConfig
    state: ConsumerState
    created_ns: int
    active_ns: int = 0  # last activity (pull, delivery, ack) of a consumer with an inactive threshold

    @classmethod
    def of(cls, rec: Record) -> Consumer:
        return cls(
            rec.stream, rec.name, ConsumerConfig.from_stored(rec.body["config"]),
            ConsumerState.from_json(rec.body["state"]), int(rec.body["created_ns"]), int(rec.body.get("active_ns", 0)),
        )

    def body(self, state: ConsumerState | None = None, active_ns: int | None = None) -> dict[str, Any]:
        """The record; ``active_ns`` stamps activity (kept only while the consumer tracks it)."""
        out = {"config": self.config.to_json(), "state": (state or self.state).to_json(), "created_ns": self.created_ns}
        active = self.active_ns if active_ns is None else active_ns
        if active and inactive.tracked(self.config):
            out["active_ns"] = max(active, self.active_ns)
        return out

    @property
    def last_active_ns(self) -> int:
        """Its creation or last activity, whichever is later (the server's timer starts at creation)."""
        return max(self.created_ns, self.active_ns)

    @property
    def filters(self) -> list[str]:
        return filters_of(self.config)

    @property
    def limitable(self) -> bool:
        """Counted for ``max_consumers`` and work-queue partitions (``numLimitableConsumers``)."""
        return not (self.config.direct or self.config.sourcing)


# -- the stream as a consumer sees it ----------------------------------------------------------
@dataclass(frozen=True)
class Pending:
    """A consumer's pending acks (the server's ``o.pending``): stream seqs, ascending, and the
    delivery seq each went out with."""

    seqs: np.ndarray
    dseqs: np.ndarray

    def __len__(self) -> int:
        return len(self.seqs)

    def where(self, mask: np.ndarray) -> Pending:
        return Pending(self.seqs[mask], self.dseqs[mask])

    def same(self, other: Pending) -> bool:
        return np.array_equal(self.seqs, other.seqs) and np.array_equal(self.dseqs, other.dseqs)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.seqs.tolist(), self.dseqs.tolist(), strict=True))


class StreamView:
    """A stream's live messages and first/last seq, for the store queries consumers make
    (``FastState``, ``FilteredState``, ``MultiLastSeqs``, ``GetSeqFromTime``, ``NumPending``).
    ``rows`` are the index's rows (``seq`` ascending, ``subject``, ``ts_ns``)."""

    def __init__(self, rows: pa.Table, last_seq: int, config: StreamConfig) -> None:
        self.rows = rows
        self.config = config
        self.seqs = rows["seq"].to_numpy()
        self.last = max(last_seq, int(self.seqs[-1]) if len(self.seqs) else 0)
        self.first = int(self.seqs[0]) if len(self.seqs) else self.last + 1

    @classmethod
    def of(cls, engine: LakeStream) -> StreamView:
        snap, index = engine._load()  # one refresh of the table: the index and last seq agree
        return cls(index.rows, snap.last_seq, engine.config)

    def before_removal(self, seqs: np.ndarray, subjects: pa.Array, above: int, upto: int) -> StreamView:
        """The messages in ``(above, upto]`` as they were before ``seqs`` (on ``subjects``) were
        removed: enough for the pending acks of consumers whose floors are at or above ``above``
        and whose positions (and skip lists) end at or below ``upto`` (a message's being last on
        its subject depends only on later ones). Seqs and subjects only."""
        lo, hi = np.searchsorted(self.seqs, [above, upto], side="right")
        kept = self.rows.select(["seq", "subject"]).slice(int(lo), int(hi - lo))
        back = pa.table([pa.array(seqs, pa.int64()), subjects], names=["seq", "subject"]).cast(kept.schema)
        inside = pc.and_(pc.greater(back["seq"], above), pc.less_equal(back["seq"], upto))
        rows = pa.concat_tables([kept, back.filter(inside)]).sort_by("seq")
        return StreamView(rows, self.last, self.config)

    def followed_by(self, later: StreamView) -> StreamView:
        """These messages, then ``later``'s past this view's last: a view taken before a removal,
        continued with what was published after it (seqs and subjects only)."""
        head = self.rows.select(["seq", "subject"])
        tail = later.rows.select(head.column_names).slice(int(np.searchsorted(later.seqs, self.last, side="right")))
        view = StreamView(pa.concat_tables([head, tail.cast(head.schema)]), later.last, self.config)
        view.first = self.first
        return view

    def from_seq(self, seq: int) -> StreamView:
        """The messages at or after ``seq``, with the same first and last seq: what a position
        in the stream needs, matched without the messages before it."""
        start = int(np.searchsorted(self.seqs, seq))
        if not start:
            return self
        view = StreamView(self.rows.slice(start), self.last, self.config)
        view.first = self.first
        return view

    def upto(self, seq: int) -> StreamView:
        """The messages at or before ``seq``, with the same first and last seq: what counting up
        to a position needs (``delivered_or_due`` up to it, once it is at or past a skip list's
        end, does not depend on later messages)."""
        end = int(np.searchsorted(self.seqs, seq, side="right"))
        if end == len(self.seqs):
            return self
        view = StreamView(self.rows.slice(0, end), self.last, self.config)
        view.first = self.first
        return view

    def first_matches(self, filters: list[str], after: int, limit: int) -> list[int]:
        """The first ``limit`` live seqs above ``after`` on ``filters`` (``match``'s), matched in
        windows from there (4096 messages, then 4 times as many): a pull reads about what it
        delivers, not everything ahead of it."""
        lo, n, window = int(np.searchsorted(self.seqs, after, side="right")), len(self.seqs), 4096
        found: list[int] = []
        while lo < n and len(found) < limit:
            seqs = self.seqs[lo : lo + window]
            if filters:
                hit = match_filter(self.rows["subject"].slice(lo, window), filters)
                seqs = seqs[hit.to_numpy(zero_copy_only=False)]
            found.extend(seqs[: limit - len(found)].tolist())
            lo, window = lo + window, window * 4
        return found

    def ahead(self, st: ConsumerState, seq: int) -> StreamView:
        """``from_seq(seq)`` for what a consumer in state ``st`` delivers at or after ``seq``
        (``deliverable``, ``delivered_or_due``): the whole view while ``seq`` is within its skip
        list, whose entries are decided on the messages before it."""
        return self if seq <= (st.resume or st.skipped_below) else self.from_seq(seq)

    def match(self, filters: list[str]) -> np.ndarray:
        """Live messages on any of ``filters`` (no filter: all of them)."""
        if not filters:
            return np.ones(len(self.seqs), dtype=bool)
        return match_filter(self.rows["subject"], filters).to_numpy(zero_copy_only=False)

    def needed_by(self, c: Consumer, at: np.ndarray | None = None) -> np.ndarray:
        """``needAck`` for every live message (or those at positions ``at``, ascending): in the
        consumer's filter and above its ack floor; for an explicit-ack consumer also not
        delivered yet or still pending (it does not need what it delivered under another
        filter, or never delivered below its position). Asked for a few positions, only those
        are matched, and pending acks are derived only when one of them lies in
        ``(floor, delivered]``: an ack on an interest stream asks for every consumer."""
        st = c.state
        if at is not None and len(at) == len(self.seqs):
            at = None
        seqs = self.seqs if at is None else self.seqs[at]
        mask = seqs > st.ack_floor.stream_seq
        if not mask.any():
            return mask
        if is_filtered(c.filters, self.config):
            if at is None:
                mask &= self.match(c.filters)
            else:
                inside = np.flatnonzero(mask)
                subjects = take_rows(self.rows.select(["subject"]), at[inside])["subject"]
                mask[inside] = match_filter(subjects, c.filters).to_numpy(zero_copy_only=False)
        if c.config.ack_policy is AckPolicy.EXPLICIT:
            delivered = mask & (seqs <= st.delivered.stream_seq)
            if delivered.any():
                mask[delivered] = np.isin(seqs[delivered], self.pending(c.filters, st).seqs)
        return mask

    def seq_from_time(self, t_ns: int) -> int:
        """``GetSeqFromTime``: the first seq stored at or after ``t_ns``, else last+1."""
        ts = self.rows["ts_ns"].to_numpy()
        hit = np.flatnonzero(ts >= t_ns)
        return int(self.seqs[hit[0]]) if len(hit) else self.last + 1

    def multi_last_seqs(self, filters: list[str], max_seq: int = 0) -> list[int]:
        """``MultiLastSeqs``: per matching subject its last seq at or below ``max_seq``, ascending."""
        mask = self.match(filters)
        if max_seq:
            mask &= self.seqs <= max_seq
        rows = self.rows.filter(pa.array(mask))
        if not rows.num_rows:
            return []
        lasts = rows.group_by("subject", use_threads=False).aggregate([("seq", "max")])["seq_max"]
        return sorted(int(s) for s in lasts.to_pylist())

    def skip_entries(self, filters: list[str], st: ConsumerState, end: int) -> list[int]:
        """The skip list's entries up to ``end``: the last message per subject, as it was when
        the list was made. An entry removed since (``skip_gone``) still stands for its subject,
        so the subject's older message is no entry, and is left out itself."""
        if not st.skip_gone:
            return self.multi_last_seqs(filters, end)
        rows = self.rows.select(["seq", "subject"])
        gone = pa.table({"seq": [e[0] for e in st.skip_gone], "subject": [e[1] for e in st.skip_gone]}).cast(rows.schema)
        lasts = StreamView(pa.concat_tables([rows, gone]).sort_by("seq"), self.last, self.config).multi_last_seqs(filters, end)
        removed = {e[0] for e in st.skip_gone}
        return [s for s in lasts if s not in removed]

    def skip_list(self, filters: list[str], st: ConsumerState) -> list[int]:
        """What is left of a last-per-subject skip list: the last message per subject up to
        ``resume``, minus the entries already handed out (up to ``skipped_to``)."""
        if not st.resume:
            return []
        return [s for s in self.skip_entries(filters, st, st.resume) if s > st.skipped_to]

    def deliverable(self, filters: list[str], st: ConsumerState) -> np.ndarray:
        """What a consumer delivers, in order: the rest of its skip list and then every match
        after ``resume``; without a skip list every match."""
        mask = self.match(filters)
        if st.resume:
            skip = np.isin(self.seqs, np.array(self.skip_list(filters, st), dtype=np.int64))
            mask = (mask & (self.seqs > st.resume)) | skip
        elif st.skipped_below:  # a used-up list goes on after its ``resume`` (the server's ``o.sseq``)
            mask &= self.seqs > st.skipped_below
        return mask

    def delivered_or_due(self, filters: list[str], st: ConsumerState) -> np.ndarray:
        """What a consumer delivers or has delivered, for counting deliveries and pending acks
        (the server's pending map): the whole skip list, handed out or not, and every match
        after it. The messages a skip list jumped over were never delivered, also once it is
        used up (``skipped_below``); after a reset, the entries it handed out before are not
        due again (``reset_handed``)."""
        end = st.resume or st.skipped_below
        mask = self.match(filters)
        if end:
            lasts = np.array([s for s in self.skip_entries(filters, st, end) if s > st.reset_handed], dtype=np.int64)
            mask = (mask & (self.seqs > end)) | np.isin(self.seqs, lasts)
        return mask

    def pending(self, filters: list[str], st: ConsumerState) -> Pending:
        """The consumer's pending acks: its listed entries above the ack floor, then what it
        delivered above them (``delivered_or_due`` in ``(floor, delivered]``), numbered back
        from the delivered position."""
        floor = st.ack_floor.stream_seq
        start = int(np.searchsorted(self.seqs, max(floor, st.listed_to), side="right"))
        derived = self.seqs[:0]
        if start < int(np.searchsorted(self.seqs, st.delivered.stream_seq, side="right")):
            # only the messages above the floor matter (being last on a subject depends on later
            # ones), up to the delivered position or the skip list's end, whichever is later
            last = max(st.delivered.stream_seq, st.resume, st.skipped_below)
            end = int(np.searchsorted(self.seqs, last, side="right"))
            above = StreamView(self.rows.slice(start, end - start), self.last, self.config)
            due = above.delivered_or_due(filters, st) & (above.seqs <= st.delivered.stream_seq)
            derived = above.seqs[due]
        numbers = st.delivered.consumer_seq - np.arange(len(derived) - 1, -1, -1, dtype=np.int64)
        listed = np.array([e for e in st.listed if e[0] > floor], dtype=np.int64).reshape(-1, 2)
        return Pending(np.concatenate([listed[:, 0], derived]), np.concatenate([listed[:, 1], numbers]))

    def num_pending(self, sseq: int, filters: list[str], last_per_subject: bool = False) -> int:
        """The store's ``NumPending(sseq, filter, lastPerSubject)``: matching messages at or after
        ``sseq``, or with ``last_per_subject`` the subjects whose last message is."""
        sseq = max(sseq, self.first)
        if sseq > self.last:
            return 0
        tail = self.from_seq(sseq)
        mask = tail.match(filters)
        if not last_per_subject:
            return int(mask.sum())
        return len(pc.unique(tail.rows["subject"].filter(pa.array(mask))))

    def counts_from(self, asks: Sequence[tuple[list[str], int]]) -> list[int] | None:
        """For each ``(filters, seq)``: the live messages on ``filters`` at or after ``seq``
        (``from_seq(seq).match(filters)``'s), for many at once, as a listing of lagging
        consumers asks. The subjects from the earliest ``seq`` on are encoded once and each
        filter is matched against the distinct ones; a count is the per-subject counts from its
        ``seq`` on (kept while sweeping back from the end) over its subjects, or, from a ``seq``
        with fewer messages after it than distinct subjects, its subjects' rows gathered.
        None when the spans overlap too little for this to pay (each is then matched alone)."""
        n = len(self.seqs)
        starts = np.searchsorted(self.seqs, np.array([s for _, s in asks], dtype=np.int64))
        lo = int(starts.min()) if len(asks) else n
        if len(asks) < 2 or int((n - starts).sum()) <= 2 * (n - lo):
            return None
        enc = pc.dictionary_encode(self.rows["subject"].slice(lo)).combine_chunks()
        codes, names = enc.indices.to_numpy(), enc.dictionary
        k = len(names)
        matched: dict[tuple[str, ...], np.ndarray] = {}
        ahead, hi = np.zeros(k, dtype=np.int64), n  # per subject, its messages at positions [hi, n)
        out = [0] * len(asks)
        for i in np.argsort(-starts, kind="stable").tolist():  # the latest seq first
            filters, start = asks[i][0], int(starts[i])
            on = matched.get(tuple(filters))
            if on is None:
                on = matched[tuple(filters)] = (
                    match_filter(names, filters).to_numpy(zero_copy_only=False)
                    if filters
                    else np.ones(k, dtype=bool)
                )
            if n - start < k:  # few after it: gathered (``ahead`` stays where it was)
                out[i] = int(np.count_nonzero(on[codes[start - lo :]]))
                continue
            ahead += np.bincount(codes[start - lo : hi - lo], minlength=k)
            hi = start
            out[i] = int(ahead[on].sum())
        return out

    def count(self, mask: np.ndarray, lo: int, hi: int) -> int:
        """How many of ``mask`` lie in ``(lo, hi]``."""
        return int((mask & (self.seqs > lo) & (self.seqs <= hi)).sum())


def select_starting_seq(view: StreamView, cfg: ConsumerConfig) -> tuple[int, list[int], int]:
    """The server's ``selectStartingSeqNo``: ``(sseq, skip_list, resume)``.

    ``view.first``/``view.last`` stand for ``FastState``'s; a never-written stream reads as
    first 1, last 0 here (the server: 0, 0), which every branch and clamp maps the same way.
    """
    filters = filters_of(cfg)
    first, last = view.first, view.last
    skip: list[int] = []
    resume = 0
    dp = cfg.deliver_policy
    if cfg.opt_start_seq == 0:
        if dp is DeliverPolicy.ALL:
            sseq = first
        elif dp is DeliverPolicy.LAST:
            if not filters:
                sseq = last
            else:
                sseq = 0
                for f in filters:
                    if f == ">":  # ``FilteredState(1, ">")`` answers the stream's last seq, stored or not
                        sseq = max(sseq, last)
                        continue
                    hits = view.seqs[view.match([f])]
                    if len(hits) and int(hits[-1]) > sseq:
                        sseq = int(hits[-1])
        elif dp is DeliverPolicy.LAST_PER_SUBJECT:
            if int(view.config.max_msgs_per_subject) == 1:
                sseq = first
            else:
                skip = view.multi_last_seqs(filters)
                resume = last if skip else 0  # an empty skip list is never consulted
                sseq = skip[0] if skip else last
        elif cfg.opt_start_time is not None:
            sseq = view.seq_from_time(go_unix_nano(cfg.opt_start_time))
            if filters:
                # jump to the nearest first match at or after the time's seq, as the server does
                nseq = last
                for f in filters:
                    hits = view.seqs[view.match([f])]
                    f_first = int(hits[0]) if len(hits) else 0
                    if sseq <= f_first < nseq:
                        nseq = f_first
                if sseq < nseq < last:
                    sseq = nseq
        else:  # new
            sseq = last + 1
    else:
        sseq = int(cfg.opt_start_seq)

    if sseq > last and cfg.opt_start_seq == 0:
        sseq = last + 1
    elif sseq < first:
        sseq = first
    return sseq, skip, resume
