"""NATS connections for the live source and sink: opening them, and publishing exact headers.

**Opening.**
nats-py's ``connect`` retries forever while ``max_reconnect_attempts`` is -1 (and, whatever the
setting, keeps retrying a server it cannot reach), so a wrong password, an unknown nkey or a
refused TLS certificate would hang a Spark task or the driver instead of failing. So the first
connection is made with reconnects off: what retrying cannot fix (the server's ``Authorization
Violation``, a TLS failure) fails at once with its own error; an unreachable server is retried
until ``wait`` seconds have passed. A server that sends no INFO (one with ``tls { handshake_first:
true }`` waits for the client's TLS handshake first, then drops it at its TLS timeout, or the
client's ``connectTimeout`` ends the wait) fails as soon as that happens, saying that option
``tlsHandshakeFirst`` is what such a server needs (nats-py's own error names nothing); with the option,
a server without it fails saying so too. Once connected, the connection reconnects forever as before
(``Connection.connect_kwargs``), which the live source relies on across server restarts.

**A server PING ahead of the connect PONG** (nats-io/nats-server#1174): nats-py then leaves the
client "connecting", with its flusher stopped and every ``flush()`` returning without a PONG
(nats-io/nats.py#93); the client class answers that PING and goes on connected
(``_process_connect_init``).

**Publishing headers.** nats-py's ``publish`` takes headers as a dict (one value per key, values
stripped). jsspark publishes a row's headers exactly (every value of a repeated key, in order),
so it builds the header block itself (``HeaderBlock``) and a client subclass sends it through
nats-py's own HPUB path (``Client._send_publish``). This is the one place jsspark uses nats-py's
private publish API: ``hook_problem`` checks the installed nats-py before the hook is used; if it
fails, headers a dict can carry still go through nats-py's public API and a repeated key fails
with an error saying why (``wire_headers``), instead of silently losing values.

**The client class** (``client_class``) keeps each message's raw header block beside nats-py's
dict, and makes ``flush()`` mean what jsspark relies on (acks and flow-control replies on the
server before it reports them sent): nats-py writes a flush's PING ahead of the commands still
in its buffer, so the PONG could come back before they had been sent.

**TLS wanted, none offered.** nats-py upgrades a connection to TLS only when the server's INFO
says ``tls_required``: with TLS options set (or a ``tls://`` URL) and a server (or a man in the
middle) that does not offer TLS, it would send CONNECT, credentials included, in plaintext.
nats.go refuses that before CONNECT (``ErrSecureConnWanted``); so does the client class, in
``_connect_command``, the one call nats-py makes right before it writes CONNECT (after any TLS
upgrade): unless the socket is a TLS one, it raises ``SecureConnWanted`` instead (on a
reconnect too, where nats-py then tries again).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import ssl
import time
from collections.abc import Iterable
from typing import Any

from jsspark.engine import headers as H
from jsspark.live.options import Connection, redact

log = logging.getLogger(__name__)
RETRY_SECONDS = 0.25
TEAR_DOWN_SECONDS = 5.0  # a bound on closing a connection whose transport is aborted (``tear_down``)


async def open_client(conn: Connection, wait: float, client_cls: type | None = None, **callbacks: Any) -> Any:
    """A connected client of ``client_cls`` (default: the raw-header client) with ``callbacks``
    (``error_cb``, ``reconnected_cb``, ...); see the module docstring."""
    from nats.errors import Error as NatsError
    from nats.errors import NoServersError

    if client_cls is None:
        client_cls = client_class()
    kw = conn.connect_kwargs()
    reconnect = {"allow_reconnect": True, "max_reconnect_attempts": kw["max_reconnect_attempts"]}
    kw.update(callbacks, allow_reconnect=False, max_reconnect_attempts=1)
    if "error_cb" not in kw:
        kw["error_cb"] = _quiet(conn)
    deadline = time.monotonic() + wait
    while True:
        nc = client_cls()
        try:
            await nc.connect(**kw)
            break
        except NoServersError:
            if time.monotonic() >= deadline:
                raise ConnectionError(redact(f"no NATS server reachable at {', '.join(conn.servers)} within "
                                             f"{wait:g}s (last error: {nc.last_error})", conn)) from None
            await asyncio.sleep(RETRY_SECONDS)
        except (ssl.SSLError, TimeoutError, NatsError) as e:
            hint = _tls_first_hint(e, nc, conn)
            if hint is None:
                raise
            raise ConnectionError(redact(hint, conn)) from None
    nc.options.update(reconnect)
    return nc


def _tls_first_hint(e: BaseException, nc: Any, conn: Connection) -> str | None:
    """What a first connection that never got the server's INFO says about ``tlsHandshakeFirst``
    (module docstring); ``None`` for any other failure."""
    if getattr(nc, "_server_info", None):
        return None  # INFO came: the failure was later (TLS, CONNECT, the first PONG)
    where = ", ".join(conn.servers)
    waited = f"connectTimeout, {conn.connect_timeout} s"
    if conn.tls_handshake_first:
        # a server without it sends INFO in plain text at once: read as a TLS record, or (taken in
        # before nats-py started TLS) never seen again, the server then waiting for CONNECT
        if isinstance(e, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(e):
            why = "it answered in plain text"
        elif isinstance(e, TimeoutError):
            why = f"no INFO over TLS within {waited}"
        else:
            return None
        return (f"nats: option tlsHandshakeFirst: the server at {where} did not take the TLS handshake first ({why}): "
                "a server not configured with tls { handshake_first: true } sends its INFO before TLS; leave the "
                "option out")
    if isinstance(e, TimeoutError):
        why = f"nothing within {waited}"
    elif "expecting INFO" in str(e):
        why = "it closed the connection"
    else:
        return None
    return (f"nats: the server at {where} sent no INFO ({why}): a server configured with tls {{ handshake_first: true }} "
            "waits for the client to start TLS first; set option tlsHandshakeFirst (job and context fields: "
            "tls_handshake_first, tls_first)")


class _RawHeaders(dict):  # type: ignore[type-arg]
    """nats-py's parsed headers plus the raw block, so repeated keys and order survive."""

    raw: bytes = b""


