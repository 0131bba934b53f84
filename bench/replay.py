"""Replay benchmark: reading a whole lake stream with ``readStream.format("jetstream")``,
against Spark's native Parquet scan of the same files and against nats-py reading the same
messages from a real nats-server.

    python bench/replay.py [--messages 10000000] [--batch 1000000] [--skip-nats] [--dir D]

One run, the same messages (100-byte payloads) for all three:
- ``jetstream``: ``readStream.format("jetstream")`` with ``Trigger.AvailableNow`` into the
  ``noop`` sink (every row materialised, nothing written);
- ``parquet``: ``spark.read.parquet(<the stream table's current data files, from
  DeltaTable.file_uris()>)`` into the ``noop`` sink: the same rows from the same files with
  Spark's native reader, the ceiling a Python data source can approach. Target: jetstream at
  least 0.5 of it;
- ``python data source ceiling``: a trivial Python streaming data source yielding the
  jetstream output, pre-built and held in memory-mapped Arrow IPC, through the same
  AvailableNow -> ``noop`` path: Spark's own cost for a Python source with this schema
  (query start, the driver-side Python runner, Arrow to rows), so ``jetstream / ceiling``
  shows how much of the gap to ``parquet`` the source itself can still close;
- ``nats-py``: the messages published to a nats-server (``jsspark.nats_server``), then read
  by an ordered consumer (one Python client, as an application would read them).

Each Spark reading runs once untimed on a small stream first, so JVM and Python worker
start-up is not counted; then each runs ``--repeat`` times, interleaved, and the median
counts (a shared machine is noisy, and the first large run also warms the JIT for the
others). Prints msgs/s and the ratios side by side, and (Linux) the median runs' CPU seconds
in Spark's JVM and in the Python processes under it (``SparkCpu``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from cpu import SparkCpu  # bench/, next to this script

import jsspark

PAYLOAD = b"x" * 100
SUBJECTS = 100


def make_batch(prefix: str, start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n) % SUBJECTS
    subjects = pa.array([f"{prefix}.s{i}" for i in range(SUBJECTS)], pa.string()).take(pa.array(ids))
    return pa.table({"subject": subjects, "data": pa.array([PAYLOAD] * n, pa.binary())})


def build_stream(loc: str, name: str, n: int, batch: int) -> float:
    """A stream ``name`` (subjects ``<name lower>.>``) holding n messages; publish seconds."""
    lake = jsspark.connect(loc)
    prefix = name.lower()
    lake.add_stream(name=name, subjects=[f"{prefix}.>"], duplicate_window=0)
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        lake.publish_batch(name, make_batch(prefix, start, min(batch, n - start)))
    return time.perf_counter() - t0


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from jsspark.local_spark import LOCAL_CHECKPOINTS

    spark = (
        SparkSession.builder.master("local[*]")
        .config(map=LOCAL_CHECKPOINTS)  # the streaming readings' checkpoints, as local_spark writes them
        .appName("jsspark-bench-replay")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def time_jetstream(spark: Any, loc: str, stream: str, ckpt: Path, **options: str) -> tuple[float, int]:
    """AvailableNow over the whole stream into the noop sink; (seconds, rows)."""
    shutil.rmtree(ckpt, ignore_errors=True)
    t0 = time.perf_counter()
    q = (
        spark.readStream.format("jetstream").option("stream", stream).options(**options).load(loc)
        .writeStream.format("noop").option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True).start()
    )
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    if q.exception():
        raise RuntimeError(q.exception())
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    return elapsed, rows


def time_parquet(spark: Any, loc: str, stream: str) -> tuple[float, int]:
    """The stream table's current files through Spark's Parquet reader into noop."""
    from deltalake import DeltaTable

    files = DeltaTable(jsspark.connect(loc).stream_uri(stream)).file_uris()
    t0 = time.perf_counter()
    df = spark.read.parquet(*files)
    df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - t0
    rows = int(sum(pa.parquet.ParquetFile(f).metadata.num_rows for f in files))  # type: ignore[attr-defined]
    return elapsed, rows


def ceiling_source() -> Any:
    """A streaming Python data source that yields pre-built batches of the jetstream schema
    from an Arrow IPC file (option ``path``), one partition per core, all in one batch."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from jsspark.datasource.reading import OUTPUT_SLICE_ROWS
    from jsspark.datasource.schema import SPARK_SCHEMA_DDL

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
        def __init__(self, path: str) -> None:
            self.path = path

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def initialOffset(self) -> dict[str, int]:
            return {"i": 0}

        def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
            return {"i": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            return [] if start == end else [InputPartition(i) for i in range(os.cpu_count() or 1)]

        def read(self, partition: Any) -> Any:
            import pyarrow as pa

            table = pa.ipc.open_file(pa.memory_map(self.path)).read_all()
            k = os.cpu_count() or 1
            per = -(-table.num_rows // k)
            # batches as large as jetstream's (Spark's cost per Python batch is high: 10,000-row
            # batches made this ceiling 1.7x slower)
            yield from table.slice(partition.value * per, per).to_batches(max_chunksize=OUTPUT_SLICE_ROWS)

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "jsspark_bench_ceiling"

        def schema(self) -> str:
            return SPARK_SCHEMA_DDL

        def streamReader(self, schema: Any) -> Any:
            return Reader(self.options["path"])

    return Ceiling


def prebuild(loc: str, stream: str, path: Path) -> None:
    """The rows jetstream delivers for the whole stream, written as one Arrow IPC file."""
    from jsspark.datasource.options import parse_read_options
    from jsspark.datasource.planning import Planner
    from jsspark.datasource.reading import read_partition
    from jsspark.datasource.schema import ARROW_SCHEMA

    planner = Planner(parse_read_options({"path": loc, "stream": stream}))
    start = planner.initial()
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, ARROW_SCHEMA) as w:
        for part in planner.partitions(start, planner.latest(start, None, None)):
            for batch in read_partition(part):
                w.write_batch(batch)


def time_ceiling(spark: Any, path: Path, ckpt: Path) -> tuple[float, int]:
    """The pre-built rows through AvailableNow into noop; (seconds, rows)."""
    shutil.rmtree(ckpt, ignore_errors=True)
    t0 = time.perf_counter()
    q = (
        spark.readStream.format("jsspark_bench_ceiling").option("path", str(path)).load()
        .writeStream.format("noop").option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True).start()
    )
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    if q.exception():
        raise RuntimeError(q.exception())
    return elapsed, sum(p["numInputRows"] for p in q.recentProgress)


