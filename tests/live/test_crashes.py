"""Crashes during live ingest: the driver SIGKILLed at random moments, the nats-server killed
and restarted. Every origin message must land exactly once, and the origin (a WorkQueue) must
never have removed a message the lake had not committed, at any moment we look."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.local_spark import worker_socket_dir
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def fast_publish(
    nats: SyncNats, subject_prefix: str, start: int, n: int, payload: Callable[[int], bytes] | None = None,
    headers: Callable[[int], dict[str, str] | None] | None = None,
) -> None:
    """Core publishes (the stream stores them) then a flush: much faster than acked publishes.
    Message ``i`` carries ``payload(i)`` (default ``m<i>``) and ``headers(i)`` (default none)."""

    async def go() -> None:
        for i in range(start, start + n):
            await nats.nc.publish(f"{subject_prefix}.{i % 11}", payload(i) if payload else f"m{i}".encode(),
                                  headers=headers(i) if headers else None)
        await nats.nc.flush()

    nats.run(go(), timeout=120)


def crash_headers(i: int) -> dict[str, str] | None:
    """The crash tests' headers for message ``i``: none on every fourth, else two that vary."""
    return None if i % 4 == 0 else {"X-I": str(i), "X-Trace": f"t-{i % 7}"}


def publish_crash_messages(nats: SyncNats, origin: str, start: int, n: int) -> None:
    """Messages ``start..start+n-1`` (origin seqs ``start+1..``) as ``check_landed_once`` expects
    them, once the origin has stored them all (it stores core publishes from a queue of its own)."""
    fast_publish(nats, origin.lower(), start, n, headers=crash_headers)
    wait_for(lambda: nats.state(origin)["last_seq"] >= start + n, 30, f"{origin} to store seq {start + n}")


def sample_origin(nats: SyncNats, origin: str, lo: int, hi: int, rng: random.Random, k: int = 60) -> dict[int, Any]:
    """``k`` random messages of origin seqs ``lo..hi`` as the origin stores them (time included),
    read while nothing can ack them away: the lake must land them exactly so."""
    return {seq: nats.get(origin, seq) for seq in rng.sample(range(lo, hi + 1), min(k, hi - lo + 1))}


def check_invariant(nats: SyncNats, lake: Any, origin: str, target: str) -> int:
    state = nats.state(origin)
    held = lake.stream_info(target).state.last_seq
    assert state["first_seq"] - 1 <= held, f"origin removed up to {state['first_seq'] - 1}, lake holds {held}"
    return held


def origin_report(nats: SyncNats, stream: str) -> str:
    """The origin's state and its consumers' positions, for a timed-out wait's message."""
    consumers = nats.api(f"CONSUMER.LIST.{stream}").get("consumers", [])
    positions = [{k: c.get(k) for k in ("name", "delivered", "ack_floor", "num_ack_pending", "num_pending")}
                 for c in consumers]
    return f"origin state {nats.state(stream)}, consumers {positions}"


def consumers_of(nats: SyncNats, stream: str) -> list[dict[str, Any]]:
    return nats.api(f"CONSUMER.LIST.{stream}").get("consumers", [])


