"""Which messages the stream's limits remove, computed over whole columns.

Given every live message after a publish (the index plus the new rows) this returns the
sequences that ``max_msgs_per_subject``, ``max_msgs``, ``max_bytes`` and ``max_age`` remove
under discard-old, in the server's order: per-subject first (keep the newest N of each
subject), then oldest-first for the totals, and age on its own. Discard-new rejections are
decided by the publisher before it gets here. Without TTLs or rollups, and with ages in seq
order, all of it is the oldest of some subjects and of the rest: ``oldest_removals`` finds it
reading from the head.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.arrays import take_rows
from jsspark.engine.schema import PARTITION_COLUMN


def per_subject_excess(rows: pa.Table, max_per_subject: int, only: pa.Array | None = None) -> np.ndarray:
    """Boolean mask over ``rows`` (sorted by seq): beyond the newest ``max_per_subject`` of its
    subject. ``only``: the subjects that can be over the limit (the others are not looked at:
    on a stream of a million subjects, a publish ranks the few it touches)."""
    n = rows.num_rows
    if max_per_subject <= 0 or n == 0:
        return np.zeros(n, dtype=bool)
    if only is not None:
        out = np.zeros(n, dtype=bool)
        if len(only):
            at = np.flatnonzero(pc.is_in(rows["subject"], value_set=only).to_numpy(zero_copy_only=False))
            out[at] = per_subject_excess(take_rows(rows, at), max_per_subject)
        return out
    codes = pc.dictionary_encode(rows["subject"]).combine_chunks().indices.to_numpy()
    # Walk newest-first: a message's rank is how many newer ones share its subject.
    return (_ranks(codes[::-1]) >= max_per_subject)[::-1]


def _ranks(codes: np.ndarray) -> np.ndarray:
    """Each element's rank among those with its code: how many before it have the same one."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_codes)) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(sorted_codes)]))
    ranks = np.empty(len(codes), dtype=np.int64)
    ranks[order] = np.arange(len(sorted_codes)) - group_start
    return ranks


def oldest_of_each(codes: np.ndarray, excess: np.ndarray) -> np.ndarray:
    """Mask over rows in seq order whose ``codes`` say which subject each is on: the oldest
    ``excess[code]`` of each subject (what ``max_msgs_per_subject`` pushes out of those over it)."""
    return _ranks(codes) < excess[codes]


def totals_excess(sizes: np.ndarray, max_msgs: int, max_bytes: int) -> np.ndarray:
    """Mask of the oldest messages to drop so the rest fit ``max_msgs`` and ``max_bytes``."""
    n = len(sizes)
    drop = np.zeros(n, dtype=bool)
    cut = 0
    if max_msgs >= 0 and n > max_msgs:
        cut = n - max_msgs
    if max_bytes >= 0 and n:
        suffix = np.cumsum(sizes[::-1])[::-1]  # bytes of message i and everything newer
        over = np.flatnonzero(suffix > max_bytes)
        if len(over):
            cut = max(cut, int(over[-1]) + 1)
    drop[:cut] = True
    return drop


def expired(ts_ns: np.ndarray, max_age_ns: int, now_ns: int, expires: np.ndarray | None = None) -> np.ndarray:
    """Past ``max_age``, unless the message's TTL is ``never`` (``expires`` -1); or past its
    own TTL (``expires`` > 0: when it expires; see ``expiry.Expiries``)."""
    out = ts_ns <= now_ns - max_age_ns if max_age_ns > 0 else np.zeros(len(ts_ns), dtype=bool)
    if expires is not None:
        out = (out & (expires != -1)) | ((expires > 0) & (expires <= now_ns))
    return out


