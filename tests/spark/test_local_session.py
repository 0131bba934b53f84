"""``local_spark``'s session settings that change how Spark runs, checked where they act."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jsspark.local_spark import _remove_socket_dirs_of_gone_processes, worker_socket_dir

pytestmark = pytest.mark.spark


def test_python_workers_connect_back_over_unix_sockets(spark: Any) -> None:
    """A worker started by this session reaches the JVM through a Unix socket, which no other
    local TCP client can take first (see ``local_spark``'s comment on ``SOCKET_DIR``), in this
    process's own socket directory."""
    seen = spark.sparkContext.parallelize([0], 1).map(
        lambda _: (os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED"), os.environ.get("PYTHON_WORKER_FACTORY_SOCK_DIR"))
    ).collect()
    assert seen == [("True", str(worker_socket_dir()))]
    assert worker_socket_dir().is_dir()


def test_socket_dirs_of_gone_processes_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """A process that ended without its exit hooks (a kill) leaves its socket directory; the
    next session's start removes it, and leaves those of running processes alone."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"jsspark-py-{int(gone.stdout)}"
    live = tmp_path / f"jsspark-py-{os.getpid()}"
    other = tmp_path / "jsspark-py-notapid"
    for path in (dead, live, other):
        (path / "sub").mkdir(parents=True)
    _remove_socket_dirs_of_gone_processes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
