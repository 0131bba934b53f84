"""Which messages the ``Nats-Rollup`` messages of a publish purge.

After storing a rollup message the server purges its subject (``sub``) or the whole stream
(``all``) down to that message (``keep: 1``), or down to nothing when the message was not
stored because nobody on an interest stream wanted it (``keep: 0``). Only older messages
go, so over a batch a message is purged when a later rollup covers its subject.
``RolledUp`` carries when each removal of a batch happened, so its consumers are told of each
rollup at its place (``Consumers.on_rollups``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.arrays import column, take_rows
from jsspark.engine.index import MessageIndex

SUBJECT, ALL = "sub", "all"


@dataclass(frozen=True)
class Rollup:
    seq: int  # the rollup message's sequence
    subject: str  # its subject as stored
    kind: str  # SUBJECT or ALL


def purged_by(seqs: np.ndarray, subjects: pa.Array | pa.ChunkedArray, rollups: Sequence[Rollup]) -> np.ndarray:
    """Mask over the messages (``seqs`` ascending, ``subjects``) that ``rollups`` purge."""
    out = np.zeros(len(seqs), dtype=bool)
    if not rollups or not len(seqs):
        return out
    last_all = max((r.seq for r in rollups if r.kind == ALL), default=0)
    if last_all:
        out |= seqs < last_all
    last_on: dict[str, int] = {}
    for r in rollups:
        if r.kind == SUBJECT:
            last_on[r.subject] = max(last_on.get(r.subject, 0), r.seq)
    if last_on:
        if pa.types.is_dictionary(subjects.type):
            subjects = subjects.cast(pa.string())
        pos = pc.fill_null(pc.index_in(subjects, value_set=pa.array(list(last_on), pa.string())), -1)
        pos = pos.to_numpy() if isinstance(pos, pa.ChunkedArray) else pos.to_numpy(zero_copy_only=False)
        below = np.append(np.fromiter(last_on.values(), np.int64, len(last_on)), 0)[pos]  # -1: the 0 appended
        out |= seqs < below
    return out


NEVER = np.iinfo(np.int64).max  # a message no removal of the publish reached

# (seqs, subjects) of the stream before a publish and what it stored -> ``RolledUp.moments``, ``.rolled``
MomentsOf = Callable[[np.ndarray, pa.Array], tuple[np.ndarray, np.ndarray]]


class RolledUp:
    """A publish's rollups and limit removals in the order the server makes them, for its
    consumers (``purgeLocked`` → ``consumer.purge``, a limit → ``decStreamPending``).

    ``seqs``/``subjects``: the stream's messages before the publish, then the ones it stored;
    ``moments``: per message, the seq of the published message by whose storing (a limit) or
    rollup (``rolled``) it went, 0 for an expiry, ``NEVER`` for one that stays; ``kept``: per
    rollup, whether its message was stored (an interest stream purges to nothing when not).

    All four are worked out from ``rows`` (``seq``, ``subject``) when first read, by
    ``moments_of(seqs, subjects)`` giving ``moments`` and ``rolled``: only a stream with
    consumers reads them, and they span the whole stream."""

    def __init__(
        self, rollups: list[Rollup], kept: list[bool], rows: pa.Table,
        moments_of: MomentsOf,
    ) -> None:
        self.rollups, self.kept = rollups, kept
        self._rows, self._moments_of = rows, moments_of

    @cached_property
    def seqs(self) -> np.ndarray:
        return self._rows["seq"].to_numpy()

    @cached_property
    def subjects(self) -> pa.Array:
        return column(self._rows, "subject")

    @cached_property
    def _when(self) -> tuple[np.ndarray, np.ndarray]:
        return self._moments_of(self.seqs, self.subjects)

    @property
    def moments(self) -> np.ndarray:
        return self._when[0]

    @property
    def rolled(self) -> np.ndarray:
        return self._when[1]


def first_reached(
    seqs: np.ndarray, subjects: pa.Array | pa.ChunkedArray, limited: np.ndarray, per_subject: int,
    rollups: Sequence[Rollup],
) -> tuple[np.ndarray, np.ndarray]:
    """``RolledUp.moments`` and ``.rolled`` where limits and rollups remove the same in any
    order (no discard-old totals): each message went by what reached it first, a limit
    (``limited``) at the storing of the message ``per_subject`` later on its subject (0: an age
    or a TTL, gone before the publish), or a rollup after it."""
    by_limit = np.full(len(seqs), NEVER, dtype=np.int64)
    if limited.any():
        by_limit = np.where(limited, pushed_out_by(seqs, subjects, per_subject), NEVER)
        by_limit[limited & (by_limit == NEVER)] = 0
    by_rollup = rollup_moments(seqs, subjects, rollups)
    return np.minimum(by_limit, by_rollup), by_rollup < by_limit


class Reach:
    """The messages a publish's rollups can purge, before (``index``) and in (``rows``) it:
    those before its last rollup of all, found by sequence, and those on the subjects it
    rolls up, found with the subject stats (``MessageIndex.positions_on``) instead of by
    matching every stored subject. ``purged`` masks the index's rows followed by ``rows``."""

    def __init__(self, index: MessageIndex, rows: pa.Table, rollups: Sequence[Rollup]) -> None:
        self.n_old = index.rows.num_rows
        self.index_seqs = index.rows["seq"]
        self.new_seqs = rows["seq"].to_numpy()
        subs = [r for r in rollups if r.kind == SUBJECT]
        first_all = min((r.seq for r in rollups if r.kind == ALL), default=NEVER)
        names = pa.array(sorted({r.subject for r in subs}), pa.string())
        new_on = np.flatnonzero(pc.is_in(rows["subject"], value_set=names).to_numpy(zero_copy_only=False)) if len(
            names) else np.zeros(0, np.int64)
        # a stored message on a subject rolled up only after a rollup of all is gone by then
        old_on = index.positions_on(names) if any(r.seq < first_all for r in subs) else np.zeros(0, np.int64)
        self.on = np.concatenate([old_on, self.n_old + new_on])
        old = take_rows(index.rows.select(["seq", "subject"]), old_on)
        new = take_rows(rows.select(["seq", "subject"]), new_on).cast(old.schema)
        self.seqs = np.concatenate([old["seq"].to_numpy(), new["seq"].to_numpy()])
        self.subjects = pa.concat_arrays([column(old, "subject"), column(new, "subject")])

    def below(self, seq: int) -> int:
        """How many of the index's rows followed by ``rows`` have a seq below ``seq``."""
        n_old = self.n_old
        if n_old and seq > self.index_seqs[n_old - 1].as_py():
            old = n_old
        else:
            old = int(pc.sum(pc.less(self.index_seqs, seq)).as_py() or 0)  # (sorted: the head)
        return old + int(np.searchsorted(self.new_seqs, seq))

    def purged(self, rollups: Sequence[Rollup]) -> np.ndarray:
        """What ``rollups`` (some of those this reach was made for) purge: ``purged_by``."""
        out = np.zeros(self.n_old + len(self.new_seqs), dtype=bool)
        last_all = max((r.seq for r in rollups if r.kind == ALL), default=0)
        if last_all:
            out[: self.below(last_all)] = True
        subs = [r for r in rollups if r.kind == SUBJECT]
        if subs and len(self.on):
            out[self.on] |= purged_by(self.seqs, self.subjects, subs)
        return out


