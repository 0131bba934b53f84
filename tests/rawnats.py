"""A minimal NATS protocol client over a socket, for tests that compare exact wire bytes.

nats-py folds headers into a dict (repeats lost, values stripped); republish must be compared
byte for byte, so this client publishes raw ``HPUB`` header blocks and records every received
``MSG``/``HMSG`` with its raw header block. Waits are bounded by a deadline, never a sleep.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jsspark.engine import headers as H


@dataclass
class RawMsg:
    subject: str
    sid: str
    reply: str
    header_block: bytes
    data: bytes

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return H.decode(self.header_block)[0] if self.header_block else []

    def header(self, key: str) -> str | None:
        return H.get(self.pairs, key)


class RawNats:
    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("nats://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.settimeout(None)
        self.buf = b""
        self.lock = threading.Condition()
        self.msgs: list[RawMsg] = []
        self.pongs = 0
        self.closed = False
        self._sid = 0
        self._inbox_sid: str | None = None
        self._requests = 0
        self._read_line_blocking()  # INFO
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1,
                   "name": "rawnats"}
        self._send(f"CONNECT {json.dumps(connect)}\r\n".encode())
        self.thread = threading.Thread(target=self._reader, daemon=True)
        self.thread.start()
        self.flush()

    # -- wire ----------------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def _read_line_blocking(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _reader(self) -> None:
        try:
            while True:
                line = self._read_line_blocking()
                op, _, rest = line.partition(b" ")
                if op == b"PING":
                    self._send(b"PONG\r\n")
                elif op == b"PONG":
                    with self.lock:
                        self.pongs += 1
                        self.lock.notify_all()
                elif op in (b"MSG", b"HMSG"):
                    parts = rest.decode().split()
                    if op == b"MSG":
                        subject, sid, *mid, size = parts
                        hlen, total = 0, int(size)
                    else:
                        subject, sid, *mid, hl, tl = parts
                        hlen, total = int(hl), int(tl)
                    body = self._read_exact(total + 2)[:total]
                    msg = RawMsg(subject, sid, mid[0] if mid else "", body[:hlen], body[hlen:])
                    with self.lock:
                        self.msgs.append(msg)
                        self.lock.notify_all()
                elif op == b"-ERR":
                    raise RuntimeError(line.decode())
        except (OSError, ConnectionError):
            with self.lock:
                self.closed = True
                self.lock.notify_all()

    # -- API -----------------------------------------------------------------------------------
    def flush(self, timeout: float = 10) -> None:
        with self.lock:
            want = self.pongs + 1
        self._send(b"PING\r\n")
        with self.lock:
            if not self.lock.wait_for(lambda: self.pongs >= want or self.closed, timeout):
                raise TimeoutError("no PONG")

    def subscribe(self, subject: str) -> str:
        self._sid += 1
        sid = str(self._sid)
        self._send(f"SUB {subject} {sid}\r\n".encode())
        self.flush()
        return sid

    def publish(
        self, subject: str, data: bytes = b"", pairs: list[tuple[str, str]] | None = None, reply: str = ""
    ) -> None:
        block = H.encode(pairs) if pairs else b""
        to = f"{subject} {reply}" if reply else subject
        if block:
            self._send(f"HPUB {to} {len(block)} {len(block) + len(data)}\r\n".encode() + block + data + b"\r\n")
        else:
            self._send(f"PUB {to} {len(data)}\r\n".encode() + data + b"\r\n")

    def request(
        self, subject: str, data: bytes = b"", pairs: list[tuple[str, str]] | None = None, timeout: float = 10
    ) -> RawMsg:
        """Publish with a reply inbox of its own and return the one reply (a JetStream API
        answer or publish ack), header values sent exactly as given."""
        if self._inbox_sid is None:
            self._inbox_sid = self.subscribe("_RAWNATS_INBOX.>")
        self._requests += 1
        inbox = f"_RAWNATS_INBOX.{self._requests}"
        self.publish(subject, data, pairs, reply=inbox)
        got = self.wait(lambda ms: any(m.subject == inbox for m in ms), self._inbox_sid, timeout, f"a reply on {inbox}")
        return next(m for m in got if m.subject == inbox)

    def received(self, sid: str | None = None) -> list[RawMsg]:
        with self.lock:
            return [m for m in self.msgs if sid is None or m.sid == sid]

    def wait(self, done: Callable[[list[RawMsg]], bool], sid: str | None = None, timeout: float = 20,
             what: str = "messages") -> list[RawMsg]:
        """The messages received on ``sid`` once ``done(messages)`` holds; TimeoutError after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                got = [m for m in self.msgs if sid is None or m.sid == sid]
                if done(got):
                    return got
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError(f"waiting for {what} on sid {sid}: got {len(got)} messages")
                self.lock.wait(left)

    def wait_for(self, count: int, sid: str | None = None, timeout: float = 20) -> list[RawMsg]:
        return self.wait(lambda got: len(got) >= count, sid, timeout, f"{count} messages")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)
