"""``jsspark run``'s watching, exits and error texts, driven by scripted queries (no Spark: the real
runner is replaced by a job whose queries report Spark's progress shapes step by step; the
lake, the job file and the lag marks are real). ``tests/jobs/test_cli_run.py`` runs it on Spark."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from jsspark.cli import run as run_verb
from jsspark.engine.headers import HEADER_TYPE
from jsspark.engine.ingest import store_mirrored
from jsspark.engine.lake import Lake
from jsspark.jobs.spec import load_job
from tests.cli.conftest import Run

PASSWORD = "s3cr3t-pa55"


class FakeQuery:
    """A StreamingQuery whose every ``awaitTermination`` is one step of ``steps``: a progress
    report (a dict as Spark's), a callable (side effect), or an exception to end with."""

    def __init__(self, name: str, steps: list[Any], ends: bool = True) -> None:
        self.name, self.steps, self.ends = name, list(steps), ends
        self.isActive = True
        self.recentProgress: list[dict[str, Any]] = []
        self.status = {"message": "Initializing sources"}
        self._exc: Exception | None = None
        self.stopped = False
        self._stop = threading.Event()

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return self.recentProgress[-1] if self.recentProgress else None

    def exception(self) -> Exception | None:
        return self._exc

    def awaitTermination(self, timeout: float | None = None) -> bool:
        if not self.isActive:
            if self._exc is not None:
                raise self._exc
            return True
        if self.steps:
            step = self.steps.pop(0)
            if isinstance(step, BaseException):
                if isinstance(step, KeyboardInterrupt):
                    raise step
                self._exc, self.isActive = step, False
                raise step
            if callable(step):
                step()
            else:
                self.recentProgress.append(step)
        elif self.ends:
            self.isActive = False
        else:  # a query with nothing left to do runs until stopped, as Spark's waits
            self._stop.wait(timeout)
        return not self.isActive

    def stop(self) -> None:
        self.stopped, self.isActive = True, False
        self._stop.set()


def batch(n: int, rows: int, rate: float = 100.0) -> dict[str, Any]:
    return {"runId": "run-1", "batchId": n, "numInputRows": rows, "processedRowsPerSecond": rate}


class FakeJob:
    """The runner's Job as ``run`` uses it: ``probe``, ``spark``, ``start``, ``plans``, ``queries``,
    ``stop``."""

    def __init__(
        self, spec: Any, queries: list[FakeQuery], start_error: Exception | None = None,
        probe_error: Exception | None = None,
    ) -> None:
        self.spec, self._queries, self.start_error, self.probe_error = spec, queries, start_error, probe_error
        self.sessions = 0
        self.plans: list[Any] = []
        self.queries: list[FakeQuery] = []
        self.stops = 0

    @property
    def spark(self) -> object:
        self.sessions += 1
        return object()

    def probe(self) -> None:
        if self.probe_error is not None:
            raise self.probe_error

    def start(self) -> list[FakeQuery]:
        cfg = self.spec.stream
        origins = [("mirror", cfg.mirror)] if cfg.mirror is not None else [("source", s) for s in cfg.sources]
        self.plans = [SimpleNamespace(kind=k, source=s, query_name=f"{k}-{s.name}-h") for k, s in origins]
        if self.start_error is not None:
            raise self.start_error
        self.queries.extend(self._queries)
        return self.queries

    def stop(self) -> None:
        self.stops += 1
        for q in self.queries:
            q.stop()


@pytest.fixture
def job_file(tmp_path: Path, lake: Lake, location: str) -> Path:
    lake.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(6):
        lake.publish(f"orders.{i}", b"x")
    path = tmp_path / "job.json"
    path.write_text(json.dumps({
        "stream": {"name": "MIRROR", "mirror": {"name": "ORDERS"}}, "target": {"location": location},
        "origins": {"*": {"location": location}}, "trigger": "available_now",
    }))  # fmt: skip
    return path


Scripted = Callable[..., FakeJob]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch, lake: Lake) -> Scripted:
    """``scripted(steps..., ends=True)``: the next ``jsspark run`` gets one scripted mirror query."""
    made: list[FakeJob] = []

    def script(
        *steps: Any, ends: bool = True, start_error: Exception | None = None, probe_error: Exception | None = None
    ) -> FakeJob:
        def make(spec: Any) -> FakeJob:
            if "MIRROR" not in lake.stream_names():
                lake.add_stream(spec.stream)
            job = FakeJob(
                spec, [FakeQuery(f"{spec.job_name}:mirror-ORDERS-h", list(steps), ends)], start_error, probe_error
            )
            made.append(job)
            return job

        monkeypatch.setattr(run_verb, "make_job", make)
        return made  # type: ignore[return-value]

    return script


