"""Batch reads of a live stream (``spark.read.format("jetstream").option("servers", ...)``).

The oracle is the server itself: for every option set, an ephemeral push consumer with the same
deliver policy, start, filter(s) and ``headers_only`` delivers to a raw socket client (exact
header blocks, origin seq and ns time from the ack reply); the batch read must return exactly
those messages, with the same subject, seq, time, headers and data, up to the stream's last
sequence when the read was loaded. The reader is driven as Spark drives it (``schema()`` at
``load()``, then ``reader().partitions()`` and ``read()``), on a stream with and without
``allow_direct``; one Spark test checks the real ``spark.read`` path.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jsspark.datasource.schema import ARROW_SCHEMA, spark_schema
from jsspark.datasource.source import JetStreamDataSource
from jsspark.engine.api import rfc3339nano
from jsspark.live import snapshot
from jsspark.live.ingestor import Ingestor, parse_ack_reply
from jsspark.live.options import parse_live_read_options
from jsspark.live.spill import read_spill
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for
from tests.rawnats import RawNats

pytestmark = [pytest.mark.nats]

Row = tuple[int, str, int, list[tuple[str, str]] | None, bytes]  # seq, subject, ts_ns, headers, data
N = 600


def _headers(i: int) -> list[tuple[str, str]] | None:
    return [None, [("K", "a"), ("K", "b"), ("X", "x1")], [("Nats-Msg-Id", f"id{i}")], [("Only", "1")]][i % 4]


@pytest.fixture(scope="module")
def snap(server: NatsServer, raw: RawNats) -> dict[str, Any]:
    """Stream SNAP: 600 messages (repeated header keys, empty payloads), the first 10 purged,
    four deleted; the ns time of seq 200."""
    api = SyncNats(server.url)
    try:
        api.add_stream(name="SNAP", subjects=["snap.>"], allow_direct=True)
        for i in range(N):
            raw.publish(f"snap.{'abc'[i % 3]}.{i % 4}", f"m{i}".encode() * (i % 5), _headers(i))
        raw.flush()
        wait_for(lambda: api.state("SNAP")["last_seq"] == N, 20, "600 messages stored")
        assert "error" not in api.api("STREAM.PURGE.SNAP", {"seq": 11})
        for seq in (50, 51, 300, N):
            assert api.api("STREAM.MSG.DELETE.SNAP", {"seq": seq, "no_erase": True}).get("success"), seq
        return {"t200": rfc3339nano(api.get("SNAP", 200)["ts_ns"])}
    finally:
        api.close()


def set_direct(nats: SyncNats, stream: str, on: bool) -> None:
    cfg = nats.api(f"STREAM.INFO.{stream}")["config"]
    cfg["allow_direct"] = on
    resp = nats.api(f"STREAM.UPDATE.{stream}", cfg)
    assert "error" not in resp, resp


def consumer_rows(raw: RawNats, nats: SyncNats, stream: str, cfg: dict[str, Any]) -> list[Row]:
    """What the server's own consumer with ``cfg`` delivers (everything pending at creation)."""
    inbox = f"oracle.{uuid.uuid4().hex}"
    sid = raw.subscribe(inbox)
    resp = nats.api(f"CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": {
        "deliver_subject": inbox, "ack_policy": "none", "mem_storage": True, **cfg}})
    assert "error" not in resp, resp
    msgs = raw.wait_for(resp["num_pending"], sid) if resp["num_pending"] else []
    assert "error" not in nats.api(f"CONSUMER.DELETE.{stream}.{resp['name']}")
    out = []
    for m in msgs:
        _dc, sseq, _dseq, ts, _pending = parse_ack_reply(m.reply)
        out.append((sseq, m.subject, ts, m.pairs or None, m.data))
    return out


def load(url: str, stream: str, **opts: str) -> JetStreamDataSource:
    """``spark.read.format("jetstream")...load()``: Spark calls ``schema()`` here."""
    ds = JetStreamDataSource(options={"servers": url, "stream": stream, **opts})
    ds.schema()
    return ds


def collect(ds: JetStreamDataSource) -> list[Row]:
    """An action on the loaded DataFrame: plan partitions, read each (a pickled reader, as executors)."""
    import pickle

    reader = ds.reader(spark_schema())  # the schema load() got: Spark does not call schema() again
    rows: list[Row] = []
    for part in reader.partitions():
        batches = list(pickle.loads(pickle.dumps(reader)).read(pickle.loads(pickle.dumps(part))))
        for b in batches:
            assert b.schema == ARROW_SCHEMA
        for r in pa.Table.from_batches(batches, ARROW_SCHEMA).to_pylist():
            hdrs = [(h["name"], h["value"]) for h in r["headers"]] if r["headers"] else None
            rows.append((r["seq"], r["subject"], r["ts_ns"], hdrs, r["data"]))
    return rows


