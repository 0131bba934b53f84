"""Crash tests with real processes: a streaming query runs in its own OS process
(``kill_driver.py``, its own SparkSession), is killed with SIGKILL at a chosen point, and is
restarted from its checkpoint. Every wait is on an observable condition, with a bound."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import jsspark
from jsspark.local_spark import worker_socket_dir

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).with_name("kill_driver.py")
BOUND_SECONDS = 90.0
POLL_SECONDS = 0.05


def _wait_for(what: str, cond: Callable[[], bool], proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``cond`` until it holds; fail after ``BOUND_SECONDS`` or if ``proc`` exits first."""
    deadline = time.monotonic() + BOUND_SECONDS
    while not cond():
        if proc is not None and proc.poll() is not None:
            out = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise AssertionError(f"driver exited ({proc.returncode}) before {what}:\n{out[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_SECONDS)  # polling interval of a bounded wait, not a synchronisation


def _start(**args: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, str(DRIVER), json.dumps(args)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (JVM, Python daemon and workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver and everything it started (a machine crash, for the query), then
    wait until all of them are gone: nothing of the old run may still write."""
    pids = _descendants(proc.pid)
    groups = {proc.pid}
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))  # the PySpark daemon runs its workers in its own group
        except ProcessLookupError:
            continue
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    proc.wait(timeout=BOUND_SECONDS)

    def gone() -> bool:
        for pid in pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            try:
                if (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie no longer runs
            except OSError:
                continue
            return False
        return True

    _wait_for("the killed processes to go away", gone)
    shutil.rmtree(worker_socket_dir(proc.pid), ignore_errors=True)


def _finish(**args: Any) -> None:
    proc = _start(**args)
    try:
        rc = proc.wait(timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    assert rc == 0, err[-4000:]


def _lake(tmp_path: Path, retention: str, n: int) -> tuple[str, Any]:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="SRC", subjects=["src.>"], retention=retention)
    lake.add_stream(name="DST", subjects=["dst.>"])
    lake.publish_batch("SRC", pa.table({"subject": [f"src.{i % 4}" for i in range(n)],
                                        "data": [f"m{i}".encode() for i in range(n)]}))
    return loc, lake


def _held(lake: Any, name: str) -> list[bytes]:
    return [r["data"] for r in lake.stream(name).read(columns=["seq", "data"]).sort_by("seq").to_pylist()]


def _copy_invariants(lake: Any, everything: list[bytes]) -> None:
    """No duplicate in DST, and SRC (a work queue: acked means removed) dropped nothing that
    DST does not hold."""
    src, dst = set(_held(lake, "SRC")), _held(lake, "DST")
    assert len(dst) == len(set(dst)), "duplicates in DST"
    assert {m for m in everything if m not in src} <= set(dst), "SRC dropped messages DST does not hold"


def _copy_finishes(loc: str, ck: str, lake: Any, everything: list[bytes]) -> None:
    _finish(location=loc, checkpoint=ck, mode="copy")
    assert _held(lake, "DST") == everything
    assert _held(lake, "SRC") == []
    info = lake.consumer_info("SRC", "MIRROR")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq) == (len(everything), len(everything))


def test_workqueue_copy_killed_between_sink_commit_and_source_ack(tmp_path: Path) -> None:
    """WORKQUEUE SRC --durable, explicit ack--> DST, killed after the sink's Delta commit of
    batch 0 and before anything acked it (the sink's ack is off and the next batch, whose
    planning would ack, is an hour away); restarted to the end: DST holds every message
    once, SRC is drained."""
    n = 30
    loc, lake = _lake(tmp_path, "workqueue", n)
    ck = str(tmp_path / "ck")
    everything = [f"m{i}".encode() for i in range(n)]
    proc = _start(location=loc, checkpoint=ck, mode="copy", trigger="1 hour", ack_source=False)
    try:
        _wait_for("the sink's commit of batch 0", lambda: len(_held(lake, "DST")) >= 10, proc)
    finally:
        _kill(proc)
    assert _held(lake, "DST") == everything[:10]
    assert _held(lake, "SRC") == everything  # committed downstream, not yet acked: all still there
    assert lake.consumer_info("SRC", "MIRROR").ack_floor.stream_seq == 0
    _copy_finishes(loc, ck, lake, everything)


def test_workqueue_copy_killed_at_a_sink_commit(tmp_path: Path) -> None:
    """The same copy with the sink acking, killed as soon as batch 1's commit shows: before,
    during or after its ack, or Spark's commit log, nothing is lost or duplicated."""
    n = 30
    loc, lake = _lake(tmp_path, "workqueue", n)
    ck = str(tmp_path / "ck")
    everything = [f"m{i}".encode() for i in range(n)]
    proc = _start(location=loc, checkpoint=ck, mode="copy", trigger="0 seconds")
    try:
        _wait_for("the sink's commit of batch 1", lambda: len(_held(lake, "DST")) >= 20, proc)
    finally:
        _kill(proc)
    _copy_invariants(lake, everything)
    assert lake.consumer_info("SRC", "MIRROR").ack_floor.stream_seq >= 10  # batch 0 acked by then
    _copy_finishes(loc, ck, lake, everything)


def test_write_killed_mid_batch(tmp_path: Path) -> None:
    """A streaming write killed while batch 1 is in flight (a task hangs holding message 15),
    restarted: batch 1 runs again, and DST ends with every message once, in order, no gaps."""
    n = 20
    loc, lake = _lake(tmp_path, "limits", n)
    ck, marker = str(tmp_path / "ck"), tmp_path / "in-flight"
    everything = [f"m{i}".encode() for i in range(n)]
    proc = _start(location=loc, checkpoint=ck, mode="write", block_seq=15, marker=str(marker))
    try:
        _wait_for("batch 1 to be in flight", marker.exists, proc)
    finally:
        _kill(proc)
    assert _held(lake, "DST") == everything[:10]  # batch 0 committed, batch 1 not
    _finish(location=loc, checkpoint=ck, mode="write")
    assert _held(lake, "DST") == everything
    assert [r["seq"] for r in lake.stream("DST").read(columns=["seq"]).sort_by("seq").to_pylist()] == list(
        range(1, n + 1)
    )
