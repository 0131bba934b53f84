"""Compaction bounds file counts without changing messages or state; vacuum drops lost commits' files;
max_age is enforced on publish and by ``enforce_limits``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

import jsspark
from jsspark.engine import maintenance
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


def test_vacuum_removes_files_of_lost_commits(tmp_path: Path) -> None:
    """A data file in the table's folders that no log entry adds (a writer that lost the commit
    race or died before committing) is deleted once older than the retention; a younger one
    (maybe a commit in flight) is kept, and so is every message."""
    import os
    import shutil

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="V", subjects=["v.>"])
    for i in range(3):
        lake.publish(f"v.{i}", b"x")
    some = next((tmp_path / "streams" / "V").rglob("*.parquet"))
    lost = some.with_name("part-00000-lost-commit-c000.zstd.parquet")
    young = some.with_name("part-00000-in-flight-c000.zstd.parquet")
    shutil.copy(some, lost)
    shutil.copy(some, young)
    month_ago = time.time() - 30 * 86400
    os.utime(lost, (month_ago, month_ago))
    deleted = lake.vacuum("V", retention_hours=1)
    assert [Path(p).name for p in deleted] == [lost.name]
    assert not lost.exists() and young.exists()
    state = lake.stream_info("V").state
    assert (state.messages, state.first_seq, state.last_seq) == (3, 1, 3)
    assert [lake.get_msg("V", seq=s).subject for s in (1, 2, 3)] == ["v.0", "v.1", "v.2"]


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


def test_publish_batch_txns_hold_one_version_per_app_id_and_not_the_tables_own(tmp_path: Path) -> None:
    """A Delta commit holds one ``txn`` per app id (PROTOCOL.md, Action Reconciliation: Spark's writer
    refuses two versions of one, and its log replay keeps the last where delta-rs keeps the first), and
    ``jsspark.seq``/``jsspark.config`` are the table's own marks: a batch naming one was skipped as a
    replay, or committed a second sequence mark next to the real one."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="X", subjects=["x.>"])
    rows = pa.table({"subject": ["x.a", "x.b"], "data": [b"1", b"2"]})
    assert list(lake.publish_batch("X", rows).seqs) == [1, 2]
    for txn in ([("q", 5), ("q", 2)], ("jsspark.seq", 1), ("jsspark.seq", 100), ("jsspark.config", 7)):
        with pytest.raises(ValueError, match="txn"):
            lake.publish_batch("X", rows, txn=txn)
    state = lake.stream_info("X").state
    assert (state.messages, state.last_seq) == (2, 2)
    ack = lake.publish_batch("X", rows, txn=[("q", 5), ("q", 5)])  # one version given twice is one mark
    assert list(ack.seqs) == [3, 4]
    table = lake.stream("X").table.snapshot().table
    assert (table.transaction_version("q"), table.transaction_version("jsspark.seq")) == (5, 4)
    logs = sorted((tmp_path / "streams" / "X" / "_delta_log").glob("*.json"))
    assert len(logs) == 3  # create, two publishes, nothing of the refused ones
    for log in logs:
        apps = [json.loads(line)["txn"]["appId"] for line in log.read_text().splitlines() if '"txn"' in line]
        assert len(apps) == len(set(apps)), (log.name, apps)


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


# -- upkeep: what the process that makes every EVERY-th version does (engine/maintenance.py) ----------


def test_upkeep_schedule_tiers_and_vacuum() -> None:
    """Every EVERY-th version; tier k (target TIERS[k]) every 10**k-th upkeep; vacuum from tier 1."""
    every, tiers = maintenance.EVERY, maintenance.TIERS
    for version in range(0, 25 * every * 10 + 1, 7):  # versions between upkeeps owe nothing
        if version % every:
            assert maintenance.due(version) is None
    assert maintenance.due(0) is None
    for turn in range(1, 2_500):
        u = maintenance.due(turn * every)
        tier = max(k for k in range(len(tiers)) if turn % 10**k == 0)
        assert u == maintenance.Upkeep(tiers[tier], tier >= maintenance.VACUUM_TIER), turn


