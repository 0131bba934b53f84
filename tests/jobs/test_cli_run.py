"""``jsspark run`` and the spark-submit entry (``jsspark/jobs/submit.py``) run for real, each in its
own process with its own JVM: a lake -> lake mirror catches up, then resumes from its checkpoint;
a bad job file fails in one line before any JVM starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import jsspark
import jsspark.jobs.submit as submit_module

BIN = Path(sys.executable).parent
SCRIPT = BIN / "jsspark"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (pip install -e .)")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "JSSPARK_LOCATION"}
    out.update({"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable})  # fmt: skip
    return out


def _proc(argv: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=timeout
    )


def _why(res: subprocess.CompletedProcess[str]) -> str:
    """A failed run's telling lines (Python's fatal errors and tracebacks, wherever they are among
    Spark's log lines), then the end of its stderr."""
    lines = res.stderr.splitlines()
    telling = [ln for ln in lines if any(w in ln for w in ("Fatal", "Traceback", "Error", "terminate called"))]
    return "\n".join([f"exit {res.returncode}", *telling[:40], "...", res.stderr[-2000:]])


def _rows(lake: Any, stream: str) -> list[tuple[Any, ...]]:
    return [
        (r["seq"], r["ts_ns"], r["subject"], r["data"])
        for r in lake.stream(stream).read().sort_by("seq").to_pylist()
    ]


