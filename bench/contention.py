"""Writers in separate processes publishing to one lake stream: does any of them starve?

    python3 dev.py bench contention [--writers 1,8] [--seconds 20] [--prefill 20000] [--msg-ids]

Each process publishes one message at a time for ``--seconds`` (all start together), into a
stream prefilled with ``--prefill`` messages over 100 commits (what a stream that has run for a
while holds). Two writers that planned on the same version race for the next; the loser's commit
fails (``ConcurrentCommit``) and it plans again on the new version, so its wait is the price of
catching up with the winner's commit. Per row of ``--writers``, in the same run:

- per-publish wait p50 / p99 / max (from the call to its ack), attempts per publish (mean, max),
  messages/s over all writers, publishes that failed;
- against one writer alone (the first row, the anchor): p99 and max wait over its p50, and
  messages/s over its messages/s.

With 2 cores, several writers cannot be faster than one: what matters is that every writer gets
its turn (a bounded max wait and attempts) rather than losers reading the whole table again.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PREFILL_COMMITS = 100


def writer(location: str, wid: int, seconds: float, msg_ids: bool, go: Any, out: Any) -> None:
    import jsspark
    from jsspark.engine import table as T

    commit = T.MessageTable.commit
    lost = [0]

    def counted(self: Any, *a: Any, **k: Any) -> int:
        try:
            return commit(self, *a, **k)
        except T.ConcurrentCommit:
            lost[0] += 1
            raise

    T.MessageTable.commit = counted  # type: ignore[method-assign]
    lake = jsspark.connect(location)
    lake.stream_info("S")  # open the stream before the start
    waits: list[float] = []
    attempts: list[int] = []
    errors: list[str] = []
    go.wait()
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        i += 1
        lost[0] = 0
        headers = {"Nats-Msg-Id": f"w{wid}-{i}"} if msg_ids else None
        t0 = time.monotonic()
        try:
            lake.publish(f"s.{wid}.{i % 8}", b"x" * 100, headers=headers)
        except Exception as e:  # counted and shown, the run goes on
            errors.append(repr(e)[:200])
        waits.append(time.monotonic() - t0)
        attempts.append(lost[0] + 1)
    out.put((wid, waits, attempts, errors))


def run(root: Path, writers: int, seconds: float, prefill: int, msg_ids: bool) -> dict[str, Any]:
    import jsspark

    location = str(root / f"lake-{writers}")
    lake = jsspark.connect(location)
    lake.add_stream(name="S", subjects=["s.>"])
    per = max(1, prefill // PREFILL_COMMITS)
    for k in range(0, prefill, per):
        n = min(per, prefill - k)
        lake.publish_batch("S", pa.table({"subject": [f"s.pre.{j % 64}" for j in range(n)],
                                          "data": [b"x" * 100] * n}))
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(location, w, seconds, msg_ids, go, out)) for w in range(writers)]
    for p in procs:
        p.start()
    time.sleep(3)  # imports and opening the stream, outside the measured time
    t0 = time.monotonic()
    go.set()
    res = [out.get(timeout=seconds + 600) for _ in procs]
    elapsed = time.monotonic() - t0
    for p in procs:
        p.join(timeout=60)
    waits = sorted(w for r in res for w in r[1])
    attempts = [a for r in res for a in r[2]]
    errors = [e for r in res for e in r[3]]
    state = lake.stream_info("S").state
    ok = len(waits) - len(errors)
    assert state.messages == prefill + ok and state.last_seq == prefill + ok, (state, prefill, ok)
    return {
        "writers": writers, "msgs": ok, "rate": ok / elapsed, "errors": errors,
        "p50": waits[len(waits) // 2], "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))], "max": waits[-1],
        "att_mean": statistics.fmean(attempts), "att_max": max(attempts),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writers", default="1,8", help="comma-separated; the first is the anchor")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--prefill", type=int, default=20_000)
    ap.add_argument("--msg-ids", action="store_true")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="jsspark-bench-contention-"))
    counts = [int(x) for x in args.writers.split(",")]
    print(f"publish one message at a time, {args.seconds:g}s per row, stream prefilled with {args.prefill:,} "
          f"messages{', msg ids' if args.msg_ids else ''}; in {root}")
    print(f"{'writers':>7} {'msgs':>6} {'msg/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>8} "
          f"{'att avg':>7} {'att max':>7} {'errors':>6} | {'p99/p50₁':>8} {'max/p50₁':>8} {'rate/rate₁':>10}")
    anchor: dict[str, Any] | None = None
    for n in counts:
        r = run(root, n, args.seconds, args.prefill, args.msg_ids)
        anchor = anchor or r
        print(f"{n:>7} {r['msgs']:>6} {r['rate']:>7.1f} {r['p50'] * 1e3:>7.0f} {r['p99'] * 1e3:>7.0f} "
              f"{r['max'] * 1e3:>8.0f} {r['att_mean']:>7.2f} {r['att_max']:>7} {len(r['errors']):>6} | "
              f"{r['p99'] / anchor['p50']:>8.1f} {r['max'] / anchor['p50']:>8.1f} {r['rate'] / anchor['rate']:>10.2f}",
              flush=True)
        for e in sorted(set(r["errors"]))[:3]:
            print("   error:", e)


if __name__ == "__main__":
    main()
