"""The per-stream index a publisher keeps in memory, as nats-server keeps its stream state.

It holds every live message's ``seq, ts_ns, subject, msg_id, size`` (no payloads, no
headers), sorted by sequence, as of one table version, plus per-subject counts and last
sequences. Publishing needs it for what the server answers from memory: the last sequence of
a subject, per-subject counts, the dedup window's message ids, which messages a limit
removes. It is built once per process from the table's narrow columns and then kept current
with each commit this process makes (in time proportional to the commit, not the stream); a
commit by another writer makes it rebuild.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.schema import INDEX_COLUMNS, MESSAGE_SCHEMA

INDEX_SCHEMA = pa.schema([MESSAGE_SCHEMA.field(c) for c in INDEX_COLUMNS])


def _group(rows: pa.Table) -> dict[str, list[int]]:
    """subject -> [count, last_seq] over ``rows``."""
    if not rows.num_rows:
        return {}
    g = rows.group_by("subject", use_threads=False).aggregate([("seq", "count"), ("seq", "max")])
    return {
        s: [c, m]
        for s, c, m in zip(g["subject"].to_pylist(), g["seq_count"].to_pylist(), g["seq_max"].to_pylist(), strict=True)
    }


class MessageIndex:
    def __init__(self, rows: pa.Table, version: int) -> None:
        self.rows = rows.select(INDEX_COLUMNS).cast(INDEX_SCHEMA).sort_by("seq")
        self.version = version
        self._subjects: dict[str, list[int]] | None = None
        self._bytes: int | None = None

    @classmethod
    def empty(cls, version: int) -> MessageIndex:
        return cls(INDEX_SCHEMA.empty_table(), version)

    # -- change ------------------------------------------------------------------------------
    def apply(self, added: pa.Table | None, removed: np.ndarray | None, version: int) -> None:
        """Fold in one commit: ``added`` rows (seq above all current) and ``removed`` seqs."""
        rows = self.rows
        if removed is not None and len(removed):
            gone = pc.is_in(rows["seq"], value_set=pa.array(removed, pa.int64()))
            self._forget(rows.filter(gone))
            rows = rows.filter(pc.invert(gone))
        if added is not None and added.num_rows:
            added = added.select(INDEX_COLUMNS).cast(INDEX_SCHEMA)
            self._remember(added)
            rows = pa.concat_tables([rows, added])
            if rows.column("seq").num_chunks > 64:
                rows = rows.combine_chunks()
        self.rows = rows
        self.version = version

    def _remember(self, added: pa.Table) -> None:
        if self._bytes is not None:
            self._bytes += int(pc.sum(added["size"]).as_py() or 0)
        if self._subjects is not None:
            for s, (c, m) in _group(added).items():
                cur = self._subjects.get(s)
                if cur is None:
                    self._subjects[s] = [c, m]
                else:
                    cur[0] += c
                    cur[1] = max(cur[1], m)

    def _forget(self, gone: pa.Table) -> None:
        if self._bytes is not None:
            self._bytes -= int(pc.sum(gone["size"]).as_py() or 0)
        if self._subjects is None or not gone.num_rows:
            return
        for s, (c, m) in _group(gone).items():
            cur = self._subjects[s]
            cur[0] -= c
            if cur[0] <= 0:
                del self._subjects[s]
            elif m == cur[1]:  # the subject's last message went: find the new last
                left = self.rows["seq"].filter(pc.equal(self.rows["subject"], s))
                cur[1] = int(pc.max(left.filter(pc.invert(pc.is_in(left, value_set=gone["seq"])))).as_py())

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

    def subjects(self) -> dict[str, list[int]]:
        """subject -> [msgs, last_seq], built once and then kept current."""
        if self._subjects is None:
            self._subjects = _group(self.rows)
        return self._subjects

    def subject_stats(self) -> pa.Table:
        """Per subject ``msgs`` and ``last_seq`` as an Arrow table (for filtered lookups)."""
        subj = self.subjects()
        return pa.table(
            {
                "subject": pa.array(list(subj), pa.string()),
                "msgs": pa.array([v[0] for v in subj.values()], pa.int64()),
                "last_seq": pa.array([v[1] for v in subj.values()], pa.int64()),
            }
        )

    @property
    def num_subjects(self) -> int:
        return len(self.subjects())

    def state_after(
        self, added: pa.Table, removed_mask: np.ndarray | None, last_seq: int, last_ts_ns: int
    ) -> dict[str, Any]:
        """The stream state if ``added`` rows were stored and ``removed_mask`` (over the current
        rows) removed, without applying either."""
        rows = self.rows
        n_old = rows.num_rows
        removed = rows.filter(pa.array(removed_mask)) if removed_mask is not None and removed_mask.any() else None
        msgs = n_old - (removed.num_rows if removed is not None else 0) + added.num_rows
        size = self.bytes + int(pc.sum(added["size"]).as_py() or 0) - (
            int(pc.sum(removed["size"]).as_py() or 0) if removed is not None else 0
        )
        first_seq, first_ts = last_seq + 1, 0
        if msgs:
            alive = np.flatnonzero(~removed_mask) if removed is not None else None
            if n_old and (alive is None or len(alive)):
                i = 0 if alive is None else int(alive[0])
                first_seq, first_ts = int(rows["seq"][i].as_py()), int(rows["ts_ns"][i].as_py())
            else:
                first_seq, first_ts = int(added["seq"][0].as_py()), int(added["ts_ns"][0].as_py())
        counts = {s: v[0] for s, v in self.subjects().items()}
        num_subjects = len(counts)
        if removed is not None:
            for s, (c, _) in _group(removed).items():
                counts[s] -= c
                if counts[s] == 0:
                    num_subjects -= 1
        for s in _group(added):
            if counts.get(s, 0) == 0:
                num_subjects += 1
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
    def last_seq_of(self, subject: str) -> int:
        """Last sequence stored on a literal subject, 0 if none."""
        hit = self.subjects().get(subject)
        return hit[1] if hit else 0

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