def rollup_moments(seqs: np.ndarray, subjects: pa.Array | pa.ChunkedArray, rollups: Sequence[Rollup]) -> np.ndarray:
    """Per message (``seqs`` ascending), the seq of the first later rollup that purges it
    (one on its subject, or ``all``); ``NEVER`` where none does."""
    out = np.full(len(seqs), NEVER, dtype=np.int64)
    if not rollups or not len(seqs):
        return out
    alls = np.array(sorted(r.seq for r in rollups if r.kind == ALL), dtype=np.int64)
    if len(alls):
        i = np.searchsorted(alls, seqs, side="right")
        hit = i < len(alls)
        out[hit] = alls[i[hit]]
    subs = [r for r in rollups if r.kind == SUBJECT]
    if subs:
        if pa.types.is_dictionary(subjects.type):
            subjects = subjects.cast(pa.string())
        names = {name: i for i, name in enumerate(dict.fromkeys(r.subject for r in subs))}
        code = pc.fill_null(pc.index_in(subjects, value_set=pa.array(list(names), pa.string())), -1)
        code = (code.to_numpy() if isinstance(code, pa.ChunkedArray) else code.to_numpy(zero_copy_only=False))
        code = code.astype(np.int64)
        span = int(max(int(seqs[-1]), max(r.seq for r in subs))) + 2
        keys = np.sort(np.array([names[r.subject] * span + r.seq for r in subs], dtype=np.int64))
        on = code >= 0
        row_keys = code[on] * span + seqs[on]
        j = np.searchsorted(keys, row_keys, side="right")
        ok = (j < len(keys)) & ((keys[np.minimum(j, len(keys) - 1)] // span) == code[on])
        nxt = np.full(int(on.sum()), NEVER, dtype=np.int64)
        nxt[ok] = keys[j[ok]] % span
        out[on] = np.minimum(out[on], nxt)
    return out


def pushed_out_by(seqs: np.ndarray, subjects: pa.Array | pa.ChunkedArray, per_subject: int) -> np.ndarray:
    """Per message, the seq of the message ``per_subject`` later on its subject, whose storing
    pushes it out under ``max_msgs_per_subject``; ``NEVER`` where there is none."""
    out = np.full(len(seqs), NEVER, dtype=np.int64)
    if per_subject <= 0 or not len(seqs):
        return out
    codes = pc.dictionary_encode(subjects.cast(pa.string()) if pa.types.is_dictionary(subjects.type) else subjects)
    if isinstance(codes, pa.ChunkedArray):
        codes = codes.combine_chunks()
    code = codes.indices.to_numpy(zero_copy_only=False)
    order = np.lexsort((seqs, code))  # by subject, then seq
    c, s = code[order], seqs[order]
    later = np.arange(len(order)) + per_subject
    ok = later < len(order)
    ok[ok] = c[later[ok]] == c[ok]
    out[order[ok]] = s[later[ok]]
    return out
