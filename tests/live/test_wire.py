"""Bulk delivery (``jsspark.live.wire``) on a real nats-server: a routed subscription gets every
frame exactly as sent, in order, while the same connection keeps serving nats-py callbacks,
requests and PINGs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jsspark.live import wire


def test_routed_subscription_gets_every_frame_in_order_and_the_rest_still_works(server: Any, run: Any) -> None:
    from jsspark.live.client import client_class

    async def scenario() -> None:
        nc = wire.client_class(client_class())()
        await nc.connect(server.url, ping_interval=0.2)  # client PINGs interleave with deliveries
        other = client_class()()  # its flush() puts the "svc" SUB on the server before nc's requests
        await other.connect(server.url)
        got: list[tuple[bytes, bytes, bytes | None, bytes]] = []
        runs = 0

        def on_run(subjects: list[bytes], replies: list[bytes], hdrs: list[bytes | None], data: list[bytes]) -> None:
            nonlocal runs
            runs += 1
            got.extend(zip(subjects, replies, hdrs, data, strict=True))

        plain: list[bytes] = []

        async def on_plain(msg: Any) -> None:
            plain.append(msg.data)

        stray: list[Any] = []

        async def unrouted(msg: Any) -> None:
            stray.append(msg)

        sub = await nc.subscribe("bulk.>", cb=unrouted)
        wire.route(nc, sub, on_run)
        await nc.subscribe("plain", cb=on_plain)

        async def echo(msg: Any) -> None:
            await other.publish(msg.reply, msg.data[::-1])

        await other.subscribe("svc", cb=echo)
        await other.flush()
        await nc.flush()

        sent = []
        big = bytes(range(256)) * 400  # 100 KiB: one payload spans several socket reads
        for i in range(3000):
            subject = f"bulk.{i % 7}"
            reply = f"r.{i}" if i % 3 else ""
            data = big if i % 500 == 7 else (b"" if i % 11 == 0 else f"m{i}\r\nMSG x 1 2\r\n".encode())
            headers = {"K": f"v{i}", "Dup": "a"} if i % 5 == 0 else None
            await other.publish(subject, data, reply=reply, headers=headers)
            sent.append((subject.encode(), reply.encode(), headers, data))
            if i % 400 == 0:
                await other.publish("plain", f"p{i}".encode())
                assert (await nc.request("svc", f"q{i}".encode(), timeout=5)).data == f"q{i}".encode()[::-1]
        await other.flush()
        for _ in range(500):
            if len(got) == len(sent) and len(plain) == 8:
                break
            await asyncio.sleep(0.01)
        assert stray == [] and runs < len(sent)  # deliveries came in bulk, none through nats-py
        assert [(s, r, d) for s, r, _, d in got] == [(s, r, d) for s, r, _, d in sent]
        from jsspark.engine.headers import decode

        for (_, _, raw, _), (_, _, headers, _) in zip(got, sent, strict=True):
            assert (decode(raw)[0] if raw else None) == (list(headers.items()) if headers else None)
        assert plain == [f"p{i}".encode() for i in range(0, 3000, 400)]

        wire.route(nc, sub, None)  # unrouted again: nats-py's callback path takes over
        seen: list[bytes] = []

        async def cb(msg: Any) -> None:
            seen.append(msg.data)

        await nc.subscribe("after", cb=cb)
        await nc.flush()  # the SUB is at the server before the publish
        await other.publish("after", b"x")
        await other.flush()
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen == [b"x"]
        await nc.close()
        await other.close()

    run(scenario())


def test_an_unsupported_client_is_refused_with_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from nats.aio import client as nats_client

    from jsspark.live.client import client_class

    monkeypatch.setattr(nats_client, "__version__", "3.0.0")
    with pytest.raises(wire.BulkDeliveryUnsupported, match=r"nats-py 3\.0\.0 is not supported"):
        wire.client_class(client_class())
