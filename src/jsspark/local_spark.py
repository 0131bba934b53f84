"""A local SparkSession sized for a laptop or a 2-core CI box, with jsspark registered.

Tests, benchmarks, the quickstart and notebooks all want the same thing: ``local[N]``, no UI,
few shuffle partitions, UTC, a JVM tuned to start fast, and Python workers on *this*
interpreter (they need pyarrow and deltalake, which a bare system python lacks).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

# Streaming checkpoints on a local disk: Spark's default manager goes through Hadoop's FileContext,
# whose local file system (without Hadoop's native library, as in a pip-installed pyspark)
# forks ``chmod`` and ``readlink`` for every checkpoint file: about 40 ms each for a batch's
# offsets and commit entries. The FileSystem-based manager writes the same files (temp file,
# then rename) in about 10 ms: ``python3 dev.py bench checkpoints``.
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINTS = {
    CHECKPOINT_MANAGER: "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}

# Python workers connect back to the JVM over a Unix socket (the ``spark.python.unix.domain``
# settings below) instead of a loopback TCP port. On TCP, Spark's worker factory listens on an
# ephemeral port and takes the *first* connection as its worker: any other local client that
# reaches that port first (one reconnecting to a port that was just freed, say) fails the
# worker's start. It failed three CI runs in thirty sessions
# (``NegativeArraySizeException`` in ``SocketAuthHelper.readUtf8`` at a streaming query's
# start: the first four bytes were not a worker's). A Unix socket in a fresh path has no such
# neighbours, and needs no auth handshake. The sockets go in a directory of the process's own
# (``worker_socket_dir``), removed at exit: Spark leaves its daemon's socket file behind when it
# stops the daemon, and a killed JVM leaves all of them. A process that ends without its exit
# hooks (killed, or a notebook kernel shut down) leaves its directory: the next session started
# here removes those of processes that are gone.
SOCKET_DIR = "spark.python.unix.domain.socket.dir"


def worker_socket_dir(pid: int | None = None) -> Path:
    """Where the Python workers of process ``pid`` (this one by default) have their sockets, so
    whoever kills that process can remove them too."""
    base = Path(tempfile.gettempdir())
    if len(str(base)) > 40:  # a Unix socket's path has at most 107 bytes, and Spark adds 43
        base = Path("/tmp")
    return base / f"jsspark-py-{pid or os.getpid()}"


def _remove_socket_dirs_of_gone_processes(base: Path) -> None:
    for path in base.glob("jsspark-py-*"):
        try:
            os.kill(int(path.name.rpartition("-")[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, OSError):  # not one of ours, or another user's live process
            continue


@functools.cache
def _own_worker_socket_dir() -> str:
    """This process's ``worker_socket_dir``, made once and removed at exit."""
    path = worker_socket_dir()
    _remove_socket_dirs_of_gone_processes(path.parent)
    path.mkdir(exist_ok=True)
    atexit.register(shutil.rmtree, path, True)
    return str(path)


def local_spark(app_name: str = "jsspark", cores: int = 2, **conf: str) -> Any:
    """Get or create the process's local SparkSession; ``conf`` adds or overrides settings."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    jvm = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    settings = {
        **LOCAL_CHECKPOINTS,
        "spark.python.unix.domain.socket.enabled": "true",
        SOCKET_DIR: conf.get(SOCKET_DIR) or _own_worker_socket_dir(),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": jvm,
        "spark.executor.extraJavaOptions": jvm,
        **conf,
    }
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    from jsspark.datasource import register

    register(session)
    return session
