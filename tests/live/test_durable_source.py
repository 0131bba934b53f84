"""WorkQueue origin -> server-managed flow_control durable -> Spark streaming query -> lake.

Checks the two promises of the live source: every origin message lands exactly once with its
origin seq, time, subject, headers and data; and the origin never removes a message the lake
has not committed (checked inside every micro-batch, before the batch is stored).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.live.landing import land_batch
from tests.live.conftest import SyncNats

pytestmark = [pytest.mark.nats, pytest.mark.spark]


def wait_for(cond: Callable[[], bool], timeout: float, what: str, explain: Callable[[], str] | None = None) -> None:
    """Poll ``cond`` until true or ``timeout``; a timeout says what it waited for and, with
    ``explain``, the state that shows why (so a rare failure under load is diagnosable)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            why = f"; {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{why}")
        time.sleep(0.1)


def messages(n: int, offset: int = 0) -> list[tuple[str, bytes, dict[str, str] | None]]:
    out = []
    for i in range(offset, offset + n):
        hdrs = {"K": f"v{i}", "Nats-Msg-Id": f"id-{i}"} if i % 3 == 0 else None
        out.append((f"orders.{i % 7}", f"payload-{i}".encode() * (1 + i % 4), hdrs))
    return out


def start_query(spark: Any, url: str, stream: str, lake_dir: Path, target: str, ckpt: Path, app_id: str,
                violations: list[str], nats: SyncNats, **opts: str) -> Any:
    lake = jsspark.connect(str(lake_dir))

    def batch(df: Any, batch_id: int) -> None:
        tbl = df.toArrow()
        removed = nats.removed_upto(stream)
        held = lake.stream_info(target).state.last_seq
        # nothing of this batch may be gone yet, and nothing gone may be missing from the lake
        # (removed_upto counts interior deletes too: an ack removes its newest message first)
        if tbl.num_rows and removed >= min(tbl.column("seq").to_pylist()):
            violations.append(f"batch {batch_id}: origin removed up to seq {removed}, a message of this batch, "
                              f"before the lake committed it")
        if removed > held:
            violations.append(f"batch {batch_id}: origin removed up to seq {removed} but lake holds up to {held}")
        land_batch(lake, target, tbl, form="mirror", txn=(app_id, batch_id))

    reader = spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in opts.items():
        reader = reader.option(k, v)
    return (reader.load().writeStream.foreachBatch(batch).option("checkpointLocation", str(ckpt))
            .trigger(processingTime="200 milliseconds").start())


def test_workqueue_exactly_once_and_never_removed_before_commit(spark: Any, server: Any, nats: SyncNats,
                                                                 tmp_path: Path) -> None:
    nats.add_stream(name="WQ", subjects=["orders.>"], retention="workqueue", storage="file")
    first = messages(3000)
    nats.publish_many(first)
    origin_msgs = {s: nats.get("WQ", s) for s in range(1, 3001)}

    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="WQ_M", subjects=["orders.>"])
    violations: list[str] = []
    q = start_query(spark, server.url, "WQ", tmp_path / "lake", "WQ_M", tmp_path / "ckpt", "q1", violations, nats,
                    maxMessagesPerTrigger="700", spillDir=str(tmp_path / "spill"), maxAckPending="1500")
    try:
        nats.publish_many(messages(1000, offset=3000))
        wait_for(lambda: lake.stream_info("WQ_M").state.last_seq >= 4000 or q.exception() is not None, 120,
                 "the lake to hold 4000 messages")
        assert q.exception() is None, q.exception()
        # acks follow commits, always eventually: the origin empties while the query runs
        wait_for(lambda: nats.state("WQ")["messages"] == 0, 30, "the origin to be fully acked")
    finally:
        q.stop()
    assert not violations, violations
    rows = lake.stream("WQ_M").read().sort_by("seq").to_pylist()
    assert [r["seq"] for r in rows] == list(range(1, 4001))
    for r in rows[:3000]:
        o = origin_msgs[r["seq"]]
        assert (r["subject"], r["data"], r["ts_ns"]) == (o["subject"], o["data"], o["ts_ns"])
        got = [(h["name"], h["value"]) for h in r["headers"]] if r["headers"] else None
        assert got == o["headers"]
    for i, r in enumerate(rows[3000:], start=3000):
        assert r["subject"] == f"orders.{i % 7}" and r["data"] == f"payload-{i}".encode() * (1 + i % 4)
    state = lake.stream_info("WQ_M").state
    assert (state.first_seq, state.last_seq, state.messages) == (1, 4000, 4000)

    # restart from the checkpoint: nothing twice, new messages flow, origin drains again
    nats.publish_many(messages(500, offset=4000))
    q = start_query(spark, server.url, "WQ", tmp_path / "lake", "WQ_M", tmp_path / "ckpt", "q1", violations, nats,
                    spillDir=str(tmp_path / "spill"))
    try:
        wait_for(lambda: lake.stream_info("WQ_M").state.last_seq >= 4500 or q.exception() is not None, 60,
                 "the restarted query to land 500 more")
        assert q.exception() is None, q.exception()
        wait_for(lambda: nats.state("WQ")["messages"] == 0, 30, "the origin to be fully acked after restart")
    finally:
        q.stop()
    assert not violations, violations
    seqs = lake.stream("WQ_M").read(columns=["seq"]).column("seq").to_pylist()
    assert sorted(seqs) == list(range(1, 4501))
