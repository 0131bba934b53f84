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
from collections.abc import Callable
from typing import Any

# subjects, replies, raw header blocks (None without headers), payloads: one read's deliveries
RunHandler = Callable[[list[bytes], list[bytes], list[bytes | None], list[bytes]], None]

SUPPORTED_MAJOR = 2
log = logging.getLogger(__name__)
_pending: set[asyncio.Task[Any]] = set()  # error callbacks under way
_CRLF = b"\r\n"


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
            routes, nc, single = self._routes, self.nc, self._single
            runs: dict[bytes, tuple[list[bytes], list[bytes], list[bytes | None], list[bytes]]] = {}
            pos, end = 0, len(buf)
            find, rfind = buf.find, buf.rfind
            try:
                while pos < end:
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
                        continue
                    start = eol + 2
                    stop = start + size
                    if stop + 2 > end:
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
