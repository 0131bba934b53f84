"""Durations as JetStream puts them on the wire: integer nanoseconds.

Configs written by hand may use Go's duration syntax instead (``"2m"``, ``"1h30m"``,
``"500ms"``, ``"1.5s"``), as the nats CLI and server config files do; both parse to the same
``int`` so a model always serializes exactly as the server would.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo
from pydantic_core import PydanticCustomError

NANOSECOND = 1
MICROSECOND = 1_000
MILLISECOND = 1_000_000
SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "µs": MICROSECOND,  # U+00B5 micro sign
    "μs": MICROSECOND,  # U+03BC Greek mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")  # Go: ASCII digits only
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


class DurationOverflow(ValueError):
    """A Go duration string beyond ``int64`` nanoseconds (about 292 years)."""


UNDECODABLE = "go_duration"
"""The pydantic error type of a value Go's decoder does not put in a ``time.Duration`` (an
``int64``); ``ctx["value"]`` is its decoder's name for it (``number 9223372036854775808``)."""


def parse_go_duration(text: str, exact: bool = False) -> int:
    """Nanoseconds of a Go duration string, with Go's ``time.ParseDuration`` rules:
    an optional sign, then one or more ``<decimal><unit>`` parts; a bare ``"0"`` is zero.
    Surrounding whitespace is forgiven in configs, not with ``exact`` (Go refuses it)."""
    s = text if exact else text.strip()
    sign = -1 if s.startswith("-") else 1
    if s.startswith(("-", "+")):
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = Decimal(0)
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}")
        try:
            total += Decimal(m.group(1)) * _UNITS[m.group(2)]
        except InvalidOperation:
            raise ValueError(f"invalid duration {text!r}") from None
        pos = m.end()
    ns = sign * int(total)
    if not _INT64_MIN <= ns <= _INT64_MAX:
        raise DurationOverflow(f"invalid duration {text!r}: beyond {format_go_duration(_INT64_MAX)}, Go's longest")
    return ns


def to_nanoseconds(value: Any) -> int:
    """Wire nanoseconds from an ``int`` (already ns), an integral float, or a Go duration string.

    The server decodes a duration into Go's ``int64``: a number beyond it (or not whole), a
    bool, an array or an object fails to decode (``UNDECODABLE``, which ``WireModel.from_json``
    turns into the server's 10025). A Go duration string is this library's extension (the
    server takes numbers only); one beyond ``int64`` fails the same way."""
    if isinstance(value, bool):
        raise _undecodable("bool")
    if isinstance(value, int | float):
        whole = isinstance(value, int) or value.is_integer()
        if whole and _INT64_MIN <= value <= _INT64_MAX:
            return int(value)
        raise _undecodable(f"number {_go_number(value)}")
    if isinstance(value, str):
        try:
            return parse_go_duration(value)
        except DurationOverflow:
            raise _undecodable("string") from None
    kind = "array" if isinstance(value, list | tuple) else "object" if isinstance(value, dict) else None
    if kind is not None:
        raise _undecodable(kind)
    raise ValueError(f"a duration must be nanoseconds or a Go duration string, got {value!r}")


def _go_number(value: int | float) -> str:
    """The number as its JSON text (what Go's decoder quotes): ``1e+20``, ``1.5``, ``-9223372036854775809``."""
    import json

    return json.dumps(value)


def _undecodable(what: str) -> PydanticCustomError:
    return PydanticCustomError(
        UNDECODABLE, "cannot unmarshal {value} into a Go time.Duration (int64 nanoseconds)", {"value": what}
    )


def seconds_to_nanoseconds(seconds: float | None) -> int:
    """nats-py's convention (durations as float seconds) to wire nanoseconds."""
    return 0 if seconds is None else round(seconds * SECOND)


def format_go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()`` (``2m0s``, ``1.5s``, ``500ms``), used in server texts."""
    if ns == 0:
        return "0s"
    neg, u = ns < 0, abs(ns)
    if u < SECOND:
        for unit, size in (("ms", MILLISECOND), ("µs", MICROSECOND), ("ns", NANOSECOND)):
            if u >= size:
                out = _fraction(u, size) + unit
                break
    else:
        h, rem = divmod(u, HOUR)
        m, rem = divmod(rem, MINUTE)
        out = _fraction(rem, SECOND) + "s"
        if h or m:
            out = f"{m}m{out}"
        if h:
            out = f"{h}h{out}"
    return "-" + out if neg else out


def _fraction(value: int, size: int) -> str:
    whole, frac = divmod(value, size)
    if not frac:
        return str(whole)
    digits = len(str(size)) - 1
    return f"{whole}.{str(frac).rjust(digits, '0').rstrip('0')}"


def _duration_field(value: Any, info: ValidationInfo) -> int:
    """A config's duration; one read back from a lake (``WireModel.from_stored``) is taken as
    stored, even beyond ``int64`` (earlier versions stored such values): the lake stays readable."""
    if info.context and info.context.get("stored") and type(value) is int:
        return value
    return to_nanoseconds(value)


Duration = Annotated[int, BeforeValidator(_duration_field)]
"""A pydantic field type: int nanoseconds (a Go ``int64``), also accepting Go duration strings."""
