"""Lake -> lake jobs: a mirror keeps sequences, times, headers and gaps; sources keep each
origin's order with the server's ``Nats-Stream-Source``; reruns and restarts add nothing twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import jsspark
from jsspark.jobs.runner import run_job
from jsspark.jobs.spec import JobError, load_job


def _rows(lake: Any, stream: str) -> list[dict[str, Any]]:
    return lake.stream(stream).read().sort_by("seq").to_pylist()


def _publish(lake: Any, start: int, n: int) -> None:
    for i in range(start, start + n):
        region = "eu" if i % 2 else "us"
        lake.publish(f"orders.{region}.{i % 5}", f"order {i}".encode(), headers={"Nats-Msg-Id": f"o-{i}", "K": str(i)})


@pytest.fixture
def origin_lake(tmp_path: Path) -> Any:
    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="ORDERS", subjects=["orders.>"])
    _publish(lake, 1, 30)
    lake.delete_msg("ORDERS", 7)
    lake.delete_msg("ORDERS", 8)
    return lake


def test_mirror_job_matches_origin_and_resumes(spark: Any, origin_lake: Any, tmp_path: Path) -> None:
    loc = origin_lake.location
    job = {"stream": {"name": "MIRROR", "mirror": {"name": "ORDERS"}}, "target": {"location": loc},
           "origins": {"*": {"location": loc}}, "trigger": "available_now"}
    run_job(job, spark).await_termination(300)

    def same() -> None:
        origin = _rows(origin_lake, "ORDERS")
        mirror = _rows(origin_lake, "MIRROR")
        keys = ("seq", "ts_ns", "subject", "headers", "data")
        assert [{k: r[k] for k in keys} for r in mirror] == [{k: r[k] for k in keys} for r in origin]

    same()
    info = origin_lake.stream_info("MIRROR")
    assert info.mirror.name == "ORDERS" and info.mirror.seq == 30 and info.mirror.lag == 0
    assert (info.state.first_seq, info.state.num_deleted) == (1, 2)  # 7 and 8 keep their numbers, as deleted
    with pytest.raises(Exception, match="is a mirror and takes no direct publishes"):
        origin_lake.publish_batch("MIRROR", pa.table({"subject": ["orders.eu.1"], "data": [b"x"]}))
    _publish(origin_lake, 31, 10)
    run_job(job, spark).await_termination(300)  # same checkpoint: continues
    same()
    # a new checkpoint resumes from the mirror's last sequence, storing nothing twice
    run_job({**job, "checkpoint": str(tmp_path / "other-ckpt")}, spark).await_termination(300)
    same()


def test_sources_job_keeps_origin_order_and_header(spark: Any, origin_lake: Any, tmp_path: Path) -> None:
    loc = origin_lake.location
    origin_lake.add_stream(name="INVOICES", subjects=["inv.>"])
    for i in range(5):
        origin_lake.publish(f"inv.{i}", b"i")
    transforms = [{"src": "orders.eu.*", "dest": "agg.eu.{{wildcard(1)}}"}]
    job = {"stream": {"name": "AGG", "subjects": ["agg.>"],
                      "sources": [{"name": "ORDERS", "subject_transforms": transforms}, {"name": "INVOICES"}]},
           "target": {"location": loc}, "origins": {"*": {"location": loc}}, "trigger": "available_now"}
    run_job(job, spark).await_termination(300)
    rows = _rows(origin_lake, "AGG")
    ident = {n: jsspark.engine.sourcing.identity_of(jsspark.engine.api.rfc3339nano(
        origin_lake.stream_info(n).created_ns)) for n in ("ORDERS", "INVOICES")}
    by_origin: dict[str, list[tuple[int, str, str]]] = {}
    for r in rows:
        hdr = dict((h["name"], h["value"]) for h in r["headers"])["Nats-Stream-Source"].split(" ")
        by_origin.setdefault(hdr[0], []).append((int(hdr[1]), r["subject"], hdr[4]))
        assert hdr[5] == ident[hdr[0]]
    eu = [r for r in _rows(origin_lake, "ORDERS") if r["subject"].startswith("orders.eu.")]
    assert by_origin["ORDERS"] == [(r["seq"], "agg.eu." + r["subject"].split(".")[2], r["subject"]) for r in eu]
    assert [s for s, _, _ in by_origin["INVOICES"]] == [1, 2, 3, 4, 5]
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    # restart with a new checkpoint: resumes after each origin's mark, nothing twice
    _publish(origin_lake, 31, 4)
    run_job({**job, "checkpoint": str(tmp_path / "fresh")}, spark).await_termination(300)
    again = _rows(origin_lake, "AGG")
    seen = [tuple(dict((h["name"], h["value"]) for h in r["headers"])["Nats-Stream-Source"].split(" ")[:2])
            for r in again]
    assert len(seen) == len(set(seen)) == len(rows) + 2  # 31 and 33 are eu


def test_job_file_errors_name_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "job.json"
    bad.write_text('{"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"location": "/x"}}')
    with pytest.raises(JobError, match="origin stream 'O'"):
        load_job(bad)
    bad.write_text('{"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"servers": "nats://x"},'
                   ' "origins": {"*": {"location": "/x"}}}')
    with pytest.raises(JobError, match="'target' must be a lake location"):
        load_job(bad)
    bad.write_text('{"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"location": "/x"},'
                   ' "origins": {"*": {"location": "/x"}}, "trigger": "soon"}')
    with pytest.raises(JobError, match="trigger 'soon'"):
        load_job(bad)


def test_a_target_lake_that_cannot_be_reached_is_named_with_the_stores_causes(tmp_path: Path) -> None:
    """delta-rs's error alone ("Kernel error -> Generic S3 error", its causes on further lines)
    says neither which lake nor, in the CLI's one line, why; the job's error says both."""
    from jsspark.cli.run import concise
    from jsspark.jobs.runner import Job

    job = {"stream": {"name": "M", "mirror": {"name": "O"}}, "origins": {"*": {"location": str(tmp_path)}},
           "target": {"location": "s3://nobucket/lake", "storage_options": {
               "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "k",
               "AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_REGION": "us-east-1", "max_retries": "0"}}}
    with pytest.raises(JobError) as info:
        Job(load_job(job)).prepare()  # nothing listens on port 9 (discard)
    assert str(info.value).startswith("cannot open the target lake s3://nobucket/lake: ")
    line = concise(f"JobError: {info.value}")
    assert line.startswith("JobError: cannot open the target lake s3://nobucket/lake: ") and "\n" not in line
    assert "Connection refused" in line and "s3cr3t-value" not in line


def test_trigger_once_reads_as_available_now(tmp_path: Path) -> None:
    """Spark's deprecated Trigger.Once would land only what a live origin had buffered yet."""
    job = {"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"location": str(tmp_path)},
           "origins": {"*": {"location": str(tmp_path)}}, "trigger": "once"}
    spec = load_job(job)
    assert spec.trigger == "available_now" and spec.trigger_kwargs() == {"availableNow": True}
    assert load_job({**job, "trigger": "5 seconds"}).trigger_kwargs() == {"processingTime": "5 seconds"}


