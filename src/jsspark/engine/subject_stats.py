"""Per-subject message counts and last sequences, kept as columns and updated by batch.

The server answers "last sequence on subject X", "how many messages on X" and "how many
subjects" from memory; so does the lake. Updates cost time in proportion to the distinct
subjects of the change, not to the stream's messages: a few names are looked up in a dict kept
across changes (``_Lookup``) once a process has asked a few times; before that, each lookup
hashes the few names and scans the known ones (``find_in``: 5 ms at a million subjects).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.schema import arrow_backed


@dataclass
class SubjectGroups:
    """Distinct subjects of some rows with their row counts and largest seq."""

    names: pa.Array
    counts: np.ndarray
    last: np.ndarray
    # positions of ``names`` in a SubjectStats at one of its generations (see ``SubjectStats.positions_of``)
    _pos: tuple[SubjectStats, int, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(
        cls, subjects: pa.Array | pa.ChunkedArray, seqs: np.ndarray, known: KnownPositions | None = None,
        counts: np.ndarray | None = None,
    ) -> SubjectGroups:
        """``known`` (from ``SubjectStats.encode``) gives where each dictionary entry of
        ``subjects`` is in the stats, saving the lookup when the groups are counted in;
        ``counts`` (also from ``encode``), the rows of each dictionary entry, saving a count."""
        if isinstance(subjects, pa.ChunkedArray):
            subjects = subjects.combine_chunks()
        if len(subjects) == 0:
            return cls(pa.array([], pa.string()), np.zeros(0, np.int64), np.zeros(0, np.int64))
        enc = subjects if pa.types.is_dictionary(subjects.type) else pc.dictionary_encode(subjects)
        # as intp once: numpy converts any other index type to it on every use (an 8-byte copy per row)
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.intp, copy=False)
        k = len(enc.dictionary)
        if counts is None:
            counts = np.bincount(codes, minlength=k)
        last = np.zeros(k, dtype=np.int64)
        np.maximum.at(last, codes, seqs)
        keep = counts > 0
        names = enc.dictionary.cast(pa.string())
        every = keep.all()
        if not every:
            names = names.filter(pa.array(keep))
        groups = cls(names, counts if every else counts[keep], last if every else last[keep])
        if known is not None:
            stats, generation, positions = known
            groups._pos = (stats, generation, positions if every else positions[keep])
        return groups


# ``positions`` looks names up in the kept dict when fewer than 1/LOOKUP_SHARE of the known
# ones (a dict probe costs about twice an Arrow one, but Arrow hashes every known name first),
# and builds that dict at the (LOOKUP_AFTER + 1)th such lookup
LOOKUP_SHARE = 6
LOOKUP_AFTER = 3
# until then, the answers for up to MEMO_NAMES names are remembered while the known names stay the
# same: one publish asks about the same subject several times (encoding, discard-new, the removal)
MEMO_NAMES = 16

# where the dictionary entries of an encoding are in a SubjectStats (-1: not there), at a generation
KnownPositions = tuple["SubjectStats", int, np.ndarray]


def find_in(names: pa.Array, known: pa.Array) -> np.ndarray:
    """Position of each of ``names`` in ``known`` (distinct strings), -1 where absent or null.

    The smaller side is hashed: Arrow's lookup builds a hash table of its value set, the costly
    part (about 180 ns a name, against 4 ns a probe), so a few names asked of a million known
    ones are hashed and every known name probed (5 ms instead of 190 ms)."""
    if len(names) >= len(known):
        return pc.fill_null(pc.index_in(names, value_set=known), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    asked = pc.dictionary_encode(names, null_encoding="encode")  # a null is an entry no known name matches
    hit = pc.index_in(known, value_set=asked.dictionary)  # each known name's entry, or null
    found = np.full(len(asked.dictionary), -1, dtype=np.int64)
    valid = pc.is_valid(hit).to_numpy(zero_copy_only=False)
    found[hit.drop_null().to_numpy()] = np.flatnonzero(valid)
    return found[asked.indices.to_numpy()]


class _Lookup:
    """Subject -> position in ``SubjectStats.names``, kept in step with its changes.

    The dict maps each name to a slot that never changes while the name is known; a numpy
    array maps slots to positions, so a removal, which shifts the positions of every later
    name, is one vectorised pass instead of a rewrite of the dict. Slots of removed names
    are renumbered away once they outnumber the live ones."""

    def __init__(self, names: pa.Array) -> None:
        n = len(names)
        self.slots: dict[str, int] = dict(zip(names.to_pylist(), range(n), strict=True))
        self.slot_pos = np.arange(n, dtype=np.int64)  # slot -> position, -1 once removed
        self.pos_slot = np.arange(n, dtype=np.int64)  # position -> slot

    def find(self, names: pa.Array) -> np.ndarray:
        if not len(self.slot_pos):
            return np.full(len(names), -1, dtype=np.int64)
        get = self.slots.get
        slots = np.fromiter((get(x, -1) for x in names.to_pylist()), np.int64, len(names))
        known = slots >= 0
        return np.where(known, self.slot_pos[np.where(known, slots, 0)], -1)

    def appended(self, names: pa.Array) -> None:
        first, n = len(self.slot_pos), len(names)
        self.slots.update(zip(names.to_pylist(), range(first, first + n), strict=True))
        self.slot_pos = np.concatenate([self.slot_pos, np.arange(len(self.pos_slot), len(self.pos_slot) + n)])
        self.pos_slot = np.concatenate([self.pos_slot, np.arange(first, first + n)])

    def removed(self, names: pa.Array, keep: np.ndarray) -> bool:
        """``names`` are no longer known; ``keep`` masks the positions that stay. False: the
        slots of removed names outnumber the live ones, and the lookup is better built anew."""
        for name in names.to_pylist():
            del self.slots[name]
        self.slot_pos[self.pos_slot[~keep]] = -1
        self.pos_slot = self.pos_slot[keep]
        self.slot_pos[self.pos_slot] = np.arange(len(self.pos_slot))
        return len(self.slot_pos) <= 2 * len(self.pos_slot) + 1024


class SubjectStats:
    def __init__(self, groups: SubjectGroups) -> None:
        self.names = groups.names
        self.counts = groups.counts.copy()
        self.last = groups.last.copy()
        self._generation = 0  # bumped by every change of ``names``
        self._derived: dict[tuple[str, object], np.ndarray] = {}
        self._lookup: _Lookup | None = None  # built once worth it (``positions``)
        self._asked = 0  # lookups of a few names while there was no ``_lookup``
        self._memo: dict[str | None, int] = {}  # name -> position, at ``_memo_generation``
        self._memo_generation = 0

    def derived(self, kind: str, key: object, fn: Callable[[pa.Array], np.ndarray]) -> np.ndarray:
        """``fn`` of every known name, aligned with ``names``: computed once per name and kept
        (names added since are computed when next asked, removed ones are dropped with them).
        One ``key`` per ``kind`` is kept (a new key, e.g. a changed config, replaces the old)."""
        arr = self._derived.get((kind, key))
        if arr is None or len(arr) < len(self.names):
            done = 0 if arr is None else len(arr)
            extra = np.asarray(fn(self.names.slice(done)))
            arr = extra if arr is None else np.concatenate([arr, extra])
            self._derived = {k: v for k, v in self._derived.items() if k[0] != kind}
            self._derived[(kind, key)] = arr
        return arr

    def keeps(self, kind: str, key: object, asked: int) -> bool:
        """Whether ``derived`` is worth it for ``asked`` names: it is kept already, or they are
        not few (computing it for every known name to answer a one-off publish of a few
        subjects costs more than computing it for those few: 0.1 s at a million subjects)."""
        return (kind, key) in self._derived or asked * LOOKUP_SHARE >= len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def positions(self, names: pa.Array) -> np.ndarray:
        """Position of each name in the known subjects, -1 where unknown (or null).

        A few names are looked up in the kept dict (``_Lookup``), built once this process has
        asked a few times (a one-off publish does not pay for it: 0.4 s at a million subjects);
        until then, and for many names at once, ``find_in`` hashes the smaller side."""
        n_known = len(self.names)
        if not n_known or not len(names):
            return np.full(len(names), -1, dtype=np.int64)
        if len(names) * LOOKUP_SHARE < n_known:
            if self._lookup is None:
                memo = self._remembered(names)
                if memo is not None:
                    return memo
                self._asked += 1
                if self._asked <= LOOKUP_AFTER:
                    pos = find_in(names, self.names)
                    if len(names) <= MEMO_NAMES:  # ``_remembered`` set the memo to this generation
                        self._memo.update(zip(names.to_pylist(), pos.tolist(), strict=True))
                    return pos
                self._lookup = _Lookup(self.names)
            return self._lookup.find(names)
        return find_in(names, self.names)

    def _remembered(self, names: pa.Array) -> np.ndarray | None:
        """The positions of ``names`` if all were asked since the known names last changed."""
        if self._memo_generation != self._generation:
            self._memo, self._memo_generation = {}, self._generation
        if len(names) > MEMO_NAMES or not self._memo:
            return None
        memo = self._memo
        keys = names.to_pylist()
        if not all(k in memo for k in keys):
            return None
        return np.fromiter((memo[k] for k in keys), np.int64, len(keys))

    def encode(self, subjects: pa.Array) -> tuple[pa.DictionaryArray, KnownPositions, np.ndarray | None]:
        """Dictionary-encode ``subjects`` against the known subjects: one hash probe per row into
        the known names (only subjects never seen before are hashed into a new dictionary). The
        dictionary holds the distinct subjects of ``subjects``, known ones first, and each
        one's position here comes with it, so counting the batch in needs no second lookup;
        so do the rows of each dictionary entry (None if a subject is null). The indices are
        int64 (numpy's index type: every per-row numpy step then reads them as they are)."""
        n_known = len(self.names)
        if not n_known or subjects.null_count:
            enc = pc.dictionary_encode(subjects)
            counts = None
            if not enc.null_count:
                codes = enc.indices.to_numpy().astype(np.intp)
                counts = np.bincount(codes, minlength=len(enc.dictionary))
                enc = pa.DictionaryArray.from_arrays(pa.array(codes), enc.dictionary, safe=False)
            return enc, (self, self._generation, self.positions(enc.dictionary)), counts
        found = self.positions(subjects).astype(np.intp, copy=False)
        new_names = pa.array([], pa.string())
        unknown = found < 0
        if unknown.any():  # subjects new to the stream
            fresh = pc.dictionary_encode(subjects.filter(pa.array(unknown)))
            new_names = fresh.dictionary.cast(pa.string())
            found[unknown] = n_known + fresh.indices.to_numpy()
        total = n_known + len(new_names)
        every = np.bincount(found, minlength=total)
        present = np.flatnonzero(every)
        if len(present) == total:  # every known subject is in the batch: their positions are the codes
            names = pa.concat_arrays([self.names, new_names]) if len(new_names) else self.names
            codes, counts = found, every
        else:
            dense = np.empty(total, dtype=np.intp)
            dense[present] = np.arange(len(present), dtype=np.intp)
            split = int(np.searchsorted(present, n_known))
            names = self.names.take(pa.array(present[:split]))
            if split < len(present):
                names = pa.concat_arrays([names, new_names.take(pa.array(present[split:] - n_known))])
            codes = np.take(dense, found, out=arrow_backed(len(found), np.intp), mode="clip")  # all in range
            counts = every[present]
        positions = np.where(present < n_known, present, -1).astype(np.int64)
        encoded = pa.DictionaryArray.from_arrays(pa.array(codes), names, safe=False)  # codes in range by construction
        return encoded, (self, self._generation, positions), counts

    def positions_of(self, g: SubjectGroups) -> np.ndarray:
        """``positions(g.names)``, looked up once per group while the known names stay the same:
        a publish plans the state (``count_after``) and then applies the same groups (``add``)."""
        if g._pos is None or g._pos[0] is not self or g._pos[1] != self._generation:
            g._pos = (self, self._generation, self.positions(g.names))
        return g._pos[2]

    def add(self, g: SubjectGroups) -> None:
        pos = self.positions_of(g)
        known = pos >= 0
        np.add.at(self.counts, pos[known], g.counts[known])
        np.maximum.at(self.last, pos[known], g.last[known])
        if (~known).any():
            added = g.names.filter(pa.array(~known))
            if self._lookup is not None:
                self._lookup.appended(added)
            self.names = pa.concat_arrays([self.names, added])
            self._generation += 1
            self.counts = np.concatenate([self.counts, g.counts[~known]])
            self.last = np.concatenate([self.last, g.last[~known]])

    def remove(self, g: SubjectGroups, left: SubjectGroups | None = None) -> None:
        """Subtract removed rows ``g``; ``left`` holds the rows still stored on subjects whose
        last message went, whose largest seq is their new last (a subject with nothing left
        goes away with its count)."""
        np.subtract.at(self.counts, self.positions_of(g), g.counts)
        if left is not None and len(left.names):
            self.last[self.positions(left.names)] = left.last
        empty = self.counts <= 0
        if empty.any():
            keep = pa.array(~empty)
            if self._lookup is not None and not self._lookup.removed(self.names.filter(pa.array(empty)), ~empty):
                self._lookup = None  # mostly slots of removed names: built afresh when next needed
            self.names = self.names.filter(keep)
            self._derived = {k: v[~empty[: len(v)]] for k, v in self._derived.items()}
            self._generation += 1
            self.counts = self.counts[~empty]
            self.last = self.last[~empty]

    def _with_added(self, added: SubjectGroups) -> tuple[np.ndarray, np.ndarray]:
        """A copy of the counts with ``added`` counted in, and which of ``added`` are known."""
        counts = self.counts.copy()
        pos = self.positions_of(added)
        known = pos >= 0
        np.add.at(counts, pos[known], added.counts[known])
        return counts, known

    def count_after(self, added: SubjectGroups, removed: SubjectGroups | None) -> int:
        """How many subjects would have messages after adding and removing these groups."""
        if removed is None or not len(removed.names):  # every known subject has messages (``remove``)
            return len(self.names) + (int((self.positions_of(added) < 0).sum()) if len(added.names) else 0)
        counts, known = self._with_added(added)
        np.subtract.at(counts, self.positions(removed.names), removed.counts)
        return int((counts > 0).sum()) + int((~known).sum())

    def counts_of(self, names: pa.Array) -> np.ndarray:
        """The message count of each name (0 where unknown)."""
        pos = self.positions(names)
        return np.where(pos >= 0, self.counts[np.maximum(pos, 0)], 0) if len(self.counts) else np.zeros(len(names), np.int64)

    def over(self, added: SubjectGroups, limit: int) -> tuple[pa.Array, np.ndarray]:
        """The subjects with more than ``limit`` messages once ``added`` is counted in (the
        only ones a per-subject limit can remove from), and how many each has then."""
        counts, known = self._with_added(added)
        big, fresh = counts > limit, ~known & (added.counts > limit)
        over_known = self.names.filter(pa.array(big)) if len(counts) else self.names
        return (
            pa.concat_arrays([over_known, added.names.filter(pa.array(fresh))]),
            np.concatenate([counts[big], added.counts[fresh]]),
        )

    def last_seq(self, name: str) -> int:
        i = self.positions(pa.array([name], pa.string()))[0]
        return int(self.last[i]) if i >= 0 else 0

    def table(self) -> pa.Table:
        return pa.table({"subject": self.names, "msgs": pa.array(self.counts), "last_seq": pa.array(self.last)})
