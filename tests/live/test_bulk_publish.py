"""The live sink's bulk publishes (``live.bulk_publish``) send what its rows one at a time send,
byte for byte as the server stores them, and keep what a publish means: a PubAck for each, no
more than ``maxInFlight`` unanswered, duplicates counted, the server's refusals raised as its
own errors. Rows the bulk path cannot say exactly go one at a time (``bulk_columns`` says None)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pyarrow as pa
import pytest
from nats.protocol.command import hpub_cmd, pub_cmd

from jsspark.engine import headers as H
from jsspark.errors import APIError
from jsspark.live import bulk_publish, publisher
from jsspark.live.client import PublishFailed
from jsspark.live.options import parse_live_write_options
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats]

SCHEMA = pa.schema([("subject", pa.string()), ("data", pa.binary()), ("headers", H.HEADER_TYPE),
                    ("stream", pa.string()), ("seq", pa.int64()), ("mid", pa.string())])


def rows(prefix: str) -> list[dict[str, Any]]:
    """Every kind of row the sink takes: repeated keys, a row's own Nats-Msg-Id (first replaced in
    place, later ones dropped), CR/LF and nulls in values, null and empty data, no subject (the
    subject option), a chosen id, a blank chosen id (the derived one), no id at all."""
    def hdrs(*pairs: tuple[str, str | None]) -> list[dict[str, str | None]]:
        return [{"name": k, "value": v} for k, v in pairs]

    return [
        {"subject": f"{prefix}.a", "data": b"1", "headers": hdrs(("K", "a"), ("K", "b"), ("X", "1"), ("K", "c"))},
        {"subject": f"{prefix}.b", "data": b"2", "headers": hdrs(("Nats-Msg-Id", "own"), ("A", "1"),
                                                                ("Nats-Msg-Id", "own2")), "stream": "O", "seq": 2},
        {"subject": f"{prefix}.c", "data": None, "headers": hdrs(("B", "x\r\ny"), ("E", None)), "stream": "O", "seq": 3},
        {"subject": None, "data": b"", "headers": None, "stream": "O", "seq": 4},
        {"subject": f"{prefix}.e", "data": b"5" * 300, "headers": [], "mid": "chosen"},
        {"subject": "", "data": b"6", "headers": hdrs(("k", "lower")), "stream": "O", "seq": 6, "mid": "  "},
        {"subject": f"{prefix}.g", "data": b"7", "headers": None},
    ]


def stored(nats: SyncNats, stream: str, seq: int) -> tuple[str, bytes, bytes]:
    m = nats.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})["message"]
    return (m["subject"].split(".", 1)[1], base64.b64decode(m.get("hdrs") or ""),
            base64.b64decode(m.get("data") or ""))


def publish(url: str, batch: pa.RecordBatch, bulk: bool, monkeypatch: pytest.MonkeyPatch, one_at_a_time: bool = False,
            **options: str) -> Any:
    """Publish through the sink, with the bulk path on or off; returns (published, duplicates)
    and checks that the batch went the way asked for (``one_at_a_time``: a batch the bulk path
    leaves to the rows)."""
    taken = {"bulk": 0, "rows": 0}
    columns, rows_ = bulk_publish.publish_columns, publisher._publish_rows

    async def spy_columns(*a: Any, **k: Any) -> Any:
        taken["bulk"] += 1
        return await columns(*a, **k)

    async def spy_rows(*a: Any, **k: Any) -> Any:
        taken["rows"] += 1
        return await rows_(*a, **k)

    monkeypatch.setattr(bulk_publish, "publish_columns", spy_columns)
    monkeypatch.setattr(publisher, "_publish_rows", spy_rows)
    if not bulk:
        monkeypatch.setattr(bulk_publish, "client_class", lambda base: None)
    opts = parse_live_write_options({"servers": url, **options})
    try:
        return asyncio.run(publisher.publish_batches(opts, iter([batch])))
    finally:
        assert taken == ({"bulk": 1, "rows": 0} if bulk and not one_at_a_time else {"bulk": 0, "rows": 1}), taken
        monkeypatch.undo()


def test_bulk_stores_exactly_what_rows_one_at_a_time_store(server: NatsServer, nats: SyncNats,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    nats.add_stream(name="BULK", subjects=["bulk.>"], duplicate_window=60_000_000_000)
    nats.add_stream(name="ONE", subjects=["one.>"], duplicate_window=60_000_000_000)
    for prefix, bulk in (("bulk", True), ("one", False)):
        batch = pa.RecordBatch.from_pylist(rows(prefix), SCHEMA)
        assert publish(server.url, batch, bulk, monkeypatch, subject=f"{prefix}.default", msgIdColumn="mid") == (7, 0)
        # a replay: every row with an id is a duplicate, the two without land again
        assert publish(server.url, batch, bulk, monkeypatch, subject=f"{prefix}.default", msgIdColumn="mid") == (7, 5)
    n = nats.state("ONE")["messages"]
    assert n == nats.state("BULK")["messages"] == 9
    got = [stored(nats, "BULK", s) for s in range(1, n + 1)]
    assert got == [stored(nats, "ONE", s) for s in range(1, n + 1)]
    assert got[1][1] == H.encode([("Nats-Msg-Id", "O:2"), ("A", "1")])  # the row's own id replaced in place
    assert got[2] == ("c", H.encode([("B", "x  y"), ("E", ""), ("Nats-Msg-Id", "O:3")]), b"")
    assert got[3][0] == "default" and got[4][1] == H.encode([("Nats-Msg-Id", "chosen")])
    assert got[6] == ("g", b"", b"7")  # no id, no headers: a plain PUB


def test_the_expected_stream_option_in_bulk(server: NatsServer, nats: SyncNats, monkeypatch: pytest.MonkeyPatch) -> None:
    nats.add_stream(name="EXPB", subjects=["expb.>"])
    batch = pa.RecordBatch.from_pylist(
        [{"subject": "expb.x", "data": b"1", "headers": [{"name": "Nats-Expected-Stream", "value": "old"}]}], SCHEMA)
    assert publish(server.url, batch, True, monkeypatch, stream="EXPB") == (1, 0)
    assert stored(nats, "EXPB", 1)[1] == H.encode([("Nats-Expected-Stream", "EXPB")])
    with pytest.raises(APIError) as info:
        publish(server.url, batch, True, monkeypatch, stream="OTHER")
    assert (info.value.code, info.value.err_code, info.value.description) == (400, 10060, "expected stream does not match")


@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "rows"])
def test_no_more_than_max_in_flight_go_unanswered(server: NatsServer, nats: SyncNats, bulk: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A core subscriber that never answers: exactly ``maxInFlight`` publishes reach it, then the
    first times out, naming its subject."""
    seen: list[bytes] = []

    async def listen() -> Any:
        async def cb(msg: Any) -> None:
            seen.append(msg.data)
        return await nats.nc.subscribe("quiet.*", cb=cb)

    sub = nats.run(listen())
    try:
        batch = pa.RecordBatch.from_pylist([{"subject": f"quiet.{i}", "data": b"%d" % i} for i in range(20)], SCHEMA)
        with pytest.raises(PublishFailed) as info:
            publish(server.url, batch, bulk, monkeypatch, maxInFlight="5", publishTimeout="0.5")
        assert str(info.value) == "no PubAck for a publish to 'quiet.0' within publishTimeout (0.5 s)"
        # one at a time, the slot the timeout frees takes one more row before the loop stops
        sent = 5 if bulk else 6
        wait_for(lambda: len(seen) >= sent, 5, f"the first {sent} publishes", lambda: f"seen {seen}")
        nats.run(nats.nc.flush())
        assert seen == [b"%d" % i for i in range(sent)]
    finally:
        nats.run(sub.unsubscribe())