def removal_mask(
    rows: pa.Table,
    *,
    max_msgs: int,
    max_bytes: int,
    max_per_subject: int,
    max_age_ns: int,
    now_ns: int,
    discard_old: bool,
    expires: np.ndarray | None = None,
    over_subjects: pa.Array | None = None,
) -> np.ndarray:
    """All limit removals over ``rows`` (sorted by seq), as one mask; ``expires`` are the
    rows' TTL expiries, when the stream has any; ``over_subjects``, when known, the subjects
    that may be over ``max_per_subject``. What expired by ``now_ns`` goes first and counts
    toward no limit: the server's timer removed it when it expired, before the store these
    limits follow (a due TTL message, which may be the newest, never pushes out the oldest)."""
    n = rows.num_rows
    drop = np.zeros(n, dtype=bool)
    if n == 0:
        return drop
    drop |= expired(rows["ts_ns"].to_numpy(), max_age_ns, now_ns, expires)
    alive = np.flatnonzero(~drop)
    left = rows if len(alive) == n else take_rows(rows, alive)
    # Per-subject limits discard the subject's oldest under either discard policy (the
    # publisher has already rejected what discard_new_per_subject forbids).
    excess = per_subject_excess(left, max_per_subject, over_subjects)
    if discard_old and (max_msgs >= 0 or max_bytes >= 0):
        within = np.flatnonzero(~excess)
        sizes = left["size"].to_numpy()[within]
        excess[within[totals_excess(sizes, max_msgs, max_bytes)]] = True
    drop[alive[excess]] = True
    return drop


HEAD_WINDOW = 4096  # the first rows ``oldest_removals`` reads (then 4 times as many, and so on)


def oldest_removals(
    head: Callable[[int], pa.Table],
    n: int,
    total_bytes: int,
    *,
    max_msgs: int,
    max_bytes: int,
    discard_old: bool,
    over: pa.Array | None = None,
    excess: np.ndarray | None = None,
    aged_ns: int | None = None,
) -> np.ndarray:
    """Positions of what ``removal_mask`` removes (without ages or TTLs) from ``n`` rows sorted
    by seq, ``head(k)`` giving the first ``k`` (``subject``, ``size``) and ``total_bytes`` their
    sizes' sum: the oldest ``excess`` of each ``over`` subject (those over ``max_msgs_per_subject``
    by that many), then the oldest of the rest past ``max_msgs`` / ``max_bytes``, and with
    ``aged_ns`` (the rows' ``ts_ns`` in order) those stored at or before it (``max_age``). All of
    it is at the head, so windows from the head grow until one holds it: a publish at a limit
    reads about what it removes, not the whole stream."""
    totals = discard_old and (max_msgs >= 0 or max_bytes >= 0)
    hi = 0
    while True:
        hi = min(n, max(HEAD_WINDOW, 4 * hi))
        part = head(hi)
        drop = np.zeros(hi, dtype=bool)
        complete = True
        if over is not None and excess is not None and len(over):
            codes = pc.fill_null(pc.index_in(part["subject"], value_set=over), -1).to_numpy()
            at = np.flatnonzero(codes >= 0)
            mine = codes[at]
            drop[at[oldest_of_each(mine, excess)]] = True
            complete = bool((np.bincount(mine, minlength=len(over)) >= excess).all())
        if complete and totals:
            alive = np.flatnonzero(~drop)
            sizes = part["size"].to_numpy()
            cut = max(0, n - int(drop.sum()) - max_msgs) if max_msgs >= 0 else 0
            if max_bytes >= 0:  # the bytes kept after dropping the first 0, 1, ... alive ones
                kept = total_bytes - int(sizes[drop].sum()) - np.r_[0, np.cumsum(sizes[alive])]
                fits = np.flatnonzero(kept <= max_bytes)
                complete = len(fits) > 0
                cut = max(cut, int(fits[0]) if complete else 0)
            complete = complete and cut <= len(alive)
            if complete:
                drop[alive[:cut]] = True
        if aged_ns is not None:  # aged on their own, after the totals (``removal_mask``'s order)
            aged = int(np.searchsorted(part["ts_ns"].to_numpy(), aged_ns, side="right"))
            drop[:aged] = True
            complete = complete and aged < hi
        if complete or hi == n:
            return np.flatnonzero(drop)


# A removal's Delta predicate names at most this many seq ranges. delta-rs evaluates every row
# against each range, and parses the predicate recursively: tens of thousands of ranges (a purge
# of one subject of two interleaved ones, a batch replacing thousands of keys) took minutes, and
# at about 30,000 its parser overflowed the stack and the process died
MAX_RANGES = 32


