"""Live sources into the lake sink keep one mark per origin (``Ingestor.origin``, carried in the
offsets as the lake source's are): a stream of the same name on another server, or deleted and
created again, is another origin, and so is another durable of the same stream. Before, every
live origin of one name shared a mark, so a second origin's messages at or below the first
one's mark were dropped from the target without a word."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.live.ingestor import Ingestor
from jsspark.live.options import parse_live_read_options
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_crashes import fast_publish
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats]


def _origin(url: str, tmp_path: Path, **opts: str) -> str:
    ing = Ingestor(parse_live_read_options({"servers": url, "stream": "ORDERS", "spillDir": str(tmp_path), **opts}))
    ing.start(None)
    try:
        return ing.origin
    finally:
        ing.stop()


def test_the_origin_key_tells_streams_and_consumers_apart(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    nats.add_stream(name="ORDERS", subjects=["orders.>"])
    first = _origin(server.url, tmp_path)
    assert first.startswith("ORDERS.nats-") and first.endswith(".d.jsspark_ORDERS")
    assert _origin(server.url, tmp_path) == first  # stable: the same stream and durable
    assert _origin(server.url, tmp_path, consumer="other").endswith(".d.other")
    a = _origin(server.url, tmp_path, consumerMode="ordered", filterSubject="orders.a")
    assert ".f." in a and a != _origin(server.url, tmp_path, consumerMode="ordered", filterSubject="orders.b")
    assert "error" not in nats.api("STREAM.DELETE.ORDERS")
    nats.add_stream(name="ORDERS", subjects=["orders.>"])
    again = _origin(server.url, tmp_path)
    assert again != first and again.split(".")[2:] == first.split(".")[2:]  # the stream's identity differs
    assert "error" not in nats.api("STREAM.DELETE.ORDERS")


@pytest.mark.spark
def test_streams_of_one_name_on_two_servers_into_one_target(spark: Any, server: NatsServer, nats: SyncNats,
                                                            tmp_path: Path) -> None:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="ALL", subjects=["all.>"])
    with NatsServer() as other:
        other_nats = SyncNats(other.url)
        ends: list[dict[str, Any]] = []
        try:
            for url, api, n in ((server.url, nats, 30), (other.url, other_nats, 20)):
                api.add_stream(name="ORDERS", subjects=["orders.>"])
                fast_publish(api, "orders", 0, n, lambda i, url=url: f"{url}-{i}".encode())
                wait_for(lambda api=api, n=n: api.state("ORDERS")["messages"] == n, 20, "the origin to store")
                q = (spark.readStream.format("jetstream").option("servers", url).option("stream", "ORDERS")
                     .option("spillDir", str(tmp_path / f"spill-{n}")).load()
                     .selectExpr("concat('all.', subject) AS subject", "data", "stream", "seq", "consumer")
                     .writeStream.format("jetstream").option("stream", "ALL")
                     .option("checkpointLocation", str(tmp_path / f"ck-{n}")).trigger(availableNow=True).start(loc))
                assert q.awaitTermination(120)
                assert q.exception() is None, q.exception()
                ends += [json.loads(p["sources"][0]["endOffset"]) for p in q.recentProgress if p["numInputRows"]]
        finally:
            other_nats.close()
        got = sorted(r["data"] for r in lake.stream("ALL").read().to_pylist())
        want = sorted([f"{server.url}-{i}".encode() for i in range(30)] + [f"{other.url}-{i}".encode() for i in range(20)])
        assert got == want  # the second server's 20, all at or below the first's mark of 30, are there
        assert len({e["origin"] for e in ends}) == 2 and all(e["origin"].startswith("ORDERS.nats-") for e in ends)
    assert "error" not in nats.api("STREAM.DELETE.ORDERS")
