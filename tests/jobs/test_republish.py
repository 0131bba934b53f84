"""The republish job (``jsspark.jobs.republish``) end to end: a lake stream read by Spark,
republished to a second nats-server and compared with what a real server republishes for the
same messages; replays at most once (core NATS), deduplicated (idempotent, into a server
stream) and exactly once (into lake streams); the server's errors at start."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import jsspark
from jsspark.config import RePublish
from jsspark.datasource.options import OptionError
from jsspark.engine import headers as H
from jsspark.errors import APIError
from jsspark.jobs.republish import (
    MARKER_DIR,
    LakeDestination,
    RepublishJob,
    check_republish,
    parse_destination,
    publish_to_lake,
    start_republish,
)
from jsspark.nats_server import NatsServer, free_port
from tests.engine.test_republish import assert_same_republish, on_server
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for
from tests.rawnats import RawNats

pytestmark = [pytest.mark.nats, pytest.mark.spark]
_names = itertools.count()
AVAILABLE_NOW = {"availableNow": True}


@pytest.fixture(scope="module")
def second_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """Where the jobs publish: kept apart from the server whose own republish is the reference."""
    with NatsServer(store_dir=tmp_path_factory.mktemp("republish-dest")) as srv:
        yield srv


@pytest.fixture
def reference(nats_server: NatsServer) -> Iterator[tuple[SyncNats, RawNats, list[str]]]:
    api, raw = SyncNats(nats_server.url), RawNats(nats_server.url)
    created: list[str] = []
    try:
        yield api, raw, created
    finally:
        for name in created:
            api.api(f"STREAM.DELETE.{name}")
        raw.close()
        api.close()


@pytest.fixture
def dest(second_server: NatsServer) -> Iterator[RawNats]:
    raw = RawNats(second_server.url)
    try:
        yield raw
    finally:
        raw.close()


def run(spark: Any, **kw: Any) -> Any:
    """One availableNow run of the job; returns its foreachBatch function (counters in .stats)."""
    q = start_republish(spark, trigger=AVAILABLE_NOW, **kw)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    return q._jsspark_republish


def forget_last_commit(checkpoint: Path) -> int:
    """Make Spark replay the last batch on the next start, as after a crash between the
    batch's side effects and its commit-log entry; returns that batch id."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def lake_with(tmp_path: Path, cfg: dict[str, Any], msgs: list[tuple[str, bytes, Any]]) -> Any:
    lake = jsspark.connect(tmp_path / "lake")
    lake.add_stream(cfg)
    publish(lake, cfg["name"], msgs)
    return lake


def publish(lake: Any, name: str, msgs: list[tuple[str, bytes, Any]]) -> None:
    lake.publish_batch(name, pa.table({"subject": [m[0] for m in msgs], "data": [m[1] for m in msgs],
                                       "headers": H.to_arrow([m[2] for m in msgs])}))


def stored(lake: Any, name: str) -> pa.Table:
    return lake.stream(name).read(columns=["seq", "ts_ns", "subject", "headers", "data"]).sort_by("seq")


def as_rows(msgs: list[Any]) -> list[dict[str, Any]]:
    """Received raw messages in ``OUTPUT_SCHEMA`` row form (the lake side of the comparison)."""
    out = []
    for m in msgs:
        out.append({"seq": int(m.header("Nats-Sequence")), "subject": m.subject, "data": m.data,
                    "headers": [{"name": k, "value": v} for k, v in m.pairs]})
    return out


def scenario(prefix: str, headers_only: bool) -> tuple[dict[str, Any], list[tuple[str, bytes, Any]]]:
    cfg = {"name": prefix.upper(), "subjects": [f"{prefix}.in.>", f"{prefix}.other.>"],
           "republish": {"src": f"{prefix}.in.*", "dest": f"{prefix}.out.$1", "headers_only": headers_only}}
    msgs = []
    for i in range(14):
        subject = f"{prefix}.other.x" if i % 5 == 4 else f"{prefix}.in.{'abc'[i % 3]}"
        pairs = [("K", f"v{i}"), ("K", "again"), ("Nats-Msg-Id", f"id-{i}")] if i % 4 == 0 else None
        msgs.append((subject, f"payload-{i}".encode() * (i % 3), pairs))
    return cfg, msgs


@pytest.mark.parametrize("headers_only", [False, True], ids=["body", "headers_only"])
def test_job_republishes_what_a_server_republishes(
    spark: Any, reference: Any, dest: RawNats, second_server: NatsServer, tmp_path: Path, headers_only: bool
) -> None:
    api, raw, created = reference
    prefix = f"rpj{next(_names)}"
    cfg, msgs = scenario(prefix, headers_only)
    theirs = on_server(api, raw, created, cfg, msgs, f"{prefix}.in.z")
    lake = lake_with(tmp_path, cfg, msgs)
    sid = dest.subscribe(f"{prefix}.>")
    job = run(spark, location=lake.location, stream=cfg["name"], republish=None,
              destination={"servers": second_server.url}, checkpoint=str(tmp_path / "ckpt"),
              max_messages_per_trigger=4)  # several batches: Nats-Last-Sequence carried across them
    dest.flush()
    mine = dest.received(sid)
    expected = sum(".in." in subject for subject, _, _ in msgs)
    assert job.stats["batches"] >= 3 and job.stats["sent"] == len(mine) == len(theirs) == expected
    assert all(H.encode(m.pairs) == m.header_block for m in mine)
    # the job's messages, as received, against the server's own republish: subjects, bodies and
    # header blocks byte for byte, with each side's Nats-Time-Stamp its own store time
    assert_same_republish(api, cfg["name"], stored(lake, cfg["name"]), as_rows(mine), theirs)


