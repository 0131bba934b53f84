"""Publishing back to a server: JetStream acks, Nats-Msg-Id from origin stream+seq so replays
never land twice, the server's errors surfaced, and the NATS -> Spark -> NATS round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.live.conftest import SyncNats
from tests.live.test_crashes import fast_publish
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats, pytest.mark.spark]


def test_batch_publish_twice_lands_once_and_errors_are_the_servers(spark: Any, server: Any, nats: SyncNats) -> None:
    nats.add_stream(name="PUB", subjects=["pub.>"], duplicate_window=120_000_000_000)
    rows = [(f"pub.{i % 3}", f"d{i}".encode(), "ORIGIN", i, [("h", str(i))]) for i in range(1, 501)]
    df = spark.createDataFrame(rows, "subject string, data binary, stream string, seq long, "
                                     "headers array<struct<name:string,value:string>>")
    for _ in range(2):
        df.write.format("jetstream").option("servers", server.url).option("maxInFlight", "64").mode("append").save()
    assert nats.state("PUB")["messages"] == 500
    m = nats.get("PUB", 7)
    assert dict(m["headers"])["Nats-Msg-Id"] == f"ORIGIN:{m['data'].decode()[1:]}"
    with pytest.raises(Exception, match="expected stream does not match"):
        df.limit(3).write.format("jetstream").option("servers", server.url).option("stream", "OTHER") \
            .mode("append").save()


def test_round_trip_nats_spark_nats_exactly_once(spark: Any, server: Any, nats: SyncNats, tmp_path: Path) -> None:
    nats.add_stream(name="RT_IN", subjects=["rt.>"], retention="workqueue")
    nats.add_stream(name="RT_OUT", subjects=["back.>"], duplicate_window=120_000_000_000)
    fast_publish(nats, "rt", 0, 3_000)

    def run_once() -> None:
        src = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", "RT_IN")
               .option("maxMessagesPerTrigger", "1000").option("maxAckPending", "700")
               .option("spillDir", str(tmp_path / "spill")).load())
        q = (src.selectExpr("concat('back.', subject) AS subject", "data", "headers", "stream", "seq")
             .writeStream.format("jetstream").option("servers", server.url)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None, q.exception()

    run_once()
    assert nats.state("RT_OUT")["messages"] == 3_000
    fast_publish(nats, "rt", 3_000, 500)
    run_once()  # acks the previous run's last batch, then carries the new messages
    out = nats.state("RT_OUT")
    assert out["messages"] == 3_500 and out["last_seq"] == 3_500
    wait_for(lambda: nats.state("RT_IN")["messages"] <= 500, 10,
             f"the first run's messages to be acked: {nats.state('RT_IN')} {nats.api('CONSUMER.LIST.RT_IN')}")
    m = nats.get("RT_OUT", 3_500)
    assert dict(m["headers"])["Nats-Msg-Id"] == "RT_IN:3500" and m["subject"].startswith("back.rt.")
