"""``format("jetstream")`` reads: batch, streaming with admission control, restarts, data loss."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

import jsspark
from jsspark.datasource.options import OptionError, parse_read_options
from jsspark.datasource.pacing import TriggerPacing
from jsspark.datasource.planning import Cursor, DataLossError, Planner
from jsspark.datasource.schema import ARROW_SCHEMA, spark_schema
from jsspark.datasource.source import JetStreamDataSource
from jsspark.errors import APIError
from jsspark.local_spark import CHECKPOINT_MANAGER, LOCAL_CHECKPOINTS
from tests.live.test_durable_source import wait_for

pytestmark = pytest.mark.spark


def _lake(tmp_path: Path, n: int = 10, name: str = "ORDERS") -> tuple[str, Any]:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    if n:
        _publish(lake, name, 0, n)
    return loc, lake


def _publish(lake: Any, name: str, first: int, n: int) -> None:
    lake.publish_batch(
        name,
        pa.table(
            {
                "subject": [f"{name.lower()}.{i % 3}" for i in range(first, first + n)],
                "data": [f"m{i}".encode() for i in range(first, first + n)],
            }
        ),
    )


def _read(spark: Any, loc: str, **opts: Any) -> Any:
    r = spark.read.format("jetstream").option("stream", opts.pop("stream", "ORDERS"))
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load(loc)


def _stream(spark: Any, loc: str, **opts: Any) -> Any:
    r = spark.readStream.format("jetstream").option("stream", opts.pop("stream", "ORDERS"))
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load(loc)


def _run_available_now(df: Any, ckpt: Path, out: Path, progress: list[Any] | None = None) -> list[int]:
    """Run to the end with Trigger.AvailableNow into a Parquet sink; rows per batch."""
    q = (
        df.writeStream.format("parquet")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start(str(out))
    )
    q.awaitTermination(120)
    if q.exception():
        raise q.exception()
    if progress is not None:
        progress.extend(q.recentProgress)
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def test_arrow_schema_is_what_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)


def test_auto_registered_and_register(spark: Any, tmp_path: Path) -> None:
    loc, _ = _lake(tmp_path, 3)
    assert _read(spark, loc).count() == 3  # found through the pyspark_jetstream module
    jsspark.register(spark)
    assert _read(spark, loc).count() == 3


def test_batch_read_all(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, 10)
    lake.publish("orders.h", b"with headers", headers=[("A", "1"), ("A", "2"), ("B", "x")])
    df = _read(spark, loc, minPartitions=3)
    assert df.rdd.getNumPartitions() == 3
    stored = lake.stream("ORDERS").read().sort_by("seq").to_pylist()
    n = len(stored)
    expected = spark.createDataFrame(
        [
            (
                "ORDERS", r["subject"], r["seq"], r["time"], r["ts_ns"],
                [(h["name"], h["value"]) for h in r["headers"]] if r["headers"] else None,
                r["data"], None, i + 1, n - i - 1,
            )
            for i, r in enumerate(stored)
        ],
        spark_schema(),
    )
    assert_df_equality(df.orderBy("seq"), expected)
    last = df.filter("seq = 11").first()
    assert [(h.name, h.value) for h in last.headers] == [("A", "1"), ("A", "2"), ("B", "x")]


def test_filters_headers_only_and_durable_name(spark: Any, tmp_path: Path) -> None:
    loc, _ = _lake(tmp_path, 9)
    rows = _read(spark, loc, filter_subjects="orders.1, orders.2", headers_only="true", durable_name="D").orderBy("seq").collect()
    assert [r.seq for r in rows] == [2, 3, 5, 6, 8, 9]
    assert [r.delivery_seq for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r.num_pending for r in rows] == [5, 4, 3, 2, 1, 0]
    assert all(r.data == bytearray() and [(h.name, h.value) for h in r.headers] == [("Nats-Msg-Size", "2")] for r in rows)
    assert {r.consumer for r in rows} == {"D"}
    json_list = _read(spark, loc, filter_subjects='["orders.0"]').select("seq").collect()
    assert [r.seq for r in json_list] == [1, 4, 7]


def test_available_now_bounded_batches(spark: Any, tmp_path: Path) -> None:
    loc, _ = _lake(tmp_path, 10)
    counts = _run_available_now(_stream(spark, loc, maxMessagesPerTrigger=4), tmp_path / "ck", tmp_path / "out")
    assert counts == [4, 4, 2]
    out = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r.seq for r in out.select("seq").collect()) == list(range(1, 11))
    assert sorted(r.delivery_seq for r in out.select("delivery_seq").collect()) == list(range(1, 11))


def test_available_now_max_bytes(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, 6)
    size = lake.stream_info("ORDERS").state.bytes // 6  # all messages have the same stored size
    progress: list[Any] = []
    df = _stream(spark, loc, maxBytesPerTrigger=size * 2 + 1, reportLatestOffset="true")
    assert _run_available_now(df, tmp_path / "ck", tmp_path / "out", progress) == [2, 2, 2]
    source = progress[0]["sources"][0]
    end = json.loads(source["endOffset"])
    assert (end["seq"], end["dseq"], end["origin"].split(".")[0]) == (2, 2, "ORDERS")
    assert json.loads(source["latestOffset"]) == {"seq": 6}


def test_restart_from_checkpoint_delivers_exactly_the_rest(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, 10)
    ck, out = tmp_path / "ck", tmp_path / "out"
    assert _run_available_now(_stream(spark, loc, maxMessagesPerTrigger=6), ck, out) == [6, 4]
    _publish(lake, "ORDERS", 10, 5)
    assert _run_available_now(_stream(spark, loc, maxMessagesPerTrigger=6), ck, out) == [5]
    rows = spark.read.parquet(str(out)).select("seq", "delivery_seq").collect()
    assert sorted((r.seq, r.delivery_seq) for r in rows) == [(i, i) for i in range(1, 16)]
    # the checkpoint was written by local_spark's manager (LOCAL_CHECKPOINTS): one entry per batch in each log
    assert spark.conf.get(CHECKPOINT_MANAGER) == LOCAL_CHECKPOINTS[CHECKPOINT_MANAGER]
    for log in ("offsets", "commits"):
        assert sorted(p.name for p in (ck / log).iterdir() if not p.name.startswith(".")) == ["0", "1", "2"]


def test_replanned_batch_reads_the_same_messages(spark: Any, tmp_path: Path) -> None:
    """A batch whose offsets were logged but not committed is replanned from the log on
    restart: same range, same messages, even with new messages published meanwhile."""
    loc, lake = _lake(tmp_path, 10)
    ck = tmp_path / "ck"
    seen: list[list[int]] = []

    def collect(df: Any, batch_id: int) -> None:
        seen.append(sorted(r.seq for r in df.select("seq").collect()))

    def run() -> None:
        q = (
            _stream(spark, loc, maxMessagesPerTrigger=4)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)

    run()
    assert seen == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    for f in ("2", ".2.crc"):  # crash after the offset log, before the commit log
        (ck / "commits" / f).unlink(missing_ok=True)
    _publish(lake, "ORDERS", 10, 3)
    seen.clear()
    run()
    assert seen[0] == [9, 10]
    assert [s for b in seen for s in b] == [9, 10, 11, 12, 13]


def test_data_loss_fails_or_skips(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, 5)
    ck, out = tmp_path / "ck", tmp_path / "out"
    assert _run_available_now(_stream(spark, loc), ck, out) == [5]
    _publish(lake, "ORDERS", 5, 5)
    lake.purge_stream("ORDERS", seq=9)  # 6..8 go unread
    with pytest.raises(Exception, match=r"stream ORDERS: messages 6\.\.8 were removed .* first sequence is now 9"):
        _run_available_now(_stream(spark, loc), ck, out)
    assert _run_available_now(_stream(spark, loc, failOnDataLoss="false"), ck, tmp_path / "out2") == [2]


def test_planned_range_shrinking_is_data_loss(tmp_path: Path) -> None:
    """Interior deletes inside a planned batch are caught by the delivered count."""
    loc, lake = _lake(tmp_path, 10)
    from jsspark.datasource.options import parse_read_options

    planner = Planner(parse_read_options({"path": loc, "stream": "ORDERS"}))
    start = Cursor.from_offset(planner.initial().to_offset())
    end = planner.latest(start, 5, None)
    assert end.to_offset() == {"seq": 5, "dseq": 5, "pending": 5}
    lake.delete_msg("ORDERS", 3)
    with pytest.raises(RuntimeError, match=r"must deliver 5 messages but only 4"):
        planner.partitions(start, end)
    lenient = Planner(parse_read_options({"path": loc, "stream": "ORDERS", "failondataloss": "false"}))
    parts = lenient.partitions(start, end)
    assert sum(p.expected for p in parts) == 4


def test_invalid_options_name_the_option(spark: Any, tmp_path: Path) -> None:
    loc, _ = _lake(tmp_path, 1)
    with pytest.raises(Exception, match="unknown option 'maxoffsetspertrigger'"):
        _read(spark, loc, maxOffsetsPerTrigger=5)
    with pytest.raises(Exception, match="option 'maxMessagesPerTrigger' must be an integer"):
        _stream(spark, loc, maxMessagesPerTrigger="ten")
    with pytest.raises(Exception, match="option 'deliver_policy' must be one of"):
        _read(spark, loc, deliver_policy="first")
    with pytest.raises(Exception, match="stream not found") as info:
        _read(spark, loc, stream="NOPE")
    assert f"jetstream source: option stream 'NOPE', lake {loc}" in str(info.value)  # the note reaches Spark's text
    with pytest.raises(APIError) as api:  # the server's own error, type and text, with the note beside it
        parse_read_options({"path": loc, "stream": "NOPE"})
    assert str(api.value) == "StreamNotFoundError: code=404 err_code=10059 description='stream not found'"
    assert api.value.__notes__ == [f"jetstream source: option stream 'NOPE', lake {loc}"]


def test_rate_limit_with_a_durable_fails_at_load(spark: Any, tmp_path: Path) -> None:
    """A durable is bound as a pull consumer, which takes no rate limit: the combination fails at
    ``load()``, as invalid options do, not when the query starts (and creates nothing)."""
    loc, lake = _lake(tmp_path, 1)
    with pytest.raises(Exception, match="rate_limit_bps needs a push consumer; a durable_name binds a pull consumer"):
        _stream(spark, loc, durable_name="etl", ack_policy="explicit", rate_limit_bps=1000)
    with pytest.raises(OptionError, match="rate_limit_bps needs a push consumer"):
        parse_read_options({"path": loc, "stream": "ORDERS", "durable_name": "etl", "rate_limit_bps": "1000"})
    assert lake.consumers_info("ORDERS") == []
    assert parse_read_options({"path": loc, "stream": "ORDERS", "rate_limit_bps": "1000"}).consumer.rate_limit_bps == 1000
    assert parse_read_options({"path": loc, "stream": "ORDERS", "durable_name": "etl",
                               "rate_limit_bps": "0"}).consumer_name == "etl"  # 0: no limit


def test_trigger_pacing_holds_a_partial_batch_until_the_delay() -> None:
    """The rule both sources pace by, on explicit times: the first batch goes at once even on a
    clock that began a second ago (``time.monotonic`` counts from boot); then a partial batch
    waits ``maxTriggerDelay`` after the last one, except right after a full one."""
    pacing = TriggerPacing(900.0)
    assert pacing.due_at() <= 1.0  # no batch yet: due at once, whatever the clock's origin
    pacing.went(1.0, full=False)
    assert pacing.due_at() == 901.0
    pacing.went(950.0, full=True)
    assert pacing.due_at() <= 950.5  # the tail after a full batch goes at once
    pacing.went(950.5, full=False)
    assert pacing.due_at() == 1850.5


def test_paced_batches_wait_for_enough_messages_or_the_delay(tmp_path: Path) -> None:
    """``minMessagesPerTrigger`` / ``maxTriggerDelay`` (Kafka's ``minOffsetsPerTrigger`` /
    ``maxTriggerDelay``) as Spark's driver calls the source: the first batch goes at once; then a
    batch with fewer messages is held (``latestOffset`` returns its start) until the delay has
    passed since the last batch; one with enough goes at once, and so does the one right after
    it; a filter counts only its own messages; an AvailableNow run is never held."""
    loc, lake = _lake(tmp_path, 5)
    delay = 2.0
    options = {"path": loc, "stream": "ORDERS", "minMessagesPerTrigger": "10", "maxTriggerDelay": f"{int(delay)} seconds"}
    reader = JetStreamDataSource(options).streamReader(spark_schema())
    limit = reader.getDefaultReadLimit()
    # the delay counts from the batch's own time, read inside latestOffset: no earlier than
    # ``before``, and possibly earlier than ``last`` by however long the thread waited for the CPU
    before = time.monotonic()
    first = reader.latestOffset(reader.initialOffset(), limit)
    assert first["seq"] == 5  # the first batch goes at once
    last = time.monotonic()
    _publish(lake, "ORDERS", 5, 3)
    assert reader.latestOffset(first, limit) == first and time.monotonic() - last < delay  # 3 < 10, too soon
    ends: list[dict[str, Any]] = []
    wait_for(lambda: ends.append(reader.latestOffset(first, limit)) or ends[-1] != first, delay + 10, "the delay to pass")
    assert ends[-1]["seq"] == 8 and time.monotonic() - before >= delay
    last = time.monotonic()
    _publish(lake, "ORDERS", 8, 12)
    full = reader.latestOffset(ends[-1], limit)
    assert full["seq"] == 20 and time.monotonic() - last < delay  # 12 >= 10: at once
    _publish(lake, "ORDERS", 20, 2)
    tail = reader.latestOffset(full, limit)
    assert tail["seq"] == 22 and time.monotonic() - last < delay  # the tail right after a full batch
    _publish(lake, "ORDERS", 22, 2)
    assert reader.latestOffset(tail, limit) == tail and time.monotonic() - last < delay  # partial, too soon

    # subjects orders.0/1/2 in turn: 24 stored, 8 on orders.0; with a filter only those count
    filtered = JetStreamDataSource({**options, "filter_subject": "orders.0", "minMessagesPerTrigger": "9"})
    reader = filtered.streamReader(spark_schema())
    at = reader.latestOffset(reader.initialOffset(), limit)
    assert at["dseq"] == 8  # the first batch (at once): all 8
    _publish(lake, "ORDERS", 24, 21)  # 7 more on orders.0: held, although 21 messages came
    assert reader.latestOffset(at, limit) == at
    _publish(lake, "ORDERS", 45, 6)  # 2 more on orders.0: 9
    assert reader.latestOffset(at, limit)["dseq"] == 17

    now = JetStreamDataSource({**options, "minMessagesPerTrigger": "100", "maxMessagesPerTrigger": "45"})
    reader = now.streamReader(spark_schema())
    reader.prepareForTriggerAvailableNow()
    at = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert at["seq"] == 45
    assert reader.latestOffset(at, reader.getDefaultReadLimit())["seq"] == 51  # AvailableNow: 6 < 100, never held
    for bad, match in (({"minMessagesPerTrigger": "0"}, "option 'minMessagesPerTrigger' must be >= 1"),
                       ({"maxTriggerDelay": "soon"}, "option 'maxTriggerDelay' must be an interval")):
        with pytest.raises(OptionError, match=match):
            parse_read_options({**options, **bad})


def test_durable_consumer_follows_committed_batches(spark: Any, tmp_path: Path) -> None:
    """``durable_name`` creates/binds a lake consumer; every batch Spark commits is acked
    (when the next batch is planned, which AvailableNow also does after its last batch), so an
    interest stream drops what Spark has processed."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="ORDERS", subjects=["orders.>"], retention="interest")
    ck, out = tmp_path / "ck", tmp_path / "out"

    def run(ckpt: Path = ck, dest: Path = out) -> list[int]:
        return _run_available_now(_stream(spark, loc, durable_name="SPARK", maxMessagesPerTrigger=4), ckpt, dest)

    assert run() == []  # binds the durable: from now on the stream keeps messages for it
    assert [c.name for c in lake.consumers_info("ORDERS")] == ["SPARK"]
    _publish(lake, "ORDERS", 0, 10)
    assert run() == [4, 4, 2]
    info = lake.consumer_info("ORDERS", "SPARK")
    assert (info.delivered.stream_seq, info.delivered.consumer_seq, info.ack_floor.stream_seq) == (10, 10, 10)
    assert lake.stream_info("ORDERS").state.first_seq == 11  # acked messages left the interest stream
    rows = [r.seq for r in spark.read.parquet(str(out)).collect()]
    assert sorted(rows) == list(range(1, 11))
    # a new query (new checkpoint) on the same durable resumes where the durable stands
    _publish(lake, "ORDERS", 10, 2)
    assert run(tmp_path / "ck2", tmp_path / "out2") == [2]
    again = spark.read.parquet(str(tmp_path / "out2")).select("seq", "delivery_seq").collect()
    assert sorted((r.seq, r.delivery_seq) for r in again) == [(11, 11), (12, 12)]


