"""A thin raw-JSON JetStream API client for the differential tests: we want the server's
exact error texts, so we speak the ``$JS.API`` protocol ourselves instead of nats-py's JS layer."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import nats
from nats.aio.client import Client

_names = itertools.count()


class RawJS:
    """Stream create/delete, publish with PubAck and message get, all awaited on replies (no sleeps)."""

    def __init__(self, nc: Client, url: str) -> None:
        self.nc = nc
        self.url = url

    @classmethod
    async def connect(cls, url: str) -> RawJS:
        return cls(await nats.connect(url, allow_reconnect=False), url)

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


async def core_deliveries(url: str, filter: str, subjects: list[str]) -> list[str]:
    """Subjects a core-NATS subscription on ``filter`` receives when ``subjects`` are published.

    Speaks the text protocol directly: nats-py refuses filters such as ``foo.*bar`` that the
    server accepts. The server answers our final PING only after routing every earlier PUB,
    so reading up to the PONG collects all deliveries.
    """
    host, port = url.removeprefix("nats://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        await reader.readline()  # INFO
        pubs = "".join(f"PUB {s} 0\r\n\r\n" for s in subjects)
        writer.write(f'CONNECT {{"verbose":false,"pedantic":false}}\r\nSUB {filter} 1\r\nPING\r\n'.encode())
        writer.write(f"{pubs}PING\r\n".encode())
        await writer.drain()
        got: list[str] = []
        pongs = 0
        while pongs < 2:
            line = (await asyncio.wait_for(reader.readline(), 5)).decode().rstrip("\r\n")
            if line == "PONG":
                pongs += 1
            elif line.startswith("MSG "):
                _, subject, _sid, size = line.split(" ")
                await reader.readexactly(int(size) + 2)
                got.append(subject)
            elif line.startswith("-ERR"):
                raise AssertionError(f"server refused {filter!r}: {line}")
        return got
    finally:
        writer.close()
        await writer.wait_closed()