async def _nats(n: int) -> tuple[float, float, int]:
    """Publish n messages to a real server, then read them all with an ordered consumer;
    (publish seconds, read seconds, messages read)."""
    import nats
    from fill import fill  # bench/, next to this script

    from jsspark.nats_server import NatsServer

    server = NatsServer().start()
    try:
        nc = await nats.connect(server.url, pending_size=512 * 1024 * 1024)
        js = nc.jetstream()
        await js.add_stream(name="BENCH", subjects=["bench.>"], duplicate_window=0)
        subjects = [f"bench.s{i}" for i in range(SUBJECTS)]
        t_pub = await fill(nc, "BENCH", subjects, PAYLOAD, n)  # core publishes the server never drops
        stored = (await js.stream_info("BENCH")).state.messages
        if stored != n:
            raise RuntimeError(f"nats-server stored {stored} of {n} messages")

        done = asyncio.get_running_loop().create_future()
        count = 0

        async def on_msg(msg: Any) -> None:
            nonlocal count
            count += 1
            if count == n and not done.done():
                done.set_result(None)

        t0 = time.perf_counter()
        sub = await js.subscribe(
            "bench.>", ordered_consumer=True, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1
        )
        await asyncio.wait_for(done, timeout=600)
        t_read = time.perf_counter() - t0
        await sub.unsubscribe()
        await nc.close()
        return t_pub, t_read, count
    finally:
        server.stop()