def _pub(lake: Any, name: str, subjects: list[str]) -> None:
    lake.publish_batch(name, pa.table({"subject": subjects, "data": [s.encode() for s in subjects]}))


def test_filtered_query_fails_only_for_lost_messages_it_needs(tmp_path: Path) -> None:
    """``failOnDataLoss`` with a filter: messages of other subjects removed unread are not loss
    (purged, or published and evicted by a limit between two plannings); a removed message on
    the filter is, wherever it was stored."""
    from jsspark.datasource.options import parse_read_options

    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="F", subjects=["f.>"], max_msgs=4)
    _pub(lake, "F", ["f.a", "f.b", "f.b"])  # 1..3
    planner = Planner(parse_read_options({"path": loc, "stream": "F", "filter_subject": "f.a"}))
    start = planner.initial()
    end = planner.latest(start, 1, None)
    assert (end.seq, end.dseq) == (3, 1)
    _pub(lake, "F", ["f.b"] * 3)  # 4..6; the limit evicts 1..2
    _pub(lake, "F", ["f.b"] * 3 + ["f.a"])  # 7..10; evicts 3..6: first seq 7, and 4..6 were never planned
    assert lake.stream_info("F").state.first_seq == 7
    nxt = planner.latest(end, None, None)  # no f.a lost: 4..9 were all f.b
    assert (nxt.seq, nxt.dseq) == (10, 2)
    assert [s for p in planner.partitions(end, nxt) for s in range(p.lo + 1, p.hi + 1)][-1] == 10

    _pub(lake, "F", ["f.b", "f.a", "f.b"])  # 11..13; evicts 7..9
    _pub(lake, "F", ["f.b"] * 3)  # 14..16; evicts 10..12: f.a at 12 goes unread
    with pytest.raises(DataLossError, match=r"stream F: messages 11\.\.12 were removed .* 1 of them on the query's filter \(first 12\)"):
        planner.latest(nxt, None, None)
    lenient = Planner(parse_read_options({"path": loc, "stream": "F", "filter_subject": "f.a", "failOnDataLoss": "false"}))
    assert lenient.latest(nxt, None, None).dseq == 2  # nothing on f.a left to deliver

    # a purge of other subjects before the query read anything (deliver_policy all starts at seq 1)
    lake.add_stream(name="P", subjects=["p.>"])
    _pub(lake, "P", ["p.b", "p.b", "p.a", "p.b"])
    pp = Planner(parse_read_options({"path": loc, "stream": "P", "filter_subject": "p.a"}))
    initial = pp.initial()
    lake.purge_stream("P", subject="p.b")
    assert lake.stream_info("P").state.first_seq == 3
    assert pp.latest(initial, None, None).to_offset() == {"seq": 4, "dseq": 1, "pending": 0}


