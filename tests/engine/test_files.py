"""Reading a local table goes through pyarrow's own filesystem (``engine.files``). Through
delta-rs's store wrapped as a Python filesystem, a script that read a table aborted as it exited
(SIGABRT, "terminate called without an active exception": apache/arrow#34314) in about one run
of four on this machine, after it had done everything right; a Spark read task did the same."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pa_fs
import pytest

import jsspark
from jsspark.engine.files import table_filesystem


def _lake(tmp_path: Path) -> object:
    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="S", subjects=["s.>"])
    lake.publish_batch("S", pa.table({"subject": [f"s.{i % 3}" for i in range(30)], "data": [b"x"] * 30}))
    return lake


def test_local_tables_are_read_with_pyarrows_own_filesystem(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    ls = lake.stream("S")  # type: ignore[attr-defined]
    snap, _ = ls._load()
    fs = ls.table.dataset(snap).filesystem
    assert isinstance(fs, pa_fs.SubTreeFileSystem) and isinstance(fs.base_fs, pa_fs.LocalFileSystem)
    assert sorted(ls.read(columns=["seq"])["seq"].to_pylist()) == list(range(1, 31))
    for uri in (str(tmp_path / "lake" / "S"), f"file://{tmp_path}/lake/S"):
        fs = table_filesystem(uri)
        assert isinstance(fs, pa_fs.SubTreeFileSystem) and fs.base_path.rstrip("/") == str(tmp_path / "lake" / "S")
    assert isinstance(table_filesystem("s3://bucket/lake/S", {"AWS_REGION": "us-east-1"}), pa_fs.PyFileSystem)


def test_a_script_that_reads_a_table_exits_cleanly(tmp_path: Path) -> None:
    _lake(tmp_path)
    script = textwrap.dedent(f"""
        import jsspark
        lake = jsspark.connect({str(tmp_path / "lake")!r})
        ls = lake.stream("S")
        assert ls.read(columns=["seq", "data"]).num_rows == 30
        snap, _ = ls._load()
        assert ls.table.stored_since(snap, 10, 20, ["seq"]).num_rows == 10
        print("read")
    """)
    for _ in range(8):  # the abort came in about one run of four
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert (out.returncode, out.stdout.strip()) == (0, "read"), out.stderr
        assert "terminate" not in out.stderr


def test_nothing_on_a_local_lake_is_read_through_a_python_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``jsspark stream ls`` on a local lake exited with SIGABRT ("terminate called without an
    active exception") in about one run of 250 on a loaded machine. The core: an Arrow CPU
    thread, tearing down the catalog's scan after ``to_table`` had returned, released a
    ``PyBuffer`` the parquet read cache held (``PyGILState_Ensure`` during ``Py_FinalizeEx`` ->
    ``pthread_exit`` through a noexcept frame). The catalog was read with delta-rs's default
    store, a Python filesystem to Arrow even on the local disk. No read of a local lake, by the
    CLI or a script, may open a file through it: its buffers are Python objects."""
    from deltalake.fs import DeltaStorageHandler

    from jsspark.cli.main import main

    opened: list[str] = []
    for name in ("open_input_file", "open_input_stream"):
        real = getattr(DeltaStorageHandler, name)
        monkeypatch.setattr(DeltaStorageHandler, name,
                            lambda self, path, *a, real=real: (opened.append(path), real(self, path, *a))[1])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    lake = _lake(tmp_path)
    assert lake.stream("S").read(columns=["seq"]).num_rows == 30  # type: ignore[attr-defined]
    assert jsspark.connect(str(tmp_path / "lake")).stream_names() == ["S"]  # type: ignore[attr-defined]
    capsys.readouterr()
    assert main(["--location", str(tmp_path / "lake"), "stream", "ls"]) == 0
    assert "│ S " in capsys.readouterr().out
    assert opened == []


def test_an_object_store_file_arrow_holds_is_waited_for_at_exit(s3: dict[str, str]) -> None:
    """On an object store delta-rs's store is the only one that takes its storage options, so the
    abort above stayed there: a script that read a stream on S3 exited with SIGABRT in about one
    run of four to six. Each file the store hands Arrow is now tracked while Arrow holds it, and a
    process exiting waits (at most ``EXIT_WAIT_SECONDS``) until Arrow released them all. This
    checks that wait: it lasts exactly as long as a file is held. Whether a process aborts is no
    test's verdict: after the change, 0 of 75 script runs aborted here, but 1 of 24 did under a
    loaded CI run, so some release still escapes it."""
    import threading
    import time

    from jsspark.engine import files

    lake = jsspark.connect("s3://lake/held", storage_options=s3)
    lake.add_stream(name="S", subjects=["s.>"])
    lake.publish_batch("S", pa.table({"subject": ["s.a"] * 10, "data": [b"x"] * 10}))
    ls = lake.stream("S")
    snap, _ = ls._load()
    uri = lake.stream_uri("S")
    path = snap.table.file_uris()[0][len(uri) + 1 :]
    fs = table_filesystem(uri, s3)
    held = [fs.open_input_file(path)]  # as a scan's read-ahead holds one
    assert held[0].read(4) == b"PAR1" and len(files._HELD) == 1
    threading.Timer(0.5, held.clear).start()  # Arrow lets go of it half a second later
    started = time.monotonic()
    files._wait_for_held()
    assert 0.4 < time.monotonic() - started < files.EXIT_WAIT_SECONDS
    assert len(files._HELD) == 0
    files._wait_for_held()  # nothing held: no wait
    assert time.monotonic() - started < files.EXIT_WAIT_SECONDS


def test_a_local_location_delta_rs_reads_back_decoded_is_refused(tmp_path: Path) -> None:
    """delta-rs writes a local path with ``%`` and two hex digits as given and reads it decoded
    (``a%41b`` as ``aAb``): every call after the first write failed with "File not found". Such
    a location is refused at ``connect``, naming it; a ``%`` without two hex digits is kept."""
    import pytest

    from jsspark.errors import LocationError

    for location in (str(tmp_path / "a%41b"), f"file://{tmp_path}/x%2f/lake"):
        with pytest.raises(LocationError, match=r"^lake location '.*%.*': a local path with '%' and two hex digits"):
            jsspark.connect(location)
    lake = jsspark.connect(str(tmp_path / "100%" / "lake"))
    lake.add_stream(name="S", subjects=["s.>"])
    assert lake.publish("s.a", b"1").seq == 1
    assert jsspark.connect(str(tmp_path / "100%" / "lake")).stream_info("S").state.messages == 1
