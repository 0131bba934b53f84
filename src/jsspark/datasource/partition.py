"""What one read task gets and needs on an executor: its ``ReadPartition``, the rule of which
stored messages a consumer delivers, and the error for messages gone missing.

Kept apart from ``planning`` (which pulls the consumer config models and the engine's table
code) so that a fresh Spark Python worker unpickling a partition imports only pyarrow, numpy
and the subject matcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from jsspark.datasource.push_pacing import Pace
from jsspark.subjects.vectorized import match_filter


class DataLossError(RuntimeError):
    """Messages the query should deliver are gone (``failOnDataLoss=true``)."""


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
    # a paced read (``replay_policy=original``, ``rate_limit_bps``): the consumer's pacing state
    # before the partition's first message, as the planner models it across batches
    pace: Pace | None = None
    fail_on_data_loss: bool = True
    storage_options: dict[str, str] | None = field(default=None, repr=False)
    # Sizes of ``files`` and the table's Arrow schema at ``version``: with them a task opens
    # the Parquet files directly instead of replaying the Delta log (empty/None: replay it).
    file_sizes: tuple[int, ...] = ()
    table_schema: pa.Schema | None = None
    # (min seq, max seq) of each of ``files`` from the Delta log's stats (empty: unknown): a
    # task filters rows by sequence only in the files not wholly inside ``(lo, hi]``.
    file_seqs: tuple[tuple[int, int], ...] = ()
    # the Delta table id ``version`` is of: a task never reads another table at that version
    # (the stream deleted and created again since planning); empty: not checked
    table_id: str = ""
