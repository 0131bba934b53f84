"""Return shapes of the lake context, named and shaped after nats-py's ``nats.js.api``.

A script can run the same scenario against a server and a lake and compare field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from jsspark.engine.headers import HeaderPairs, encode


def ns_to_datetime(ns: int) -> datetime:
    """UTC datetime (microsecond precision; keep ``ts_ns`` for the full nanoseconds)."""
    return datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).replace(microsecond=(ns % 1_000_000_000) // 1000)


GO_ZERO_TIME = "0001-01-01T00:00:00Z"
"""Go's zero ``time.Time`` as its JSON encoder writes it (``omitempty`` does not drop it)."""


def rfc3339nano(ns: int) -> str:
    """The server's time format: RFC3339 with up to 9 fractional digits, trailing zeros cut."""
    base = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{ns % 1_000_000_000:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


@dataclass
class PubAck:
    stream: str
    seq: int
    domain: str | None = None
    duplicate: bool | None = None


@dataclass
class BatchAck:
    """Result of ``publish_batch``: one commit, ``seqs[i]`` is input row i's sequence (the
    original one for a duplicate)."""

    stream: str
    seqs: np.ndarray
    duplicates: np.ndarray
    stored: int
    replayed: bool = False  # the batch's txn was already committed: nothing was stored again

    @property
    def count(self) -> int:
        return len(self.seqs)

    @property
    def first_seq(self) -> int:
        return int(self.seqs.min()) if len(self.seqs) else 0

    @property
    def last_seq(self) -> int:
        return int(self.seqs.max()) if len(self.seqs) else 0

    def acks(self) -> list[PubAck]:
        return [
            PubAck(self.stream, int(s), duplicate=True if d else None)
            for s, d in zip(self.seqs, self.duplicates, strict=True)
        ]


@dataclass
class StreamState:
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    consumer_count: int
    first_ts_ns: int = 0
    last_ts_ns: int = 0
    num_subjects: int = 0
    num_deleted: int = 0
    subjects: dict[str, int] | None = None

    @property
    def first_ts(self) -> datetime:
        return ns_to_datetime(self.first_ts_ns)

    @property
    def last_ts(self) -> datetime:
        return ns_to_datetime(self.last_ts_ns)

    def to_json(self) -> dict[str, Any]:
        """As the server writes ``state`` in a stream info response."""
        out: dict[str, Any] = {
            "messages": self.messages,
            "bytes": self.bytes,
            "first_seq": self.first_seq,
            "first_ts": rfc3339nano(self.first_ts_ns) if self.first_ts_ns else GO_ZERO_TIME,
            "last_seq": self.last_seq,
            "last_ts": rfc3339nano(self.last_ts_ns) if self.last_ts_ns else GO_ZERO_TIME,
        }
        if self.num_subjects:
            out["num_subjects"] = self.num_subjects
        if self.subjects:
            out["subjects"] = dict(self.subjects)
        if self.num_deleted:
            out["num_deleted"] = self.num_deleted
        out["consumer_count"] = self.consumer_count  # last, in the server's order
        return out


@dataclass
class SourceInfo:
    """A mirror's or source's progress, as the server's ``StreamSourceInfo``: ``external``
    (the origin's prefixes, when it is in another account or domain), ``lag`` (origin messages
    still pending at the last batch), ``active`` (nanoseconds since the last batch landed, -1 if
    none yet), ``seq`` (the last origin sequence taken: 2.15's JSON shows a source's, left out
    while 0, and never a mirror's, which the job progress still shows)."""

    name: str
    lag: int = 0
    active_ns: int = -1
    seq: int = 0
    filter_subject: str = ""
    subject_transforms: list[dict[str, str]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    external: dict[str, str] | None = None

    def to_json(self, mirror: bool = False) -> dict[str, Any]:
        """In ``StreamSourceInfo``'s field order, with its ``omitempty`` fields left out
        (``mirror``: a mirror's entry, without ``seq``)."""
        out: dict[str, Any] = {"name": self.name}
        if self.external is not None:
            out["external"] = self.external
        out["lag"] = self.lag
        if self.seq and not mirror:
            out["seq"] = self.seq
        out["active"] = self.active_ns
        if self.error is not None:
            out["error"] = self.error
        if self.filter_subject:
            out["filter_subject"] = self.filter_subject
        if self.subject_transforms:
            out["subject_transforms"] = self.subject_transforms
        return out


@dataclass
class StreamInfo:
    config: Any
    state: StreamState
    created_ns: int = 0
    sources: list[SourceInfo] | None = None
    mirror: SourceInfo | None = None

    @property
    def created(self) -> datetime:
        return ns_to_datetime(self.created_ns)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": self.config.to_json(),
            "created": rfc3339nano(self.created_ns),
            "state": self.state.to_json(),
        }
        if self.mirror is not None:
            out["mirror"] = self.mirror.to_json(mirror=True)
        if self.sources:
            out["sources"] = [s.to_json() for s in self.sources]
        return out


@dataclass
class RawStreamMsg:
    """A stored message, as nats-py's ``RawStreamMsg`` (plus ``ts_ns`` and header pairs)."""

    subject: str
    seq: int
    data: bytes
    stream: str
    ts_ns: int
    header_pairs: HeaderPairs | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def time(self) -> datetime:
        return ns_to_datetime(self.ts_ns)

    @property
    def headers(self) -> dict[str, str] | None:
        """Like nats-py: a dict, the last value winning for a repeated key."""
        return dict(self.header_pairs) if self.header_pairs else None

    @property
    def hdrs(self) -> bytes | None:
        return encode(self.header_pairs) or None

    @property
    def sequence(self) -> int:
        return self.seq


@dataclass
class SequenceInfo:
    """A ``(consumer_seq, stream_seq)`` pair, as nats-py's ``SequenceInfo``."""

    consumer_seq: int
    stream_seq: int
    last_active_ns: int | None = None

    @property
    def last_active(self) -> datetime | None:
        return ns_to_datetime(self.last_active_ns) if self.last_active_ns else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"consumer_seq": self.consumer_seq, "stream_seq": self.stream_seq}
        if self.last_active_ns:
            out["last_active"] = rfc3339nano(self.last_active_ns)
        return out


