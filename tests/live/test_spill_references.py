"""Rows by spill reference (``spillReferences``): the lake sink's commit reads exactly the
referenced messages from the spill files, or fails naming them. No server, no Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jsspark.live.spill import (
    REFERENCE_SCHEMA,
    Pending,
    SpillPartition,
    read_spill,
    reference_batch,
    write_chunk,
)
from jsspark.sink.lake_sink import FORM_SCHEMA, collect_task, load_messages, normalize_origin


def _chunk(tmp_path: Path, seqs: list[int]) -> str:
    rows = Pending()
    for s in seqs:
        hdrs = b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n" if s % 2 else None
        rows.append(f"o.{s}".encode(), s, 1_000_000_000 + s, hdrs, b"d%d" % s, s, 0)
    return write_chunk(tmp_path, rows.to_batch("O", "c")).path


def test_references_land_the_same_rows_as_the_rows_themselves(tmp_path: Path) -> None:
    a, b = _chunk(tmp_path, [1, 2, 3, 5]), _chunk(tmp_path, [6, 9, 10])
    parts = [SpillPartition((a,), 1, 5, (2, 3, 5)), SpillPartition((b,), 5, 9, (6, 9))]
    batches = [reference_batch(p) for p in parts]
    assert batches[0].schema == REFERENCE_SCHEMA
    assert batches[0].column("seq").to_pylist() == [2, 3, 5]
    assert batches[0].column("spill").null_count == 2  # the reference rides on the first row only

    msg = collect_task(batches, str(tmp_path), "t", form="mirror")
    assert msg.rows == 5 and msg.ipc is None and msg.path is None and len(msg.spill) == 2
    # what a job's sink gets: only the rows carrying a reference (filtered in the JVM)
    kept = [b.filter(pc.is_valid(b.column("spill"))) for b in batches]
    assert sum(b.num_rows for b in kept) == 2
    assert collect_task(kept, str(tmp_path), "t", form="mirror") == msg
    with pytest.raises(ValueError, match="4 rows for 2 references to 5 messages"):
        collect_task([batches[0], kept[1].slice(0, 0), batches[1].slice(0, 1)], str(tmp_path), "t", form="mirror")
    landed = load_messages([msg], str(tmp_path), FORM_SCHEMA, form="mirror")
    direct = pa.concat_tables(normalize_origin(x, "mirror") for p in parts for x in read_spill(p))
    assert landed.equals(direct)
    assert landed.column("seq").to_pylist() == [2, 3, 5, 6, 9]
    assert landed.column("headers").to_pylist()[1] == [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]


@pytest.mark.parametrize("lo,hi", [(0, 5), (0, 10), (1, 5), (0, 3), (2, 3), (5, 9), (6, 9)])
def test_read_spill_keeps_exactly_the_partition_range(tmp_path: Path, lo: int, hi: int) -> None:
    """A file wholly inside the range is read as it is (no per-row filter); one the range cuts
    keeps only ``lo < seq <= hi``."""
    part = SpillPartition((_chunk(tmp_path, [1, 2, 3, 5]),), lo, hi)
    got = [s for b in read_spill(part) for s in b.column("seq").to_pylist()]
    assert got == [s for s in (1, 2, 3, 5) if lo < s <= hi]


def test_a_spill_that_no_longer_holds_the_rows_fails_and_names_it(tmp_path: Path) -> None:
    a = _chunk(tmp_path, [1, 2, 3])
    msg = collect_task([reference_batch(SpillPartition((a,), 0, 3, (1, 2, 3)))], str(tmp_path), "t", form="mirror")
    Path(a).unlink()
    with pytest.raises(FileNotFoundError):
        load_messages([msg], str(tmp_path), FORM_SCHEMA, form="mirror")
    b = _chunk(tmp_path, [1, 3])  # 2 is not there: the reference counted three rows
    msg = collect_task([reference_batch(SpillPartition((b,), 0, 3, (1, 2, 3)))], str(tmp_path), "t", form="mirror")
    with pytest.raises(RuntimeError, match=r"hold 2 of the 3 messages the batch references.*nothing was stored"):
        load_messages([msg], str(tmp_path), FORM_SCHEMA, form="mirror")


def test_references_need_a_landing_form(tmp_path: Path) -> None:
    a = _chunk(tmp_path, [1])
    with pytest.raises(ValueError, match=r"spillReferences.*option form"):
        collect_task([reference_batch(SpillPartition((a,), 0, 1, (1,)))], str(tmp_path), "t")
