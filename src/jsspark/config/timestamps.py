"""Timestamps as JetStream reads and writes them: RFC3339 with up to nanosecond precision.

Python's ``datetime`` stops at microseconds while Go keeps nanoseconds, so ``UTCTime`` is a
timezone-aware UTC ``datetime`` that also carries the sub-microsecond digits and the UTC
offset it was written with: Go's ``time.Time`` keeps that offset, so the server echoes
``05:04:05+02:00`` as given, and a config read from the server serializes back to the
identical string. Text is read as the server's JSON decoder reads it (``time.Parse`` with
``time.RFC3339``), and what that refuses fails with the same text (``GoTimeError``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator
from pydantic_core import PydanticCustomError

RFC3339_LAYOUT = "2006-01-02T15:04:05Z07:00"
BAD_TIME = "go_time"
"""The pydantic error type of a time Go's decoder refuses; ``ctx["err"]`` is its text."""


class GoTimeError(ValueError):
    """A time ``time.Parse(time.RFC3339, ...)`` refuses, with Go's ``ParseError`` text."""


def _quote(s: str) -> str:
    """Go's ``time.quote``: ``\\`` and ``"`` escaped, every byte of a non-ASCII or control
    character as ``\\xNN``."""
    out = []
    for c in s:
        if c < " " or c >= "\x80":
            out.append("".join(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogatepass")))
        else:
            out.append("\\" + c if c in '"\\' else c)
    return '"' + "".join(out) + '"'


def _cannot(value: str, rest: str, elem: str) -> GoTimeError:
    return GoTimeError(
        f"parsing time {_quote(value)} as {_quote(RFC3339_LAYOUT)}: cannot parse {_quote(rest)} as {_quote(elem)}"
    )


def _num(s: str, fixed: bool) -> tuple[int, str] | None:
    """Go's ``getnum``: one or two digits (exactly two when ``fixed``)."""
    if not s[:1].isdigit() or not s[:1].isascii():
        return None
    if not (len(s) > 1 and s[1].isdigit() and s[1].isascii()):
        return None if fixed else (int(s[0]), s[1:])
    return int(s[:2]), s[2:]


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def parse_go_rfc3339(text: str) -> tuple[datetime, int, int]:
    """``text`` read as ``time.Parse(time.RFC3339, text)`` reads it (what the server's JSON
    decoder uses): ``(utc datetime, nanoseconds beyond its microseconds, offset seconds)``.

    Go's parser is laxer than RFC 3339 in places (a one-digit hour, a comma before the
    fraction, more than nine fraction digits, a ``-00:00`` or ``+24:00`` offset) and stricter
    in others (an upper-case ``T`` and ``Z`` only); this follows it element by element, with
    its error texts (``cannot parse "z" as "Z07:00"``, ``month out of range``)."""
    v = text
    if not (len(v) >= 4 and v[:4].isdigit() and v[:4].isascii()):
        raise _cannot(text, v, "2006")
    year, v = int(v[:4]), v[4:]
    fields: list[int] = []
    for sep, elem, fixed, name, limit in (("-", "01", True, "month", None), ("-", "02", True, None, None),
                                          ("T", "15", False, "hour", 24), (":", "04", True, "minute", 60),
                                          (":", "05", True, "second", 60)):  # fmt: skip
        if not v.startswith(sep):
            raise _cannot(text, v, sep)
        v = v[1:]
        got = _num(v, fixed)
        if got is None:
            raise _cannot(text, v, elem)
        n, v = got
        if name == "month" and not 1 <= n <= 12:
            raise GoTimeError(f"parsing time {_quote(text)}: month out of range")
        if limit is not None and n >= limit:
            raise GoTimeError(f"parsing time {_quote(text)}: {name} out of range")
        fields.append(n)
    month, day, hour, minute, second = fields
    nanos = 0
    if len(v) >= 2 and v[0] in ".," and v[1].isdigit() and v[1].isascii():
        n = 2
        while n < len(v) and v[n].isdigit() and v[n].isascii():
            n += 1
        frac = v[1:min(n, 10)]  # Go reads at most nine digits and drops the rest
        nanos = int(frac.ljust(9, "0"))
        v = v[n:]
    if v.startswith("Z"):
        offset, v = 0, v[1:]
    else:
        if len(v) < 6 or v[3] != ":":
            raise _cannot(text, v, "Z07:00")
        hh, mm = _num(v[1:3], True), _num(v[4:6], True)
        if hh is None or mm is None or v[0] not in "+-":
            raise _cannot(text, v, "Z07:00")
        if hh[0] > 24:
            raise GoTimeError(f"parsing time {_quote(text)}: time zone offset hour out of range")
        if mm[0] > 60:
            raise GoTimeError(f"parsing time {_quote(text)}: time zone offset minute out of range")
        offset = (hh[0] * 60 + mm[0]) * 60 * (-1 if v[0] == "-" else 1)
        v = v[6:]
    if v:
        raise GoTimeError(f"parsing time {_quote(text)}: extra text: {_quote(v)}")
    if not 1 <= day <= _days_in(month, year):
        raise GoTimeError(f"parsing time {_quote(text)}: day out of range")
    try:
        wall = datetime(year, month, day, hour, minute, second, nanos // 1000, UTC)
        utc = wall - timedelta(seconds=offset)
    except (ValueError, OverflowError):
        raise GoTimeError(f"parsing time {_quote(text)}: year {year} is outside the years 1..9999 this library keeps") from None
    return utc, nanos % 1000, offset


class UTCTime(datetime):
    """A UTC ``datetime`` that keeps nanoseconds (``nanosecond`` is 0-999 beyond ``microsecond``)."""

    _extra_ns: int
    _offset_s: int  # the UTC offset it was written with, for writing it back the same way

    def __new__(cls, *args: Any, nanosecond: int = 0, offset: int = 0, **kwargs: Any) -> UTCTime:
        self = super().__new__(cls, *args, **kwargs)
        if not 0 <= nanosecond < 1000:
            raise ValueError("nanosecond must be in 0..999")
        self._extra_ns = nanosecond
        self._offset_s = offset
        return self

    @property
    def nanosecond(self) -> int:
        return self._extra_ns

    @classmethod
    def from_datetime(cls, value: datetime, nanosecond: int = 0) -> UTCTime:
        """Convert any datetime to UTC (a naive one is taken to be UTC already), keeping the
        offset an aware one was given in."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        offset = value.utcoffset()
        u = value.astimezone(UTC)
        return cls(
            u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, UTC, nanosecond=nanosecond,
            offset=int(offset.total_seconds()) if offset else 0,
        )

    @classmethod
    def parse(cls, text: str) -> UTCTime:
        """Parse RFC3339 / RFC3339Nano as Go's ``time.Time.UnmarshalJSON`` does
        (``parse_go_rfc3339``); ``GoTimeError`` with Go's text for what it refuses."""
        u, nanosecond, offset = parse_go_rfc3339(text)
        return cls(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, UTC,
                   nanosecond=nanosecond, offset=offset)  # fmt: skip

    @property
    def offset_seconds(self) -> int:
        return self._offset_s

    def to_rfc3339nano(self) -> str:
        """Go's ``time.RFC3339Nano`` layout: trailing zeros trimmed, the wall time at the offset
        it was given in, ``Z`` for UTC."""
        frac = f"{self.microsecond:06d}{self._extra_ns:03d}".rstrip("0")
        w = datetime(self.year, self.month, self.day, self.hour, self.minute, self.second)
        off = self._offset_s
        if abs(off) >= 24 * 3600:  # Go parses +24:00 but could not read back its own +24:00 or +25:00
            off = 0
        if off:
            try:
                w += timedelta(seconds=off)
            except OverflowError:  # a wall time beyond year 9999 or before 1: write it in UTC
                off = 0
        base = f"{w.year:04d}-{w.month:02d}-{w.day:02d}T{w.hour:02d}:{w.minute:02d}:{w.second:02d}"
        zone = "Z" if not off else f"{'-' if off < 0 else '+'}{abs(off) // 3600:02d}:{abs(off) % 3600 // 60:02d}"
        return f"{base}.{frac}{zone}" if frac else f"{base}{zone}"

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


def _validate_time(value: Any) -> UTCTime:
    """A config field's time; one Go's decoder refuses fails as ``BAD_TIME`` with its text,
    which ``WireModel.from_json`` turns into the server's 10025."""
    try:
        return to_utc_time(value)
    except GoTimeError as e:
        raise PydanticCustomError(BAD_TIME, "{err}", {"err": str(e)}) from None


Timestamp = Annotated[
    UTCTime,
    PlainValidator(_validate_time),
    PlainSerializer(lambda t: t.to_rfc3339nano(), return_type=str),
]
"""A pydantic field type: UTC time, serialized RFC3339Nano like the server."""

