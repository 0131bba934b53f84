"""Durable ``jetstream`` sources into the ``jetstream`` sink: resets made by another process
are honoured (back: re-delivered, nothing duplicated; ahead: exactly the skipped messages
are skipped), and every committed batch is acked, never before the sink's commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import jsspark
from jsspark.datasource.options import WriteOptions
from jsspark.datasource.planning import Cursor, Durable
from jsspark.sink.lake_sink import ORIGIN_APP_PREFIX, ack_sources, collect_task, origin_app_id, publish

pytestmark = pytest.mark.spark


def _lake(tmp_path: Path, retention: str = "limits") -> tuple[str, Any]:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="SRC", subjects=["src.>"], retention=retention)
    lake.add_stream(name="DST", subjects=["dst.>"])
    return loc, lake


def _publish(lake: Any, first: int, n: int) -> None:
    lake.publish_batch(
        "SRC",
        pa.table({"subject": [f"src.{i % 3}" for i in range(first, first + n)],
                  "data": [f"m{i}".encode() for i in range(first, first + n)]}),
    )


def _copy(spark: Any, loc: str, ck: Path, ack_policy: str = "none", **opts: Any) -> Any:
    """SRC -> DST through a durable consumer, keeping the origin columns for the sink."""
    r = spark.readStream.format("jetstream").option("stream", "SRC").option("durable_name", "MIRROR")
    r = r.option("ack_policy", ack_policy).option("maxMessagesPerTrigger", 4)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return (
        r.load(loc)
        .selectExpr("regexp_replace(subject, '^src', 'dst') AS subject", "data", "headers", "stream", "seq")
        .writeStream.format("jetstream").option("stream", "DST").option("checkpointLocation", str(ck))
    )


def _run(spark: Any, loc: str, ck: Path, **opts: Any) -> list[int]:
    q = _copy(spark, loc, ck, **opts).trigger(availableNow=True).start(loc)
    q.awaitTermination(120)
    if q.exception():
        raise q.exception()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def _target(lake: Any) -> list[bytes]:
    return [r["data"] for r in lake.stream("DST").read().sort_by("seq").to_pylist()]


def _m(*idx: int) -> list[bytes]:
    return [f"m{i}".encode() for i in idx]


def test_reset_back_and_ahead_while_stopped(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    ck = tmp_path / "ck"
    _publish(lake, 0, 10)  # seqs 1..10 hold m0..m9
    assert _run(spark, loc, ck) == [4, 4, 2]
    assert _target(lake) == _m(*range(10))
    info = lake.consumer_info("SRC", "MIRROR")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq) == (10, 10)

    # back: the query re-reads 3..10 from its checkpoint's next batch; the sink drops them all
    gen = lake.reset_consumer("SRC", "MIRROR", 3).reset_generation
    assert _run(spark, loc, ck) == [4, 4]
    assert _target(lake) == _m(*range(10))
    info = lake.consumer_info("SRC", "MIRROR")
    assert (info.reset_generation, info.delivered.stream_seq, info.delivered.consumer_seq) == (gen, 10, 8)

    # ahead: 11..14 are skipped, exactly
    _publish(lake, 10, 10)  # seqs 11..20
    lake.reset_consumer("SRC", "MIRROR", 15)
    assert _run(spark, loc, ck) == [4, 2]
    assert _target(lake) == _m(*range(10), *range(14, 20))
    origin = f"SRC.{DeltaTable(lake.stream_uri('SRC')).metadata().id}.d.MIRROR"  # the origin: table and durable
    assert DeltaTable(lake.stream_uri("DST")).transaction_version(origin_app_id(origin)) == 20


def test_reset_while_running(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    _publish(lake, 0, 6)
    q = _copy(spark, loc, tmp_path / "ck").trigger(processingTime="0 seconds").start(loc)
    try:
        q.processAllAvailable()
        assert _target(lake) == _m(*range(6))
        lake.reset_consumer("SRC", "MIRROR", 2)  # back, by another "process"
        _publish(lake, 6, 2)
        q.processAllAvailable()
        assert _target(lake) == _m(*range(8))
        lake.reset_consumer("SRC", "MIRROR", 12)  # ahead past the end: 9..11 are never copied
        _publish(lake, 8, 6)  # seqs 9..14
        q.processAllAvailable()
        assert _target(lake) == _m(*range(8), 11, 12, 13)
    finally:
        q.stop()
    info = lake.consumer_info("SRC", "MIRROR")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq) == (14, 14)


def test_replanned_first_batch_after_reset_reads_the_same_range(spark: Any, tmp_path: Path) -> None:
    """The batch after a reset is deterministic: its end offset carries where it starts."""
    loc, lake = _lake(tmp_path)
    ck = tmp_path / "ck"
    _publish(lake, 0, 8)
    assert _run(spark, loc, ck) == [4, 4]
    lake.reset_consumer("SRC", "MIRROR", 7)
    assert _run(spark, loc, ck) == [2]
    offsets = sorted(int(p.name) for p in (ck / "offsets").iterdir() if p.name.isdigit())
    last = json.loads((ck / "offsets" / str(offsets[-1])).read_text().splitlines()[2])
    assert (last["seq"], last["base"], last["gen"]) == (8, {"seq": 6, "dseq": 0}, 1)
    for f in (str(offsets[-1]), f".{offsets[-1]}.crc"):  # crash before Spark's commit log
        (ck / "commits" / f).unlink(missing_ok=True)
    assert _run(spark, loc, ck) == [2]  # the same two messages, 7 and 8, again
    assert _target(lake) == _m(*range(8))


def test_work_queue_acked_by_the_sink_and_replay_is_not_loss(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, retention="workqueue")
    ck = tmp_path / "ck"
    _publish(lake, 0, 10)
    assert _run(spark, loc, ck, ack_policy="explicit") == [4, 4, 2]
    assert _target(lake) == _m(*range(10))
    state = lake.stream_info("SRC").state
    assert (state.messages, state.first_seq) == (0, 11)  # all acked, so removed
    # a crash after the sink's commit (and its ack) but before Spark's commit log: the replayed
    # batch finds its messages gone, which is not data loss, and stores nothing twice
    for f in ("2", ".2.crc"):
        (ck / "commits" / f).unlink(missing_ok=True)
    assert _run(spark, loc, ck, ack_policy="explicit") == []
    assert _target(lake) == _m(*range(10))


def test_sink_acks_only_after_its_commit(tmp_path: Path) -> None:
    """``ack_sources`` reads the batch's offsets from the checkpoint; the stream writer calls
    it after ``publish`` returned, and a failed publish acks nothing."""
    loc, lake = _lake(tmp_path, retention="workqueue")
    lake.add_consumer("SRC", durable_name="MIRROR", ack_policy="explicit")
    _publish(lake, 0, 4)
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    end = Cursor(3, 3, gen=0, durable=Durable(loc, "SRC", "MIRROR"))
    (ck / "offsets" / "0").write_text("v1\n{}\n" + json.dumps(end.to_offset()) + "\n")
    opts = WriteOptions(loc, "DST", checkpoint_location=str(ck))
    from jsspark.sink.lake_sink import LakeStreamWriter

    rows = pa.record_batch({"subject": ["dst.x"], "data": [b"x"], "stream": ["SRC"], "seq": [1]})
    bad = pa.record_batch({"subject": ["elsewhere"], "data": [b"x"], "stream": ["SRC"], "seq": [1]})
    with pytest.raises(Exception, match="does not listen"):
        LakeStreamWriter(opts).commit([collect_task([bad], loc, "t")], 0)
    assert lake.consumer_info("SRC", "MIRROR").ack_floor.stream_seq == 0
    LakeStreamWriter(opts).commit([collect_task([rows], loc, "t")], 0)
    info = lake.consumer_info("SRC", "MIRROR")
    assert (info.ack_floor.stream_seq, lake.stream_info("SRC").state.first_seq) == (3, 4)
    lake.reset_consumer("SRC", "MIRROR", 1)  # a stale ack (older generation) is ignored
    assert ack_sources(opts, 0) == 1
    assert lake.consumer_info("SRC", "MIRROR").ack_floor.stream_seq == 0


def test_origin_dedup_rules(tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    opts = WriteOptions(loc, "DST")

    def task(seqs: list[int], stream: str = "SRC") -> pa.Table:
        from jsspark.sink.lake_sink import load_messages

        b = pa.record_batch({"subject": [f"dst.{s}" for s in seqs], "data": [b"%d" % s for s in seqs],
                             "stream": [stream] * len(seqs), "seq": seqs})
        return load_messages([collect_task([b], loc, "t")], loc)

    assert publish(opts, task([3, 1, 2])) is not None
    assert publish(opts, task([2, 3])) is None  # all at or below the mark
    publish(opts, task([3, 4, 4]))  # several rows per origin message are kept together
    assert _target(lake) == [b"1", b"2", b"3", b"4", b"4"]  # origin order
    publish(opts, pa.concat_tables([task([9]), task([5], "OTHER")]))  # two origins in one batch: a mark each
    assert _target(lake)[-2:] == [b"5", b"9"]
    assert publish(opts, pa.concat_tables([task([9]), task([5], "OTHER")])) is None
    publish(WriteOptions(loc, "DST", dedup_by_origin=False), task([1]))
    assert _target(lake)[-1] == b"1"


def test_a_row_with_a_null_origin_column_has_no_origin(tmp_path: Path) -> None:
    """An origin message is named by ``stream`` and ``seq`` together: a row with a stream and a
    null seq has none, as a row with a null stream (it was compared to the mark, and dropped)."""
    from jsspark.sink.lake_sink import load_messages

    loc, lake = _lake(tmp_path)
    opts = WriteOptions(loc, "DST")

    def task(streams: list[str | None], seqs: list[int | None]) -> pa.Table:
        b = pa.record_batch({"subject": ["dst.x"] * len(seqs), "data": [b"%d" % i for i in range(len(seqs))],
                             "stream": pa.array(streams, pa.string()), "seq": pa.array(seqs, pa.int64())})
        return load_messages([collect_task([b], loc, "t")], loc)

    for streams, seqs in ((["SRC"] * 3, [1, None, 2]), (["SRC", None], [1, 2])):
        with pytest.raises(ValueError, match=r"(1 of 2|2 of 3) rows carry an origin message \(non-null columns 'stream' and 'seq'\)"):
            publish(opts, task(streams, seqs), txn=("q", 0))
    assert _target(lake) == []
    publish(opts, task(["SRC", "SRC"], [None, None]), txn=("q", 0))  # no row names one: a plain publish
    assert _target(lake) == [b"0", b"1"]
    assert DeltaTable(lake.stream_uri("DST")).transaction_version(ORIGIN_APP_PREFIX + "SRC") is None


def test_origin_marks_are_kept_per_origin(tmp_path: Path) -> None:
    """The mark is the origin's (stream table and consumer, from the batch's source offsets),
    not the stream name's: two origins named alike never hide each other's messages, and one
    commit can carry the marks of several origins."""
    from jsspark.sink.lake_sink import load_messages

    loc, lake = _lake(tmp_path)
    opts = WriteOptions(loc, "DST")

    def task(seqs: list[int], stream: str = "SRC", consumer: str | None = None) -> pa.Table:
        cols: dict[str, Any] = {"subject": [f"dst.{stream}.{s}" for s in seqs], "data": [b"%s%d" % (stream.encode(), s) for s in seqs],
                                "stream": [stream] * len(seqs), "seq": seqs}
        if consumer is not None:
            cols["consumer"] = [consumer] * len(seqs)
        return load_messages([collect_task([pa.record_batch(cols)], loc, "t")], loc)

    here, there = "SRC.table-1.f.all", "SRC.table-2.f.all"
    assert publish(opts, task([1, 2, 3]), origins=[here]) is not None
    assert publish(opts, task([1, 2]), origins=[there]) is not None  # another SRC: not below the first one's mark
    assert publish(opts, task([2]), origins=[there]) is None  # its own mark holds
    other = "OTHER.table-3.d.X"
    publish(opts, pa.concat_tables([task([3, 4]), task([7], "OTHER")]), origins=[here, other])
    assert _target(lake) == [b"SRC1", b"SRC2", b"SRC3", b"SRC1", b"SRC2", b"SRC4", b"OTHER7"]
    dt = DeltaTable(lake.stream_uri("DST"))
    assert [dt.transaction_version(origin_app_id(o)) for o in (here, there, other)] == [4, 2, 7]
    # two sources of one stream name in a batch: told apart by the rows' consumer column
    d1, d2 = "SRC.table-1.d.D1", "SRC.table-2.d.D2"
    publish(opts, pa.concat_tables([task([5], consumer="D1"), task([5], consumer="D2")]), origins=[d1, d2])
    dt = DeltaTable(lake.stream_uri("DST"))
    assert [dt.transaction_version(origin_app_id(o)) for o in (d1, d2)] == [5, 5]
    with pytest.raises(ValueError, match=r"rows of origin stream SRC .* 2 jetstream sources"):
        publish(opts, task([6]), origins=[d1, d2])
    # rows whose origin the sink cannot identify (a streaming query's other source) keep the name's mark
    publish(opts, task([9]))
    assert DeltaTable(lake.stream_uri("DST")).transaction_version(ORIGIN_APP_PREFIX + "SRC") == 9


def test_batch_writes_store_every_row_and_keep_no_mark(spark: Any, tmp_path: Path) -> None:
    """A batch write has no offsets or batch id: its rows are stored whatever an earlier batch
    write of the same stream stored (a mark by the stream's name dropped the second filter's
    older messages), and it moves no mark a later write would be held back by."""
    loc, lake = _lake(tmp_path)
    _publish(lake, 0, 6)  # src.0 src.1 src.2 src.0 ...: seqs 1..6

    def write(flt: str) -> None:
        (spark.read.format("jetstream").option("stream", "SRC").option("filter_subject", flt).load(loc)
         .selectExpr("regexp_replace(subject, '^src', 'dst') AS subject", "data", "headers", "stream", "seq")
         .write.format("jetstream").option("stream", "DST").mode("append").save(loc))

    write("src.2")  # seqs 3, 6
    write("src.0")  # seqs 1, 4: below 6
    assert sorted(_target(lake)) == _m(0, 2, 3, 5)
    assert DeltaTable(lake.stream_uri("DST")).transaction_version(ORIGIN_APP_PREFIX + "SRC") is None
    write("src.1")
    assert sorted(_target(lake)) == _m(*range(6))


def test_same_stream_name_from_two_lakes_and_a_union(spark: Any, tmp_path: Path) -> None:
    """Two queries copy a stream called SRC from two lakes into one target; then one query
    copies a union of both through durables, is reset back on one of them, and stores nothing
    twice."""
    loc, lake = _lake(tmp_path)
    loc_b = str(tmp_path / "lake-b")
    lake_b = jsspark.connect(loc_b)
    lake_b.add_stream(name="SRC", subjects=["src.>"])
    _publish(lake, 0, 6)
    lake_b.publish_batch("SRC", pa.table({"subject": ["src.b"] * 3, "data": [b"b0", b"b1", b"b2"]}))

    def copy(ck: str, *sources: tuple[str, str | None]) -> None:
        frames = []
        for where, durable in sources:
            r = spark.readStream.format("jetstream").option("stream", "SRC")
            if durable:
                r = r.option("durable_name", durable)
            frames.append(r.load(where).selectExpr(
                "regexp_replace(subject, '^src', 'dst') AS subject", "data", "stream", "seq", "consumer"))
        df = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
        q = (df.writeStream.format("jetstream").option("stream", "DST").option("checkpointLocation", str(tmp_path / ck))
             .trigger(availableNow=True).start(loc))
        assert q.awaitTermination(120)
        assert q.exception() is None

    copy("ck-a", (loc, None))
    copy("ck-b", (loc_b, None))
    assert sorted(_target(lake)) == sorted([*_m(*range(6)), b"b0", b"b1", b"b2"])
    n = len(_target(lake))
    _publish(lake, 6, 2)
    lake_b.publish_batch("SRC", pa.table({"subject": ["src.b"], "data": [b"b3"]}))
    copy("ck-u", (loc, "UA"), (loc_b, "UB"))  # a new consumer per lake: everything once more, in one query
    assert len(_target(lake)) == n + 8 + 4
    lake.reset_consumer("SRC", "UA", 2)
    lake_b.reset_consumer("SRC", "UB", 1)
    copy("ck-u", (loc, "UA"), (loc_b, "UB"))  # re-delivered, held back by each origin's own mark
    assert len(_target(lake)) == n + 12


def test_a_row_emitted_after_its_origin_batch_is_not_held_back_by_the_mark(tmp_path: Path) -> None:
    """The mark holds back redeliveries: rows of messages the batch itself read. A row of a
    message an earlier batch read (at or below where this batch's reading began), which a
    stateful query emits only now, is stored; and the batch's txn keeps a replay out."""
    from jsspark.sink.lake_sink import batch_starts, load_messages

    loc, lake = _lake(tmp_path)
    opts = WriteOptions(loc, "DST")
    key = "SRC.table-1.f.all"

    def task(seqs: list[int]) -> pa.Table:
        b = pa.record_batch({"subject": [f"dst.{s}" for s in seqs], "data": [b"%d" % s for s in seqs],
                             "stream": ["SRC"] * len(seqs), "seq": seqs})
        return load_messages([collect_task([b], loc, "t")], loc)

    assert publish(opts, task([8, 10]), ("q", 0), [key]) is not None
    # batch 1, after a reset back to 7, read (7, 12]: 3 comes late (kept), 9 is a redelivery below
    # the mark (dropped), 12 is new
    assert publish(opts, task([3, 9, 12]), ("q", 1), [key], {key: 7}) is not None
    assert _target(lake) == [b"8", b"10", b"3", b"12"]
    dt = DeltaTable(lake.stream_uri("DST"))
    assert (dt.transaction_version(origin_app_id(key)), dt.transaction_version("q")) == (12, 1)
    replay = publish(opts, task([3, 9, 12]), ("q", 1), [key], {key: 7})  # a replay of it: nothing
    assert replay is not None and replay.replayed and _target(lake) == [b"8", b"10", b"3", b"12"]
    assert publish(opts, task([5]), ("q", 2), [key], {key: 12}) is not None  # late alone: the mark stays
    assert DeltaTable(lake.stream_uri("DST")).transaction_version(origin_app_id(key)) == 12
    assert _target(lake)[-1] == b"5"

    # where a batch's reading began: a reset's base, else the previous batch's offset
    prev = [{"seq": 10, "origin": key}, {"seq": 4, "origin": "B.t.f.x"}, {"seq": 9}]
    now = [{"seq": 12, "origin": key}, {"seq": 6, "origin": "B.t.f.x", "base": {"seq": 2}},
           {"seq": 1, "origin": "C.t.f.x"}]
    assert batch_starts(now, prev) == {key: 10, "B.t.f.x": 2}


def test_a_stream_stream_join_into_the_sink_loses_no_late_match(spark: Any, tmp_path: Path) -> None:
    """SRC rows joined with a second stream by key: the match of SRC seq 1 arrives a run after
    SRC seq 2's, so its row comes out after the mark has passed seq 1, and is stored."""
    loc, lake = _lake(tmp_path)
    lake.add_stream(name="KEYS", subjects=["keys.>"])
    lake.publish_batch("SRC", pa.table({"subject": ["src.b", "src.a"], "data": [b"m0", b"m1"]}))
    lake.publish_batch("KEYS", pa.table({"subject": ["keys.a"], "data": [b"k"]}))

    def run() -> None:
        left = spark.readStream.format("jetstream").option("stream", "SRC").load(loc).selectExpr(
            "stream", "seq", "data", "substring(subject, 5) AS k")
        right = spark.readStream.format("jetstream").option("stream", "KEYS").load(loc).selectExpr(
            "substring(subject, 6) AS rk")
        q = (left.join(right, left.k == right.rk).selectExpr("concat('dst.', k) AS subject", "data", "stream", "seq")
             .writeStream.format("jetstream").option("stream", "DST").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start(loc))
        assert q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert _target(lake) == [b"m1"]
    lake.publish_batch("KEYS", pa.table({"subject": ["keys.b"], "data": [b"k"]}))
    run()
    assert _target(lake) == [b"m1", b"m0"]
    run()  # nothing new: nothing twice
    assert _target(lake) == [b"m1", b"m0"]


def test_a_paused_durable_reads_nothing_until_resumed(spark: Any, tmp_path: Path) -> None:
    """A paused consumer delivers nothing (the server's ``loopAndGatherMsgs``): the query keeps
    running with empty batches, leaves the durable where it was, and copies everything once
    the pause is lifted."""
    from datetime import UTC, datetime, timedelta

    loc, lake = _lake(tmp_path)
    lake.add_consumer("SRC", durable_name="MIRROR", ack_policy="explicit")
    lake.pause_consumer("SRC", "MIRROR", datetime.now(UTC) + timedelta(hours=1))
    _publish(lake, 0, 5)
    assert _run(spark, loc, tmp_path / "ck", ack_policy="explicit") == []
    assert _target(lake) == []
    assert lake.consumer_info("SRC", "MIRROR").delivered.stream_seq == 0
    q = _copy(spark, loc, tmp_path / "ck", ack_policy="explicit").trigger(processingTime="0 seconds").start(loc)
    try:
        q.processAllAvailable()
        assert _target(lake) == []
        lake.pause_consumer("SRC", "MIRROR", None)
        q.processAllAvailable()
        assert _target(lake) == _m(*range(5))
    finally:
        q.stop()
    info = lake.consumer_info("SRC", "MIRROR")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq) == (5, 5)


