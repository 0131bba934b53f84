"""``jsspark run JOB``: run a job file (a stream's mirror, sources and republish) as Spark queries
and watch them, the way ``nats`` shows a stream's replication: per query the batch, rows, rows/s,
and the target's lag per origin (``stream_info(target).mirror/.sources``).

The only verb that starts Spark; pyspark is imported inside the handler, so every other verb
(and ``jsspark run --help``) starts without it. Progress goes to stderr: redrawn in place on a
terminal, one line per query every ``--interval`` seconds otherwise (logs). The summary goes to
stdout (a table, or JSON with ``-j``).

It ends when every query has ended (``available_now`` / ``once`` triggers), on Ctrl-C or SIGTERM
(queries stopped cleanly; exit 130 / 143), or at ``--timeout`` (queries stopped; exit 0 for an
interval trigger, which runs until stopped, 1 for a catch-up trigger that did not finish). A
failed query stops the others and exits 1 with its error in one line; errors never show the
job's secrets (passwords, tokens, nkey seeds, URL credentials, secret storage options).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from jsspark.cli import render
from jsspark.cli.errors import CLIError, error_causes
from jsspark.cli.units import human_duration, seconds_arg

if TYPE_CHECKING:
    from jsspark.cli.session import Session
    from jsspark.jobs.spec import JobSpec

EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 130, 143


def register(sub: argparse._SubParsersAction, json_only: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run",
        help="run a job file: a stream's mirror, sources and republish as Spark queries",
        description="Run a job file (JSON or YAML: a JetStream stream config plus where its target, "
        "origins and republish destination live) as Structured Streaming queries, showing each "
        "query's batch, rows, rows/s and the target's lag per origin.",
        parents=[json_only],
    )
    p.add_argument("job", metavar="JOB", help="the job file (.json, .yaml or .yml)")
    p.add_argument(
        "--trigger",
        metavar="TRIGGER",
        help="override the file's trigger: available_now (catch up and stop), once, or an interval "
        "like '5 seconds'",
    )
    p.add_argument(
        "--timeout",
        type=seconds_arg,
        metavar="SECONDS",
        help="stop the queries after this long (seconds, or 90s, 10m, 1h)",
    )
    p.add_argument(
        "--interval",
        type=seconds_arg,
        default=5.0,
        metavar="SECONDS",
        help="seconds between progress lines when stderr is not a terminal (default 5)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show a failed query's whole error")
    p.set_defaults(func=cmd_run)


# -- the job ---------------------------------------------------------------------------------------
def load(path: str, trigger: str | None) -> JobSpec:
    """The job file with ``--trigger`` applied; one ``CLIError`` line naming the file and field."""
    from jsspark.jobs.spec import JobError, JobSpec, load_job

    try:
        spec = load_job(path)
    except JobError as exc:
        raise CLIError(str(exc)) from None
    if trigger is None:
        return spec
    try:
        return JobSpec.model_validate({**spec.model_dump(), "stream": spec.stream, "trigger": trigger})
    except ValueError as exc:
        errors = getattr(exc, "errors", None)
        why = str(errors()[0].get("msg", exc)) if callable(errors) and errors() else str(exc)
        raise CLIError(f"--trigger: {why.removeprefix('Value error, ')}") from None


def make_job(spec: JobSpec) -> Any:
    """The runner's ``Job`` (``jobs.runner.run_job`` without starting it, so the queries started
    so far can be stopped and watched while the rest start)."""
    from jsspark.jobs.runner import Job

    return Job(spec)


class Redactor:
    """Scrubs a job's secrets from any text: connection passwords, tokens and nkey seeds, the
    password or token in ``scheme://user:pass@host`` / ``scheme://token@host`` URLs, and
    secret-looking storage options, as fields or as an endpoint's reader ``options``."""

    def __init__(self, spec: JobSpec) -> None:
        from jsspark.datasource.redaction import (  # not at import: engine verbs stay light
            storage_secrets,
            url_secrets,
        )

        endpoints = [spec.target, *spec.origins.values(), *([spec.republish_to] if spec.republish_to else [])]
        found: set[str] = set()
        for ep in endpoints:
            found.update(v for v in (ep.password, ep.token, ep.nkey_seed) if v)
            found.update(url_secrets(ep.servers))
            found.update(storage_secrets(ep.storage_options))  # the rule the jetstream source redacts by
            found.update(ep.option_secrets())  # storage.* and connection secrets given as reader options
        self.secrets = sorted(found, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        from jsspark.datasource.redaction import redact_urls

        text = redact_urls(text)
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


_STREAM_FAILED = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception:\s*")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+")
_QUALIFIED = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b)")
_PY4J = "An error occurred while calling "