MAX_PARTS = 32  # partitions a confined removal may name (more: not confined)


@dataclass(frozen=True)
class SeqRemoval:
    """A commit's removal: a Delta ``predicate`` on ``seq``; with ``ranges`` (inclusive ``lo``,
    ``hi`` seqs) it names, the live seqs in them that go (``removed``) and those that stay
    (``kept``), which the commit writes again. With ``parts``, the predicate and the kept ones
    are confined to those values of the partition column."""

    predicate: str
    ranges: tuple[np.ndarray, np.ndarray] | None = None
    removed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    parts: tuple[str, ...] | None = None

    @classmethod
    def where(cls, predicate: str) -> SeqRemoval:
        """A predicate that matches exactly what goes."""
        return cls(predicate)


def seq_removal(
    all_seqs: np.ndarray, removed: np.ndarray, max_ranges: int = MAX_RANGES,
    parts: Callable[[np.ndarray], np.ndarray] | None = None, n_parts: int | None = None,
) -> SeqRemoval | None:
    """The removal of ``removed`` among ``all_seqs`` (both sorted, ``removed`` live): one range per
    run of consecutive live messages removed. Past ``max_ranges`` runs, the runs with the fewest
    live messages between them are joined, and those messages are kept (written again): the
    fewest possible for that many ranges.

    ``parts(positions)``: the partition values of the live messages at those positions (of
    ``all_seqs``; ``n_parts`` of them at most, if known). A removal that would keep messages is
    then confined to the partitions of the removed ones (an interest ack, a purge or a key
    replaced on one subject live in one partition): runs are counted among their messages
    only, and no message of another partition is kept, so another partition's files are
    neither rewritten nor read."""
    plain = _ranges(all_seqs, removed, max_ranges)
    if plain is None or parts is None or not len(plain.kept):
        return plain
    pos = np.searchsorted(all_seqs, removed)
    mine = np.unique(np.asarray(parts(pos), dtype=object))
    if len(mine) > MAX_PARTS or (n_parts is not None and len(mine) >= n_parts):
        return plain
    lo, hi = int(pos[0]), int(pos[-1]) + 1
    inside = np.isin(np.asarray(parts(np.arange(lo, hi)), dtype=object), mine)
    if inside.all():
        return plain
    confined = _ranges(all_seqs[lo:hi][inside], removed, max_ranges)
    assert confined is not None
    names = ", ".join("'" + str(v).replace("'", "''") + "'" for v in mine.tolist())
    return replace(confined, predicate=f"{PARTITION_COLUMN} IN ({names}) AND ({confined.predicate})",
                   parts=tuple(str(v) for v in mine.tolist()))


def _ranges(all_seqs: np.ndarray, removed: np.ndarray, max_ranges: int) -> SeqRemoval | None:
    """``seq_removal`` over every live message given."""
    if len(removed) == 0:
        return None
    pos = np.searchsorted(all_seqs, removed)
    breaks = np.flatnonzero(np.diff(pos) != 1) + 1
    starts = np.r_[0, breaks]
    ends = np.r_[breaks - 1, len(pos) - 1]
    kept = np.zeros(0, np.int64)
    if len(starts) > max_ranges:
        gaps = pos[starts[1:]] - pos[ends[:-1]] - 1  # live messages between one run and the next
        split = np.sort(np.argsort(gaps, kind="stable")[len(gaps) - (max_ranges - 1):])  # the widest gaps stay
        starts, ends = np.r_[starts[:1], starts[split + 1]], np.r_[ends[split], ends[-1:]]
        edges = np.zeros(len(all_seqs) + 1, dtype=np.int64)
        np.add.at(edges, pos[starts], 1)
        np.add.at(edges, pos[ends] + 1, -1)
        covered = np.cumsum(edges[:-1]) > 0
        covered[pos] = False
        kept = all_seqs[covered]
    lo, hi = removed[starts], removed[ends]
    terms = [f"seq = {a}" if a == b else f"(seq >= {a} AND seq <= {b})"
             for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    return SeqRemoval(" OR ".join(terms), (lo, hi), removed, kept)