def test_a_batch_left_planned_is_replayed_after_its_durable_was_deleted(spark: Any, tmp_path: Path) -> None:
    """A query failed (or was stopped) in a batch it had planned, and its durable was deleted
    while it was stopped (by hand, or by its inactive_threshold): the restart replays that batch
    before it plans anything, so the durable is created again at the checkpoint there, and the
    query reads on with nothing lost or twice. Before, the replay asked for the durable first and
    failed 'deleted while the query used it; restart the query to create it again', at every
    restart."""
    loc, lake = _lake(tmp_path)
    _publish(lake, 0, 6)
    ck, got = tmp_path / "ck", []

    def failing(df: Any, batch_id: int) -> None:
        if batch_id == 1:
            raise RuntimeError("sink down")
        got.extend(r.seq for r in df.select("seq").collect())

    def reader() -> Any:
        return (spark.readStream.format("jetstream").option("stream", "SRC").option("durable_name", "D")
                .option("ack_policy", "explicit").option("maxMessagesPerTrigger", 3).load(loc))

    q = reader().writeStream.foreachBatch(failing).option("checkpointLocation", str(ck)).trigger(
        availableNow=True).start()
    with pytest.raises(Exception, match="sink down"):
        q.awaitTermination(120)
    assert got == [1, 2, 3]
    lake.delete_consumer("SRC", "D")
    q = reader().writeStream.foreachBatch(lambda df, _: got.extend(r.seq for r in df.select("seq").collect())).option(
        "checkpointLocation", str(ck)).trigger(availableNow=True).start()
    q.awaitTermination(120)
    assert q.exception() is None
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    assert lake.consumer_info("SRC", "D").delivered.stream_seq == 6