@functools.cache
def client_class() -> type:
    """The nats-py ``Client`` subclass every jsspark connection uses (see the module docstring)."""
    from nats.aio.client import PING_PROTO, PONG_PROTO, Client

    class RawHeaderClient(Client):  # type: ignore[misc]
        async def _process_connect_init(self) -> None:
            """A server may send its first RTT PING ahead of the PONG that answers the connect
            PING (nats-io/nats-server#1174). nats-py reads one line for that PONG and, given the
            PING, leaves the client "connecting" (nats-io/nats.py#93): its flusher stops at once
            and every ``flush()`` returns without a PONG, so a stalled server looks like one that
            took everything. An ``-ERR`` has raised by then, so CONNECT was taken: answer the
            PING, let the PONG still to come answer the connect PING, and go on connected."""
            await super()._process_connect_init()
            if self._status == Client.CONNECTING:
                self._pongs.append(asyncio.get_running_loop().create_future())
                self._transport.write(PONG_PROTO)
                self._status = Client.CONNECTED

        def _connect_command(self) -> bytes:
            """Refuse to send CONNECT in plaintext when TLS is wanted (module docstring)."""
            server = getattr(self, "_current_server", None)
            uri = getattr(server, "uri", None)
            wanted = ("tls" in self.options or "tls_hostname" in self.options or self.options.get("tls_handshake_first")
                      or getattr(uri, "scheme", "") == "tls")
            if wanted and not _is_tls(self):
                where = f"{uri.hostname}:{uri.port}" if uri is not None else "the server"
                raise SecureConnWanted(f"nats: secure connection wanted: TLS is set (tlsCa/tlsCert/tlsHostname or a "
                                       f"tls:// URL) but the server at {where} does not offer TLS; nothing was sent "
                                       "to it (no CONNECT, no credentials)")
            return super()._connect_command()  # type: ignore[no-any-return]

        async def _process_headers(self, headers: bytes) -> dict[str, str] | None:  # type: ignore[override]
            """nats-py folds headers into a dict (last value wins); keep the wire block too."""
            hdr = await super()._process_headers(headers)
            if hdr is None:
                return None
            out = _RawHeaders(hdr)
            out.raw = bytes(headers)
            return out

        async def _send_ping(self, future: asyncio.Future[Any] | None = None) -> None:
            """nats-py writes a PING straight to the socket, ahead of the SUBs and PUBs still in
            its pending buffer, so ``flush()`` could return before they reached the server. Queue
            it behind them instead: the flusher sends all of it in order. (While disconnected,
            nats-py's own path: a PING queued then would be answered after the reconnect, out
            of step with the futures the reconnect clears.)"""
            if not self.is_connected:
                return await super()._send_ping(future)
            self._pongs.append(future if future is not None else asyncio.get_running_loop().create_future())
            await self._send_command(PING_PROTO)
            await self._flush_pending()
            return None

        async def _process_pong(self) -> None:
            """A ``flush()`` that timed out leaves its cancelled future first in line; nats-py
            would set a result on it when the late PONG comes, and that error ends its read
            loop for good (the connection still says connected, reads nothing until the ping
            timer calls it stale, minutes later). A PONG answers the oldest PING all the same."""
            if self._pongs and self._pongs[0].done():
                self._pongs.pop(0)
                self._pongs_received += 1
                self._pings_outstanding = 0
                return None
            return await super()._process_pong()

    return RawHeaderClient


