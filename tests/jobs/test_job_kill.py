"""A lake -> lake mirror job killed with SIGKILL and restarted loses and doubles nothing.

The job runs in its own OS process (``kill_job_driver.py``, its own SparkSession), many small
batches (``maxMessagesPerTrigger`` through the origin's ``options``), while this process keeps
publishing into the origin. It is killed (the driver, its JVM and Python workers) once the
mirror holds some but not all, restarted on the same checkpoint, and the mirror must end equal
to the origin message for message. Every wait is on a condition, with a bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import jsspark
from jsspark.engine import headers as H
from tests.spark.test_kill import BOUND_SECONDS, _kill, _wait_for

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).with_name("kill_job_driver.py")
BATCH = 40  # messages per origin publish
PER_TRIGGER = 25  # messages per mirror micro-batch
LEAD = 200  # the origin runs at most this far ahead of the mirror
CAP = 1500  # messages published in all
KEYS = ("seq", "ts_ns", "subject", "headers", "data", "msg_id", "size")


def _start(job: dict[str, Any]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, str(DRIVER), json.dumps(job)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def _batch(start: int, n: int) -> pa.Table:
    headers = [[{"name": "Nats-Msg-Id", "value": f"m-{i}"}, {"name": "K", "value": "a"}, {"name": "K", "value": str(i)}]
               if i % 3 else None for i in range(start, start + n)]
    return pa.table({
        "subject": [f"orders.{'eu' if i % 2 else 'us'}.{i % 5}" for i in range(start, start + n)],
        "data": [f"order {i}".encode() * (1 + i % 4) for i in range(start, start + n)],
        "headers": pa.array(headers, H.HEADER_TYPE),
    })


class Publisher:
    """Publishes ``BATCH`` messages at a time into the origin (one Delta commit each) until
    stopped, keeping at most ``LEAD`` ahead of the mirror (so the mirror always holds some
    but not all, and catching up stays short) and at most ``CAP`` in all."""

    def __init__(self, lake: Any, mirrored: Any, published: int) -> None:
        self.lake, self.mirrored = lake, mirrored
        self.published = published
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self.published < CAP:
                if self.published - self.mirrored() < LEAD:
                    self.lake.publish_batch("ORIG", _batch(self.published, BATCH))
                    self.published += BATCH
                self._stop.wait(0.05)  # pacing of the publisher, not a synchronisation
        except BaseException as e:  # reported by stop()
            self.error = e

    def __enter__(self) -> Publisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(BOUND_SECONDS)
        assert not self._thread.is_alive() and self.error is None, self.error

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _in_flight(root: Path) -> bool:
    """The mirror query's checkpoint (Spark's own layout) has offsets for a batch it has not
    committed."""
    def last(d: Path) -> int:
        return max((int(p.name) for p in d.iterdir() if p.name.isdigit()), default=-1) if d.is_dir() else -1

    ckpts = list(root.glob("MIR/*"))
    return len(ckpts) == 1 and last(ckpts[0] / "offsets") > last(ckpts[0] / "commits")


def _rows(lake: Any, stream: str) -> list[dict[str, Any]]:
    return [{k: r[k] for k in KEYS} for r in lake.stream(stream).read().sort_by("seq").to_pylist()]


def test_mirror_job_killed_and_restarted_loses_and_doubles_nothing(tmp_path: Path) -> None:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="ORIG", subjects=["orders.>"])
    lake.publish_batch("ORIG", _batch(0, 100))
    for seq in (1, 2, 50, 51, 99):  # a deleted head and gaps the mirror must keep as gaps
        lake.delete_msg("ORIG", seq)
    job = {"stream": {"name": "MIR", "mirror": {"name": "ORIG"}}, "target": {"location": loc},
           "origins": {"*": {"location": loc, "options": {"maxMessagesPerTrigger": str(PER_TRIGGER)}}},
           "checkpoint": str(tmp_path / "ckpt"), "trigger": "100 milliseconds"}

    def mirrored() -> int:
        try:
            return lake.stream_info("MIR").state.last_seq
        except Exception:  # not created yet
            return 0

    with Publisher(lake, mirrored, published=100) as pub:
        proc = _start(job)
        try:
            _wait_for("the mirror to hold some messages", lambda: mirrored() >= 150, proc)
            # kill inside a batch: Spark has logged its offsets but not yet its commit (the
            # landing's Delta commit may or may not have happened), with the origin ahead
            _wait_for("a batch in flight, the origin ahead of the mirror",
                      lambda: _in_flight(tmp_path / "ckpt")
                      and lake.stream_info("ORIG").state.last_seq > mirrored() + PER_TRIGGER, proc)
        finally:
            _kill(proc)
        at_kill = mirrored()
        origin_at_kill = lake.stream_info("ORIG").state.last_seq
        assert 150 <= at_kill < origin_at_kill, (at_kill, origin_at_kill)
        proc = _start(job)  # the same checkpoint
        try:
            _wait_for("the restarted job to move", lambda: mirrored() > at_kill, proc)
            pub.stop()
            last = lake.stream_info("ORIG").state.last_seq
            _wait_for(f"the mirror to catch up with the origin's {last}", lambda: mirrored() >= last, proc)
        finally:
            _kill(proc)

    origin, mirror = _rows(lake, "ORIG"), _rows(lake, "MIR")
    assert len(origin) == pub.published - 5 > at_kill
    assert mirror == origin
    o, m = lake.stream_info("ORIG").state, lake.stream_info("MIR").state
    assert (m.messages, m.bytes, m.first_seq, m.last_seq, m.num_deleted) == (
        o.messages, o.bytes, o.first_seq, o.last_seq, o.num_deleted)
    assert (m.first_seq, m.num_deleted) == (3, 3)
    info = lake.stream_info("MIR").mirror
    assert (info.name, info.seq, info.lag) == ("ORIG", o.last_seq, 0)
