"""The ``spark-submit`` entry for a job file::

    spark-submit --conf spark.pyspark.python=/path/to/python \\
        /path/to/site-packages/jsspark/jobs/submit.py conf/job.json [--trigger available_now] [--timeout 3600]
    python -m jsspark.jobs.submit conf/job.json        # the same, on a local SparkSession

Under ``spark-submit`` (or any process that already has a SparkSession) the job runs on that
session: ``SparkSession.builder.getOrCreate()`` picks up the master, the resources and the
``--conf`` settings given to spark-submit. As a plain ``python -m`` it starts a local session
(``jsspark.local_spark``). Either way ``format("jetstream")`` is registered, the job is started
as ``jsspark run`` starts it (its origins asked first, before the session) and awaited: it ends
when its queries do (``available_now`` / ``once``), at ``--timeout`` (queries stopped; exit 1 if
a catch-up trigger had not finished), or on SIGINT/SIGTERM (queries stopped cleanly).
Exit codes: 0 done, 1 failed (one line on stderr, secrets redacted), 2 bad usage, 130/143
stopped by a signal. The executors need ``jsspark`` importable too (installed, or ``--py-files``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a file (spark-submit .../submit.py)
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p and str(Path(p).resolve()) != _here]  # jobs/ is no top level
    try:
        import jsspark  # noqa: F401
    except ImportError:  # a source checkout: src/ holds the package
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# after the block above: run as a file from a source checkout, jsspark is importable only then
from jsspark.cli.units import seconds_arg

PROG = "jsspark.jobs.submit"


def session(app_name: str = "jsspark-submit") -> Any:
    """The SparkSession to run on: an active one, the cluster's (spark-submit or a platform
    launched this driver with a gateway), or a new local one for a plain ``python -m`` run."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        spark = active
    elif os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit / pyspark
        spark = SparkSession.builder.getOrCreate()
    else:
        from jsspark.local_spark import local_spark

        return local_spark(app_name)  # registers the data source itself
    from jsspark.datasource import register

    register(spark)
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Run a jsspark job file on Spark and wait for it."
    )
    parser.add_argument("job", metavar="JOB", help="the job file (.json, .yaml or .yml)")
    parser.add_argument("--trigger", help="override the file's trigger: available_now, once or '5 seconds'")
    parser.add_argument(
        "--timeout", type=seconds_arg, metavar="DURATION", help="stop the queries after this long: 3600, 90s, 1h"
    )
    args = parser.parse_args(argv)

    from jsspark.cli.errors import CLIError, describe
    from jsspark.cli.run import Redactor, Signals, Watcher, concise, load, make_job

    try:
        spec = load(args.job, args.trigger)  # the file with --trigger applied; errors in one line
    except CLIError as exc:
        return _fail(str(exc))
    redact = Redactor(spec)
    began = time.monotonic()
    job = make_job(spec)
    try:
        job.probe()  # as `jsspark run`: an origin that cannot be reached fails now, not after Spark's start-up
        job.spark  # noqa: B018  (the session: ``session`` below)
        with Signals() as signals:  # after the session: replaces pyspark's SIGINT handler
            job.start()
            ended = _await(job, signals, None if args.timeout is None else began + args.timeout)
    except KeyboardInterrupt:
        job.stop()
        return 130
    except Exception as exc:
        job.stop()
        return _fail(f"job {spec.job_name}: {redact(concise(describe(exc)))}")
    watcher = Watcher(job, spec, redact)
    if ended != "finished":
        for view in watcher.sync():
            if view.query.isActive:
                view.status = "stopped"
        job.stop()
    watcher.states()
    for view in watcher.progress():
        _log(watcher.line(view))
    if ended == "finished":
        return 0
    if ended == "timeout":
        catch_up = spec.trigger in ("available_now", "once")
        _log(
            f"job {spec.job_name}: stopped at --timeout {args.timeout:g}s"
            + (" before it caught up" if catch_up else "")
        )
        return 1 if catch_up else 0
    _log(f"job {spec.job_name}: {ended}; queries stopped")
    return 130 if ended == "interrupted" else 143


def _await(job: Any, signals: Any, deadline: float | None) -> str:
    """Wait for the job's queries half a second at a time, so a signal is acted on between two
    waits: ``finished``, ``timeout``, ``interrupted`` or ``terminated``; a failed query raises.
    (Each wait is at least 10 ms: Spark refuses a timeout under one millisecond.)"""
    while True:
        if signals.received is not None:
            return str(signals.received)
        for q in job.queries:
            exc = q.exception()
            if exc is not None:
                raise exc
        running = [q for q in job.queries if q.isActive]
        if not running:
            return "finished"
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return "timeout"
        running[0].awaitTermination(0.5 if deadline is None else max(min(0.5, deadline - now), 0.01))


def _log(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")
    sys.stderr.flush()


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 1


def _exit(code: int) -> None:
    """End the process with ``code`` once the job's outcome is written. The interpreter's own
    shutdown is skipped: with py4j's and the native libraries' threads still alive it can abort
    (SIGABRT, exit 134) after a job that succeeded, seen once under spark-submit on a loaded
    machine, and a scheduler would take that exit code for a failed run. The JVM's shutdown hook
    still stops the SparkContext."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
