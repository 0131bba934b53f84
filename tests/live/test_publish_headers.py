"""Headers published back to NATS are the rows' headers exactly: repeated keys, their order and
their values survive NATS -> Spark rows -> NATS byte for byte (the stored header blocks compared
via ``STREAM.MSG.GET``), with only ``Nats-Msg-Id`` set when an id is derived."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jsspark.datasource.schema import spark_schema
from jsspark.datasource.source import JetStreamDataSource
from jsspark.engine import headers as H
from jsspark.live import client, publisher
from jsspark.live.options import parse_live_write_options
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for
from tests.rawnats import RawNats

pytestmark = [pytest.mark.nats]

HEADERS: list[list[tuple[str, str]] | None] = [
    [("K", "a"), ("K", "b"), ("X", "1"), ("K", "c")],
    [("Nats-Msg-Id", "orig-{i}"), ("A", "1"), ("Nats-Msg-Id", "orig-{i}b")],
    [("B", "trailing "), ("Empty", ""), ("B", "x: y")],
    None,
    [("k", "lower"), ("K", "upper")],
]


@pytest.fixture(scope="module")
def origin(server: NatsServer) -> list[tuple[int, bytes]]:
    """Stream HDR_IN holding 50 messages published with raw header blocks; (seq, raw block)."""
    api, raw = SyncNats(server.url), RawNats(server.url)
    try:
        api.add_stream(name="HDR_IN", subjects=["hin.>"], allow_direct=True)
        for i in range(50):
            hdrs = HEADERS[i % len(HEADERS)]
            raw.publish(f"hin.{i % 3}", f"d{i}".encode(), [(k, v.format(i=i)) for k, v in hdrs] if hdrs else None)
        raw.flush()
        wait_for(lambda: api.state("HDR_IN")["messages"] == 50, 20, "50 messages stored")
        return [(s, stored_block(api, "HDR_IN", s)) for s in range(1, 51)]
    finally:
        raw.close()
        api.close()


def stored_block(nats: SyncNats, stream: str, seq: int) -> bytes:
    m = nats.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})["message"]
    return base64.b64decode(m["hdrs"]) if m.get("hdrs") else b""


def read_origin(url: str) -> list[pa.RecordBatch]:
    """The origin's rows as the jetstream source gives them (a batch read)."""
    ds = JetStreamDataSource(options={"servers": url, "stream": "HDR_IN"})
    ds.schema()
    reader = ds.reader(spark_schema())
    return [b for p in reader.partitions() for b in reader.read(p)]


def retarget(batches: list[pa.RecordBatch], prefix: str, keep_origin: bool) -> Iterator[pa.RecordBatch]:
    for b in batches:
        t = pa.Table.from_batches([b])
        t = t.set_column(t.column_names.index("subject"), "subject",
                         pc.replace_substring(t.column("subject"), "hin.", prefix))
        cols = ["subject", "data", "headers", *(["stream", "seq"] if keep_origin else [])]
        yield from t.select(cols).to_batches()


def publish(url: str, batches: Iterator[pa.RecordBatch]) -> tuple[int, int]:
    return asyncio.run(publisher.publish_batches(parse_live_write_options({"servers": url}), batches))


def test_repeated_header_keys_round_trip_byte_for_byte(server: NatsServer, nats: SyncNats,
                                                       origin: list[tuple[int, bytes]]) -> None:
    assert origin[0][1] == H.encode(HEADERS[0])  # the origin holds the repeats as sent
    rows = read_origin(server.url)
    nats.add_stream(name="HDR_OUT", subjects=["hout.>"])
    assert publish(server.url, retarget(rows, "hout.", keep_origin=False)) == (50, 0)
    for seq, block in origin:
        assert stored_block(nats, "HDR_OUT", seq) == block, seq

    # with an id derived from origin stream and seq: the same block, Nats-Msg-Id set (replacing
    # the row's own, where it had one, at its place), and a replay lands nothing twice
    nats.add_stream(name="HDR_ID", subjects=["hid.>"], duplicate_window=60_000_000_000)
    assert publish(server.url, retarget(rows, "hid.", keep_origin=True)) == (50, 0)
    assert publish(server.url, retarget(rows, "hid.", keep_origin=True)) == (50, 50)
    assert nats.state("HDR_ID")["messages"] == 50
    for seq, block in origin:
        pairs = H.decode(block)[0] if block else []
        ids = [i for i, (k, _) in enumerate(pairs) if k == H.MSG_ID]
        if ids:
            pairs = [p for i, p in enumerate(pairs) if i not in ids[1:]]
            pairs[ids[0]] = (H.MSG_ID, f"HDR_IN:{seq}")
        else:
            pairs.append((H.MSG_ID, f"HDR_IN:{seq}"))
        assert stored_block(nats, "HDR_ID", seq) == H.encode(pairs), seq


