"""A Spark driver for the crash tests: NATS origin -> live source -> lake (mirror form).

Run as ``python -m tests.live.kill_driver PATH URL STREAM LAKE TARGET CHECKPOINT SPILL``; the test
SIGKILLs its whole process group (driver, JVM, Python workers) at random moments. ``PATH`` is how
the batches land, each a way users run it:

- ``job``: a mirror job (``run_job``): rows by reference, the lake sink's commit reads the spill
  and acks right after its Delta commit (``spill.mark_landed``), before Spark commits the batch;
- ``sink``: ``writeStream.format("jetstream").option("form", "mirror")``, the README's query;
- ``foreach``: ``foreachBatch`` with ``land_batch``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

BATCH_OPTIONS = {"maxMessagesPerTrigger": "7000", "maxAckPending": "20000"}
TRIGGER = "100 milliseconds"


def main(path: str, url: str, stream: str, lake_dir: str, target: str, ckpt: str, spill: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import jsspark
    from jsspark.local_spark import local_spark

    spark = local_spark("jsspark-kill")
    if path == "job":
        from jsspark.jobs.runner import run_job

        job = run_job({"stream": {"name": target, "mirror": {"name": stream}}, "target": {"location": lake_dir},
                       "checkpoint": ckpt, "trigger": TRIGGER,
                       "origins": {stream: {"servers": url, "options": {"spillDir": spill, **BATCH_OPTIONS}}}}, spark)
        (q,) = job.queries
    else:
        reader = spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
        df = reader.options(**BATCH_OPTIONS).option("spillDir", spill).load()
        if path == "sink":
            writer = df.writeStream.format("jetstream").option("stream", target).option("form", "mirror")
            q = writer.option("checkpointLocation", ckpt).trigger(processingTime=TRIGGER).start(lake_dir)
        elif path == "foreach":
            from jsspark.live.landing import land_batch

            lake = jsspark.connect(lake_dir)

            def batch(df: Any, batch_id: int) -> None:
                land_batch(lake, target, df.toArrow(), form="mirror", txn=("kill-test", batch_id))

            q = (df.writeStream.foreachBatch(batch).option("checkpointLocation", ckpt)
                 .trigger(processingTime=TRIGGER).start())
        else:
            raise SystemExit(f"kill_driver: unknown path {path!r} (job, sink or foreach)")
    print("started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:8])
