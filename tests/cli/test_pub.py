"""``jsspark pub``: routed by subject like the server, headers, templates, batched ``--count``."""

from __future__ import annotations

import json

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


def test_pub_count_stops_at_the_first_refused_message(cli: Run, lake: Lake) -> None:
    """``--count N`` is N publishes (``nats pub --count``): the ones before a refusal are
    stored, the refused one stops it (exit 1, its error), none after it is tried."""
    cli("stream", "add", "D", "--subjects", "d.>", "--max-msgs", "3", "--discard", "new")
    res = cli("pub", "d.1", "n={{Count}}", "--count", "5")
    assert res.code == 1
    assert res.out == 'Published 3 messages to "d.1": Stream D sequences 1..3\n'
    assert (
        res.err
        == "jsspark: error: could not publish message 4 of 5 to d.1: maximum messages exceeded (10077)\n"
    )
    assert lake.stream_info("D").state.messages == 3
    assert lake.get_msg("D", seq=3).data == b"n=3"
    cli("stream", "add", "E", "--subjects", "e.>")
    res = cli("pub", "e.1", "x", "--count", "3", "-H", "Nats-Expected-Last-Sequence:0", "-j")
    assert res.code == 1 and "wrong last sequence: 1 (10071)" in res.err
    assert json.loads(res.out) == {
        "stream": "E", "count": 1, "stored": 1, "duplicates": 0, "first_seq": 1, "last_seq": 1,
        "error": {"code": 400, "err_code": 10071, "description": "wrong last sequence: 1"},
    }  # fmt: skip
    assert lake.stream_info("E").state.last_seq == 1
    refused = cli("pub", "d.1", "x", "--count", "2")  # the first one refused: nothing published
    assert refused.code == 1 and refused.out == ""
    assert "could not publish message 1 of 2 to d.1: maximum messages exceeded (10077)" in refused.err


def test_pub_count_all_duplicates_prints_no_range(cli: Run, orders: Lake) -> None:
    once = cli("pub", "orders.a", "x", "--count", "2", "-H", "Nats-Msg-Id:same")
    assert once.out == 'Published 2 messages to "orders.a": Stream ORDERS sequences 1..1 (1 duplicates)\n'
    again = cli("pub", "orders.a", "x", "--count", "2", "-H", "Nats-Msg-Id:same")
    assert again.out == 'Published 2 messages to "orders.a": Stream ORDERS (2 duplicates)\n'
