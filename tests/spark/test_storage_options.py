"""``storage.*`` options: object-store settings and credentials for delta-rs, used on the driver
and in every task, on a lake in S3 (moto on loopback, nothing in the environment); their secret
values stay out of reprs, offsets, query progress, the checkpoint and errors."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import jsspark
from jsspark.datasource.options import parse_read_options, parse_write_options, prefixed_storage_options
from jsspark.datasource.planning import Planner
from jsspark.datasource.reading import read_partition
from jsspark.datasource.redaction import StorageError, scrubbed
from jsspark.datasource.source import JetStreamDataSource
from jsspark.sink.lake_sink import collect_task, load_messages, remove_staged
from tests.s3server import MOTO_SECRET

pytestmark = pytest.mark.spark


def _spark_options(s3: dict[str, str]) -> dict[str, str]:
    """The storage options as Spark hands them to a data source: keys lower-cased."""
    return {k.lower(): v for k, v in prefixed_storage_options(s3).items()}


def _lake(s3: dict[str, str], path: str) -> tuple[str, Any]:
    loc = f"s3://lake/{path}"
    lake = jsspark.connect(loc, storage_options=s3)
    lake.add_stream(name="SRC", subjects=["src.>"])
    lake.add_stream(name="DST", subjects=["dst.>"])
    lake.publish_batch("SRC", pa.table({"subject": [f"src.{i % 2}" for i in range(5)],
                                        "data": [f"m{i}".encode() for i in range(5)]}))
    return loc, lake


def test_options_reach_driver_and_executor_code_and_no_repr(s3: dict[str, str]) -> None:
    loc, _ = _lake(s3, "plain")
    opts = parse_read_options({"path": loc, "stream": "SRC", **_spark_options(s3)})
    assert opts.storage_options == {k.lower(): v for k, v in s3.items()}
    planner = Planner(opts)
    parts = planner.partitions(planner.initial(), None)
    shipped = [pickle.loads(pickle.dumps(p)) for p in parts]  # all a task gets
    assert [s for p in shipped for b in read_partition(p) for s in b.column("seq").to_pylist()] == [1, 2, 3, 4, 5]
    wopts = parse_write_options({"path": loc, "stream": "DST", **_spark_options(s3)})
    staged = collect_task([pa.record_batch({"subject": ["dst.x"], "data": [b"x"]})], loc, "t", inline_limit=0,
                          storage_options=wopts.storage_options)
    assert staged.path is not None and load_messages([staged], loc, storage_options=wopts.storage_options).num_rows == 1
    remove_staged([staged], loc, wopts.storage_options)
    with pytest.raises(FileNotFoundError):
        load_messages([staged], loc, storage_options=wopts.storage_options)
    for text in (repr(opts), repr(parts[0]), repr(wopts), repr(planner)):
        assert MOTO_SECRET not in text
    with pytest.raises(Exception, match=r"option 'storage\.' names no storage option"):
        parse_read_options({"path": loc, "stream": "SRC", "storage.": "x"})


def test_errors_lose_the_secrets(s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An object-store error that echoes a secret (a URL with a signature) leaves as a
    ``StorageError`` without it, and without the original as its cause."""
    loc, _ = _lake(s3, "errors")
    from jsspark.engine.lake import Lake

    def leaky(self: Any, name: str) -> Any:
        raise OSError(f"GET https://lake.example/{name}?X-Amz-Signature={MOTO_SECRET}: 403 Forbidden")

    monkeypatch.setattr(Lake, "stream", leaky)  # the first storage read a reader and a writer make
    options = {"path": loc, "stream": "SRC", **_spark_options(s3)}
    for call in (lambda: parse_read_options(options), lambda: JetStreamDataSource(options).schema(),
                 lambda: parse_write_options(options)):
        with pytest.raises(StorageError) as info:
            call()
        assert MOTO_SECRET not in str(info.value) and "X-Amz-Signature=***: 403 Forbidden" in str(info.value)
        assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(KeyError, match="untouched"), scrubbed(s3):  # nothing secret in it: the error as it was
        raise KeyError("untouched")


