"""The per-stream index a publisher keeps in memory, as nats-server keeps its stream state.

It holds every live message's ``seq, ts_ns, subject, msg_id, size`` (no payloads, no
headers), sorted by sequence, as of one table version, plus per-subject counts and last
sequences. Publishing needs it for what the server answers from memory: the last sequence of
a subject, per-subject counts, the dedup window's message ids, which messages a limit
removes. It is built once per process from the table's narrow columns and then kept current
with each commit this process makes (in time proportional to the commit, not the stream); after
commits by other writers it is carried forward by the files their log entries added and removed
(``IndexStore.caught_up``), and rebuilt only when the log cannot tell.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.arrays import drop_rows, take_rows
from jsspark.engine.schema import INDEX_COLUMNS, MAX_SEQ, MESSAGE_SCHEMA
from jsspark.engine.subject_stats import SubjectGroups, SubjectStats

INDEX_SCHEMA = pa.schema([MESSAGE_SCHEMA.field(c) for c in INDEX_COLUMNS])
TAIL_WINDOW = 4096  # the newest rows ``positions_on`` reads first (then 4 times as many, and so on)


def _groups(rows: pa.Table) -> SubjectGroups:
    return SubjectGroups.of(rows["subject"], rows["seq"].to_numpy())


class MessageIndex:
    def __init__(
        self, rows: pa.Table, version: int, *, ordered: bool = False, subjects: SubjectStats | None = None
    ) -> None:
        """``ordered``: ``rows`` are already sorted by seq; ``subjects``: their per-subject stats,
        when known (both from a persisted index, see index_store.py)."""
        rows = rows.select(INDEX_COLUMNS).cast(INDEX_SCHEMA)
        self.rows = rows if ordered else rows.sort_by("seq")
        self.version = version
        self._subjects: SubjectStats | None = subjects
        self._bytes: int | None = None
        self._seqs: np.ndarray | None = None
        self._ts_ordered: bool | None = None
        self._planned_removal: tuple[np.ndarray, SubjectGroups] | None = None

    def frozen(self) -> MessageIndex:
        """A view of the index as it is now, unaffected by later ``apply`` calls (the rows are
        immutable Arrow data, so this copies nothing)."""
        view = copy.copy(self)
        view._subjects = None
        return view

    @classmethod
    def empty(cls, version: int) -> MessageIndex:
        return cls(INDEX_SCHEMA.empty_table(), version)

    # -- change ------------------------------------------------------------------------------
    def apply(
        self, added: pa.Table | None, removed: np.ndarray | None, version: int, added_groups: SubjectGroups | None = None
    ) -> None:
        """Fold in one commit: ``added`` rows (seq above all current) and ``removed`` seqs."""
        rows = self.rows
        if added is not None and added.num_rows:
            added = added.select(INDEX_COLUMNS).cast(INDEX_SCHEMA)
            if self._subjects is not None:  # counted in first: a subject whose message is replaced never empties
                self._subjects.add(added_groups or _groups(added))
        if removed is not None and len(removed):
            pos = self.positions_of(np.asarray(removed, dtype=np.int64))
            pos = pos[pos >= 0]
            if len(pos) > 1 and not (pos[1:] > pos[:-1]).all():  # (removed seqs come sorted)
                pos = np.unique(np.sort(pos))
            if len(pos) and pos[-1] == len(pos) - 1:  # the oldest messages (max_msgs, max_age, ...): a slice
                gone, left = rows.slice(0, len(pos)), rows.slice(len(pos))
            else:
                gone, left = take_rows(rows, pos), drop_rows(rows, pos)
            planned = self._planned_removal
            groups = planned[1] if planned is not None and np.array_equal(planned[0], pos) else None
            self._forget(gone, left, groups)
            rows = left
        self._planned_removal = None
        if added is not None and added.num_rows:
            if self._ts_ordered:  # (a removal keeps the rest in order)
                self._ts_ordered = self.ts_ordered_after(rows, added)
            if self._bytes is not None:
                self._bytes += int(pc.sum(added["size"]).as_py() or 0)
            rows = pa.concat_tables([rows, added])
        if rows.column("seq").num_chunks > 64:  # appends and few-row removals add chunks
            rows = rows.combine_chunks()
        self.rows = rows
        self.version = version
        self._seqs = None

    def _forget(self, gone: pa.Table, left: pa.Table, groups: SubjectGroups | None = None) -> None:
        if self._bytes is not None:
            self._bytes -= int(pc.sum(gone["size"]).as_py() or 0)
        if self._subjects is None or not gone.num_rows:
            return
        g = groups or _groups(gone)
        pos = self._subjects.positions_of(g)
        # a subject's last message went but others stay: its new last is the max of what is left
        lost_last = (g.last == self._subjects.last[pos]) & (self._subjects.counts[pos] > g.counts)
        left_of_lost = None
        if lost_last.any():
            names = g.names.filter(pa.array(lost_last))
            left_of_lost = _groups(left.filter(pc.is_in(left["subject"], value_set=names)))
        self._subjects.remove(g, left_of_lost)

    # -- state -------------------------------------------------------------------------------
    @property
    def msgs(self) -> int:
        return self.rows.num_rows

    @property
    def bytes(self) -> int:
        if self._bytes is None:
            self._bytes = int(pc.sum(self.rows["size"]).as_py() or 0) if self.rows.num_rows else 0
        return self._bytes

    def first(self) -> tuple[int, int] | None:
        """(seq, ts_ns) of the oldest live message."""
        if not self.rows.num_rows:
            return None
        return int(self.rows["seq"][0].as_py()), int(self.rows["ts_ns"][0].as_py())

    def ts_ordered(self) -> bool:
        """Whether the live messages' timestamps never decrease with their seqs (a publisher's
        never do; a mirror's are its origin's), so that those past an age are the oldest:
        checked once, then kept current."""
        if self._ts_ordered is None:
            ts = self.rows["ts_ns"].to_numpy()
            self._ts_ordered = bool((ts[1:] >= ts[:-1]).all())
        return self._ts_ordered

    @staticmethod
    def ts_ordered_after(rows: pa.Table, added: pa.Table) -> bool:
        """Whether ``added`` (seqs above ``rows``') keeps ``rows``, in order, in order."""
        ts = added["ts_ns"].to_numpy()
        after = not rows.num_rows or int(ts[0]) >= int(rows["ts_ns"][rows.num_rows - 1].as_py())
        return after and bool((ts[1:] >= ts[:-1]).all())

    def subjects_if_known(self) -> SubjectStats | None:
        """The per-subject stats when computed (None: ``subjects`` would build them)."""
        return self._subjects

    def subjects(self) -> SubjectStats:
        """Per-subject counts and last sequences, built once and then kept current."""
        if self._subjects is None:
            self._subjects = SubjectStats(_groups(self.rows))
        return self._subjects

    def subject_stats(self) -> pa.Table:
        """Per subject ``msgs`` and ``last_seq`` as an Arrow table (for filtered lookups)."""
        return self.subjects().table()

    @property
    def num_subjects(self) -> int:
        return len(self.subjects())

    def state_after(
        self,
        added: pa.Table,
        removed_mask: np.ndarray | None,
        last_seq: int,
        last_ts_ns: int,
        added_groups: SubjectGroups | None = None,
    ) -> dict[str, Any]:
        """The stream state if ``added`` rows were stored and ``removed_mask`` (over the current
        rows) removed, without applying either."""
        rows = self.rows
        n_old = rows.num_rows
        gone = np.flatnonzero(removed_mask) if removed_mask is not None else np.zeros(0, np.int64)
        removed = take_rows(rows, gone) if len(gone) else None
        removed_groups = _groups(removed) if removed is not None else None
        # the commit that follows removes the same rows: ``apply`` takes their groups from here
        self._planned_removal = (gone, removed_groups) if removed_groups is not None else None
        msgs = n_old - len(gone) + added.num_rows
        size = self.bytes + int(pc.sum(added["size"]).as_py() or 0) - (
            int(pc.sum(removed["size"]).as_py() or 0) if removed is not None else 0
        )
        first_seq, first_ts = (last_seq + 1 if last_seq else 0), 0  # a never-written stream reads 0/0
        if msgs:
            if n_old > len(gone):  # the oldest message left: the first not removed
                i = 0 if removed is None else int(np.argmin(removed_mask))
                first_seq, first_ts = int(rows["seq"][i].as_py()), int(rows["ts_ns"][i].as_py())
            else:
                first_seq, first_ts = int(added["seq"][0].as_py()), int(added["ts_ns"][0].as_py())
        num_subjects = self.subjects().count_after(added_groups or _groups(added), removed_groups)
        return {
            "messages": msgs,
            "bytes": size,
            "first_seq": first_seq,
            "first_ts_ns": first_ts,
            "last_seq": last_seq,
            "last_ts_ns": last_ts_ns,
            "num_subjects": num_subjects,
            "num_deleted": (last_seq - first_seq + 1 - msgs) if msgs else 0,
        }

    # -- lookups -----------------------------------------------------------------------------
    def seq_array(self) -> np.ndarray:
        """All live seqs, ascending, as one numpy array (cached until the next change)."""
        if self._seqs is None:
            self._seqs = self.rows["seq"].to_numpy()
        return self._seqs

    def positions_of(self, seqs: np.ndarray) -> np.ndarray:
        """Row positions of ``seqs``; -1 for a seq that is not live. Binary search: O(log n)."""
        all_seqs = self.seq_array()
        pos = np.searchsorted(all_seqs, seqs)
        found = (pos < len(all_seqs)) & (all_seqs[np.minimum(pos, len(all_seqs) - 1)] == seqs) if len(all_seqs) else (
            np.zeros(len(seqs), dtype=bool)
        )
        return np.where(found, pos, -1)

    def has(self, seq: int) -> bool:
        if not 0 < seq <= MAX_SEQ:  # a uint64 past the int64 column is never stored
            return False
        return bool(self.positions_of(np.array([seq]))[0] >= 0)


    def last_seq_of(self, subject: str) -> int:
        """Last sequence stored on a literal subject, 0 if none."""
        return self.subjects().last_seq(subject)

    def last_seqs_before(self, seq: int, subjects: Sequence[str] | pa.Array | None = None) -> pa.Table:
        """Columns ``subject``, ``last_seq``: each subject's last live sequence below ``seq``.

        With ``subjects`` (literal subjects), one row per distinct subject, 0 where none is
        below ``seq``; answered from the per-subject stats where they decide it (unknown
        subject; last seq below ``seq``; every live message of the subject at or after
        ``seq``), else by walking back from ``seq`` over growing windows of the index until
        each is found, so the cost follows the distance to the previous occurrences, not the
        stream. Without ``subjects``, every subject that has a live message below ``seq``.
        """
        cut = int(np.searchsorted(self.seq_array(), seq))  # rows [0, cut) are below seq
        if subjects is None:
            g = _groups(self.rows.slice(0, cut))
            return pa.table({"subject": g.names, "last_seq": pa.array(g.last, pa.int64())})
        names = subjects if isinstance(subjects, pa.Array) else pa.array(list(subjects), pa.string())
        names = pc.unique(names.cast(pa.string())).drop_null()
        out = dict.fromkeys(names.to_pylist(), 0)
        stats = self.subjects()
        pos = stats.positions(names)
        known = pos >= 0
        last = stats.last[np.maximum(pos, 0)] if len(stats) else np.zeros(len(names), np.int64)
        below = known & (last < seq)
        out.update(zip(names.filter(pa.array(below)).to_pylist(), last[below].tolist(), strict=True))
        pending = names.filter(pa.array(known & ~below))
        if len(pending) and cut:
            tail = self.rows.slice(cut)
            tail = tail.filter(pc.is_in(tail["subject"], value_set=pending))
            if tail.num_rows:  # all of a subject's live messages at or after seq: none before it
                g = SubjectGroups.of(tail["subject"], tail["seq"].to_numpy())
                only_after = g.names.filter(pa.array(stats.counts_of(g.names) == g.counts))
                pending = pending.filter(pc.invert(pc.is_in(pending, value_set=only_after)))
        hi, window = cut, 4096
        while len(pending) and hi > 0:
            lo = max(0, hi - window)
            part = self.rows.slice(lo, hi - lo)
            hit = part.filter(pc.is_in(part["subject"], value_set=pending))
            if hit.num_rows:
                g = SubjectGroups.of(hit["subject"], hit["seq"].to_numpy())
                out.update(zip(g.names.to_pylist(), g.last.tolist(), strict=True))
                pending = pending.filter(pc.invert(pc.is_in(pending, value_set=g.names)))
            hi, window = lo, window * 4
        return pa.table({"subject": pa.array(list(out), pa.string()),
                         "last_seq": pa.array(list(out.values()), pa.int64())})

    def positions_on(self, subjects: pa.Array) -> np.ndarray:
        """Row positions (ascending) of every live message on the literal ``subjects``.

        The subject stats say how many there are, so the rows are searched from the newest
        back over growing windows until all are found: the cost follows how far back the
        oldest of them lies, not the stream (a subject rolled up or replaced again and again
        has its one message near the end; one never stored costs nothing)."""
        found = self._walk_back(subjects, 0)
        assert found is not None
        return found

    def positions_among_newest(self, subjects: pa.Array) -> np.ndarray | None:
        """``positions_on`` if every message on ``subjects`` is among the newest ``TAIL_WINDOW``
        rows, else None."""
        return self._walk_back(subjects, max(0, self.rows.num_rows - TAIL_WINDOW))

    def _walk_back(self, subjects: pa.Array, stop: int) -> np.ndarray | None:
        names = pc.unique(subjects.cast(pa.string())).drop_null()
        need = int(self.subjects().counts_of(names).sum()) if len(names) else 0
        found: list[np.ndarray] = []
        col = self.rows["subject"]
        hi, window = self.rows.num_rows, TAIL_WINDOW
        while need > 0 and hi > stop:
            lo = max(stop, hi - window)
            hit = pc.is_in(col.slice(lo, hi - lo), value_set=names)
            at = np.flatnonzero(hit.to_numpy(zero_copy_only=False)) + lo
            found.append(at)
            need -= len(at)
            hi, window = lo, window * 4
        if need > 0:
            return None
        return np.concatenate(found[::-1]) if found else np.zeros(0, np.int64)

    def last_msg_id(self) -> str:
        """The msg id of the newest stored message ('' if it had none, as the server compares)."""
        if not self.rows.num_rows:
            return ""
        return self.rows["msg_id"][-1].as_py() or ""

    def msg_ids_since(self, since_ns: int) -> dict[str, int]:
        """Message ids of messages stored at or after ``since_ns`` (the dedup window)."""
        ids = self.rows["msg_id"]
        if not self.rows.num_rows or ids.null_count == len(ids):
            return {}
        recent = self.rows.filter(pc.and_(pc.is_valid(ids), pc.greater_equal(self.rows["ts_ns"], since_ns)))
        return dict(zip(recent["msg_id"].to_pylist(), recent["seq"].to_pylist(), strict=True))