def test_at_most_once_a_replayed_batch_is_not_sent_again(
    spark: Any, dest: RawNats, second_server: NatsServer, tmp_path: Path
) -> None:
    prefix = f"rpa{next(_names)}"
    cfg = {"name": prefix.upper(), "subjects": [f"{prefix}.in.>"],
           "republish": {"src": f"{prefix}.in.>", "dest": f"{prefix}.out.>"}}
    subjects = [f"{prefix}.in.{i % 3}" for i in range(10)]
    lake = lake_with(tmp_path, cfg, [(s, str(i).encode(), None) for i, s in enumerate(subjects)])
    sid = dest.subscribe(f"{prefix}.out.>")
    ckpt = tmp_path / "ckpt"
    kw = {"location": lake.location, "stream": cfg["name"], "republish": None,
          "destination": {"servers": second_server.url}, "checkpoint": str(ckpt), "max_messages_per_trigger": 4}
    run(spark, **kw)
    dest.flush()
    assert len(dest.received(sid)) == 10 and (ckpt / MARKER_DIR / "started").exists()
    replayed = forget_last_commit(ckpt)
    more = [f"{prefix}.in.{i % 3}" for i in range(10, 13)]
    publish(lake, cfg["name"], [(s, str(i).encode(), None) for i, s in enumerate(more, 10)])
    job = run(spark, **kw)  # Spark replays the batch, then reads the new messages with a fresh carry
    dest.flush()
    got = dest.received(sid)
    seqs = [int(m.header("Nats-Sequence")) for m in got]
    assert seqs == list(range(1, 14)), f"batch {replayed} replayed: {seqs}"
    assert job.stats["skipped"] == 1 and job.stats["sent"] == 3
    everything = subjects + more
    want = [max([j for j in range(1, i) if everything[j - 1] == everything[i - 1]], default=0) for i in range(1, 14)]
    assert [int(m.header("Nats-Last-Sequence")) for m in got] == want  # the new run looked below its first batch


def test_an_unreachable_server_fails_the_batch_before_it_counts_as_started(
    dest: RawNats, second_server: NatsServer, tmp_path: Path
) -> None:
    lake = lake_with(tmp_path, {"name": "U", "subjects": ["u.>"], "republish": {"src": "u.>", "dest": "uo.>"}},
                     [("u.a", b"1", None), ("u.b", b"2", None)])
    sid = dest.subscribe("uo.>")
    rows = stored(lake, "U")

    def job(url: str) -> RepublishJob:
        d = parse_destination({"servers": url, "connectTimeout": "1", "publishTimeout": "2"},
                              origin_location=lake.location, origin_stream="U")
        return RepublishJob(lake.location, "U", check_republish(lake.stream_info("U").config), d, str(tmp_path / "c"))

    with pytest.raises(RuntimeError, match="no NATS server reachable"):  # within publishTimeout, not forever
        job(f"nats://127.0.0.1:{free_port()}").process(rows, 0)
    ok = job(second_server.url)
    assert not ok.started.started(0)  # the failed batch was never started: a restart sends it
    ok.process(rows, 0)
    dest.flush()
    assert [m.subject for m in dest.received(sid)] == ["uo.a", "uo.b"] and ok.started.started(0)


