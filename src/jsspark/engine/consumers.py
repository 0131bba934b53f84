"""Durable consumers on lake streams: config and position kept in the catalog, with the server's
consumer semantics (``consumer.go``) computed from the stream's index.

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
    reset_generation how many resets happened; see below
    listed           [[stream_seq, consumer_seq], ...]: pending entries the index no longer
                     derives, all at or below ``listed_to``: deliveries under a filter since
                     changed (the server keeps them pending, ``updateConfig``), and the
                     deliveries around one a removal acked (``decStreamPending``) once their
                     numbering has a gap. Above ``listed_to`` pending is derived again.

Every change goes through ``Catalog.transact``: it is planned on the current record and
committed atomically, replanned on a concurrent change, so positions only move forward
(``record_delivered`` and ``ack`` never lower them). A reset is the one deliberate move
backwards; it bumps ``reset_generation``. A writer that read generation g before the reset
passes g to ``ack``/``record_delivered`` and its now stale position is ignored instead of
undoing the reset (an ack carrying a generation older than the record's is dropped).

Retention follows the server: on interest and work-queue streams a message is removed once
no consumer still needs it (``stream.ackMsg``, ``consumer.needAck``: its subject is one the
consumer is filtered on, or it is unfiltered, and the seq is above its ack floor; for an
explicit-ack consumer also not yet delivered, or pending). The
removal is a second commit, to the stream table, after the catalog commit; if a process dies
in between, ``check_interest`` finishes it.
"""

from __future__ import annotations

import calendar
import secrets
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.config import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    check_consumer_config,
    check_decodable,
)
from jsspark.config.defaults import SERVER_LEVEL_KEY, SERVER_VERSION_KEY, set_static_consumer_metadata
from jsspark.config.timestamps import UTCTime
from jsspark.engine import inactive
from jsspark.engine.api import GO_ZERO_TIME, ConsumerInfo, SequenceInfo
from jsspark.engine.arrays import take_rows
from jsspark.engine.catalog import Change, Key, Record
from jsspark.engine.index import MessageIndex
from jsspark.engine.rollups import NEVER, RolledUp
from jsspark.engine.rollups import SUBJECT as ROLLUP_SUBJECT
from jsspark.engine.stream import LakeStream
from jsspark.engine.table import Snapshot
from jsspark.errors import APIError, api_error
from jsspark.subjects import match_filter, subject_is_subset_match, subjects_collide

if TYPE_CHECKING:
    from jsspark.engine.lake import Lake

CONSUMER = "consumer"
SERVER_VERSION = "2.15.1"  # the server whose semantics these are, reported as responses do
API_LEVEL = 5
_WQ_ERRORS = (10098, 10101)  # checked after max_consumers by the server, before it by check_consumer_config
_NAME_CHARS = string.ascii_letters + string.digits


def _ns(t: UTCTime) -> int:
    """Go's ``t.UnixNano()``, which wraps around in int64 outside 1678-2262: a start time in
    year 2999 reads as a time before every message."""
    return (_unix_ns(t) + 2**63) % 2**64 - 2**63


def _unix_ns(t: UTCTime) -> int:
    """Nanoseconds since the epoch, unbounded."""
    return calendar.timegm(t.utctimetuple()) * 1_000_000_000 + t.microsecond * 1000 + t.nanosecond


def _pause_remaining(until_ns: int, now_ns: int) -> int:
    """What is left of a pause (0: not paused), saturating as Go's ``time.Until`` does."""
    return min(max(until_ns - now_ns, 0), 2**63 - 1)


def pause_left(cfg: ConsumerConfig, now_ns: int | None = None) -> int:
    """What is left of the consumer's pause now (0: not paused): while ``pause_until`` lies
    ahead the server delivers nothing (``loopAndGatherMsgs`` waits, ``isPaused``)."""
    if cfg.pause_until is None:
        return 0
    return _pause_remaining(_unix_ns(cfg.pause_until), time.time_ns() if now_ns is None else now_ns)


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
            sseq = view.seq_from_time(_ns(cfg.opt_start_time))
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