CASES: list[tuple[dict[str, str], dict[str, Any]]] = [
    ({}, {}),
    ({"deliverPolicy": "by_start_sequence", "optStartSeq": "123", "filterSubject": "snap.a.>"},
     {"deliver_policy": "by_start_sequence", "opt_start_seq": 123, "filter_subject": "snap.a.>"}),
    ({"deliverPolicy": "by_start_time", "optStartTime": "T200", "filterSubjects": "snap.a.*,snap.c.1"},
     {"deliver_policy": "by_start_time", "opt_start_time": "T200", "filter_subjects": ["snap.a.*", "snap.c.1"]}),
    ({"deliverPolicy": "last", "filterSubject": "snap.b.>"}, {"deliver_policy": "last", "filter_subject": "snap.b.>"}),
    ({"deliverPolicy": "last"}, {"deliver_policy": "last"}),
    # a filter no stored message matches: nothing, as the server's consumer delivers nothing
    ({"deliverPolicy": "last", "filterSubject": "snap.none.>"}, {"deliver_policy": "last", "filter_subject": "snap.none.>"}),
    ({"deliverPolicy": "new"}, {"deliver_policy": "new"}),
    ({"headersOnly": "true", "deliverPolicy": "by_start_sequence", "optStartSeq": "500", "filterSubject": "snap.c.>"},
     {"headers_only": True, "deliver_policy": "by_start_sequence", "opt_start_seq": 500, "filter_subject": "snap.c.>"}),
    # the lake source's spelling (ConsumerConfig JSON names) works too
    ({"deliver_policy": "by_start_sequence", "opt_start_seq": "590", "headers_only": "true"},
     {"deliver_policy": "by_start_sequence", "opt_start_seq": 590, "headers_only": True}),
]
LAST_PER_SUBJECT = ({"deliverPolicy": "last_per_subject", "filterSubjects": "snap.a.*,snap.b.1"},
                    {"deliver_policy": "last_per_subject", "filter_subjects": ["snap.a.*", "snap.b.1"]})


def _resolve(value: Any, snap: dict[str, Any]) -> Any:
    return snap["t200"] if value == "T200" else value


@pytest.mark.parametrize("direct", [True, False], ids=["allow_direct", "no_direct"])
def test_batch_read_equals_a_server_consumer(server: NatsServer, nats: SyncNats, raw: RawNats,
                                             snap: dict[str, Any], direct: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "PARTITION_SEQS", 97)  # several partitions, boundaries inside filters
    set_direct(nats, "SNAP", direct)
    cases = [*CASES, LAST_PER_SUBJECT] if direct else CASES
    for opts, cfg in cases:
        opts = {k: _resolve(v, snap) for k, v in opts.items()}
        cfg = {k: _resolve(v, snap) for k, v in cfg.items()}
        want = consumer_rows(raw, nats, "SNAP", cfg)
        got = collect(load(server.url, "SNAP", **opts))
        assert [r[0] for r in got] == [r[0] for r in want], opts
        assert got == want, opts
    full = collect(load(server.url, "SNAP"))
    assert len(full) == N - 10 - 4
    for seq, subject, ts, hdrs, data in full:  # and what STREAM.MSG.GET says the server holds
        held = nats.get("SNAP", seq)
        assert (subject, ts, hdrs, data) == (held["subject"], held["ts_ns"], held["headers"], held["data"])
    assert any(h and [k for k, _ in h].count("K") == 2 for *_, h, _ in full)  # repeated keys kept
    assert nats.api("STREAM.INFO.SNAP")["state"]["consumer_count"] == 0


