"""``jsspark stream ...`` verbs: output equal to the engine's JSON, tables with the key fields,
errors as one ``jsspark: error:`` line with the server's text and code, ``-f`` confirmations."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from jsspark.engine.lake import Lake
from tests.cli.conftest import Run


def _add(cli: Run, name: str = "ORDERS", *flags: str) -> None:
    res = cli("stream", "add", name, "--subjects", f"{name.lower()}.*", *flags)
    assert res.code == 0, res.err


def test_add_with_flags_stores_the_wire_values(cli: Run, lake: Lake) -> None:
    res = cli(
        "stream", "add", "ORDERS", "--subjects", "orders.*,returns.*", "--max-msgs", "100", "--max-bytes", "1MB",
        "--max-age", "7d", "--max-msg-size", "4K", "--max-msgs-per-subject", "5", "--discard", "new",
        "--dupe-window", "90s", "--allow-direct", "--deny-delete", "--deny-purge", "--retention", "limits",
        "--description", "all orders", "--metadata", "team=shop", "-j",
    )  # fmt: skip
    cfg = res.json()["config"]
    assert cfg["subjects"] == ["orders.*", "returns.*"]
    assert (cfg["max_msgs"], cfg["max_bytes"], cfg["max_msg_size"], cfg["max_msgs_per_subject"]) == (
        100,
        1 << 20,
        4096,
        5,
    )
    assert cfg["max_age"] == 7 * 24 * 3600 * 10**9 and cfg["duplicate_window"] == 90 * 10**9
    assert cfg["discard"] == "new" and cfg["allow_direct"] and cfg["deny_delete"] and cfg["deny_purge"]
    assert cfg["metadata"]["team"] == "shop" and cfg["description"] == "all orders"
    assert res.json() == lake.stream_info("ORDERS").to_json()


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_add_from_config_file(cli: Run, lake: Lake, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"s.{fmt}"
    if fmt == "json":
        path.write_text(
            json.dumps(
                {"name": "EV", "subjects": ["ev.>"], "max_age": 3_600_000_000_000, "retention": "workqueue"}
            )
        )
    else:
        path.write_text("name: EV\nsubjects: [ev.>]\nmax_age: 1h\nretention: workqueue\n")
    res = cli("stream", "add", "--config", str(path), "-j")
    cfg = res.json()["config"]
    assert cfg["name"] == "EV" and cfg["max_age"] == 3_600_000_000_000 and cfg["retention"] == "workqueue"
    assert lake.stream_info("EV").config.subjects == ["ev.>"]


def test_add_takes_a_whole_info_document_and_flags_override(cli: Run, lake: Lake, tmp_path: Path) -> None:
    _add(cli)
    info = cli("stream", "info", "ORDERS", "-j").json()
    path = tmp_path / "info.json"
    path.write_text(
        json.dumps({**info, "config": {**info["config"], "name": "COPY", "subjects": ["copy.*"]}})
    )
    res = cli("stream", "add", "--config", str(path), "--max-msgs", "7", "-j")
    assert res.json()["config"]["max_msgs"] == 7 and lake.stream_info("COPY").config.subjects == ["copy.*"]


def test_info_json_is_the_engine_json_and_table_has_the_key_fields(cli: Run, lake: Lake) -> None:
    _add(cli, "ORDERS", "--max-msgs", "1000")
    lake.publish("orders.a", b"x")
    lake.publish("orders.b", b"yy")
    assert cli("stream", "info", "ORDERS", "-j").json() == lake.stream_info("ORDERS").to_json()
    text = cli("stream", "info", "ORDERS").out
    for needle in ("Information for Stream ORDERS", "Subjects: orders.*", "Maximum Messages: 1,000", "Messages: 2",
                   "First Sequence: 1", "Last Sequence: 2", "Number of Subjects: 2", "Retention: limits"):  # fmt: skip
        assert needle in text, needle
    sub = cli("stream", "info", "ORDERS", "--subjects", "orders.a", "-j").json()
    assert sub["state"]["subjects"] == {"orders.a": 1}


def test_ls_table_json_and_names(cli: Run, lake: Lake) -> None:
    assert cli("stream", "ls").out.strip() == "No Streams defined"
    _add(cli, "B")
    _add(cli, "A", "--description", "first")
    lake.publish("a.x", b"hello")
    text = cli("stream", "ls").out
    assert "Streams (2)" in text and "first" in text and text.index("│ A ") < text.index("│ B ")
    assert cli("stream", "ls", "-n").out.split() == ["A", "B"]
    assert cli("stream", "ls", "-n", "-j").json() == ["A", "B"]
    doc = cli("-j", "stream", "ls").json()
    assert doc["total"] == 2 and doc["streams"] == [
        lake.stream_info("A").to_json(),
        lake.stream_info("B").to_json(),
    ]


def test_edit_applies_flags_shows_the_diff_and_needs_force_without_a_tty(cli: Run, lake: Lake) -> None:
    _add(cli)
    refused = cli("stream", "edit", "ORDERS", "--max-msgs", "10")
    assert (
        refused.code == 1
        and "refusing without -f" in refused.err
        and "stdin is not a terminal" in refused.err
        and "Really edit Stream ORDERS?" in refused.err
    )
    assert "- max_msgs: -1" in refused.out and "+ max_msgs: 10" in refused.out
    assert lake.stream_info("ORDERS").config.max_msgs == -1
    res = cli(
        "stream", "edit", "ORDERS", "--max-msgs", "10", "--no-deny-delete", "--description", "d", "-f", "-j"
    )
    assert res.json()["config"]["max_msgs"] == 10 and lake.stream_info("ORDERS").config.description == "d"
    same = cli("stream", "edit", "ORDERS", "--max-msgs", "10", "-f")
    assert same.code == 0 and "no configuration changes" in same.out
    assert "nothing to change" in cli("stream", "edit", "ORDERS").err


def test_edit_refused_by_the_server_rules(cli: Run, tmp_path: Path) -> None:
    _add(cli)
    res = cli("stream", "edit", "ORDERS", "--storage", "memory", "-f")
    assert res.code == 1
    assert res.err.startswith(
        "jsspark: error: could not edit stream ORDERS: stream configuration update can not change storage type (10052)"
    )


def test_edit_from_config_replaces_the_config(cli: Run, lake: Lake, tmp_path: Path) -> None:
    _add(cli)
    path = tmp_path / "c.yaml"
    path.write_text("name: ORDERS\nsubjects: [orders.*, more.*]\n")
    res = cli("stream", "edit", "ORDERS", "--config", str(path), "-f")
    assert res.code == 0, res.err
    assert lake.stream_info("ORDERS").config.subjects == ["orders.*", "more.*"]
    path.write_text("name: OTHER\n")
    assert (
        "does not match the name 'OTHER'" in cli("stream", "edit", "ORDERS", "--config", str(path), "-f").err
    )


def test_rm_needs_force_or_a_yes(cli: Run, lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    _add(cli)
    res = cli("stream", "rm", "ORDERS")
    assert res.code == 1 and res.err == (
        'jsspark: error: refusing without -f: "Really delete Stream ORDERS?" needs a yes, and stdin is not a terminal to ask on\n'
    )
    assert lake.stream_names() == ["ORDERS"]
    _tty(monkeypatch, "n\n")
    assert cli("stream", "rm", "ORDERS").err.endswith("[y/N] jsspark: error: cancelled\n")
    _tty(monkeypatch, "y\n")
    assert cli("stream", "rm", "ORDERS").out == "Deleted stream ORDERS\n"
    assert lake.stream_names() == []
    missing = cli("stream", "rm", "ORDERS", "-f")
    assert missing.err == "jsspark: error: could not delete stream ORDERS: stream not found (10059)\n"


def _tty(monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    import io
    import sys

    class FakeTTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", FakeTTY(answer))


def test_purge_subject_keep_and_json(cli: Run, lake: Lake) -> None:
    _add(cli)
    for i in range(10):
        lake.publish(f"orders.{'a' if i % 2 else 'b'}", str(i).encode())
    assert "refusing without -f" in cli("stream", "purge", "ORDERS", "--subject", "orders.a").err
    assert cli("stream", "purge", "ORDERS", "--subject", "orders.a", "-f", "-j").json() == {
        "success": True,
        "purged": 5,
    }
    res = cli("stream", "purge", "ORDERS", "--keep", "2", "-f")
    assert res.out == "Purged 3 messages from Stream ORDERS keeping the newest 2\n"
    assert lake.stream_info("ORDERS").state.messages == 2


def test_purge_denied(cli: Run) -> None:
    _add(cli, "ORDERS", "--deny-purge")
    res = cli("stream", "purge", "ORDERS", "-f")
    assert (
        res.code == 1
        and res.err == "jsspark: error: could not purge stream ORDERS: stream purge not permitted (10110)\n"
    )


def test_rmm_and_get(cli: Run, lake: Lake) -> None:
    _add(cli)
    lake.publish("orders.a", b"one", headers={"K": "V"})
    lake.publish("orders.b", b"two")
    lake.publish("orders.a", b"three")
    doc = cli("stream", "get", "ORDERS", "1", "-j").json()
    msg = lake.get_msg("ORDERS", seq=1)
    assert doc["subject"] == "orders.a" and doc["seq"] == 1 and base64.b64decode(doc["data"]) == b"one"
    assert base64.b64decode(doc["hdrs"]) == msg.hdrs and doc["time"].endswith("Z")
    text = cli("stream", "get", "ORDERS", "1").out
    assert (
        "Item: ORDERS#1" in text
        and "on Subject orders.a" in text
        and "K: V" in text
        and text.endswith("one\n")
    )
    assert cli("stream", "get", "ORDERS", "--last-for", "orders.a", "-j").json()["seq"] == 3
    assert cli("stream", "get", "ORDERS", "2", "--next-for", "orders.a", "-j").json()["seq"] == 3
    assert "refusing without -f" in cli("stream", "rmm", "ORDERS", "2").err
    assert cli("stream", "rmm", "ORDERS", "2", "-f").out == "Removed message 2 from Stream ORDERS\n"
    missing = cli("stream", "get", "ORDERS", "2")
    assert (
        missing.err
        == "jsspark: error: could not get message sequence 2 from stream ORDERS: no message found (10037)\n"
    )
    assert "say which message" in cli("stream", "get", "ORDERS").err
    zero = cli("stream", "get", "ORDERS", "0")  # as STREAM.MSG.GET {"seq": 0} answers
    assert zero.err == "jsspark: error: could not get message sequence 0 from stream ORDERS: bad request (10003)\n"


@pytest.mark.parametrize(
    "argv",
    [["stream", "info", "NOPE"], ["stream", "purge", "NOPE", "-f"], ["stream", "rmm", "NOPE", "1", "-f"],
     ["stream", "edit", "NOPE", "--max-msgs", "1", "-f"], ["stream", "get", "NOPE", "1"]],
)  # fmt: skip
def test_missing_stream_is_10059_naming_the_stream(cli: Run, argv: list[str]) -> None:
    res = cli(*argv)
    assert res.code == 1 and res.out == ""
    assert res.err.startswith("jsspark: error: ") and "NOPE" in res.err
    assert res.err.endswith(": stream not found (10059)\n") and "Traceback" not in res.err


def test_bad_configs_are_one_line_errors(cli: Run, tmp_path: Path) -> None:
    assert cli("stream", "add", "--config", str(tmp_path / "missing.json")).err == (
        f"jsspark: error: could not read stream config {tmp_path / 'missing.json'}: no such file: {tmp_path / 'missing.json'}\n"
    )
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "X", "max_msgs": "lots"}')
    res = cli("stream", "add", "--config", str(bad))
    assert res.code == 1 and res.err == (  # the server's decoder's text: max_msgs is a Go int64
        "jsspark: error: could not create stream X: invalid JSON: json: cannot unmarshal string into Go struct "
        "field StreamConfigRequest.max_msgs of type int64 (10025) in field max_msgs\n"
    )
    bad.write_text('{"name": "X", "subjects": ["x"], "max_msg": 5}')  # misspelt: the server's strict decoder
    assert cli("stream", "add", "--config", str(bad)).err == (
        'jsspark: error: could not create stream X: invalid JSON: json: unknown field "max_msg" (10025)\n'
    )
    bad.write_text("[1, 2]")
    assert "must hold a config mapping" in cli("stream", "add", "--config", str(bad)).err
    bad.write_text("name: X\nsubjects: [a.*]\nretention: forever\n")
    assert "retention" in cli("stream", "add", "--config", str(bad)).err
    assert "needs a NAME" in cli("stream", "add", "--subjects", "x").err
    assert "--republish-headers needs --republish-destination" in cli("stream", "add", "R", "--republish-headers").err
    assert cli("stream", "add", "BAD.NAME").err == (
        "jsspark: error: could not create stream BAD.NAME: stream name is required and can not contain "
        "'.', '*', '>', '\\', '/' (10052)\n"
    )
    dup = cli("stream", "add", "X1", "--subjects", "x.*")
    assert dup.code == 0
    clash = cli("stream", "add", "X1", "--subjects", "y.*")
    assert clash.err == (
        "jsspark: error: could not create stream X1: stream name already in use with a different configuration (10058)\n"
    )


def test_usage_errors_exit_2(cli: Run) -> None:
    res = cli("stream", "add", "X", "--max-bytes", "lots")
    assert res.code == 2 and "invalid size 'lots'" in res.err
    assert cli("stream", "add", "X", "--max-age", "forever").code == 2
    assert cli("stream").code == 2
    # sequences and keep counts are uint64 on the wire: -1 is not "all", and nothing is purged
    for argv in (["stream", "purge", "X", "--keep", "-1", "-f"], ["stream", "purge", "X", "--seq", "-5", "-f"],
                 ["stream", "rmm", "X", "-3", "-f"], ["consumer", "reset", "X", "C", "--seq", "-1"]):
        res = cli(*argv)
        assert res.code == 2 and "cannot be negative" in res.err, argv


def test_durations_beyond_go_int64_are_refused(cli: Run, lake: Lake, tmp_path: Path) -> None:
    """A duration is a Go time.Duration (int64 ns, about 292 years): a longer flag names the
    input (usage error), a longer config value is the server's decode error (10025)."""
    for flag, text in (("--max-age", "300y"), ("--dupe-window", "2562048h"), ("--max-age", "106752d")):
        res = cli("stream", "add", "X", "--subjects", "x", flag, text)
        assert res.code == 2 and f"invalid duration {text!r}: longer than 292y171d" in res.err, res.err
    assert cli("stream", "add", "X", "--subjects", "x", "--max-age", "292y").code == 0
    path = tmp_path / "big.json"
    path.write_text('{"name": "Y", "subjects": ["y"], "max_age": 9223372036854775808}')
    res = cli("stream", "add", "--config", str(path))
    assert res.code == 1 and res.err == (
        "jsspark: error: could not create stream Y: invalid JSON: json: cannot unmarshal number 9223372036854775808"
        " into Go struct field StreamConfigRequest.max_age of type time.Duration (10025) in field max_age\n"
    )
    assert [s.config.name for s in lake.streams_info()] == ["X"]


