"""Bulk delivery (``jsspark.live.wire``): on a real nats-server, a routed subscription gets every
frame exactly as sent, in order, while the same connection keeps serving nats-py callbacks,
requests and PINGs; on bytes alone, the bulk parser reads what nats-py's own parser reads, however
the socket cuts them, and refuses malformed frame lines as it does."""

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

        def on_frames(frames: wire.Frames) -> None:
            nonlocal runs
            runs += 1
            got.extend(zip(*frames.to_lists(), strict=True))

        plain: list[bytes] = []

        async def on_plain(msg: Any) -> None:
            plain.append(msg.data)

        stray: list[Any] = []

        async def unrouted(msg: Any) -> None:
            stray.append(msg)

        sub = await nc.subscribe("bulk.>", cb=unrouted)
        wire.route(nc, sub, on_frames)
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


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes | bytearray) else v


class _Recorder:
    """What nats-py's parser hands its client: messages by sid, PINGs, errors."""

    _error_cb = None

    def __init__(self) -> None:
        self.msgs: list[tuple[int, str, str, bytes, bytes | None]] = []
        self.pings = 0

    async def _process_msg(self, sid: int, subject: Any, reply: Any, payload: bytes, hdr: bytes | None) -> None:
        self.msgs.append((sid, _text(subject), _text(reply), bytes(payload), bytes(hdr) if hdr else None))

    async def _process_ping(self) -> None:
        self.pings += 1

    async def _process_pong(self) -> None:
        pass


def _frame(subject: str, sid: int, reply: str, hdr: bytes | None, data: bytes) -> bytes:
    """One MSG (``hdr`` None) or HMSG frame; ``reply`` as written after the sid, blank included."""
    if hdr is None:
        return f"MSG {subject} {sid}{reply} {len(data)}\r\n".encode() + data + b"\r\n"
    return f"HMSG {subject} {sid}{reply} {len(hdr)} {len(hdr) + len(data)}\r\n".encode() + hdr + data + b"\r\n"