def test_an_empty_msg_id_value_is_no_id(server: NatsServer, nats: SyncNats) -> None:
    """The server takes an empty ``Nats-Msg-Id`` for none (``getMsgId``: ``msgId != _EMPTY_``), so
    an empty (or blank) ``msgIdColumn`` value falls back to ``<stream>:<seq>`` as a null does and
    a replay is dropped; a row with neither goes without the header, not with an empty one."""
    nats.add_stream(name="MID", subjects=["mid.>"], duplicate_window=60_000_000_000)
    schema = pa.schema([("subject", pa.string()), ("data", pa.binary()), ("stream", pa.string()),
                        ("seq", pa.int64()), ("mid", pa.string())])
    rows = [("", "O", 1), (None, "O", 2), ("  ", "O", 3), ("own", "O", 4), ("", None, None)]
    batch = pa.RecordBatch.from_pylist(
        [{"subject": "mid.x", "data": b"%d" % i, "stream": st, "seq": sq, "mid": m} for i, (m, st, sq) in enumerate(rows)],
        schema)
    opts = parse_live_write_options({"servers": server.url, "msgIdColumn": "mid"})
    assert asyncio.run(publisher.publish_batches(opts, iter([batch]))) == (5, 0)
    assert asyncio.run(publisher.publish_batches(opts, iter([batch]))) == (5, 4)  # the id-less row lands again
    assert nats.state("MID")["messages"] == 6
    ids = ["O:1", "O:2", "O:3", "own"]
    assert [stored_block(nats, "MID", s) for s in range(1, 7)] == [
        *(H.encode([(H.MSG_ID, i)]) for i in ids), b"", b""]


def test_map_headers_and_string_data_publish_as_in_the_lake_sink(server: NatsServer, nats: SyncNats) -> None:
    """The lake sink takes ``map<string,string>`` headers and string data; so does this one
    (a map failed with a TypeError), and a struct's fields are read by name."""
    nats.add_stream(name="SHAPES", subjects=["shapes.>"])
    opts = parse_live_write_options({"servers": server.url})
    entry = pa.struct([("value", pa.string()), ("name", pa.string())])
    batches = [
        pa.RecordBatch.from_pylist([{"subject": "shapes.m", "data": "text", "headers": [("K", "v"), ("E", "")]}],
                                   pa.schema([("subject", pa.string()), ("data", pa.string()),
                                              ("headers", pa.map_(pa.string(), pa.string()))])),
        pa.RecordBatch.from_pylist([{"subject": "shapes.s", "data": b"x", "headers": [{"value": "v", "name": "K"}]}],
                                   pa.schema([("subject", pa.string()), ("data", pa.binary()), ("headers", pa.list_(entry))])),
    ]
    assert asyncio.run(publisher.publish_batches(opts, iter(batches))) == (2, 0)
    assert [stored_block(nats, "SHAPES", s) for s in (1, 2)] == [H.encode([("K", "v"), ("E", "")]), H.encode([("K", "v")])]
    assert nats.api("STREAM.MSG.GET.SHAPES", {"seq": 1})["message"]["data"] == base64.b64encode(b"text").decode()


def test_a_sliced_batch_publishes_each_rows_own_map_headers(server: NatsServer, nats: SyncNats) -> None:
    """A batch cut from a larger one (``slice``): each message carries its own row's headers, as
    nats-py publishing the rows stores them (a map column's entries are read from the slice's
    offset; the first rows' headers of the whole batch went out)."""
    nats.add_stream(name="SLICED", subjects=["sliced.>"])
    rows = [{"subject": f"sliced.{c}", "data": c.encode(), "headers": [("K", c)]} for c in "abcd"]
    batch = pa.RecordBatch.from_pylist(rows, pa.schema([("subject", pa.string()), ("data", pa.binary()),
                                                        ("headers", pa.map_(pa.string(), pa.string()))]))
    opts = parse_live_write_options({"servers": server.url})
    assert asyncio.run(publisher.publish_batches(opts, iter([batch.slice(2, 2)]))) == (2, 0)

    async def nats_py() -> None:
        js = nats.nc.jetstream()
        for row in rows[2:]:
            await js.publish(row["subject"], row["data"], headers=dict(row["headers"]))

    nats.run(nats_py())
    stored = [stored_block(nats, "SLICED", s) for s in range(1, 5)]
    assert stored[:2] == stored[2:] == [H.encode([("K", "c")]), H.encode([("K", "d")])]


def test_without_the_hook_repeated_keys_fail_clearly(server: NatsServer, nats: SyncNats,
                                                     origin: list[tuple[int, bytes]],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """If nats-py's publish internals change (the hook's guard fails), rows whose headers a dict
    can carry still publish; a repeated key fails naming the problem instead of losing values."""
    monkeypatch.setattr(client, "hook_problem", lambda: "nats-py 9.9 changed Client._send_publish")
    nats.add_stream(name="HDR_NOHOOK", subjects=["hnh.>"])
    single = pa.table({"subject": ["hnh.1"], "data": [b"x"],
                       "headers": pa.array([[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]],
                                           H.HEADER_TYPE)})
    assert publish(server.url, iter(single.to_batches())) == (1, 0)
    assert stored_block(nats, "HDR_NOHOOK", 1) == H.encode([("A", "1"), ("B", "2")])
    repeated = single.set_column(2, "headers", pa.array([[{"name": "K", "value": "1"}, {"name": "K", "value": "2"}]],
                                                        H.HEADER_TYPE))
    with pytest.raises(RuntimeError, match=r"repeated header key 'K'.*nats-py 9\.9 changed Client\._send_publish"):
        publish(server.url, iter(repeated.to_batches()))
    assert nats.state("HDR_NOHOOK")["messages"] == 1
