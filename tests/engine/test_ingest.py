"""engine.ingest: storing messages from another stream in mirror form (origin seq and time,
skipped seqs as deleted, no regressions) and source form (new seqs, Nats-Stream-Source)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import jsspark
from jsspark.engine.headers import HEADER_TYPE
from jsspark.engine.ingest import source_header, store_mirrored, store_sourced


def origin_rows(seqs: list[int]) -> pa.Table:
    hdrs = [[{"name": "X", "value": str(s)}, {"name": "Nats-Expected-Stream", "value": "Q"},
             {"name": "X", "value": "again"}] for s in seqs]
    return pa.table({"seq": seqs, "ts_ns": [1_700_000_000_000_000_001 + s for s in seqs],
                     "subject": [f"o.{s}" for s in seqs], "data": [f"d{s}".encode() for s in seqs],
                     "headers": pa.array(hdrs, HEADER_TYPE)})


def test_mirror_keeps_origin_seq_and_time_and_records_skips(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="M", subjects=["o.>"])
    ack = store_mirrored(lake, "M", origin_rows([5, 6, 9]), txn=("app", 0))
    assert ack.seqs.tolist() == [5, 6, 9]
    assert store_mirrored(lake, "M", origin_rows([5, 6, 9]), txn=("app", 0)).replayed
    st = lake.stream_info("M").state
    assert (st.first_seq, st.last_seq, st.messages, st.num_deleted) == (5, 9, 3, 2)
    rows = lake.stream("M").read().sort_by("seq").to_pylist()
    assert [r["ts_ns"] for r in rows] == [1_700_000_000_000_000_006, 1_700_000_000_000_000_007,
                                          1_700_000_000_000_000_010]
    # Nats-Expected-* dropped; repeated keys and their order kept
    assert [(h["name"], h["value"]) for h in rows[0]["headers"]] == [("X", "5"), ("X", "again")]
    # at or below the last sequence: a redelivery, ignored as the server ignores it
    assert store_mirrored(lake, "M", origin_rows([8, 9, 10])).seqs.tolist() == [10]
    assert store_mirrored(lake, "M", origin_rows([12, 12])).seqs.tolist() == [12]
    store_mirrored(lake, "M", origin_rows([10, 20]), txn=("app", 1))
    st = lake.stream_info("M").state
    assert (st.last_seq, st.messages, st.num_deleted) == (20, 6, 10)


def test_mirror_of_rows_in_many_chunks_stores_what_one_chunk_stores(tmp_path: Path) -> None:
    """A landing batch read from many spill files comes in one chunk per file; its payloads
    stay in those chunks up to the Parquet write, and the stored rows and sizes are the same."""
    lake = jsspark.connect(str(tmp_path))
    for name in ("ONE", "MANY"):
        lake.add_stream(name=name, subjects=[f"{name.lower()}.>"], mirror=None)
    whole = origin_rows(list(range(1, 10)))
    chunked = pa.concat_tables([whole.slice(0, 2), whole.slice(2, 4), whole.slice(6)])
    assert chunked.column("data").num_chunks == 3
    store_mirrored(lake, "ONE", whole, mirror="O")
    store_mirrored(lake, "MANY", chunked, mirror="O")
    one, many = (lake.stream(n).read().sort_by("seq") for n in ("ONE", "MANY"))
    for col in ("seq", "ts_ns", "subject", "data", "headers", "size"):
        assert many.column(col).to_pylist() == one.column(col).to_pylist(), col
    assert lake.stream_info("MANY").state.bytes == lake.stream_info("ONE").state.bytes


def test_source_assigns_new_seqs_with_stream_source_header(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["o.>"])
    store_sourced(lake, "S", origin_rows([5, 9]), origin="ORDERS", txn=("app", 0))
    assert store_sourced(lake, "S", origin_rows([5, 9]), origin="ORDERS", txn=("app", 0)).replayed
    rows = lake.stream("S").read().sort_by("seq").to_pylist()
    assert [r["seq"] for r in rows] == [1, 2]
    assert [(h["name"], h["value"]) for h in rows[1]["headers"]] == [
        ("X", "9"), ("X", "again"), ("Nats-Stream-Source", "ORDERS 9 > > o.9")]
    assert source_header("O2", 1, "o2.a", "o2.a") == "O2 1 o2.a > o2.a"  # the server's observed form


def test_landed_rows_get_the_partition_and_subject_counts_a_publish_gives(tmp_path: Path) -> None:
    """Mirror and source landings take each row's ``part`` and the subject counts from one
    encoding against the stream's subject stats (subjects known and new, a later commit, a lake
    opened again): the same values a per-row hash and a fresh count give."""
    from collections import Counter

    from jsspark.engine.partitioning import PartitionKey

    def batch(seqs: list[int], subjects: list[str]) -> pa.Table:
        return origin_rows(seqs).set_column(2, "subject", pa.array(subjects))

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="M", mirror={"name": "O"})
    lake.add_stream(name="S", sources=[{"name": "O"}])
    store_mirrored(lake, "M", batch([1, 2, 3, 4], ["o.a", "o.b", "o.a", "o.long.subject.name"]), mirror="O")
    store_sourced(lake, "S", batch([1, 2], ["o.a", "p.x"]), origin="O")
    lake = jsspark.connect(str(tmp_path))  # stats loaded from the table, then kept current
    store_mirrored(lake, "M", batch([5, 6, 7], ["o.c", "o.a", "o.b"]), mirror="O")
    store_sourced(lake, "S", batch([3, 4, 5], ["o.c", "p.x", "o.a"]), origin="O")
    store_mirrored(lake, "M", batch([8], ["o.d"]), mirror="O")
    for name, subjects in (("M", ["o.a", "o.b", "o.a", "o.long.subject.name", "o.c", "o.a", "o.b", "o.d"]),
                           ("S", ["o.a", "p.x", "o.c", "p.x", "o.a"])):
        rows = lake.stream(name).read().sort_by("seq")
        assert rows.column("subject").to_pylist() == subjects
        assert rows.column("part").to_pylist() == PartitionKey().of(pa.array(subjects)).to_pylist()
        assert len(set(rows.column("part").to_pylist())) > 1
        info = lake.stream_info(name, subjects_filter=">")
        assert info.state.subjects == dict(Counter(subjects)) and info.state.num_subjects == len(set(subjects))
