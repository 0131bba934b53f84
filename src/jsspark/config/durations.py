"""Durations as JetStream puts them on the wire: integer nanoseconds.

Configs written by hand may use Go's duration syntax instead (``"2m"``, ``"1h30m"``,
``"500ms"``, ``"1.5s"``), as the nats CLI and server config files do; both parse to the same
``int`` so a model always serializes exactly as the server would.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator

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
    ns = int(total)
    if ns > _INT64_MAX:
        raise ValueError(f"invalid duration {text!r}: overflows int64 nanoseconds")
    return sign * ns


def to_nanoseconds(value: Any) -> int:
    """Wire nanoseconds from an ``int`` (already ns), an integral float, or a Go duration string."""
    if isinstance(value, bool):
        raise ValueError("a duration must be nanoseconds or a Go duration string, not a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return parse_go_duration(value)
    raise ValueError(f"a duration must be nanoseconds or a Go duration string, got {value!r}")


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


Duration = Annotated[int, BeforeValidator(to_nanoseconds)]
"""A pydantic field type: int nanoseconds, also accepting Go duration strings."""