def _is_tls(client: Any) -> bool:
    """Whether the client's socket is a TLS one now (asyncio's ``ssl_object``; unknown: no)."""
    writer = getattr(getattr(client, "_transport", None), "_io_writer", None)
    return writer is not None and writer.get_extra_info("ssl_object") is not None


def _secure_conn_wanted() -> type:
    from nats.errors import Error

    class SecureConnWanted(Error):  # type: ignore[misc]
        """nats.go's ``ErrSecureConnWanted``: TLS wanted, the server offers none."""

    return SecureConnWanted


SecureConnWanted = _secure_conn_wanted()


def _quiet(conn: Connection) -> Any:
    """An error callback that logs one redacted line (nats-py's default logs a traceback each time)."""

    async def cb(e: Exception) -> None:
        log.debug("jetstream (live): nats: %s", redact(f"{type(e).__name__}: {e}", conn))

    return cb


# -- publishing: the one use of nats-py's private publish path -------------------------------
_HEADER_KEY = re.compile(H.NAME_PATTERN)  # an HTTP token, as nats-py checks keys
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


class HeaderBlock:
    """A complete ``NATS/1.0`` header block for one publish. Deliberately not a mapping: should
    nats-py ever hand it to code other than the hook, that fails loudly instead of collapsing
    repeated keys."""

    __slots__ = ("block",)

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        for key, _ in pairs:
            if not _HEADER_KEY.fullmatch(key):
                raise ValueError(f"jetstream (live): invalid header name {key!r}")
        self.block = H.encode([(k, v.translate(_NEWLINES)) for k, v in pairs])

    def items(self) -> Any:
        raise RuntimeError("jetstream (live): nats-py sent a header block past jsspark's publish hook "
                           f"(nats-py {_nats_version()} changed Client.publish?); pin nats-py 2.x")


def _nats_version() -> str:
    from importlib.metadata import version

    try:
        return version("nats-py")
    except Exception:  # pragma: no cover - not installed as a distribution
        return "unknown"


def hook_problem() -> str | None:
    """Why the publish hook cannot be used with the installed nats-py, or ``None`` if it can."""
    import inspect

    from nats.aio.client import Client
    from nats.protocol import command

    version = _nats_version()
    if not version.startswith("2."):
        return f"nats-py {version} is not a 2.x release (the hook is tested with 2.16)"
    try:
        params = list(inspect.signature(Client._send_publish).parameters)
    except (AttributeError, TypeError, ValueError):
        return f"nats-py {version} has no Client._send_publish"
    if params != ["self", "subject", "reply", "payload", "payload_size", "headers"]:
        return f"nats-py {version} changed Client._send_publish{tuple(params[1:])}"
    if not all(hasattr(Client, a) for a in ("_send_command", "_flush_pending")) or not hasattr(command, "hpub_cmd"):
        return f"nats-py {version} has no Client._send_command/_flush_pending or protocol hpub_cmd"
    return None


def publish_client_class() -> tuple[type, bool]:
    """A client class for publishing (``open_client(conn, wait, cls)``), and whether its
    publishes take a ``HeaderBlock`` (the hook's guard passed)."""
    base = client_class()
    if hook_problem() is not None:
        return base, False
    from nats.protocol.command import hpub_cmd

    class _PublishHook(base):  # type: ignore[misc, valid-type]
        async def _send_publish(self, subject: str, reply: str, payload: bytes, payload_size: int,
                                headers: Any) -> None:
            if not isinstance(headers, HeaderBlock):
                return await super()._send_publish(subject, reply, payload, payload_size, headers)
            # nats-py's own HPUB path with our block in place of the one it builds from a dict
            self.stats["out_msgs"] += 1
            self.stats["out_bytes"] += payload_size
            await self._send_command(hpub_cmd(subject, reply, headers.block, payload))
            if self._flush_queue is not None and self._flush_queue.empty():
                await self._flush_pending()
            return None

    return _PublishHook, True