@pytest.mark.parametrize("direct", [True, False], ids=["allow_direct", "no_direct"])
def test_batch_read_of_a_header_block_without_the_nats_line(server: NatsServer, nats: SyncNats, raw: RawNats,
                                                           direct: bool) -> None:
    """A stored block without the ``NATS/1.0`` line reads as the ``K: V`` lines it holds, by
    direct get (whose reply appends the server's headers to that block) and by message get."""
    from tests.live.test_consumers import publish_without_preamble

    name = f"NOPRE{int(direct)}"
    nats.add_stream(name=name, subjects=[f"{name.lower()}.>"], allow_direct=direct)
    publish_without_preamble(raw, f"{name.lower()}.a", b"X-Foo: bar\r\n\r\n", b"x")
    raw.flush()
    wait_for(lambda: nats.state(name)["messages"] == 1, 10, "the origin to store it")
    rows = collect(load(server.url, name))
    assert [(seq, hdrs, data) for seq, _, _, hdrs, data in rows] == [(1, [("X-Foo", "bar")], b"x")]


def test_last_per_subject_needs_allow_direct(server: NatsServer, nats: SyncNats, snap: dict[str, Any]) -> None:
    set_direct(nats, "SNAP", False)
    ds = load(server.url, "SNAP", **LAST_PER_SUBJECT[0])
    with pytest.raises(Exception, match=r"last_per_subject.*allow_direct"):
        collect(ds)


