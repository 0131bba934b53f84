"""``max_ack_pending`` of a durable lake consumer bounds what a batch delivers, as the server
stops delivering once ``num_ack_pending`` reaches it (``getNextMsg``: ``len(o.pending) >=
o.maxp``). Checked against a real nats-server pull consumer with the same config on the same
content (AckAll after each fetch stands for a committed batch), and end to end in Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
import nats.errors
import pyarrow as pa
import pytest
from nats.js.api import ConsumerConfig as NatsConsumerConfig

import jsspark
from jsspark.datasource.options import parse_read_options
from jsspark.datasource.planning import Cursor, Planner
from jsspark.datasource.reading import read_partition

pytestmark = pytest.mark.spark

SUBJECTS = [f"ap.{'abc'[i % 3]}" for i in range(30)]  # ap.a holds seqs 1, 4, ..., 28


def _lake(tmp_path: Path) -> str:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="AP", subjects=["ap.>"])
    lake.publish_batch("AP", pa.table({"subject": SUBJECTS, "data": [f"m{i}".encode() for i in range(30)]}))
    return loc


def _server_batches(url: str, run: Any, cfg: dict[str, Any], unacked_first: int = 0) -> list[list[int]]:
    """What each fetch delivers when the consumer acks (AckAll) the last message of every
    fetch before the next one; ``unacked_first`` messages are fetched first and never acked."""

    async def go() -> list[list[int]]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        try:
            await js.add_stream(name="AP", subjects=["ap.>"])
            for i, s in enumerate(SUBJECTS):
                await js.publish(s, f"m{i}".encode())
            await js.add_consumer("AP", NatsConsumerConfig.from_response({**cfg, "durable_name": "D"}))
            sub = await js.pull_subscribe_bind("D", "AP")
            out: list[list[int]] = []
            if unacked_first:
                out.append([m.metadata.sequence.stream for m in await sub.fetch(unacked_first, timeout=2)])
            while True:
                try:
                    msgs = await sub.fetch(100, timeout=0.5)
                except (TimeoutError, nats.errors.TimeoutError):
                    return out
                out.append([m.metadata.sequence.stream for m in msgs])
                await msgs[-1].ack_sync()  # AckAll: everything up to it
        finally:
            await js.delete_stream("AP")
            await nc.close()

    return run(go())


def _lake_batches(loc: str, cfg: dict[str, Any], max_rows: int | None = None, limit: int = 20) -> list[list[int]]:
    """What each micro-batch delivers, planned as Spark plans them: the batch ending at
    ``start`` is committed before ``latestOffset(start)`` (which acks it) plans the next."""
    planner = Planner(parse_read_options({"path": loc, "stream": "AP", **{k: str(v) for k, v in cfg.items()}}))
    start = planner.initial(bind=True)
    out: list[list[int]] = []
    for _ in range(limit):
        cur, _ = planner.on_planning(start)
        end = planner.latest(cur, max_rows, None)
        if end.to_offset() == cur.to_offset():
            return out
        seqs = [s for p in planner.partitions(cur, end) for b in read_partition(p) for s in b.column("seq").to_pylist()]
        out.append(seqs)
        start = Cursor.from_offset(end.to_offset())
    raise AssertionError(f"still delivering after {limit} batches: {out}")


@pytest.mark.parametrize("flt", ["ap.a", None])
def test_batches_stop_at_max_ack_pending_like_the_server(nats_server: Any, run: Any, tmp_path: Path, flt: str | None) -> None:
    cfg: dict[str, Any] = {"ack_policy": "all", "max_ack_pending": 4, **({"filter_subject": flt} if flt else {})}
    server = _server_batches(nats_server.url, run, cfg)
    assert all(len(b) == 4 for b in server[:-1]) and len(server) > 2  # the server's shape, not an accident
    assert _lake_batches(_lake(tmp_path), {"durable_name": "D", **cfg}) == server


def test_messages_pending_before_the_query_count(nats_server: Any, run: Any, tmp_path: Path) -> None:
    """Three messages delivered (not acked) by another client leave room for one in the first
    batch; the query's first ack (AckAll) covers them too."""
    cfg = {"ack_policy": "all", "max_ack_pending": 4, "filter_subject": "ap.a"}
    server = _server_batches(nats_server.url, run, cfg, unacked_first=3)
    assert server[:2] == [[1, 4, 7], [10]]
    loc = _lake(tmp_path)
    lake = jsspark.connect(loc)
    lake.add_consumer("AP", durable_name="D", ack_policy="all", max_ack_pending=4, filter_subject="ap.a")
    lake.record_delivered("AP", "D", 7)
    assert lake.consumer_info("AP", "D").num_ack_pending == 3
    assert [[1, 4, 7], *_lake_batches(loc, {"durable_name": "D", **cfg})] == server


def test_max_rows_and_max_ack_pending_both_bound_a_batch(tmp_path: Path) -> None:
    loc = _lake(tmp_path)
    cfg = {"durable_name": "D", "ack_policy": "explicit", "max_ack_pending": 5}
    assert [len(b) for b in _lake_batches(loc, cfg, max_rows=3)] == [3] * 10
    jsspark.connect(loc).delete_consumer("AP", "D")
    assert [len(b) for b in _lake_batches(loc, cfg, max_rows=7)] == [5] * 6
    # ack none has nothing pending (the server ignores max_ack_pending then): one batch
    assert [len(b) for b in _lake_batches(loc, {"durable_name": "N"})] == [30]


def test_available_now_advances_in_steps_and_never_acks_early(spark: Any, tmp_path: Path) -> None:
    """A query whose batch would be bigger than max_ack_pending: each batch delivers at most
    max_ack_pending, sees the ack floor exactly at its own start (the previous batch, committed),
    and the run ends with everything delivered and acked."""
    loc = _lake(tmp_path)
    lake = jsspark.connect(loc)
    seen: list[tuple[list[int], int]] = []

    def batch(df: Any, batch_id: int) -> None:
        seqs = sorted(r.seq for r in df.select("seq").collect())
        seen.append((seqs, lake.consumer_info("AP", "D").ack_floor.stream_seq))

    q = (
        spark.readStream.format("jetstream").option("stream", "AP").option("durable_name", "D")
        .option("ack_policy", "all").option("max_ack_pending", 12).load(loc)
        .writeStream.foreachBatch(batch).option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True).start()
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    assert [len(s) for s, _ in seen] == [12, 12, 6]
    assert [floor for _, floor in seen] == [0, 12, 24]  # acked only what earlier batches committed
    assert [s for b, _ in seen for s in b] == list(range(1, 31))
    info = lake.consumer_info("AP", "D")
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.config.max_ack_pending) == (30, 0, 12)