def test_spark_reads_and_writes_an_s3_lake_with_storage_options(spark: Any, s3: dict[str, str], tmp_path: Path) -> None:
    loc, lake = _lake(s3, "spark")
    lake.add_consumer("SRC", durable_name="COPY", ack_policy="explicit")
    # a key Spark's own redaction misses (its value must not show in plans); delta-rs ignores it on S3
    storage = {**_spark_options(s3), "storage.azure_storage_sas_key": f"sas-{MOTO_SECRET}"}
    batch = spark.read.format("jetstream").option("stream", "SRC").options(**storage).load(loc)
    assert sorted(r.seq for r in batch.select("seq").collect()) == [1, 2, 3, 4, 5]
    ck = tmp_path / "ck"
    df = (
        spark.readStream.format("jetstream").option("stream", "SRC").option("durable_name", "COPY")
        .option("ack_policy", "explicit").option("maxMessagesPerTrigger", 3).options(**storage).load(loc)
        .selectExpr("regexp_replace(subject, '^src', 'dst') AS subject", "data", "stream", "seq")
    )
    plan = df._jdf.queryExecution().toString()
    assert "storage.azure_storage_sas_key=*" in plan and MOTO_SECRET not in plan  # jsspark.register's redaction
    q = (
        df.writeStream.format("jetstream").option("stream", "DST").options(**storage)
        .option("checkpointLocation", str(ck)).trigger(availableNow=True).start(loc)
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    stored = lake.stream("DST").read().sort_by("seq")
    assert stored["data"].to_pylist() == [f"m{i}".encode() for i in range(5)]
    assert lake.consumer_info("SRC", "COPY").ack_floor.stream_seq == 5  # acked by the sink, on S3
    progress = json.dumps([json.loads(p.json) for p in q.recentProgress])
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [3, 2]
    assert MOTO_SECRET not in progress
    for f in ck.rglob("*"):
        if f.is_file():
            assert MOTO_SECRET.encode() not in f.read_bytes(), f


def test_a_job_file_passes_its_storage_options_to_spark(spark: Any, s3: dict[str, str], tmp_path: Path) -> None:
    """A job's ``storage_options`` (origin and target) reach the Spark reader and writer."""
    from jsspark.jobs.runner import run_job

    loc, lake = _lake(s3, "job")
    job = {"stream": {"name": "COPY", "sources": [{"name": "SRC"}]},
           "target": {"location": loc, "storage_options": s3},
           "origins": {"*": {"location": loc, "storage_options": s3}},
           "checkpoint": str(tmp_path / "ck"), "trigger": "available_now"}
    assert run_job(job, spark).await_termination(300)
    assert lake.stream("COPY").read().sort_by("seq")["data"].to_pylist() == [f"m{i}".encode() for i in range(5)]


def test_the_sink_reaches_an_s3a_lake_and_checkpoint_with_the_environments_credentials(
    s3: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the credentials often come from the environment (an instance profile), with no
    ``storage.*`` option, and a Hadoop checkpoint is at an ``s3a://`` URI, which delta-rs takes
    and pyarrow does not: the sink's staging files and its reads of the checkpoint (the query id,
    each batch's source offsets) went through pyarrow's ``FileSystem.from_uri`` then, so every
    streaming commit failed with ``Unrecognized filesystem type in URI``, where a local lake and
    checkpoint store the batch. They go through delta-rs's store as the lake does."""
    import boto3

    from jsspark.sink.lake_sink import LakeStreamWriter

    for key, value in s3.items():
        monkeypatch.setenv(key.upper(), value)
    loc, ck = "s3a://lake/s3a-env/lake", "s3a://lake/s3a-env/ck"
    lake = jsspark.connect(loc)
    lake.add_stream(name="D", subjects=["d.>"])
    client = boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"])
    client.put_object(Bucket="lake", Key="s3a-env/ck/metadata", Body=b'{"id": "query-1"}\n')
    client.put_object(Bucket="lake", Key="s3a-env/ck/offsets/0", Body=b"v1\n{}\n")
    writer = LakeStreamWriter(parse_write_options({"path": loc, "stream": "D", "checkpointLocation": ck}))
    inline = writer.write(iter([pa.record_batch({"subject": ["d.a"], "data": [b"a"]})]))
    staged = collect_task(
        [pa.record_batch({"subject": ["d.b"], "data": [b"b"]})], loc, writer.tag, inline_limit=0
    )
    assert staged.path is not None
    writer.commit([inline, staged], 0)
    stored = lake.stream("D").read().sort_by("seq")
    assert stored["data"].to_pylist() == [b"a", b"b"]
    assert lake.stream("D").table.snapshot().table.transaction_version("jsspark.sink.query-1") == 0
    assert client.list_objects_v2(Bucket="lake", Prefix="s3a-env/lake/_staging/").get("KeyCount") == 0