@pytest.fixture
def often(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upkeep every 10 versions, the tiers as they are (the test's files are far below 2 MiB)."""
    monkeypatch.setattr(maintenance, "EVERY", 10)


def _batch(b: int, n: int = 40) -> pa.Table:
    return pa.table({"subject": [f"k.{(b * n + i) % 13}" for i in range(n)], "data": [b"%d-%d" % (b, i) for i in range(n)]})


def test_upkeep_bounds_files_and_log_and_keeps_every_message(tmp_path: Path, often: None) -> None:
    """A long run of small commits: files, log entries and files on disk stay bounded (with the
    table's own short retentions), the messages and state are what was published, and the
    writer's index is never rebuilt because of its own upkeep."""
    from deltalake import DeltaTable

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="K", subjects=["k.>"], max_msgs=3_000)
    table_dir = tmp_path / "streams" / "K"
    DeltaTable(str(table_dir)).alter.set_table_properties(  # checkpoints as often as the upkeeps
        {"delta.logRetentionDuration": "interval 0 seconds", "delta.deletedFileRetentionDuration": "interval 0 seconds",
         "delta.checkpointInterval": "10"})
    ls = lake.stream("K")
    published = []
    for b in range(230):
        published.append(_batch(b))
        lake.publish_batch("K", published[-1])
        assert ls._index is not None and ls._index.version == ls.table.snapshot().version  # never dropped
    version = ls.table.snapshot().version
    assert version > 230  # the upkeeps' compactions are commits too
    files = _files(lake, "K")
    assert files <= 8 * (1 + 10), files  # one compacted file per partition, and what came since
    log = [p for p in (table_dir / "_delta_log").iterdir() if p.name.endswith(".json")]
    assert len(log) <= 3 * 10, len(log)  # cleaned up to the newest checkpoint at every upkeep
    on_disk = list(table_dir.rglob("*.parquet"))
    assert len(on_disk) <= files + 8 * 100, len(on_disk)  # vacuumed every 100 versions; 9,200 were written
    everything = pa.concat_tables(published)
    kept = lake.stream("K").read().sort_by("seq")
    assert kept["seq"].to_pylist() == list(range(everything.num_rows - 3_000 + 1, everything.num_rows + 1))
    assert kept["data"].to_pylist() == everything["data"].to_pylist()[-3_000:]
    assert kept["subject"].to_pylist() == everything["subject"].to_pylist()[-3_000:]
    state = lake.stream_info("K").state
    assert (state.messages, state.first_seq, state.last_seq) == (3_000, everything.num_rows - 2_999, everything.num_rows)
    fresh = jsspark.connect(str(tmp_path))
    assert fresh.stream_info("K").state == state
    assert fresh.stream("K").read().sort_by("seq").equals(kept)
    dt = ls.table.snapshot().table
    proto = dt.protocol()
    assert (proto.min_reader_version, proto.min_writer_version) == (1, 2) and not proto.writer_features


def test_vacuum_commits_do_not_hide_the_recorded_state(tmp_path: Path, often: None) -> None:
    """An upkeep's vacuum commits (VACUUM START/END) change nothing: the state still comes from
    the newest commit that recorded one, with no index built."""
    from deltalake import DeltaTable

    from jsspark.engine.table import MessageTable

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="V", subjects=["k.>"], max_msgs_per_subject=1)
    DeltaTable(str(tmp_path / "streams" / "V")).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": "interval 0 seconds"})
    ls = lake.stream("V")
    b = 0
    while "VACUUM END" not in [h.get("operation") for h in ls.table.snapshot().table.history(3)]:
        lake.publish_batch("V", _batch(b))
        b += 1
        assert b < 120, "no vacuum within 100 versions"
    table = MessageTable(str(tmp_path / "streams" / "V"))
    recorded = table.recorded_state(table.snapshot())
    assert recorded is not None and recorded["messages"] == 13 and recorded["last_seq"] == b * 40
    assert jsspark.connect(str(tmp_path)).stream_info("V").state.messages == 13


def test_upkeep_failure_never_fails_the_publish(tmp_path: Path, often: None, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    from jsspark.engine.table import MessageTable

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(MessageTable, "compact", broken)
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="F", subjects=["k.>"])
    for b in range(25):
        assert lake.publish_batch("F", _batch(b)).stored == 40
    assert "table upkeep after version 10 failed" in caplog.text and "disk full" in caplog.text
    assert lake.stream_info("F").state.messages == 1_000
    assert lake.stream("F").read().num_rows == 1_000