def concise(text: str) -> str:
    """A Spark error in one line: the Python exception that ended the last traceback in it
    (``NoRespondersError: no responders: ...``), the Java exception of a Py4J call error
    (``SparkClassNotFoundException: [DATA_SOURCE_NOT_FOUND] ...``), else the first line; without
    package names, Spark's query ids and SQL states."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if starts:
        at = next((i for i in range(starts[-1] + 1, len(lines)) if lines[i].strip() and not lines[i][0].isspace()),
                  at)
    elif at is not None and lines[at].strip().startswith(_PY4J):
        at = next((i for i, line in enumerate(lines) if line.startswith(": ")), at)
        lines[at] = lines[at].removeprefix(": ")
    first = lines[at].strip() if at is not None else text.strip()
    first = ": ".join([first, *error_causes(lines[at + 1 :] if at is not None else [])])
    first = _QUALIFIED.sub("", _STREAM_FAILED.sub("", first))
    return _SQLSTATE.sub("", first).strip() or "failed"


# -- watching ---------------------------------------------------------------------------------------
@dataclass
class View:
    """What the watcher knows about one query."""

    query: Any
    kind: str  # mirror | source | republish
    origin: str
    index: int | None  # which of the target's mirror/sources (for its SourceInfo)
    rows_by_batch: dict[tuple[str, int], int] = field(default_factory=dict)
    batch: int | None = None
    rate: float = 0.0
    active: bool = True
    status: str = "starting"
    error: str | None = None
    detail: str | None = None
    lag: int | None = None
    seq: int | None = None
    seen_ns: int | None = None

    @property
    def name(self) -> str:
        return str(self.query.name)

    @property
    def rows(self) -> int:
        return sum(self.rows_by_batch.values())


def _get(progress: Any, key: str) -> Any:
    try:
        return progress[key]
    except (KeyError, TypeError, IndexError):
        return getattr(progress, key, None)


class Watcher:
    """Follows a starting or running ``Job``: query states, progress, the target's lag."""

    def __init__(self, job: Any, spec: JobSpec, redact: Redactor) -> None:
        self.job, self.spec, self.redact = job, spec, redact
        self.views: dict[int, View] = {}
        self.target_state: Any = None  # the target's StreamState at the last refresh
        self._lake: Any = None

    def sync(self) -> list[View]:
        """A view per query started so far, in start order."""
        plans = {f"{self.spec.job_name}:{p.query_name}": (i, p) for i, p in enumerate(self.job.plans or [])}
        for q in list(self.job.queries):
            if id(q) in self.views:
                continue
            found = plans.get(str(q.name))
            if found is not None:
                i, plan = found
                view = View(q, plan.kind, plan.source.name, i)
            else:
                view = View(q, "republish", self.spec.stream.name, None)
            self.views[id(q)] = view
        return list(self.views.values())

    def states(self) -> list[View]:
        """Refresh whether each query runs and, once it ended, how."""
        for view in self.sync():
            if not view.active:
                continue
            q = view.query
            view.active = bool(q.isActive)
            if view.active:
                continue
            if view.status == "stopped":  # stopped by us (Ctrl-C may have cancelled its batch first)
                continue
            exc = q.exception()
            if exc is not None:
                text = self.redact(str(exc))
                view.status, view.error, view.detail = "failed", self.redact(concise(text)), text
            else:
                view.status = "finished"
        return list(self.views.values())

    def progress(self) -> list[View]:
        """Batches, rows and rate from Spark's progress reports, lag from the target's marks."""
        for view in self.sync():
            q = view.query
            for p in q.recentProgress or ():
                key = (str(_get(p, "runId")), int(_get(p, "batchId") or 0))
                rows = int(_get(p, "numInputRows") or 0)
                view.rows_by_batch[key] = max(view.rows_by_batch.get(key, 0), rows)
            last = q.lastProgress
            if last:
                view.batch = _get(last, "batchId")
                view.rate = float(_get(last, "processedRowsPerSecond") or 0.0)
            if view.active and view.status not in ("stopped", "failed", "finished"):
                if view.batch is not None:
                    view.status = "running"
                else:
                    message = (q.status or {}).get("message") if view.active else None
                    view.status = str(message or "starting")
        self._lag()
        return list(self.views.values())

    def _lag(self) -> None:
        try:
            if self._lake is None:
                import jsspark

                target = self.spec.target
                self._lake = jsspark.connect(str(target.location), target.storage_options)
            info = self._lake.stream_info(self.spec.stream.name)
        except Exception:  # the target is created when the job starts; no marks yet is no lag yet
            return
        origins = [info.mirror] if info.mirror is not None else list(info.sources or [])
        self.target_state = info.state
        for view in self.views.values():
            if view.index is not None and view.index < len(origins) and origins[view.index] is not None:
                src = origins[view.index]
                if src.active_ns >= 0:  # a batch from this origin has landed (else: no lag known yet)
                    view.lag, view.seq, view.seen_ns = src.lag, src.seq, src.active_ns

    def line(self, view: View) -> str:
        parts = [view.name, view.status]
        if view.batch is not None or view.rows:
            parts += [f"batch {view.batch if view.batch is not None else '-'}", f"rows {view.rows:,}",
                      f"{view.rate:,.1f} rows/s"]  # fmt: skip
        if view.lag is not None:
            parts += [f"lag {view.lag:,}", f"origin seq {view.seq:,}"]
            if view.seen_ns is not None:
                parts.append(f"active {human_duration(view.seen_ns)} ago")
        if view.error:
            parts.append(f"error: {view.error}")
        return "  ".join(parts)