def test_vacuumed_history_is_reported_as_possible_loss(tmp_path: Path) -> None:
    """When the removed messages' files are vacuumed their subjects are unknown: fail, saying so."""
    from jsspark.datasource.options import parse_read_options

    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="V", subjects=["v.>"])
    _pub(lake, "V", ["v.b", "v.b", "v.a"])
    planner = Planner(parse_read_options({"path": loc, "stream": "V", "filter_subject": "v.a"}))
    start = planner.initial()
    lake.purge_stream("V", subject="v.b")
    lake.vacuum("V", retention_hours=0)
    with pytest.raises(DataLossError, match=r"messages 1\.\.2 were removed .* their subjects are no longer known"):
        planner.latest(start, None, None)


def test_reading_across_table_upkeep_delivers_every_message_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries reading a stream while its writer compacts, cleans up the log and vacuums it
    (``engine/maintenance.py``, here every 5 versions, with retentions of nothing): each run
    reads on from its checkpoint, and every message arrives exactly once, filtered or not."""
    from deltalake import DeltaTable

    from jsspark.engine import maintenance
    from jsspark.engine.table import MessageTable

    monkeypatch.setattr(maintenance, "EVERY", 5)
    done: list[maintenance.Upkeep] = []
    upkeep = MessageTable.upkeep

    def counted(self: MessageTable, snap: Any, state: Any, u: maintenance.Upkeep) -> int | None:
        done.append(u)
        return upkeep(self, snap, state, u)

    monkeypatch.setattr(MessageTable, "upkeep", counted)
    loc, lake = _lake(tmp_path, 0)
    DeltaTable(lake.stream_uri("ORDERS")).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds", "delta.deletedFileRetentionDuration": "interval 0 seconds",
         "delta.checkpointInterval": "5"})
    sent = 0
    for _ in range(3):
        for _ in range(30):
            _publish(lake, "ORDERS", sent, 7)
            sent += 7
        _run_available_now(_stream(spark, loc, maxMessagesPerTrigger=80), tmp_path / "ck", tmp_path / "out")
        _run_available_now(_stream(spark, loc, filter_subject="orders.1"), tmp_path / "ckf", tmp_path / "outf")
    assert len(done) >= 15 and sum(u.vacuum for u in done) >= 1, done
    on_disk = len(list(Path(lake.stream_uri("ORDERS")).rglob("*.parquet")))
    assert on_disk < 90 * 8, on_disk  # vacuumed: 90 commits wrote a file per partition each
    rows = spark.read.parquet(str(tmp_path / "out")).select("seq", "subject", "data").collect()
    assert sorted((r.seq, r.data) for r in rows) == [(i + 1, f"m{i}".encode()) for i in range(sent)]
    filtered = sorted(r.seq for r in spark.read.parquet(str(tmp_path / "outf")).select("seq").collect())
    assert filtered == [i + 1 for i in range(sent) if i % 3 == 1]
