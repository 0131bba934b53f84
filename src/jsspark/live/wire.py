"""Bulk delivery: one subscription's MSG/HMSG runs cut out of nats-py's read buffer in one pass.

Why: nats-py hands every message through a regex, a ``Msg`` object, an ``asyncio.Queue`` and
a callback coroutine — about 10 µs of Python per message, so a client tops out near 100,000
msg/s on one core, well below what one nats-server delivers. The live source needs none of
that per message: it wants each delivery's subject, reply (the ``$JS.ACK`` metadata), raw
header block and payload, in wire order. ``BulkParser`` takes the client's protocol parser
place: for a *routed* subscription, each read's MSG/HMSG frames become columns (``Frames``)
handed to one handler call; every other frame (other subscriptions, requests, PING/PONG,
INFO, -ERR, +OK) goes through nats-py's own code unchanged. The connection itself (TLS, auth,
creds, reconnects and resubscribes, requests, publishes) stays nats-py's.

A read's frames are found in one of two ways. ``scan_frames`` finds them with numpy over the
whole buffer: CRLFs, blanks and size fields for every line at once. Frames are cut out with
Arrow ``take``s, as ``Frames`` columns. This is the way a backlog goes: a frame costs well under a
microsecond, where a Python loop over frames costs one or two. The scan takes only the longest
prefix it can prove: every frame line well formed, the first one at the buffer's start, and
each frame ending exactly where the next begins. Anything else (another operation, a frame
of another subscription, payload bytes that look like a frame line) ends the prefix there,
and the rest of the buffer goes through the loop, frame by frame. While nats-py's
``StreamReader`` already holds more bytes, ``parse`` defers its work (up to ``BULK_BYTES``), so
one scan covers many 32 KiB socket reads.

This is the one module that touches nats-py internals: ``Client._ps`` (the parser),
``Parser.buf``/``reset``, ``Client._process_msg`` and ``Subscription._id``, all present and
unchanged through nats-py 2.x. ``check_client`` refuses any other client version with an
error that says so, rather than misparsing the wire. Deferring a parse also looks at the
client's ``_transport._io_reader._buffer`` (asyncio's ``StreamReader``); where that is not
there, each read is parsed at once, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FramesHandler = Callable[["Frames"], None]  # a routed subscription's deliveries, a run at a time

SUPPORTED_MAJOR = 2
log = logging.getLogger(__name__)
_pending: set[asyncio.Task[Any]] = set()  # error callbacks under way
_CRLF = b"\r\n"
# A scan pays a fixed cost of about 0.1 ms, so parse defers while the client's reader already
# holds more bytes, up to this much; below BULK_MIN the frame-by-frame loop is as fast.
BULK_BYTES = 1 << 20
BULK_MIN = 4096


@dataclass(frozen=True)
class Frames:
    """Consecutive MSG/HMSG frames of one subscription, as columns in wire order (binary
    arrays; ``headers`` is null where a frame has no header block)."""

    sid: bytes
    subjects: pa.Array
    replies: pa.Array
    headers: pa.Array
    payloads: pa.Array

    @classmethod
    def of_lists(cls, sid: bytes, subjects: list[bytes], replies: list[bytes], headers: list[bytes | None],
                 payloads: list[bytes]) -> Frames:
        """Frames walked one at a time (the parser's loop, or one nats-py ``Msg``) as columns."""
        return cls(sid, *(pa.array(c, pa.binary()) for c in (subjects, replies, headers, payloads)))

    def __len__(self) -> int:
        return len(self.replies)

    def to_lists(self) -> tuple[list[bytes], list[bytes], list[bytes | None], list[bytes]]:
        """Subjects, replies, header blocks (``None`` without) and payloads, as Python lists."""
        return (self.subjects.to_pylist(), self.replies.to_pylist(), self.headers.to_pylist(),
                self.payloads.to_pylist())


_DIGITS = 10  # a size field longer than this is not scanned (the loop reads, or refuses, it)


def decimals(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal numbers ``a[lo:hi]`` of each row, and which rows are 1 to ``_DIGITS`` digits
    (one column of digits per place, as many as the longest number has)."""
    width = hi - lo
    places = min(int(width.max()), _DIGITS)
    idx = hi[:, None] - places + np.arange(places)
    digits = a[np.clip(idx, 0, len(a) - 1)].astype(np.int64) - 48
    digits[idx < lo[:, None]] = 0
    ok = ((digits >= 0) & (digits <= 9)).all(axis=1) & (width > 0) & (width <= _DIGITS)
    return digits @ (10 ** np.arange(places - 1, -1, -1, dtype=np.int64)), ok


def scan_frames(data: bytes, routed: Callable[[bytes], bool]) -> tuple[Frames, int] | None:
    """The frames at the start of ``data`` that can be proven whole and well formed, all of the
    first frame's subscription, if ``routed`` says it is one: (frames, bytes they take).
    ``None`` when there are none (the buffer starts with another operation or a partial frame)."""
    size = len(data)
    if size < 16 or size >= 1 << 31 or data[:1] not in (b"M", b"H"):
        return None
    a = np.frombuffer(data, np.uint8)
    cr = np.flatnonzero(a[:-1] == 13)
    eol = cr[a[cr + 1] == 10]  # every line's CR
    if not len(eol):
        return None
    starts = np.empty(len(eol), np.int64)
    starts[0] = 0
    starts[1:] = eol[:-1] + 2
    at = [np.minimum(starts + i, size - 1) for i in range(5)]
    head = [a[i] for i in at]
    is_msg = (head[0] == 77) & (head[1] == 83) & (head[2] == 71) & (head[3] == 32)
    is_hmsg = (head[0] == 72) & (head[1] == 77) & (head[2] == 83) & (head[3] == 71) & (head[4] == 32)
    cand = np.flatnonzero(is_msg | is_hmsg)
    if not len(cand) or cand[0] != 0:
        return None
    ls, le, hm = starts[cand], eol[cand], is_hmsg[cand]
    blanks = np.flatnonzero(a == 32)
    j0 = np.searchsorted(blanks, ls)
    j1 = np.searchsorted(blanks, le)
    last = len(blanks) - 1
    sp = [blanks[np.minimum(j0 + k, last)] for k in range(5)]
    ok = (j1 - j0) == np.where(hm, 5, 4)  # MSG subject sid reply size; HMSG adds the header size
    ok &= (sp[1] > sp[0] + 1) & (sp[2] > sp[1] + 1)  # a subject and a sid
    size_lo = np.where(hm, sp[4], sp[3]) + 1
    nbytes, size_ok = decimals(a, size_lo, le)
    ok &= size_ok
    hbytes = np.zeros(len(cand), np.int64)
    if hm.any():
        hvals, hok = decimals(a, sp[3] + 1, sp[4])
        hbytes = np.where(hm, hvals, 0)
        ok &= ~hm | (hok & (hbytes <= nbytes))
    body = le + 2
    end = body + nbytes + 2
    ends_ok = end <= size
    tail = np.minimum(end, size) - 2
    ok &= ends_ok & (a[tail] == 13) & (a[tail + 1] == 10)
    ok[1:] &= ls[1:] == end[:-1]  # each frame starts where the one before ends
    # the first frame's subscription
    sid = bytes(data[sp[1][0] + 1:sp[2][0]])
    if not ok[0] or not routed(sid):
        return None
    ok &= (sp[2] - sp[1] - 1) == len(sid)
    for i, byte in enumerate(sid):
        ok &= a[np.minimum(sp[1] + 1 + i, size - 1)] == byte
    bad = np.flatnonzero(~ok)
    n = int(bad[0]) if len(bad) else len(ok)
    hm, body, nbytes, hbytes = hm[:n], body[:n], nbytes[:n], hbytes[:n]
    pay = body + hbytes
    bounds = np.stack([np.where(hm, 5, 4) + ls[:n], sp[1][:n], sp[2][:n] + 1, sp[3][:n], body, pay, pay,
                       body + nbytes], axis=1)
    cut = pa.Array.from_buffers(pa.binary(), 8 * n - 1,
                                [None, pa.py_buffer(bounds.astype(np.int32).ravel()), pa.py_buffer(data)])
    every = np.arange(0, 8 * n, 8)
    with_headers = hm & (hbytes > 0)
    if not with_headers.any():
        headers = pa.nulls(n, pa.binary())
    elif with_headers.all():
        headers = cut.take(every + 4)
    else:
        headers = pc.if_else(pa.array(with_headers), cut.take(every + 4), pa.scalar(None, pa.binary()))
    frames = Frames(sid=sid, subjects=cut.take(every), replies=cut.take(every + 2), headers=headers,
                    payloads=cut.take(every + 6))
    return frames, int(end[n - 1])


class BulkDeliveryUnsupported(RuntimeError):
    """The installed nats-py is not one whose parser this module knows how to take over."""


def check_client(client_cls: type) -> None:
    """Raise ``BulkDeliveryUnsupported`` unless ``client_cls`` is a nats-py 2.x client with
    the internals ``BulkParser`` relies on."""
    from nats.aio import client as nats_client
    from nats.protocol import parser as nats_parser

    version = getattr(nats_client, "__version__", "0")
    major = version.split(".", 1)[0]
    missing = [name for name, owner in (("_process_msg", client_cls), ("parse", nats_parser.Parser),
                                        ("reset", nats_parser.Parser)) if not hasattr(owner, name)]
    if major != str(SUPPORTED_MAJOR) or missing:
        raise BulkDeliveryUnsupported(
            f"jetstream (live): nats-py {version} is not supported (needs nats-py {SUPPORTED_MAJOR}.x: the live "
            f"source reads its deliveries in bulk from that client's protocol parser{'; missing ' + ', '.join(missing) if missing else ''})"
        )


def bulk_parser_class() -> type:
    from nats.errors import ProtocolError
    from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

    class BulkParser(Parser):  # type: ignore[misc]
        """nats-py's parser, except that routed subscriptions get their frames in bulk."""

        def __init__(self, nc: Any = None) -> None:
            super().__init__(nc)
            self._routes: dict[bytes, FramesHandler] = {}  # sid as on the wire -> handler
            self._single = Parser(nc)  # nats-py's parser, fed one complete non-MSG line at a time
            self._need = 0  # bytes the buffer's first frame takes, while its payload is arriving

        def route(self, sid: int, handler: FramesHandler | None) -> None:
            key = str(sid).encode()
            if handler is None:
                self._routes.pop(key, None)
            else:
                self._routes[key] = handler

        def _more_buffered(self) -> bool:
            """The client's reader already holds more bytes (the read loop gets them at once)."""
            reader = getattr(getattr(self.nc, "_transport", None), "_io_reader", None)
            return bool(getattr(reader, "_buffer", None))

        async def parse(self, data: bytes = b"") -> None:
            if not self._routes:
                return await super().parse(data)
            if self.state != AWAITING_CONTROL_LINE:  # nats-py's parser was in a payload when a route came
                rest = max(self.needed + len(_CRLF) - len(self.buf), 0)
                await super().parse(data[:rest])  # it finishes that message, the bulk loop takes the rest
                if self.state != AWAITING_CONTROL_LINE:
                    return None
                data = data[rest:]
            buf = self.buf
            buf.extend(data)
            if len(buf) < self._need or (len(buf) < BULK_BYTES and self._more_buffered()):
                return  # parsed with the bytes that follow (a large payload is not scanned read after read)
            self._need = 0
            routes, nc, single = self._routes, self.nc, self._single
            runs: dict[bytes, tuple[list[bytes], list[bytes], list[bytes | None], list[bytes]]] = {}
            pos, end = 0, len(buf)
            find, rfind = buf.find, buf.rfind
            scan = True  # at the start, and after each operation that is not a routed frame
            try:
                while pos < end:
                    if scan and end - pos >= BULK_MIN:
                        scan = False
                        # only a routed subscription's frame starts a scan: frames of others, one
                        # after another, would each scan the whole buffer again
                        eol = find(_CRLF, pos)
                        args = bytes(buf[pos:eol]).split(None, 3) if eol >= 0 else []
                        if len(args) < 3 or args[2] not in routes or args[0] not in (b"MSG", b"HMSG"):
                            continue
                        with memoryview(buf) as view:
                            found = scan_frames(bytes(view[pos:]), routes.__contains__)
                        if found is not None:
                            frames, taken = found
                            if runs:
                                self._deliver(runs)
                                runs = {}
                            self._hand(routes[frames.sid], frames)
                            pos += taken
                            continue
                    eol = find(_CRLF, pos)
                    if eol < 0:
                        break
                    first = buf[pos]
                    if first == 77 and buf.startswith(b"MSG ", pos):  # MSG <subject> <sid> [reply] <size>
                        cut = rfind(b" ", pos, eol)
                        size = int(buf[cut + 1:eol])
                        hsize = 0
                        args = bytes(buf[pos + 4:cut]).split()
                    elif first == 72 and buf.startswith(b"HMSG ", pos):  # HMSG <subject> <sid> [reply] <hdr> <size>
                        cut = rfind(b" ", pos, eol)
                        size = int(buf[cut + 1:eol])
                        cut2 = rfind(b" ", pos, cut)
                        hsize = int(buf[cut2 + 1:cut])
                        args = bytes(buf[pos + 5:cut2]).split()
                    else:  # one protocol line for nats-py's own parser
                        line = bytes(buf[pos:eol + 2])
                        pos = eol + 2
                        if runs:
                            self._deliver(runs)
                            runs = {}
                        await single.parse(line)
                        if self.buf is not buf:  # the client reset the parser (reconnect): drop the rest
                            return
                        scan = True
                        continue
                    start = eol + 2
                    stop = start + size
                    if stop + 2 > end:
                        self._need = stop + 2 - pos
                        break  # the payload is not all here yet
                    if len(args) == 2:
                        subject, sid, reply = args[0], args[1], b""
                    elif len(args) == 3:
                        subject, sid, reply = args
                    else:
                        raise ProtocolError("nats: malformed MSG")
                    handler = routes.get(sid)
                    if handler is not None:
                        run = runs.get(sid)
                        if run is None:
                            run = runs[sid] = ([], [], [], [])
                        run[0].append(subject)
                        run[1].append(reply)
                        run[2].append(bytes(buf[start:start + hsize]) if hsize else None)
                        run[3].append(bytes(buf[start + hsize:stop]))
                        pos = stop + 2
                        continue
                    hdr = bytes(buf[start:start + hsize]) if hsize else None
                    payload = bytes(buf[start + hsize:stop])
                    pos = stop + 2
                    if runs:
                        self._deliver(runs)
                        runs = {}
                    await nc._process_msg(int(sid), subject, reply, payload, hdr)
                    if self.buf is not buf:
                        return
                    scan = True
            except (ValueError, IndexError):
                raise ProtocolError("nats: malformed MSG") from None
            finally:
                if self.buf is buf:
                    del buf[:pos]
            if runs:
                self._deliver(runs)

        def _deliver(self, runs: dict[bytes, Any]) -> None:
            """Frames the loop walked, per subscription, as columns."""
            for sid, run in runs.items():
                handler = self._routes.get(sid)
                if handler is not None:
                    self._hand(handler, Frames.of_lists(sid, *run))

        def _hand(self, handler: FramesHandler, frames: Frames) -> None:
            try:
                handler(frames)
            except Exception as e:  # never let it stop the read loop: the client's error callback hears it
                log.exception("jetstream (live): bulk delivery handler failed")
                cb = getattr(self.nc, "_error_cb", None)
                if cb is not None:
                    task = asyncio.get_running_loop().create_task(cb(e))
                    _pending.add(task)
                    task.add_done_callback(_pending.discard)

        def reset(self) -> None:
            super().reset()
            self._need = 0
            single = getattr(self, "_single", None)
            if single is not None:
                single.reset()

    return BulkParser


def client_class(base: type) -> type:
    """``base`` (a nats-py ``Client`` class) whose instances parse with ``BulkParser``, so a
    subscription can be routed (``route``) from the first byte on."""
    check_client(base)
    parser_cls = bulk_parser_class()

    class BulkClient(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._ps = parser_cls(self)

    return BulkClient


def route(nc: Any, sub: Any, handler: FramesHandler | None) -> None:
    """From now on, deliver ``sub``'s messages to ``handler`` in bulk, as ``Frames`` (``None``: stop)."""
    ps = getattr(nc, "_ps", None)
    if not hasattr(ps, "route"):
        raise BulkDeliveryUnsupported("jetstream (live): this client was not set up for bulk delivery (wire.client_class)")
    ps.route(sub._id, handler)
