"""A Spark driver for the crash tests: NATS origin -> live source -> lake (mirror form).

Run as ``python -m tests.live.kill_driver URL STREAM LAKE TARGET CHECKPOINT SPILL``; the test
SIGKILLs its whole process group (driver, JVM, Python workers) at random moments.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main(url: str, stream: str, lake_dir: str, target: str, ckpt: str, spill: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import jsspark
    from jsspark.live.landing import land_batch

    spark = (
        SparkSession.builder.master("local[2]").appName("jsspark-kill")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jsspark.register(spark)
    lake = jsspark.connect(lake_dir)

    def batch(df: Any, batch_id: int) -> None:
        land_batch(lake, target, df.toArrow(), form="mirror", txn=("kill-test", batch_id))

    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
         .option("maxMessagesPerTrigger", "7000").option("maxAckPending", "20000").option("spillDir", spill)
         .load().writeStream.foreachBatch(batch).option("checkpointLocation", ckpt)
         .trigger(processingTime="100 milliseconds").start())
    print("started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:7])
