"""Crashes during live ingest: the driver SIGKILLed at random moments, the nats-server killed
and restarted. Every origin message must land exactly once, and the origin (a WorkQueue) must
never have removed a message the lake had not committed, at any moment we look."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.live.landing import land_batch
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]


def fast_publish(
    nats: SyncNats, subject_prefix: str, start: int, n: int, payload: Callable[[int], bytes] | None = None
) -> None:
    """Core publishes (the stream stores them) then a flush: much faster than acked publishes.
    Message ``i`` carries ``payload(i)`` (default ``m<i>``)."""

    async def go() -> None:
        for i in range(start, start + n):
            await nats.nc.publish(f"{subject_prefix}.{i % 11}", payload(i) if payload else f"m{i}".encode())
        await nats.nc.flush()

    nats.run(go(), timeout=120)


def check_invariant(nats: SyncNats, lake: Any, origin: str, target: str) -> int:
    state = nats.state(origin)
    held = lake.stream_info(target).state.last_seq
    assert state["first_seq"] - 1 <= held, f"origin removed up to {state['first_seq'] - 1}, lake holds {held}"
    return held


def origin_report(nats: SyncNats, stream: str) -> str:
    """The origin's state and its consumers' positions, for a timed-out wait's message."""
    consumers = nats.api(f"CONSUMER.LIST.{stream}").get("consumers", [])
    positions = [{k: c.get(k) for k in ("name", "delivered", "ack_floor", "num_ack_pending", "num_pending")}
                 for c in consumers]
    return f"origin state {nats.state(stream)}, consumers {positions}"


def test_driver_sigkill_at_random_moments(nats: SyncNats, tmp_path: Path) -> None:
    total = 100_000
    nats.add_stream(name="KWQ", subjects=["k.>"], retention="workqueue")
    fast_publish(nats, "k", 0, total // 2)
    lake_dir = tmp_path / "lake"
    lake = jsspark.connect(str(lake_dir))
    lake.add_stream(name="KWQ_M", subjects=["k.>"])
    rng = random.Random(7)
    args = [sys.executable, "-m", "tests.live.kill_driver", nats.nc.connected_url.geturl(), "KWQ", str(lake_dir),
            "KWQ_M", str(tmp_path / "ckpt"), str(tmp_path / "spill")]

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(args, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / "driver.log", "ab"))

    kills = 0
    published = total // 2
    while kills < 5:
        proc = spawn()
        try:
            base = lake.stream_info("KWQ_M").state.last_seq
            grow = rng.randint(2_000, 12_000)
            goal = min(base + grow, published)
            wait_for(lambda p=proc, g=goal: lake.stream_info("KWQ_M").state.last_seq >= g or p.poll() is not None,
                     120, "the driver to make progress")
            assert proc.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            time.sleep(rng.uniform(0, 1.5))  # a random moment inside the next batches, not a sync point
            check_invariant(nats, lake, "KWQ", "KWQ_M")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        kills += 1
        check_invariant(nats, lake, "KWQ", "KWQ_M")
        if published < total:
            fast_publish(nats, "k", published, total // 4)
            published += total // 4

    proc = spawn()
    try:
        wait_for(lambda: lake.stream_info("KWQ_M").state.last_seq >= total or proc.poll() is not None, 180,
                 "the last driver to land everything")
        assert proc.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        wait_for(lambda: nats.state("KWQ")["messages"] == 0, 30, "the origin to be fully acked",
                 lambda: origin_report(nats, "KWQ"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    seqs = lake.stream("KWQ_M").read(columns=["seq", "data"])
    assert seqs.num_rows == total
    assert sorted(seqs.column("seq").to_pylist()) == list(range(1, total + 1))
    data = dict(zip(seqs.column("seq").to_pylist(), seqs.column("data").to_pylist(), strict=True))
    assert data[1] == b"m0" and data[total] == f"m{total - 1}".encode()


def test_nats_server_killed_and_restarted_mid_ingest(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    with NatsServer(store_dir=tmp_path / "store") as srv:
        nats = SyncNats(srv.url)
        try:
            nats.add_stream(name="RWQ", subjects=["r.>"], retention="workqueue")
            fast_publish(nats, "r", 0, 20_000)
            lake = jsspark.connect(str(tmp_path / "lake"))
            lake.add_stream(name="RWQ_M", subjects=["r.>"])

            def batch(df: Any, batch_id: int) -> None:
                land_batch(lake, "RWQ_M", df.toArrow(), form="mirror", txn=("restart-test", batch_id))

            q = (spark.readStream.format("jetstream").option("servers", srv.url).option("stream", "RWQ")
                 .option("maxMessagesPerTrigger", "2000").option("spillDir", str(tmp_path / "spill"))
                 .option("waitTimeout", "90")
                 .load().writeStream.foreachBatch(batch).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="100 milliseconds").start())
            try:
                for restart in range(2):
                    wait_for(lambda r=restart: lake.stream_info("RWQ_M").state.last_seq >= 4_000 * (r + 1)
                             or q.exception() is not None, 90, "progress before the server crash")
                    srv.restart(kill=True)
                    check_invariant(nats, lake, "RWQ", "RWQ_M")
                fast_publish(nats, "r", 20_000, 5_000)
                wait_for(lambda: lake.stream_info("RWQ_M").state.last_seq >= 25_000 or q.exception() is not None,
                         120, "everything to land after the server restarts")
                assert q.exception() is None, q.exception()
                wait_for(lambda: nats.state("RWQ")["messages"] == 0, 30, "the origin to be fully acked",
                         lambda: origin_report(nats, "RWQ"))
            finally:
                q.stop()
            seqs = lake.stream("RWQ_M").read(columns=["seq"]).column("seq").to_pylist()
            assert sorted(seqs) == list(range(1, 25_001))
        finally:
            nats.close()
