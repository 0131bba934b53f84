"""Fixtures for CLI tests: an isolated config home and lake, and ``main(argv)`` run in-process.

In-process runs keep the suite fast (the engine is imported once); a few tests in
``test_subprocess.py`` run the installed script for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jsspark.cli.main import main
from jsspark.engine.lake import Lake, connect


@dataclass
class Result:
    """What one CLI run printed and returned."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


Run = Callable[..., Result]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private XDG config home and no JSSPARK_LOCATION, so no test sees the user's contexts."""
    cfg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    monkeypatch.delenv("JSSPARK_LOCATION", raising=False)
    return cfg


@pytest.fixture
def location(tmp_path: Path, home: Path) -> str:
    return str(tmp_path / "lake")


@pytest.fixture
def lake(location: str) -> Lake:
    """The engine over the same lake the CLI uses, to check what a command did."""
    return connect(location)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], location: str) -> Run:
    """``cli("stream", "ls", ...)`` runs ``jsspark --location <lake> stream ls ...``;
    ``cli(..., where=None)`` passes no ``--location`` (for precedence tests)."""

    def run(*argv: str, where: str | None = location) -> Result:
        capsys.readouterr()
        args = (["--location", where] if where else []) + list(argv)
        code = main(args)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
