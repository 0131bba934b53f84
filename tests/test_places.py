"""Lake places written ``scheme:/path`` (one slash), as Databricks users write DBFS paths.

A place was local or on an object store by whether it held ``://``, so ``dbfs:/chk`` was a
directory ``dbfs:`` in the working directory: the republish job kept its marks there, the lake
sink read Spark's checkpoint from there (finding nothing: no query id, no source offsets), a
``spillDir`` was refused as no URI, and the lake itself went to delta-rs, which refused it
(``allow_unsafe_rename``). ``file:/p`` was written at ``/p`` by delta-rs and read from ``./file:``
by jsspark. Now every place goes through ``engine.files.place``: DBFS is its FUSE mount
(``/dbfs``, here a temporary directory), ``dbfs:/Volumes/...`` the volume's own path, and a
place that would land where no one looks is refused naming it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import jsspark
from jsspark.engine import files
from jsspark.errors import LocationError


@pytest.fixture
def dbfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DBFS mount (``/dbfs`` on Databricks) in a temporary directory, run from another one."""
    mount = tmp_path / "dbfs"
    mount.mkdir()
    monkeypatch.setattr(files, "DBFS_MOUNT", str(mount), raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return mount


def test_a_dbfs_place_is_its_fuse_mount_for_every_user_of_a_place(dbfs: Path) -> None:
    from jsspark.jobs.republish import StartedBatches, query_app_id
    from jsspark.live.options import parse_live_read_options
    from jsspark.live.spill import spill_location
    from jsspark.sink.lake_sink import source_offsets

    lake = jsspark.connect("dbfs:/lake")
    lake.add_stream(name="S", subjects=["s.>"])
    assert lake.publish("s.a", b"1").seq == 1
    assert jsspark.connect("dbfs:///lake").get_msg("S", seq=1).data == b"1"
    assert (dbfs / "lake" / "streams").is_dir()

    ck = dbfs / "chk"
    (ck / "offsets").mkdir(parents=True)
    (ck / "metadata").write_text('{"id": "query-9"}\n')
    (ck / "offsets" / "0").write_text('v1\n{}\n{"stream": "S", "seq": 4}\n')
    assert source_offsets("dbfs:/chk", 0) == [{"stream": "S", "seq": 4}]  # the lake sink's reads
    assert query_app_id("dbfs:/chk") == "jsspark.republish.query-9"
    StartedBatches("dbfs:/chk").record(3)
    assert json.loads((ck / "_republish" / "started").read_text()) == {"batch_id": 3}
    assert StartedBatches("dbfs:/chk").started(3)
    assert spill_location("dbfs:/spill") == str(dbfs / "spill")
    assert parse_live_read_options({"servers": "nats://127.0.0.1:1", "stream": "S", "spillDir": "dbfs:/spill"})
    assert os.listdir(".") == []  # nothing in the working directory


def test_a_file_uri_with_one_slash_is_read_where_delta_rs_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lake = jsspark.connect(f"file:{tmp_path}/lake")
    lake.add_stream(name="S", subjects=["s.>"])
    assert lake.publish("s.a", b"1").seq == 1
    assert lake.get_msg("S", seq=1).data == b"1"  # was: "found its messages' files gone" (read from ./file:)
    assert jsspark.connect(str(tmp_path / "lake")).stream_info("S").state.messages == 1
    assert sorted(os.listdir(tmp_path)) == ["lake"]


def test_volumes_and_plain_paths_are_kept() -> None:
    assert files.place("dbfs:/Volumes/main/raw/lake/x") == "/Volumes/main/raw/lake/x"  # no mount needed
    assert files.place("dbfs:///Volumes/main/raw/lake") == "/Volumes/main/raw/lake"
    for kept in ("/Volumes/main/raw/lake", "/data/lake", "rel/lake", "./s3:/x", "file:///data/lake",
                 "s3://bucket/lake", "abfss://c@a.dfs.core.windows.net/lake", "c:/x"):
        assert files.place(kept) == kept


@pytest.mark.parametrize(("where", "why"), [
    ("dbfs:/lake", "DBFS is not mounted at"),
    ("dbfs://host/lake", "a DBFS path is dbfs:/<path>"),
    ("s3:/bucket/lake", "not a local path and not a URI (s3://...)"),
    ("abfss:/container/lake", "not a local path and not a URI (abfss://...)"),
])
def test_a_place_that_would_land_where_no_one_looks_is_refused_everywhere(
        where: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jsspark.cli.main import main
    from jsspark.datasource.options import OptionError, parse_write_options
    from jsspark.jobs.republish import StartedBatches
    from jsspark.jobs.spec import JobError, load_job
    from jsspark.live.options import parse_live_read_options
    from jsspark.sink.lake_sink import source_offsets

    monkeypatch.setattr(files, "DBFS_MOUNT", str(tmp_path / "no-dbfs"), raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for fn in (lambda: jsspark.connect(where), lambda: StartedBatches(where).started(0),
               lambda: source_offsets(where, 0)):
        with pytest.raises(LocationError) as info:
            fn()
        assert str(info.value).startswith(f"'{where}") and why in str(info.value), info.value  # the place, or a file in it
    with pytest.raises(OptionError, match=re.escape(f"option spillDir '{where}': {why}")):
        parse_live_read_options({"servers": "nats://127.0.0.1:1", "stream": "S", "spillDir": where})
    job = {"stream": {"name": "T", "sources": [{"name": "O"}]}, "origins": {"O": {"location": str(tmp_path)}}}
    for at in ({"target": {"location": where}}, {"target": {"location": str(tmp_path)}, "checkpoint": where}):
        with pytest.raises(JobError, match=re.escape(why)):
            load_job({**job, **at})
    assert main(["--location", where, "stream", "ls"]) == 1
    assert main(["context", "add", "x", "--location", where]) == 1 and main(["context", "ls"]) == 0
    assert not (tmp_path / "xdg" / "jsspark" / "context" / "x.json").exists()
    jsspark.connect(tmp_path / "lake").add_stream(name="S", subjects=["s.>"])
    with pytest.raises(LocationError, match=re.escape(why)):  # the lake sink, as the writer is made
        parse_write_options({"path": str(tmp_path / "lake"), "stream": "S", "checkpointLocation": where})
    assert [p for p in os.listdir(tmp_path) if p not in ("xdg", "lake")] == []  # nothing in the working directory