def test_a_message_over_the_destinations_max_payload_fails_the_batch_before_it_counts_as_started(
    reference: tuple[SyncNats, RawNats, list[str]], dest: RawNats, second_server: NatsServer, tmp_path: Path
) -> None:
    """A stored message just under 1 MiB is, with the republish headers, over the default
    max_payload. A server's own republish sends it all the same (an internal publish); a client
    cannot, so the job fails the batch naming the subject, but before it counts as started:
    before, the messages ahead of it went out, the batch was recorded, and the restart skipped
    it, so the ones after it were lost. A destination with a larger max_payload takes it all."""
    big = (1 << 20) - 20
    msgs: list[tuple[str, bytes, Any]] = [("mp.in.0", b"a", None), ("mp.in.1", b"x" * big, None), ("mp.in.2", b"c", None)]
    cfg = {"name": "MP", "subjects": ["mp.in.>"], "republish": {"src": "mp.in.>", "dest": "mp.out.>"}}
    api, raw, created = reference
    got = on_server(api, raw, created, {**cfg, "name": "MPSRV"}, msgs, "mp.in.end")
    assert [(m.subject, len(m.data)) for m in got] == [("mp.out.0", 1), ("mp.out.1", big), ("mp.out.2", 1)]
    api.api("STREAM.DELETE.MPSRV")
    created.remove("MPSRV")
    lake = lake_with(tmp_path, cfg, msgs)
    rows = stored(lake, "MP")

    def job(url: str) -> RepublishJob:
        d = parse_destination({"servers": url}, origin_location=lake.location, origin_stream="MP")
        return RepublishJob(lake.location, "MP", check_republish(lake.stream_info("MP").config), d, str(tmp_path / "c"))

    sid = dest.subscribe("mp.out.>")
    failing = job(second_server.url)
    with pytest.raises(RuntimeError, match=r"'mp\.out\.1' of 1048\d+ bytes .* exceeds the server's max_payload"):
        failing.process(rows, 0)
    dest.flush()
    assert not failing.started.started(0) and dest.received(sid) == []  # a restart sends the batch again
    conf = tmp_path / "big.conf"
    conf.write_text("max_payload: 2097152\n")
    with NatsServer(store_dir=tmp_path / "big", extra_args=["-c", str(conf)]) as larger, closing(RawNats(larger.url)) as r:
        sid = r.subscribe("mp.out.>")
        job(larger.url).process(rows, 0)
        assert [(m.subject, len(m.data)) for m in r.wait_for(3, sid)] == [("mp.out.0", 1), ("mp.out.1", big),
                                                                           ("mp.out.2", 1)]


def test_destination_timeouts_and_a_publish_without_ack_name_the_subject(dest: RawNats, second_server: NatsServer,
                                                                          tmp_path: Path) -> None:
    """A PubAck that does not come within ``publishTimeout`` fails the batch naming the subject
    (nats-py's timeout names none); the timeout itself must be seconds above 0."""
    import asyncio

    from jsspark.engine.republish import OUTPUT_SCHEMA
    from jsspark.jobs.republish import publish_to_server
    from jsspark.live.client import PublishFailed

    for bad in ("soon", "0", "-2", "nan"):
        with pytest.raises(OptionError) as info:
            parse_destination({"servers": second_server.url, "publishTimeout": bad}, origin_location=str(tmp_path),
                              origin_stream="U")
        assert str(info.value) == f"republish destination: publishTimeout must be seconds or an interval above 0 ('30', '30s', '2 minutes'), got {bad!r}"
    d = parse_destination({"servers": second_server.url, "publishTimeout": "0.3"}, origin_location=str(tmp_path),
                          origin_stream="U")
    dest.subscribe("silent.out")  # a core subscriber: the publish has a responder that never answers
    dest.flush()
    rows = pa.Table.from_pylist([{"seq": 1, "subject": "silent.out", "headers": None, "data": b"x"}], OUTPUT_SCHEMA)
    with pytest.raises(PublishFailed) as failed:
        asyncio.run(publish_to_server(d, rows, stream="U", acked=True))
    assert str(failed.value) == "no PubAck for a publish to 'silent.out' within publishTimeout (0.3 s)"


def test_a_batch_holds_at_most_64_mib_of_large_messages(spark: Any, tmp_path: Path) -> None:
    """Each batch is collected on the driver, and Spark's ``toArrow`` makes one Arrow batch of up
    to 10,000 rows: 100,000 messages a batch whatever their size failed 300 x 4 MiB with the
    JVM's ``OutOfDirectMemoryError``, on every restart. ``maxBytesPerTrigger`` (64 MiB of stored
    messages, at least one) bounds it: two messages of 33 MiB go in two batches."""
    size = 33 << 20
    cfg = {"name": "RBIG", "subjects": ["rbig.in.>"], "republish": {"src": "rbig.in.>", "dest": "rbig.out.>"}}
    lake = lake_with(tmp_path, cfg, [("rbig.in.a", b"a" * size, None), ("rbig.in.b", b"b" * size, None)])
    lake.add_stream({"name": "RBIG_OUT", "subjects": ["rbig.out.>"]})
    job = run(spark, location=lake.location, stream="RBIG", republish=None, checkpoint=str(tmp_path / "ckpt"),
              destination={"location": lake.location, "stream": "RBIG_OUT"})
    assert job.stats["batches"] == 2 and job.stats["sent"] == 2
    out = stored(lake, "RBIG_OUT")
    assert out.column("subject").to_pylist() == ["rbig.out.a", "rbig.out.b"]
    assert [len(d) for d in out.column("data").to_pylist()] == [size, size]


