"""README's "Spark options at a glance" tables name exactly the options the code accepts.

Why: those tables are what a user copies from. An option added to the code and not to the
table, or one the table keeps after the code dropped or renamed it, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jsspark.datasource import options as lake
from jsspark.live import options as live

README = Path(__file__).resolve().parent.parent / "README.md"
STORAGE = "storage.<key>"


def _tables() -> dict[str, set[str]]:
    """Each table of the section by its bold title, as the set of options its first column names."""
    text = README.read_text()
    section = text.split("\n## Spark options at a glance\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, set[str]] = {}
    title = None
    for line in section.splitlines():
        heading = re.match(r"\*\*(.+?)\*\*", line)
        if heading:
            title = heading.group(1)
            tables[title] = set()
        elif line.startswith("| `") and title is not None:
            first = line.split("|")[1]
            tables[title] |= set(re.findall(r"`([^`]+)`", first))
    return tables


def _lake_aliases() -> set[str]:
    return set(live.CONSUMER_CONFIG_NAMES)


@pytest.mark.parametrize(
    ("title", "accepted"),
    [
        ("Lake source", {*lake.COMMON_OPTIONS, *lake.CONSUMER_OPTIONS, *lake.SPARK_READ_OPTIONS, STORAGE}),
        ("Lake sink", {*lake.COMMON_OPTIONS, *lake.SINK_OPTIONS, STORAGE}),
        ("NATS source", {*live.CONNECTION_OPTIONS, *live.READ_OPTIONS, STORAGE}),
        ("NATS sink", set(live.WRITE_OPTIONS)),
    ],
)
def test_each_table_names_what_the_code_accepts(title: str, accepted: set[str]) -> None:
    tables = _tables()
    assert title in tables, f"README's options section has no table {title!r}: {sorted(tables)}"
    assert tables[title] == accepted, (
        f"{title}: in README only {sorted(tables[title] - accepted)}, in the code only {sorted(accepted - tables[title])}"
    )


def test_the_nats_sink_takes_the_connection_options_its_title_points_to() -> None:
    """The NATS sink's table lists only its own options and points to the source's for the
    connection: those are all the connection options, and the sink parses them."""
    tables = _tables()
    shown = tables["NATS source"]
    assert set(live.CONNECTION_OPTIONS) <= shown
    parsed = live.parse_live_write_options({"servers": "nats://127.0.0.1:4222", "connectTimeout": "7",
                                            "name": "etl", "inboxPrefix": "_I.etl"})
    assert (parsed.conn.connect_timeout, parsed.conn.name, parsed.conn.inbox_prefix) == (7, "etl", "_I.etl")


def test_the_nats_source_takes_the_lake_names_the_table_says_it_does() -> None:
    """"also under the lake's names": each lake spelling the NATS source takes is a lake
    source option, and parsing one sets the same thing as the NATS spelling."""
    assert _lake_aliases() <= set(lake.CONSUMER_OPTIONS)
    base = {"servers": "nats://127.0.0.1:4222", "stream": "ORDERS"}
    by_lake = live.parse_live_read_options({**base, "deliver_policy": "by_start_sequence", "opt_start_seq": "5"})
    by_nats = live.parse_live_read_options({**base, "deliverPolicy": "by_start_sequence", "optStartSeq": "5"})
    assert (by_lake.deliver_policy, by_lake.opt_start_seq) == (by_nats.deliver_policy, by_nats.opt_start_seq) == (
        "by_start_sequence", 5)
