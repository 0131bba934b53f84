"""An origin stream deleted and created again under its name: the live reader neither skips the
new stream's first messages (those at or below what it held of the old one) nor acks them away
unread. As the lake source (``planning.recreated``): ``DataLossError`` naming both identities, or
with ``failOnDataLoss=false`` the new stream from its start; running, and on a restart from a
checkpoint written on the old stream. Before, the reader took the new stream's seqs as the old
one's and read only those above its old offset (on a WorkQueue the skipped ones were acked away)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jsspark.datasource.live_source import LiveStreamReader
from jsspark.datasource.partition import DataLossError
from jsspark.live.options import parse_live_read_options
from jsspark.live.spill import read_spill
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats]


def _reader(url: str, stream: str, tmp_path: Path, **opts: str) -> LiveStreamReader:
    return LiveStreamReader(parse_live_read_options(
        {"servers": url, "stream": stream, "spillDir": str(tmp_path / "spill"), "waitTimeout": "20", **opts}))


def _rows(r: LiveStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
    batches = [b for p in r.partitions(start, end) for b in read_spill(p.value)]
    return pa.Table.from_batches(batches).column("data").to_pylist() if batches else []


def _publish(nats: SyncNats, stream: str, tag: str, n: int) -> None:
    nats.publish_many([(f"{stream.lower()}.{i}", f"{tag}{i}".encode(), None) for i in range(n)])


def _first_batch(nats: SyncNats, r: LiveStreamReader, stream: str, **cfg: Any) -> dict[str, Any]:
    """Read and commit the old stream's 10 messages; the committed offset."""
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], **cfg)
    _publish(nats, stream, "old", 10)
    start = r.initialOffset()
    end = r.latestOffset(start, None)
    while end["seq"] < 10:
        end = r.latestOffset(start, None)
    assert _rows(r, start, end) == [f"old{i}".encode() for i in range(10)]
    r.commit(end)
    return end


def _recreate(nats: SyncNats, stream: str, **cfg: Any) -> str:
    assert "error" not in nats.api(f"STREAM.DELETE.{stream}")
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], **cfg)
    _publish(nats, stream, "new", 15)
    return str(nats.api(f"STREAM.INFO.{stream}")["created"])


def _data_loss(r: Any, end: dict[str, Any]) -> DataLossError:
    """The ``DataLossError`` the running reader's planning raises once it sees the new stream."""
    failure: list[DataLossError] = []

    def failed() -> bool:
        try:
            r.latestOffset(end, None)
        except DataLossError as e:
            failure.append(e)
            return True
        return False

    wait_for(failed, 30, "the reader to notice the recreated stream")
    return failure[0]


@pytest.mark.parametrize("mode", ["server", "ordered"])
def test_running_reader_fails_with_data_loss(server: NatsServer, nats: SyncNats, tmp_path: Path, mode: str) -> None:
    stream = f"RUNFAIL{mode.upper()}"
    r = _reader(server.url, stream, tmp_path, consumerMode=mode)
    try:
        end = _first_batch(nats, r, stream)
        _recreate(nats, stream)
        text = str(_data_loss(r, end))
        old_id = end["origin"].split(".")[1]
        assert f"stream {stream} was deleted and created again" in text and old_id in text
        assert "failOnDataLoss=false" in text and "after sequence 10" in text
        assert nats.state(stream)["messages"] == 15
    finally:
        r.stop()


@pytest.mark.parametrize("mode", ["server", "ordered"])
def test_running_reader_reads_the_new_stream_from_its_start(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                            mode: str) -> None:
    """On a WorkQueue (server mode) nothing of the new stream is acked before it was read."""
    stream = f"RUNNEW{mode.upper()}"
    retention = {"retention": "workqueue"} if mode == "server" else {}
    r = _reader(server.url, stream, tmp_path, consumerMode=mode, failOnDataLoss="false")
    try:
        end = _first_batch(nats, r, stream, **retention)
        _recreate(nats, stream, **retention)
        got: list[dict[str, Any]] = []

        def moved() -> bool:
            nxt = r.latestOffset(end, None)
            got[:] = [nxt]
            return nxt["origin"] != end["origin"] and nxt["seq"] == 15

        wait_for(moved, 30, "the reader to read the new stream")
        assert nats.state(stream)["messages"] == 15  # nothing acked before Spark committed it
        assert _rows(r, end, got[0]) == [f"new{i}".encode() for i in range(15)]
        r.commit(got[0])
    finally:
        r.stop()


@pytest.mark.parametrize("fail", [True, False])
def test_restart_from_a_checkpoint_on_the_old_stream(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                     fail: bool) -> None:
    stream = f"RESTART{int(fail)}"
    r = _reader(server.url, stream, tmp_path)
    try:
        end = _first_batch(nats, r, stream, retention="workqueue")
    finally:
        r.stop()
    _recreate(nats, stream, retention="workqueue")
    again = _reader(server.url, stream, tmp_path, failOnDataLoss=str(fail).lower())
    try:
        if fail:
            with pytest.raises(DataLossError, match=f"stream {stream} was deleted and created again") as e:
                again.latestOffset(end, None)
            assert end["origin"].split(".")[1] in str(e.value)
            assert nats.state(stream)["messages"] == 15
            return
        nxt = again.latestOffset(end, None)
        while nxt["seq"] < 15:
            nxt = again.latestOffset(end, None)
        assert nats.state(stream)["messages"] == 15
        assert _rows(again, end, nxt) == [f"new{i}".encode() for i in range(15)]
    finally:
        again.stop()


