"""Talking to the person at the terminal: confirmations and progress.

Both depend on whether a terminal is attached. A destructive verb run from a script (stdin not
a TTY) must not hang on a prompt nobody can answer, and must not silently go ahead either, so
it refuses unless ``-f`` was given. Progress goes to stderr only when stderr is a terminal, so
piped or captured output stays clean.
"""

from __future__ import annotations

import argparse
import sys
import time
from types import TracebackType

from jsspark.cli.errors import CLIError


def defaults_flag(p: argparse.ArgumentParser) -> None:
    """``--defaults``, which the nats CLI's ``add`` verbs take to skip their questions: jsspark
    asks none (what is not given takes the server's default), so scripts written for ``nats``
    run unchanged."""
    p.add_argument("--defaults", action="store_true",
                   help="accepted as in the nats CLI: nothing is asked, what is not given takes the server's default")


def confirm(question: str, force: bool) -> None:
    """Go ahead when ``force``; else ask on the terminal; refuse when there is none.

    Raises ``CLIError`` on refusal so the caller's command stops with a clear message and a
    non-zero exit code.
    """
    if force:
        return
    if not sys.stdin.isatty():
        raise CLIError(
            f'refusing without -f: "{question}" needs a yes, and stdin is not a terminal to ask on'
        )
    sys.stderr.write(f"? {question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise CLIError("cancelled")


class Progress:
    """A ``label: done/total`` counter redrawn on stderr, at most ten times a second.

    Silent when stderr is not a terminal. Use as a context manager so the line is cleared
    however the operation ends.
    """

    def __init__(self, label: str, total: int | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.enabled = sys.stderr.isatty()
        self._last_draw = 0.0

    def __enter__(self) -> Progress:
        self._draw(force=True)
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1 and self.done != self.total:
            return
        self._last_draw = now
        shown = f"{self.done:,}/{self.total:,}" if self.total is not None else f"{self.done:,}"
        sys.stderr.write(f"\r\x1b[K{self.label}: {shown}")
        sys.stderr.flush()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
