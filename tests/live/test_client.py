"""jsspark's nats-py client class (``jsspark.live.client.client_class``) on a real nats-server:
``flush()`` returns only once everything queued before it has reached the server."""

from __future__ import annotations

from typing import Any

import pytest

from jsspark.live.client import client_class


async def _connect(server: Any, cls: type) -> Any:
    nc = cls()
    await nc.connect(server.url)
    return nc


def _record_writes(nc: Any) -> list[bytes]:
    """Every byte string the client hands its socket, in order."""
    sent: list[bytes] = []
    transport = nc._transport
    write, writelines = transport.write, transport.writelines

    def rec_write(data: bytes) -> None:
        sent.append(bytes(data))
        write(data)

    def rec_writelines(lines: list[bytes]) -> None:
        sent.extend(bytes(x) for x in lines)
        writelines(lines)

    transport.write, transport.writelines = rec_write, rec_writelines
    return sent


@pytest.mark.parametrize("ours", [True, False], ids=["client_class", "nats-py"])
def test_a_flush_ping_follows_the_commands_queued_before_it(server: Any, run: Any, ours: bool) -> None:
    """nats-py sends the PING ahead of a SUB still in its buffer. If nats-py stops doing that
    (the ``nats-py`` case fails), ``client_class`` no longer needs its ``_send_ping``."""
    from nats.aio.client import Client

    async def scenario() -> list[bytes]:
        nc = await _connect(server, client_class() if ours else Client)
        sent = _record_writes(nc)

        async def cb(msg: Any) -> None:
            return None

        await nc.subscribe("order.check", cb=cb)
        await nc.publish("order.check", b"x")
        await nc.flush()
        await nc.close()
        return sent

    sent = b"".join(run(scenario()))
    sub, pub, ping = sent.find(b"SUB order.check"), sent.find(b"PUB order.check"), sent.find(b"PING\r\n")
    assert min(sub, pub, ping) >= 0, sent
    assert (sub < pub < ping) is ours, sent


def test_a_subscription_flushed_on_one_connection_answers_a_request_from_another(server: Any, run: Any) -> None:
    """What the order buys: 3,000 times, subscribe + flush on one connection, then request on a
    second at once. nats-py's own client loses this race a few times in 2,000 on loopback (no
    responders)."""
    import nats

    async def scenario() -> int:
        a = await _connect(server, client_class())
        b = await nats.connect(server.url)

        async def echo(msg: Any) -> None:
            await a.publish(msg.reply, msg.data)

        answered = 0
        for i in range(3000):
            sub = await a.subscribe(f"svc.{i}", cb=echo)
            await a.flush()
            answered += (await b.request(f"svc.{i}", b"%d" % i, timeout=5)).data == b"%d" % i
            await sub.unsubscribe()
        await a.close()
        await b.close()
        return answered

    assert run(scenario()) == 3000


def test_a_flush_while_disconnected_queues_no_stray_ping(server: Any, run: Any) -> None:
    """A PING queued while disconnected would be sent after the reconnect and answered out of
    step with the PONG futures the reconnect clears, so a later flush would return one PONG
    early. While disconnected the client keeps nats-py's behaviour (nothing is queued), and after the reconnect a subscription flushed on it answers a request from
    another connection."""
    import asyncio

    import nats

    async def wait_for(cond: Any, what: str) -> None:
        for _ in range(400):
            if cond():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    async def scenario() -> tuple[list[bytes], bytes]:
        nc = client_class()()
        await nc.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        server.kill()
        await wait_for(lambda: nc.is_reconnecting, "the client to see the server gone")
        await nc.flush(timeout=5)  # returns: nats-py sends no PING while its reader is down
        await nc._send_ping()  # what flush does in the moment before nats-py's reader stops
        queued = list(nc._pending)
        server.start()
        await wait_for(lambda: nc.is_connected, "the reconnect")
        other = await nats.connect(server.url)

        async def echo(msg: Any) -> None:
            await nc.publish(msg.reply, b"back")

        await nc.subscribe("after.reconnect", cb=echo)
        await nc.flush()
        reply = await other.request("after.reconnect", b"", timeout=5)
        await other.close()
        await nc.close()
        return queued, reply.data

    queued, reply = run(scenario())
    assert b"PING\r\n" not in queued and reply == b"back"


