"""Single publishes into a stream of many subjects (a KV bucket's shape) against a one-row Delta append.

    python3 dev.py bench puts [--keys 1000000] [--puts 30] [--cold 6] [--value-size 100]

A lake stream shaped like a KV bucket (``max_msgs_per_subject: 1``, discard new, rollups
allowed) holds ``--keys`` subjects, one message each. Then, in this process (warm: the stream's
index and subject stats are loaded), ``--puts`` single publishes on existing keys (each
replaces the key's message: the per-subject limit removes the old one in the same commit) and
as many on new keys. The anchor, timed in between (a put, an anchor append, ...): a one-row
``write_deltalake`` append to a plain table, the Delta commit every publish makes at the least.
Printed: p50/p99 of each and the ratio of the medians (anchor / put: 1.0 would be a put that
costs only its Delta commit). What a publish does besides that commit should not grow with the
number of subjects; at a million keys it once took 1.2 s per put. The warm-up makes a few puts:
a process builds its dict of subjects (``SubjectStats``'s lookup, 0.4 s at a million) at its
fourth lookup, once.

Values are ``--value-size`` random (incompressible) bytes. A put on an existing key rewrites
the data file that held the old value (no deletion vectors), so its cost grows with the value
size where the anchor's does not; the bench also prints the Parquet bytes each such put wrote.

Then ``--cold`` one-off puts, each in a new process as a CLI user makes them (``jsspark pub``):
wall time, process start and imports included, against a new process that imports
``deltalake`` and makes the one-row append. The first loads the index by reading the table and
saves a snapshot of it; the others load that snapshot and replay the files changed since (the
p50 is theirs).

``--ttl`` makes it a bucket with per-key TTLs (``allow_msg_ttl``; every hundredth key stored
with ``Nats-TTL: 1h``): every put then also needs when each stored message expires, which
lives in the headers. The first cold put reads every header and saves the expiries beside the
index snapshot; the others load them and read only the headers of the files changed since.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

import jsspark
from jsspark.engine import headers as H


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def _parquet_bytes(root: Path) -> int:
    """Bytes of every Parquet file under ``root`` (vacuum is far off: none is deleted here)."""
    return sum(f.stat().st_size for f in root.rglob("*.parquet"))


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--puts", type=int, default=30)
    ap.add_argument("--cold", type=int, default=6, help="one-off puts, each in a new process")
    ap.add_argument("--ttl", action="store_true", help="a bucket with per-key TTLs (allow_msg_ttl)")
    ap.add_argument("--value-size", type=int, default=100, help="bytes of each value (random)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jsspark-bench-puts-"))
    try:
        lake = jsspark.connect(str(work / "lake"))
        lake.add_stream({"name": "KV_B", "subjects": ["$KV.B.>"], "max_msgs_per_subject": 1, "discard": "new",
                         "allow_rollup_hdrs": True, "deny_delete": True, "allow_direct": True,
                         "allow_msg_ttl": args.ttl})
        step = 200_000
        rng = np.random.default_rng(1)

        def values(n: int) -> pa.Array:
            size = args.value_size
            flat = pa.py_buffer(rng.bytes(n * size))
            return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * size),
                                                          flat])

        t0 = time.perf_counter()
        for lo in range(0, args.keys, step):
            n = min(step, args.keys - lo)
            batch = {"subject": [f"$KV.B.k{i}" for i in range(lo, lo + n)], "data": values(n)}
            if args.ttl:
                batch["headers"] = H.to_arrow([[(H.TTL, "1h")] if i % 100 == 0 else None for i in range(lo, lo + n)])
            lake.publish_batch("KV_B", pa.table(batch))
        print(f"{args.keys:,} keys stored in {time.perf_counter() - t0:.1f} s")
        anchor_path = str(work / "anchor")
        one = pa.table({"subject": ["$KV.B.x"], "data": values(1)})
        write_deltalake(anchor_path, one)
        for i in range(5):  # the first put loads what later ones keep; the fourth lookup builds the dict
            lake.publish(f"$KV.B.k{i}", b"warm")
        existing, fresh, anchor = [], [], []
        written = 0
        for i in range(args.puts):
            for times, subject in ((existing, f"$KV.B.k{(i * 7919) % args.keys}"), (fresh, f"$KV.B.new{i}")):
                value = values(1)[0].as_py()
                size = _parquet_bytes(work / "lake")
                start = time.perf_counter()
                lake.publish(subject, value)
                times.append(time.perf_counter() - start)
                if times is existing:
                    written += _parquet_bytes(work / "lake") - size
                start = time.perf_counter()
                write_deltalake(anchor_path, one, mode="append")
                anchor.append(time.perf_counter() - start)
        state = lake.stream_info("KV_B").state
        assert state.messages == args.keys + args.puts and state.num_subjects == args.keys + args.puts, state
        cli = [str(Path(sys.executable).with_name("jsspark")), "--location", str(work / "lake"), "pub"]
        append = ("import sys, pyarrow as pa; from deltalake import write_deltalake; write_deltalake(sys.argv[1], "
                  "pa.table({'subject': ['$KV.B.x'], 'data': pa.array([b'v' * 100], pa.binary())}), mode='append')")
        cold, cold_anchor = [], []
        for i in range(args.cold):
            cold.append(wall([*cli, f"$KV.B.k{(i * 104729) % args.keys}", "w" * 100]))
            cold_anchor.append(wall([sys.executable, "-c", append, anchor_path]))
        a50 = statistics.median(anchor)
        print(f"{'':34}{'p50 ms':>9}{'p99 ms':>9}{'anchor/put':>12}")
        for label, times in (("put on an existing key (replaces)", existing), ("put on a new key", fresh),
                             ("anchor: one-row Delta append", anchor)):
            print(f"{label:34}{p(times, 50):9.1f}{p(times, 99):9.1f}{a50 / statistics.median(times):12.2f}")
        print(f"Parquet bytes a put on an existing key wrote: {written / args.puts / 1e6:.2f} MB on average "
              f"(values of {args.value_size} B)")
        if cold:
            c50 = statistics.median(cold_anchor)
            later = cold[1:] or cold
            saved = "the index and expiries snapshots" if args.ttl else "the index snapshot"
            print(f"one-off puts, each in a new process (jsspark pub), wall ms: first {cold[0] * 1000:.0f} (reads the "
                  f"table, saves {saved}), then p50 {p(later, 50):.0f}; a new process's one-row append: "
                  f"p50 {c50 * 1000:.0f}; anchor/put x{c50 / statistics.median(later):.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
