"""Spill files on an object store (``spillDir=s3://...`` with ``storage.<key>`` options), against
the moto S3 server of the ``s3`` fixture: written under their final name, read by a partition
that carries the storage options (pickled, as Spark ships it), deleted, and the directories of
this host's dead processes removed; bad ``spillDir`` values fail at parse time naming the option,
and no storage secret leaks into a repr, a partition's JSON or an error. Puts run in the
background: a hanging one holds up neither delivery nor anything but the batch that reads it,
and a failed one keeps its rows.

The Spark tests run a live query with its spill in S3 into a lake sink: as rows that executors
read from the spill (the lake local), and by reference as jobs do (the lake in S3, the landing
commit reading the spill with the sink's storage options)."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import jsspark
from jsspark.datasource.options import OptionError, prefixed_storage_options
from jsspark.live import spill as S
from jsspark.live import wire
from jsspark.live.ingestor import Ingestor, LiveSourceError
from jsspark.live.options import parse_live_read_options
from jsspark.live.spill import (
    Pending,
    SpillPartition,
    make_spill_dir,
    read_references,
    read_spill,
    write_chunk,
)
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import messages, wait_for
from tests.s3server import MOTO_SECRET


def _client(s3: dict[str, str]) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"], aws_access_key_id=s3["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=s3["AWS_SECRET_ACCESS_KEY"], region_name=s3["AWS_REGION"])


def _keys(s3: dict[str, str], prefix: str) -> list[str]:
    pages = _client(s3).get_paginator("list_objects_v2").paginate(Bucket="lake", Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _batch(seqs: list[int]) -> pa.RecordBatch:
    rows = Pending()
    for s in seqs:
        rows.append(f"o.{s}".encode(), s, 1_000_000_000 + s, b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n" if s % 2 else None,
                    b"d%d" % s, s, 0)
    return rows.to_batch("O", "c")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_spill_on_s3_written_read_by_partition_and_deleted(s3: dict[str, str]) -> None:
    host, dead = S._host(), _dead_pid()
    put = _client(s3).put_object
    for name in (f"{host}-{dead}-0badf00d", f"other.host-{dead}-0badf00d", f"{host}-1-0badf00d", "notes"):
        put(Bucket="lake", Key=f"unit/{name}/x.arrow", Body=b"x")  # pid 1 is alive: not an orphan

    d = make_spill_dir("s3://lake/unit/", s3)
    assert not _keys(s3, f"unit/{host}-{dead}-")  # this host's dead process: removed
    assert len(_keys(s3, "unit/")) == 3  # another host's, a live process's, a name no reader made: kept
    assert re.fullmatch(rf"s3://lake/unit/{re.escape(host)}-\d+-[0-9a-f]{{8}}", d.uri)
    mine = d.uri.removeprefix("s3://lake/")
    a, b = write_chunk(d, _batch([1, 2, 3, 5])), write_chunk(d, _batch([6, 9, 10]))
    assert a.path.startswith(d.uri + "/") and (a.first, a.last, a.count) == (1, 5, 4)
    assert _keys(s3, mine) == sorted(p.removeprefix("s3://lake/") for p in (a.path, b.path))  # no temporary names

    part = pickle.loads(pickle.dumps(SpillPartition((a.path, b.path), 2, 9, (3, 5, 6, 9), dict(s3))))
    got = pa.Table.from_batches(list(read_spill(part)))
    assert got.column("seq").to_pylist() == [3, 5, 6, 9]
    assert got.column("subject").to_pylist() == ["o.3", "o.5", "o.6", "o.9"]
    assert got.column("data").to_pylist() == [b"d3", b"d5", b"d6", b"d9"]
    assert got.column("headers").to_pylist()[0] == [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    assert got.schema == _batch([1]).schema
    text = part.to_json()
    assert MOTO_SECRET not in text + repr(part) + repr(d)
    # the by-reference landing: the JSON a row carries, read with the sink's storage options
    assert pa.Table.from_batches(list(read_references([text], 4, s3))).equals(got)

    d.delete([a.path])  # in the background on an object store
    wait_for(lambda: _keys(s3, mine) == [b.path.removeprefix("s3://lake/")], 10, "the committed file's removal")
    with pytest.raises(FileNotFoundError):
        list(read_spill(part))
    d.close()
    assert not _keys(s3, mine)


def test_local_spill_dirs_are_named_and_cleaned_per_host(tmp_path: Path) -> None:
    """On a mount shared by several hosts, a pid is only looked up for this host's directories
    (an older ``<pid>-<random>`` name is this host's)."""
    host, dead = S._host(), _dead_pid()
    for name in (f"{host}-{dead}-0badf00d", f"{dead}-0badf00d", f"other.host-{dead}-0badf00d"):
        (tmp_path / name).mkdir()
    d = make_spill_dir(f"file://{tmp_path}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"other.host-{dead}-0badf00d", Path(d.uri).name])
    chunk = write_chunk(d, _batch([4, 7]))
    assert [p.name for p in Path(d.uri).iterdir()] == [Path(chunk.path).name]  # renamed into place
    assert [r.as_py() for r in next(read_spill(SpillPartition((chunk.path,), 0, 7))).column("seq")] == [4, 7]
    d.delete([chunk.path])
    assert not Path(chunk.path).exists()
    d.close()
    assert not Path(d.uri).exists()


def _read_opts(spill: str, **more: str) -> dict[str, str]:
    return {"servers": "nats://127.0.0.1:1", "stream": "S", "spillDir": spill, **more}


@pytest.mark.parametrize(("spill", "why"), [
    ("ftp://host/spill", "scheme 'ftp' is not supported"),
    ("hdfs://nn/spill", "scheme 'hdfs' is not supported"),
    ("s3://", "name the bucket"),
    ("s3:/lake/spill", "not a URI"),
    ("file://otherhost/spill", "file:///path"),
    ("s3://lake/spill?x=1", "no query"),
    ("azure://container/spill", "Account must be specified"),  # delta-rs's own check of the URI
])
def test_bad_spill_dir_fails_naming_the_option(spill: str, why: str) -> None:
    with pytest.raises(OptionError, match=rf"option spillDir {re.escape(repr(spill))}: .*{re.escape(why)}"):
        parse_live_read_options(_read_opts(spill))


def test_spill_dir_options_keep_their_secrets(s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    storage = {k.lower(): v for k, v in prefixed_storage_options(s3).items()}  # as Spark hands them over
    opts = parse_live_read_options(_read_opts("s3a://lake/spill/", **storage))
    assert opts.storage_options == {k.lower(): v for k, v in s3.items()} and MOTO_SECRET not in repr(opts)
    assert parse_live_read_options(_read_opts("file:///tmp/spill")).storage_options is None
    with pytest.raises(OptionError) as info:
        parse_live_read_options(_read_opts(f"s3://k:{MOTO_SECRET}@lake/spill"))
    assert MOTO_SECRET not in str(info.value) and "s3://***@lake/spill" in str(info.value)
    assert "storage.<key>" in str(info.value)

    def leaky(uri: str, options: Any) -> Any:  # an object store error that quotes a secret
        raise OSError(f"PUT {uri}?X-Amz-Signature={MOTO_SECRET}: 403 Forbidden")

    monkeypatch.setattr(S, "_store", leaky)
    with pytest.raises(OptionError) as info:
        parse_live_read_options(_read_opts("s3://lake/spill", **storage))
    assert MOTO_SECRET not in str(info.value) and "X-Amz-Signature=***" in str(info.value)
    assert "option spillDir 's3://lake/spill'" in str(info.value)
    from jsspark.datasource.live_source import LiveStreamReader
    from jsspark.live.ingestor import Ingestor, LiveSourceError

    reader = LiveStreamReader(opts)  # the source's process: the spill directory is made before connecting
    reader._ingestor = Ingestor(opts)
    with pytest.raises(LiveSourceError) as err:
        reader.initialOffset()
    assert MOTO_SECRET not in str(err.value) and "X-Amz-Signature=***" in str(err.value)
    assert "spill directory under spillDir 's3a://lake/spill/'" in str(err.value) and err.value.__cause__ is None


@pytest.mark.nats
def test_a_job_spills_to_its_targets_store_with_the_targets_options(server: Any, nats: SyncNats,
                                                                     s3: dict[str, str]) -> None:
    """A server origin's reader gets the target's storage options when its ``spillDir`` is on an
    object store (the landing commit reads the spill with them), and none for a local one."""
    from jsspark.jobs.runner import Job
    from jsspark.jobs.spec import load_job

    nats.add_stream(name="SPJ", subjects=["spj.>"])
    options: dict[str, dict[str, str]] = {}
    for spill in ("s3://lake/job-spill", "/tmp/job-spill"):
        job = Job(load_job({"stream": {"name": "SPJ_L", "sources": [{"name": "SPJ"}]},
                            "target": {"location": "s3://lake/job-lake", "storage_options": s3},
                            "origins": {"SPJ": {"servers": server.url, "options": {"spillDir": spill}}}}))
        job.prepare()
        options[spill] = job.plan()[0].reader_options
    assert options["s3://lake/job-spill"]["spillReferences"] == "true"
    assert {k: v for k, v in options["s3://lake/job-spill"].items() if k.startswith("storage.")} == (
        prefixed_storage_options(s3))
    assert not any(k.startswith("storage.") for k in options["/tmp/job-spill"])
    parse_live_read_options(options["s3://lake/job-spill"])  # valid reader options


def _ingestor(server: Any, s3: dict[str, str], stream: str) -> Ingestor:
    return Ingestor(parse_live_read_options({
        "servers": server.url, "stream": stream, "consumerMode": "ordered", "spillDir": f"s3://lake/{stream.lower()}",
        "chunkRows": "10", **prefixed_storage_options(s3)}))


def _before_writes(monkeypatch: pytest.MonkeyPatch, hook: Any) -> list[str]:
    """``SpillDir.write`` calls ``hook(name)`` first; returns the file names in the order first written."""
    names: list[str] = []
    real = S.SpillDir.write

    def write(self: S.SpillDir, name: str, batch: pa.RecordBatch) -> str:
        if name not in names:
            names.append(name)
        hook(name)
        return real(self, name, batch)

    monkeypatch.setattr(S.SpillDir, "write", write)
    return names


def _planned_rows(ing: Ingestor, end: int) -> list[int]:
    return [s for p in ing.plan(0, end) for b in read_spill(p) for s in b.column("seq").to_pylist()]


def _deliver_run(ing: Ingestor, seqs: range) -> None:
    """``seqs`` as one read's deliveries (dseq = seq), the run ``_on_frames`` takes as columns."""
    ing._awaiting = False
    ing._on_frames(wire.Frames.of_lists(
        b"1", [b"o.%d" % s for s in seqs], [b"$JS.ACK.O.c.1.%d.%d.%d.0" % (s, s, 10**18 + s) for s in seqs],
        [None] * len(seqs), [b"d%d" % s for s in seqs]))


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_run_of_deliveries_spills_in_files_of_chunk_rows(store: str, tmp_path: Path, s3: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """One read can carry more deliveries than ``chunkRows``: they are taken whole, and spilled
    as files of at most ``chunkRows`` rows (25 -> 10, 10, 5); a local write that fails part way
    leaves the rows buffered and no file behind."""
    spill = f"s3://lake/runs-{tmp_path.name}" if store == "s3" else f"file://{tmp_path}"
    ing = Ingestor(parse_live_read_options({"servers": "nats://127.0.0.1:1", "stream": "O", "consumerMode": "ordered",
                                            "spillDir": spill, "chunkRows": "10",
                                            **(prefixed_storage_options(s3) if store == "s3" else {})}))
    ing._dir = make_spill_dir(ing.opts.spill_dir, ing.opts.storage_options)
    try:
        if store == "local":
            real, calls = S.SpillDir.write, []

            def second_fails(self: S.SpillDir, name: str, batch: pa.RecordBatch) -> str:
                calls.append(name)
                if len(calls) == 2:
                    raise OSError("disk full")
                return real(self, name, batch)

            monkeypatch.setattr(S.SpillDir, "write", second_fails)
            _deliver_run(ing, range(1, 26))  # the spill fails on the delivery thread: logged, kept
            assert len(ing._rows) == 25 and not ing._chunks and not list(Path(ing._dir.uri).iterdir())
            monkeypatch.setattr(S.SpillDir, "write", real)
        else:
            _deliver_run(ing, range(1, 26))
        assert ing._pick(0, None, None, None) == 25
        assert [(c.first, c.last, c.count) for c in ing._chunks] == [(1, 10, 10), (11, 20, 10), (21, 25, 5)]
        assert _planned_rows(ing, 25) == list(range(1, 26))  # each once (on S3: once every put landed)
        if store == "s3":
            assert len(_keys(s3, ing._dir.uri.removeprefix("s3://lake/") + "/")) == 3
        else:
            assert len(list(Path(ing._dir.uri).iterdir())) == 3
    finally:
        ing._dir.close()


@pytest.mark.nats
def test_a_hanging_put_holds_up_neither_delivery_nor_other_puts(server: Any, nats: SyncNats, s3: dict[str, str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    nats.add_stream(name="HANG", subjects=["hang.>"], storage="file")
    nats.publish_many([(f"hang.{i % 3}", b"d%d" % i, None) for i in range(1, 101)])
    gate = threading.Event()

    def hold_the_first(name: str) -> None:
        if name == held[0]:
            assert gate.wait(60), "the test never opened the gate"

    held = _before_writes(monkeypatch, hold_the_first)
    ing = _ingestor(server, s3, "HANG")
    try:
        ing.start(None)
        # the first file's put hangs; delivery and the later puts go on
        wait_for(lambda: ing._highest == 100 and ing.latest(0, None, None) == 100, 30, "delivery past the hanging put")
        prefix = ing._dir.uri.removeprefix("s3://lake/") if ing._dir else "?"
        wait_for(lambda: len(_keys(s3, prefix)) >= 2, 30, "the later puts")
        assert not any(k.endswith(held[0]) for k in _keys(s3, prefix))
        # a batch over the missing file is not planned
        ing.opts = replace(ing.opts, wait_timeout=1.0)
        with pytest.raises(LiveSourceError, match=r"waiting for 1 spill file\(s\) to be written under s3://lake/hang/"):
            ing.plan(0, 100)
        gate.set()
        assert _planned_rows(ing, 100) == list(range(1, 101))  # every message once, in order
    finally:
        gate.set()
        ing.stop()


@pytest.mark.nats
def test_a_failed_put_keeps_its_rows_and_fails_only_the_batch_that_needs_it(
        server: Any, nats: SyncNats, s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    nats.add_stream(name="FAILS", subjects=["fails.>"], storage="file")
    nats.publish_many([(f"fails.{i % 3}", b"d%d" % i, None) for i in range(1, 101)])
    broken, failures = {"store": True}, {"once": 0}

    def fail(name: str) -> None:
        if name == names[0] and broken["store"]:
            raise OSError(f"store unavailable (signature {MOTO_SECRET})")
        if len(names) > 1 and name == names[1] and failures["once"] == 0:
            failures["once"] += 1
            raise OSError("a dropped connection")

    names = _before_writes(monkeypatch, fail)
    ing = _ingestor(server, s3, "FAILS")
    try:
        ing.start(None)
        wait_for(lambda: ing._highest == 100 and ing.latest(0, None, None) == 100, 30, "delivery past the failed puts")
        with pytest.raises(LiveSourceError) as err:  # the first file: failed, failed again when the batch needed it
            ing.plan(0, 100)
        assert "cannot write a spill file under s3://lake/fails/" in str(err.value)
        assert "store unavailable" in str(err.value) and MOTO_SECRET not in str(err.value)
        assert failures["once"] == 1  # the second file failed once and was put again
        broken["store"] = False  # the store is back: the retried batch holds every message once
        assert _planned_rows(ing, 100) == list(range(1, 101))
    finally:
        ing.stop()


# -- Spark ----------------------------------------------------------------------------------------
@pytest.mark.nats
@pytest.mark.spark
@pytest.mark.parametrize("by_reference", [False, True], ids=["rows", "by_reference"])
def test_live_query_spills_to_s3_lands_once_and_cleans_up(spark: Any, server: Any, nats: SyncNats, s3: dict[str, str],
                                                          tmp_path: Path, by_reference: bool) -> None:
    origin = "SPR" if by_reference else "SPS"  # the module's server keeps the other run's origin
    prefix = f"spill-{origin.lower()}/"
    nats.add_stream(name=origin, subjects=[f"{origin.lower()}.>"], storage="file")
    published = [(s.replace("orders.", f"{origin.lower()}.", 1), d, h) for s, d, h in messages(400)]
    nats.publish_many(published)
    host, dead = S._host(), _dead_pid()
    _client(s3).put_object(Bucket="lake", Key=f"{prefix}{host}-{dead}-0badf00d/x.arrow", Body=b"x")
    storage = prefixed_storage_options(s3)
    # by reference, as a job: the lake in S3, the landing commit reads the spill with the sink's options
    lake_loc = f"s3://lake/lake-{origin.lower()}" if by_reference else str(tmp_path / "lake")
    lake = jsspark.connect(lake_loc, s3 if by_reference else None)
    lake.add_stream(name="T", subjects=[f"{origin.lower()}.>"])
    df = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", origin)
          .option("spillDir", f"s3://lake/{prefix}").options(**storage).option("chunkRows", "60")
          .option("maxMessagesPerTrigger", "250").option("spillReferences", str(by_reference).lower()).load())
    writer = df.writeStream.format("jetstream").option("stream", "T").option("form", "mirror")
    if by_reference:
        writer = writer.options(**storage)
    q = (writer.option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(processingTime="200 milliseconds").start(lake_loc))
    seen: set[str] = set()  # spill objects seen while batches land

    def landed() -> bool:
        seen.update(_keys(s3, prefix))
        return lake.stream_info("T").state.messages >= 400 or q.exception() is not None

    try:
        wait_for(landed, 60, "400 messages in the lake")
        assert q.exception() is None, q.exception()
        # committed batches' spill objects go (the next planning call commits the last batch)
        wait_for(lambda: not _keys(s3, prefix), 30, "the committed spill objects' removal")
        progress = json.dumps([json.loads(p.json) for p in q.recentProgress])
    finally:
        q.stop()
    assert f"{prefix}{host}-{dead}-0badf00d/x.arrow" not in _keys(s3, prefix)  # this host's dead reader's: gone
    ours = {k for k in seen if not k.startswith(f"{prefix}{host}-{dead}-")}
    assert ours and all(re.fullmatch(rf"{prefix}{re.escape(host)}-\d+-[0-9a-f]{{8}}/\d{{20}}-\d{{20}}-[0-9a-f]{{6}}\.arrow",
                                     k) for k in ours), ours
    rows = lake.stream("T").read().sort_by("seq").to_pylist()
    assert [(r["seq"], r["subject"], r["data"]) for r in rows] == [
        (i + 1, s, d) for i, (s, d, _h) in enumerate(published)]  # each once, as published
    assert sum(p["numInputRows"] for p in q.recentProgress) == 400
    assert MOTO_SECRET not in progress
    for f in (tmp_path / "ckpt").rglob("*"):  # offsets, commits, metadata
        if f.is_file():
            assert MOTO_SECRET.encode() not in f.read_bytes(), f
    plan = df._jdf.queryExecution().toString()
    assert "storage.aws_secret_access_key=*" in plan.lower() and MOTO_SECRET not in plan
    with pytest.raises(Exception, match="spillDir") as info:  # at load(), before any query
        (spark.readStream.format("jetstream").option("servers", server.url).option("stream", origin)
         .option("spillDir", f"s3://k:{MOTO_SECRET}@lake/{prefix}").load())
    assert MOTO_SECRET not in str(info.value)