def test_a_flush_that_timed_out_does_not_stop_the_reader(server: Any, run: Any) -> None:
    """nats-py leaves a timed-out flush's cancelled future first in line and sets a result on it
    when the late PONG comes: that error ended its read loop for good, the connection still
    saying connected (a flow-control answer's flush could time out so after a partition heals).
    The client takes that PONG and reads on: a message published after it arrives, and the
    next flush returns."""
    import asyncio

    import nats
    from nats.errors import TimeoutError as NatsTimeout

    async def scenario() -> tuple[list[bytes], bool]:
        nc = await _connect(server, client_class())
        got: list[bytes] = []

        async def cb(msg: Any) -> None:
            got.append(msg.data)

        await nc.subscribe("after.timeout", cb=cb)
        await nc.flush()
        with pytest.raises(NatsTimeout):
            await nc.flush(timeout=1e-9)  # its PONG comes after the future was cancelled
        other = await nats.connect(server.url)
        await other.publish("after.timeout", b"hello")
        await other.flush()
        for _ in range(200):  # bounded: 10 s
            if got:
                break
            await asyncio.sleep(0.05)
        await nc.flush(timeout=5)
        reading = not nc._reading_task.done()
        await other.close()
        await nc.close()
        return got, reading

    assert run(scenario()) == ([b"hello"], True)


FAKE_INFO = (b'INFO {"server_id":"FAKE","version":"2.15.0","proto":1,"max_payload":1048576,"headers":true,'
             b'"auth_required":true}\r\n')


@pytest.mark.parametrize("tls", [{"tlsHostname": "localhost"}, {"tlsCa": "CA"}, {"scheme": "tls"}],
                         ids=["tlsHostname", "tlsCa", "tls-url"])
def test_tls_wanted_and_not_offered_sends_nothing(run: Any, tmp_path: Any, tls: dict[str, str]) -> None:
    """A server (or a man in the middle) whose INFO offers no TLS: nats-py would send CONNECT,
    token and all, in plaintext (it upgrades only on ``tls_required``). As nats.go's
    ErrSecureConnWanted, the connection fails before CONNECT, naming the server."""
    import asyncio
    import ssl

    from jsspark.live.client import open_client
    from jsspark.live.options import parse_connection

    received: list[bytes] = []

    async def scenario() -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(FAKE_INFO)
            await writer.drain()
            while data := await reader.read(4096):
                received.append(data)
            writer.close()

        srv = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        opts = {"servers": f"{tls.get('scheme', 'nats')}://127.0.0.1:{port}", "token": "s3cr3t-token"}
        if "tlsCa" in tls:
            opts["tlsCa"] = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
        if "tlsHostname" in tls:
            opts["tlsHostname"] = tls["tlsHostname"]
        try:
            nc = await open_client(parse_connection(opts), 3)
            await nc.close()
            return "connected"
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        finally:
            srv.close()
            await srv.wait_closed()

    outcome = run(scenario())
    sent = b"".join(received)
    assert b"CONNECT" not in sent and b"s3cr3t-token" not in sent, sent
    assert "SecureConnWanted" in outcome and "does not offer TLS" in outcome and "127.0.0.1:" in outcome, outcome


@pytest.mark.parametrize("answers", [True, False], ids=["answering", "stalled"])
def test_a_server_ping_before_the_connect_pong_leaves_a_working_connection(run: Any, answers: bool) -> None:
    """A server may send its first RTT PING ahead of the PONG that answers the client's connect
    PING (nats-io/nats-server#1174; nats-io/nats.py#93). nats-py takes that PING for the end of
    the handshake and leaves the client "connecting": its flusher stops at once, and every
    ``flush()`` returns without waiting for a PONG, so an at-most-once batch sent to a stalled
    server counted as delivered (seen once in CI). A server that answers: the PUB reaches it
    ahead of the flush's PING, and its PING gets the client's PONG. A stalled one (answers
    nothing after the handshake): the flush times out."""
    import asyncio

    got: list[bytes] = []

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"server_id":"FAKE","version":"2.15.1","proto":1,"headers":true,'
                     b'"max_payload":1048576}\r\n')
        await writer.drain()
        assert (await reader.readline()).startswith(b"CONNECT ")
        assert await reader.readline() == b"PING\r\n"
        writer.write(b"PING\r\nPONG\r\n")  # its own PING first, then the connect PING's PONG
        await writer.drain()
        while line := await reader.readline():
            got.append(line)
            if line == b"PING\r\n" and answers:
                writer.write(b"PONG\r\n")
                await writer.drain()

    async def scenario() -> tuple[bool, bool]:
        srv = await asyncio.start_server(server, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        nc = client_class()()
        try:
            await nc.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
            connected = nc.is_connected
            await nc.publish("a", b"x")
            try:
                await nc.flush(timeout=1)
                flushed = True
            except TimeoutError:
                flushed = False
            return connected, flushed
        finally:
            await nc.close()
            srv.close()

    connected, flushed = run(scenario())
    assert connected
    assert flushed == answers
    assert b"PONG\r\n" in got  # the server's PING answered
    pub = next(i for i, line in enumerate(got) if line.startswith(b"PUB a "))
    assert pub < got.index(b"PING\r\n")
