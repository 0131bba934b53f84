"""Fixtures for live-NATS tests: a sync NATS client on the module's private server (``server``,
from the root conftest)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from jsspark.nats_server import NatsServer


def rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch of the server's RFC 3339 time (nanosecond fraction kept)."""
    main, _, frac = text.rstrip("Z").partition(".")
    secs = int(datetime.fromisoformat(main + "+00:00").timestamp())
    return secs * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])


class SyncNats:
    """A nats-py connection on its own loop thread, usable from any thread (Spark's
    foreachBatch runs on a py4j callback thread)."""

    def __init__(self, url: str) -> None:
        import nats

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self.run(nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2))

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def api(self, subject: str, body: dict[str, Any] | None = None, timeout: float = 10) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        msg = self.run(self.nc.request(f"$JS.API.{subject}", payload, timeout=timeout))
        return json.loads(msg.data)

    def add_stream(self, **cfg: Any) -> dict[str, Any]:
        resp = self.api(f"STREAM.CREATE.{cfg['name']}", cfg)
        assert "error" not in resp, resp
        return resp

    def state(self, stream: str, deleted_details: bool = False) -> dict[str, Any]:
        resp = self.api(f"STREAM.INFO.{stream}", {"deleted_details": True} if deleted_details else None)
        assert "error" not in resp, resp
        return resp["state"]

    def removed_upto(self, stream: str) -> int:
        """The highest seq the stream no longer holds: below ``first_seq``, or an interior delete
        (an ack that covers a range removes its newest message first: ``processAckMsgLocked``)."""
        st = self.state(stream, deleted_details=True)
        if st["messages"] == 0:
            return int(st["last_seq"])
        return max([int(st["first_seq"]) - 1, *(st.get("deleted") or [])])

    def publish_many(self, items: list[tuple[str, bytes, dict[str, str] | None]], window: int = 500) -> list[int]:
        """JetStream publishes with a bounded window of outstanding acks; returns the seqs."""

        async def go() -> list[int]:
            js = self.nc.jetstream()
            seqs: list[int] = []
            for i in range(0, len(items), window):
                acks = await asyncio.gather(*(js.publish(s, d, headers=h) for s, d, h in items[i : i + window]))
                seqs.extend(a.seq for a in acks)
            return seqs

        return self.run(go(), timeout=300)

    def get(self, stream: str, seq: int) -> dict[str, Any]:
        """One message via STREAM.MSG.GET: subject, data, header pairs, ts_ns."""
        from jsspark.engine.headers import decode

        resp = self.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})
        assert "message" in resp, f"{stream} seq {seq}: {resp}"
        m = resp["message"]
        hdrs = decode(base64.b64decode(m["hdrs"]))[0] if m.get("hdrs") else None
        return {"seq": m["seq"], "subject": m["subject"], "data": base64.b64decode(m.get("data", "")),
                "headers": hdrs or None, "ts_ns": rfc3339_ns(m["time"])}

    def close(self) -> None:
        try:
            self.run(self.nc.close(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture
def nats(server: NatsServer) -> Iterator[SyncNats]:
    c = SyncNats(server.url)
    try:
        yield c
    finally:
        c.close()