def test_idempotent_into_a_server_stream_stores_each_message_once(
    spark: Any, second_server: NatsServer, tmp_path: Path
) -> None:
    prefix = f"rpi{next(_names)}"
    cfg = {"name": prefix.upper(), "subjects": [f"{prefix}.in.>"],
           "republish": {"src": f"{prefix}.in.>", "dest": f"{prefix}.out.>"}}
    msgs = [(f"{prefix}.in.{i % 2}", str(i).encode(), [("Nats-Msg-Id", f"orig-{i}")] if i == 3 else None)
            for i in range(9)]
    lake = lake_with(tmp_path, cfg, msgs)
    api = SyncNats(second_server.url)
    try:
        api.add_stream(name=f"{prefix.upper()}_CAP", subjects=[f"{prefix}.out.>"], duplicate_window=120_000_000_000)
        ckpt = tmp_path / "ckpt"
        kw = {"location": lake.location, "stream": cfg["name"], "republish": None, "mode": "idempotent",
              "destination": {"servers": second_server.url, "maxInFlight": "3"}, "checkpoint": str(ckpt),
              "max_messages_per_trigger": 4}
        run(spark, **kw)
        forget_last_commit(ckpt)
        job = run(spark, **kw)
        assert job.stats["sent"] == 1 and job.stats["duplicates"] == 1  # the replayed batch: seq 9, dropped
        assert api.state(f"{prefix.upper()}_CAP")["messages"] == 9
        m = api.get(f"{prefix.upper()}_CAP", 4)
        pairs = m["headers"]
        assert pairs[0] == ("Nats-Msg-Id", f"{cfg['name']}:4")  # the message's own id, replaced in place
        assert H.get(pairs, "Nats-Sequence") == "4" and m["subject"] == f"{prefix}.out.1"
        assert H.get(api.get(f"{prefix.upper()}_CAP", 1)["headers"], "Nats-Msg-Id") == f"{cfg['name']}:1"
        q = start_republish(spark, trigger=AVAILABLE_NOW, **{
            **kw, "republish": {"src": f"{prefix}.in.>", "dest": f"{prefix}.nocap.>"},
            "checkpoint": str(tmp_path / "ckpt2")})
        with pytest.raises(Exception, match="no JetStream stream captures"):
            q.awaitTermination(180)
    finally:
        api.close()


def test_lake_destination_exactly_once_routed_by_subject_from_a_work_queue(spark: Any, tmp_path: Path) -> None:
    lake = jsspark.connect(tmp_path / "lake")
    lake.add_stream(name="ORIG", subjects=["orig.>"], retention="workqueue",  # republish observes, never acks
                    republish={"src": "orig.*.*", "dest": "copy.$1.$2"})
    lake.add_stream(name="EU", subjects=["copy.eu.*"])
    lake.add_stream(name="US", subjects=["copy.us.*"])
    subjects = [f"orig.{('eu', 'us', 'ap')[i % 3]}.{i % 4}" for i in range(12)]
    publish(lake, "ORIG", [(s, str(i).encode(), [("K", str(i))]) for i, s in enumerate(subjects)])
    ckpt = tmp_path / "ckpt"
    kw = {"location": lake.location, "stream": "ORIG", "republish": None,
          "destination": {"location": lake.location}, "checkpoint": str(ckpt), "max_messages_per_trigger": 5}
    run(spark, **kw)
    forget_last_commit(ckpt)
    run(spark, **kw)  # the replayed batch is skipped by its Delta txn
    eu, us = stored(lake, "EU").to_pylist(), stored(lake, "US").to_pylist()
    assert [r["subject"] for r in eu] == [s.replace("orig", "copy") for s in subjects if ".eu." in s]
    assert [r["subject"] for r in us] == [s.replace("orig", "copy") for s in subjects if ".us." in s]
    first = H.from_arrow(eu[0]["headers"])
    assert first[0] == ("K", "0") and dict(first)["Nats-Stream"] == "ORIG" and dict(first)["Nats-Sequence"] == "1"
    assert dict(H.from_arrow(eu[1]["headers"]))["Nats-Last-Sequence"] == "0"  # orig.eu.3: a new subject
    assert lake.stream_info("ORIG").state.messages == 12  # the work queue keeps them all
    # "ap" went nowhere, as a core publish nobody captures
    assert {n: lake.stream_info(n).state.messages for n in ("EU", "US")} == {"EU": 4, "US": 4}


def test_start_refuses_what_the_server_refuses(spark: Any, tmp_path: Path) -> None:
    lake = jsspark.connect(tmp_path / "lake")
    lake.add_stream(name="S", subjects=["s.>"])
    lake.add_stream(name="R", subjects=["r.>"], republish={"src": "r.>", "dest": "rr.>"})
    kw = {"location": lake.location, "checkpoint": str(tmp_path / "ckpt"),
          "destination": {"servers": "nats://127.0.0.1:1"}}
    with pytest.raises(APIError, match="republish destination forms a cycle"):
        start_republish(spark, stream="S", republish=RePublish(src="s.a.>", dest="s.b.>"), **kw)
    with pytest.raises(APIError, match=r"republish with transform from 's\.\*' to 'x\.\$2' not valid"):
        start_republish(spark, stream="S", republish={"src": "s.*", "dest": "x.$2"}, **kw)
    with pytest.raises(APIError, match="republish destination forms a cycle"):
        start_republish(spark, stream="R", republish=None, **{**kw, "destination": {"location": lake.location,
                                                                                 "stream": "R"}})
    with pytest.raises(OptionError, match="has no republish configured"):
        start_republish(spark, stream="S", republish=None, **kw)
    with pytest.raises(OptionError, match="mode"):
        start_republish(spark, stream="R", republish=None, mode="exactly_once", **kw)
    with pytest.raises(OptionError, match=r"'servers'.*'location'"):
        start_republish(spark, stream="R", republish=None, **{**kw, "destination": {"stream": "X"}})
    assert not spark.streams.active