def _median(runs: list[Any]) -> Any:
    """The run of median time."""
    return sorted(runs, key=lambda run: run[0])[len(runs) // 2]


def _timed(cpu: SparkCpu, reading: Any, *args: Any, **kwargs: Any) -> tuple[float, int, tuple[float, float] | None]:
    """One reading's (seconds, rows, (JVM CPU-s, Python CPU-s) or None)."""
    cpu.settle()
    before = cpu.sample()
    elapsed, rows = reading(*args, **kwargs)
    cpu.settle()
    after = cpu.sample()
    used = (after[0] - before[0], after[1] - before[1]) if before and after else None
    return elapsed, rows, used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=1_000_000, help="messages per publish_batch")
    ap.add_argument("--skip-nats", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each Spark reading (median counts)")
    args = ap.parse_args()
    n = args.messages
    root = Path(args.dir or tempfile.mkdtemp(prefix="jsspark-replay-"))
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        print(f"building {n:,} messages (100-byte payloads) in {root}")
        loc = str(root / "lake")
        t_build = build_stream(loc, "BENCH", n, min(args.batch, n))
        build_stream(loc, "WARM", 10_000, 10_000)
        print(f"  lake publish: {t_build:.1f}s ({n / t_build:,.0f} msgs/s)")
        spark = spark_session()
        spark.dataSource.register(ceiling_source())
        prebuild(loc, "BENCH", root / "bench.arrow")
        prebuild(loc, "WARM", root / "warm.arrow")
        # start-up, untimed: one task per core, so every Python worker has started (as the ceiling's)
        time_jetstream(spark, loc, "WARM", root / "ck-warm", minPartitions=str(os.cpu_count() or 1))
        time_parquet(spark, loc, "WARM")
        time_ceiling(spark, root / "warm.arrow", root / "ck-warm-ceiling")
        cpu = SparkCpu(spark)
        runs: dict[str, list[tuple[float, int, tuple[float, float] | None]]] = {"js": [], "pq": [], "ceil": []}
        for _ in range(max(1, args.repeat)):
            runs["js"].append(_timed(cpu, time_jetstream, spark, loc, "BENCH", root / "ck"))
            runs["pq"].append(_timed(cpu, time_parquet, spark, loc, "BENCH"))
            runs["ceil"].append(_timed(cpu, time_ceiling, spark, root / "bench.arrow", root / "ck-ceiling"))
        spark.stop()
        (t_js, rows_js, cpu_js), (t_pq, rows_pq, cpu_pq), (t_ce, rows_ce, cpu_ce) = (
            _median(runs[k]) for k in ("js", "pq", "ceil"))
        assert rows_js == n and rows_pq == n and rows_ce == n, (rows_js, rows_pq, rows_ce)
        results = [
            ("jetstream AvailableNow -> noop", t_js, rows_js),
            ("parquet scan of the files -> noop", t_pq, rows_pq),
            ("python data source ceiling (same schema, prebuilt batches)", t_ce, rows_ce),
        ]
        print("  seconds per run: " + "; ".join(f"{k} {', '.join(f'{t:.2f}' for t, *_ in v)}" for k, v in runs.items()))
        if not args.skip_nats:
            t_pub, t_nats, rows_nats = asyncio.run(_nats(n))
            print(f"  nats-server publish (nats-py core publishes in windows): {t_pub:.1f}s ({n / t_pub:,.0f} msgs/s)")
            assert rows_nats == n, rows_nats
            results.append(("nats-py ordered consumer", t_nats, rows_nats))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    js_rate = rows_js / t_js
    print(f"\n{'reader':<60}{'messages':>12}{'seconds':>10}{'msgs/s':>14}{'jetstream / this':>18}")
    for label, t, rows in results:
        rate = rows / t
        print(f"{label:<60}{rows:>12,}{t:>10.2f}{rate:>14,.0f}{js_rate / rate:>18.2f}")
    ratio = js_rate / (rows_pq / t_pq)
    ceiling = (rows_ce / t_ce) / (rows_pq / t_pq)
    print(f"\njetstream / parquet = {ratio:.2f} (target >= 0.5): {'ok' if ratio >= 0.5 else 'BELOW TARGET'}")
    print(f"python data source ceiling / parquet = {ceiling:.2f}; jetstream / ceiling = {js_rate / (rows_ce / t_ce):.2f}")
    if cpu_js and cpu_pq and cpu_ce:
        print(f"\nCPU seconds of the median run ({os.cpu_count()} cores), Spark's JVM / the Python processes under it:")
        for label, (jvm, py), t in (("jetstream", cpu_js, t_js), ("parquet", cpu_pq, t_pq), ("ceiling", cpu_ce, t_ce)):
            print(f"  {label:<10}{jvm:8.2f} JVM {py:8.2f} Python   ({(jvm + py) / t:.2f} cores busy over {t:.2f} s)")


if __name__ == "__main__":
    main()