class Board:
    """Progress lines on stderr: redrawn in place on a terminal (at most twice a second),
    printed every ``interval`` seconds otherwise."""

    def __init__(self, stream: TextIO, interval: float) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = 0.5 if self.tty else interval
        self.started = time.monotonic()
        self._last = float("-inf")
        self._drawn = 0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def show(self, lines: list[str]) -> None:
        self._last = time.monotonic()
        if self.tty:
            width = max(shutil.get_terminal_size((120, 24)).columns - 1, 20)
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            body = "".join(f"\x1b[2K{line[:width]}\n" for line in lines)
            self.stream.write(up + body)
            self._drawn = len(lines)
        else:
            stamp = f"[{human_duration(int((self._last - self.started) * 1e9))}]"
            self.stream.write("".join(f"{stamp} {line}\n" for line in lines))
        self.stream.flush()

    def note(self, text: str) -> None:
        """A one-off line (starting, stopping), kept above the redrawn block."""
        if self.tty and self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0
        self.stream.write(text + "\n")
        self.stream.flush()


class Signals:
    """Ctrl-C and SIGTERM as a request to stop, read by the watch loop between two waits.

    A handler that raises (Python's KeyboardInterrupt, or pyspark's, which also cancels every
    Spark job through Py4J) lands in the middle of a Py4J call and leaves tracebacks from the
    broken gateway connection; a flag the loop reads within half a second does not. A second
    Ctrl-C raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def _on(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received is not None:
            raise KeyboardInterrupt
        self.received = "interrupted" if signum == signal.SIGINT else "terminated"

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@dataclass
class Outcome:
    status: str  # finished | failed | timeout | interrupted | terminated
    elapsed: float
    error: str | None = None
    detail: str | None = None  # the whole (redacted) error, for -v


def _bind(spark: Any) -> None:
    """Make ``spark`` the active session of this thread's JVM peer: Spark looks Python data
    sources up in the thread's active session, which a new thread does not have."""
    jvm, jsession = getattr(spark, "_jvm", None), getattr(spark, "_jsparkSession", None)
    if jvm is not None and jsession is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)


def _watch(job: Any, watcher: Watcher, board: Board, timeout: float | None, signals: Signals) -> Outcome:
    """Start the job's queries on a helper thread (a republish query may wait for the origin
    queries before it starts) and follow them until they all end, one fails, or the timeout."""
    began = board.started  # the command's start: --timeout and the elapsed time include Spark's start-up
    deadline = None if timeout is None else began + timeout
    failure: list[BaseException] = []

    def start() -> None:
        try:
            _bind(job.spark)
            job.start()
        except BaseException as exc:
            failure.append(exc)

    starter = threading.Thread(target=start, name="jsspark-run-start", daemon=True)
    starter.start()
    status, error, detail = "finished", None, None
    try:
        while True:
            if signals.received is not None:
                status = signals.received
                break
            views = watcher.states()
            failed = [v for v in views if v.status == "failed"]
            if failed:
                status, error = "failed", f"query {failed[0].name} failed: {failed[0].error}"
                break
            if failure and not starter.is_alive():
                detail = watcher.redact(_describe(failure[0]))
                status, error = "failed", f"could not start job {watcher.spec.job_name}: {concise(detail)}"
                break
            if not starter.is_alive() and all(not v.active for v in views):
                break
            if deadline is not None and time.monotonic() >= deadline:
                status = "timeout"
                break
            if board.due():
                board.show([watcher.line(v) for v in watcher.progress()] or ["starting queries"])
            _wait(
                views, starter, 0.5 if deadline is None else max(min(0.5, deadline - time.monotonic()), 0.01)
            )
    except KeyboardInterrupt:  # from a scripted wait, or Ctrl-C before the handlers were in place
        status = "interrupted"
    if status != "finished":
        if status in ("interrupted", "terminated", "timeout"):
            board.note(f"stopping the queries ({status})")
        _stop(job, watcher, starter)
    return Outcome(status, time.monotonic() - began, error, detail)


