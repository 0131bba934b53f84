"""The dedup window's message ids, kept across publishes as the server keeps its dedup map.

A publish must know every ``Nats-Msg-Id`` seen within ``duplicate_window``: the ids of stored
messages (whichever process stored them) and the ids this process accepted, which stay known for
the window even when a limit, a purge or interest retention removed the message, as they do in
the server's dedup map. Like the server after a restart, another process knows only the ids of
stored messages.

Rebuilding that map for every publish costs time in proportion to the window (millions of ids);
``DedupWindow`` keeps it instead:

- ``stored``: the ids of the messages an index held when it was loaded (id -> seq, ts), minus
  those this process removed since. Loaded once per index (a commit by another writer makes a
  new index, and the map is loaded again).
- ``accepted``: ids this process accepted (id -> seq), with the time of each commit, dropped
  commit by commit once the window has passed them.

Together they answer exactly what "accepted ids not yet dropped, plus stored ids within the
window" answered when built afresh for every publish. Every entry is checked against the window
when it is found, and a publish time earlier than the map can answer for reloads it.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.index import MessageIndex


@dataclass
class _Accepted:
    ts_ns: int
    first_seq: int
    ids: list[str]
    seqs: list[int]


class DedupWindow:
    def __init__(self) -> None:
        self._accepted: dict[str, int] = {}
        self._commits: list[_Accepted] = []  # in seq order
        self._stored: dict[str, tuple[int, int]] = {}
        self._stored_for: MessageIndex | None = None
        self._stored_since = 0
        self._pruned_at = 0  # the latest window start commits were dropped at

    # -- upkeep --------------------------------------------------------------------------------
    def _sync(self, index: MessageIndex, since_ns: int) -> None:
        """Load the stored ids of ``index`` (once per index object) and drop expired commits."""
        # Reload when the index is new, or when a publish time went back past what the map can
        # answer: older stored ids than it loaded, or ids of this process's own commits already
        # dropped from ``accepted`` (they are in the index, where a fresh load finds them).
        if self._stored_for is not index or since_ns < self._stored_since or since_ns < self._pruned_at:
            rows = index.rows
            ids = rows["msg_id"]
            self._stored = {}
            if rows.num_rows and ids.null_count < len(ids):
                recent = rows.filter(pc.and_(pc.is_valid(ids), pc.greater_equal(rows["ts_ns"], since_ns)))
                self._stored = dict(
                    zip(
                        recent["msg_id"].to_pylist(),
                        zip(recent["seq"].to_pylist(), recent["ts_ns"].to_pylist(), strict=True),
                        strict=True,
                    )
                )
            self._stored_for, self._stored_since, self._pruned_at = index, since_ns, 0
        if any(c.ts_ns < since_ns for c in self._commits):
            keep = []
            for c in self._commits:
                if c.ts_ns >= since_ns:
                    keep.append(c)
                    continue
                for mid, seq in zip(c.ids, c.seqs, strict=True):
                    if self._accepted.get(mid) == seq:
                        del self._accepted[mid]
            self._commits = keep
            self._pruned_at = max(self._pruned_at, since_ns)

    def known(self, index: MessageIndex, since_ns: int) -> KnownIds:
        """The ids known at ``since_ns`` (the start of the window) for a publish planned on ``index``."""
        self._sync(index, since_ns)
        return KnownIds(self, since_ns)

    def accepted(self, ids: list[str], seqs: list[int], ts_ns: int) -> None:
        """Remember ids this process stored (or accepted without storing) at ``ts_ns``."""
        if not ids:
            return
        self._accepted.update(zip(ids, seqs, strict=True))
        self._commits.append(_Accepted(ts_ns, seqs[0], ids, seqs))
        if len(self._commits) > 1 and self._commits[-2].first_seq > seqs[0]:
            self._commits.sort(key=lambda c: c.first_seq)

    def removed(self, index: MessageIndex, seqs: np.ndarray) -> None:
        """Forget stored ids of messages this process is removing from ``index``: they stay known
        only if this process accepted them (``accepted``)."""
        if self._stored_for is not index or not self._stored or not len(seqs):
            return
        pos = index.positions_of(np.asarray(seqs, dtype=np.int64))
        rows = index.rows.take(pa.array(pos[pos >= 0]))
        for mid, seq in zip(rows["msg_id"].to_pylist(), rows["seq"].to_pylist(), strict=True):
            if mid is not None and self._stored.get(mid, (None,))[0] == seq:
                del self._stored[mid]

    # -- lookups -------------------------------------------------------------------------------
    def _accepted_ts(self, seq: int) -> int:
        """The commit time of an accepted seq (commits are kept in seq order)."""
        if not self._commits:
            return -1
        lo, hi = 0, len(self._commits) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._commits[mid].first_seq <= seq:
                lo = mid
            else:
                hi = mid - 1
        return self._commits[lo].ts_ns

    def seq_of(self, mid: str, since_ns: int) -> int | None:
        """The seq ``mid`` was stored or accepted at within the window, else None (stored wins)."""
        hit = self._stored.get(mid)
        if hit is not None and hit[1] >= since_ns:
            return hit[0]
        seq = self._accepted.get(mid)
        if seq is not None and self._accepted_ts(seq) >= since_ns:
            return seq
        return None

    def any_of(self, ids: list[str | None]) -> bool:
        """Whether any of ``ids`` may be known (a C-level pass: the common answer is no)."""
        return any(bool(known) and not known.keys().isdisjoint(ids) for known in (self._stored, self._accepted))


class KnownIds(MutableMapping[str, int]):
    """The window's ids as a mapping, plus ids assigned earlier in the same batch."""

    def __init__(self, window: DedupWindow, since_ns: int) -> None:
        self.window = window
        self.since_ns = since_ns
        self.batch: dict[str, int] = {}

    def __getitem__(self, mid: str) -> int:
        seq = self.batch.get(mid)
        if seq is None:
            seq = self.window.seq_of(mid, self.since_ns)
        if seq is None:
            raise KeyError(mid)
        return seq

    def __contains__(self, mid: object) -> bool:
        return isinstance(mid, str) and (mid in self.batch or self.window.seq_of(mid, self.since_ns) is not None)

    def __setitem__(self, mid: str, seq: int) -> None:
        self.batch[mid] = seq

    def __delitem__(self, mid: str) -> None:
        del self.batch[mid]

    def __iter__(self) -> Iterator[str]:
        raise TypeError("the dedup window is not enumerable")

    def __len__(self) -> int:
        raise TypeError("the dedup window is not enumerable")

    def any_of(self, ids: list[str | None]) -> bool:
        return (bool(self.batch) and not self.batch.keys().isdisjoint(ids)) or self.window.any_of(ids)


__all__ = ["DedupWindow", "KnownIds"]