def _user_durable(nats: SyncNats, stream: str) -> None:
    resp = nats.api(f"CONSUMER.CREATE.{stream}.ops", {"stream_name": stream, "config": {
        "durable_name": "ops", "deliver_subject": f"dlv.{stream}", "ack_policy": "flow_control",
        "flow_control": True, "idle_heartbeat": 1_000_000_000, "max_ack_pending": 100}})
    assert "error" not in resp, resp


def test_user_mode_durable_created_again_on_a_new_workqueue(server: NatsServer, nats: SyncNats,
                                                           tmp_path: Path) -> None:
    """The operator's new durable delivers on its own (dseq 1) to the subject the reader listens
    on: a generation the reader did not start is taken only after its own restart checked the
    origin, so none of the new stream's messages is skipped and acked away."""
    stream = "USERWQ"
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], retention="workqueue")
    _user_durable(nats, stream)
    r = _reader(server.url, stream, tmp_path, consumerMode="user", consumer="ops", deliverSubject=f"dlv.{stream}")
    try:
        _publish(nats, stream, "old", 10)
        start = r.initialOffset()
        end = r.latestOffset(start, None)
        while end["seq"] < 10:
            end = r.latestOffset(start, None)
        r.commit(end)
        r.latestOffset(end, None)  # acks the 10
        wait_for(lambda: nats.state(stream)["messages"] == 0, 20, "the old stream's acks")
        assert "error" not in nats.api(f"STREAM.DELETE.{stream}")
        nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], retention="workqueue")
        _user_durable(nats, stream)
        _publish(nats, stream, "new", 15)
        assert f"stream {stream} was deleted and created again" in str(_data_loss(r, end))
        assert nats.state(stream)["messages"] == 15  # none acked away unread
    finally:
        r.stop()


@pytest.mark.spark
def test_a_spark_query_restarted_after_the_stream_was_created_again(spark: Any, server: NatsServer, nats: SyncNats,
                                                                      tmp_path: Path) -> None:
    """End to end: the query's checkpoint holds offsets of the old stream. Restarted, it fails
    with DataLossError naming both identities; with failOnDataLoss=false it lands all 15 new
    messages (before, only the 5 above the old offset; the WorkQueue lost the other 10)."""
    stream, out, ck = "SPARKRC", str(tmp_path / "out"), str(tmp_path / "ck")

    def run(**extra: str) -> Any:
        q = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", stream)
             .option("spillDir", str(tmp_path / "spill")).option("waitTimeout", "20").options(**extra).load()
             .selectExpr("CAST(data AS STRING) AS d").writeStream.format("parquet").option("checkpointLocation", ck)
             .trigger(availableNow=True).start(out))
        with contextlib.suppress(Exception):  # a failed query: its exception() says why
            q.awaitTermination(120)
        assert not q.isActive
        return q

    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], retention="workqueue")
    _publish(nats, stream, "old", 10)
    q = run()
    assert q.exception() is None, q.exception()
    _recreate(nats, stream, retention="workqueue")
    q = run()
    text = str(q.exception())
    assert "DataLossError" in text and f"stream {stream} was deleted and created again" in text, text
    assert nats.state(stream)["messages"] == 15
    q = run(failOnDataLoss="false")
    assert q.exception() is None, q.exception()
    got = sorted(r.d for r in spark.read.parquet(out).collect())
    assert got == sorted([f"old{i}" for i in range(10)] + [f"new{i}" for i in range(15)])


def test_an_origin_whose_info_times_out_at_the_start_is_still_told_apart(server: NatsServer, nats: SyncNats,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clustered JetStream the origin's STREAM.INFO goes unanswered while its stream leader
    is elected (its node died), though the consumer API answers. The reader took identity
    ``unknown`` for good then, so a stream created again later was read as the old one: on a
    WorkQueue its first messages were skipped and acked away. Asked again, the identity is learnt."""
    from nats.errors import TimeoutError as NatsTimeout

    from jsspark.live import consumer as C

    real, calls = C.stream_info, []

    async def electing(*args: Any, **kw: Any) -> dict[str, Any]:
        calls.append(args)
        if len(calls) == 1:
            raise NatsTimeout
        return await real(*args, **kw)

    monkeypatch.setattr(C, "stream_info", electing)
    stream = "ELECTING"
    r = _reader(server.url, stream, tmp_path)
    try:
        end = _first_batch(nats, r, stream, retention="workqueue")
        assert end["origin"].split(".")[1] != "nats-unknown", end
        _recreate(nats, stream, retention="workqueue")
        assert "was deleted and created again" in str(_data_loss(r, end))
        assert nats.state(stream)["messages"] == 15  # nothing of the new stream acked away
    finally:
        r.stop()