@dataclass
class ConsumerInfo:
    """A consumer's config and position, as nats-py's ``ConsumerInfo``.

    A lake consumer keeps no per-message pending map and no waiting pull requests, so
    ``num_redelivered`` and ``num_waiting`` are always 0. ``reset_generation`` (lake only) is
    the count of resets so far: a writer passes the generation it read to ``ack`` and
    ``record_delivered`` so a position from before a reset cannot undo the reset.
    ``reset_seq`` is set on the answer to a reset, as in ``consumer_reset_response``.
    """

    stream_name: str
    name: str
    config: Any
    created_ns: int
    delivered: SequenceInfo
    ack_floor: SequenceInfo
    num_ack_pending: int = 0
    num_redelivered: int = 0
    num_waiting: int = 0
    num_pending: int = 0
    ts_ns: int = 0
    reset_generation: int = 0
    reset_seq: int | None = None
    pause_remaining_ns: int = 0

    @property
    def paused(self) -> bool:
        """Paused now: ``pause_until`` lies ahead (``pause_remaining_ns`` is what is left)."""
        return self.pause_remaining_ns > 0

    @property
    def created(self) -> datetime:
        return ns_to_datetime(self.created_ns)

    def to_json(self) -> dict[str, Any]:
        """As the server writes a consumer info (or, with ``reset_seq``, a reset) response."""
        out: dict[str, Any] = {
            "stream_name": self.stream_name,
            "name": self.name,
            "created": rfc3339nano(self.created_ns),
            "config": self.config.to_json(),
            "delivered": self.delivered.to_json(),
            "ack_floor": self.ack_floor.to_json(),
            "num_ack_pending": self.num_ack_pending,
            "num_redelivered": self.num_redelivered,
            "num_waiting": self.num_waiting,
            "num_pending": self.num_pending,
        }
        if self.paused:
            out["paused"] = True
            out["pause_remaining"] = self.pause_remaining_ns
        out["ts"] = rfc3339nano(self.ts_ns)
        if self.config.priority_groups:
            # the server's state of its (one) group: a lake has no pull requests, so nothing is ever
            # pinned, and Go writes the zero time it then holds
            out["priority_groups"] = [{"group": self.config.priority_groups[0], "pinned_ts": GO_ZERO_TIME}]
        if self.reset_seq is not None:
            out["reset_seq"] = self.reset_seq
        return out
