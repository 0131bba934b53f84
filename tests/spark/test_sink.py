"""``write``/``writeStream`` ``format("jetstream")``: publish semantics, one commit per batch,
exactly once across replays and restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import jsspark
from jsspark.datasource.options import OptionError, WriteOptions, parse_write_options
from jsspark.sink.lake_sink import APP_ID_PREFIX, LakeStreamWriter, collect_task, normalize

pytestmark = pytest.mark.spark


def _lake(tmp_path: Path, *names: str) -> tuple[str, Any]:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    for name in names:
        lake.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    return loc, lake


def _stored(lake: Any, name: str) -> list[tuple[int, str, bytes, Any]]:
    rows = lake.stream(name).read().sort_by("seq").to_pylist()
    return [(r["seq"], r["subject"], r["data"], r["headers"]) for r in rows]


def test_batch_write_is_one_publish(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, "OUT")
    lake.update_stream(name="OUT", subjects=["out.>"], duplicate_window=60)
    df = spark.createDataFrame(
        [
            ("out.a", bytearray(b"1"), [("Nats-Msg-Id", "x")]),
            ("out.b", bytearray(b"2"), None),
            ("out.a", bytearray(b"dup"), [("Nats-Msg-Id", "x")]),
        ],
        "subject string, data binary, headers array<struct<name: string, value: string>>",
    ).coalesce(2)
    version = DeltaTable(lake.stream_uri("OUT")).version()
    df.write.format("jetstream").option("stream", "OUT").mode("append").save(loc)
    assert DeltaTable(lake.stream_uri("OUT")).version() == version + 1
    stored = _stored(lake, "OUT")
    assert [(s, subj, d) for s, subj, d, _ in stored] == [(1, "out.a", b"1"), (2, "out.b", b"2")]
    assert stored[0][3] == [{"name": "Nats-Msg-Id", "value": "x"}]


def test_batch_write_map_headers_string_data_extra_columns(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, "OUT")
    df = spark.createDataFrame(
        [("out.a", "hello", {"K": "v"}, 7)], "subject string, data string, headers map<string,string>, other int"
    )
    df.write.format("jetstream").option("stream", "OUT").mode("append").save(loc)
    assert _stored(lake, "OUT") == [(1, "out.a", b"hello", [{"name": "K", "value": "v"}])]


def test_headers_struct_fields_are_read_by_name() -> None:
    """``struct<value,name>`` (Spark orders a struct's fields as the query built it) keeps each
    header's name and value; a type that is not headers fails naming the column, where it was
    stored as pairs of whatever it held (``struct<k,v>``: every field name became a header)."""
    entry = pa.struct([("value", pa.string()), ("name", pa.string())])
    rows = [[{"value": "json", "name": "Content-Type"}, {"value": "", "name": "K"}], None, [], [{"value": "2", "name": "K"}]]
    for col in (pa.array(rows, pa.list_(entry)), pa.array(rows, pa.large_list(entry))):
        got = normalize(pa.table({"subject": ["out.a"] * 4, "headers": col}).slice(1))["headers"].to_pylist()
        assert got == [None, [], [{"name": "K", "value": "2"}]]
        got = normalize(pa.table({"subject": ["out.a"] * 4, "headers": col}))["headers"].to_pylist()
        assert got[0] == [{"name": "Content-Type", "value": "json"}, {"name": "K", "value": ""}]
    bad = {
        "struct<k: string, v: string>": pa.array([[{"k": "K", "v": "v"}]]),
        "struct<name: string, value: string, extra: string>": pa.array([[{"name": "K", "value": "v", "extra": "x"}]]),
        "string": pa.array(["K: v"]),
        "list<item: string>": pa.array([["K", "v"]]),
    }
    for shown, col in bad.items():
        with pytest.raises(ValueError, match=rf"column 'headers' has type .*{shown}.*headers are array<struct<name: string"):
            normalize(pa.table({"subject": ["out.a"], "headers": col}))


def test_rows_the_sink_cannot_publish_fail_naming_the_column() -> None:
    """Arrow's own errors (an unsupported cast, a negative list length) named no column."""
    with pytest.raises(ValueError, match=r"column 'data' has type int32, which is not binary or string"):
        normalize(pa.table({"subject": ["out.a"], "data": pa.array([1], pa.int32())}))
    with pytest.raises(ValueError, match=r"a row has no subject \(column 'subject' is null in 1 of 2 rows\)"):
        normalize(pa.table({"subject": ["out.a", None], "data": [b"1", b"2"]}))
    got = normalize(pa.table({"subject": ["out.a"], "data": ["text"]}))
    assert got.select(["subject", "data"]).to_pylist() == [{"subject": "out.a", "data": b"text"}]


def test_spark_headers_struct_in_either_field_order(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, "OUT")
    df = spark.sql("SELECT 'out.a' AS subject, binary('x') AS data, "
                   "array(named_struct('value', 'json', 'name', 'Content-Type')) AS headers")
    df.write.format("jetstream").option("stream", "OUT").mode("append").save(loc)
    assert _stored(lake, "OUT") == [(1, "out.a", b"x", [{"name": "Content-Type", "value": "json"}])]
    bad = spark.sql("SELECT 'out.a' AS subject, binary('x') AS data, array(named_struct('k', 'K', 'v', 'v')) AS headers")
    with pytest.raises(Exception, match=r"column 'headers' has type .*struct<k: string.*, v: string.*headers are array<struct"):
        bad.write.format("jetstream").option("stream", "OUT").mode("append").save(loc)
    assert len(_stored(lake, "OUT")) == 1


def test_write_errors(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, "OUT")
    df = spark.createDataFrame([("out.a", b"1")], "subject string, data binary")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("jetstream").option("stream", "OUT").mode("overwrite").save(loc)
    with pytest.raises(Exception, match="does not listen on subject 'elsewhere'"):
        spark.createDataFrame([("elsewhere", b"1")], "subject string, data binary").write.format(
            "jetstream"
        ).option("stream", "OUT").mode("append").save(loc)
    assert _stored(lake, "OUT") == []


def test_write_to_a_missing_stream_fails_when_the_writer_is_made(spark: Any, tmp_path: Path) -> None:
    """As the reader does at load(): before, the tasks ran and the commit failed with a bare
    'stream not found', and a write of no rows to a missing stream succeeded."""
    loc, lake = _lake(tmp_path, "SRC")
    lake.publish("src.a", b"1")
    where = rf"jetstream sink: option stream '{{}}', lake {loc}"
    df = spark.createDataFrame([("out.a", b"1")], "subject string, data binary")
    for frame, stream, error in ((df, "MISSING", "stream not found"), (df.limit(0), "MISSING", "stream not found"),
                                 (df, "a.b", "stream name 'a.b' can not contain '.'")):
        with pytest.raises(Exception, match=rf"(?s){error}.*{where.format(stream)}"):
            frame.write.format("jetstream").option("stream", stream).mode("append").save(loc)
    query = (spark.readStream.format("jetstream").option("stream", "SRC").load(loc).select("subject", "data")
             .writeStream.format("jetstream").option("stream", "MISSING")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start(loc))
    with pytest.raises(Exception, match=rf"(?s)stream not found.*{where.format('MISSING')}"):
        query.awaitTermination(120)
    assert not list((tmp_path / "ck" / "commits").glob("[0-9]*"))  # no batch was committed
    assert lake.stream_info("SRC").state.messages == 1 and len(lake.streams_info()) == 1


def test_rows_no_client_can_send_fail_the_write(spark: Any, tmp_path: Path) -> None:
    """A subject with a space or a header value with CR LF fails the write naming them, and
    nothing is stored; a null data cell is stored as empty data (it read back null in Spark)."""
    loc, lake = _lake(tmp_path, "OUT")
    schema = "subject string, data binary, headers array<struct<name: string, value: string>>"
    for rows, text in (
        ([("out.a", b"1", None), ("out. a", b"2", None)], r"invalid subject 'out. a'"),
        ([("out.a", b"1", None), ("out.a", b"2", [("X", "1\r\nNats-Msg-Id: dup")])], r"the value of header 'X'"),
        ([("out.a", b"1", [("K:x", "v")])], r"invalid header name 'K:x'"),
    ):
        with pytest.raises(Exception, match=text):
            spark.createDataFrame(rows, schema).write.format("jetstream").option("stream", "OUT").mode("append").save(loc)
    assert _stored(lake, "OUT") == []
    spark.createDataFrame([("out.a", None, None)], schema).write.format("jetstream").option(
        "stream", "OUT").mode("append").save(loc)
    assert spark.read.format("jetstream").option("stream", "OUT").load(loc).select("data").collect()[0][0] == b""


def test_replayed_batch_id_is_skipped(tmp_path: Path) -> None:
    """What Spark does after a crash between the sink commit and its commit log."""
    loc, lake = _lake(tmp_path, "OUT")
    writer = LakeStreamWriter(WriteOptions(loc, "OUT", txn_app_id="q1"))
    batch = pa.record_batch({"subject": ["out.a", "out.b"], "data": [b"1", b"2"]})
    inline = collect_task([batch], loc, "t")
    staged = collect_task([batch], loc, "t", inline_limit=0)
    assert inline.ipc is not None and staged.path is not None and Path(staged.path).exists()
    writer.commit([inline, None], 0)
    writer.commit([inline], 0)
    assert [s for s, *_ in _stored(lake, "OUT")] == [1, 2]
    writer.commit([staged], 1)
    assert not Path(staged.path).exists()  # staging cleaned up after the publish
    writer.commit([collect_task([batch], loc, "t", inline_limit=0)], 1)
    assert [s for s, *_ in _stored(lake, "OUT")] == [1, 2, 3, 4]
    assert DeltaTable(lake.stream_uri("OUT")).transaction_version("q1") == 1


def test_streaming_write_exactly_once_across_restarts(spark: Any, tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, "IN", "OUT")
    lake.publish_batch("IN", pa.table({"subject": [f"in.{i}" for i in range(10)], "data": [b"%d" % i for i in range(10)]}))
    ck = tmp_path / "ck"

    def run() -> list[int]:
        q = (
            spark.readStream.format("jetstream").option("stream", "IN").option("maxMessagesPerTrigger", 4).load(loc)
            .selectExpr("regexp_replace(subject, '^in', 'out') AS subject", "data", "headers")
            .writeStream.format("jetstream").option("stream", "OUT")
            .option("checkpointLocation", str(ck)).trigger(availableNow=True).start(loc)
        )
        q.awaitTermination(120)
        if q.exception():
            raise q.exception()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    assert run() == [4, 4, 2]
    query_id = json.loads((ck / "metadata").read_text())["id"]
    out = DeltaTable(lake.stream_uri("OUT"))
    assert out.transaction_version(APP_ID_PREFIX + query_id) == 2
    for f in ("2", ".2.crc"):  # crash after the sink's commit, before Spark's commit log
        (ck / "commits" / f).unlink(missing_ok=True)
    assert run() == [2]  # batch 2 runs again ...
    stored = _stored(lake, "OUT")
    assert [(s, subj, d) for s, subj, d, _ in stored] == [(i + 1, f"out.{i}", b"%d" % i) for i in range(10)]  # ... once
    lake.publish_batch("IN", pa.table({"subject": ["in.10", "in.11"], "data": [b"10", b"11"]}))
    assert run() == [2]
    assert [d for _, _, d, _ in _stored(lake, "OUT")] == [b"%d" % i for i in range(12)]


def _origin_batch(seqs: list[int]) -> pa.RecordBatch:
    """Rows as the live NATS source emits them (its extra columns are ignored by the sink)."""
    return pa.record_batch({
        "stream": ["ORIG"] * len(seqs), "subject": [f"o.{s}" for s in seqs], "seq": seqs,
        "ts_ns": [1_700_000_000_000_000_001 + s for s in seqs],
        "headers": pa.array([[{"name": "K", "value": str(s)}] for s in seqs],
                            pa.list_(pa.field("element", pa.struct([("name", pa.string()), ("value", pa.string())])))),
        "data": [f"d{s}".encode() for s in seqs], "consumer": ["c"] * len(seqs),
    })


def test_form_option_lands_mirror_and_source_once(tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path, "M", "S")
    for form, name in (("mirror", "M"), ("source", "S")):
        writer = LakeStreamWriter(parse_write_options({"path": loc, "stream": name, "form": form, "txnAppId": "q"}))
        writer.commit([collect_task([_origin_batch([4, 7])], loc, "t", form=form)], 0)
        writer.commit([collect_task([_origin_batch([4, 7])], loc, "t", inline_limit=0, form=form)], 0)  # replay
    mirrored = lake.stream("M").read().sort_by("seq").to_pylist()
    assert [(r["seq"], r["ts_ns"], r["subject"], r["data"]) for r in mirrored] == [
        (s, 1_700_000_000_000_000_001 + s, f"o.{s}", f"d{s}".encode()) for s in (4, 7)]
    sourced = lake.stream("S").read().sort_by("seq").to_pylist()
    assert [r["seq"] for r in sourced] == [1, 2]
    assert [(h["name"], h["value"]) for h in sourced[1]["headers"]] == [("K", "7"), ("Nats-Stream-Source", "ORIG 7 > > o.7")]


def test_form_option_errors(tmp_path: Path) -> None:
    loc, _ = _lake(tmp_path, "M")
    with pytest.raises(OptionError, match="option 'form' must be one of 'mirror', 'source'"):
        parse_write_options({"path": loc, "stream": "M", "form": "mirorr"})
    assert parse_write_options({"path": loc, "stream": "M"}).form is None  # absent: publish as before
    for origin, field in (('{"name": "O", "filter_subjct": "o.eu.>"}', "filter_subjct"),
                          ('{"name": "O", "subject_transform": [{"src": "o.>", "dest": "eu.>"}]}', "subject_transform"),
                          ('{"name": "O", "external": {"api": "$JS.hub.API", "delivr": "x"}}', "delivr")):
        # a misspelt key must not land every message unfiltered, untransformed or under the wrong iname
        with pytest.raises(OptionError, match=f"option 'origin': unknown field '{field}' in the StreamSource JSON"):
            parse_write_options({"path": loc, "stream": "M", "form": "source", "origin": origin})
    source = '{"name": "O", "filter_subject": "o.eu.>", "external": {"api": "$JS.hub.API", "deliver": "x"}}'
    assert parse_write_options({"path": loc, "stream": "M", "form": "source", "origin": source}).origin == source
    with pytest.raises(ValueError, match=r"form='mirror' needs the live source's columns .*missing \['ts_ns'\]"):
        collect_task([pa.record_batch({"stream": ["O"], "subject": ["m.a"], "seq": [1]})], loc, "t", form="mirror")
