"""Checkpoint benchmark: a streaming query's checkpoint entries on a local disk, with the manager
``local_spark`` sets (``LOCAL_CHECKPOINTS``) against Spark's default one.

    python3 dev.py bench checkpoints [--batches 40]

One Spark session per manager (the setting is read when a query starts, but each session gets
its own JVM here so neither warms the other's file system code), each running the same
``rate -> noop`` query with a trigger of 0 for ``--batches`` micro-batches. Printed: the medians
of each batch's ``walCommit`` (the offsets entry) and ``commitOffsets`` (the commit entry), the
default manager's as the anchor. Both managers write the same files; the default's FileContext
path forks ``chmod``/``readlink`` per file when Hadoop's native library is absent, as in a
pip-installed pyspark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
PHASES = ("walCommit", "commitOffsets", "triggerExecution")
WARMUP = 5  # first batches: query start, JIT


def measure(manager: str, batches: int) -> dict[str, float]:
    """Medians of the checkpoint phases over ``batches`` batches (this process's own session)."""
    from jsspark.local_spark import CHECKPOINT_MANAGER, local_spark

    spark = local_spark("jsspark-bench-checkpoints", **{CHECKPOINT_MANAGER: manager})
    with tempfile.TemporaryDirectory() as d:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 1000).load()
             .writeStream.format("noop").option("checkpointLocation", f"{d}/ckpt")
             .trigger(processingTime="0 seconds").start())
        deadline = time.monotonic() + 600
        while len([p for p in q.recentProgress if p["numInputRows"]]) < batches + WARMUP:
            if q.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bench: the query did not make {batches} batches: {q.exception()}")
            time.sleep(0.1)
        q.stop()
        progress = [p for p in q.recentProgress if p["numInputRows"]][WARMUP:]
    spark.stop()
    return {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in PHASES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--manager", help=argparse.SUPPRESS)  # one side, in a child process
    args = ap.parse_args()
    if args.manager:
        print(json.dumps(measure(args.manager, args.batches)))
        return
    from jsspark.local_spark import CHECKPOINT_MANAGER, LOCAL_CHECKPOINTS

    ours = LOCAL_CHECKPOINTS[CHECKPOINT_MANAGER]
    rows = {}
    for name, manager in (("Spark's default (FileContext)", DEFAULT), ("local_spark's (FileSystem)", ours)):
        out = subprocess.run([sys.executable, __file__, "--batches", str(args.batches), "--manager", manager],
                             check=True, capture_output=True, text=True).stdout
        rows[name] = json.loads(out.strip().splitlines()[-1])
    anchor = rows["Spark's default (FileContext)"]
    print(f"rate -> noop, trigger 0, medians over {args.batches} batches, ms (anchor: Spark's default manager)")
    print(f"  {'manager':32s} " + " ".join(f"{k:>17s}" for k in PHASES))
    for name, r in rows.items():
        print(f"  {name:32s} " + " ".join(f"{r[k]:9.0f} (x{anchor[k] / max(r[k], 1):4.1f})" for k in PHASES))


if __name__ == "__main__":
    main()