def test_stored_modes_drop_the_source_header_a_publisher_may_not_send() -> None:
    """Republishing a sourcing stream's messages into a stream: 2.15 refuses
    ``Nats-Stream-Source`` from publishers (10227), so the stored modes drop it."""
    from jsspark.jobs.republish import storable, with_msg_id

    pairs = [("A", "1"), ("Nats-Stream-Source", "O 1 > > o.a"), ("Nats-Stream", "S")]
    assert storable(pairs) == [("A", "1"), ("Nats-Stream", "S")]
    assert with_msg_id(storable(pairs), "S:1")[-1] == ("Nats-Msg-Id", "S:1")


def test_stored_modes_store_kv_updates_whose_expectations_were_checked_at_the_origin(
    second_server: NatsServer, tmp_path: Path
) -> None:
    """KV creates and updates carry ``Nats-Expected-Last-Subject-Sequence`` against their own
    stream. Checked again against a destination with another history they fail there (10071),
    and fail again on every retry of the batch, so the job could never pass them; the stored
    modes drop the check, as a mirror or source does, and store every message."""
    expect = [("Nats-Expected-Last-Subject-Sequence", v) for v in ("0", "0", "1")]
    lake = lake_with(tmp_path, {"name": "KV", "subjects": ["kv.>"], "republish": {"src": "kv.>", "dest": "out.>"}},
                     [(s, b"v", [e]) for s, e in zip(("kv.a", "kv.b", "kv.a"), expect, strict=True)])
    rows = stored(lake, "KV")
    assert rows.num_rows == 3
    rp = check_republish(lake.stream_info("KV").config)
    lake.add_stream(name="LCAP", subjects=["out.>"])
    lake.publish("out.pad", b"own history")
    into_lake = RepublishJob(lake.location, "KV", rp, parse_destination(
        {"location": lake.location}, origin_location=lake.location, origin_stream="KV"), str(tmp_path / "c1"))
    into_lake.process(rows, 0)
    api = SyncNats(second_server.url)
    try:
        api.add_stream(name="KVCAP", subjects=["out.>"], duplicate_window=120_000_000_000)
        api.run(api.nc.request("out.pad", b"own history", timeout=5))
        into_server = RepublishJob(lake.location, "KV", rp, parse_destination(
            {"servers": second_server.url}, origin_location=lake.location, origin_stream="KV"),
            str(tmp_path / "c2"), mode="idempotent")
        into_server.process(rows, 0)
        landed = [api.get("KVCAP", seq)["headers"] for seq in (2, 3, 4)]
        assert api.state("KVCAP")["messages"] == 4
    finally:
        api.api("STREAM.DELETE.KVCAP")
        api.close()
    in_lake = [H.from_arrow(r["headers"]) for r in stored(lake, "LCAP").to_pylist()[1:]]
    assert [dict(p)["Nats-Sequence"] for p in in_lake] == ["1", "2", "3"]
    for pairs in [*in_lake, *landed]:
        assert not [k for k, _ in pairs if k.startswith("Nats-Expected-")], pairs
    assert [dict(p)["Nats-Sequence"] for p in landed] == ["1", "2", "3"]


def test_republish_added_by_an_update_sends_only_what_is_stored_after_it(
    spark: Any, reference: Any, dest: RawNats, second_server: NatsServer, tmp_path: Path
) -> None:
    """A server republishes at store time (``processJetStreamMsg``): a ``republish`` set by a
    stream update sends none of the messages stored before it. The job starts after the last
    sequence the update recorded, and sends what the server sends, byte for byte."""
    api, raw, created = reference
    prefix = f"rpu{next(_names)}"
    cfg, msgs = scenario(prefix, False)
    plain = {k: v for k, v in cfg.items() if k != "republish"}
    before, after = msgs[:6], msgs[6:]
    name = cfg["name"]
    # the server: created without republish, the first messages stored, then the update
    api.add_stream(**plain)
    created.append(name)
    for subject, data, pairs in before:
        raw.publish(subject, data, pairs)
    raw.flush()
    assert "error" not in api.api(f"STREAM.UPDATE.{name}", cfg)
    sid = raw.subscribe(">")
    sentinel_seq = str(len(msgs) + 1)
    for subject, data, pairs in [*after, (f"{prefix}.in.z", b"sentinel", None)]:
        raw.publish(subject, data, pairs)
    got = raw.wait(lambda ms: any(m.header("Nats-Sequence") == sentinel_seq for m in ms), sid,
                   what="the republish of the sentinel")
    theirs = [m for m in got if m.header("Nats-Stream") == name and m.header("Nats-Sequence") != sentinel_seq]
    # the lake: the same steps
    lake = lake_with(tmp_path, plain, before)
    lake.update_stream(cfg)
    publish(lake, name, after)
    sid = dest.subscribe(f"{prefix}.>")
    job = run(spark, location=lake.location, stream=name, republish=None,
              destination={"servers": second_server.url}, checkpoint=str(tmp_path / "ckpt"))
    dest.flush()
    mine = dest.received(sid)
    assert min(int(m.header("Nats-Sequence")) for m in mine) > len(before)
    assert job.stats["sent"] == len(mine) == len(theirs)
    assert_same_republish(api, name, stored(lake, name), as_rows(mine), theirs)


