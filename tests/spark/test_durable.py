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
from jsspark.sink.lake_sink import ORIGIN_APP_PREFIX, ack_sources, collect_task, publish

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
    assert DeltaTable(lake.stream_uri("DST")).transaction_version(ORIGIN_APP_PREFIX + "SRC") == 20


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
    with pytest.raises(ValueError, match="several origin streams"):
        publish(opts, pa.concat_tables([task([9]), task([9], "OTHER")]))
    publish(WriteOptions(loc, "DST", dedup_by_origin=False), task([1]))
    assert _target(lake)[-1] == b"1"
