"""``jsspark stream report``: per-stream state, the replication section from the configs,
and the GraphViz dot graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jsspark.engine.lake import Lake
from tests.cli.conftest import Run


def _setup(cli: Run, lake: Lake, tmp_path: Path) -> None:
    assert cli("stream", "add", "ORDERS", "--subjects", "orders.*").code == 0
    assert cli("stream", "add", "BACKUP", "--mirror", "ORDERS").code == 0
    agg = tmp_path / "agg.json"
    agg.write_text(json.dumps({
        "name": "AGG", "subjects": ["agg.>"],
        "sources": [
            {"name": "ORDERS", "filter_subject": "orders.a", "opt_start_seq": 2},
            {"name": "REMOTE", "external": {"api": "$JS.hub.API", "deliver": ""},
             "subject_transforms": [{"src": "r.*", "dest": "agg.r.{{wildcard(1)}}"}]},
        ],
    }))  # fmt: skip
    assert cli("stream", "add", "--config", str(agg)).code == 0, cli(
        "stream", "add", "--config", str(agg)
    ).err
    lake.publish("orders.a", b"1")
    lake.publish("orders.b", b"22")
    lake.add_consumer("ORDERS", durable_name="C", ack_policy="explicit")


def test_report_table_json_and_dot(cli: Run, lake: Lake, tmp_path: Path) -> None:
    assert cli("stream", "report").out == "No Streams defined\n"
    _setup(cli, lake, tmp_path)
    doc = cli("stream", "report", "-j").json()
    orders = next(s for s in doc["streams"] if s["name"] == "ORDERS")
    assert orders == {"name": "ORDERS", "consumers": 1, "messages": 2, "bytes": lake.stream_info("ORDERS").state.bytes,
                      "first_seq": 1, "last_seq": 2, "num_subjects": 2, "num_deleted": 0}  # fmt: skip
    assert [(r["stream"], r["kind"], r["origin"]) for r in doc["replication"]] == [
        ("AGG", "source", "ORDERS"), ("AGG", "source", "REMOTE"), ("BACKUP", "mirror", "ORDERS"),
    ]  # fmt: skip
    remote = doc["replication"][1]
    assert remote["api"] == "$JS.hub.API" and remote["transforms"] == ["r.* => agg.r.{{wildcard(1)}}"]
    assert doc["replication"][0]["filters"] == ["orders.a"] and doc["replication"][0]["start"] == "seq 2"

    dot = tmp_path / "g.dot"
    res = cli("stream", "report", "--dot", str(dot))
    text = res.out
    assert (
        "Stream Report" in text
        and "Replication Report" in text
        and f"Wrote replication graph to {dot}" in text
    )
    orders_row = next(line for line in text.splitlines() if line.startswith("│ ORDERS "))
    assert [c.strip() for c in orders_row.strip("│").split("│")] == [
        "ORDERS",
        "1",
        "2",
        f"{orders['bytes']} B",
        "1",
        "2",
        "2",
        "0",
    ]
    assert "│ BACKUP │ mirror │ ORDERS" in text
    graph = dot.read_text()
    assert graph.startswith('digraph "jsspark replication" {') and graph.rstrip().endswith("}")
    assert '"ORDERS" -> "BACKUP" [label="mirror", style=bold];' in graph
    assert '"ORDERS" -> "AGG" [label="source\\norders.a"];' in graph
    assert '"REMOTE@$JS.hub.API" [style=dashed];' in graph
    assert '"REMOTE@$JS.hub.API" -> "AGG"' in graph
    assert res.err == ""  # no progress when stderr is not a terminal


def test_progress_only_on_a_terminal(
    cli: Run, lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    _setup(cli, lake, tmp_path)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    res = cli("stream", "report", "-j")
    assert "reading streams: 3/3" in res.err and res.err.endswith("\r\x1b[K")
    json.loads(res.out)
