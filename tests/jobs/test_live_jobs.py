"""Jobs against a real nats-server: the server runs the same mirror / sources over the same
origin content as a jsspark job, and the two results are compared message for message.

- mirrors (plain, ``filter_subject``, ``subject_transforms``) of a Limits origin with deleted
  head, middle and tail messages: sequence, ns time, subject, every header (repeats kept,
  ``Nats-Expected-*`` dropped), data, and the stream state (first/last seq, deleted, bytes);
- a sourcing stream (two sources, one with transforms incl. an empty destination, one with a
  filter; a ``Nats-Msg-Id`` present in both origins): each origin's order, the stored subject,
  headers and the ``Nats-Stream-Source`` value byte for byte, identity token included;
- durable sourcing from a WorkQueue origin: every message lands once, the origin removes only
  what landed and ends empty; reruns on the same and on a fresh checkpoint add nothing twice.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.engine.headers import STREAM_SOURCE
from jsspark.engine.ingest import sourced_seq
from jsspark.engine.sourcing import Origin
from jsspark.jobs.runner import Job, run_job
from jsspark.jobs.spec import load_job
from jsspark.nats_server import NatsServer
from jsspark.subjects.vectorized import match_filter
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for
from tests.rawnats import RawNats

pytestmark = [pytest.mark.nats, pytest.mark.spark]

BOUND = 90.0  # seconds any server-side catch-up may take (a recreated origin waits out a retry)
JOB_BOUND = 300.0


# -- helpers -------------------------------------------------------------------------------------
def publish_origin(nats: SyncNats, raw: RawNats, stream: str, items: list[tuple[str, bytes, list[tuple[str, str]]]]) -> None:
    """Core-NATS publishes with raw header blocks (repeated keys survive, unlike nats-py's dict),
    then a bounded wait until the origin stored them all."""
    before = nats.state(stream)["last_seq"]
    for subject, data, pairs in items:
        raw.publish(subject, data, pairs or None)
    raw.flush()
    wait_for(lambda: nats.state(stream)["last_seq"] >= before + len(items), BOUND, f"{stream} to store the publishes")


def delete(nats: SyncNats, stream: str, seqs: list[int]) -> None:
    for s in seqs:
        resp = nats.api(f"STREAM.MSG.DELETE.{stream}", {"seq": s})
        assert resp.get("success"), resp


def server_msgs(nats: SyncNats, stream: str) -> list[dict[str, Any]]:
    """Every message the server's stream holds, in order (deleted numbers skipped)."""
    st = nats.state(stream)
    out = []
    for s in range(st["first_seq"], st["last_seq"] + 1):
        resp = nats.api(f"STREAM.MSG.GET.{stream}", {"seq": s})
        if "error" in resp:
            assert resp["error"]["err_code"] == 10037, resp  # no message found: a deleted number
            continue
        out.append(nats.get(stream, s))
    return out


def lake_msgs(lake: Any, stream: str) -> list[dict[str, Any]]:
    out = []
    for r in lake.stream(stream).read().sort_by("seq").to_pylist():
        pairs = [(h["name"], h["value"]) for h in r["headers"]] if r["headers"] else None
        out.append({"seq": r["seq"], "subject": r["subject"], "data": r["data"], "headers": pairs, "ts_ns": r["ts_ns"]})
    return out


def server_info(nats: SyncNats, stream: str) -> dict[str, Any]:
    resp = nats.api(f"STREAM.INFO.{stream}")
    assert "error" not in resp, resp
    return resp


def selected(origin_msgs: list[dict[str, Any]], source: dict[str, Any]) -> list[dict[str, Any]]:
    """The origin messages a mirror/source with this config takes (``Origin.filters``)."""
    import pyarrow as pa

    filters = Origin.of(source).filters()
    if not filters:
        return list(origin_msgs)
    hit = match_filter(pa.array([m["subject"] for m in origin_msgs], pa.string()), filters).to_pylist()
    return [m for m, h in zip(origin_msgs, hit, strict=True) if h]


def run_all(jobs: list[dict[str, Any]], spark: Any) -> list[Job]:
    """Run the jobs to their end, one after the other (several Python streaming sources
    starting at once on a loaded 2-core machine can miss Spark's worker connect timeout)."""
    done = []
    for j in jobs:
        r = run_job(j, spark)
        assert r.await_termination(JOB_BOUND), r.progress()
        done.append(r)
    return done


def state_of(st: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return st["messages"], st["bytes"], st["first_seq"], st["last_seq"], st.get("num_deleted", 0)


def lake_state(lake: Any, stream: str) -> tuple[int, int, int, int, int]:
    st = lake.stream_info(stream).state
    return st.messages, st.bytes, st.first_seq, st.last_seq, st.num_deleted


def origin_items(stream: str, prefix: str, n: int, offset: int = 0) -> list[tuple[str, bytes, list[tuple[str, str]]]]:
    """Messages over four subjects: repeated header keys, ``Nats-Msg-Id``, a ``Nats-Expected-*``
    the origin checks and keeps (mirrors and sources drop it), some without any header."""
    out = []
    for i in range(offset, offset + n):
        subject = [f"{prefix}.a.x", f"{prefix}.b.y", f"{prefix}.a.z", f"{prefix}.c"][i % 4]
        pairs: list[tuple[str, str]] = []
        if i % 7 != 3:
            pairs = [("K", f"v{i}"), ("K", f"w{i}"), ("Nats-Msg-Id", f"{prefix}-{i}")]
            if i % 5 == 0:
                pairs.append(("Nats-Expected-Stream", stream))
            if i % 6 == 1:
                pairs.insert(0, ("X-Spaces", f"padded  {i}  "))  # inner and trailing blanks kept
        out.append((subject, f"payload {i}".encode() * (1 + i % 3), pairs))
    return out


# -- mirrors ---------------------------------------------------------------------------------------
def test_mirror_jobs_equal_server_mirrors(spark: Any, server: NatsServer, nats: SyncNats, raw: RawNats,
                                         tmp_path: Path) -> None:
    nats.add_stream(name="LO", subjects=["lo.>"], storage="file")
    publish_origin(nats, raw, "LO", origin_items("LO", "lo", 40))
    delete(nats, "LO", [1, 2, 9, 10, 23, 40])  # head, middle and tail
    assert any([k for k, _ in m["headers"] or []].count("K") == 2 for m in server_msgs(nats, "LO"))  # repeats reached the origin

    # an origin that holds nothing but has numbers behind it (purged): an empty mirror of it
    # takes its numbering at once (the server purges the new mirror up to the origin's position)
    nats.add_stream(name="LP", subjects=["lp.>"], storage="file")
    publish_origin(nats, raw, "LP", origin_items("LP", "lp", 10))
    assert nats.api("STREAM.PURGE.LP", {}).get("success")
    mirrors = {
        "LM": {"name": "LO"},
        "LMP": {"name": "LP"},
        "LMF": {"name": "LO", "filter_subject": "lo.a.>"},
        "LMT": {"name": "LO", "subject_transforms": [{"src": "lo.a.*", "dest": "x.{{wildcard(1)}}"},
                                                     {"src": "lo.b.>", "dest": "y.>"}]},
        "LMS": {"name": "LO", "opt_start_seq": 10},  # a deleted number: starts at 11
    }
    for name, mirror in mirrors.items():
        nats.add_stream(name=name, storage="file", mirror=mirror)
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    jobs = [{"stream": {"name": name, "mirror": mirror}, "target": {"location": loc},
             "origins": {"*": {"servers": server.url}}, "trigger": "available_now"}
            for name, mirror in mirrors.items()]
    # a start past every stored message: the server purges the empty mirror up to it
    cut = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    beyond = {"LMB": {"name": "LO", "opt_start_seq": 100}, "LMBT": {"name": "LO", "opt_start_time": cut}}
    for name, mirror in beyond.items():
        nats.add_stream(name=name, storage="file", mirror=mirror)
    run_all(jobs + [{**jobs[0], "stream": {"name": name, "mirror": mirror}} for name, mirror in beyond.items()], spark)
    _same_mirrors(nats, lake, mirrors)
    assert lake_state(lake, "LMP") == (0, 0, 11, 10, 0)
    for name, want in (("LMB", (0, 0, 100, 99, 0)), ("LMBT", (0, 0, 41, 40, 0))):
        wait_for(lambda n=name, w=want: state_of(server_info(nats, n)["state"]) == w, BOUND,
                 f"the server's mirror {name} to align", lambda n=name: str(server_info(nats, n)["state"]))
        assert lake_state(lake, name) == want, name

    # the origins go on (LO after its deleted tail 40): the server's mirrors follow at once, the
    # jobs resume from their checkpoints, and both show 40 as a deleted number
    # (no new deletes: the server's mirrors copy new messages before any delete could reach them)
    publish_origin(nats, raw, "LO", origin_items("LO", "lo", 10, offset=40))
    publish_origin(nats, raw, "LP", origin_items("LP", "lp", 5, offset=10))
    run_all(jobs[:2], spark)
    _same_mirrors(nats, lake, {k: mirrors[k] for k in ("LM", "LMP")})
    assert lake.stream_info("LM").state.last_seq == 50
    assert lake_state(lake, "LMP")[2:] == (11, 15, 0)


def _same_mirrors(nats: SyncNats, lake: Any, mirrors: dict[str, dict[str, Any]]) -> None:
    origins: dict[str, list[dict[str, Any]]] = {}
    for name, mirror in mirrors.items():
        origin = origins.get(mirror["name"]) or origins.setdefault(mirror["name"], server_msgs(nats, mirror["name"]))
        taken = selected([m for m in origin if m["seq"] >= mirror.get("opt_start_seq", 0)], mirror)
        last = taken[-1]["seq"] if taken else nats.state(mirror["name"])["last_seq"]

        def caught_up(n: str = name, w: int = len(taken), last: int = last) -> bool:
            st = nats.state(n)
            return st["messages"] >= w and st["last_seq"] >= last and server_info(nats, n)["mirror"]["lag"] == 0

        wait_for(caught_up, BOUND, f"the server's mirror {name} to catch up")
        srv, got = server_msgs(nats, name), lake_msgs(lake, name)
        assert len(srv) == len(taken), name
        assert got == srv, name
        assert lake_state(lake, name) == state_of(server_info(nats, name)["state"]), name
        info, sinfo = lake.stream_info(name).mirror, server_info(nats, name)["mirror"]
        assert (info.name, info.lag) == (sinfo["name"], sinfo["lag"]), name


# -- sources ---------------------------------------------------------------------------------------
def _source_key(headers: list[tuple[str, str]]) -> tuple[str, str, str]:
    """(origin head, filters, dests) of a ``Nats-Stream-Source`` value: which source stored it."""
    value = dict(headers)[STREAM_SOURCE]
    f = value.split(" ")
    return f[0], f[2], f[3]


def _per_source(msgs: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[tuple[Any, ...]]]:
    out: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    for m in msgs:
        out.setdefault(_source_key(m["headers"]), []).append((m["subject"], m["headers"], m["data"]))
    return out


def test_sources_job_equals_server_sourcing_stream(spark: Any, server: NatsServer, nats: SyncNats, raw: RawNats,
                                                  tmp_path: Path) -> None:
    nats.add_stream(name="SO1", subjects=["so1.>"], storage="file")
    nats.add_stream(name="SO2", subjects=["so2.>"], storage="file")
    publish_origin(nats, raw, "SO1", origin_items("SO1", "so1", 30))
    publish_origin(nats, raw, "SO2", origin_items("SO2", "so2", 20))
    # the same Nats-Msg-Id in both origins: a sourcing stream has no duplicate window by default
    publish_origin(nats, raw, "SO1", [("so1.a.x", b"twin", [("Nats-Msg-Id", "twin")])])
    publish_origin(nats, raw, "SO2", [("so2.c", b"twin", [("Nats-Msg-Id", "twin")])])
    delete(nats, "SO1", [2, 5])
    sources = [
        {"name": "SO1", "subject_transforms": [{"src": "so1.a.*", "dest": "agg.{{wildcard(1)}}"},
                                               {"src": "so1.b.>", "dest": ""}]},
        {"name": "SO2", "filter_subject": "so2.c"},
    ]
    # the target's own transform applies to sourced messages too, after the source's (and only
    # to what it matches: SO1's agg.* subjects stay as they are)
    cfg = {"name": "AGG", "subjects": ["agg.>"], "sources": sources,
           "subject_transform": {"src": "so2.>", "dest": "agg.so2.>"}}
    nats.add_stream(storage="file", **cfg)
    origins = {s["name"]: server_msgs(nats, s["name"]) for s in sources}
    want = sum(len(selected(origins[s["name"]], s)) for s in sources)
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    job = {"stream": cfg, "target": {"location": loc}, "origins": {"*": {"servers": server.url}},
           "trigger": "available_now"}
    run_all([job], spark)
    _same_sourcing(nats, lake, want)

    # SO2 deleted and created again: another identity, so the server sources the new SO2 from
    # its start (``consumer's stream identity does not match`` resets it to 0), and so must the
    # job on its old checkpoint, whose offsets are the old SO2's
    assert nats.api("STREAM.DELETE.SO2").get("success")
    nats.add_stream(name="SO2", subjects=["so2.>"], storage="file")
    publish_origin(nats, raw, "SO2", origin_items("SO2", "so2", 12, offset=100))
    want += len(selected(server_msgs(nats, "SO2"), sources[1]))
    run_all([job], spark)
    _same_sourcing(nats, lake, want)
    tokens = [m["headers"][-1][1].split(" ")[5] for m in lake_msgs(lake, "AGG") if m["subject"].startswith("agg.so2.")]
    assert len(set(tokens)) == 2 and tokens[-1] != tokens[0]  # the old SO2's, then the new one's

    # a mirror of the sourcing stream keeps each message's Nats-Stream-Source (only a source
    # replaces it), and applies its own stream transform to what it mirrors
    mirror_cfg = {"name": "AGM", "mirror": {"name": "AGG"}, "subject_transform": {"src": "agg.>", "dest": "m.>"}}
    nats.add_stream(storage="file", **mirror_cfg)
    run_all([{**job, "stream": mirror_cfg}], spark)
    _same_mirrors(nats, lake, {"AGM": mirror_cfg["mirror"]})
    assert all(dict(m["headers"]).get(STREAM_SOURCE) for m in lake_msgs(lake, "AGM"))
    heads = [m["subject"].split(".")[0] for m in lake_msgs(lake, "AGM")]
    assert heads.count("m") == sum(m["subject"].startswith("agg.") for m in lake_msgs(lake, "AGG")) > 0


def _same_sourcing(nats: SyncNats, lake: Any, want: int) -> None:
    wait_for(lambda: nats.state("AGG")["messages"] >= want
             and all(s["lag"] == 0 for s in server_info(nats, "AGG")["sources"]), BOUND,
             "the server's sourcing stream to catch up")
    srv, got = server_msgs(nats, "AGG"), lake_msgs(lake, "AGG")
    assert len(srv) == len(got) == want
    assert [m["seq"] for m in got] == list(range(1, want + 1))
    # each origin's messages in origin order, with the very same subject, headers (the server's
    # Nats-Stream-Source value, identity token included) and data; only the interleaving of the
    # two origins and the local times are the target's own
    assert _per_source(got) == _per_source(srv)
    assert sum(1 for m in got if m["data"] == b"twin") == 2
    assert all(len(m["headers"][-1][1].split(" ")) == 6 for m in got)  # each with its origin's identity
    st_lake, st_srv = lake.stream_info("AGG").state, server_info(nats, "AGG")["state"]
    assert (st_lake.messages, st_lake.bytes, st_lake.num_subjects) == (
        st_srv["messages"], st_srv["bytes"], st_srv["num_subjects"])
    lake_src = {(s.name, s.filter_subject): (s.seq, s.lag) for s in lake.stream_info("AGG").sources}
    srv_src = {(s["name"], s.get("filter_subject", "")): (s.get("seq"), s["lag"])
               for s in server_info(nats, "AGG")["sources"]}
    assert lake_src == srv_src


# -- durable sourcing from a WorkQueue origin ------------------------------------------------------
class RemovalWatch:
    """Samples the WorkQueue origin, then the lake, while a job runs: whatever the origin had
    removed at the first read must be in the lake at the second (a sound check: the lake only
    grows). The lake lands in origin order, so what is removed must lie at or below what it holds
    (``SyncNats.removed_upto``: interior deletes count, since an ack removes its newest message first)."""

    def __init__(self, nats: SyncNats, lake: Any, origin: str, target: str, source: dict[str, Any]) -> None:
        self.nats, self.lake, self.origin, self.target, self.source = nats, lake, origin, target, source
        self.violations: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            removed = self.nats.removed_upto(self.origin)
            try:
                landed = sourced_seq(self.lake, self.target, self.source)
            except Exception:  # the target not created yet
                landed = 0
            if removed > landed:
                self.violations.append(f"origin removed up to {removed}, lake holds up to {landed}")
            self.samples += 1
            self._stop.wait(0.05)  # sampling interval, not a synchronisation

    def __enter__(self) -> RemovalWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_workqueue_durable_sourcing_lands_once_and_drains(spark: Any, server: NatsServer, nats: SyncNats,
                                                          raw: RawNats, tmp_path: Path) -> None:
    nats.add_stream(name="WQO", subjects=["wq.>"], storage="file", retention="workqueue")
    items = origin_items("WQO", "wq", 300)
    publish_origin(nats, raw, "WQO", items)
    source = {"name": "WQO"}
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    job = {"stream": {"name": "WQS", "subjects": ["wqs.>"], "sources": [source]}, "target": {"location": loc},
           "origins": {"*": {"servers": server.url, "options": {"maxMessagesPerTrigger": "60"}}},
           "trigger": "available_now"}
    created = server_info(nats, "WQO")["created"]
    ident = jsspark.engine.sourcing.identity_of(created)

    def check(n: int) -> None:
        """The lake holds origin messages 1..n once each, in order, as the origin had them."""
        got = lake_msgs(lake, "WQS")
        assert [m["seq"] for m in got] == list(range(1, n + 1))
        for i, m in enumerate(got):
            subject, data, pairs = items[i]
            clean = [(k, v) for k, v in pairs if not k.startswith("Nats-Expected-")]
            assert (m["subject"], m["data"]) == (subject, data)
            assert m["headers"] == [*clean, (STREAM_SOURCE, f"WQO {i + 1} > > {subject} {ident}")]
        wait_for(lambda: nats.state("WQO")["messages"] == 0, BOUND, "the work queue to be drained")
        assert nats.state("WQO")["last_seq"] == n

    def run(j: dict[str, Any]) -> int:
        """Run the job to its end under the watch; returns how many batches landed something."""
        with RemovalWatch(nats, lake, "WQO", "WQS", source) as watch:
            (done,) = run_all([j], spark)
        assert watch.samples > 0 and watch.violations == [], watch.violations[:5]
        return len(data_batches(done))

    assert run(job) >= 300 // 60  # maxMessagesPerTrigger from the origin's options: many batches
    check(300)
    cons = nats.api("CONSUMER.LIST.WQO")["consumers"]
    assert [(c["name"], c["config"]["ack_policy"]) for c in cons] == [
        (jsspark.jobs.origins.consumer_name("WQS", source, [source]), "flow_control")]

    more = origin_items("WQO", "wq", 100, offset=300)
    items += more
    publish_origin(nats, raw, "WQO", more)
    run(job)  # same checkpoint
    check(400)

    more = origin_items("WQO", "wq", 50, offset=400)
    items += more
    publish_origin(nats, raw, "WQO", more)
    run({**job, "checkpoint": str(tmp_path / "fresh")})  # a fresh checkpoint: the durable and the mark decide
    check(450)


def test_the_landing_sink_acks_the_origin_before_spark_commits_the_batch(
    spark: Any, server: NatsServer, nats: SyncNats, raw: RawNats, tmp_path: Path
) -> None:
    """Spark commits a batch to its source only when it plans the next one: with a processing
    time trigger, at the next multiple of the interval (``ProcessingTimeExecutor.nextBatchTime``).
    The job's landing sink acks the origin right after its Delta commit (``spill.mark_landed``),
    so a consumer stalled at ``max_ack_pending`` resumes before then. Checked on a data batch
    that ended well before its next trigger time (the first nearly always does)."""
    nats.add_stream(name="WQA", subjects=["wqa.>"], storage="file", retention="workqueue")
    publish_origin(nats, raw, "WQA", origin_items("WQA", "wqa", 300))
    source = {"name": "WQA"}
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    interval_ms = 8_000
    lake.add_stream(name="WQB", subjects=["wqb.>"], sources=[source])

    def acked_past(seq: int) -> bool:
        return nats.state("WQA")["first_seq"] > seq  # everything up to seq removed

    checked = None
    with RemovalWatch(nats, lake, "WQA", "WQB", source) as watch:
        # the query a job runs, with a classic processing-time trigger (jobs pace their own)
        df = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", "WQA")
              .option("consumer", "wqa_lake").option("maxAckPending", "50").option("spillDir", str(tmp_path / "spill"))
              .option("spillReferences", "true").load())
        q = (df.where(df["spill"].isNotNull()).writeStream.format("jetstream").option("stream", "WQB")
             .option("form", "source").option("origin", json.dumps(source))
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime=f"{interval_ms} milliseconds")
             .start(loc))
        try:
            seen = 0
            deadline = time.monotonic() + JOB_BOUND
            while checked is None:
                assert q.exception() is None, q.exception()
                assert time.monotonic() < deadline, f"no data batch ended 2 s before its next trigger: {q.recentProgress}"
                done = [p for p in q.recentProgress if p["numInputRows"]]
                if len(done) == seen:
                    time.sleep(0.05)  # polling the query's progress, bounded by the deadline above
                    continue
                p, seen = done[seen], seen + 1
                started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
                next_trigger = (int(started) // interval_ms + 1) * interval_ms
                if next_trigger - (started + p["durationMs"]["triggerExecution"]) < 2_000:
                    continue  # too close to its next trigger to tell the two acks apart
                end = json.loads(p["sources"][0]["endOffset"])["seq"]
                while time.time() * 1000 < next_trigger - 300 and not acked_past(end):
                    time.sleep(0.02)  # polling the origin, bounded by the next trigger time
                checked = (end, acked_past(end), time.time() * 1000 < next_trigger)
        finally:
            q.stop()
    assert watch.samples > 0 and watch.violations == [], watch.violations[:5]
    end, acked, before_next = checked
    assert acked and before_next, f"batch ending at origin seq {end} not acked before Spark's next trigger"


def data_batches(job: Any) -> list[int]:
    """Rows of each data batch the job's query has reported progress for."""
    return [p["numInputRows"] for p in job.queries[0].recentProgress if p["numInputRows"]]


def test_an_interval_job_on_a_server_origin_paces_its_batches(spark: Any, server: NatsServer, nats: SyncNats,
                                                               raw: RawNats, tmp_path: Path) -> None:
    """A job with an interval trigger reads a server origin with a continuous trigger and the
    source's pacing (minMessagesPerTrigger = max_ack_pending, maxTriggerDelay = the interval): a
    durable stalled at max_ack_pending gets its next batch at once. Under Spark's 60 s interval
    alone, 100 messages in windows of 40 need three data batches, the last at least 60 s after
    the first one started; here they all land well within that."""
    nats.add_stream(name="WQP", subjects=["wqp.>"], storage="file", retention="workqueue")
    publish_origin(nats, raw, "WQP", origin_items("WQP", "wqp", 100))
    source = {"name": "WQP"}
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    job = {"stream": {"name": "WQPL", "subjects": ["wqpl.>"], "sources": [source]}, "target": {"location": loc},
           "origins": {"*": {"servers": server.url, "options": {"maxAckPending": "40"}}}, "trigger": "60 seconds"}
    runner = Job(load_job(job))
    runner.prepare()
    (plan,) = runner.plan()
    assert (plan.reader_options["minMessagesPerTrigger"], plan.reader_options["maxTriggerDelay"]) == ("40", "60 seconds")
    (later,) = Job(load_job({**job, "trigger": "available_now"})).plan()
    assert "minMessagesPerTrigger" not in later.reader_options  # an AvailableNow run is not paced

    with RemovalWatch(nats, lake, "WQP", "WQPL", source) as watch:
        j = run_job(job, spark)
        try:
            first = None
            deadline = time.monotonic() + JOB_BOUND
            while sourced_seq(lake, "WQPL", source) < 100:
                q = j.queries[0]
                assert q.exception() is None, q.exception()
                assert time.monotonic() < deadline, q.recentProgress
                if first is None and sourced_seq(lake, "WQPL", source) > 0:
                    first = time.monotonic()
                time.sleep(0.05)  # polling the lake, bounded by the deadline above
            landed = time.monotonic()
            # the sink's commit lands a batch before Spark posts that batch's progress
            wait_for(lambda: sum(data_batches(j)) >= 100, 30, "progress of every landed batch",
                     lambda: str(data_batches(j)))
            batches = data_batches(j)
        finally:
            j.stop()
    assert watch.samples > 0 and watch.violations == [], watch.violations[:5]
    assert len(batches) >= 3 and max(batches) <= 40, batches  # windows of max_ack_pending
    assert first is not None and landed - first < 20, f"{landed - first:.1f} s from the first batch to the last"


def test_source_mark_never_moves_back_and_follows_identity(tmp_path: Path) -> None:
    """What the job's restarts lean on, at the engine: a batch wholly at or below an origin's
    mark (a replay, a durable reset back, a fresh checkpoint reading from an ack floor below
    the mark) stores nothing and leaves the mark where it was, so the next batch stores nothing
    twice; a different origin identity starts over at 0."""
    import pyarrow as pa

    from jsspark.engine.ingest import store_sourced

    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="T", subjects=["t.>"], sources=[{"name": "X"}])

    def land(a: int, b: int, ident: str, version: int) -> None:
        rows = pa.table({"seq": list(range(a, b + 1)), "subject": [f"x.{i}" for i in range(a, b + 1)],
                         "data": [b"d"] * (b - a + 1)})
        store_sourced(lake, "T", rows, origin={"name": "X"}, identity=ident, txn=("q", version))

    land(1, 5, "AAAAAAAA", 0)
    land(1, 3, "AAAAAAAA", 1)
    assert sourced_seq(lake, "T", {"name": "X"}, "AAAAAAAA") == 5
    land(4, 6, "AAAAAAAA", 2)
    assert sourced_seq(lake, "T", {"name": "X"}) == 6
    assert sourced_seq(lake, "T", {"name": "X"}, "BBBBBBBB") == 0  # another origin of that name
    land(1, 2, "BBBBBBBB", 3)
    got = [dict((h["name"], h["value"]) for h in r["headers"])[STREAM_SOURCE]
           for r in lake.stream("T").read().sort_by("seq").to_pylist()]
    assert got == [f"X {i} > > x.{i} AAAAAAAA" for i in range(1, 7)] + [f"X {i} > > x.{i} BBBBBBBB" for i in (1, 2)]
    assert lake.stream_info("T").sources[0].seq == 2


