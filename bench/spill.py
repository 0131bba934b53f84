"""Spill benchmark: the live source's driver half with ``spillDir`` on an object store against a
local ``spillDir``, same server, same messages, one run.

    python3 dev.py bench spill [--messages 200000] [--size 100] [--put-latency-ms 30] [--repeat 2]

A nats-server on loopback holds ``--messages`` messages; for each place the live source's
``Ingestor`` (ordered consumer, no Spark) receives them all and plans batches over its spill
files as a query would (``latest`` / ``plan`` / ``commit``), so a batch counts only once its
files are on the store. The object store is moto's S3 server on loopback, each put delayed by
``--put-latency-ms`` (an object store's round trip; moto on loopback answers in about a
millisecond, a cloud store in tens). The local spill is the anchor: the ratio shows what the
store's round trips still cost delivery (spill puts run in the background, ``MAX_PUTS`` at
once). On a 2-core machine moto's own CPU competes with the ingestor and the server.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import Nats
from jsspark.datasource.options import prefixed_storage_options
from jsspark.live import spill as S
from jsspark.live.ingestor import Ingestor
from jsspark.live.options import parse_live_read_options
from jsspark.nats_server import NatsServer
from tests.s3server import start_moto


def with_put_latency(seconds: float) -> None:
    """Every object-store spill write waits ``seconds`` first (local writes do not)."""
    real = S.SpillDir.write

    def write(self: S.SpillDir, name: str, batch: Any) -> str:
        if self.remote:
            time.sleep(seconds)
        return real(self, name, batch)

    S.SpillDir.write = write  # type: ignore[method-assign]


def drain(url: str, origin: str, n: int, spill: str, storage: dict[str, str] | None) -> float:
    """Seconds for the ingestor to receive ``n`` messages and plan and commit batches over them."""
    opts = parse_live_read_options({"servers": url, "stream": origin, "consumerMode": "ordered", "spillDir": spill,
                                    "maxAckPending": str(n), **prefixed_storage_options(storage)})
    t0 = time.perf_counter()
    ing = Ingestor(opts)
    ing.start(None)
    try:
        start = ing.floor
        while start < n:
            end = ing.latest(start, None, None)
            if end > start:
                ing.plan(start, end)
                ing.commit(end)
                start = end
        return time.perf_counter() - t0
    finally:
        ing.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--put-latency-ms", type=float, default=30.0)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each place, interleaved; the median counts")
    args = ap.parse_args()
    n = args.messages
    with_put_latency(args.put_latency_ms / 1000)
    moto, storage = start_moto()
    runs: dict[str, list[float]] = {"local": [], "object store": []}
    try:
        with NatsServer() as srv:
            nats = Nats(srv.url)
            nats.api("STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"], "storage": "file"})
            nats.publish("O", n, args.size)
            for i in range(max(1, args.repeat)):
                runs["local"].append(drain(srv.url, "O", n, tempfile.mkdtemp(prefix="jsspark-bench-spill-"), None))
                runs["object store"].append(drain(srv.url, "O", n, f"s3://lake/spill-{i}", storage))
            nats.close()
    finally:
        moto.terminate()
        moto.wait(10)
    med = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
    print(f"{n:,} messages of {args.size} B, ingestor alone (ordered consumer, no Spark); object store: moto S3 "
          f"on loopback + {args.put_latency_ms:g} ms per put")
    print("  seconds per run: " + "; ".join(f"{k} {', '.join(f'{t:.2f}' for t in v)}" for k, v in runs.items()))
    for k, t in med.items():
        print(f"  spillDir {k:<14s} {t:7.2f} s {n / t:11,.0f} msg/s")
    print(f"  object store / local = {med['local'] / med['object store']:.2f}")


if __name__ == "__main__":
    main()
