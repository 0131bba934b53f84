"""A thin raw-JSON JetStream API client for the differential tests: we want the server's
exact error texts, so we speak the ``$JS.API`` protocol ourselves instead of nats-py's JS layer."""

from __future__ import annotations

import itertools
import json
from typing import Any

import nats
import pytest
from nats.aio.client import Client

_names = itertools.count()


class RawJS:
    """Stream create/delete, publish with PubAck and message get, all awaited on replies (no sleeps)."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc

    @classmethod
    async def connect(cls, url: str) -> RawJS:
        return cls(await nats.connect(url, allow_reconnect=False))

    async def api(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        msg = await self.nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=5)
        return json.loads(msg.data)

    async def create_stream(self, subjects: list[str], **config: Any) -> tuple[str, dict[str, Any]]:
        """Create a uniquely named memory stream; returns its name and the raw API response."""
        name = f"SUBJ{next(_names)}"
        cfg = {"name": name, "subjects": subjects, "storage": "memory", **config}
        return name, await self.api(f"STREAM.CREATE.{name}", cfg)

    async def delete_stream(self, name: str) -> None:
        await self.api(f"STREAM.DELETE.{name}")

    async def publish(self, subject: str) -> dict[str, Any]:
        """Publish and wait for the PubAck (the message is stored once it arrives)."""
        msg = await self.nc.request(subject, b"x", timeout=5)
        return json.loads(msg.data)

    async def stored_subject(self, stream: str, seq: int) -> str:
        resp = await self.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})
        return resp["message"]["subject"]

    async def close(self) -> None:
        await self.nc.close()


def stream_error(resp: dict[str, Any]) -> tuple[int, str] | None:
    err = resp.get("error")
    return (err["err_code"], err["description"]) if err else None


@pytest.fixture
def rawjs(nats_server, run):  # type: ignore[no-untyped-def]
    js = run(RawJS.connect(nats_server.url))
    try:
        yield js
    finally:
        run(js.close())
