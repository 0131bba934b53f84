"""A long-running writer's commit cost: does it stay flat over thousands of small commits?

    python3 dev.py bench commits [--commits 3000] [--batch 50] [--window 500] [--without-upkeep]
                                 [--log-retention "interval 0 seconds"]

A landing job commits every micro-batch, for days. Every commit adds files (one per partition
it touches) and a log entry; ``engine/maintenance.py`` is what keeps later commits from paying
for all of them. Prints, window by window, the commits interleaved (a noisy machine slows all):

- jsspark ``publish_batch`` of ``--batch`` messages over 32 subjects, into a stream that has
  taken every earlier commit of the run (upkeep on, as shipped);
- the anchor: ``write_deltalake`` of rows in the stored form (same partitioning and writer
  properties, through a table handle as the engine writes) into a table that has no history to
  speak of (made anew every ``maintenance.EVERY`` commits, untimed): what one commit costs when
  nothing has piled up;
- with ``--without-upkeep``, for information, a second stream whose upkeep is off (what every
  commit paid before it existed).

Per window: ms per commit, files and log entries of the stream, and anchor/jsspark. At the end,
growth = the last window's jsspark cost over the first's. Target: at most 1.25 over 3,000 commits
when the log is cleaned up as the run goes (``--log-retention`` shorter than the run sets the
stream's ``delta.logRetentionDuration``). With Delta's default (30 days) the log entries stay
and every commit lists them (on a local disk; an object store lists from an offset): that
growth is printed too, as it is what a long run keeps paying until the retention is reached.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

import jsspark
from jsspark.engine import maintenance
from jsspark.engine.schema import MESSAGE_SCHEMA, PARTITION_COLUMN
from jsspark.engine.table import STATS_COLUMNS, WRITER_PROPERTIES


def batch(n: int, prefix: str = "orders") -> pa.Table:
    return pa.table({"subject": [f"{prefix}.{i % 32}" for i in range(n)], "data": [b"x" * 100] * n})


def shape(lake: jsspark.engine.lake.Lake, name: str) -> tuple[int, int]:
    """Live data files and log entries of a stream's table."""
    table = lake.stream(name).table
    files = len(table.snapshot().table.file_uris())
    log = sum(1 for p in (Path(table.uri) / "_delta_log").iterdir() if p.name.endswith(".json"))
    return files, log


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=3_000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--window", type=int, default=500)
    ap.add_argument("--without-upkeep", action="store_true")
    ap.add_argument("--log-retention", default=None, help="the stream's delta.logRetentionDuration")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="jsspark-bench-commits-"))
    shutil.rmtree(root, ignore_errors=True)
    rows = batch(args.batch)
    lake = jsspark.connect(str(root / "lake"))
    lake.add_stream(name="UPKEEP", subjects=["orders.>"])
    if args.log_retention:
        DeltaTable(lake.stream_uri("UPKEEP")).alter.set_table_properties(
            {"delta.logRetentionDuration": args.log_retention})
    if args.without_upkeep:
        lake.add_stream(name="NONE", subjects=["none.>"])
    other = batch(args.batch, "none")
    lake.publish_batch("UPKEEP", rows)  # warm-up (the Delta writer's runtime starts on the first write)
    stored = lake.stream("UPKEEP").read().select(MESSAGE_SCHEMA.names).cast(MESSAGE_SCHEMA)
    print(f"{args.commits:,} commits of {args.batch} messages (100-byte payloads, 32 subjects) in {root}; "
          f"log retention {args.log_retention or 'Delta default (30 days)'}")
    print(f"{'commits':>8}{'jsspark ms':>12}{'files':>7}{'log':>6}{'anchor ms':>11}{'ratio':>7}"
          + (f"{'no upkeep ms':>14}{'files':>7}{'log':>6}" if args.without_upkeep else ""))
    ours, anchors, none = [], [], []
    done = 0
    every = maintenance.EVERY
    anchor: DeltaTable | None = None
    anchor_dir = root / "anchor"
    while done < args.commits:
        t_ours = t_anchor = t_none = 0.0
        n = min(args.window, args.commits - done)
        for i in range(n):
            if (done + i) % every == 0:
                shutil.rmtree(anchor_dir, ignore_errors=True)
                anchor = DeltaTable.create(str(anchor_dir), MESSAGE_SCHEMA,
                                           partition_by=[PARTITION_COLUMN],
                                           configuration={"delta.dataSkippingNumIndexedCols": str(STATS_COLUMNS)})
            t0 = time.perf_counter()
            assert lake.publish_batch("UPKEEP", rows).stored == args.batch
            t_ours += time.perf_counter() - t0
            t0 = time.perf_counter()
            write_deltalake(anchor, stored, mode="append", partition_by=[PARTITION_COLUMN],
                            writer_properties=WRITER_PROPERTIES)
            t_anchor += time.perf_counter() - t0
            if args.without_upkeep:
                maintenance.EVERY = 1 << 62
                try:
                    t0 = time.perf_counter()
                    assert lake.publish_batch("NONE", other).stored == args.batch
                    t_none += time.perf_counter() - t0
                finally:
                    maintenance.EVERY = every
        done += n
        ours.append(t_ours / n)
        anchors.append(t_anchor / n)
        line = (f"{done:>8,}{1000 * ours[-1]:>12.1f}{shape(lake, 'UPKEEP')[0]:>7}{shape(lake, 'UPKEEP')[1]:>6}"
                f"{1000 * anchors[-1]:>11.1f}{anchors[-1] / ours[-1]:>7.2f}")
        if args.without_upkeep:
            none.append(t_none / n)
            files, log = shape(lake, "NONE")
            line += f"{1000 * none[-1]:>14.1f}{files:>7}{log:>6}"
        print(line, flush=True)
    print(f"\nanchor / jsspark, median over windows: {statistics.median(a / o for a, o in zip(anchors, ours, strict=True)):.2f}")
    print(f"growth of jsspark's commit cost, last window / first: {ours[-1] / ours[0]:.2f} (target <= 1.25 with --log-retention); "
          f"the anchor's: {anchors[-1] / anchors[0]:.2f}")
    if none:
        print(f"without upkeep: last window / first {none[-1] / none[0]:.2f}; "
              f"last window {1000 * none[-1]:.0f} ms a commit against {1000 * ours[-1]:.0f} ms with it")
    state = lake.stream_info("UPKEEP").state
    assert state.messages == (args.commits + 1) * args.batch, state


if __name__ == "__main__":
    main()