def wire_headers(pairs: list[tuple[str, str]] | None, hooked: bool) -> Any:
    """What to give ``nc.request(headers=...)``: a ``HeaderBlock`` through the hook, else a dict
    (refused when a key repeats: a dict would keep only its last value)."""
    if not pairs:
        return None
    if hooked:
        return HeaderBlock(pairs)
    keys = [k for k, _ in pairs]
    repeated = next((k for k in keys if keys.count(k) > 1), None)
    if repeated is not None:
        raise RuntimeError(f"jetstream (live): repeated header key {repeated!r} cannot be published: "
                           f"{hook_problem()}, so only one value per key would reach NATS")
    return dict(pairs)


async def tear_down(nc: Any, tasks: Iterable[asyncio.Future[Any]] = ()) -> None:
    """Close a connection whose writes may never drain (a server that stopped reading, e.g. a
    stalled one), and end ``tasks``, the publishes under way on it. nats-py's ``close`` and
    ``unsubscribe``, and a publish once its buffer is past its max pending size, wait for that
    buffer to reach the socket with no time limit. So its transport is aborted and its buffer
    dropped (nothing in either was acknowledged: a retried task re-sends it), then it is closed.
    A publish stuck there swallows one cancellation (``Client._flush_pending``) and goes on to
    wait for its reply, where the next one ends it: the tasks are cancelled until they end."""
    writer = getattr(getattr(nc, "_transport", None), "_io_writer", None)
    if writer is not None:
        writer.transport.abort()
        nc._pending, nc._pending_data_size = [], 0
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), TEAR_DOWN_SECONDS)
    pending = {t for t in tasks if not t.done()}
    for _ in range(5):
        if not pending:
            break
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.1)


class PublishFailed(RuntimeError):
    """A publish got no PubAck (the server's own refusals stay ``APIError``): says which subject."""


def unacked(subject: str, e: BaseException, timeout: float) -> BaseException:
    """What a publish to ``subject`` that ``e`` ended fails with: nats-py's errors name no
    subject, and its "no responders" means no stream captures it."""
    from nats.errors import BadSubjectError, NoRespondersError

    if isinstance(e, NoRespondersError):
        return PublishFailed(f"no JetStream stream captures subject {subject!r} on the server (no responders)")
    if isinstance(e, asyncio.TimeoutError):  # nats-py's TimeoutError is one
        return PublishFailed(f"no PubAck for a publish to {subject!r} within publishTimeout ({timeout:g} s)")
    if isinstance(e, BadSubjectError):
        return PublishFailed(f"{subject!r} is not a valid subject to publish to")
    return e


def pub_ack(subject: str, data: bytes) -> dict[str, Any]:
    """The PubAck of a JetStream publish to ``subject`` (its reply's ``data``). The server's
    refusal is raised as its own ``APIError``; a reply that is no PubAck (a core NATS responder
    on the subject, not a stream) fails naming the subject rather than counting as stored."""
    from jsspark.errors import APIError

    try:
        ack = json.loads(data or b"{}")
    except ValueError:
        ack = None
    if isinstance(ack, dict) and isinstance(ack.get("error"), dict):
        raise APIError.from_dict(ack["error"])
    if not isinstance(ack, dict) or "stream" not in ack or "seq" not in ack:
        raise PublishFailed(f"the reply to a publish to {subject!r} is not a JetStream PubAck (a core NATS "
                            f"subscriber answered, not a stream): {bytes(data[:100])!r}")
    return ack


def check_size(nc: Any, subject: str, payload: bytes, headers: Any) -> None:
    """Refuse a message the server would: it counts the header block and the payload against its
    ``max_payload`` (nats-py counts the payload only), and answers a larger one with
    ``-ERR 'Maximum Payload Violation'`` and a closed connection, which the task would report as a
    closed connection, naming nothing. ``headers``: what ``wire_headers`` gave."""
    if isinstance(headers, HeaderBlock):
        size = len(headers.block)
    else:
        size = len(H.encode(list(headers.items()))) if headers else 0
    limit = int(getattr(nc, "max_payload", 0) or 0)
    if limit and size + len(payload) > limit:
        raise PublishFailed(f"a message to {subject!r} of {size + len(payload)} bytes (header block {size}, data "
                            f"{len(payload)}) exceeds the server's max_payload of {limit} bytes (Maximum Payload "
                            "Violation)")
