"""``jsspark consumer ...``: add from flags and files, info/ls JSON equal to the engine's,
rm confirmations, reset with the answer's ``reset_seq``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jsspark.engine.lake import Lake
from tests.cli.conftest import Run


@pytest.fixture
def orders(cli: Run, lake: Lake) -> Lake:
    assert cli("stream", "add", "ORDERS", "--subjects", "orders.*").code == 0
    for i in range(6):
        lake.publish(f"orders.{'a' if i % 2 else 'b'}", str(i).encode())
    return lake


def test_add_defaults_to_a_durable_explicit_ack_pull_consumer(cli: Run, orders: Lake) -> None:
    doc = cli("consumer", "add", "ORDERS", "C1", "-j").json()
    assert doc["name"] == "C1" and doc["config"]["durable_name"] == "C1"
    assert doc["config"]["ack_policy"] == "explicit" and doc["config"]["deliver_policy"] == "all"
    assert doc["num_pending"] == 6 and "deliver_subject" not in doc["config"]
    info = orders.consumer_info("ORDERS", "C1").to_json()
    assert _untimed(cli("consumer", "info", "ORDERS", "C1", "-j").json()) == _untimed(info)


def _untimed(doc: dict) -> dict:
    """A consumer info without ``ts`` (the time of the answer, different on every call)."""
    return {k: v for k, v in doc.items() if k != "ts"}


@pytest.mark.parametrize(
    ("deliver", "policy", "pending"),
    [("all", "all", 3), ("last", "last", 1), ("new", "new", 0), ("last_per_subject", "last_per_subject", 1),
     ("4", "by_start_sequence", 2), ("1h", "by_start_time", 3), ("2000-01-01T00:00:00Z", "by_start_time", 3)],
)  # fmt: skip
def test_deliver_forms(cli: Run, orders: Lake, deliver: str, policy: str, pending: int) -> None:
    doc = cli("consumer", "add", "ORDERS", "C", "--filter", "orders.a", "--deliver", deliver, "-j").json()
    assert doc["config"]["deliver_policy"] == policy and doc["config"]["filter_subject"] == "orders.a"
    assert doc["num_pending"] == pending


def test_add_flags_and_config_file(cli: Run, orders: Lake, tmp_path: Path) -> None:
    doc = cli(
        "consumer", "add", "ORDERS", "C2", "--filter", "orders.a", "--filter", "orders.b", "--ack", "all",
        "--wait", "45s", "--max-deliver", "5", "--max-pending", "10", "--backoff", "1s,5s", "--replay", "original",
        "--description", "two filters", "--metadata", "k=v", "-j",
    ).json()  # fmt: skip
    cfg = doc["config"]
    assert cfg["filter_subjects"] == ["orders.a", "orders.b"] and cfg["ack_policy"] == "all"
    assert cfg["ack_wait"] == 10**9 and cfg["max_deliver"] == 5 and cfg["max_ack_pending"] == 10
    assert (
        cfg["backoff"] == [10**9, 5 * 10**9]
        and cfg["replay_policy"] == "original"
        and cfg["metadata"]["k"] == "v"
    )
    path = tmp_path / "c.yaml"
    path.write_text("durable_name: FROMFILE\nack_policy: none\ndeliver_policy: new\n")
    doc = cli("consumer", "add", "ORDERS", "--config", str(path), "-j").json()
    assert doc["name"] == "FROMFILE" and doc["config"]["ack_policy"] == "none" and doc["num_pending"] == 0
    path.write_text(json.dumps({"durable_name": "OTHER"}))
    assert (
        "does not match the name 'OTHER'" in cli("consumer", "add", "ORDERS", "X", "--config", str(path)).err
    )
    assert "needs a NAME" in cli("consumer", "add", "ORDERS").err
    assert (
        "invalid --deliver 'sometime'" in cli("consumer", "add", "ORDERS", "Y", "--deliver", "sometime").err
    )


def test_info_table_and_ls(cli: Run, orders: Lake) -> None:
    cli("consumer", "add", "ORDERS", "B", "--filter", "orders.b")
    cli("consumer", "add", "ORDERS", "A", "--description", "first")
    text = cli("consumer", "info", "ORDERS", "B").out
    for needle in ("Information for Consumer ORDERS > B", "Filter Subject: orders.b", "Ack Policy: explicit",
                   "Unprocessed Messages: 3", "Pull Mode: true", "Acknowledgment Floor"):  # fmt: skip
        assert needle in text, needle
    table = cli("consumer", "ls", "ORDERS").out
    assert "Consumers for Stream ORDERS (2)" in table and "first" in table
    assert cli("consumer", "ls", "ORDERS", "-n").out.split() == ["A", "B"]
    doc = cli("consumer", "ls", "ORDERS", "-j").json()
    assert (doc["total"], doc["offset"], doc["limit"]) == (2, 0, 256)  # limit: the server's page size
    assert [c["name"] for c in doc["consumers"]] == ["A", "B"]
    assert _untimed(doc["consumers"][1]) == _untimed(orders.consumer_info("ORDERS", "B").to_json())


def test_rm_and_missing(cli: Run, orders: Lake) -> None:
    cli("consumer", "add", "ORDERS", "C")
    assert "refusing without -f" in cli("consumer", "rm", "ORDERS", "C").err
    assert cli("consumer", "rm", "ORDERS", "C", "-f").out == "Deleted consumer ORDERS > C\n"
    assert orders.consumers_info("ORDERS") == []
    assert cli("consumer", "info", "ORDERS", "C").err == (
        "jsspark: error: could not get info for consumer C on stream ORDERS: consumer not found (10014)\n"
    )
    assert cli("consumer", "ls", "NOPE").err.endswith("stream not found (10059)\n")


def test_reset(cli: Run, orders: Lake) -> None:
    cli("consumer", "add", "ORDERS", "C")
    orders.record_delivered("ORDERS", "C", 5)
    doc = cli("consumer", "reset", "ORDERS", "C", "--seq", "3", "-j").json()
    assert doc["reset_seq"] == 3 and doc["delivered"]["stream_seq"] == 2
    again = cli("consumer", "reset", "ORDERS", "C")
    assert again.code == 0 and "Reset To Sequence:" in again.out


def test_add_accepts_the_nats_cli_defaults_flag(cli: Run, orders: Lake) -> None:
    with_flag = cli("consumer", "add", "ORDERS", "C1", "--pull", "--defaults", "-j").json()["config"]
    without = cli("consumer", "add", "ORDERS", "C2", "--pull", "-j").json()["config"]
    assert {**with_flag, "name": "", "durable_name": ""} == {**without, "name": "", "durable_name": ""}
    assert orders.consumer_info("ORDERS", "C1").config.ack_policy == "explicit"


def test_pause_and_resume_as_the_nats_cli(cli: Run, orders: Lake) -> None:
    """``nats consumer pause`` / ``resume``: a duration or a time, the nats CLI's lines, the
    consumer's ``pause_until`` set and cleared; a time in the past pauses nothing and fails,
    resuming an unpaused consumer fails."""
    cli("consumer", "add", "ORDERS", "C")
    paused = cli("consumer", "pause", "ORDERS", "C", "2050-04-22 11:48:55", "-f")
    assert paused.code == 0, paused.err
    assert paused.out.startswith("Paused ORDERS > C until 2050-04-22 11:48:55 (") and paused.out.rstrip().endswith("s)")
    assert orders.consumer_info("ORDERS", "C").paused
    resumed = cli("consumer", "resume", "ORDERS", "C", "-f")
    assert resumed.out.strip() == "Consumer ORDERS > C was resumed while previously paused until 2050-04-22 11:48:55"
    assert orders.consumer_info("ORDERS", "C").config.pause_until is None
    doc = cli("consumer", "pause", "ORDERS", "C", "1h30m", "-f", "-j").json()
    assert doc["paused"] is True and 5_390 <= doc["pause_remaining"] / 1e9 <= 5_400
    past = cli("consumer", "pause", "ORDERS", "C", "2001-01-01T00:00:00Z", "-f")
    assert past.code == 1 and "consumer failed to pause, perhaps a time in the past was given" in past.err
    assert cli("consumer", "resume", "ORDERS", "C", "-f").code == 1  # a pause in the past pauses nothing
    assert "consumer is not paused" in cli("consumer", "resume", "ORDERS", "C", "-f").err
    bad = cli("consumer", "pause", "ORDERS", "C", "soon", "-f")
    assert bad.code != 0 and "invalid pause time 'soon'" in bad.err
    assert "refusing without -f" in cli("consumer", "pause", "ORDERS", "C", "1h").err
