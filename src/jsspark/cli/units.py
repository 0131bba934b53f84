"""Command-line quantities: sizes and durations as a person types them, as the nats CLI reads them.

The wire always carries bytes and nanoseconds; on the command line ``1GB``, ``-1`` (unlimited),
``2m`` or ``7d`` are friendlier. Parsing lives here, away from argument wiring, so that
``stream add`` and ``stream edit`` read exactly the same syntax.
"""

from __future__ import annotations

import argparse
import re

_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
HOUR = 3_600_000_000_000
_LONG_UNITS = {"y": 365 * 24 * HOUR, "w": 7 * 24 * HOUR, "d": 24 * HOUR}
_LONG_PART = re.compile(r"^(\d+)([ywd])")
_LONGEST = 2**63 - 1  # nanoseconds: Go's time.Duration is an int64


def parse_size(text: str) -> int:
    """Bytes from ``1024``, ``512K``, ``1MB``, ``2GiB`` or ``-1`` (unlimited).

    Like the nats CLI, K/M/G/T are powers of 1024 whichever spelling is used, so a limit
    typed as ``1GB`` matches what ``nats stream add --max-bytes 1GB`` would store.
    """
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"invalid size {text!r} (use bytes, or a number with K, M, G, T: 512K, 1GB, -1)")
    number, power = m.group(1), _POWERS[m.group(2).lower()]
    value = float(number) * (1024**power)
    if value < 0:
        if value != -1:
            raise ValueError(f"invalid size {text!r}: the only negative size is -1 (unlimited)")
        return -1
    return int(value)


def parse_duration(text: str) -> int:
    """Nanoseconds from a Go duration (``90s``, ``1h30m``) with the nats CLI's longer units
    in front (``1y``, ``2w``, ``7d``, ``1d12h``); ``-1``/``0`` mean unlimited as on the wire."""
    s = text.strip()
    if s in ("-1", "0", "unlimited"):
        return 0
    total = 0
    while True:
        m = _LONG_PART.match(s)
        if m is None:
            break
        total += int(m.group(1)) * _LONG_UNITS[m.group(2)]
        s = s[m.end() :]
    if s:
        from jsspark.config.durations import DurationOverflow, parse_go_duration  # lazily: loads pydantic

        try:
            total += parse_go_duration(s)
        except DurationOverflow:
            total = _LONGEST + 1
        except ValueError:
            raise ValueError(f"invalid duration {text!r} (examples: 500ms, 90s, 1h30m, 7d, 1y)") from None
    if total < 0:
        raise ValueError(f"invalid duration {text!r}: durations cannot be negative")
    if total > _LONGEST:  # the server decodes durations into Go's int64 nanoseconds
        raise ValueError(f"invalid duration {text!r}: longer than 292y171d (2562047h47m16.854775807s), the longest")
    return total


def human_bytes(n: int) -> str:
    """``1.5 KiB``-style text for tables; exact byte counts stay in ``--json``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    return f"{n} B"


def human_duration(ns: int) -> str:
    """Compact age text (``3d4h``, ``12m5s``, ``250ms``) for tables, largest two units."""
    if ns <= 0:
        return "0s"
    if ns < 1_000_000_000:
        ms = ns / 1_000_000
        return f"{ms:.0f}ms" if ms >= 1 else f"{ns}ns"
    seconds = ns // 1_000_000_000
    parts: list[str] = []
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return "".join(parts)


def size_arg(text: str) -> int:
    """``parse_size`` as an argparse ``type``: a bad value becomes a usage error naming it."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds_arg(text: str) -> float:
    """A timeout as an argparse ``type``: seconds (``3600``) or a duration (``90s``, ``1h``)."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text) / 1e9
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value


def uint_arg(text: str) -> int:
    """A sequence or a count to keep, as an argparse ``type``: Go's ``uint64`` on the wire, so a
    negative one is a usage error here (the server refuses it as invalid JSON, 10025; ``-1`` is
    not "all" as it is for limits)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: it cannot be negative")
    return value


def duration_arg(text: str) -> int:
    """``parse_duration`` as an argparse ``type``."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