def spawn_driver(path: str, url: str, origin: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """``kill_driver`` in its own process group (so a SIGKILL takes its JVM and workers too),
    landing ``origin`` into the lake's ``<origin>_M`` by ``path``."""
    args = [sys.executable, "-m", "tests.live.kill_driver", path, url, origin, str(tmp_path / "lake"),
            f"{origin}_M", str(tmp_path / "ckpt"), str(tmp_path / "spill")]
    with open(tmp_path / "driver.log", "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(args, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)


def stop_driver(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # already killed
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    shutil.rmtree(worker_socket_dir(proc.pid), ignore_errors=True)


def driver_log(tmp_path: Path) -> str:
    return (tmp_path / "driver.log").read_text()[-3000:]


def await_durable(proc: subprocess.Popen[bytes], nats: SyncNats, origin: str, tmp_path: Path) -> dict[str, Any]:
    """The durable the driver ``proc`` created on ``origin`` (its only consumer), once it is there."""
    wait_for(lambda: len(consumers_of(nats, origin)) == 1 or proc.poll() is not None, 120,
             "the driver's durable on the origin")
    assert proc.poll() is None, driver_log(tmp_path)
    return consumers_of(nats, origin)[0]


def landed(lake: Any, origin: str) -> int:
    """The last origin seq the lake's ``<origin>_M`` holds."""
    return lake.stream_info(f"{origin}_M").state.last_seq


def land_the_rest(proc: subprocess.Popen[bytes], nats: SyncNats, lake: Any, origin: str, total: int,
                  samples: dict[int, Any], tmp_path: Path) -> None:
    """Let the driver ``proc`` land all ``total`` messages, then ``check_landed_once``."""
    wait_for(lambda: landed(lake, origin) >= total or proc.poll() is not None, 180, "the driver to land everything",
             lambda: f"lake holds up to {landed(lake, origin)}, {origin_report(nats, origin)}; "
                     f"driver log: {driver_log(tmp_path)}")
    assert proc.poll() is None, driver_log(tmp_path)
    check_landed_once(nats, lake, origin, total, samples)


def lake_target(tmp_path: Path, origin: str, path: str) -> Any:
    """The lake and its ``<origin>_M``: a mirror stream for a job (its config), else a stream
    with the origin's subjects, as the README's query lands into."""
    lake = jsspark.connect(str(tmp_path / "lake"))
    if path == "job":
        lake.add_stream(name=f"{origin}_M", mirror={"name": origin})
    else:
        lake.add_stream(name=f"{origin}_M", subjects=[f"{origin.lower()}.>"])
    return lake


def check_landed_once(nats: SyncNats, lake: Any, origin: str, total: int, samples: dict[int, Any]) -> None:
    """The lake holds origin seqs 1..total exactly once, each with its subject, headers and data
    (as ``publish_crash_messages`` made them), the ``samples`` (read from the origin) with the
    origin's own time too; and the origin (a WorkQueue or Interest stream whose only consumer is
    ours) has been acked empty."""
    wait_for(lambda: nats.state(origin)["messages"] == 0, 30, "the origin to be fully acked",
             lambda: origin_report(nats, origin))
    rows = lake.stream(f"{origin}_M").read(columns=["seq", "ts_ns", "time", "subject", "headers", "data"])
    seqs = rows.column("seq").to_pylist()
    assert rows.num_rows == total, f"{rows.num_rows} rows; missing {sorted(set(range(1, total + 1)) - set(seqs))[:20]}"
    assert sorted(seqs) == list(range(1, total + 1))
    by_seq = {r["seq"]: r for r in rows.to_pylist()}
    for seq, row in by_seq.items():
        row["headers"] = [(h["name"], h["value"]) for h in row["headers"]] if row["headers"] else None  # as pairs
        want = crash_headers(seq - 1)
        assert (row["subject"], row["headers"], row["data"]) == (
            f"{origin.lower()}.{(seq - 1) % 11}", list(want.items()) if want else None, f"m{seq - 1}".encode()), seq
    assert len(samples) >= 100
    for seq, msg in samples.items():
        row = by_seq[seq]
        assert (row["ts_ns"], row["subject"], row["headers"], row["data"]) == (
            msg["ts_ns"], msg["subject"], msg["headers"], msg["data"]), seq
        assert (row["time"] - EPOCH) // timedelta(microseconds=1) == msg["ts_ns"] // 1000, seq


@pytest.mark.parametrize(("retention", "path"), [("workqueue", "job"), ("interest", "sink"), ("workqueue", "foreach")])
def test_driver_sigkill_at_random_moments(nats: SyncNats, tmp_path: Path, retention: str, path: str) -> None:
    """100,000 messages; the driver SIGKILLed five times while it lands a backlog, each at a
    random moment past a random number of messages landed; more arrive between the kills. An
    Interest origin has no consumer but ours, created before the first publish (a message
    nobody is interested in is not kept). A kill that came after a fast driver had landed the
    whole backlog does not count: more messages are published and it is tried again (bounded)."""
    total, first, more = 100_000, 30_000, 14_000
    origin = f"K{retention[0]}{path[0]}".upper()
    prefix = origin.lower()
    nats.add_stream(name=origin, subjects=[f"{prefix}.>"], retention=retention)
    lake = lake_target(tmp_path, origin, path)
    url = nats.nc.connected_url.geturl()
    rng = random.Random(7)
    samples: dict[int, Any] = {}
    proc = spawn_driver(path, url, origin, tmp_path)
    try:
        assert await_durable(proc, nats, origin, tmp_path)["config"]["ack_policy"] == "flow_control"
        publish_crash_messages(nats, origin, 0, first)
        published = first
        mid_ingest = 0  # kills that came while the driver was landing a backlog
        for _ in range(10):
            goal = landed(lake, origin) + rng.randint(1_000, 6_000)  # inside the backlog: the kill comes mid-ingest
            assert goal < published
            wait_for(lambda p=proc, g=goal: landed(lake, origin) >= g or p.poll() is not None, 120,
                     "the driver to make progress")
            assert proc.poll() is None, driver_log(tmp_path)
            time.sleep(rng.uniform(0, 0.3))  # a random moment inside the next batches, not a sync point
            check_invariant(nats, lake, origin, f"{origin}_M")
            stop_driver(proc)
            check_invariant(nats, lake, origin, f"{origin}_M")
            mid_ingest += landed(lake, origin) < published
            if published < total or landed(lake, origin) == published:  # the next kill needs a backlog
                publish_crash_messages(nats, origin, published, more)
                published += more
            # No driver runs, and what the lake lacks cannot have been acked: it is there to be read.
            samples |= sample_origin(nats, origin, landed(lake, origin) + 1, published, rng)
            proc = spawn_driver(path, url, origin, tmp_path)
            if mid_ingest == 5:
                break
        assert mid_ingest == 5 and published >= total
        land_the_rest(proc, nats, lake, origin, published, samples, tmp_path)
    finally:
        stop_driver(proc)


def test_consumer_reset_by_another_process_during_ingest(nats: SyncNats, tmp_path: Path) -> None:
    """A mirror job lands 100,000 messages of a WorkQueue while this process (not the driver's)
    resets its durable five times, at random moments mid-ingest: back to the ack floor (an empty
    body) and back to seq 1 (on a WorkQueue: the oldest still there). Each restarts delivery over
    messages the reader already holds, some of them in a batch under way; none may land twice."""
    total = 100_000
    origin = "KRESET"
    nats.add_stream(name=origin, subjects=[f"{origin.lower()}.>"], retention="workqueue")
    lake = lake_target(tmp_path, origin, "job")
    rng = random.Random(11)
    publish_crash_messages(nats, origin, 0, total)  # a WorkQueue keeps them for the durable to come
    samples = sample_origin(nats, origin, 1, total, rng, k=200)
    proc = spawn_driver("job", nats.nc.connected_url.geturl(), origin, tmp_path)
    try:
        name = await_durable(proc, nats, origin, tmp_path)["name"]
        for body in (None, {"seq": 1}, None, {"seq": 1}, None):
            goal = landed(lake, origin) + rng.randint(3_000, 12_000)
            assert goal < total
            wait_for(lambda g=goal: landed(lake, origin) >= g or proc.poll() is not None, 120,
                     "the job to make progress")
            assert proc.poll() is None, driver_log(tmp_path)
            resp = nats.api(f"CONSUMER.RESET.{origin}.{name}", body)
            assert "error" not in resp, resp
            check_invariant(nats, lake, origin, f"{origin}_M")
            assert landed(lake, origin) < total, "the reset came after everything had landed"
        land_the_rest(proc, nats, lake, origin, total, samples, tmp_path)
    finally:
        stop_driver(proc)


def test_nats_server_killed_and_restarted_mid_ingest(spark: Any, tmp_path: Path) -> None:
    """A mirror job lands 100,000 messages of a WorkQueue; the nats-server is SIGKILLed and
    restarted (same store, same port) three times at random moments mid-ingest."""
    from jsspark.jobs.runner import run_job
    from tests.live.kill_driver import BATCH_OPTIONS, TRIGGER

    total, origin = 100_000, "RWQ"
    (tmp_path / "store").mkdir()
    with NatsServer(store_dir=tmp_path / "store") as srv:
        nats = SyncNats(srv.url)
        try:
            nats.add_stream(name=origin, subjects=[f"{origin.lower()}.>"], retention="workqueue")
            publish_crash_messages(nats, origin, 0, 80_000)
            samples = sample_origin(nats, origin, 1, 80_000, random.Random(3), k=200)
            lake = lake_target(tmp_path, origin, "job")
            options = {"spillDir": str(tmp_path / "spill"), "waitTimeout": "90", **BATCH_OPTIONS}
            job = run_job({"stream": {"name": f"{origin}_M", "mirror": {"name": origin}},
                           "target": {"location": str(tmp_path / "lake")}, "trigger": TRIGGER,
                           "origins": {origin: {"servers": srv.url, "options": options}}}, spark)
            (q,) = job.queries
            rng = random.Random(5)
            try:
                for _ in range(3):
                    goal = landed(lake, origin) + rng.randint(3_000, 15_000)
                    assert goal < 80_000
                    wait_for(lambda g=goal: landed(lake, origin) >= g or q.exception() is not None, 90,
                             "progress before the server crash")
                    assert q.exception() is None, q.exception()
                    at_kill = check_invariant(nats, lake, origin, f"{origin}_M")
                    srv.restart(kill=True)
                    check_invariant(nats, lake, origin, f"{origin}_M")
                    # what had landed just before the kill (the job goes on committing what it
                    # received while the server is down, so a count taken after the restart can
                    # already be the whole backlog)
                    assert at_kill < 80_000, "the server was killed after the backlog had landed"
                publish_crash_messages(nats, origin, 80_000, total - 80_000)
                wait_for(lambda: landed(lake, origin) >= total or q.exception() is not None, 120,
                         "everything to land after the server restarts")
                assert q.exception() is None, q.exception()
                check_landed_once(nats, lake, origin, total, samples)
            finally:
                job.stop()
        finally:
            nats.close()
