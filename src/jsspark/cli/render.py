"""Output: server-shaped JSON for ``-j``, aligned tables and key/value sections otherwise.

Plain text formatting (no third-party table library) keeps the CLI's import cost near zero,
which matters because every engine verb must answer in well under a second.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO


def out() -> TextIO:
    """stdout looked up at call time, so tests capturing ``sys.stdout`` see every line."""
    return sys.stdout


def print_json(value: Any) -> None:
    """Indented JSON as ``nats ... -j`` prints it; key order is the server's."""
    out().write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def print_line(text: str = "") -> None:
    out().write(text + "\n")


def print_names(names: Sequence[str], as_json: bool) -> None:
    """An ``ls -n`` answer: a JSON array, or one name a line."""
    if as_json:
        print_json(list(names))
        return
    for name in names:
        print_line(name)


# The server's page size for STREAM.LIST / CONSUMER.LIST (``JSApiListLimit``); every item fits
# on the one page a lake answers, but ``limit`` is the page size, not the count.
LIST_LIMIT = 256


def print_list_json(key: str, items: Sequence[Any]) -> None:
    """A list answer in the server's paged shape (``total``, ``offset``, ``limit``, ``<key>``)."""
    print_json({"total": len(items), "offset": 0, "limit": LIST_LIMIT, key: [i.to_json() for i in items]})


def table(title: str | None, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A boxed table like the nats CLI's: numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [all(_is_number(row[i]) for row in cells) and bool(cells) for i in range(len(headers))]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]

    def fmt(row: Sequence[str], header: bool = False) -> str:
        parts = []
        for i, value in enumerate(row):
            right = numeric[i] and not header
            parts.append(value.rjust(widths[i]) if right else value.ljust(widths[i]))
        return "│ " + " │ ".join(parts) + " │"

    rule = "─┼─".join("─" * w for w in widths)
    inner = sum(widths) + 3 * (len(widths) - 1)
    if title:
        lines = ["╭─" + "─" * inner + "─╮", "│ " + title.center(inner) + " │"]
        lines.append("├─" + "─┬─".join("─" * w for w in widths) + "─┤")
    else:
        lines = ["╭─" + "─┬─".join("─" * w for w in widths) + "─╮"]
    lines.append(fmt(list(headers), header=True))
    lines.append("├─" + rule + "─┤")
    lines.extend(fmt(row) for row in cells)
    lines.append("╰─" + "─┴─".join("─" * w for w in widths) + "─╯")
    return "\n".join(lines)


def sections(blocks: Sequence[tuple[str | None, Sequence[tuple[str, Any]]]]) -> str:
    """Titled blocks of right-aligned ``Label: value`` lines, the layout of ``nats stream info``.

    Rows whose value is ``None`` are left out, so callers can list optional fields inline.
    """
    labels = [label for _, rows in blocks for label, value in rows if value is not None]
    width = max((len(label) for label in labels), default=0)
    lines: list[str] = []
    for title, rows in blocks:
        kept = [(label, value) for label, value in rows if value is not None]
        if not kept:
            continue
        if title:
            lines.extend([title, ""])
        lines.extend(f"{label.rjust(width)}: {_cell(value)}" for label, value in kept)
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def when(ns: int) -> str:
    """A timestamp for humans: UTC, seconds precision; zero (never) prints as ``never``."""
    if not ns:
        return "never"
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def count(n: int) -> str:
    """Thousands separators, as the nats CLI prints message counts."""
    return f"{n:,}"


def limit(n: int, render: Any = count) -> str:
    """A limit as text: ``-1`` and ``0`` are the wire's "unlimited"."""
    return "unlimited" if n in (-1, 0) else render(n)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def _is_number(text: str) -> bool:
    stripped = text.replace(",", "").replace(" ", "")
    for suffix in ("KiB", "MiB", "GiB", "TiB", "PiB", "B"):
        if stripped.endswith(suffix):
            stripped = stripped[: -len(suffix)]
            break
    try:
        float(stripped)
    except ValueError:
        return False
    return True