@pytest.mark.parametrize("allow_direct", [False, True], ids=["origin", "direct_origin"])
def test_restarting_a_job_does_not_rewrite_an_unchanged_stream_config(tmp_path: Path, allow_direct: bool) -> None:
    """Also where the stored config holds what came from another stream: a mirror of a local
    ``allow_direct`` origin is stored with ``mirror_direct``."""
    from jsspark.jobs.runner import Job

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="O", subjects=["o.>"], allow_direct=allow_direct)
    job = {"stream": {"name": "M", "mirror": {"name": "O"}}, "target": {"location": str(tmp_path)},
           "origins": {"*": {"location": str(tmp_path)}}}
    Job(load_job(job)).prepare()
    before = lake.catalog._table().version()
    Job(load_job(job)).prepare()
    assert lake.catalog._table().version() == before  # no catalog commit for the same config
    assert lake.stream_info("M").config.mirror_direct is allow_direct
    Job(load_job({**job, "stream": {**job["stream"], "description": "now described"}})).prepare()
    assert lake.stream_info("M").config.description == "now described"


def test_await_termination_at_the_deadline_does_not_raise() -> None:
    """A deadline reached between two queries asks the next one for 1 ms, never for 0 s
    (which pyspark refuses)."""
    from jsspark.jobs.runner import Job

    class Query:
        def __init__(self) -> None:
            self.timeouts: list[float] = []

        def awaitTermination(self, timeout: float | None = None) -> bool:
            assert timeout is None or timeout > 0
            self.timeouts.append(timeout)
            return True

    job = Job.__new__(Job)
    job.queries = [Query(), Query()]
    assert job.await_termination(0.0) is True
    assert all(t == 0.001 for q in job.queries for t in q.timeouts)