def _frames() -> bytes:
    """Deliveries as a server writes them: sid 1 (routed) with and without reply and headers,
    sid 2 (not routed), payloads holding frame-like bytes, empty payloads, PINGs between."""
    out = []
    for i in range(60):
        sid = 2 if i % 9 == 4 else 1
        # no reply: one blank or two (the server writes an empty reply field so)
        reply = f" $JS.ACK.S.C.1.{i}.{i}.17{i:017d}.{60 - i}" if i % 4 else " " * (i % 8 // 4)
        data = b"" if i % 7 == 0 else f"m{i}\r\nMSG x 1 2\r\nHMSG y 1 2 3\r\n".encode()
        out.append(_frame(f"s.{i}", sid, reply, f"NATS/1.0\r\nK: v{i}\r\n\r\n".encode() if i % 3 == 0 else None, data))
        if i % 13 == 0:
            out.append(b"PING\r\n")
        if i == 30:  # a payload many socket reads long
            big = bytes(range(256)) * 4096
            out.append(f"MSG big 1  {len(big)}\r\n".encode() + big + b"\r\n")
    return b"".join(out)


def _clean_frames(n: int = 3000) -> bytes:
    """A backlog as a server delivers it: runs of sid 1 deliveries (some with headers, a few
    with empty payloads), a heartbeat and a flow-control request of sid 1, an API reply of
    sid 2, and PINGs between."""
    out = []
    for i in range(n):
        reply = f"$JS.ACK.S.C.1.{i + 1}.{i + 1}.17{i:017d}.{n - i}"
        data = b"" if i % 500 == 7 else b"x" * (i % 150)
        out.append(_frame(f"s.{i % 16}", 1, f" {reply}", f"NATS/1.0\r\nNats-Msg-Id: {i}\r\n\r\n".encode() if i % 10 == 3 else None,
                          data))
        if i % 1000 == 999:
            out.append(b"PING\r\n")
        if i % 700 == 350:
            hb = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\nNats-Last-Stream: 1\r\n\r\n"
            out.append(b"HMSG _INBOX.d 1  %d %d\r\n%s\r\n" % (len(hb), len(hb), hb))
            fc = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
            out.append(b"HMSG _INBOX.d 1 $JS.FC.S.C.%d %d %d\r\n%s\r\n" % (i, len(fc), len(fc), fc))
        if i % 900 == 450:
            out.append(b'MSG _INBOX.r 2  11\r\n{"ok":true}\r\n')
    return b"".join(out)


@pytest.mark.parametrize("scan", [False, True], ids=["walked", "scanned"])
@pytest.mark.parametrize("shape", ["tricky", "backlog"])
@pytest.mark.parametrize("read_size", [1, 2, 7, 64, 1000, 32768, 1 << 21])
def test_bulk_frames_equal_nats_py_parse_at_every_read_size(read_size: int, shape: str, scan: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk parser and nats-py's own parser read the same bytes into the same messages,
    however the socket cuts them, whether frames are scanned or walked one by one (no read is
    scanned when ``BULK_MIN`` exceeds them all):
    routed frames come in runs, the rest reach the client. "tricky" has payloads holding
    frame-like bytes, replies empty or written with two blanks, a payload of many reads;
    "backlog" is what a consumer's backlog looks like, which the scan takes nearly whole."""
    from nats.protocol.parser import Parser

    stream = _frames() if shape == "tricky" else _clean_frames()
    reference = _Recorder()
    bulk = _Recorder()
    routed: list[tuple[int, str, str, bytes, bytes | None]] = []
    scanned = [0]
    scan_frames = wire.scan_frames

    def counted(data: bytes, is_routed: Any) -> Any:
        found = scan_frames(data, is_routed)
        scanned[0] += len(found[0]) if found else 0
        return found

    monkeypatch.setattr(wire, "scan_frames", counted)
    if not scan:
        monkeypatch.setattr(wire, "BULK_MIN", 1 << 40)

    def on_frames(frames: wire.Frames) -> None:
        assert frames.sid == b"1"
        routed.extend((1, s.decode(), r.decode(), d, h) for s, r, h, d in zip(*frames.to_lists(), strict=True))

    async def feed() -> None:
        await Parser(reference).parse(stream)
        parser = wire.bulk_parser_class()(bulk)
        parser.route(1, on_frames)
        for at in range(0, len(stream), read_size):
            await parser.parse(stream[at:at + read_size])
        assert bytes(parser.buf) == b""

    asyncio.run(feed())
    if shape == "tricky":
        assert len(reference.msgs) == 61 and reference.pings == 5
    else:
        assert len(reference.msgs) == 3000 + 4 * 2 + 3 and reference.pings == 3
    assert routed == [m for m in reference.msgs if m[0] == 1]
    assert bulk.msgs == [m for m in reference.msgs if m[0] == 2]
    assert bulk.pings == reference.pings
    if scan and shape == "backlog" and read_size >= wire.BULK_MIN:
        assert scanned[0] > 0.9 * len(routed)  # the scan took nearly all of it
    if not scan:
        assert scanned[0] == 0


def test_frames_of_another_subscription_are_walked_without_a_scan_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan reads the whole buffer; one started at each frame of a subscription that is not
    routed made a read of such frames quadratic (seconds of a blocked event loop at 8,000).
    Such frames are walked one by one, and the routed run after them is still scanned."""
    scans: list[int] = []
    scan_frames = wire.scan_frames

    def counted(data: bytes, is_routed: Any) -> Any:
        scans.append(len(data))
        return scan_frames(data, is_routed)

    monkeypatch.setattr(wire, "scan_frames", counted)
    other = b"".join(_frame(f"s.{i}", 2, f" r.{i}", None, b"x" * 40) for i in range(2000))
    mine = b"".join(_frame(f"s.{i}", 1, f" r.{i}", None, b"y") for i in range(500))
    client, routed = _Recorder(), []

    async def feed() -> None:
        parser = wire.bulk_parser_class()(client)
        parser.route(1, lambda frames: routed.extend(frames.to_lists()[0]))
        await parser.parse(other + mine)

    asyncio.run(feed())
    assert [m[1] for m in client.msgs] == [f"s.{i}" for i in range(2000)]
    assert routed == [f"s.{i}".encode() for i in range(500)]
    assert scans == [len(mine)]  # one scan, of the routed run only


@pytest.mark.parametrize("cut", [30, 60, 100])
def test_a_route_set_while_nats_py_reads_a_payload(cut: int) -> None:
    """Until a subscription is routed nats-py's parser reads, and it may be in the middle of a
    payload (an API reply) when the live source routes its deliveries. It finishes that
    message and the bulk loop takes what follows; before, the bulk loop read the rest of the
    payload as protocol lines (a protocol error, so a reconnect)."""
    body = b'{"type":"io.nats.jetstream.api.v1.stream_info_response"}\r\nMSG x 9 2'
    reply = _frame("_INBOX.abc.1", 7, "", None, body)
    delivery = _frame("d.1", 9, " $JS.ACK.S.C.1.1.1.1.0", None, b"hi")
    client, routed = _Recorder(), []

    async def feed() -> None:
        parser = wire.bulk_parser_class()(client)
        await parser.parse(reply[:cut])  # no route yet
        parser.route(9, lambda frames: routed.extend(frames.to_lists()[3]))
        rest = reply[cut:] + delivery
        for at in range(0, len(rest), 25):
            await parser.parse(rest[at:at + 25])
        assert bytes(parser.buf) == b""

    asyncio.run(feed())
    assert client.msgs == [(7, "_INBOX.abc.1", "", body, None)]
    assert routed == [b"hi"]


def test_scan_takes_the_frames_it_can_prove_and_stops_before_anything_else() -> None:
    def msg(i: int, sid: int = 1, data: bytes = b"abc") -> bytes:
        return f"MSG s.{i} {sid} r.{i} {len(data)}\r\n".encode() + data + b"\r\n"

    def hmsg(i: int, hdr: bytes, data: bytes = b"d") -> bytes:
        return f"HMSG s.{i} 1  {len(hdr)} {len(hdr) + len(data)}\r\n".encode() + hdr + data + b"\r\n"

    def scan(data: bytes, routed: bool = True) -> tuple[list[Any], int] | None:
        found = wire.scan_frames(data, lambda sid: routed)
        if found is None:
            return None
        frames, taken = found
        return list(zip(*frames.to_lists(), strict=True)), taken

    head = msg(0) + hmsg(1, b"NATS/1.0\r\nK: v\r\n\r\n") + msg(2, data=b"")
    rows = [(b"s.0", b"r.0", None, b"abc"), (b"s.1", b"", b"NATS/1.0\r\nK: v\r\n\r\n", b"d"), (b"s.2", b"r.2", None, b"")]
    assert scan(head) == (rows, len(head))
    assert scan(head + b"PING\r\n" + msg(3)) == (rows, len(head))  # another operation
    assert scan(head + msg(3, sid=22)) == (rows, len(head))  # another subscription
    assert scan(head + msg(3)[:-3]) == (rows, len(head))  # a frame not all here
    assert scan(head, routed=False) is None
    assert scan(b"PING\r\n" + head) is None
    # payload bytes that look like a frame line end the proof at the frame holding them
    fake = msg(3, data=b"x\r\nMSG s.9 1 r.9 1\r\ny")
    assert scan(head + fake + msg(4)) == ([*rows, (b"s.3", b"r.3", None, b"x\r\nMSG s.9 1 r.9 1\r\ny")],
                                          len(head + fake))
    # lines the frame-by-frame parser has to judge: a size that is no number, a blank too many
    assert scan(head + b"MSG s.3 1 r.3 x\r\nabc\r\n") == (rows, len(head))
    assert scan(head + b"MSG s.3 1 r.3 q 3\r\nabc\r\n") == (rows, len(head))
    assert scan(head + b"HMSG s.3 1 r.3 9 3\r\nabc\r\n") == (rows, len(head))  # headers longer than the frame


@pytest.mark.parametrize("line", [b"MSG s 1 r x\r\n", b"MSG s 1 a b 5\r\n", b"HMSG s 1 r 5\r\n", b"HMSG s 1 r x 5\r\n"])
def test_a_malformed_frame_line_is_a_protocol_error(line: bytes) -> None:
    from nats.errors import ProtocolError

    async def feed() -> None:
        parser = wire.bulk_parser_class()(_Recorder())
        parser.route(1, lambda frames: None)
        await parser.parse(b"MSG ok 1 2\r\nhi\r\n" + line + b"hello\r\n")

    with pytest.raises(ProtocolError) as raised:
        asyncio.run(feed())
    assert raised.value.args == ("nats: malformed MSG",)
