"""The installed ``jsspark`` script run for real: exit codes, output, no pyspark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "jsspark"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (pip install -e .)")


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=60
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "JSSPARK_LOCATION"}
    out["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    out["JSSPARK_LOCATION"] = str(tmp_path / "lake")
    return out


def test_script_end_to_end(env: dict[str, str]) -> None:
    assert _run("stream", "add", "ORDERS", "--subjects", "orders.*", env=env).returncode == 0
    pub = _run("pub", "orders.new", "hello", "--count", "3", "-j", env=env)
    assert pub.returncode == 0 and json.loads(pub.stdout)["last_seq"] == 3
    info = json.loads(_run("stream", "info", "ORDERS", "-j", env=env).stdout)
    assert info["state"]["messages"] == 3 and info["config"]["subjects"] == ["orders.*"]
    missing = _run("stream", "info", "NOPE", env=env)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == "jsspark: error: could not get info for stream NOPE: stream not found (10059)\n"
    refused = _run("stream", "rm", "ORDERS", env=env)
    assert (
        refused.returncode == 1
        and "refusing without -f" in refused.stderr
        and "Traceback" not in refused.stderr
    )
    assert _run("stream", "rm", "ORDERS", "-f", env=env).returncode == 0
    usage = _run("stream", "purge", env=env)
    assert usage.returncode == 2 and "usage: jsspark stream purge" in usage.stderr


def test_engine_verbs_never_import_pyspark(env: dict[str, str]) -> None:
    assert _run("stream", "add", "S", "--subjects", "s.>", env=env).returncode == 0
    traced = _run("stream", "ls", env={**env, "PYTHONPROFILEIMPORTTIME": "1"})
    assert traced.returncode == 0 and "import time:" in traced.stderr
    imported = {
        line.split("|")[-1].strip().split(".")[0] for line in traced.stderr.splitlines() if "|" in line
    }
    assert "deltalake" in imported and "pyspark" not in imported and "py4j" not in imported
    # How fast a CLI call starts is bench/puts.py's --cold figure (a new process per put, against
    # one that imports deltalake and appends a row), not a timed test.


def test_the_readmes_cli_block_runs_as_a_script(env: dict[str, str], tmp_path: Path) -> None:
    """Each ``jsspark`` line of README's CLI block, run as shown from a script (no terminal: a
    verb that asks for a yes needs ``-f`` there), on the lake ``JSSPARK_LOCATION`` names. ``run``
    starts Spark on a job file and is left to the job tests."""
    import shlex

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("\n## CLI\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("jsspark ")]
    ran = 0
    for line in lines:
        argv = shlex.split(line)[1:]
        if argv[0] == "run":
            continue
        argv = [str(tmp_path / a) if a.endswith(".dot") else a for a in argv]
        res = _run(*argv, env=env)
        assert res.returncode == 0, f"{line}: {res.stderr}"
        ran += 1
    assert ran == len(lines) - 1 >= 8
