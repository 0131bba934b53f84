"""Rollups and subject-filtered purges on a large lake stream, against a plain publish on it.

    python3 dev.py bench rollups [--messages 1000000] [--subjects 10000] [--ops 15]

Builds one lake stream (``allow_rollup_hdrs``) of ``--messages`` 100-byte messages spread
evenly over ``--subjects`` subjects, once. Then, in this process (warm: index and subject
stats loaded), round after round, each operation on a subject none before touched (so each
removes that subject's whole share of the stream):

- the anchor: a plain publish on an existing subject;
- a publish with ``Nats-Rollup: sub`` (purges its subject down to it); one on a subject that the
  previous round rolled up (purges that one message: a KV purge repeated, the steady state), and
  one on a subject new to the stream (purges nothing);
- ``$JS.API.STREAM.PURGE`` with ``filter`` (a subject), with ``filter`` and ``keep: 10``, and with
  ``filter`` and ``seq`` (half of that subject's messages);

then, with ``max_msgs_per_subject`` set to the per-subject count, a publish on a subject at its
limit (pushes its oldest out, stored at the start), one on a subject written again and again
(its oldest is among the newest messages), and one on a new subject on the same config, and last a
single ``Nats-Rollup: all`` publish (purges the whole stream down to it: its removal rewrites or
drops every data file, so it grows with the stream whatever the planning costs). Printed: p50 and
p99 of each, and p50 / the anchor's p50. A rollup of one subject removes about as many messages as
a purge of it; neither should cost much more than the plain publish whatever the stream's size.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

import jsspark
from jsspark.engine import headers as H

STREAM = "LAKE"


def ms(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--subjects", type=int, default=10_000)
    ap.add_argument("--ops", type=int, default=15, help="rounds (each operation once per round)")
    args = ap.parse_args()
    per = args.messages // args.subjects
    assert per >= 2 and args.subjects >= 6 * args.ops + 10, "too few messages per subject, or too few subjects"
    work = Path(tempfile.mkdtemp(prefix="jsspark-bench-rollups-"))
    try:
        lake = jsspark.connect(str(work / "lake"))
        config = {"name": STREAM, "subjects": ["r.>"], "allow_rollup_hdrs": True, "duplicate_window": 0}
        lake.add_stream(config)
        payload = b"x" * 100
        t0 = time.perf_counter()
        step = 200_000
        for lo in range(0, args.messages, step):
            n = min(step, args.messages - lo)
            lake.publish_batch(STREAM, pa.table({"subject": [f"r.s{i % args.subjects}" for i in range(lo, lo + n)],
                                                 "data": pa.array([payload] * n, pa.binary())}))
        print(f"{args.messages:,} messages on {args.subjects:,} subjects ({per} each) stored in "
              f"{time.perf_counter() - t0:.1f} s")
        subjects = iter(f"r.s{i}" for i in range(args.subjects))
        for _ in range(5):  # the first publishes load what later ones keep (index, subject stats, lookup)
            lake.publish(next(subjects), payload)
        roll_sub = [(H.ROLLUP, "sub")]
        ops: dict[str, list[float]] = {k: [] for k in (
            "anchor: plain publish", "publish, Nats-Rollup: sub", "  the same, on a subject rolled up before",
            "  the same, on a new subject", "purge filter=<subject>",
            "purge filter=<subject> keep=10", "purge filter=<subject> seq=<half>")}
        labels = list(ops)
        lake.publish("r.again", payload, headers=roll_sub)
        for k in range(args.ops):
            plain, roll, p_all, p_keep, p_seq = (next(subjects) for _ in range(5))
            i = int(p_seq[3:])
            half = i + 1 + (per // 2) * args.subjects  # the seq of its (per/2 + 1)th message
            before = lake.stream_info(STREAM).state.messages
            ops[labels[0]].append(timed(lambda s=plain: lake.publish(s, payload)))
            ops[labels[1]].append(timed(lambda s=roll: lake.publish(s, payload, headers=roll_sub)))
            ops[labels[2]].append(timed(lambda: lake.publish("r.again", payload, headers=roll_sub)))
            ops[labels[3]].append(timed(lambda k=k: lake.publish(f"r.fresh.{k}", payload, headers=roll_sub)))
            ops[labels[4]].append(timed(lambda s=p_all: lake.purge(STREAM, subject=s)))
            ops[labels[5]].append(timed(lambda s=p_keep: lake.purge(STREAM, subject=s, keep=10)))
            ops[labels[6]].append(timed(lambda s=p_seq, h=half: lake.purge(STREAM, subject=s, seq=h)))
            after = lake.stream_info(STREAM).state.messages
            expected = before + 3 - (per) - per - (per - 10) - per // 2  # the rollup removes per, stores 1
            assert after == expected, (before, after, expected)

        # the per-subject limit: each subject holds ``per``; a publish on one pushes its oldest out
        lake.update_stream({**config, "max_msgs_per_subject": per})
        lake.publish("r.new.warm", payload)
        lake.publish_batch(STREAM, pa.table({"subject": ["r.hot"] * per, "data": pa.array([payload] * per, pa.binary())}))
        at_limit, hot, fresh = [], [], []
        for k in range(args.ops):
            s = next(subjects)
            at_limit.append(timed(lambda s=s: lake.publish(s, payload)))
            hot.append(timed(lambda: lake.publish("r.hot", payload)))
            fresh.append(timed(lambda k=k: lake.publish(f"r.new.{k}", payload)))
        assert lake.stream_info(STREAM, subjects_filter=s).state.subjects == {s: per}
        state = lake.stream_info(STREAM).state
        messages = state.messages
        t_all = timed(lambda: lake.publish(next(subjects), payload, headers=[(H.ROLLUP, "all")]))
        assert lake.stream_info(STREAM).state.messages == 1

        a50 = statistics.median(ops[labels[0]])
        print(f"\n{'operation':42}{'p50 ms':>9}{'p99 ms':>9}{'p50/anchor':>12}")
        for label, xs in ops.items():
            print(f"{label:42}{ms(xs, 50):9.1f}{ms(xs, 99):9.1f}{statistics.median(xs) / a50:12.2f}")
        print(f"{'max_msgs_per_subject: publish at the limit':42}{ms(at_limit, 50):9.1f}{ms(at_limit, 99):9.1f}"
              f"{statistics.median(at_limit) / a50:12.2f}")
        print(f"{'  on a subject written again and again':42}{ms(hot, 50):9.1f}{ms(hot, 99):9.1f}"
              f"{statistics.median(hot) / a50:12.2f}")
        print(f"{'max_msgs_per_subject: on a new subject':42}{ms(fresh, 50):9.1f}{ms(fresh, 99):9.1f}"
              f"{statistics.median(fresh) / a50:12.2f}")
        print(f"{'publish, Nats-Rollup: all (once)':42}{t_all * 1000:9.1f}{'':9}{t_all / a50:12.2f}"
              f"   (removed {messages:,} messages)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
