"""How a writer that lost the race for a stream table's next version tries again, and when it stops.

Writers in other processes commit to the same table with no lock: each plans on a version and
the first to commit the next one wins (``table.py``); a loser plans again on the new version.
A loser waits a random time before it does, up to twice as long after each loss (capped), so
losers stop colliding with each other and burning the CPU the winner commits with. It gives up
after ``GIVE_UP_SECONDS`` rather than after a number of attempts: a bound on what a caller waits,
whether attempts are cheap or not.
"""

from __future__ import annotations

import random
import time

GIVE_UP_SECONDS = 60.0
BACKOFF_FIRST = 0.005  # the first loss waits up to this, each further one twice as long ...
BACKOFF_CAP = 0.2  # ... up to this


class GaveUp(RuntimeError):
    """A writer lost the race for the next table version for ``GIVE_UP_SECONDS``."""


class Retries:
    """One operation's attempts: ``lost()`` after each lost race waits, or raises ``GaveUp``."""

    def __init__(self, stream: str, what: str) -> None:
        self.stream = stream
        self.what = what
        self.attempts = 0
        self.started = time.monotonic()

    def lost(self) -> None:
        self.attempts += 1
        waited = time.monotonic() - self.started
        if waited >= GIVE_UP_SECONDS:
            raise GaveUp(f"stream {self.stream}: gave up {self.what} after {self.attempts} attempts in "
                         f"{waited:.0f}s: another writer committed to the stream's table first every time")
        time.sleep(random.uniform(0, min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (self.attempts - 1))))


__all__ = ["GIVE_UP_SECONDS", "GaveUp", "Retries"]
