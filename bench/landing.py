"""Landing memory benchmark: the peak memory of a lake sink's landing commit against its batch.

    python3 dev.py bench landing [--messages 16] [--size-mib 4] [--form source|mirror]
                                 [--per-file 4] [--compressible] [--batches 3]

A durable-source job lands each micro-batch in the sink's driver-side commit: the messages are
read by reference from the live source's spill files (``LakeSinkMessage.spill``), narrowed to
the origin columns, and stored in one Delta commit through delta-rs. No server and no Spark
here: ``--messages`` messages of ``--size-mib`` MiB are written as spill files of ``--per-file``
messages each, and ``LakeStreamWriter.commit`` lands them, ``--batches`` times (new files, next
batch id). Each batch's peak resident memory (``VmHWM``, reset before it; the spill files'
pages it maps count) above what the process held before its first landing is printed against
the batch's payload bytes: what a job's sink-commit process needs above its baseline. Payloads are random (incompressible) unless ``--compressible`` (one byte
repeated, as ``/tmp`` measurement scripts often send). The target: a small multiple (2-3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jsspark
from jsspark.datasource.options import parse_write_options
from jsspark.live import spill as S
from jsspark.sink.lake_sink import LakeSinkMessage, LakeStreamWriter


def status(key: str) -> int:
    """A ``/proc/self/status`` value in bytes (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def spill_batch(folder: Path, first: int, n: int, size: int, per_file: int, compressible: bool) -> LakeSinkMessage:
    """``n`` messages from origin seq ``first`` in spill files, as one task's reference message."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for lo in range(first, first + n, per_file):
        seqs = range(lo, min(first + n, lo + per_file))
        rows = [(f"big.{s % 4}", s, time.time_ns(), None, bytes([s % 256]) * size if compressible else os.urandom(size),
                 s, 0) for s in seqs]
        paths.append(S.write_chunk(str(folder), S.rows_to_batch("BIG", "durable", rows)).path)
    part = S.SpillPartition(tuple(paths), first - 1, first + n - 1, seqs=range(first, first + n))
    return LakeSinkMessage(n, spill=(part.to_json(),))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=16)
    ap.add_argument("--size-mib", type=float, default=4.0)
    ap.add_argument("--form", choices=["source", "mirror"], default="source")
    ap.add_argument("--per-file", type=int, default=4, help="messages per spill file")
    ap.add_argument("--compressible", action="store_true")
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    n, size = args.messages, int(args.size_mib * (1 << 20))
    work = Path(tempfile.mkdtemp(prefix="jsspark-bench-landing-"))
    try:
        lake = jsspark.connect(str(work / "lake"))
        if args.form == "source":
            lake.add_stream(name="LAKE", subjects=["lake.>"], sources=[{"name": "BIG"}])
        else:
            lake.add_stream(name="LAKE", mirror={"name": "BIG"})
        writer = LakeStreamWriter(parse_write_options(
            {"path": str(work / "lake"), "stream": "LAKE", "form": args.form, "txnAppId": "bench", "ackSource": "false"}))
        batch = n * size
        print(f"landing {n} x {args.size_mib:g} MiB = {batch / (1 << 20):.0f} MiB a batch, form {args.form}, "
              f"{'compressible' if args.compressible else 'random'} payloads, {args.per_file} messages a spill file")
        ratios = []
        base = status("VmRSS")
        for b in range(args.batches):
            message = spill_batch(work / f"spill-{b}", 1 + b * n, n, size, args.per_file, args.compressible)
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            t0 = time.perf_counter()
            writer.commit([message], b)
            took = time.perf_counter() - t0
            peak = status("VmHWM") - base
            ratios.append(peak / batch)
            print(f"  batch {b}: {took:5.2f} s, peak {peak / (1 << 20):6.0f} MiB above the {base / (1 << 20):.0f} MiB "
                  f"before the first = {peak / batch:.2f} x the batch; after it {status('VmRSS') / (1 << 20):.0f} MiB")
            shutil.rmtree(work / f"spill-{b}")
        stored = lake.stream_info("LAKE").state
        assert stored.messages == n * args.batches, stored
        print(f"  peak / batch bytes: max {max(ratios):.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
