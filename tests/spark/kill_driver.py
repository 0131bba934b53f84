"""A streaming query in its own OS process, for the kill tests (``test_kill.py``).

Run as ``python kill_driver.py '<json>'`` with keys:

    location, checkpoint   the lake and the query's checkpoint
    mode                   "copy": durable SRC -> DST keeping the origin columns (origin dedup);
                           "write": SRC -> DST without them (the query's batch-id txn)
    trigger                "available_now" or a processing-time interval ("1 hour")
    max_per_trigger        maxMessagesPerTrigger
    ack_source             the sink's ackSource option
    block_seq, marker      "write" only: the task holding SRC message ``block_seq`` creates
                           ``marker`` and then hangs, so the test can kill the query mid-batch

It starts its own local SparkSession and runs until the query ends (AvailableNow) or it is
killed. Exit code 0 when the query finished cleanly.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

# the task hangs at most this long when blocking; the test kills it long before
BLOCK_SECONDS = 300.0


def _session() -> Any:
    from jsspark.local_spark import local_spark

    return local_spark("jsspark-kill-driver")


def _blocking(block_seq: int, marker: str) -> Any:
    """An identity UDF on ``data`` (which the sink writes, so it is not pruned) that hangs the
    task holding message ``block_seq`` after saying so."""
    from pyspark.sql.functions import udf

    def run(seq: int, data: bytes) -> bytes:
        if seq == block_seq:
            Path(marker).write_text(str(os.getpid()))
            threading.Event().wait(BLOCK_SECONDS)  # until SIGKILL
            raise RuntimeError("kill_driver: the test never killed the blocked task")
        return data

    return udf(run, "binary")


def main() -> int:
    args = json.loads(sys.argv[1])
    spark = _session()
    reader = spark.readStream.format("jetstream").option("stream", "SRC")
    reader = reader.option("maxMessagesPerTrigger", str(args.get("max_per_trigger", 10)))
    if args["mode"] == "copy":
        reader = reader.option("durable_name", "MIRROR").option("ack_policy", "explicit")
    df = reader.load(args["location"])
    if args.get("block_seq"):
        df = df.withColumn("data", _blocking(int(args["block_seq"]), args["marker"])("seq", "data"))
    cols = ["regexp_replace(subject, '^src', 'dst') AS subject", "data", "headers"]
    if args["mode"] == "copy":
        cols += ["stream", "seq"]
    writer = (
        df.selectExpr(*cols).writeStream.format("jetstream").option("stream", "DST")
        .option("checkpointLocation", args["checkpoint"])
        .option("ackSource", str(args.get("ack_source", True)).lower())
    )
    trigger = args.get("trigger", "available_now")
    writer = writer.trigger(availableNow=True) if trigger == "available_now" else writer.trigger(processingTime=trigger)
    query = writer.start(args["location"])
    query.awaitTermination()
    if query.exception() is not None:
        print(f"kill_driver: query failed: {query.exception()}", file=sys.stderr)
        return 1
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
