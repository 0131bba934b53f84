"""Saved contexts and where the lake comes from: --location > --context > $JSSPARK_LOCATION >
the selected context; secrets never printed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.conftest import Run


def test_add_ls_select_info_rm(cli: Run, home: Path, tmp_path: Path) -> None:
    res = cli(
        "context", "add", "prod", "--location", str(tmp_path / "p"), "--server", "nats://h:4222", "--user", "u",
        "--password", "hunter2", "--token", "tok", "--storage-option", "aws_secret_access_key=shh",
        "--storage-option", "aws_region=eu", "--description", "production", where=None,
    )  # fmt: skip
    assert res.code == 0 and "Saved context prod" in res.out
    stored = home / "jsspark" / "context" / "prod.json"
    assert (
        json.loads(stored.read_text())["password"] == "hunter2" and (stored.stat().st_mode & 0o777) == 0o600
    )
    assert cli("context", "add", "dev", "--location", str(tmp_path / "d"), "--select", where=None).code == 0
    assert (home / "jsspark" / "context.txt").read_text().strip() == "dev"
    table = cli("context", "ls", where=None).out
    assert "dev *" in table and "prod" in table and "production" in table and "hunter2" not in table
    info = cli("context", "info", "prod", where=None).out
    assert "hunter2" not in info and "tok" not in info.replace("Token", "") and "shh" not in info
    assert "Password: *********" in info and "aws_region=eu" in info and "Server URLs: nats://h:4222" in info
    doc = cli("context", "info", "prod", "-j", where=None).json()
    assert doc["password"] == doc["token"] == doc["storage_options"]["aws_secret_access_key"] == "*********"
    assert cli("context", "select", "prod", where=None).out == "Selected context prod\n"
    assert cli("context", "info", where=None).out.startswith("Context prod (selected)")
    assert "refusing without -f" in cli("context", "rm", "prod", where=None).err
    assert cli("context", "rm", "prod", "-f", where=None).code == 0
    assert not (home / "jsspark" / "context.txt").exists()
    assert "unknown context 'prod'" in cli("context", "select", "prod", where=None).err
    assert "invalid context name" in cli("context", "add", "../x", "--location", "y", where=None).err
    assert "needs --location PATH or --server URL" in cli("context", "add", "empty", where=None).err


def test_a_context_of_a_server_alone_is_what_a_job_names(cli: Run, home: Path, tmp_path: Path) -> None:
    """conf/README: a job's ``{"context": "prod"}`` takes the server and credentials saved with
    ``jsspark context add prod --server ... --creds ...``, no lake needed; as a lake it says it has none."""
    from jsspark.jobs.spec import load_job

    res = cli(
        "context", "add", "prod", "--server", "nats://nats:4222", "--creds", "/secrets/app.creds", where=None
    )
    assert res.code == 0 and "Saved context prod" in res.out
    spec = load_job({"stream": {"name": "X", "sources": [{"name": "O"}]}, "target": {"location": str(tmp_path)},
                     "origins": {"O": {"context": "prod"}}})  # fmt: skip
    saved = {"servers": "nats://nats:4222", "creds": "/secrets/app.creds"}
    assert spec.origin("O").connection_options() == saved
    res = cli("stream", "ls", "--context", "prod", where=None)
    assert res.code == 1 and "context 'prod' has no location" in res.err


def test_url_credentials_are_hidden_and_a_broken_file_hides_no_other(cli: Run, home: Path, tmp_path: Path) -> None:
    cli("context", "add", "prod", "--location", str(tmp_path / "p"), "--server", "nats://alice:s3cr3tpw@nats:4222",
        where=None)  # fmt: skip
    cli("context", "add", "tok", "--location", str(tmp_path / "t"), "--server", "nats://tok3nABC@nats:4222", where=None)
    shown = [cli("context", "info", "prod", where=None).out, cli("context", "ls", where=None).out,
             cli("context", "ls", "-j", where=None).out, cli("context", "info", "tok", "-j", where=None).out]
    assert not any("s3cr3tpw" in text or "tok3nABC" in text for text in shown)
    assert "nats://alice:***@nats:4222" in shown[0] and "nats://***@nats:4222" in shown[3]
    folder = home / "jsspark" / "context"
    (folder / "broken.json").write_text("{not json")
    (folder / "weird.json").write_text('{"location": 5, "storage_options": "x"}')
    table = cli("context", "ls", where=None)
    assert table.code == 0 and "prod" in table.out and "tok" in table.out and "unreadable" in table.out
    res = cli("stream", "ls", "--context", "weird", where=None)
    assert res.code == 1 and "Traceback" not in res.err
    assert res.err.endswith(f"could not read context 'weird' from {folder / 'weird.json'}: location must be a string\n")


def test_location_precedence(cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lakes = {k: str(tmp_path / k) for k in ("flag", "ctx", "env", "selected")}
    cli("context", "add", "named", "--location", lakes["ctx"], where=None)
    cli("context", "add", "chosen", "--location", lakes["selected"], "--select", where=None)
    for key, path in lakes.items():
        assert cli("stream", "add", key.upper(), "--subjects", f"{key}.>", where=path).code == 0
    monkeypatch.setenv("JSSPARK_LOCATION", lakes["env"])

    def names(*argv: str) -> list[str]:
        return cli("stream", "ls", "-n", *argv, where=None).out.split()

    assert names("--location", lakes["flag"], "--context", "named") == ["FLAG"]
    assert names("--context", "named") == ["CTX"]
    assert names() == ["ENV"]
    monkeypatch.delenv("JSSPARK_LOCATION")
    assert names() == ["SELECTED"]
    os.remove(Path(os.environ["XDG_CONFIG_HOME"]) / "jsspark" / "context.txt")
    res = cli("stream", "ls", where=None)
    assert res.code == 1 and res.err.startswith(
        "jsspark: error: no lake location: pass --location PATH, set JSSPARK_LOCATION"
    )
    assert "unknown context 'nope'" in cli("stream", "ls", "--context", "nope", where=None).err


def test_context_verbs_do_not_import_the_engine(cli: Run) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from jsspark.cli.main import main; main(['context', 'ls']); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyarrow', 'deltalake', 'numpy', 'pyspark'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
