"""When a paced streaming batch may go: Kafka's ``minOffsetsPerTrigger`` / ``maxTriggerDelay``,
as both ``jetstream`` sources (lake and live) apply ``minMessagesPerTrigger`` / ``maxTriggerDelay``.

Why: a query triggered continuously over a trickle commits a tiny batch per message; a batch
that waits for enough messages, or for the delay, keeps the commits (and a lake sink's files)
few. A full batch goes at once, and so does the one right after it (a backlog is being drained,
and its tail should not wait out the delay). The first batch goes at once, whatever the origin
of the caller's clock (``time.monotonic`` counts from boot, and a machine may have booted a
minute ago). An AvailableNow run is never paced: the callers skip this, since it must end.
"""

from __future__ import annotations

NO_BATCH_YET = float("-inf")


class TriggerPacing:
    """The last batch's time and fullness; times are the caller's clock (``time.monotonic``)."""

    def __init__(self, max_delay: float) -> None:
        self.max_delay = max_delay
        self._last = NO_BATCH_YET
        self._last_full = False

    def due_at(self) -> float:
        """When a batch that is not full may go."""
        return NO_BATCH_YET if self._last_full else self._last + self.max_delay

    def due(self, now: float, full: bool) -> bool:
        """Whether a batch may go at ``now``: a full one always, another once ``due_at``."""
        return full or now >= self.due_at()

    def went(self, now: float, full: bool) -> None:
        """A batch went at ``now``; ``full``: it had the messages that make one full."""
        self._last, self._last_full = now, full
