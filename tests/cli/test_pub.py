"""``jsspark pub``: routed by subject like the server, headers, templates, batched ``--count``."""

from __future__ import annotations

import pytest

from jsspark.engine.lake import Lake
from tests.cli.conftest import Run


@pytest.fixture
def orders(cli: Run, lake: Lake) -> Lake:
    assert cli("stream", "add", "ORDERS", "--subjects", "orders.*").code == 0
    assert cli("stream", "add", "OTHER", "--subjects", "other.>").code == 0
    return lake


def test_pub_one_routes_by_subject(cli: Run, orders: Lake) -> None:
    res = cli("pub", "other.x.y", "hello", "-H", "A:1", "-H", "A: 2", "-H", "Nats-Msg-Id:m1")
    assert res.out == 'Published 5 bytes to "other.x.y"\n>>> Stream: OTHER Sequence: 1\n'
    msg = orders.get_msg("OTHER", seq=1)
    assert msg.data == b"hello" and msg.header_pairs == [("A", "1"), ("A", "2"), ("Nats-Msg-Id", "m1")]
    dup = cli("pub", "other.x.y", "hello", "-H", "Nats-Msg-Id:m1", "-j").json()
    assert dup == {"stream": "OTHER", "seq": 1, "duplicate": True}


def test_pub_count_with_templates(cli: Run, orders: Lake) -> None:
    doc = cli(
        "pub", "orders.new", "n={{ Count }}", "-H", "Nats-Msg-Id:id-{{.Count}}", "--count", "25", "-j"
    ).json()
    assert doc == {
        "stream": "ORDERS",
        "count": 25,
        "stored": 25,
        "duplicates": 0,
        "first_seq": 1,
        "last_seq": 25,
    }
    assert orders.get_msg("ORDERS", seq=7).data == b"n=7"
    assert orders.get_msg("ORDERS", seq=7).headers == {"Nats-Msg-Id": "id-7"}
    res = cli("pub", "orders.new", "n={{Count}}", "-H", "Nats-Msg-Id:id-{{Count}}", "--count", "30")
    assert (
        res.out == 'Published 30 messages to "orders.new": Stream ORDERS sequences 26..30 (25 duplicates)\n'
    )
    assert res.err == ""  # no progress output when stderr is not a terminal


def test_pub_errors(cli: Run, orders: Lake) -> None:
    none = cli("pub", "nowhere", "x")
    assert none.code == 1 and "no responders" in none.err and "nowhere" in none.err
    assert "no responders" in cli("pub", "nowhere", "x", "--count", "3").err
    assert "invalid header 'bad'" in cli("pub", "orders.a", "x", "-H", "bad").err
    assert cli("pub", "orders.a", "x", "--count", "0").code == 2
    cli("stream", "edit", "ORDERS", "--max-msg-size", "4", "-f")
    big = cli("pub", "orders.a", "too large")
    assert big.code == 1 and big.err.startswith(
        "jsspark: error: could not publish to orders.a: message size exceeds maximum allowed (10054)"
    )
