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


_GO_LAYOUT = "2006-01-02T15:04:05Z07:00"
_GO_ELEMENTS = (("2006", 4, None), ("-", 0, None), ("01", 2, (1, 12, "month")), ("-", 0, None),
                ("02", 2, (1, 31, "day")), ("T", 0, None), ("15", 1, (0, 23, "hour")), (":", 0, None),
                ("04", 2, (0, 59, "minute")), (":", 0, None), ("05", 2, (0, 59, "second")))


def go_time_error(value: str) -> str:
    """What Go's ``time.Parse(time.RFC3339, value)`` says of a time it cannot parse, which the
    server answers a bad ``opt_start_time`` with (10025, after ``invalid JSON: ``): the layout
    element where parsing stopped, a value out of range, or extra text. ``""`` if Go parses it."""
    quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def bad(rest: str, elem: str) -> str:
        q = '"' + rest.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return f'parsing time {quoted} as "{_GO_LAYOUT}": cannot parse {q} as "{elem}"'

    rest = value
    for elem, width, bounds in _GO_ELEMENTS:
        if not width:  # a literal
            if not rest.startswith(elem):
                return bad(rest, elem)
            rest = rest[1:]
            continue
        if width == 4:
            if len(rest) < 4 or not rest[:4].isdigit():
                return bad(rest, elem)
            rest = rest[4:]
            continue
        # Go's getnum: one or two digits (exactly two for a zero-padded element)
        if not rest[:1].isdigit() or (width == 2 and not rest[1:2].isdigit()):
            return bad(rest, elem)
        n = 2 if rest[1:2].isdigit() else 1
        number, rest = int(rest[:n]), rest[n:]
        assert bounds is not None
        if not bounds[0] <= number <= bounds[1]:
            return f"parsing time {quoted}: {bounds[2]} out of range"
        if elem == "05" and len(rest) >= 2 and rest[0] in ".," and rest[1].isdigit():
            i = 1
            while i < len(rest) and rest[i].isdigit():
                i += 1
            rest = rest[i:]
    if rest.startswith("Z"):
        rest = rest[1:]
    elif len(rest) < 6 or rest[3] != ":" or rest[0] not in "+-" or not (rest[1:3] + rest[4:6]).isdigit():
        return bad(rest, "Z07:00")
    else:
        rest = rest[6:]
    if rest:
        return f'parsing time {quoted}: extra text: "{rest}"'
    return ""
