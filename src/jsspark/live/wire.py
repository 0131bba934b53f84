"""Bulk delivery: one subscription's MSG/HMSG runs cut out of nats-py's read buffer in one pass.

Why: nats-py hands every message through a regex, a ``Msg`` object, an ``asyncio.Queue`` and
a callback coroutine — about 10 µs of Python per message, so a client tops out near 100,000
msg/s on one core, well below what one nats-server delivers. The live source needs none of
that per message: it wants each delivery's subject, reply (the ``$JS.ACK`` metadata), raw
header block and payload, in wire order. ``BulkParser`` takes the client's protocol parser
place: for a *routed* subscription, each read's MSG/HMSG frames become four lists handed to
one handler call; every other frame (other subscriptions, requests, PING/PONG, INFO, -ERR,
+OK) goes through nats-py's own code unchanged. The connection itself (TLS, auth, creds,
reconnects and resubscribes, requests, publishes) stays nats-py's.

This is the one module that touches nats-py internals: ``Client._ps`` (the parser),
``Parser.buf``/``reset``, ``Client._process_msg`` and ``Subscription._id``, all present and
unchanged through nats-py 2.x. ``check_client`` refuses any other client version with an
error that says so, rather than misparsing the wire.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

# subjects, replies, raw header blocks (None without headers), payloads: one read's deliveries
RunHandler = Callable[[list[bytes], list[bytes], list[bytes | None], list[bytes]], None]

SUPPORTED_MAJOR = 2
log = logging.getLogger(__name__)
_pending: set[asyncio.Task[Any]] = set()  # error callbacks under way
_CRLF = b"\r\n"
# A whole frame line, fields split by runs of blanks as nats-py splits them (the server writes
# two blanks where a reply is empty); anything else takes the slow path (incomplete: wait for
# more; malformed: ProtocolError, as nats-py's parser raises)
_MSG_LINE = re.compile(rb"MSG[ \t]+(\S+)[ \t]+(\S+)[ \t]+(?:(\S+)[ \t]+)?(\d+)\r\n")
_HMSG_LINE = re.compile(rb"HMSG[ \t]+(\S+)[ \t]+(\S+)[ \t]+(?:(\S+)[ \t]+)?(\d+)[ \t]+(\d+)\r\n")


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
    from nats.protocol.parser import Parser

    class BulkParser(Parser):  # type: ignore[misc]
        """nats-py's parser, except that routed subscriptions get their frames in bulk."""

        def __init__(self, nc: Any = None) -> None:
            super().__init__(nc)
            self._routes: dict[bytes, RunHandler] = {}  # sid as on the wire -> handler
            self._single = Parser(nc)  # nats-py's parser, fed one complete non-MSG line at a time
            self._need = 0  # bytes the buffered frame needs before it is complete (0: unknown)

        def route(self, sid: int, handler: RunHandler | None) -> None:
            if handler is None:
                self._routes.pop(str(sid).encode(), None)
            else:
                self._routes[str(sid).encode()] = handler

        async def parse(self, data: bytes = b"") -> None:
            if not self._routes:
                return await super().parse(data)
            buf = self.buf
            buf.extend(data)
            if len(buf) < self._need:  # a large payload still coming in: nothing to parse yet
                return
            self._need = 0
            wire = bytes(buf)  # one copy per read, so each slice below is a single copy
            routes, nc, single = self._routes, self.nc, self._single
            runs: dict[bytes, tuple[list[bytes], list[bytes], list[bytes | None], list[bytes]]] = {}
            run_sid, run = None, None  # the run the last delivery went to: consecutive frames share it
            pos, end = 0, len(wire)
            msg_line, hmsg_line = _MSG_LINE.match, _HMSG_LINE.match
            try:
                while pos < end:
                    first = wire[pos]
                    m = msg_line(wire, pos) if first == 77 else hmsg_line(wire, pos) if first == 72 else None
                    if m is None:  # not a whole MSG/HMSG line: incomplete, malformed or another operation
                        eol = wire.find(_CRLF, pos)
                        if eol < 0:
                            break
                        if wire.startswith((b"MSG ", b"HMSG "), pos):
                            raise ProtocolError("nats: malformed MSG")
                        # one protocol line for nats-py's own parser
                        line = wire[pos:eol + 2]
                        pos = eol + 2
                        if runs:
                            self._deliver(runs)
                            runs, run_sid = {}, None
                        await single.parse(line)
                        if self.buf is not buf:  # the client reset the parser (reconnect): drop the rest
                            return
                        continue
                    if first == 77:  # MSG <subject> <sid> [reply] <size>
                        subject, sid, reply, size = m.groups()
                        hsize = 0
                    else:  # HMSG <subject> <sid> [reply] <hdr> <size>
                        subject, sid, reply, hdr_size, size = m.groups()
                        hsize = int(hdr_size)
                    start = m.end()
                    stop = start + int(size)
                    if stop + 2 > end:  # the payload is not all here yet
                        self._need = stop + 2 - pos
                        break
                    if sid != run_sid:
                        run = None
                        if sid in routes:
                            run = runs.get(sid)
                            if run is None:
                                run = runs[sid] = ([], [], [], [])
                            run_sid = sid
                    if run is not None:
                        run[0].append(subject)
                        run[1].append(reply or b"")
                        run[2].append(wire[start:start + hsize] if hsize else None)
                        run[3].append(wire[start + hsize:stop])
                        pos = stop + 2
                        continue
                    hdr = wire[start:start + hsize] if hsize else None
                    payload = wire[start + hsize:stop]
                    pos = stop + 2
                    if runs:
                        self._deliver(runs)
                        runs, run_sid = {}, None
                    await nc._process_msg(int(sid), subject, reply or b"", payload, hdr)
                    if self.buf is not buf:
                        return
            except (ValueError, IndexError):
                raise ProtocolError("nats: malformed MSG") from None
            finally:
                if self.buf is buf:
                    del buf[:pos]
            if runs:
                self._deliver(runs)

        def _deliver(self, runs: dict[bytes, Any]) -> None:
            for sid, run in runs.items():
                handler = self._routes.get(sid)
                if handler is None:
                    continue
                try:
                    handler(*run)
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


def route(nc: Any, sub: Any, handler: RunHandler | None) -> None:
    """From now on, deliver ``sub``'s messages to ``handler`` in bulk (``None``: stop)."""
    ps = getattr(nc, "_ps", None)
    if not hasattr(ps, "route"):
        raise BulkDeliveryUnsupported("jetstream (live): this client was not set up for bulk delivery (wire.client_class)")
    ps.route(sub._id, handler)
