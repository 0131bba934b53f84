"""``local_spark``'s session settings that change how Spark runs, checked where they act."""

from __future__ import annotations

import os
from typing import Any

import pytest

from jsspark.local_spark import worker_socket_dir

pytestmark = pytest.mark.spark


def test_python_workers_connect_back_over_unix_sockets(spark: Any) -> None:
    """A worker started by this session reaches the JVM through a Unix socket, which no other
    local TCP client can take first (``PYTHON_WORKERS_ON_UNIX_SOCKETS``), in this process's own
    socket directory."""
    seen = spark.sparkContext.parallelize([0], 1).map(
        lambda _: (os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED"), os.environ.get("PYTHON_WORKER_FACTORY_SOCK_DIR"))
    ).collect()
    assert seen == [("True", str(worker_socket_dir()))]
    assert worker_socket_dir().is_dir()