def test_run_then_spark_submit_mirror(tmp_path: Path, env: dict[str, str]) -> None:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(1, 31):
        lake.publish(f"orders.{'eu' if i % 2 else 'us'}.{i}", f"order {i}".encode())
    lake.delete_msg("ORDERS", 7)
    job = tmp_path / "mirror.yaml"
    job.write_text(f"stream: {{name: MIRROR, mirror: {{name: ORDERS}}}}\ntarget: {{location: {loc}}}\n"
                   f"origins: {{'*': {{location: {loc}}}}}\ntrigger: 5 seconds\n")  # fmt: skip

    res = _proc([str(SCRIPT), "run", str(job), "--trigger", "available_now", "--interval", "2"], env)
    assert res.returncode == 0, _why(res)
    assert res.stderr.startswith(
        f"Starting job MIRROR from {job}: stream MIRROR (origins ORDERS), trigger available_now"
    )
    assert "Job MIRROR finished after" in res.stdout
    row = next(line for line in res.stdout.splitlines() if line.startswith("│ MIRROR:mirror-ORDERS-"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[1:4] == ["Mirror", "ORDERS", "finished"] and cells[5] == "29"  # rows this run
    assert cells[7:] == ["0", "30"]  # lag 0, origin seq 30
    assert "Stream MIRROR: 29 messages, first seq 1, last seq 30" in res.stdout
    assert _rows(lake, "MIRROR") == _rows(lake, "ORDERS")

    # the spark-submit entry, run as a file by spark-submit: same job, same checkpoint, only the new messages
    for i in range(31, 36):
        lake.publish(f"orders.eu.{i}", f"order {i}".encode())
    entry = Path(submit_module.__file__)
    jvm = "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1"  # as local_spark, to start fast
    argv = [str(BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false", "--conf", jvm,
            str(entry), str(job), "--trigger", "available_now"]  # fmt: skip
    res = _proc(argv, env)
    assert res.returncode == 0, _why(res)
    printed = res.stdout + res.stderr  # spark-submit hands the Python driver's stderr to its stdout
    lines = [
        line for line in printed.splitlines() if line.startswith("jsspark.jobs.submit: MIRROR:mirror-ORDERS-")
    ]
    assert len(lines) == 1 and "  finished  " in lines[0] and "rows 5  " in lines[0], printed[-3000:]
    assert "lag 0  origin seq 35" in lines[0]
    assert _rows(lake, "MIRROR") == _rows(lake, "ORDERS")
    info = lake.stream_info("MIRROR")
    assert (info.state.messages, info.state.last_seq, info.mirror.seq) == (34, 35, 35)


def test_bad_job_file_is_one_line_without_a_jvm(tmp_path: Path, env: dict[str, str]) -> None:
    bad = tmp_path / "job.json"
    bad.write_text(json.dumps({"stream": {"name": "M", "mirror": {"name": "O"}},
                               "target": {"location": str(tmp_path / "lake")}}))  # fmt: skip
    expected = f"{bad}: origin stream 'O': say where it lives in 'origins'"
    res = _proc([str(SCRIPT), "run", str(bad)], env, timeout=60)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.startswith(f"jsspark: error: {expected}") and res.stderr.count("\n") == 1
    res = _proc([sys.executable, "-m", "jsspark.jobs.submit", str(bad)], env, timeout=60)
    assert res.returncode == 1 and res.stderr.startswith(f"jsspark.jobs.submit: error: {expected}")
    assert res.stderr.count("\n") == 1


def test_submit_entry_ends_on_signal_timeout_and_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entry's waiting, without Spark: scripted queries (tests/cli/test_run.py) stand in."""
    import signal

    import jsspark.cli.run as run_verb
    from tests.cli.test_run import FakeJob, FakeQuery, batch

    loc = str(tmp_path / "lake")
    jsspark.connect(loc).add_stream(name="ORDERS", subjects=["orders.>"])
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({"stream": {"name": "MIRROR", "mirror": {"name": "ORDERS"}},
                                    "target": {"location": loc}, "trigger": "available_now",
                                    "origins": {"*": {"servers": "nats://app:pw-42424@127.0.0.1:4222"}}}))  # fmt: skip
    monkeypatch.setattr(submit_module, "session", lambda: object())

    def scripted(*steps: Any, ends: bool = True) -> None:
        queries = [FakeQuery("MIRROR:mirror-ORDERS-h", list(steps), ends)]
        monkeypatch.setattr(run_verb, "make_job", lambda spec: FakeJob(spec, queries))

    scripted(batch(0, 4), batch(1, 2))
    assert submit_module.main([str(job_file)]) == 0
    assert "jsspark.jobs.submit: MIRROR:mirror-ORDERS-h  finished  batch 1  rows 6" in capsys.readouterr().err

    scripted(batch(0, 1), lambda: os.kill(os.getpid(), signal.SIGTERM), ends=False)
    assert submit_module.main([str(job_file)]) == 143
    err = capsys.readouterr().err
    assert "MIRROR:mirror-ORDERS-h  stopped" in err and "job MIRROR: terminated; queries stopped" in err

    scripted(batch(0, 1), ends=False)
    assert submit_module.main([str(job_file), "--timeout", "0.2"]) == 1  # a catch-up that did not finish
    assert "stopped at --timeout 0.2s before it caught up" in capsys.readouterr().err
    scripted(batch(0, 1), ends=False)
    assert (
        submit_module.main([str(job_file), "--timeout", "0.2", "--trigger", "1 second"]) == 0
    )  # runs until stopped
    assert "job MIRROR: stopped at --timeout 0.2s\n" in capsys.readouterr().err

    scripted(
        batch(0, 1),
        RuntimeError("Traceback (most recent call last):\n  x\nConnectionError: nats://app:pw-42424@h"),
    )
    assert submit_module.main([str(job_file)]) == 1
    assert (
        capsys.readouterr().err
        == "jsspark.jobs.submit: error: job MIRROR: ConnectionError: nats://app:***@h\n"
    )


def test_the_submit_file_runs_from_a_source_checkout_where_jsspark_is_not_installed(tmp_path: Path) -> None:
    """spark-submit runs ``jsspark/jobs/submit.py`` as a file; in a source checkout no installed
    jsspark is there (``-S``: no site-packages, and a clean environment: no PYTHONPATH), so the
    file puts ``src/`` on the path before its first jsspark import."""
    entry = Path(submit_module.__file__)
    res = subprocess.run([sys.executable, "-S", str(entry), "--help"], env={}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: jsspark.jobs.submit [-h]") and "--timeout DURATION" in res.stdout


def test_the_submit_entry_asks_the_origins_before_spark_starts(
    tmp_path: Path, nats_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """conf/README: every origin is asked about itself before the target is created or Spark
    starts, as ``jsspark run`` does: a source stream the server does not have fails the entry
    with the server's 10059 and no session (it took Spark's start-up, 20 s here, first)."""
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({"stream": {"name": "X", "sources": [{"name": "NOPE"}]},
                                    "target": {"location": str(tmp_path / "lake")}, "trigger": "available_now",
                                    "origins": {"NOPE": {"servers": nats_server.url}}}))  # fmt: skip
    monkeypatch.setattr(submit_module, "session", lambda *a: pytest.fail("Spark started before the origins"))
    assert submit_module.main([str(job_file)]) == 1
    assert capsys.readouterr().err == "jsspark.jobs.submit: error: job X: stream not found (10059)\n"
    assert not (tmp_path / "lake").exists()  # nor was the target created
