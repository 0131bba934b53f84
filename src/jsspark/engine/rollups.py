"""Which messages the ``Nats-Rollup`` messages of a publish purge.

After storing a rollup message the server purges its subject (``sub``) or the whole stream
(``all``) down to that message (``keep: 1``), or down to nothing when the message was not
stored because nobody on an interest stream wanted it (``keep: 0``). Only older messages
go, so over a batch a message is purged when a later rollup covers its subject.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