@pytest.mark.parametrize("acked", [True, False], ids=["idempotent", "at_most_once"])
def test_bulk_sends_what_rows_one_at_a_time_send(second_server: NatsServer, tmp_path: Path, acked: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Idempotent mode sends a batch in bulk (``live.bulk_publish``) with exactly the bytes its
    rows one at a time send: without the source and expectation headers, the first
    ``Nats-Msg-Id`` replaced and later ones kept; the server's no responders is its own error.
    At most once stays a row at a time (core publishes in bulk outran the server's ingest queue)."""
    import asyncio

    from jsspark.engine.republish import OUTPUT_SCHEMA
    from jsspark.jobs.republish import publish_to_server
    from jsspark.live import bulk_publish

    def hdrs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
        return [{"name": k, "value": v} for k, v in pairs]

    cells = [hdrs(("Nats-Msg-Id", "a"), ("K", "1"), ("Nats-Msg-Id", "b")),
             hdrs(("Nats-Stream-Source", "S 1 x x"), ("Nats-Expected-Last-Sequence", "4"), ("K", "v")),
             None, hdrs(("Nats-Stream", "U"), ("Nats-Sequence", "4"))]
    api = SyncNats(second_server.url)
    mode = "idem" if acked else "amo"
    try:
        def send(way: str) -> list[dict[str, Any]]:
            """Both batches' stored messages (raw), sent in bulk or a row at a time."""
            name = f"RB_{mode}_{way}".upper()
            prefix = name.lower()
            api.add_stream(name=name, subjects=[f"{prefix}.>"], duplicate_window=60_000_000_000)
            rows = pa.Table.from_pylist([{"seq": i + 1, "subject": f"{prefix}.{i}", "headers": c, "data": b"%d" % i}
                                         for i, c in enumerate(cells)], OUTPUT_SCHEMA)
            taken = {"bulk": 0}
            columns = bulk_publish.publish_columns

            async def spy_columns(*a: Any, **k: Any) -> Any:
                taken["bulk"] += 1
                return await columns(*a, **k)

            monkeypatch.setattr(bulk_publish, "publish_columns", spy_columns)
            if way == "rows":
                monkeypatch.setattr(bulk_publish, "client_class", lambda base: None)
            d = parse_destination({"servers": second_server.url}, origin_location=str(tmp_path), origin_stream="U")
            assert asyncio.run(publish_to_server(d, rows, stream="U", acked=acked)) == (4, 0)
            if acked:  # a replay: the ids drop every one
                assert asyncio.run(publish_to_server(d, rows, stream="U", acked=acked)) == (4, 4)
            monkeypatch.undo()
            assert taken == {"bulk": 2 if acked and way == "bulk" else 0}, taken
            # at most once, the server drops the message whose expectation fails there, as it drops a
            # server's own republish of it
            n = 4 if acked else 3
            # PubAcks say stored; core publishes are stored from the stream's queue after the flush
            wait_for(lambda: api.state(name)["messages"] >= n, 10, f"{n} stored")
            assert api.state(name)["messages"] == n
            return [api.api(f"STREAM.MSG.GET.{name}", {"seq": s})["message"] for s in range(1, n + 1)]

        stored_blocks = {way: send(way) for way in ("bulk", "rows")}
        bulk, one = stored_blocks["bulk"], stored_blocks["rows"]
        assert [(m.get("hdrs"), m.get("data")) for m in bulk] == [(m.get("hdrs"), m.get("data")) for m in one]
        assert sum(bool(m.get("hdrs")) for m in bulk) == (4 if acked else 2)  # the ids, or the stored headers
        assert [m["subject"].split(".", 1)[1] for m in bulk] == [m["subject"].split(".", 1)[1] for m in one]
        if acked:
            d = parse_destination({"servers": second_server.url}, origin_location=str(tmp_path), origin_stream="U")
            nowhere = pa.Table.from_pylist([{"seq": 1, "subject": "nowhere.x", "headers": None, "data": b"x"}],
                                           OUTPUT_SCHEMA)
            with pytest.raises(RuntimeError, match=r"^republish \(idempotent\): no JetStream stream captures "
                                                   r"'nowhere.x' on the destination server"):
                asyncio.run(publish_to_server(d, nowhere, stream="U", acked=True))
    finally:
        api.close()


def test_a_lake_destination_stream_without_subjects_captures_nothing(tmp_path: Path) -> None:
    """A stream with sources and no subjects listens on no subject (its name is not one, as it
    is for a plain stream without subjects), so a republished message on its name lands nowhere."""
    lake = jsspark.connect(tmp_path / "dst")
    lake.add_stream(name="ORIG", subjects=["orig.>"])
    lake.add_stream(name="SRC", sources=[{"name": "ORIG"}])
    lake.add_stream(name="PLAIN")  # subjects: its name
    rows = pa.table({"subject": ["SRC", "PLAIN"], "data": [b"1", b"2"], "headers": H.to_arrow([None, None])})
    for dest in (LakeDestination(str(tmp_path / "dst")), LakeDestination(str(tmp_path / "dst"), "SRC")):
        publish_to_lake(dest, rows, txn=("app", 1), lake=lake)
    assert (lake.stream_info("SRC").state.messages, lake.stream_info("PLAIN").state.messages) == (0, 1)


def test_an_unanswered_flush_at_most_once_fails_naming_the_last_subject(tmp_path: Path) -> None:
    """At most once, a batch small enough for nats-py's buffer is all "sent" before the paused
    server reads any of it; the flush that follows gets no answer. The batch fails within
    publishTimeout saying so, with how many publishes and the last subject, not nats-py's bare
    "nats: flush timeout"."""
    import asyncio

    from jsspark.engine.republish import OUTPUT_SCHEMA
    from jsspark.jobs.republish import publish_to_server
    from jsspark.live.client import PublishFailed
    from tests.paused_server import PausedServer

    timeout = 1.0
    rows = pa.Table.from_pylist([{"seq": i + 1, "subject": f"flush.{i}", "headers": None, "data": b"x" * 10}
                                 for i in range(5)], OUTPUT_SCHEMA)
    with NatsServer(store_dir=tmp_path / "srv") as srv:
        assert srv.proc is not None
        d = parse_destination({"servers": srv.url, "publishTimeout": f"{timeout:g}"},
                              origin_location=str(tmp_path), origin_stream="O")
        with PausedServer(srv.proc.pid, timeout + 30) as stall:
            with pytest.raises(PublishFailed) as info:
                asyncio.run(publish_to_server(d, rows, stream="O", acked=False, on_connected=stall.pause))
            took = stall.failed()
    assert str(info.value) == ("the server answered no flush within publishTimeout (1 s) after 5 publishes, "
                               "the last to 'flush.4': at most once, they may be lost")
    assert took < timeout + 10


@pytest.mark.parametrize("way", ["bulk", "rows", "at_most_once"])
def test_a_stalled_server_fails_the_batch_on_time_and_a_replay_sends_each_once(
        tmp_path: Path, way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The destination nats-server paused (SIGSTOP) once a batch's connection is up, before its
    54 MB: it reads nothing, so nats-py's buffer passes its max pending size and its writes wait
    for a drain that never comes. The batch still fails within publishTimeout, naming a subject:
    idempotent in bulk and a row at a time (where the rows go when bulk cannot say what they
    send), and at most once (core publishes). Once the server resumes, Spark's replay of an
    idempotent batch stores every message exactly once (the ``Nats-Msg-Id`` drops what landed
    before); at most once, the replay is skipped, and no message arrives twice."""
    import asyncio
    import re

    from jsspark.engine.republish import OUTPUT_SCHEMA
    from jsspark.jobs.republish import publish_to_server
    from jsspark.live import bulk_publish
    from jsspark.live.client import PublishFailed
    from tests.paused_server import PausedServer

    n, timeout, acked = 1000, 2.0, way != "at_most_once"
    rows = pa.Table.from_pylist([{"seq": i + 1, "subject": f"stall.{i}", "headers": None, "data": b"x" * 60_000}
                                 for i in range(n)], OUTPUT_SCHEMA)
    if way == "rows":
        monkeypatch.setattr(bulk_publish, "client_class", lambda base: None)
    with NatsServer(store_dir=tmp_path / "srv") as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        api = SyncNats(srv.url)
        api.add_stream(name="STALL", subjects=["stall.>"], duplicate_window=120_000_000_000)
        d = parse_destination({"servers": srv.url, "publishTimeout": f"{timeout:g}"},
                              origin_location=str(tmp_path), origin_stream="O")
        with closing(api), PausedServer(pid, timeout + 30) as stall:  # ``pause`` is ``on_connected``: nothing of the batch sent yet
            assert asyncio.run(publish_to_server(d, rows.slice(0, 100), stream="O", acked=acked)) == (100, 0)
            with pytest.raises(PublishFailed) as info:
                asyncio.run(publish_to_server(d, rows.slice(100), stream="O", acked=acked, on_connected=stall.pause))
            took = stall.failed()
            want = (r"no PubAck for a publish to 'stall\.\d+' within publishTimeout \(2 s\)" if acked else
                    r"the server took no publish within publishTimeout \(2 s\): stalled at the publish to 'stall\.\d+'")
            assert re.fullmatch(want, str(info.value)), info.value
            assert took < timeout + 10
            if acked:
                sent, dups = asyncio.run(publish_to_server(d, rows, stream="O", acked=True))  # the replay
                assert sent == n and dups >= 100
                state = api.state("STALL")
                assert (state["messages"], state["num_subjects"]) == (n, n)
            else:  # what the server read before the pause arrives after it, once
                # core publishes are stored from the stream's ingest queue after the flush's
                # PONG, so some of the first 100 may land only after the resume (CI saw 89)
                wait_for(lambda: api.state("STALL")["messages"] >= 100, 30, "the first 100 stored",
                         lambda: str(api.state("STALL")))
                state = api.state("STALL")
                assert 100 <= state["messages"] == state["num_subjects"] < n


def test_a_checkpoint_at_an_s3a_uri_keeps_the_batch_marks(
    s3: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's republish checkpoint lies under its target (``<location>/_checkpoints``), and
    ``s3a://`` is Hadoop's scheme for S3, with the credentials in the environment on a cluster.
    Its files were read and written through pyarrow's ``FileSystem.from_uri``, which knows no
    ``s3a://``: every batch into a lake failed reading the query id, and every at most once
    batch reading its started mark (``Unrecognized filesystem type in URI``), where a local
    checkpoint keeps both. They go through delta-rs's store, as the lake does."""
    import boto3

    from jsspark.jobs.republish import StartedBatches, query_app_id

    for key, value in s3.items():
        monkeypatch.setenv(key.upper(), value)
    loc, ck = "s3a://lake/rp-s3a/lake", "s3a://lake/rp-s3a/ck"
    lake = jsspark.connect(loc)
    lake.add_stream(name="SRC", subjects=["in.>"], republish={"src": "in.>", "dest": "out.>"})
    lake.add_stream(name="DST", subjects=["out.>"])
    boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"]).put_object(
        Bucket="lake", Key="rp-s3a/ck/metadata", Body=b'{"id": "query-1"}\n'
    )
    assert query_app_id(ck) == "jsspark.republish.query-1"
    job = RepublishJob(loc, "SRC", RePublish(src="in.>", dest="out.>"), LakeDestination(loc, "DST"), ck)
    rows = pa.table(
        {
            "seq": pa.array([1], pa.int64()),
            "ts_ns": pa.array([1], pa.int64()),
            "subject": ["in.a"],
            "headers": H.to_arrow([None]),
            "data": [b"x"],
        }
    )
    job.process(rows, 0)
    job.process(rows, 0)  # Spark's replay of the batch stores nothing
    assert lake.stream_info("DST").state.messages == 1
    assert not StartedBatches(ck).started(0)
    StartedBatches(ck).record(4)
    assert StartedBatches(ck).started(4) and not StartedBatches(ck).started(5)


class _TimingOut:
    """A checkpoint store whose reads fail as an object store's time out (the file is there)."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def open_input_stream(self, path: str) -> Any:
        raise OSError(f"Generic S3 error: Error performing GET {path}: operation timed out")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)


@pytest.mark.parametrize("cause", ["timeout", "unreadable"])
def test_a_checkpoint_file_there_but_unreadable_fails_the_batch_naming_it(
    cause: str, dest: RawNats, second_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a file that is not there means "no mark": a read that fails otherwise (an object
    store's timeout; here also a path that is no file) was taken as none, so a restart sent an at
    most once batch that had started again, and stored a lake batch again under the checkpoint's
    path as app id. Now the batch fails naming the file, before anything is sent or stored."""
    from jsspark.jobs import republish as R

    lake = lake_with(tmp_path, {"name": "M", "subjects": ["m.>"], "republish": {"src": "m.>", "dest": "mo.>"}},
                     [("m.a", b"1", None), ("m.b", b"2", None)])
    lake.add_stream(name="COPY", subjects=["mo.>"])
    rows, rp = stored(lake, "M"), check_republish(lake.stream_info("M").config)
    server = parse_destination({"servers": second_server.url}, origin_location=lake.location, origin_stream="M")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "metadata").write_text('{"id": "query-7"}\n')
    sid = dest.subscribe("mo.>")
    RepublishJob(lake.location, "M", rp, server, str(ck)).process(rows, 0)  # records batch 0 as started
    RepublishJob(lake.location, "M", rp, LakeDestination(lake.location, "COPY"), str(ck)).process(rows, 0)
    dest.flush()
    assert len(dest.received(sid)) == 2 and lake.stream_info("COPY").state.messages == 2

    if cause == "timeout":
        real = R._filesystem
        monkeypatch.setattr(R, "_filesystem", lambda path: (_TimingOut(real(path)[0]), real(path)[1]))
        why = "operation timed out"
    else:  # each file replaced by a directory: there, and no file to read
        for f in (ck / MARKER_DIR / "started", ck / "metadata"):
            f.unlink()
            f.mkdir()
        why = "directory"
    replay = RepublishJob(lake.location, "M", rp, server, str(ck))
    with pytest.raises(R.CheckpointReadError, match=f"{ck / MARKER_DIR / 'started'}: .*{why}"):
        replay(None, 0)  # Spark's replay of batch 0 after a crash
    with pytest.raises(R.CheckpointReadError, match=f"{ck / 'metadata'}: .*{why}"):
        RepublishJob(lake.location, "M", rp, LakeDestination(lake.location, "COPY"), str(ck)).process(rows, 0)
    dest.flush()
    assert len(dest.received(sid)) == 2 and lake.stream_info("COPY").state.messages == 2  # nothing twice
