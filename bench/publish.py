"""Live sink benchmark: rows -> JetStream publishes with PubAcks, against what a NATS client does.

    python3 dev.py bench publish [--messages 200000] [--size 100] [--max-in-flight 1000] [--msg-ids] [--repeat 3]

One nats-server on loopback, one stream per run. Each side publishes the same ``--messages``
rows of ``--size`` bytes (16 subjects) and its time ends when every message is acked (or, for
core publishes, stored). Sides:

- **jsspark sink, bulk**: ``publisher.publish_batches`` as a Spark task runs it (one Arrow batch
  of 10,000 rows at a time, as Spark hands them), through ``live.bulk_publish``;
- **jsspark sink, a row at a time**: the same with the bulk path off (a request per row, as
  before the bulk path, and as rows the bulk path cannot vouch for still go);
- **nats-py ``js.publish_async``**: the client's own acked asynchronous publishes, at most
  ``--max-in-flight`` pending, the anchor a NATS user would write;
- **core publishes** in windows (``bench/fill.py``): no acks at all, the server's intake rate
  for this machine, shown as the ceiling.

``--msg-ids`` gives every row an id (``<stream>:<seq>`` columns), as a round trip from a
JetStream source sends, so every message carries a header block. No Spark: this is the task's
own work; Spark adds the same per-batch cost to every side.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fill import fill  # bench/, next to this script

from jsspark.live import bulk_publish, publisher
from jsspark.live.options import parse_live_write_options
from jsspark.nats_server import NatsServer

SPARK_BATCH = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch's default


def batches(prefix: str, n: int, size: int, msg_ids: bool) -> list[pa.RecordBatch]:
    payload = b"x" * size
    out = []
    for lo in range(0, n, SPARK_BATCH):
        hi = min(n, lo + SPARK_BATCH)
        cols: dict[str, Any] = {"subject": pa.array([f"{prefix}.{i % 16}" for i in range(lo, hi)]),
                                "data": pa.array([payload] * (hi - lo), pa.binary())}
        if msg_ids:
            cols["stream"] = pa.array(["ORIGIN"] * (hi - lo))
            cols["seq"] = pa.array(range(lo + 1, hi + 1), pa.int64())
        out.append(pa.record_batch(cols))
    return out


async def sink(url: str, rows: list[pa.RecordBatch], max_in_flight: int, bulk: bool) -> float:
    opts = parse_live_write_options({"servers": url, "maxInFlight": str(max_in_flight)})
    saved = bulk_publish.client_class
    if not bulk:
        bulk_publish.client_class = lambda base: None
    try:
        t0 = time.perf_counter()
        published, _ = await publisher.publish_batches(opts, iter(rows))
        dt = time.perf_counter() - t0
    finally:
        bulk_publish.client_class = saved
    assert published == sum(b.num_rows for b in rows), published
    return dt


async def publish_async(nc: Any, prefix: str, n: int, size: int, max_in_flight: int, msg_ids: bool) -> float:
    js = nc.jetstream(publish_async_max_pending=max_in_flight)
    payload = b"x" * size
    t0 = time.perf_counter()
    for i in range(n):
        headers = {"Nats-Msg-Id": f"ORIGIN:{i + 1}"} if msg_ids else None
        await js.publish_async(f"{prefix}.{i % 16}", payload, headers=headers)
    await js.publish_async_completed()
    return time.perf_counter() - t0


async def run(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    n, size, mif = args.messages, args.size, args.max_in_flight
    times: dict[str, list[float]] = {k: [] for k in ("bulk", "rows", "nats-py", "core")}
    for r in range(args.repeat):
        for side in times:
            name = f"S{r}{side.replace('-', '').upper()}"
            prefix = name.lower()
            await js.add_stream(name=name, subjects=[f"{prefix}.>"])
            if side in ("bulk", "rows"):
                times[side].append(await sink(url, batches(prefix, n, size, args.msg_ids), mif, side == "bulk"))
            elif side == "nats-py":
                times[side].append(await publish_async(nc, prefix, n, size, mif, args.msg_ids))
            else:
                times[side].append(await fill(nc, name, [f"{prefix}.{i}" for i in range(16)], b"x" * size, n,
                                              msg_ids=args.msg_ids))
            info = await js.stream_info(name)
            assert info.state.messages == n, (side, info.state.messages)
            await js.delete_stream(name)
    await nc.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--max-in-flight", type=int, default=1_000, help="the sink's maxInFlight (its default)")
    ap.add_argument("--msg-ids", action="store_true", help="every row gets a Nats-Msg-Id (<stream>:<seq>)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jsspark-bench-publish-") as work, NatsServer(store_dir=Path(work)) as srv:
        times = asyncio.run(run(srv.url, args))
    n = args.messages
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{n:,} messages of {args.size} B{' with a Nats-Msg-Id each' if args.msg_ids else ''}, "
          f"maxInFlight {args.max_in_flight:,}; median of {args.repeat} runs each, one after the other")
    labels = {"bulk": "jsspark sink (bulk)", "rows": "jsspark sink, a row at a time",
              "nats-py": "nats-py js.publish_async", "core": "core publishes, no acks (ceiling)"}
    for k, label in labels.items():
        runs = " ".join(f"{x:.2f}" for x in times[k])
        print(f"  {label:36s} {med[k]:6.2f} s {n / med[k]:>10,.0f}/s   x{med[k] / med['bulk']:5.2f} the bulk sink's time"
              f"   (runs {runs})")


if __name__ == "__main__":
    main()
