"""A job in its own OS process, for the kill test (``test_job_kill.py``).

Run as ``python kill_job_driver.py '<job json>'``: starts its own local SparkSession, runs the
job with ``jsspark.jobs.runner.run_job`` and waits for it until its queries end (a
processing-time job never ends: the test kills it). Exit code 0 when every query ended cleanly.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    job = json.loads(sys.argv[1])
    from jsspark.jobs.runner import run_job
    from jsspark.local_spark import local_spark

    spark = local_spark("jsspark-job-kill-driver")
    running = run_job(job, spark)
    try:
        running.await_termination()
    except Exception as e:
        print(f"kill_job_driver: job failed: {e}", file=sys.stderr)
        return 1
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
