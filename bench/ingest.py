"""Live ingest benchmark: NATS -> lake with jsspark against nats-server's own mirror.

    .venv/bin/python bench/ingest.py [--messages 200000] [--size 100]

One nats-server on loopback, one Limits origin stream filled with ``--messages`` messages of
``--size`` bytes, then, each on the same data:

- **native mirror**: a stream with ``mirror: {name: ORIGIN}`` on the same server; time until its
  ``last_seq`` reaches the origin's. The server-to-server upper bound.
- **nats-py ordered consumer**: a plain ``js.subscribe(ordered_consumer=True)`` callback that only
  counts; what a Python client can receive at all.
- **jsspark ingestor**: the live source's driver half alone (durable flow_control consumer,
  spill files, acks after "commit"), read back from spill files and stored in a lake stream in
  mirror form, batch by batch — no Spark.
- **jsspark Spark query**: ``readStream.format("jetstream").option("servers", ...)`` with
  ``Trigger.AvailableNow`` and ``foreachBatch`` -> ``land_batch(form="mirror")`` in a warm session
  (session start-up excluded, query start-up included).

Prints msgs/s for each and the ratios to the native mirror and to the ordered consumer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jsspark
from jsspark.engine.ingest import store_mirrored
from jsspark.live.ingestor import Ingestor
from jsspark.live.options import parse_live_read_options
from jsspark.live.spill import read_spill
from jsspark.nats_server import NatsServer


async def _api(nc: Any, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", b"" if body is None else json.dumps(body).encode(), timeout=30)
    return json.loads(msg.data)


async def fill(url: str, n: int, size: int) -> None:
    import nats

    nc = await nats.connect(url)
    resp = await _api(nc, "STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["o.>"], "storage": "file"})
    assert "error" not in resp, resp
    payload = b"x" * size
    for i in range(n):
        await nc.publish(f"o.{i % 16}", payload)
        if i % 50_000 == 0:
            await nc.flush()
    await nc.flush()
    while (await _api(nc, "STREAM.INFO.ORIGIN"))["state"]["last_seq"] < n:
        await asyncio.sleep(0.05)
    await nc.close()


async def native_mirror(url: str, n: int) -> float:
    import nats

    nc = await nats.connect(url)
    t0 = time.perf_counter()
    resp = await _api(nc, "STREAM.CREATE.MIR", {"name": "MIR", "mirror": {"name": "ORIGIN"}, "storage": "file"})
    assert "error" not in resp, resp
    while (await _api(nc, "STREAM.INFO.MIR"))["state"]["last_seq"] < n:
        await asyncio.sleep(0.01)
    dt = time.perf_counter() - t0
    await nc.close()
    return dt


async def ordered_consumer(url: str, n: int) -> float:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    done = asyncio.Event()
    count = 0

    async def cb(msg: Any) -> None:
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    t0 = time.perf_counter()
    sub = await js.subscribe("o.>", stream="ORIGIN", ordered_consumer=True, cb=cb)
    await asyncio.wait_for(done.wait(), 600)
    dt = time.perf_counter() - t0
    await sub.unsubscribe()
    await nc.close()
    return dt


def jsspark_ingestor(url: str, n: int, work: Path) -> float:
    lake = jsspark.connect(str(work / "lake-ing"))
    lake.add_stream(name="ING", subjects=["o.>"])
    opts = parse_live_read_options({"servers": url, "stream": "ORIGIN", "consumer": "bench_ing",
                                    "spillDir": str(work / "spill-ing"), "maxAckPending": "50000"})
    t0 = time.perf_counter()
    ing = Ingestor(opts)
    ing.start(None)
    start = ing.floor
    while start < n:
        end = ing.latest(start, 50_000, None)
        if end == start:
            continue
        batches = [b for p in ing.plan(start, end) for b in read_spill(p)]
        store_mirrored(lake, "ING", pa.Table.from_batches(batches), txn=("bench", end))
        start = end
    ing.latest(start, None, None)
    dt = time.perf_counter() - t0
    ing.stop()
    assert lake.stream_info("ING").state.messages == n
    return dt


def spark_query(url: str, n: int, work: Path) -> float:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from jsspark.live.landing import land_batch

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    jsspark.register(spark)
    spark.range(10).count()  # warm the JVM and a Python worker
    lake = jsspark.connect(str(work / "lake-spark"))
    lake.add_stream(name="SPK", subjects=["o.>"])

    def batch(df: Any, batch_id: int) -> None:
        land_batch(lake, "SPK", df.toArrow(), form="mirror", txn=("bench-spark", batch_id))

    t0 = time.perf_counter()
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", "ORIGIN")
         .option("consumer", "bench_spark").option("maxAckPending", "50000")
         .option("maxMessagesPerTrigger", "100000").option("spillDir", str(work / "spill-spark")).load()
         .writeStream.foreachBatch(batch).option("checkpointLocation", str(work / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t0
    assert lake.stream_info("SPK").state.messages == n, lake.stream_info("SPK").state
    spark.stop()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--skip-spark", action="store_true")
    args = ap.parse_args()
    n = args.messages
    work = Path(tempfile.mkdtemp(prefix="jsspark-bench-ingest-"))
    try:
        (work / "nats").mkdir()
        with NatsServer(store_dir=work / "nats") as srv:
            asyncio.run(fill(srv.url, n, args.size))
            results = {
                "native mirror": asyncio.run(native_mirror(srv.url, n)),
                "nats-py ordered consumer": asyncio.run(ordered_consumer(srv.url, n)),
                "jsspark ingestor -> lake": jsspark_ingestor(srv.url, n, work),
            }
            if not args.skip_spark:
                results["jsspark Spark query -> lake"] = spark_query(srv.url, n, work)
        print(f"{n} messages of {args.size} B")
        base, ordered = results["native mirror"], results["nats-py ordered consumer"]
        for name, dt in results.items():
            print(f"  {name:30s} {dt:7.2f} s  {n / dt:10,.0f} msg/s  "
                  f"x{base / dt:5.2f} of native mirror  x{ordered / dt:5.2f} of ordered consumer")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
