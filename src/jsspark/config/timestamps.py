"""Timestamps as JetStream writes them: RFC3339 with up to nanosecond precision, in UTC.

Python's ``datetime`` stops at microseconds while Go keeps nanoseconds, so ``UTCTime`` is a
timezone-aware UTC ``datetime`` that also carries the sub-microsecond digits; a config read
from the server therefore serializes back to the identical string.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$"
)


class UTCTime(datetime):
    """A UTC ``datetime`` that keeps nanoseconds (``nanosecond`` is 0-999 beyond ``microsecond``)."""

    _extra_ns: int

    def __new__(cls, *args: Any, nanosecond: int = 0, **kwargs: Any) -> UTCTime:
        self = super().__new__(cls, *args, **kwargs)
        if not 0 <= nanosecond < 1000:
            raise ValueError("nanosecond must be in 0..999")
        self._extra_ns = nanosecond
        return self

    @property
    def nanosecond(self) -> int:
        return self._extra_ns

    @classmethod
    def from_datetime(cls, value: datetime, nanosecond: int = 0) -> UTCTime:
        """Convert any datetime to UTC (a naive one is taken to be UTC already)."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        u = value.astimezone(UTC)
        return cls(
            u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, UTC, nanosecond=nanosecond
        )

    @classmethod
    def parse(cls, text: str) -> UTCTime:
        """Parse RFC3339 / RFC3339Nano as Go's ``time.Time.UnmarshalJSON`` does."""
        m = _RFC3339.match(text)
        if m is None:
            raise ValueError(f"not an RFC3339 time: {text!r}")
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        digits = (m.group(7) or "").ljust(9, "0")
        zone = m.group(8)
        tz = UTC
        if zone not in ("Z", "z"):
            sign = -1 if zone[0] == "-" else 1
            tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        local = datetime(year, month, day, hour, minute, second, int(digits[:6]), tz)
        return cls.from_datetime(local, nanosecond=int(digits[6:]))

    def to_rfc3339nano(self) -> str:
        """Go's ``time.RFC3339Nano`` layout for a UTC time: trailing zeros trimmed, ``Z`` zone."""
        frac = f"{self.microsecond:06d}{self._extra_ns:03d}".rstrip("0")
        base = f"{self.year:04d}-{self.month:02d}-{self.day:02d}T{self.hour:02d}:{self.minute:02d}:{self.second:02d}"
        return f"{base}.{frac}Z" if frac else f"{base}Z"

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # datetime's own pickling would drop the nanoseconds.
        return (UTCTime.parse, (self.to_rfc3339nano(),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, datetime):
            return NotImplemented
        return super().__eq__(other) and self._extra_ns == getattr(other, "nanosecond", 0)

    def __hash__(self) -> int:
        return hash((super().__hash__(), self._extra_ns))

    def __repr__(self) -> str:
        return f"UTCTime.parse({self.to_rfc3339nano()!r})"


def to_utc_time(value: Any) -> UTCTime:
    """Accept an RFC3339 string or a ``datetime``; always yield a UTC ``UTCTime``."""
    if isinstance(value, UTCTime):
        return value
    if isinstance(value, datetime):
        return UTCTime.from_datetime(value)
    if isinstance(value, str):
        return UTCTime.parse(value)
    raise ValueError(f"a time must be an RFC3339 string or a datetime, got {value!r}")


Timestamp = Annotated[
    UTCTime,
    PlainValidator(to_utc_time),
    PlainSerializer(lambda t: t.to_rfc3339nano(), return_type=str),
]
"""A pydantic field type: UTC time, serialized RFC3339Nano like the server."""