def test_a_source_whose_filter_changes_or_goes_keeps_one_durable_on_a_lake_origin(spark: Any, tmp_path: Path) -> None:
    """As on a server origin (tests/jobs/test_live_jobs.py, against the server's own sourcing):
    the job's one durable on a WorkQueue origin is updated to the new filter, keeps its
    position, takes only the filtered messages, and is deleted when the source goes."""
    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="WQ", subjects=["wq.>"], retention="workqueue")
    lake.add_stream(name="P", subjects=["p.>"])
    for s in ("wq.a.1", "wq.b.1", "wq.a.2"):
        lake.publish(s, b"x")
    job = {"stream": {"name": "T", "sources": [{"name": "WQ"}]}, "target": {"location": lake.location},
           "origins": {"*": {"location": lake.location}}, "trigger": "available_now"}
    assert run_job(job, spark).await_termination(300)
    (durable,) = [c.name for c in lake.consumers_info("WQ")]
    for s in ("wq.a.3", "wq.b.2"):
        lake.publish(s, b"x")
    job["stream"]["sources"] = [{"name": "WQ", "filter_subject": "wq.a.>"}]
    assert run_job(job, spark).await_termination(300)
    assert [r["subject"] for r in _rows(lake, "T")] == ["wq.a.1", "wq.b.1", "wq.a.2", "wq.a.3"]
    assert [(c.name, c.config.filter_subjects or [c.config.filter_subject]) for c in lake.consumers_info("WQ")] == [
        (durable, ["wq.a.>"])]
    assert [r["subject"] for r in _rows(lake, "WQ")] == ["wq.b.2"]  # not the source's: kept
    job["stream"]["sources"] = [{"name": "P"}]
    assert run_job(job, spark).await_termination(300)
    assert lake.consumers_info("WQ") == []


@pytest.mark.parametrize("case", ["opt_start_time", "purged", "holding"])
def test_a_source_first_started_on_a_target_holding_messages_starts_where_the_server_does(
    nats_server: Any, tmp_path: Path, case: str
) -> None:
    """A source's first start (nothing of it in the target yet: ``trySetupSourceConsumer`` with
    seq <= 1) looks at the target: an ``opt_start_time`` before the target's last message is
    raised to that message's time, and without a start, a target whose ``first_seq`` is past 1
    (what it held was purged) starts at that time too; one holding messages from seq 1 takes
    every origin message. The job started at the configured time, or at the origin's first
    message, and sourced the early messages the server leaves out (found by the sources fuzz,
    seed 27: a source whose ``opt_start_time`` another source's messages had overtaken)."""
    import time

    from jsspark.config import ConsumerConfig
    from jsspark.engine.api import rfc3339nano
    from jsspark.engine.headers import STREAM_SOURCE
    from jsspark.jobs.runner import Job
    from tests.engine.backends import ServerBackend
    from tests.live.test_durable_source import wait_for

    server, lake = ServerBackend(nats_server.url), jsspark.connect(str(tmp_path))
    origin, target = f"RAISE_O_{case}", f"RAISE_T_{case}"
    since = rfc3339nano(time.time_ns())
    try:
        for add in (server.add_stream, lake.add_stream):
            add({"name": origin, "subjects": [f"{origin}.>"]})
            add({"name": target, "subjects": [f"{target}.>"]})
        for publish in (server.publish, lake.publish):
            publish(f"{origin}.a", b"early 1")
            publish(f"{origin}.b", b"early 2")
            publish(f"{target}.x", b"local")
        if case == "purged":
            server.purge(target)
            lake.purge_stream(target)
        source = {"name": origin, **({"opt_start_time": since} if case == "opt_start_time" else {})}
        cfg = {"name": target, "subjects": [f"{target}.>"], "sources": [source]}
        assert "error" not in server._req(f"$JS.API.STREAM.UPDATE.{target}", cfg)
        lake.update_stream(cfg)
        server.publish(f"{origin}.c", b"late")
        lake.publish(f"{origin}.c", b"late")

        def sourced() -> list[bytes]:
            return [data for _, _, data, hdrs in server.messages(target) if dict(hdrs or []).get(STREAM_SOURCE)]

        wait_for(lambda: b"late" in sourced(), 10, "the server to source the late message", lambda: str(sourced()))
        plan = Job(load_job({"stream": cfg, "target": {"location": str(tmp_path)},
                             "origins": {"*": {"location": str(tmp_path)}}})).plan()[0]
        opts = plan.reader_options
        start, _ = lake.start_sequence(origin, ConsumerConfig.from_json(
            {k: opts[k] for k in ("deliver_policy", "opt_start_time") if k in opts}))
        read = [r["data"] for r in _rows(lake, origin) if r["seq"] >= start]
        assert read == sourced() == ([b"early 1", b"early 2", b"late"] if case == "holding" else [b"late"])
    finally:
        for name in (target, origin):
            server.delete_stream(name)
        server.close()