def land(lake: Lake, seqs: list[int], lag: int) -> Callable[[], None]:
    """A step that lands origin messages into MIRROR as the sink would, recording ``lag``."""

    def step() -> None:
        got = [r for r in lake.stream("ORDERS").read().sort_by("seq").to_pylist() if r["seq"] in seqs]
        rows = pa.table({"seq": [r["seq"] for r in got], "ts_ns": [r["ts_ns"] for r in got],
                         "subject": [r["subject"] for r in got], "data": [r["data"] for r in got],
                         "headers": pa.array([r["headers"] for r in got], HEADER_TYPE)})  # fmt: skip
        store_mirrored(lake, "MIRROR", rows, lag=lag)

    return step


def test_run_follows_queries_to_the_end(
    cli: Run, lake: Lake, job_file: Path, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = scripted(land(lake, [1, 2, 3, 4], 2), batch(0, 4, 80.0), land(lake, [5, 6], 0), batch(1, 2, 40.0))
    with monkeypatch.context() as m:
        m.setattr(run_verb.Board, "due", lambda self: True)  # a progress line after every step
        res = cli("run", str(job_file))
    assert res.code == 0, res.err
    assert res.err.startswith(
        f"Starting job MIRROR from {job_file}: stream MIRROR (origins ORDERS), trigger available_now"
    )
    progress = [line for line in res.err.splitlines() if "MIRROR:mirror-ORDERS-h" in line]
    assert any("batch 0  rows 4  80.0 rows/s  lag 2  origin seq 4" in line for line in progress), res.err
    assert progress[0].startswith("[") and progress[0].endswith(
        "Initializing sources"
    )  # no lag before a landing
    out = res.out
    assert "Job MIRROR finished after" in out and "(trigger available_now)" in out
    row = next(line for line in out.splitlines() if line.startswith("│ MIRROR:mirror-ORDERS-h"))
    assert [c.strip() for c in row.strip("│").split("│")] == [
        "MIRROR:mirror-ORDERS-h", "Mirror", "ORDERS", "finished", "1", "6", "40.0", "0", "6",
    ]  # fmt: skip
    assert "Stream MIRROR: 6 messages, first seq 1, last seq 6" in out
    assert jobs[0].queries[0].stopped is False  # ended by itself: nothing to stop

    scripted(batch(0, 6))
    doc = cli("run", str(job_file), "-j").json()
    assert doc["status"] == "finished" and doc["trigger"] == "available_now" and doc["job"] == "MIRROR"
    assert doc["queries"] == [{"name": "MIRROR:mirror-ORDERS-h", "kind": "mirror", "origin": "ORDERS",
                               "status": "finished", "batch": 0, "rows": 6, "rate": 100.0, "lag": 0,
                               "seq": 6, "error": None}]  # fmt: skip
    assert doc["stream"]["messages"] == 6 and doc["stream"]["last_seq"] == 6


def test_bad_job_file_one_line_no_spark(cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_verb, "make_job", lambda spec: pytest.fail("a bad job must not start Spark"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"location": "/x"}}')
    res = cli("run", str(bad))
    assert res.code == 1 and res.out == ""
    assert res.err == (f"jsspark: error: {bad}: origin stream 'O': say where it lives in 'origins' (a lake "
                       "'location' or a server 'servers'), or give a '*' default\n")  # fmt: skip
    bad.write_text('{"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"location": "/x"},'
                   ' "origins": {"*": {"location": "/x"}}, "trigger": "soon"}')  # fmt: skip
    res = cli("run", str(bad))
    assert res.code == 1 and res.err.count("\n") == 1 and f"{bad}: trigger: trigger 'soon'" in res.err
    missing = cli("run", str(tmp_path / "nope.yaml"))
    assert missing.code == 1 and missing.err.startswith(
        f"jsspark: error: {tmp_path / 'nope.yaml'}: cannot read"
    )
    bad.write_text('{"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"location": "/x"},'
                   ' "origins": {"*": {"location": "/x"}}}')  # fmt: skip
    res = cli("run", str(bad), "--trigger", "whenever")
    assert res.code == 1 and res.err == ("jsspark: error: --trigger: trigger 'whenever': use 'available_now', "
                                         "'once' or an interval like '5 seconds'\n")  # fmt: skip
    assert cli("run", str(bad), "--timeout", "soon").code == 2


def test_failed_query_stops_the_rest_and_prints_a_redacted_line(
    cli: Run, job_file: Path, scripted: Scripted, tmp_path: Path
) -> None:
    spec = json.loads(job_file.read_text())
    spec["stream"] = {
        "name": "AGG",
        "subjects": ["agg.>"],
        "sources": [{"name": "ORDERS"}, {"name": "REMOTE"}],
    }
    spec["origins"]["REMOTE"] = {"servers": f"nats://app:{PASSWORD}@127.0.0.1:4222", "token": "tok-123456"}
    job_file.write_text(json.dumps(spec))
    error = RuntimeError(
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [PYTHON_STREAMING_DATA_SOURCE_"
        "RUNTIME_ERROR] Failed when Python streaming data source perform commit: Traceback (most recent call "
        f'last):\n  File "x.py", line 1, in commit\n    connect("nats://app:{PASSWORD}@h")\n'
        f"jsspark.errors.SomeError: cannot reach nats://app:{PASSWORD}@127.0.0.1:4222 with token tok-123456\n"
        " SQLSTATE: 38000\n=== Streaming Query ===\nIdentifier: AGG"
    )
    jobs = scripted(batch(0, 3), error)
    other = FakeQuery("AGG:source-REMOTE-h", [batch(0, 0)], ends=False)
    orig_start = FakeJob.start

    def start_two(self: FakeJob) -> list[FakeQuery]:
        orig_start(self)
        self.queries.append(other)
        return self.queries

    FakeJob.start = start_two  # type: ignore[method-assign]
    try:
        res = cli("run", str(job_file), "-v")
    finally:
        FakeJob.start = orig_start  # type: ignore[method-assign]
    assert res.code == 1
    last = res.err.strip().splitlines()[-1]
    assert last == ("jsspark: error: query AGG:mirror-ORDERS-h failed: SomeError: cannot reach "
                    "nats://app:***@127.0.0.1:4222 with token ***")  # fmt: skip
    assert other.stopped and jobs[0].stops >= 1
    assert PASSWORD not in res.err + res.out and "tok-123456" not in res.err + res.out
    assert "=== Streaming Query ===" in res.err  # -v: the whole (redacted) error
    statuses = {line.split("│")[1].strip(): line.split("│")[4].strip() for line in res.out.splitlines()
                if line.startswith("│ AGG:")}  # fmt: skip
    assert statuses == {"AGG:mirror-ORDERS-h": "failed", "AGG:source-REMOTE-h": "stopped"}


def test_start_failure_is_one_line(cli: Run, job_file: Path, scripted: Scripted) -> None:
    from jsspark.errors import APIError

    scripted(start_error=APIError(404, 10059, "stream not found"))
    res = cli("run", str(job_file))
    assert res.code == 1
    assert (
        res.err.strip().splitlines()[-1]
        == "jsspark: error: could not start job MIRROR: stream not found (10059)"
    )
    assert "No queries started" in res.out and "Queries" not in res.out.replace("No queries", "")


def test_an_origin_that_does_not_answer_fails_before_spark_starts(cli: Run, job_file: Path, scripted: Scripted) -> None:
    jobs = scripted(probe_error=ConnectionError("nats: no servers available for connection nats://app:pw123456@h"))
    res = cli("run", str(job_file))
    assert res.code == 1 and jobs[0].sessions == 0 and "pw123456" not in res.err
    assert res.err.splitlines()[-1] == (
        "jsspark: error: could not start job MIRROR: nats: no servers available for connection "
        "nats://app:***@h"
    )


def test_ctrl_c_and_sigterm_stop_cleanly(cli: Run, job_file: Path, scripted: Scripted) -> None:
    jobs = scripted(batch(0, 2), KeyboardInterrupt(), ends=False)
    res = cli("run", str(job_file), "-j")
    assert res.code == 130 and jobs[0].queries[0].stopped
    doc = json.loads(res.out)
    assert doc["status"] == "interrupted" and doc["queries"][0]["status"] == "stopped"
    assert doc["queries"][0]["rows"] == 2 and "stopping the queries (interrupted)" in res.err

    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    for sig, code, status in ((signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")):
        jobs = scripted(batch(0, 1), lambda sig=sig: os.kill(os.getpid(), sig), batch(1, 1), ends=False)
        res = cli("run", str(job_file), "-j")
        assert res.code == code and jobs[-1].queries[0].stopped and json.loads(res.out)["status"] == status
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == previous


def test_timeout(cli: Run, job_file: Path, scripted: Scripted) -> None:
    jobs = scripted(batch(0, 1), ends=False)
    res = cli("run", str(job_file), "--timeout", "0.2")
    assert res.code == 1 and jobs[0].queries[0].stopped
    assert res.err.strip().splitlines()[-1] == (
        "jsspark: error: timed out after 0.2s before every query finished (stopped; a rerun resumes from the checkpoint)"
    )
    assert "Job MIRROR timeout after" in res.out
    scripted(batch(0, 1), ends=False)
    res = cli("run", str(job_file), "--timeout", "0.2", "--trigger", "2 seconds", "-j")  # runs until stopped
    assert (
        res.code == 0
        and json.loads(res.out)["status"] == "timeout"
        and json.loads(res.out)["trigger"] == "2 seconds"
    )


def test_terminal_progress_redraws_in_place(
    cli: Run, job_file: Path, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(run_verb.Board, "due", lambda self: True)
    scripted(batch(0, 3), batch(1, 3))
    res = cli("run", str(job_file))
    assert res.code == 0
    assert "\x1b[1F\x1b[2KMIRROR:mirror-ORDERS-h  running  batch 1  rows 6" in res.err
    assert "[0s]" not in res.err  # elapsed stamps are for logs, not terminals


def test_redactor_and_concise() -> None:
    spec = load_job({
        "stream": {"name": "S", "sources": [{"name": "A"}, {"name": "B"}]},
        "target": {"location": "s3://b/lake", "storage_options": {"AWS_SECRET_ACCESS_KEY": "AKsecretvalue",
                                                                    "AWS_REGION": "eu-west-1"}},
        "origins": {"A": {"servers": ["nats://u:pw1234@a:4222", "nats://b:4222"], "nkey_seed": "SUAseed"},
                    "B": {"servers": "tls://x", "password": "hunter22"}},
    })  # fmt: skip
    redact = run_verb.Redactor(spec)
    text = "pw1234 SUAseed hunter22 AKsecretvalue eu-west-1 nats://other:pass@h nats://b:4222"
    assert redact(text) == "*** *** *** *** eu-west-1 nats://other:***@h nats://b:4222"
    assert run_verb.concise("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
                            "Job aborted SQLSTATE: XXKST\nmore") == "Job aborted"  # fmt: skip
    chained = ("Traceback (most recent call last):\n  x\nValueError: first\n\nDuring handling...\n\n"
               "Traceback (most recent call last):\n  y\npyspark.errors.exceptions.base.PySparkRuntimeError: "
               "second SQLSTATE: 38000")  # fmt: skip
    assert run_verb.concise(chained) == "PySparkRuntimeError: second"
    # delta-rs's object store errors: the cause chain follows the first line (colored on a terminal)
    storage = ("OSError: Kernel error -> Operation not supported\n          \x1b[31m\u21b3\x1b[0m an error occurred "
               "while loading credentials\n           \x1b[31m\u21b3\x1b[0m failed to load IMDS session token\n"
               "other text")
    assert run_verb.concise(storage) == ("OSError: Kernel error -> Operation not supported: an error occurred while "
                                         "loading credentials: failed to load IMDS session token")
    py4j = "An error occurred while calling o42.start.\n: java.io.IOException: No space left\n\tat x"
    assert run_verb.concise(py4j) == "IOException: No space left"


def test_redactor_scrubs_secrets_given_as_reader_options() -> None:
    """``storage.*`` credentials and connection secrets an endpoint passes as reader ``options``
    are the job's secrets too; other options (a creds path, a region) stay readable."""
    spec = load_job({
        "stream": {"name": "S", "sources": [{"name": "A"}, {"name": "B"}]},
        "target": {"location": "/tmp/lake"},
        "origins": {"A": {"location": "s3://b/lake", "options": {"storage.AWS_SECRET_ACCESS_KEY": "AWSSECRETVAL",
                                                                 "storage.aws_region": "eu-west-1"}},
                    "B": {"servers": "nats://h:4222", "options": {"nkeyseed": "SUANKEYSEEDVAL", "password": "hunter22",
                                                                  "creds": "/secrets/app.creds",
                                                                  "spillDir": "s3://k:SPILLSECRET@lake/spill"}}},
    })  # fmt: skip
    redact = run_verb.Redactor(spec)
    text = "AWSSECRETVAL SUANKEYSEEDVAL hunter22 SPILLSECRET eu-west-1 /secrets/app.creds"
    assert redact(text) == "*** *** *** *** eu-west-1 /secrets/app.creds"


def test_an_engine_verbs_store_error_is_one_line_with_its_causes() -> None:
    """What ``stream ls`` prints for a lake whose object store refuses: delta-rs's first line
    hides the cause, which follows on coloured lines."""
    from jsspark.cli.errors import describe

    exc = OSError("Kernel error -> Operation not supported\n          \x1b[31m\u21b3\x1b[0m an error occurred "
                  "while loading credentials\n           \x1b[31m\u21b3\x1b[0m failed to load IMDS session token")
    assert describe(exc) == ("Kernel error -> Operation not supported: an error occurred while loading credentials: "
                             "failed to load IMDS session token")
    assert describe(ValueError("two\nplain lines")) == "two\nplain lines"  # no cause chain: left whole