def _consumers(nats: SyncNats, stream: str) -> list[tuple[str, list[str]]]:
    """Each consumer's name and filters, as the origin lists them."""
    from jsspark.engine.consumer_state import filters_of

    return [(c["name"], filters_of(c["config"])) for c in nats.api(f"CONSUMER.LIST.{stream}").get("consumers") or []]


def test_a_source_whose_filter_changes_or_goes_keeps_one_durable_as_the_server(
    spark: Any, server: NatsServer, nats: SyncNats, raw: RawNats, tmp_path: Path
) -> None:
    """The server's stream update keeps its one sourcing consumer per origin, its filter updated
    (``createSourcingConsumerHash``), and deletes it when the source goes
    (``tryDeleteSourceConsumer``). A job restarted with the new config does the same to its
    durable: no second durable (which a WorkQueue refuses), nothing landed twice or skipped,
    and no durable left to retain the origin's messages."""
    first, second = ["a.1", "b.1", "a.2"], ["a.3", "b.2"]

    def items(prefix: str, names: list[str]) -> list[tuple[str, bytes, list[tuple[str, str]]]]:
        return [(f"{prefix}.{n}", n.encode(), []) for n in names]

    # the server's own sourcing stream, through the same changes
    nats.add_stream(name="SWQ", subjects=["swq.>"], retention="workqueue")
    nats.add_stream(name="PL", subjects=["pl.>"])
    publish_origin(nats, raw, "SWQ", items("swq", first))
    nats.api("STREAM.CREATE.ST", {"name": "ST", "sources": [{"name": "SWQ"}]})
    wait_for(lambda: nats.state("ST")["messages"] == 3 and nats.state("SWQ")["messages"] == 0, BOUND, "ST to source")
    (server_durable,) = _consumers(nats, "SWQ")
    assert "error" not in nats.api("STREAM.UPDATE.ST", {"name": "ST", "sources": [{"name": "SWQ", "filter_subject": "swq.a.>"}]})
    publish_origin(nats, raw, "SWQ", items("swq", second))  # (the job's come while it is stopped)
    wait_for(lambda: nats.state("ST")["messages"] == 4, BOUND, "ST to source the filtered message")
    assert _consumers(nats, "SWQ") == [(server_durable[0], ["swq.a.>"])]
    wait_for(lambda: nats.state("SWQ")["messages"] == 1, BOUND, "SWQ to keep only swq.b.2 (no longer the source's)")
    assert "error" not in nats.api("STREAM.UPDATE.ST", {"name": "ST", "sources": [{"name": "PL"}]})
    wait_for(lambda: _consumers(nats, "SWQ") == [], BOUND, "the server to delete its sourcing consumer")

    # the job, through the same changes
    nats.add_stream(name="JWQ", subjects=["jwq.>"], retention="workqueue")
    publish_origin(nats, raw, "JWQ", items("jwq", first))
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    job = {"stream": {"name": "JT", "sources": [{"name": "JWQ"}]}, "target": {"location": loc},
           "origins": {"*": {"servers": server.url}}, "trigger": "available_now"}
    run_all([job], spark)
    wait_for(lambda: nats.state("JWQ")["messages"] == 0, BOUND, "the work queue to be drained")
    (durable,) = _consumers(nats, "JWQ")
    publish_origin(nats, raw, "JWQ", items("jwq", second))
    job["stream"]["sources"] = [{"name": "JWQ", "filter_subject": "jwq.a.>"}]
    run_all([job], spark)
    assert [r["subject"] for r in lake_msgs(lake, "JT")] == [f"jwq.{n}" for n in [*first, "a.3"]]
    assert _consumers(nats, "JWQ") == [(durable[0], ["jwq.a.>"])]  # the same durable, filter updated
    wait_for(lambda: nats.state("JWQ")["messages"] == 1, BOUND, "the filtered message to be acked")
    job["stream"]["sources"] = [{"name": "PL"}]
    run_all([job], spark)
    assert _consumers(nats, "JWQ") == []