@pytest.mark.parametrize("case", ["filtered", "filtered_start_below_first", "filtered_start_time", "filtered_from_one"])
def test_an_empty_mirror_takes_the_numbering_where_its_consumer_starts(
    nats_server: Any, tmp_path: Path, case: str
) -> None:
    """The server's mirror consumer starts at the origin's first message at the earliest
    (``selectStartingSeqNo``: deliver all from ``FirstSeq``, an ``opt_start_seq`` below it moved
    up, an ``opt_start_time`` at ``GetSeqFromTime``), and an empty mirror is purged up to that
    start (``setupMirrorConsumer``: ``Delivered.Stream > LastSeq``) even when none of the
    origin's messages pass its filter. The job did so only for a start past the origin's last
    message, and left a filtered mirror at first_seq 0 (the sources fuzz, seeds 146 and 1183).
    Checked for a lake origin and for the same origin on the server."""
    import time

    from jsspark.engine.api import rfc3339nano
    from jsspark.jobs.runner import Job
    from tests.engine.backends import LakeBackend, ServerBackend
    from tests.live.test_durable_source import wait_for

    server, lake = ServerBackend(nats_server.url), LakeBackend(jsspark.connect(str(tmp_path / "lake")))
    of_server = LakeBackend(jsspark.connect(str(tmp_path / "of_server")))
    origin, mirror = f"EMPTY_O_{case}", f"EMPTY_M_{case}"
    since = ""
    try:
        for add in (server.add_stream, lake.add_stream):
            add({"name": origin, "subjects": [f"{origin}.>"]})
        for i in range(3):
            if i == 2:
                since = rfc3339nano(time.time_ns())
            for backend in (server, lake):
                backend.publish(f"{origin}.a", b"x")
        if case in ("filtered", "filtered_start_below_first"):
            for backend in (server, lake):
                backend.delete_msg(origin, 1)
                backend.delete_msg(origin, 2)
        source = {"name": origin, "filter_subject": f"{origin}.b"}
        if case == "filtered_start_below_first":
            source["opt_start_seq"] = 2
        if case == "filtered_start_time":
            source["opt_start_time"] = since
        cfg = {"name": mirror, "mirror": source}
        for add in (server.add_stream, lake.add_stream):
            assert add(cfg) == {"ok": True}
        want = {"messages": 0, "first_seq": 0, "last_seq": 0} if case == "filtered_from_one" else {
            "messages": 0, "first_seq": 3, "last_seq": 2}

        def state(backend: Any) -> dict[str, int]:
            return {k: v for k, v in backend.state(mirror).items() if k in want}

        wait_for(lambda: state(server) == want, 10, "the server's mirror to take its numbering", lambda: str(state(server)))
        Job(load_job({"stream": cfg, "target": {"location": str(tmp_path / "lake")},
                      "origins": {"*": {"location": str(tmp_path / "lake")}}})).plan()
        Job(load_job({"stream": cfg, "target": {"location": str(tmp_path / "of_server")},
                      "origins": {"*": {"servers": nats_server.url}}})).prepare()
        Job(load_job({"stream": cfg, "target": {"location": str(tmp_path / "of_server")},
                      "origins": {"*": {"servers": nats_server.url}}})).plan()
        assert state(lake) == state(of_server) == state(server) == want
    finally:
        for name in (mirror, origin):
            server.delete_stream(name)
        server.close()
