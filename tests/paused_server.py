"""A nats-server paused with SIGSTOP from inside the code under test (its data's generator, a
connect hook), so the pause comes at a known point and never by a timed sleep."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import TracebackType


class PausedServer:
    """``pause()`` stops the server; it resumes once the test calls ``failed()`` (or ``hold``
    seconds after the pause at most: the code before a fix waited for the server as long as it
    was paused), and in any case when the ``with`` block ends."""

    def __init__(self, pid: int, hold: float) -> None:
        self.pid, self.hold = pid, hold
        self.paused_at: float | None = None
        self._paused, self._ended = threading.Event(), threading.Event()
        self._resumer = threading.Thread(target=self._resume_later)

    def __enter__(self) -> PausedServer:
        self._resumer.start()
        return self

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused_at = time.monotonic()
        self._paused.set()

    def failed(self) -> float:
        """The code under test failed now: seconds since the pause; the server is resumed."""
        assert self.paused_at is not None, "the server was never paused"
        took = time.monotonic() - self.paused_at
        self._ended.set()
        self._resumer.join()
        return took

    def _resume_later(self) -> None:
        self._paused.wait(60)
        self._ended.wait(self.hold)
        os.kill(self.pid, signal.SIGCONT)

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._paused.set()
        self._ended.set()
        self._resumer.join()
        os.kill(self.pid, signal.SIGCONT)