def test_snapshot_is_pinned_at_load_and_creates_no_consumer(server: NatsServer, nats: SyncNats,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A WorkQueue stream without allow_direct (a consumer there would be refused or take
    messages away): the read sees what it held at load(), removes nothing, creates nothing."""
    monkeypatch.setattr(snapshot, "PARTITION_SEQS", 40)
    nats.add_stream(name="SNAPWQ", subjects=["wq.>"], retention="workqueue")
    nats.publish_many([(f"wq.{i % 3}", f"d{i}".encode(), {"I": str(i)}) for i in range(150)])
    ds = load(server.url, "SNAPWQ", filterSubjects="wq.0,wq.2")
    nats.publish_many([(f"wq.{i % 3}", b"later", None) for i in range(150, 200)])
    got = collect(ds)
    assert [r[0] for r in got] == [s for s in range(1, 151) if (s - 1) % 3 != 1]
    for seq, subject, ts, hdrs, data in got:
        held = nats.get("SNAPWQ", seq)
        assert (subject, ts, hdrs, data) == (held["subject"], held["ts_ns"], held["headers"], held["data"])
    assert collect(ds) == got  # the same DataFrame read again: the same snapshot
    info = nats.api("STREAM.INFO.SNAPWQ")
    assert info["state"]["messages"] == 200 and info["state"]["consumer_count"] == 0


def test_batch_options_errors(server: NatsServer, nats: SyncNats, snap: dict[str, Any]) -> None:
    # the server's own consumer rules, at load() for a batch read
    with pytest.raises(Exception, match=r"10138.*consumer subject filters cannot overlap"):
        collect(load(server.url, "SNAP", filterSubjects="snap.a.*,snap.>"))
    with pytest.raises(Exception, match=r"10059|stream not found"):
        collect(load(server.url, "NOPE"))
    with pytest.raises(Exception, match="consumerMode user"):
        collect(load(server.url, "SNAP", consumerMode="user", consumer="x", deliverSubject="d.x"))


@pytest.mark.spark
def test_spark_batch_read(spark: Any, server: NatsServer, nats: SyncNats, snap: dict[str, Any]) -> None:
    set_direct(nats, "SNAP", True)
    df = (spark.read.format("jetstream").option("servers", server.url).option("stream", "SNAP")
          .option("filterSubject", "snap.b.*").load())
    assert df.schema == spark.read.format("jetstream").option("servers", server.url).option("stream", "SNAP") \
        .load().schema
    got = df.orderBy("seq").toArrow()
    want = collect(load(server.url, "SNAP", filterSubject="snap.b.*"))
    assert got.column("seq").to_pylist() == [r[0] for r in want] and len(want) > 150
    assert got.column("data").to_pylist() == [r[4] for r in want]
    assert got.column("ts_ns").to_pylist() == [r[2] for r in want]
    assert got.column("headers").to_pylist() == [
        [{"name": k, "value": v} for k, v in r[3]] if r[3] else None for r in want]


def test_streaming_source_delivers_the_same_rows(server: NatsServer, snap: dict[str, Any], tmp_path: Path) -> None:
    """The streaming live source with the same options (here its ordered consumer, headersOnly
    and a filter) delivers exactly the rows the batch read returns."""
    opts = {"deliverPolicy": "by_start_sequence", "optStartSeq": "400", "filterSubject": "snap.a.>",
            "headersOnly": "true"}
    want = collect(load(server.url, "SNAP", **opts))
    assert len(want) > 50
    ing = Ingestor(parse_live_read_options({"servers": server.url, "stream": "SNAP", "spillDir": str(tmp_path),
                                            "consumerMode": "ordered", **opts}))
    ing.start(None)
    try:
        wait_for(lambda: ing.latest(ing.floor, None, None) >= want[-1][0], 20, "the stream to be delivered")
        end = ing.latest(ing.floor, None, None)
        batches = [b for p in ing.plan(ing.floor, end) for b in read_spill(p)]
    finally:
        ing.stop()
    got = [(r["seq"], r["subject"], r["ts_ns"], [(h["name"], h["value"]) for h in r["headers"]] or None, r["data"])
           for r in pa.Table.from_batches(batches).to_pylist()]
    assert got == want


BAD_TIMES = ("yesterday", "2024-13-01T00:00:00Z", "2024-01-01", "2024-01-01T00:00:00", "2024-01-01T25:00:00Z",
             "2024-01-01T00:00:00Zjunk", "2024-1-01T00:00:00Z", "2024-01-32T00:00:00Z", "2024-01-01T00:00:00+0200",
             "2024-01-01T00:61:00Z", "24-01-01T00:00:00Z", "2024-01-01T00:00:00.5x")


@pytest.mark.parametrize("when", BAD_TIMES)
def test_a_bad_opt_start_time_fails_as_the_server_refuses_it(server: NatsServer, nats: SyncNats, when: str) -> None:
    """A batch read creates no consumer, so it checks optStartTime itself: with the server's
    10025 text for a consumer create (Go's time.Parse error), as a streaming read gets it.
    Before, a pydantic validation message; and the class name came twice."""
    nats.add_stream(name="BADT", subjects=["badt.>"])
    theirs = nats.api("CONSUMER.CREATE.BADT", {"stream_name": "BADT", "config": {
        "deliver_policy": "by_start_time", "opt_start_time": when, "ack_policy": "explicit"}})["error"]
    assert theirs["err_code"] == 10025
    from jsspark.datasource.live_source import _bounds

    with pytest.raises(snapshot.SnapshotError) as e:
        _bounds(parse_live_read_options({"servers": server.url, "stream": "BADT", "deliverPolicy": "by_start_time",
                                         "optStartTime": when}))
    assert theirs["description"].replace("'", "\\'") in str(e.value) or theirs["description"] in str(e.value), str(e.value)
    assert "err_code=10025" in str(e.value) and "optStartTime" in str(e.value)
    assert "BadRequestError: BadRequestError" not in str(e.value)


@pytest.mark.parametrize("direct", [True, False], ids=["allow_direct", "no_direct"])
def test_a_batch_read_of_large_messages_holds_a_bounded_slice_at_once(
    server: NatsServer, nats: SyncNats, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task holds its partition in memory: with large messages a partition spans fewer
    sequences (about ``PARTITION_BYTES`` stored), and a record batch about ``OUTPUT_BYTES`` of
    payloads. Before, 100,000 sequences and 10,000 rows: a task of 200 x 4 MiB peaked at 2.3 GB,
    and 300 x 8 MiB failed (TypeError: a binary column over 2 GiB came out chunked)."""
    size, n = 900_000, 30
    monkeypatch.setattr(snapshot, "PARTITION_BYTES", 4 << 20, raising=False)
    monkeypatch.setattr(snapshot, "OUTPUT_BYTES", 2 << 20, raising=False)
    name = f"BIGSNAP{int(direct)}"
    nats.add_stream(name=name, subjects=[f"{name.lower()}.>"], allow_direct=direct)
    sent = [bytes([i]) * size for i in range(n)]
    nats.publish_many([(f"{name.lower()}.{i % 3}", d, {"I": str(i)}) for i, d in enumerate(sent)], window=5)
    reader = load(server.url, name).reader(spark_schema())
    parts = [p.value for p in reader.partitions()]
    assert max(p.hi - p.lo for p in parts) * size <= 4 << 20, [(p.lo, p.hi) for p in parts]
    batches = [b for p in parts for b in snapshot.read_snapshot(p)]
    assert max(sum(len(d) for d in b.column("data").to_pylist()) for b in batches) < (2 << 20) + size
    table = pa.Table.from_batches(batches, ARROW_SCHEMA)
    assert table.column("seq").to_pylist() == list(range(1, n + 1))
    assert table.column("data").to_pylist() == sent
    assert [h[0]["value"] for h in table.column("headers").to_pylist()] == [str(i) for i in range(n)]
