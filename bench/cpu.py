"""CPU seconds of the processes a bench runs, read from Linux ``/proc`` (``None`` elsewhere).

Why: on a small machine every reading is CPU-bound, so where the CPU goes (the JVM's
Arrow-to-rows work, a source's own Python work, nats-server's delivery) says what a side can
still win, which wall-clock ratios alone do not.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, str, float, float] | None:
    """(parent pid, command name, own CPU seconds, reaped children's CPU seconds)."""
    try:
        head, _, rest = Path(f"/proc/{pid}/stat").read_text().rpartition(")")
    except OSError:
        return None
    f = rest.split()
    return int(f[1]), head.partition("(")[2], (int(f[11]) + int(f[12])) / TICK, (int(f[13]) + int(f[14])) / TICK


def process_cpu(pid: int | None) -> float | None:
    """One process's own CPU seconds so far (nats-server's, say), or ``None``."""
    st = _stat(pid) if pid is not None else None
    return st[2] if st is not None else None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class SparkCpu:
    """CPU seconds spent by Spark's local processes: the JVM's own, and the processes under it
    (Python workers, the streaming source runner), those that exited included (their time is
    in their parent's reaped-children counters)."""

    def __init__(self, spark: Any) -> None:
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        self.root = proc.pid if proc is not None and Path("/proc/self/stat").exists() else None

    def settle(self, timeout: float = 10.0) -> None:
        """Wait (bounded) until no streaming source runner is left under the JVM: a stopped
        query's runner exits after ``awaitTermination`` returns, and its CPU must not land in
        the next reading's count."""
        deadline = time.monotonic() + timeout
        while self.root is not None and time.monotonic() < deadline:
            if not any(b"python_streaming_source_runner" in _cmdline(pid) for pid, *_ in self._tree()):
                return
            time.sleep(0.02)

    def _tree(self) -> list[tuple[int, bool, float, float]]:
        """(pid, is the JVM, own CPU, reaped children's CPU) of the root and its descendants."""
        stats = {int(e.name): st for e in Path("/proc").iterdir() if e.name.isdigit() and (st := _stat(int(e.name)))}
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_) in stats.items():
            children.setdefault(ppid, []).append(pid)
        tree, frontier = [], [self.root]
        while frontier:
            pid = frontier.pop()
            if pid in stats:
                _, comm, own, reaped = stats[pid]
                tree.append((pid, comm == "java", own, reaped))
                frontier += children.get(pid, [])
        return tree

    def sample(self) -> tuple[float, float] | None:
        """(JVM, processes under it) cumulative CPU seconds, or ``None`` without ``/proc``."""
        if self.root is None:
            return None
        tree = self._tree()
        jvm = sum(own for _, is_jvm, own, _ in tree if is_jvm)
        under = sum(own for _, is_jvm, own, _ in tree if not is_jvm) + sum(reaped for *_, reaped in tree)
        return jvm, under

