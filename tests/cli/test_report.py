"""``jsspark stream report``: per-stream state, the replication section (configs plus each
origin's lag, activity and last origin sequence from the landing marks), and the GraphViz graph."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from jsspark.engine.headers import HEADER_TYPE
from jsspark.engine.ingest import store_mirrored, store_sourced
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
    replication = text[text.index("Replication Report") :]
    backup_row = next(line for line in replication.splitlines() if line.startswith("│ BACKUP "))
    assert [c.strip() for c in backup_row.strip("│").split("│")] == [
        "BACKUP", "Mirror", "", "ORDERS", "", "", "never", "0", "0", "",
    ]  # fmt: skip
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


def _origin_rows(lake: Lake, stream: str, seqs: list[int]) -> pa.Table:
    """Stored origin messages as a replication batch hands them to ``engine.ingest``."""
    got = [r for r in lake.stream(stream).read().sort_by("seq").to_pylist() if r["seq"] in seqs]
    return pa.table({"seq": [r["seq"] for r in got], "ts_ns": [r["ts_ns"] for r in got],
                     "subject": [r["subject"] for r in got], "data": [r["data"] for r in got],
                     "headers": pa.array([r["headers"] for r in got], HEADER_TYPE)})  # fmt: skip


def test_replication_rows_show_lag_activity_and_origin_seq(cli: Run, lake: Lake, tmp_path: Path) -> None:
    _setup(cli, lake, tmp_path)
    for i in range(3, 9):
        lake.publish(f"orders.{'a' if i % 2 else 'b'}", str(i).encode())
    agg_orders = lake.stream_info("AGG").config.sources[0]
    store_mirrored(lake, "BACKUP", _origin_rows(lake, "ORDERS", [1, 2, 3, 4, 5]), lag=3)
    store_sourced(lake, "AGG", _origin_rows(lake, "ORDERS", [1, 2, 3, 4]), origin=agg_orders, lag=4)

    doc = cli("stream", "report", "-j").json()
    by = {(r["stream"], r["origin"]): r for r in doc["replication"]}
    backup, agg, remote = by["BACKUP", "ORDERS"], by["AGG", "ORDERS"], by["AGG", "REMOTE"]
    assert (backup["kind"], backup["lag"], backup["seq"], backup["error"]) == ("mirror", 3, 5, None)
    # the last origin seq stored: 4 is orders.b, which the filter leaves out (as the server's seq)
    assert (agg["kind"], agg["lag"], agg["seq"]) == ("source", 4, 3)
    assert 0 <= backup["active"] < 60_000_000_000 and 0 <= agg["active"] < 60_000_000_000
    assert (remote["lag"], remote["active"], remote["seq"]) == (0, -1, 0)  # nothing landed from it yet
    # the same numbers as the engine's stream_info (the server's StreamSourceInfo)
    info = lake.stream_info("BACKUP").mirror
    assert (info.lag, info.seq) == (backup["lag"], backup["seq"])
    assert lake.stream_info("AGG").state.messages == 2  # orders.a at 1 and 3 passed the filter

    text = cli("stream", "report").out
    cells = {}
    for line in text[text.index("Replication Report") :].splitlines():
        parts = [c.strip() for c in line.strip("│").split("│")]
        if len(parts) == 10 and parts[0] in ("AGG", "BACKUP"):
            cells[parts[0], parts[3]] = parts
    b_row, a_row, r_row = cells["BACKUP", "ORDERS"], cells["AGG", "ORDERS"], cells["AGG", "REMOTE"]
    assert b_row[1:3] == ["Mirror", ""] and b_row[7:] == ["3", "5", ""]
    assert a_row[1] == "Source" and a_row[4:6] == ["orders.a", "seq 2"] and a_row[7:] == ["4", "3", ""]
    assert a_row[6] != "never" and b_row[6] != "never"
    assert r_row[2] == "$JS.hub.API" and r_row[6:] == ["never", "0", "0", ""]
    assert r_row[4] == "r.* => agg.r.{{wildcard(1)}}"

    # stream info shows the same progress, one block per origin, as the nats CLI does
    info = cli("stream", "info", "BACKUP").out
    block = info[info.index("Mirror Information:") : info.index("State:")]
    assert [line.split(":", 1)[0].strip() for line in block.splitlines()[2:] if line.strip()] == [
        "Stream Name", "Lag", "Last Seen", "Last Origin Sequence"
    ]
    assert "Stream Name: ORDERS" in block and "Lag: 3" in block and "Last Origin Sequence: 5" in block
    agg_info = cli("stream", "info", "AGG").out
    assert agg_info.count("Source Information:") == 2 and "Stream Name: REMOTE" in agg_info
    assert "Last Seen: never" in agg_info[agg_info.index("Stream Name: REMOTE") :]


def test_dot_draws_lag_and_republish_edges(cli: Run, lake: Lake, tmp_path: Path) -> None:
    _setup(cli, lake, tmp_path)
    assert cli("stream", "add", "OUT", "--subjects", "out.>", "--republish-source", "out.>",
               "--republish-destination", "copy.>", "--republish-headers").code == 0  # fmt: skip
    store_mirrored(lake, "BACKUP", _origin_rows(lake, "ORDERS", [1]), lag=1)
    dot = tmp_path / "g.dot"
    assert cli("stream", "report", "--dot", str(dot)).code == 0
    graph = dot.read_text()
    assert '"ORDERS" -> "BACKUP" [label="mirror\\nlag 1", style=bold];' in graph
    assert '"subjects copy.>" [shape=ellipse];' in graph
    assert '"OUT" -> "subjects copy.>" [label="republish\\nout.>\\nheaders only", style=dotted];' in graph
