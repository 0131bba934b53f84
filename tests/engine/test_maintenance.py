"""Compaction bounds file counts without changing messages or state; vacuum drops lost commits' files;
max_age is enforced on publish and by ``enforce_limits``."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

import jsspark
from jsspark.engine.stream import Incoming


def _files(lake: jsspark.engine.lake.Lake, name: str) -> int:
    return len(lake.stream(name).table.snapshot().table.file_uris())


def test_compact_keeps_messages_and_state_and_bounds_files(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="K", subjects=["k.>"])
    for b in range(12):
        lake.publish_batch("K", pa.table({"subject": [f"k.{i}" for i in range(40)], "data": [b"%d" % b] * 40}))
    before_state = lake.stream_info("K").state
    before_rows = lake.stream("K").read().sort_by("seq")
    assert _files(lake, "K") > 12
    metrics = lake.compact("K")
    assert metrics["numFilesRemoved"] > 0
    assert _files(lake, "K") <= 8  # one per hash bucket
    assert lake.stream_info("K").state == before_state
    assert jsspark.connect(str(tmp_path)).stream_info("K").state == before_state  # from the commit record
    assert lake.stream("K").read().sort_by("seq").equals(before_rows)
    assert lake.publish("k.next", b"x").seq == before_state.last_seq + 1


def test_vacuum_removes_files_of_removed_data(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="V", subjects=["v.>"])
    for i in range(5):
        lake.publish(f"v.{i}", b"x")
    lake.purge_stream("V")
    on_disk = lambda: len(list((tmp_path / "streams" / "V").rglob("*.parquet")))  # noqa: E731
    assert on_disk() == 5
    deleted = lake.vacuum("V", retention_hours=0)
    assert len(deleted) == 5 and on_disk() == 0
    assert lake.stream_info("V").state.first_seq == 6


def test_max_age_on_publish_and_enforce_limits(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="A", subjects=["a.>"], max_age=0.2)
    lake.publish("a.1", b"old")
    deadline = time.monotonic() + 10
    while lake.stream("A").index().rows["ts_ns"][0].as_py() > time.time_ns() - 200_000_000:
        assert time.monotonic() < deadline
        time.sleep(0.01)  # waiting for the clock itself to pass max_age, not for another actor
    lake.publish("a.2", b"new")
    state = lake.stream_info("A").state
    assert (state.messages, state.first_seq, state.last_seq) == (1, 2, 2)
    while lake.stream("A").index().rows["ts_ns"][0].as_py() > time.time_ns() - 200_000_000:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert lake.enforce_limits("A") == 1
    state = lake.stream_info("A").state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 3, 2)


def test_publish_batch_with_txn_is_idempotent_across_replays(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="X", subjects=["x.>"])
    rows = pa.table({"subject": ["x.a", "x.b"], "data": [b"1", b"2"]})
    first = lake.publish_batch("X", rows, txn=("query-1", 0))
    assert (first.stored, first.replayed, list(first.seqs)) == (2, False, [1, 2])
    again = jsspark.connect(str(tmp_path)).publish_batch("X", rows, txn=("query-1", 0))  # a restarted writer
    assert (again.stored, again.replayed) == (0, True)
    nxt = lake.publish_batch("X", rows, txn=("query-1", 1))
    assert list(nxt.seqs) == [3, 4]
    other = lake.publish_batch("X", rows, txn=("query-2", 0))
    assert list(other.seqs) == [5, 6]
    assert lake.stream_info("X").state.messages == 6


def test_direct_get_as_of_an_older_version_sees_removed_messages(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="H", subjects=["h.>"], max_msgs_per_subject=1, allow_direct=True)
    lake.publish("h.a", b"v1")
    version = lake.stream("H").table.snapshot().version
    lake.publish("h.a", b"v2")  # the per-subject limit removes v1
    now = lake.direct_get("H", {"last_by_subj": "h.a"})
    assert [m.data for m in now.messages] == [b"v2"]
    then = lake.direct_get("H", {"last_by_subj": "h.a"}, as_of=version)
    assert [(m.seq, m.data) for m in then.messages] == [(1, b"v1")]
    with pytest.raises(jsspark.errors.JSSparkError, match="read-only"):
        lake.stream("H").as_of(version).publish_batch(Incoming.one("h.a", b"x", None))


def test_tables_stay_readable_by_sparks_delta_connector(tmp_path: Path) -> None:
    """Reader 1 / writer 2, no table features, UTC timestamps (no timestampNtz)."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="P", subjects=["p.>"], max_msgs=2)
    for i in range(4):
        lake.publish(f"p.{i}", b"x", headers={"K": "v"})
    lake.delete_msg("P", 4)
    lake.compact("P")
    dt = lake.stream("P").table.snapshot().table
    proto = dt.protocol()
    assert (proto.min_reader_version, proto.min_writer_version) == (1, 2)
    assert not proto.reader_features and not proto.writer_features
    time_type = pa.field(dt.schema().to_arrow().field("time")).type
    assert time_type == pa.timestamp("us", tz="UTC")


def test_reads_at_an_unwritten_location_create_nothing(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path / "typo"))
    assert lake.streams_info() == []
    with pytest.raises(jsspark.errors.StreamNotFoundError):
        lake.stream_info("X")
    assert not (tmp_path / "typo").exists()
    lake.add_stream(name="X", subjects=["x"])
    assert [i.config.name for i in lake.streams_info()] == ["X"]


def test_publish_batch_of_no_rows_is_a_no_op(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="E", subjects=["e.>"])
    version = lake.stream("E").table.snapshot().version
    ack = lake.publish_batch("E", pa.table({"subject": pa.array([], pa.string()), "data": pa.array([], pa.binary())}))
    assert (ack.stored, ack.count) == (0, 0)
    assert lake.stream("E").table.snapshot().version == version
