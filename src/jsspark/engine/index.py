"""The per-stream index a publisher keeps in memory, as nats-server keeps its stream state.

It holds every live message's ``seq, ts_ns, subject, msg_id, size`` (no payloads, no
headers), sorted by sequence, as of one table version. Publishing needs it for what the
server answers from memory: the last sequence of a subject, per-subject counts, the dedup
window's message ids, which messages a limit removes. It is built once per process from the
table's narrow columns and then kept current with each commit this process makes; a commit by
another writer makes it rebuild.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.schema import INDEX_COLUMNS, MESSAGE_SCHEMA

INDEX_SCHEMA = pa.schema([MESSAGE_SCHEMA.field(c) for c in INDEX_COLUMNS])


class MessageIndex:
    def __init__(self, rows: pa.Table, version: int) -> None:
        self.rows = rows.select(INDEX_COLUMNS).cast(INDEX_SCHEMA).sort_by("seq")
        self.version = version
        self._subject_stats: pa.Table | None = None

    @classmethod
    def empty(cls, version: int) -> MessageIndex:
        return cls(INDEX_SCHEMA.empty_table(), version)

    # -- change ------------------------------------------------------------------------------
    def apply(self, added: pa.Table | None, removed: np.ndarray | None, version: int) -> None:
        """Fold in one commit: ``added`` rows (seq above all current) and ``removed`` seqs."""
        rows = self.rows
        if removed is not None and len(removed):
            keep = pc.invert(pc.is_in(rows["seq"], value_set=pa.array(removed, pa.int64())))
            rows = rows.filter(keep)
        if added is not None and added.num_rows:
            rows = pa.concat_tables([rows, added.select(INDEX_COLUMNS).cast(INDEX_SCHEMA)])
            if rows.column("seq").num_chunks > 64:
                rows = rows.combine_chunks()
        self.rows = rows
        self.version = version
        self._subject_stats = None

    # -- state -------------------------------------------------------------------------------
    @property
    def msgs(self) -> int:
        return self.rows.num_rows

    @property
    def bytes(self) -> int:
        return int(pc.sum(self.rows["size"]).as_py() or 0) if self.rows.num_rows else 0

    def first(self) -> tuple[int, int] | None:
        """(seq, ts_ns) of the oldest live message."""
        if not self.rows.num_rows:
            return None
        return int(self.rows["seq"][0].as_py()), int(self.rows["ts_ns"][0].as_py())

    def subject_stats(self) -> pa.Table:
        """Per subject: ``msgs``, ``first_seq``, ``last_seq`` (cached until the next change)."""
        if self._subject_stats is None:
            self._subject_stats = (
                self.rows.group_by("subject", use_threads=False)
                .aggregate([("seq", "count"), ("seq", "min"), ("seq", "max")])
                .rename_columns(["subject", "msgs", "first_seq", "last_seq"])
            )
        return self._subject_stats

    @property
    def num_subjects(self) -> int:
        return self.subject_stats().num_rows if self.rows.num_rows else 0

    # -- lookups -----------------------------------------------------------------------------
    def seqs_matching(self, mask: pa.ChunkedArray | pa.Array) -> np.ndarray:
        return self.rows["seq"].filter(mask).to_numpy()

    def last_seq_of(self, subject: str) -> int:
        """Last sequence stored on a literal subject, 0 if none."""
        stats = self.subject_stats()
        hit = stats.filter(pc.equal(stats["subject"], subject))
        return int(hit["last_seq"][0].as_py()) if hit.num_rows else 0

    def last_msg_id(self) -> str:
        """The msg id of the newest stored message ('' if it had none, as the server compares)."""
        if not self.rows.num_rows:
            return ""
        return self.rows["msg_id"][-1].as_py() or ""

    def msg_ids_since(self, since_ns: int) -> dict[str, int]:
        """Message ids of messages stored at or after ``since_ns`` (the dedup window)."""
        recent = self.rows.filter(pc.greater_equal(self.rows["ts_ns"], since_ns))
        recent = recent.filter(pc.is_valid(recent["msg_id"]))
        return dict(zip(recent["msg_id"].to_pylist(), recent["seq"].to_pylist(), strict=True))

    def seq_of_rank(self, ranks: Sequence[int]) -> np.ndarray:
        return self.rows["seq"].take(pa.array(ranks, pa.int64())).to_numpy()
