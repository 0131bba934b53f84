"""Filling a nats-server stream fast, for the benches that compare against one.

Core publishes, sent in windows: at most ``WINDOW`` messages published but not yet stored,
well under the server's 100,000-message ingest queue, so none is dropped (a core publish
beyond that queue is). Acked ``publish_async`` calls cost nats-py far more per message: 10M
of them took 19 minutes in bench/replay.py, against under a minute this way.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

WINDOW = 50_000
CHUNK = 10_000


async def last_seq(nc: Any, stream: str) -> int:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=30)
    return int(json.loads(msg.data)["state"]["last_seq"])


async def fill(nc: Any, stream: str, subjects: list[str], payload: bytes, n: int, msg_ids: bool = False) -> float:
    """Publish ``n`` messages (subjects in turn) into ``stream``; seconds until it holds them all.
    ``msg_ids``: each carries a ``Nats-Msg-Id`` header (unique in the stream), as producers that
    deduplicate send them."""
    base = await last_seq(nc, stream)
    t0 = time.perf_counter()
    sent = 0
    k = len(subjects)
    while sent < n:
        step = min(CHUNK, n - sent)
        for i in range(sent, sent + step):
            headers = {"Nats-Msg-Id": f"{stream}-{base + i + 1}"} if msg_ids else None
            await nc.publish(subjects[i % k], payload, headers=headers)
        sent += step
        await nc.flush()
        while await last_seq(nc, stream) - base < sent - WINDOW:
            await asyncio.sleep(0.002)
    while await last_seq(nc, stream) - base < n:
        await asyncio.sleep(0.002)
    return time.perf_counter() - t0