# -- the consumer API --------------------------------------------------------------------------
class Consumers:
    """Consumer create/info/delete/reset, positions and retention for one lake."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.catalog = lake.catalog

    # -- lookups ---------------------------------------------------------------------------
    def _get(self, records: dict[Key, Record], stream: str, name: str) -> Consumer:
        rec = records.get((CONSUMER, stream, name))
        if rec is None:
            raise api_error("JSConsumerNotFoundErr")
        return Consumer.of(rec)

    def _all(self, stream: str, records: dict[Key, Record] | None = None) -> list[Consumer]:
        recs = records if records is not None else self.catalog.records()
        return sorted(
            (Consumer.of(r) for (kind, s, _), r in recs.items() if kind == CONSUMER and s == stream),
            key=lambda c: c.name,
        )

    def info_of(
        self, c: Consumer, view: StreamView, reset_seq: int | None = None, counted: int | None = None
    ) -> ConsumerInfo:
        """``infoWithSnapAndReply`` from a stored consumer and the stream's current messages;
        ``counted``: its messages on its filters after its position, when counted already
        (``StreamView.counts_from``; a consumer without a skip list)."""
        st = c.state
        nxt = st.delivered.stream_seq + 1
        pending = 0
        if nxt <= view.last:
            if counted is None:
                ahead = view.ahead(st, nxt)
                deliverable = ahead.deliverable(c.filters, st)
                counted = int((deliverable & (ahead.seqs >= nxt)).sum())
            pending = min(counted, len(view.seqs), view.last - nxt + 1)
        ack_pending = len(view.pending(c.filters, st)) if c.config.ack_policy is not AckPolicy.NONE else 0
        now = time.time_ns()
        return ConsumerInfo(
            stream_name=c.stream,
            name=c.name,
            config=_with_dynamic_metadata(c.config),
            created_ns=c.created_ns,
            delivered=st.delivered.info(),
            ack_floor=st.ack_floor.info(),
            num_ack_pending=ack_pending,
            num_pending=pending,
            ts_ns=now,
            pause_remaining_ns=pause_left(c.config, now),
            reset_generation=st.reset_generation,
            reset_seq=reset_seq,
        )

    def info(self, stream: str, name: str) -> ConsumerInfo:
        engine = self.lake.stream(stream)
        self.expire(stream)
        c = self._get(self.catalog.records(), stream, name)
        return self.info_of(c, StreamView.of(engine))

    def infos(self, stream: str) -> list[ConsumerInfo]:
        """``$JS.API.CONSUMER.LIST``: every consumer but the direct ones (``getPublicConsumers``)."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        view = StreamView.of(engine)
        listed = [c for c in self._all(stream) if not c.config.direct]
        # the num_pending of consumers without a skip list, counted together (their spans overlap)
        plain = [c for c in listed if not (c.state.resume or c.state.skipped_below)]
        counts = view.counts_from([(c.filters, c.state.delivered.stream_seq + 1) for c in plain])
        counted = dict(zip([c.name for c in plain], counts, strict=True)) if counts is not None else {}
        return [self.info_of(c, view, counted=counted.get(c.name)) for c in listed]

    # -- create / update -------------------------------------------------------------------
    def add(
        self, stream: str, cfg: ConsumerConfig, action: str = "", at: ConsumerState | None = None
    ) -> ConsumerInfo:
        """``$JS.API.CONSUMER.CREATE``: ``action`` "" is create-or-update (what nats-py sends),
        "create" fails on a different existing config, "update" needs an existing consumer.

        ``at``: the position a consumer created here starts from instead of its deliver
        policy's start (a Spark query re-creating its deleted durable where its checkpoint
        stands); an existing consumer keeps its own."""
        check_decodable(cfg)  # the request is decoded before the stream is looked up
        engine = self.lake.stream(stream)
        self.expire(stream)
        scfg = engine.config
        if cfg.direct and cfg.sourcing and cfg.name:
            cfg = _named_direct_sourcing(cfg, scfg)
        deferred: APIError | None = None
        try:
            checked = check_consumer_config(cfg, scfg)
        except APIError as e:
            if e.err_code not in _WQ_ERRORS:
                raise
            deferred = e
            checked = check_consumer_config(cfg, scfg.model_copy(update={"retention": RetentionPolicy.LIMITS}))
        name = checked.durable_name or checked.name
        # a non-durable's 5 s inactive_threshold is stamped on what is stored, not on the request
        stamped = not checked.is_durable and cfg.inactive_threshold <= 0
        view = StreamView.of(engine)
        result: dict[str, Any] = {}

        def plan(records: dict[Key, Record]) -> list[Change]:
            result.clear()
            cfg_now = checked.model_copy(deep=True)
            others = self._all(stream, records)
            existing = next((c for c in others if c.name == name), None) if name else None
            if existing is not None:
                return self._update(existing, cfg_now, others, action, scfg, view, result, stamped)
            if action == "update":
                raise api_error("JSConsumerDoesNotExist")
            limitable = [c for c in others if c.limitable]
            maxc = int(scfg.max_consumers)
            # a direct or sourcing consumer is not limited, nor counted (2.15.1)
            if maxc > 0 and len(limitable) >= maxc and not (cfg_now.direct or cfg_now.sourcing):
                raise api_error("JSMaximumConsumersLimitErr")
            if deferred is not None:
                raise deferred
            if scfg.retention is RetentionPolicy.WORK_QUEUE and not (cfg_now.direct or cfg_now.sourcing) and limitable:
                mine = filters_of(cfg_now)
                if not mine:
                    raise api_error("JSConsumerWQMultipleUnfilteredErr")
                if not _partition_unique(name, mine, others):
                    raise api_error("JSConsumerWQConsumerNotUniqueErr")
            given = name
            if not given:  # the generated name is the consumer's, not its config's (as the server stores it)
                taken = {c.name for c in others}
                given = _random_name()
                while given in taken:
                    given = _random_name()
            if at is None:
                sseq, _, resume = select_starting_seq(view, cfg_now)
                at_now = ConsumerState.starting_at(sseq, resume)
            else:
                at_now = ConsumerState.from_json(at.to_json())  # a copy per replanning
            c = Consumer(stream, given, cfg_now, at_now, time.time_ns())
            result["consumer"] = c
            return [Change(CONSUMER, stream, c.name, c.body())]

        self.catalog.transact(plan)
        c = result["consumer"]
        if result.get("filters_changed") and scfg.retention is RetentionPolicy.INTEREST:
            # updateConfig: messages that lost interest go, checked from this consumer's floor
            self._remove_unneeded(engine, lambda v, _cs: v.seqs >= c.state.ack_floor.stream_seq)
        return self.info_of(c, StreamView.of(engine))

    def _update(
        self,
        existing: Consumer,
        cfg: ConsumerConfig,
        others: list[Consumer],
        action: str,
        scfg: StreamConfig,
        view: StreamView,
        result: dict[str, Any],
        stamped: bool = False,
    ) -> list[Change]:
        """The existing-consumer branch of ``addConsumerWithAssignmentAndMode``. ``create``
        compares the request with the stored config, which for a non-durable carries the 5 s
        inactive threshold the request did not (``stamped``): never the same, as on the server.
        A new filter keeps what the old one left pending (``updateConfig`` keeps ``o.pending``).
        ``pause_until`` is the existing consumer's whatever the request says
        (``jsConsumerCreateRequest``, before the static metadata and the comparison): only the
        pause API changes it. So are a durable sourcing consumer's deliver policy and start
        sequence (the request's are replaced there too)."""
        if cfg.pause_until != existing.config.pause_until:
            cfg.pause_until = existing.config.pause_until
            set_static_consumer_metadata(cfg)
        if cfg.sourcing and cfg.durable_name:  # a durable sourcing consumer keeps where it started
            cfg.deliver_policy, cfg.opt_start_seq = existing.config.deliver_policy, existing.config.opt_start_seq
        same = cfg.to_json() == existing.config.to_json()
        if action == "create" and (stamped or not same):
            raise api_error("JSConsumerAlreadyExists")
        if scfg.retention is RetentionPolicy.WORK_QUEUE and not _partition_unique(existing.name, filters_of(cfg), others):
            raise api_error("JSConsumerWQConsumerNotUniqueErr")
        result["consumer"] = existing
        if same:
            return []
        if (err := _update_error(existing.config, cfg)) is not None:
            raise err
        # ``updateConfig`` restarts the delete timer when the threshold changes: activity
        active = time.time_ns() if cfg.inactive_threshold != existing.config.inactive_threshold else None
        updated = replace(existing, config=cfg, active_ns=active or existing.active_ns)
        result["filters_changed"] = filters_of(cfg) != existing.filters
        if result["filters_changed"]:
            kept = _settled(updated, existing.state, view, view.pending(existing.filters, existing.state))
            updated = replace(updated, state=kept)
        result["consumer"] = updated
        return [Change(CONSUMER, existing.stream, existing.name, updated.body())]

    # -- pause -----------------------------------------------------------------------------
    def pause(self, stream: str, name: str, until: UTCTime | None) -> dict[str, Any]:
        """``$JS.API.CONSUMER.PAUSE`` (``jsConsumerPauseRequest``): set the consumer's
        ``pause_until`` (``None`` or Go's zero time resumes it) and the API level metadata that
        goes with it; creates and updates keep a consumer's pause, so this is how it changes.
        Answers the server's reply: ``paused``, ``pause_until`` (Go's zero time when resumed),
        ``pause_remaining`` (ns) while paused."""
        self.lake.stream(stream)  # the stream is looked up first (10059)
        self.expire(stream)
        if until is not None and until == UTCTime.parse(GO_ZERO_TIME):
            until = None

        def plan(records: dict[Key, Record]) -> list[Change]:
            c = self._get(records, stream, name)
            cfg = c.config.model_copy(deep=True)
            cfg.pause_until = until
            set_static_consumer_metadata(cfg)
            if cfg.to_json() == c.config.to_json():
                return []
            return [Change(CONSUMER, stream, name, replace(c, config=cfg).body())]

        self.catalog.transact(plan)
        out: dict[str, Any] = {"paused": False, "pause_until": GO_ZERO_TIME if until is None else until.to_rfc3339nano()}
        left = 0 if until is None else _pause_remaining(_unix_ns(until), time.time_ns())
        if left:
            out["paused"] = True
            out["pause_remaining"] = left
        return out

    # -- delete ----------------------------------------------------------------------------
    def delete(self, stream: str, name: str) -> bool:
        """Delete; on an interest stream messages nobody needs any more go with it, all of
        them when it was the last consumer (``cleanupNoInterestMessages``)."""
        self.expire(stream)
        return self._delete(stream, name)

    def _delete(self, stream: str, name: str, only_if: Callable[[Consumer], bool] | None = None) -> bool:
        """``delete``; with ``only_if``, only when the consumer (as the catalog holds it at the
        commit) still passes it, and a missing one is no error. Returns whether it went."""
        engine = self.lake.stream(stream)
        gone: dict[str, Consumer] = {}

        def plan(records: dict[Key, Record]) -> list[Change]:
            gone.clear()
            if only_if is not None:
                rec = records.get((CONSUMER, stream, name))
                if rec is None or not only_if(Consumer.of(rec)):
                    return []
            gone["c"] = self._get(records, stream, name)
            return [Change(CONSUMER, stream, name, None)]

        self.catalog.transact(plan)
        if not gone:
            return False
        if engine.config.retention is RetentionPolicy.INTEREST:
            floor = gone["c"].state.ack_floor.stream_seq
            self._remove_unneeded(engine, lambda v, cs: v.seqs >= floor if cs else np.ones(len(v.seqs), bool))
            if not self._all(stream):  # the server purges: a never-written stream then starts at 1
                engine.mark_purged()
        return True

    # -- inactivity ------------------------------------------------------------------------
    def expire(self, stream: str) -> list[str]:
        """Delete, as ``delete`` does, the consumers of ``stream`` whose inactive threshold has
        passed (``inactive.deadline``): what the server's delete timer did by now. Called first
        by every operation that reads or changes the stream's consumers or retention. Returns
        the names removed; reads nothing more than the catalog while none is due."""
        now = time.time_ns()
        due = [
            Consumer.of(r) for (kind, s, _), r in self.catalog.records().items()
            if kind == CONSUMER and s == stream and int(r.body["config"].get("inactive_threshold") or 0) > 0
        ]
        due = [c for c in due if (d := inactive.deadline(c, lambda: 0)) is not None and d <= now]  # at the earliest
        if not due:
            return []
        view = StreamView.of(self.lake.stream(stream))

        def expired(c: Consumer) -> bool:
            d = inactive.deadline(c, lambda: len(view.pending(c.filters, c.state)))
            return d is not None and d <= now

        return [c.name for c in due if self._delete(stream, c.name, only_if=expired)]

    def touch(self, stream: str, name: str) -> None:
        """Record activity (a pull) of a consumer with an inactive threshold; nothing for
        one without (the server tracks ``waiting.last`` only when ``dthresh > 0``)."""
        now = time.time_ns()

        def plan(records: dict[Key, Record]) -> list[Change]:
            c = self._get(records, stream, name)
            if not inactive.counts_pulls(c.config) or c.active_ns >= now:
                return []
            return [Change(CONSUMER, stream, name, c.body(active_ns=now))]

        self.catalog.transact(plan)

    # -- positions -------------------------------------------------------------------------
    def start_sequence(self, stream: str, cfg: ConsumerConfig) -> tuple[int, list[int]]:
        """Where a consumer with ``cfg`` created now would start, and its skip list."""
        sseq, skip, _ = select_starting_seq(StreamView.of(self.lake.stream(stream)), cfg)
        return sseq, skip

    def num_pending(self, stream: str, from_seq: int, filters: list[str] | str | None, last_per_subject: bool) -> int:
        flts = [filters] if isinstance(filters, str) else list(filters or [])
        return StreamView.of(self.lake.stream(stream)).num_pending(from_seq, flts, last_per_subject)

    def next_seqs(self, stream: str, name: str, limit: int) -> list[int]:
        """The next ``limit`` stream seqs the consumer delivers (skip list first, then matches).

        Fewer where ``max_ack_pending`` stops it: a consumer that acks delivers nothing more
        while that many are pending (``getNextMsg``; a pull request then waits), so at most
        ``max_ack_pending`` minus its pending acks. None while the consumer is paused
        (``pause_until`` ahead): the server's ``loopAndGatherMsgs`` delivers nothing then."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        c = self._get(self.catalog.records(), stream, name)
        if inactive.counts_pulls(c.config):  # a pull request is activity, paused or not
            self.touch(stream, name)
        if pause_left(c.config):
            return []
        view = StreamView.of(engine)
        maxp = int(c.config.max_ack_pending)
        if maxp > 0 and c.config.ack_policy is not AckPolicy.NONE:
            limit = min(limit, maxp - len(view.pending(c.filters, c.state)))
        if limit <= 0:
            return []
        after = c.state.delivered.stream_seq
        if not c.state.resume:  # no skip list: its matches after its position (and a used-up list's end)
            return view.first_matches(c.filters, max(after, c.state.skipped_below), limit)
        ahead = view.ahead(c.state, after + 1)
        mask = ahead.deliverable(c.filters, c.state) & (ahead.seqs > after)
        return [int(s) for s in ahead.seqs[mask][:limit]]

    def record_delivered(
        self, stream: str, name: str, stream_seq: int, consumer_seq: int | None = None,
        generation: int | None = None,
    ) -> bool:
        """Persist that everything up to ``stream_seq`` was delivered (only ever forward).

        ``consumer_seq`` defaults to the delivered count so far plus the deliverable messages
        up to ``stream_seq``. With ack policy none the ack floor follows, as the server acks
        on delivery, and on interest/work-queue streams those messages may go.
        """
        engine = self.lake.stream(stream)
        self.expire(stream)
        view = StreamView.of(engine)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            acked.clear()
            c = self._get(records, stream, name)
            st = c.state
            if (generation is not None and generation < st.reset_generation) or stream_seq <= st.delivered.stream_seq:
                return []
            none = c.config.ack_policy is AckPolicy.NONE
            ahead = view.ahead(st, min(st.ack_floor.stream_seq, st.delivered.stream_seq) + 1).upto(
                max(stream_seq, st.resume, st.skipped_below)
            )
            mask = ahead.delivered_or_due(c.filters, st) if consumer_seq is None or none else None
            dseq = consumer_seq
            if dseq is None:
                dseq = st.delivered.consumer_seq + ahead.count(mask, st.delivered.stream_seq, stream_seq)
            resume, skipped_to, skipped_below = st.resume, st.skipped_to, st.skipped_below
            if resume:  # hand out skip-list entries; once all are out, deliver normally
                left = view.skip_list(c.filters, st)
                handed = [x for x in left if x <= stream_seq]
                if len(handed) == len(left):
                    resume, skipped_to, skipped_below = 0, 0, resume
                elif handed:
                    skipped_to = handed[-1]
            new = replace(st, delivered=Position(dseq, stream_seq, now), resume=resume, skipped_to=skipped_to,
                          skipped_below=skipped_below)
            if none:  # acked on delivery: ``deliverMsg`` sets the floors without ``updateAcks`` (no last_active)
                new.ack_floor = Position(dseq, stream_seq, st.ack_floor.last_active_ns)
                covered = mask & (ahead.seqs > st.ack_floor.stream_seq) & (ahead.seqs <= stream_seq)
                acked.append(np.append(ahead.seqs[covered], stream_seq))
            active = now if inactive.counts_pulls(c.config) else None  # a pull consumer's delivery is activity
            return [Change(CONSUMER, stream, name, c.body(new, active_ns=active))]

        changed = bool(self.catalog.transact(plan))
        if acked:
            self._after_ack(engine, acked[0])
        return changed

    def ack(
        self, stream: str, name: str, stream_seq: int, consumer_seq: int | None = None,
        generation: int | None = None,
    ) -> bool:
        """An AckAll / flow-control ack (``processAckMsgLocked``): move the ack floor to
        ``(consumer_seq, stream_seq)``; returns whether it moved.

        Ignored: an ack at or beyond the next message to deliver unless the consumer has
        ``flow_control``; one not above both floors; one from before a reset (``generation``);
        any ack on an ack-none consumer. Explicit-ack consumers are acked cumulatively here
        (a lake reader acks in order). ``consumer_seq`` defaults to the delivery sequence of
        ``stream_seq``: its pending entry's, else counted from the delivered position.
        """
        engine = self.lake.stream(stream)
        self.expire(stream)
        view = StreamView.of(engine)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            acked.clear()
            c = self._get(records, stream, name)
            moves = floor_moves(c)
            if moves:
                return moves
            st = c.state
            if refreshes(c):  # an explicit ack of a delivered message: ``updateAcks`` stamps the floor's activity
                again = replace(st, ack_floor=replace(st.ack_floor, last_active_ns=now))
                return [Change(CONSUMER, stream, name, c.body(again, now))]
            if inactive.tracked(c.config):
                return [Change(CONSUMER, stream, name, c.body(active_ns=now))]  # any ack is activity (suppressDeletion)
            return []

        def refreshes(c: Consumer) -> bool:
            st = c.state
            return (
                c.config.ack_policy is AckPolicy.EXPLICIT
                and (generation is None or generation >= st.reset_generation)
                and (stream_seq <= st.delivered.stream_seq or c.config.flow_control)
            )

        def floor_moves(c: Consumer) -> list[Change]:
            st = c.state
            if generation is not None and generation < st.reset_generation:
                return []
            if c.config.ack_policy is AckPolicy.NONE:
                return []
            if stream_seq > st.delivered.stream_seq and not c.config.flow_control:
                return []
            pending = view.pending(c.filters, st)
            dseq = consumer_seq
            if dseq is None:
                d = st.delivered
                at = np.flatnonzero(pending.seqs == stream_seq)
                if len(at):
                    dseq = int(pending.dseqs[at[0]])
                else:  # not pending: numbered by what it delivers between it and the delivered position
                    ahead = view.ahead(st, min(stream_seq, d.stream_seq) + 1).upto(
                        max(stream_seq, d.stream_seq, st.resume, st.skipped_below)
                    )
                    mask = ahead.delivered_or_due(c.filters, st)
                    dseq = (
                        d.consumer_seq - ahead.count(mask, stream_seq, d.stream_seq)
                        if stream_seq <= d.stream_seq
                        else d.consumer_seq + ahead.count(mask, d.stream_seq, stream_seq)
                    )
            explicit = c.config.ack_policy is AckPolicy.EXPLICIT
            if stream_seq <= st.ack_floor.stream_seq:
                return []
            # an explicit ack takes a pending message whatever its delivery seq (a wider purge
            # can move the floor's delivery seq past older pending ones); an AckAll one must be
            # above the floor
            if dseq <= st.ack_floor.consumer_seq and not (explicit and stream_seq in pending.seqs):
                return []
            covered = pending.seqs <= stream_seq
            rest = pending.where(~covered)
            floor = Position(dseq, stream_seq, now)
            if explicit:
                # moveAckFloor: to just below the next delivery still pending, or to the
                # delivered position when none is
                floor = (
                    Position(int(rest.dseqs[0]) - 1, int(rest.seqs[0]) - 1, now)
                    if len(rest)
                    else Position(st.delivered.consumer_seq, st.delivered.stream_seq, now)
                )
            acked.append(np.append(pending.seqs[covered], stream_seq))
            return [
                Change(CONSUMER, stream, name, c.body(_settled(c, replace(st, ack_floor=floor), view, rest), now))
            ]

        self.catalog.transact(plan)
        changed = bool(acked)
        if acked:
            self._after_ack(engine, acked[0])
        return changed

    def reset(self, stream: str, name: str, seq: int | None = None) -> ConsumerInfo:
        """``$JS.API.CONSUMER.RESET`` (``resetStartingSeqLocked``): restart delivery at ``seq``
        (none or 0: just above the ack floor) with ``dseq=1`` and both floors at ``seq-1``."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        view = StreamView.of(engine)
        result: dict[str, Any] = {}

        def plan(records: dict[Key, Record]) -> list[Change]:
            result.clear()
            c = self._get(records, stream, name)
            cfg, st = c.config, c.state
            target = seq or 0
            if target == 0:
                target = st.ack_floor.stream_seq + 1
            elif cfg.deliver_policy is DeliverPolicy.BY_START_SEQUENCE:
                if target < cfg.opt_start_seq:
                    raise api_error("JSConsumerInvalidResetErr", err="below start seq")
            elif cfg.deliver_policy is DeliverPolicy.BY_START_TIME:
                assert cfg.opt_start_time is not None
                if target < view.seq_from_time(_ns(cfg.opt_start_time)):
                    raise api_error("JSConsumerInvalidResetErr", err="below start time")
            elif cfg.deliver_policy is not DeliverPolicy.ALL:
                raise api_error("JSConsumerInvalidResetErr", err="not allowed")
            target = max(target, 1)
            # the skip list is kept, as the server keeps ``o.lss``
            new = ConsumerState.starting_at(target, st.resume, st.skipped_to, st.reset_generation + 1)
            if st.resume:
                new.skip_gone, new.reset_handed = list(st.skip_gone), max(st.reset_handed, st.skipped_to)
            updated = replace(c, state=new)
            result.update(c=updated, seq=target)
            return [Change(CONSUMER, stream, name, updated.body())]

        self.catalog.transact(plan)
        c, target = result["c"], result["seq"]
        if engine.config.retention is RetentionPolicy.INTEREST and target - 1 <= engine.state().last_seq:
            # checkStateForInterestStream: this consumer's messages below the new start; none
            # when the new ack floor lies beyond the stream's last seq (errAckFloorHigherThanLastSeq)
            self._remove_unneeded(engine, lambda v, _cs: (v.seqs < target) & v.match(c.filters))
        return self.info_of(c, StreamView.of(engine), reset_seq=target)

    # -- retention -------------------------------------------------------------------------
    def _after_ack(self, engine: LakeStream, acked: np.ndarray) -> None:
        """``stream.ackMsg`` for each acked seq (what the consumer had pending up to the ack,
        and the acked seq itself): gone once no consumer needs it."""
        if engine.config.retention is RetentionPolicy.LIMITS or not len(acked):
            return
        self._remove_unneeded(engine, lambda v, _cs: np.isin(v.seqs, acked))

    def _remove_unneeded(
        self, engine: LakeStream, candidates: Callable[[StreamView, list[Consumer]], np.ndarray | bool],
    ) -> int:
        """Remove the candidate messages no consumer needs, deciding on the consumers as they
        are in the catalog when the removal is planned. No consumers: remove every candidate."""
        name = engine.name

        def choose(snap: Snapshot, index: MessageIndex) -> np.ndarray:
            view = StreamView(index.rows, snap.last_seq, engine.config)
            consumers = self._all(name)
            mask = np.broadcast_to(np.asarray(candidates(view, consumers), dtype=bool), view.seqs.shape)
            at = np.flatnonzero(mask)
            for c in consumers:  # each asked only about the candidates no earlier one needs
                if not len(at):
                    break
                at = at[~view.needed_by(c, at)]
            return view.seqs[at]

        return engine.remove_seqs(choose)

    def on_purge(self, stream: str, subject: str | None, before: StreamView) -> None:
        """What a stream purge does to its consumers (``stream.purge`` → ``consumer.purge``).

        A consumer whose filters lie within the purged subject (every consumer, for a full
        purge) moves its next delivery up to the first message left on the purged subject; one
        whose filters are wider starts from the stream's new first seq. If its ack floor lies
        below that point, pending (delivered, unacked) messages below it, and for a wider
        consumer the pending messages that are gone, are acked one by one as the server's
        consumer store does: the floor ends at the highest of them, or at the delivered position
        when nothing stays pending.
        ``before`` is the stream as it was before the purge.
        """
        engine = self.lake.stream(stream)
        snap, index = engine._load()
        view = StreamView(index.rows, snap.last_seq, engine.config)
        if subject:
            left = view.seqs[view.match([subject])]
            fseq = int(left[0]) if len(left) else 0
        else:
            fseq = view.first
        now = time.time_ns()

        def alive(seqs: np.ndarray) -> np.ndarray:
            return index.positions_of(seqs) >= 0  # (a few pending seqs: no pass over the stream's)

        def plan(records: dict[Key, Record]) -> list[Change]:
            changes = []
            for c in self._all(stream, records):
                target = _purge_target(c, subject, fseq, view.first)
                if target is None:
                    continue
                st = c.state
                moved, rest = _purged(st, before.pending(c.filters, st), *target, alive, view.last, now,
                                      c.config.ack_policy is not AckPolicy.EXPLICIT)
                new = _settled(c, moved, view, rest)
                if new != st:
                    changes.append(Change(CONSUMER, stream, c.name, c.body(new)))
            return changes

        self.catalog.transact(plan)

    def on_rollups(self, stream: str, rolled: RolledUp) -> None:
        """What a publish's rollups (or a landing's) do to consumers, each at its place among
        the limits' removals of that publish, as the server makes them message by message
        (``RolledUp``): a rollup purges its subject, or the stream, down to its message
        (``on_purge``; down to nothing when an interest stream did not store it), and when it
        removed exactly one message that one is also a single removal (``on_removed``); a
        message a limit pushed out is a single removal. Called after the publish's commit."""
        engine = self.lake.stream(stream)
        if not self._all(stream):
            return
        before = StreamView(pa.table({"seq": rolled.seqs, "subject": rolled.subjects}), 0, engine.config)
        view = StreamView.of(engine)
        events = _rollup_events(rolled, memory=engine.config.storage is StorageType.MEMORY)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            acked.clear()
            changes = []
            for c in self._all(stream, records):
                st = c.state
                moved, rest = st, before.pending(c.filters, st)
                for e in events:
                    target = _purge_target(c, *e.purge) if e.purge is not None else None
                    if target is not None and _moves(moved, target[0] or e.at + 1):
                        moved, rest = _purged(moved, rest, *target,
                                              lambda seqs, at=e.at: _alive_after(rolled, seqs, at), e.at, now,
                                              c.config.ack_policy is not AckPolicy.EXPLICIT)
                    if len(e.removed):
                        moved, rest, took = _removal_acked(c, moved, rest, e.removed, e.signals, now)
                        acked.append(took)
                new = _settled(c, moved, view, rest)
                if new != st:
                    changes.append(Change(CONSUMER, stream, c.name, c.body(new)))
            return changes

        self.catalog.transact(plan)
        if acked:
            self._after_ack(engine, np.concatenate(acked))

    def on_removed(
        self,
        stream: str,
        seqs: Sequence[int] | np.ndarray,
        subjects: Sequence[str] | pa.Array,
        matched_by: str | None = None,
    ) -> None:
        """What removing single messages does to consumers: a ``delete_msg`` or a limit
        (``max_msgs``, ``max_bytes``, ``max_msgs_per_subject``, ``max_age``) pushing them out, as
        ``stream.storeUpdates`` → ``consumer.decStreamPending``; purges go to ``on_purge``.

        Call it after the removing commit with the removed seqs and their subjects. A consumer
        whose filter takes the subject (``mset.csl``; ``matched_by`` instead when given) and has
        the message pending treats it as acked (``processTerm``): an ack-all consumer's floor
        moves up to it, acking what it had pending below, which on interest/work-queue streams
        may go; an explicit one drops it from pending and moves its floor past it if it was the
        oldest (``moveAckFloor``). A consumer's skip-list entries not yet handed out that go
        are kept as ``skip_gone``. Calling it again with the same messages changes nothing."""
        seqs = np.asarray(seqs, dtype=np.int64)
        if not any(_may_hold(c, seqs) or _may_skip(c, seqs) for c in self._all(stream)):
            return  # none can have them pending: nothing to tell, and the stream's view is not read
        order = np.argsort(seqs)
        seqs, subjects = seqs[order], pa.array(subjects, pa.string()).take(pa.array(order))
        signals = subjects if matched_by is None else pa.array([matched_by] * len(seqs), pa.string())
        engine = self.lake.stream(stream)
        view = StreamView.of(engine)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            acked.clear()
            told = [c for c in self._all(stream, records) if _may_hold(c, seqs) or _may_skip(c, seqs)]
            if not told:
                return []
            # below each floor (pending) and, during a skip list, below its entries not handed out
            above = min(min(c.state.ack_floor.stream_seq, c.state.skipped_to if c.state.resume else 2**63) for c in told)
            ends = [max(c.state.delivered.stream_seq, c.state.resume, c.state.skipped_below) for c in told]
            before = view.before_removal(seqs, subjects, above, max(ends))
            changes = []
            for c in told:
                st = c.state
                pending = before.pending(c.filters, st)
                gone = np.isin(seqs, np.array(before.skip_list(c.filters, st), dtype=np.int64))
                if gone.any():  # the list keeps them: their subjects' older messages take no place
                    entries = zip(seqs[gone].tolist(), subjects.filter(pa.array(gone)).to_pylist(), strict=True)
                    st = replace(st, skip_gone=[*st.skip_gone, *entries])
                moved, rest, took = _removal_acked(c, st, pending, seqs, signals, now)
                if moved is c.state:
                    continue
                acked.append(took)
                changes.append(Change(CONSUMER, stream, c.name, c.body(_settled(c, moved, view, rest))))
            return changes

        self.catalog.transact(plan)
        if acked:
            self._after_ack(engine, np.concatenate(acked))

    def to_interest(self, stream: str) -> int:
        """A retention change to interest (``updateWithAdvisory``): each consumer's
        ``checkStateForInterestStream`` offers what it is done with, on its filter, up to its
        ack floor, or up to its delivered seq when it has acks pending; each goes unless some
        consumer needs it. Without consumers every message goes."""
        engine = self.lake.stream(stream)

        def candidates(v: StreamView, cs: list[Consumer]) -> np.ndarray:
            if not cs:
                return np.ones(len(v.seqs), dtype=bool)
            mask = np.zeros(len(v.seqs), dtype=bool)
            for c in cs:
                st = c.state
                upto = st.ack_floor.stream_seq
                if st.delivered.stream_seq > upto and len(v.pending(c.filters, st)):
                    upto = st.delivered.stream_seq
                mask |= v.match(c.filters) & (v.seqs <= upto)
            return mask

        return self._remove_unneeded(engine, candidates)

    def check_interest(self, stream: str) -> int:
        """Remove every message at or below some consumer's ack floor, on its filter, that no
        consumer needs (``checkInterestState``); finishes removals a crash interrupted."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        if engine.config.retention is RetentionPolicy.LIMITS:
            return 0

        def candidates(v: StreamView, cs: list[Consumer]) -> np.ndarray:
            mask = np.zeros(len(v.seqs), dtype=bool)
            for c in cs:
                mask |= v.match(c.filters) & (v.seqs <= c.state.ack_floor.stream_seq)
            return mask

        return self._remove_unneeded(engine, candidates)


def _purge_target(c: Consumer, subject: str | None, subject_first: int, stream_first: int) -> tuple[int, bool] | None:
    """Where a purge moves consumer ``c`` (``purgeLocked``): ``(start, wider)``, or None when
    the purged ``subject`` is outside its filters. Within the subject (every consumer for a
    full purge) it starts at the first message left on the subject (``subject_first``; 0 for
    none, then after the stream's last); a wider one at the stream's new first seq."""
    filters = c.filters or [">"]
    if subject and not all(subject_is_subset_match(f, subject) for f in filters):
        if not any(subjects_collide(f, subject) for f in filters):
            return None
        return stream_first, True
    return (subject_first if subject else stream_first), False


def _purged(
    st: ConsumerState, pending: Pending, start: int, wider: bool, alive: Callable[[np.ndarray], np.ndarray],
    last: int, now: int, acks_all: bool,
) -> tuple[ConsumerState, Pending]:
    """``consumer.purge(start, last, wider)`` on state ``st`` with its ``pending`` acks: the
    position moves up to ``start``; if the ack floor lies below it, pending messages below it
    go, and for a wider consumer those no longer stored (``alive`` says which are). Returns
    the new state and what stays pending. Activity times move only with acks: ``ack_floor``'s
    when pending entries are dropped (``updateAcks``), ``delivered``'s never."""
    if start == 0 and not wider:
        start = last + 1
    delivered, floor = st.delivered, st.ack_floor
    if delivered.stream_seq + 1 < start:
        delivered = Position(delivered.consumer_seq, start - 1, delivered.last_active_ns)
    if not len(pending):  # nothing pending: the floor is the position
        if (delivered.consumer_seq, delivered.stream_seq) == (floor.consumer_seq, floor.stream_seq):
            return (st if delivered is st.delivered else replace(st, delivered=delivered, ack_floor=floor)), pending
        moved = Position(delivered.consumer_seq, delivered.stream_seq, floor.last_active_ns)
        return replace(st, delivered=delivered, ack_floor=moved), pending
    drop = np.zeros(len(pending), dtype=bool)
    if floor.stream_seq < start:  # pending is looked at only when the floor moves
        drop = pending.seqs < start
        if wider:  # and what the purge removed (or was already gone)
            drop |= ~alive(pending.seqs)
    dropped = pending.where(drop)
    # the in-memory floor the server reports: stream part start-1 for what lies below the new
    # start, for an ack-all consumer moved to a wider purge's highest purged pending (2.15.1;
    # not for explicit acks), the consumer part to the highest dropped delivery
    floor_sseq = max(floor.stream_seq, start - 1)
    floor_dseq = floor.consumer_seq
    if len(dropped):
        p = int(dropped.seqs[-1])
        floor_dseq = max(floor_dseq, int(dropped.dseqs.max()))
        if wider and acks_all and not alive(np.array([p], np.int64))[0]:
            floor_sseq = max(floor_sseq, p)
    if (floor_dseq, floor_sseq) != (floor.consumer_seq, floor.stream_seq):
        floor = Position(floor_dseq, floor_sseq, now if len(dropped) else floor.last_active_ns)
    if len(dropped) == len(pending):  # nothing stays pending
        floor = Position(delivered.consumer_seq, delivered.stream_seq, now)
    if (delivered, floor) == (st.delivered, st.ack_floor):
        return st, pending.where(~drop)
    return replace(st, delivered=delivered, ack_floor=floor), pending.where(~drop)


def _moves(st: ConsumerState, start: int) -> bool:
    """Whether a purge to ``start`` changes the consumer: its position or floor lie below it
    (``consumer.purge`` looks at pending only then)."""
    return st.delivered.stream_seq + 1 < start or st.ack_floor.stream_seq < start


def _removal_acked(
    c: Consumer, st: ConsumerState, pending: Pending, seqs: np.ndarray, signals: pa.Array, now: int
) -> tuple[ConsumerState, Pending, np.ndarray]:
    """``decStreamPending`` for removed ``seqs`` (each signalled on a subject of ``signals``):
    those ``c`` takes and has pending are acked (``_terminated``). Returns the state (``st``
    itself when nothing changed), what stays pending, and the seqs the acks cover (AckAll:
    what was pending below; none for explicit acks)."""
    none = np.zeros(0, np.int64)
    if c.config.ack_policy is AckPolicy.NONE or not len(pending):
        return st, pending, none
    theirs = seqs[match_filter(signals, c.filters or [">"]).to_numpy(zero_copy_only=False)]
    hit = np.isin(pending.seqs, theirs)
    if not hit.any():
        return st, pending, none
    floor, left = _terminated(c.config.ack_policy, st, pending, hit, now)
    took = pending.seqs[~left] if c.config.ack_policy is not AckPolicy.EXPLICIT else none
    return replace(st, ack_floor=floor), pending.where(left), took


@dataclass(frozen=True)
class _Removal:
    """One step of a publish's removals, as consumers see it: at message ``at``, a purge
    (``purge``: subject or None, first left on it, the stream's first seq) and/or single
    removals (``removed`` seqs, each signalled on ``signals``)."""

    at: int
    purge: tuple[str | None, int, int] | None
    removed: np.ndarray
    signals: pa.Array


_NO_SIGNALS = pa.array([], pa.string())


def purge_signal(own: str, purged: str | None, memory: bool) -> str:
    """The subject a store reports a purge of exactly one message on (``PurgeEx``), which the
    consumers' filters are matched against (``decStreamPending``): the file store the purge's
    subject (``>`` for the whole stream), the memory store the message's own."""
    return own if memory else purged or ">"


def _rollup_events(rolled: RolledUp, memory: bool) -> list[_Removal]:
    """A publish's removals in the order the server's consumers see them: for a rollup
    message ``at``, its purge (``consumer.purge``, made at once), then its one purged message
    as a single removal when the purge removed exactly one (signalled on ``purge_signal``);
    the messages a limit pushed out when message ``at`` was stored (``at`` 0: an expiry) are single removals
    too. A single removal is acked in a goroutine (``decStreamPending`` → ``processTerm``), so
    after the purge of the same message."""
    seqs, moments = rolled.seqs, rolled.moments
    reach = np.maximum.accumulate(moments) if len(moments) else moments  # first row alive after ``at``
    events: list[_Removal] = []
    limited = np.flatnonzero(~rolled.rolled & (moments != NEVER))
    for m in np.unique(moments[limited]):
        rows = limited[moments[limited] == m]
        events.append(_Removal(int(m), None, seqs[rows], rolled.subjects.take(pa.array(rows))))
    purged = np.flatnonzero(rolled.rolled)
    at, where, count = np.unique(moments[purged], return_index=True, return_counts=True)
    alone = dict(zip(at[count == 1].tolist(), purged[where[count == 1]].tolist(), strict=True))  # purges of one
    ats = np.array([r.seq for r in rolled.rollups], dtype=np.int64)
    ks = np.searchsorted(reach, ats, side="right")
    for r, kept, k in zip(rolled.rollups, rolled.kept, ks.tolist(), strict=True):
        first = int(seqs[k]) if k < len(seqs) and seqs[k] <= r.seq else r.seq + 1
        subject = r.subject if r.kind == ROLLUP_SUBJECT else None
        one, signals = alone.get(r.seq), _NO_SIGNALS
        if one is not None:
            signals = pa.array([purge_signal(rolled.subjects[one].as_py(), subject, memory)], pa.string())
        events.append(_Removal(r.seq, (subject, r.seq if kept else 0, first),
                               seqs[one : one + 1] if one is not None else seqs[:0], signals))
    events.sort(key=lambda e: (e.at, e.purge is None))
    return events


def _alive_after(rolled: RolledUp, seqs: np.ndarray, at: int) -> np.ndarray:
    """Which of ``seqs`` are stored right after the publish's message ``at`` (rolled up)."""
    pos = np.searchsorted(rolled.seqs, seqs)
    found = pos < len(rolled.seqs)
    found[found] = rolled.seqs[pos[found]] == seqs[found]
    out = np.zeros(len(seqs), dtype=bool)
    out[found] = rolled.moments[pos[found]] > at
    return out


def _settled(c: Consumer, st: ConsumerState, view: StreamView, rest: Pending) -> ConsumerState:
    """``st`` (of ``c``, with its new floor) with ``rest`` as its pending acks: derived from the
    index where that gives them back exactly, listed where it does not any more."""
    rest = rest.where(rest.seqs > st.ack_floor.stream_seq)
    still = set(rest.seqs.tolist())
    listed = [e for e in st.listed if e[0] in still]
    trial = replace(st, listed=listed, listed_to=st.listed_to if listed else 0)
    if view.pending(c.filters, trial).same(rest):
        return trial
    return replace(st, listed=rest.entries(), listed_to=st.delivered.stream_seq)


def _may_hold(c: Consumer, seqs: np.ndarray) -> bool:
    """Whether any of ``seqs`` can be among the consumer's pending acks: it acks, and one lies
    above its ack floor up to its delivered position (listed entries too lie there)."""
    st = c.state
    return c.config.ack_policy is not AckPolicy.NONE and bool(
        ((seqs > st.ack_floor.stream_seq) & (seqs <= st.delivered.stream_seq)).any()
    )


def _may_skip(c: Consumer, seqs: np.ndarray) -> bool:
    """Whether any of ``seqs`` can be an entry of the consumer's skip list not yet handed out."""
    st = c.state
    return bool(st.resume) and bool(((seqs > st.skipped_to) & (seqs <= st.resume)).any())


def _terminated(
    policy: AckPolicy, st: ConsumerState, pending: Pending, hit: np.ndarray, now: int
) -> tuple[Position, np.ndarray]:
    """A consumer's floor, and which pending entries stay, once the ``hit`` ones are acked one
    by one in stream order (``processTerm`` → ``processAckMsgLocked``). Explicit: the entry goes
    and the floor moves past it if it was the oldest (``moveAckFloor``). Ack-all: unless at or
    below the floor (then it stays pending), the floor moves to it and everything up to it goes."""
    floor = st.ack_floor
    left = np.ones(len(pending), dtype=bool)
    for i in np.flatnonzero(hit):
        sseq, dseq = int(pending.seqs[i]), int(pending.dseqs[i])
        if policy is not AckPolicy.EXPLICIT:
            if dseq > floor.consumer_seq and sseq > floor.stream_seq:
                floor = Position(dseq, sseq, now)
                left &= pending.seqs > sseq
            continue
        left[i] = False
        if not left.any():
            return Position(st.delivered.consumer_seq, st.delivered.stream_seq, now), left
        if dseq == floor.consumer_seq + 1:
            floor = Position(dseq, sseq, now)
            later = np.flatnonzero(left[i + 1 :])
            if len(later):
                j = i + 1 + int(later[0])
                floor = Position(int(pending.dseqs[j]) - 1, int(pending.seqs[j]) - 1, now)
    return floor, left


def _partition_unique(name: str, partitions: list[str], others: list[Consumer]) -> bool:
    """The server's ``partitionUnique`` over the other limitable consumers."""
    for part in partitions:
        for o in others:
            if o.name == name or not o.limitable:
                continue
            theirs = o.filters
            if not theirs or any(subjects_collide(part, f) for f in theirs):
                return False
    return True


def _update_error(old: ConsumerConfig, new: ConsumerConfig) -> APIError | None:
    """``checkNewConsumerConfig``: what an update may not change (500/10012 with the text)."""

    def fail(text: str) -> APIError:
        return api_error("JSConsumerCreateErrF", err=text)

    checks = [
        (old.deliver_policy != new.deliver_policy, "deliver policy can not be updated"),
        (old.mem_storage != new.mem_storage, "storage type can not be updated"),
        (old.direct != new.direct, "direct can not be updated"),
        (old.sourcing != new.sourcing, "sourcing can not be updated"),
        (old.opt_start_seq != new.opt_start_seq, "start sequence can not be updated"),
        (old.opt_start_time != new.opt_start_time, "start time can not be updated"),
        (old.ack_policy != new.ack_policy, "ack policy can not be updated"),
        (old.replay_policy != new.replay_policy, "replay policy can not be updated"),
        (old.idle_heartbeat != new.idle_heartbeat, "heart beats can not be updated"),
        (old.flow_control != new.flow_control, "flow control can not be updated"),
    ]
    for bad, text in checks:
        if bad:
            return fail(text)
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            return fail("can not update pull consumer to push based")
        if not new.deliver_subject:
            return fail("can not update push consumer to pull based")
    if old.max_waiting != new.max_waiting:
        return fail("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        return api_error("JSConsumerMaxDeliverBackoffErr")
    return None


def _with_dynamic_metadata(cfg: ConsumerConfig) -> ConsumerConfig:
    """``setDynamicConsumerMetadata``: responses carry the server version and API level,
    stored configs do not."""
    out = cfg.model_copy(deep=True)
    out.metadata = {**out.metadata, SERVER_VERSION_KEY: SERVER_VERSION, SERVER_LEVEL_KEY: str(API_LEVEL)}
    return out


def _named_direct_sourcing(cfg: ConsumerConfig, scfg: StreamConfig) -> ConsumerConfig:
    """``jsConsumerCreateRequest`` on a standalone server: a named direct sourcing consumer
    becomes a durable ``flow_control`` one of that name on an interest or work-queue stream
    (so it is acked, not removed on delivery), and elsewhere gets a random suffix (the
    source's name is stable)."""
    if scfg.retention is RetentionPolicy.LIMITS:
        return cfg.model_copy(update={"name": f"{cfg.name}-{_random_name()}"})
    return cfg.model_copy(update={
        "direct": False, "durable_name": cfg.name, "ack_policy": AckPolicy.FLOW_CONTROL,
        "ack_wait": 0, "max_deliver": 0, "inactive_threshold": 0,
    })


def _random_name() -> str:
    """An ephemeral's generated name (the server hashes a nuid to 8 characters)."""
    return "".join(secrets.choice(_NAME_CHARS) for _ in range(8))


__all__ = ["ConsumerState", "Consumers", "StreamView", "filters_of", "is_filtered", "pause_left", "select_starting_seq"]