def test_upkeep_with_two_writers_loses_and_doubles_nothing(tmp_path: Path, often: None) -> None:
    """Two processes' handles take turns, each doing the upkeeps its versions owe: sequences stay
    contiguous, every message is there once, both see the same state."""
    a, b = jsspark.connect(str(tmp_path)), jsspark.connect(str(tmp_path))
    a.add_stream(name="W", subjects=["k.>"])
    sent = []
    for i in range(120):
        batch = _batch(i, 7)
        sent.append(batch)
        (a if i % 3 else b).publish_batch("W", batch)
    rows = jsspark.connect(str(tmp_path)).stream("W").read().sort_by("seq")
    everything = pa.concat_tables(sent)
    assert rows["seq"].to_pylist() == list(range(1, everything.num_rows + 1))
    assert rows["data"].to_pylist() == everything["data"].to_pylist()
    assert a.stream_info("W").state == b.stream_info("W").state
    assert _files(a, "W") <= 8 * (1 + 10)


def test_files_of_large_messages_hold_each_payload_once(tmp_path: Path) -> None:
    """Payloads carry no Parquet statistics: delta-rs kept every row group's min and max payload
    untruncated in the footer, so a file of incompressible 1 MiB messages was 3 times their
    size (and its writer held the copies in memory to the end: a landing's peak memory was 6
    times its batch). The other columns keep theirs: a get by sequence still prunes by ``seq``."""
    import os

    import pyarrow.parquet as pq

    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="L", subjects=["l.>"])
    payloads = [os.urandom(1 << 20) for _ in range(12)]
    lake.publish_batch("L", pa.table({"subject": ["l.k"] * 12, "data": payloads}))
    lake.compact("L")  # the rewrite too
    paths = [p.removeprefix("file://") for p in lake.stream("L").table.snapshot().table.file_uris()]
    assert sum(os.path.getsize(p) for p in paths) < 1.1 * sum(map(len, payloads))
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        names = meta.schema.names
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            assert group.column(names.index("data")).statistics is None
            assert group.column(names.index("seq")).statistics.has_min_max
    assert lake.get_msg("L", seq=7).data == payloads[6]


def test_row_groups_of_large_messages_hold_few_rows(tmp_path: Path) -> None:
    """A get by sequence decodes one row group, so a group is kept small in bytes too (about
    ``ROW_GROUP_BYTES`` of the batch's, or when compacting the stream's, average message),
    when written and when compacted; small messages keep groups of ``ROW_GROUP_ROWS``. With
    16,384 rows a group of 1 MiB messages held the whole file (a compacted 200 MiB file: 256 ms
    and 0.8 GB for one message's get, 42 ms now)."""
    import os

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from jsspark.engine.table import ROW_GROUP_BYTES, ROW_GROUP_ROWS

    lake = jsspark.connect(str(tmp_path / "lake"))

    def groups(name: str) -> list[int]:
        out = []
        for path in lake.stream(name).table.snapshot().table.file_uris():
            meta = pq.ParquetFile(path.removeprefix("file://")).metadata
            out += [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        return out

    size = 256 << 10  # 15 rows in ROW_GROUP_BYTES, as a power of two: 8
    lake.add_stream(name="L", subjects=["l.>"])
    for _ in range(3):
        lake.publish_batch("L", pa.table({"subject": ["l.k"] * 40, "data": [os.urandom(size) for _ in range(40)]}))
    assert set(groups("L")) == {8} and ROW_GROUP_BYTES // size == 16
    lake.compact("L")
    assert len(groups("L")) == 15 and set(groups("L")) == {8}
    want = lake.stream("L").read().filter(pc.equal(pc.field("seq"), 77))["data"][0].as_py()
    assert lake.get_msg("L", seq=77).data == want
    lake.add_stream(name="S", subjects=["s.>"])
    n = ROW_GROUP_ROWS + 100
    lake.publish_batch("S", pa.table({"subject": ["s.k"] * n, "data": [b"s" * 100] * n}))
    assert groups("S") == [ROW_GROUP_ROWS, 100]