def _wait(views: list[View], starter: threading.Thread, seconds: float) -> None:
    """Block until a query ends or ``seconds`` pass (a failed query's wait raises: seen next poll)."""
    running = [v for v in views if v.active]
    if running:
        with contextlib.suppress(Exception):
            running[0].query.awaitTermination(seconds)
    else:
        starter.join(seconds)


def _stop(job: Any, watcher: Watcher, starter: threading.Thread) -> None:
    for view in watcher.sync():
        if view.active:
            view.status = "stopped"
    job.stop()
    starter.join(60)  # a start in progress finishes (or fails); stop what it started meanwhile
    for view in watcher.sync():
        if view.active and view.status != "stopped":
            view.status = "stopped"
    job.stop()
    watcher.states()


def _describe(exc: BaseException) -> str:
    from jsspark.cli.errors import describe

    return describe(exc)


# -- the verb ---------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace, session: Session) -> int:
    spec = load(args.job, args.trigger)
    redact = Redactor(spec)
    board = Board(sys.stderr, args.interval)
    origins = ", ".join(spec.origin_names()) or "-"
    board.note(f"Starting job {spec.job_name} from {args.job}: stream {spec.stream.name} "
               f"(origins {origins}), trigger {spec.trigger}")  # fmt: skip
    job = make_job(spec)
    try:
        job.probe()  # an origin that cannot be reached fails now, not after Spark's start-up
    except Exception as exc:
        raise CLIError(f"could not start job {spec.job_name}: {redact(concise(_describe(exc)))}") from None
    try:
        job.spark  # noqa: B018  (the session starts here, in the main thread, where Ctrl-C lands)
    except Exception as exc:
        raise CLIError(
            f"could not start Spark for job {spec.job_name}: {redact(concise(_describe(exc)))}"
        ) from None
    watcher = Watcher(job, spec, redact)
    with Signals() as signals:  # after the session: replaces pyspark's SIGINT handler
        outcome = _watch(job, watcher, board, args.timeout, signals)
    views = watcher.progress()
    if board.tty:
        board.show([watcher.line(v) for v in views])
    _summary(spec, args, watcher, views, outcome, session.json)
    failed = [v for v in views if v.status == "failed"]
    if args.verbose:
        for v in failed:
            sys.stderr.write(f"--- {v.name}\n{v.detail}\n")
        if outcome.detail and not failed:
            sys.stderr.write(f"--- starting {spec.job_name}\n{outcome.detail}\n")
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    if outcome.status == "terminated":
        return EXIT_TERMINATED
    if outcome.status == "failed":
        raise CLIError(outcome.error or "failed")
    if outcome.status == "timeout" and spec.trigger in ("available_now", "once"):
        raise CLIError(
            f"timed out after {args.timeout:g}s before every query finished (stopped; a rerun resumes "
            "from the checkpoint)"
        )
    return 0


def _summary(spec: JobSpec, args: argparse.Namespace, watcher: Watcher, views: list[View],
             outcome: Outcome, as_json: bool) -> None:  # fmt: skip
    st = watcher.target_state
    queries = [
        {"name": v.name, "kind": v.kind, "origin": v.origin, "status": v.status, "batch": v.batch,
         "rows": v.rows, "rate": round(v.rate, 1), "lag": v.lag, "seq": v.seq, "error": v.error}
        for v in views
    ]  # fmt: skip
    stream = None if st is None else {
        "name": spec.stream.name, "messages": st.messages, "bytes": st.bytes,
        "first_seq": st.first_seq, "last_seq": st.last_seq,
    }  # fmt: skip
    if as_json:
        render.print_json({"job": spec.job_name, "file": args.job, "trigger": spec.trigger, "status": outcome.status,
                           "elapsed_s": round(outcome.elapsed, 3), "queries": queries, "stream": stream})  # fmt: skip
        return
    render.print_line(
        f"Job {spec.job_name} {outcome.status} after {outcome.elapsed:.1f}s (trigger {spec.trigger})"
    )
    render.print_line()
    rows = [
        (q["name"], q["kind"].capitalize(), q["origin"], q["status"], "-" if q["batch"] is None else q["batch"],
         render.count(q["rows"]), f"{q['rate']:,.1f}", "" if q["lag"] is None else render.count(q["lag"]),
         "" if q["seq"] is None else render.count(q["seq"]))
        for q in queries
    ]  # fmt: skip
    headers = ["Query", "Kind", "Origin", "Status", "Last Batch", "Rows", "Rows/s", "Lag", "Origin Seq"]
    render.print_line(render.table("Queries", headers, rows) if rows else "No queries started")
    if stream is not None:
        render.print_line()
        render.print_line(f"Stream {stream['name']}: {render.count(stream['messages'])} messages, "
                          f"first seq {stream['first_seq']:,}, last seq {stream['last_seq']:,}")  # fmt: skip