def test_a_failure_stops_sending_and_is_raised_after_what_was_under_way(server: NatsServer, nats: SyncNats,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows after a refused one in the same window were sent and stored (each got its PubAck);
    nothing after the window is sent; the server's no responders is the error."""
    nats.add_stream(name="STOP", subjects=["stop.>"])
    subjects = ["stop.0", "nowhere.1", "stop.2", "stop.3"] + [f"stop.{i}" for i in range(4, 40)]
    batch = pa.RecordBatch.from_pylist([{"subject": s, "data": b"x"} for s in subjects], SCHEMA)
    with pytest.raises(PublishFailed) as info:
        publish(server.url, batch, True, monkeypatch, maxInFlight="8")
    assert str(info.value) == "no JetStream stream captures subject 'nowhere.1' on the server (no responders)"
    assert 3 <= nats.state("STOP")["messages"] <= 7  # the window's others (4 per write), never all 39


def test_rows_it_cannot_say_exactly_go_one_at_a_time(server: NatsServer, nats: SyncNats,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    nats.add_stream(name="ODD", subjects=["odd.>"])
    opts = parse_live_write_options({"servers": server.url})
    limit = nats.nc.max_payload
    cases = {
        "a subject with a blank": {"subject": "odd a", "data": b"x"},
        "no subject": {"subject": None, "data": b"x"},
        "over max_payload with its headers": {"subject": "odd.big", "data": b"x" * (limit - 5),
                                              "headers": [{"name": "K", "value": "long value"}]},
        "a header name nats-py refuses": {"subject": "odd.h", "data": b"x", "headers": [{"name": "A B", "value": "1"}]},
        "a null header name": {"subject": "odd.h", "data": b"x", "headers": [{"name": None, "value": "1"}]},
    }
    for what, row in cases.items():
        table = pa.Table.from_batches([pa.RecordBatch.from_pylist([row], SCHEMA)])
        assert publisher.bulk_columns(table, opts, limit) is None, what
    fine = pa.Table.from_batches([pa.RecordBatch.from_pylist([{"subject": "odd.ok", "data": b"x"}], SCHEMA)])
    assert publisher.bulk_columns(fine, opts, limit) is not None
    # an id column of a type whose str() Arrow's cast does not give goes one at a time too
    floats = pa.table({"subject": ["odd.f"], "data": [b"x"], "mid": pa.array([1.5])})
    assert publisher.bulk_columns(floats, parse_live_write_options({"servers": server.url, "msgIdColumn": "mid"}),
                                  limit) is None
    ints = floats.set_column(2, "mid", pa.array([7]))
    columns = publisher.bulk_columns(ints, parse_live_write_options({"servers": server.url, "msgIdColumn": "mid"}), limit)
    assert columns is not None and columns[1].to_pylist() == [H.encode([("Nats-Msg-Id", "7")])]
    # and the one-at-a-time path raises its error at that row, after storing the rows before it
    batch = pa.RecordBatch.from_pylist([{"subject": "odd.1", "data": b"1"}, cases["a subject with a blank"]], SCHEMA)
    with pytest.raises(PublishFailed, match="'odd a' is not a valid subject"):
        publish(server.url, batch, True, monkeypatch, one_at_a_time=True, maxInFlight="1")
    assert nats.state("ODD")["messages"] == 1


def test_frames_are_nats_py_own_pub_and_hpub_commands() -> None:
    subjects = pa.array(["a.b", "c", "d.e.f"])
    blocks = pa.array([None, b"NATS/1.0\r\nK: v\r\n\r\n", b"NATS/1.0\r\n\r\n"], pa.binary())
    payloads = pa.array([b"hello", b"", b"x" * 70], pa.binary())
    got = bulk_publish.frame_column(subjects, "_INBOX.abc", 41, blocks, payloads).to_pylist()
    assert got == [pub_cmd("a.b", "_INBOX.abc.41", b"hello"),
                   hpub_cmd("c", "_INBOX.abc.42", b"NATS/1.0\r\nK: v\r\n\r\n", b""),
                   hpub_cmd("d.e.f", "_INBOX.abc.43", b"NATS/1.0\r\n\r\n", b"x" * 70)]


def test_a_batch_larger_than_a_segment_goes_segment_by_segment(server: NatsServer, nats: SyncNats,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames are built ``SEGMENT_BYTES`` at a time (32-bit offsets; a batch of large messages is
    not copied at once): every row still goes once, in order, its reply counted."""
    nats.add_stream(name="SEG", subjects=["seg.>"], duplicate_window=60_000_000_000)
    monkeypatch.setattr(bulk_publish, "SEGMENT_BYTES", 1_000)
    subjects = pa.array([f"seg.{i}" for i in range(40)])
    assert len(bulk_publish.segments(subjects, pa.nulls(40, pa.binary()), pa.array([b"x" * 200] * 40), 30)) >= 10
    batch = pa.RecordBatch.from_pylist([{"subject": f"seg.{i}", "data": b"%03d" % i + b"x" * 200, "stream": "O",
                                         "seq": i + 1} for i in range(40)], SCHEMA)
    assert publish(server.url, batch, True, monkeypatch, maxInFlight="7") == (40, 0)
    assert [stored(nats, "SEG", s)[0] for s in range(1, 41)] == [str(i) for i in range(40)]
    assert stored(nats, "SEG", 40)[1] == H.encode([("Nats-Msg-Id", "O:40")])


def test_a_server_restart_mid_publish_fails_clearly_and_a_retry_lands_each_once(tmp_path: Any) -> None:
    """nats-server killed and restarted while a task publishes in bulk: the frames in flight get
    no reply, so the task fails with the timeout naming a subject (no hang), and the retry Spark
    makes stores every message exactly once (the ids drop what landed before the kill)."""
    import threading

    n = 200_000
    batches = [pa.RecordBatch.from_pydict({"subject": [f"kill.{i % 16}" for i in range(lo, lo + 10_000)],
                                           "data": [b"x" * 100] * 10_000, "stream": ["O"] * 10_000,
                                           "seq": list(range(lo + 1, lo + 10_001))})
               for lo in range(0, n, 10_000)]
    with NatsServer(store_dir=tmp_path) as srv:
        api = SyncNats(srv.url)
        api.add_stream(name="KILL", subjects=["kill.>"], duplicate_window=120_000_000_000)
        api.close()
        opts = parse_live_write_options({"servers": srv.url, "publishTimeout": "2"})

        def restart_mid_way() -> None:
            probe = SyncNats(srv.url)
            try:
                wait_for(lambda: probe.state("KILL")["messages"] > 20_000, 30, "the publish under way")
            finally:
                probe.close()
            srv.restart(kill=True)

        killer = threading.Thread(target=restart_mid_way)
        killer.start()
        try:
            published = asyncio.run(publisher.publish_batches(opts, iter(batches)))
        except PublishFailed as e:
            assert str(e).startswith("no PubAck for a publish to 'kill.") and "within publishTimeout (2 s)" in str(e)
            published = None
        killer.join()
        api = SyncNats(srv.url)
        try:
            before = api.state("KILL")["messages"]
            assert published is None or published == (n, 0)  # a kill after the last reply fails nothing
            assert asyncio.run(publisher.publish_batches(opts, iter(batches))) == (n, before)
            assert api.state("KILL")["messages"] == n
        finally:
            api.close()