def test_add_accepts_the_nats_cli_defaults_flag(cli: Run, lake: Lake) -> None:
    """``nats stream add X --subjects ... --defaults`` (as scripts for the nats CLI write it) stores
    the same config as without the flag: nothing is asked either way."""
    with_flag = cli("stream", "add", "A", "--subjects", "a.*", "--defaults", "-j").json()["config"]
    without = cli("stream", "add", "B", "--subjects", "b.*", "-j").json()["config"]
    assert {**with_flag, "name": "", "subjects": []} == {**without, "name": "", "subjects": []}
    assert lake.stream_info("A").config.subjects == ["a.*"]


def test_the_nats_docs_orders_example_runs_unchanged(cli: Run, lake: Lake) -> None:
    """README: the add verbs take nats CLI scripts unchanged. The NATS docs' ORDERS example
    (nats-concepts/jetstream/consumers/example_configuration) passes the stream's ``--ack``
    (acknowledge publishes: ``no_ack`` false; ``--no-ack`` sets it) and a consumer's ``--sample``
    (a percentage, stored as the nats CLI stores it)."""
    stream = ["--subjects", "ORDERS.*", "--ack", "--max-msgs=-1", "--max-bytes=-1", "--max-age=1y", "--storage",
              "file", "--retention", "limits", "--max-msg-size=-1", "--discard=old", "--replicas", "1",
              "--dupe-window=2m"]  # fmt: skip
    res = cli("stream", "add", "ORDERS", *stream)
    assert res.code == 0, res.err
    assert lake.stream_info("ORDERS").config.no_ack is False
    assert cli("stream", "add", "QUIET", "--subjects", "quiet.>", "--no-ack").code == 0
    assert lake.stream_info("QUIET").config.no_ack is True
    new = ["--filter", "ORDERS.received", "--ack", "explicit", "--pull", "--deliver", "all", "--max-deliver=-1",
           "--sample", "100"]  # fmt: skip
    res = cli("consumer", "add", "ORDERS", "NEW", *new)
    assert res.code == 0, res.err
    assert lake.consumer_info("ORDERS", "NEW").config.sample_freq == "100"
    assert cli("consumer", "add", "ORDERS", "NONE", "--sample", "0").code == 0
    assert lake.consumer_info("ORDERS", "NONE").config.sample_freq == ""
    res = cli("consumer", "add", "ORDERS", "BAD", "--sample", "101")
    assert res.code == 1 and "sample percent is not between 0 and 100" in res.err
