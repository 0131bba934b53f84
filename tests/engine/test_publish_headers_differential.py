"""Publish headers beyond the expectations, on a real nats-server and on a lake stream.

``Nats-Rollup`` (checked and applied), ``Nats-TTL``, ``Nats-Incr``, the schedule headers and
``Nats-Batch-Id`` (checked: a lake stream has no counters, schedules or atomic batches, so it
refuses them as a server whose stream does not allow them does), the order of those checks
against the expectations, dedup and ``max_msg_size``, and what the last msg id is after the
message that carried it is gone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from jsspark.engine import headers as H
from jsspark.engine.ingest import store_mirrored, store_sourced
from jsspark.engine.lake import connect
from jsspark.engine.sourcing import identity_of
from jsspark.errors import APIError, UnsupportedConfigError
from tests.engine.backends import LakeBackend, ServerBackend
from tests.engine.test_differential import Pair, paired, subj
from tests.live.test_durable_source import wait_for

WINDOW = 60_000_000_000  # a minute, in ns: the dedup window of every stream here


@pytest.fixture
def pair(nats_server: Any, tmp_path: Any) -> Iterator[Pair]:
    yield from paired(ServerBackend(nats_server.url), LakeBackend(connect(tmp_path / "lake")))


def _as_in(s: str, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    prefix = subj(s, "")[:-1]
    return [(k, v.replace("SUBJ", prefix)) for k, v in headers]


@pytest.mark.parametrize(
    "headers",
    [
        # counters: a lake stream is never a counter stream (10168), a bad increment is 10171 first
        [("Nats-Incr", "1")],
        [("Nats-Incr", "+1")],
        [("Nats-Incr", "x")],
        [("Nats-Incr", "1_0")],
        [("Nats-Incr", "x"), ("Nats-Expected-Stream", "nope")],
        [("Nats-Incr", "1"), ("Nats-Expected-Stream", "nope")],
        # per-message TTL on a stream without allow_msg_ttl: 10166 after the expected stream,
        # before the expected sequences; a TTL that does not parse is 10165, checked last
        [("Nats-TTL", "5s")],
        [("Nats-TTL", "never")],
        [("Nats-TTL", "60")],
        [("Nats-TTL", "abc")],
        [("Nats-TTL", "0")],
        [("Nats-TTL", "5s"), ("Nats-Expected-Stream", "nope")],
        [("Nats-TTL", "5s"), ("Nats-Expected-Last-Sequence", "7")],
        [("Nats-TTL", "abc"), ("Nats-Expected-Last-Sequence", "7")],
        [("Nats-TTL", "abc"), ("Nats-Msg-Id", "first")],
        # rollups on a stream that does not allow them
        [("Nats-Rollup", "sub")],
        [("Nats-Rollup", "bogus")],
        [("Nats-Rollup", "sub"), ("Nats-Expected-Last-Sequence", "7")],
        [("Nats-Rollup", "sub"), ("Nats-Msg-Id", "first")],
        [("Nats-Rollup", "sub"), ("Nats-TTL", "abc")],
        # schedules (never allowed on a lake stream)
        [("Nats-Schedule", "@every 1m")],
        [("Nats-Schedule", "x"), ("Nats-Expected-Last-Sequence", "7")],
        [("Nats-Schedule", "x"), ("Nats-Stream-Source", "X 1 > > a")],
        [("Nats-Schedule-Next", "purge")],
        [("Nats-Schedule-Next", "x")],
        [("Nats-Schedule-Next", "purge"), ("Nats-Scheduler", "SUBJ.s")],
        [("Nats-Schedule-Next", "purge"), ("Nats-Scheduler", "SUBJ.a")],
        [("Nats-Scheduler", "SUBJ.s")],
        # atomic batches
        [("Nats-Batch-Id", "b1")],
        [("Nats-Batch-Id", "b1"), ("Nats-Expected-Stream", "nope")],
        # expected sequences are ASCII digits only: anything else never matches
        [("Nats-Expected-Last-Sequence", "+2")],
        [("Nats-Expected-Last-Sequence", "0_2")],
        [("Nats-Expected-Last-Sequence", "\u0662")],
        [("Nats-Expected-Last-Subject-Sequence", "+1")],
        [("Nats-Msg-Id", "first"), ("Nats-Expected-Last-Sequence", "+2")],
        # the server's parseInt64 wraps past int64: 2^64+2 expects 2, 2^64+1 expects 1; a TTL
        # of 2^64 is none (accepted without allow_msg_ttl), 2^64+1 is 1s (10166), 2^63 is
        # negative (invalid, 10165, checked last)
        [("Nats-Expected-Last-Sequence", str(2**64 + 2))],
        [("Nats-Expected-Last-Sequence", str(2**64 + 1))],
        [("Nats-Expected-Last-Sequence", "1" + "0" * 4998 + "2")],  # past Python's int digit limit
        [("Nats-Expected-Last-Subject-Sequence", str(2**64 + 1))],
        [("Nats-Expected-Last-Subject-Sequence", str(2**65 + 1))],
        [("Nats-TTL", str(2**63))],
        [("Nats-TTL", str(2**64))],
        [("Nats-TTL", str(2**64 + 1))],
        [("Nats-TTL", str(2**63)), ("Nats-Expected-Last-Sequence", "7")],
    ],
)
def test_header_checks_and_their_order(pair: Pair, headers: list[tuple[str, str]]) -> None:
    s = pair.stream(duplicate_window=WINDOW)
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-Msg-Id", "first")])
    pair.publish(subj(s, "b"), b"")
    pair.publish(subj(s, "a"), b"", headers=_as_in(s, headers))
    pair.check(s)


@pytest.mark.parametrize(
    "headers",
    [
        [("Nats-Expected-Stream", "nope")],
        [("Nats-Expected-Last-Sequence", "7")],
        [("Nats-Expected-Last-Msg-Id", "nope")],
        [("Nats-Msg-Id", "first")],  # an oversized duplicate: the size is checked first
        [("Nats-Incr", "x")],
        [("Nats-TTL", "5s")],
        [("Nats-Rollup", "sub")],
        [("Nats-Schedule", "x")],
    ],
)
def test_max_msg_size_is_checked_before_every_header(pair: Pair, headers: list[tuple[str, str]]) -> None:
    s = pair.stream(max_msg_size=60, duplicate_window=WINDOW)
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-Msg-Id", "first")])
    pair.publish(subj(s, "a"), b"x" * 100, headers=headers)
    pair.check(s)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Nats-Batch-Id", "b1")],
        [("Nats-Batch-Id", "")],  # empty: not a batch, the 64 KiB check applies
        [("Nats-Incr", "x")],
        [("Nats-Expected-Stream", "nope")],
        [("Nats-Msg-Id", "first")],
        [("Nats-Schedule", "@every 1s")],
    ],
)
@pytest.mark.parametrize("max_msg_size", [-1, 1000])
def test_a_header_block_over_64k(pair: Pair, headers: list[tuple[str, str]], max_msg_size: int) -> None:
    """A header block over 64 KiB is refused first (10097), after ``max_msg_size`` (10054),
    except with a ``Nats-Batch-Id``: the atomic batch path checks the size limit and then
    that atomic publish is off (10174), never the 64 KiB."""
    s = pair.stream(duplicate_window=WINDOW, max_msg_size=max_msg_size)
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-Msg-Id", "first")])
    pair.publish_raw(subj(s, "a"), b"", headers=[("X-Big", "x" * 70_000), *headers])
    pair.state(s)


@pytest.mark.parametrize(
    "value",  # none expires during the test
    ["5m", "never", "3600", "1m30s", "abc", "0", "500ms", "+5", "NEVER", str(2**63), str(2**64), "2562048h"],
)
def test_ttl_values_on_a_stream_that_allows_them(pair: Pair, value: str) -> None:
    s = pair.stream(allow_msg_ttl=True)
    pair.publish(subj(s, "a"), b"", headers=[("Nats-TTL", value)])
    pair.check(s)


@pytest.mark.parametrize("allow", [True, False])
@pytest.mark.parametrize("value", ["1s ", "1s\t", "\t1s", "\u0662s", "  5s", " never", "never ", "5 "])
def test_ttl_values_as_raw_header_bytes(pair: Pair, allow: bool, value: str) -> None:
    """The server reads a header value from the raw block skipping only leading spaces, and
    Go's ``time.ParseDuration`` takes ASCII digits and no whitespace: anything else is an
    invalid TTL (10165), checked before whether the stream allows TTLs at all. (State, not
    stored headers: a value's leading spaces are kept in the lake's pairs, not in a decoded block.)"""
    s = pair.stream(allow_msg_ttl=allow)
    pair.publish_raw(subj(s, "a"), b"", headers=[("Nats-TTL", value)])
    pair.state(s)


@pytest.mark.parametrize(
    "zone",
    ["Bogus/Zone", "", "Europe/Amsterdam", "UTC", "Local", " Europe/Amsterdam", "Europe/Amsterdam ",
     "europe/amsterdam", "Europe", "Europe/Amsterdam/", "./Europe/Amsterdam", "Europe//Amsterdam",
     "Europe/../UTC", "/etc/localtime", "zone.tab", "EST5EDT", "Etc/GMT+5"],
)
def test_schedule_time_zone_alone(pair: Pair, zone: str) -> None:
    """``Nats-Schedule-Time-Zone`` without a schedule, on a stream without schedules: the
    server loads the zone (``getMessageSchedule``) after the expected sequences, and one sent
    empty or that Go's ``time.LoadLocation`` cannot load is refused as schedules being off
    (10188); a zone it loads passes. Before the dedup: a duplicate is refused too."""
    s = pair.stream(duplicate_window=WINDOW)
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-Msg-Id", "first")])
    pair.publish_raw(subj(s, "a"), b"", headers=[("Nats-Schedule-Time-Zone", zone)])
    pair.publish_raw(subj(s, "a"), b"", headers=[("Nats-Schedule-Time-Zone", zone), ("Nats-Msg-Id", "first")])
    pair.publish_raw(subj(s, "a"), b"", headers=[("Nats-Schedule-Time-Zone", zone), ("Nats-Expected-Last-Sequence", "9")])
    pair.state(s)


def _kv_like(pair: Pair, **cfg: Any) -> str:
    s = pair.stream(allow_rollup_hdrs=True, **cfg)
    for i, t in enumerate("abab"):
        pair.publish(subj(s, t), f"v{i}".encode())
    return s


@pytest.mark.parametrize("value", ["sub", "SUB", "all", "bogus"])
def test_rollup_keeps_only_the_rolling_message(pair: Pair, value: str) -> None:
    s = _kv_like(pair)
    pair.publish(subj(s, "a"), b"roll", headers=[("Nats-Rollup", value)])
    pair.check(s)
    pair.publish(subj(s, "b"), b"after")
    pair.check(s)


def test_rollup_sub_then_all(pair: Pair) -> None:
    s = _kv_like(pair)
    pair.publish(subj(s, "a"), b"roll a", headers=[("Nats-Rollup", "sub")])
    pair.check(s)
    pair.publish(subj(s, "c"), b"roll all", headers=[("Nats-Rollup", "all")])
    pair.check(s)


def test_rollup_passes_discard_new_per_subject(pair: Pair) -> None:
    """The file store lets a rollup past the per-subject discard-new limit: the rollup then
    purges the subject down to it."""
    s = _kv_like(pair, max_msgs_per_subject=2, discard="new", discard_new_per_subject=True)
    pair.publish(subj(s, "a"), b"refused")
    pair.publish(subj(s, "a"), b"roll", headers=[("Nats-Rollup", "sub")])
    pair.check(s)


def test_rollup_after_limits(pair: Pair) -> None:
    """The server stores (and applies max_msgs) first and rolls up after: with b, a stored
    and max_msgs 2, a rollup on a removes b by the limit and a by the rollup."""
    s = pair.stream(allow_rollup_hdrs=True, max_msgs=2)
    pair.publish(subj(s, "b"), b"1")
    pair.publish(subj(s, "a"), b"2")
    pair.publish(subj(s, "a"), b"3", headers=[("Nats-Rollup", "sub")])
    pair.check(s)


def test_rollup_of_a_message_nobody_is_interested_in(pair: Pair) -> None:
    """On an interest stream a message no consumer wants is not stored, but its rollup still
    purges (keeping none): everything on the subject, or everything."""
    s = pair.stream(allow_rollup_hdrs=True, retention="interest")
    assert pair.add_consumer(s, {"durable_name": "C", "ack_policy": "explicit", "filter_subject": subj(s, "a")}) == {
        "ok": True
    }
    pair.publish(subj(s, "a"), b"1")
    pair.publish(subj(s, "a"), b"2")
    pair.publish(subj(s, "b"), b"unwanted roll", headers=[("Nats-Rollup", "sub")])
    pair.check(s)
    pair.publish(subj(s, "b"), b"unwanted roll all", headers=[("Nats-Rollup", "all")])
    pair.check(s)


def test_rollups_in_one_lake_batch_match_one_by_one_publishes(pair: Pair) -> None:
    """A lake batch is one commit, but each of its rollups applies at its own place in the
    batch, as the server's one-by-one publishes do, limits included."""
    s = pair.stream(allow_rollup_hdrs=True, max_msgs=3)
    rows = [
        ("a", b"1", None), ("b", b"2", None), ("a", b"3", [("Nats-Rollup", "sub")]),
        ("c", b"4", None), ("c", b"5", None), ("b", b"6", [("Nats-Rollup", "sub")]),
        ("d", b"7", None), ("a", b"8", None),
    ]
    for t, data, hdrs in rows:
        pair.server.publish(subj(s, t), data, headers=hdrs)
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, t) for t, _, _ in rows],
        "data": [d for _, d, _ in rows],
        "headers": H.to_arrow([h for _, _, h in rows]),
    }))
    pair.check(s)


def test_rollup_all_in_one_lake_batch(pair: Pair) -> None:
    s = pair.stream(allow_rollup_hdrs=True)
    rows = [("a", None), ("b", None), ("c", [("Nats-Rollup", "all")]), ("a", None), ("b", [("Nats-Rollup", "sub")])]
    for t, hdrs in rows:
        pair.server.publish(subj(s, t), b"x", headers=hdrs)
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, t) for t, _ in rows],
        "data": [b"x"] * len(rows),
        "headers": H.to_arrow([h for _, h in rows]),
    }))
    pair.check(s)


def _one_by_one_and_as_a_lake_batch(pair: Pair, s: str, rows: list[tuple[str, list[tuple[str, str]] | None]]) -> None:
    """``rows`` (subject token, headers) published one by one on the server, as one batch on the lake."""
    for t, hdrs in rows:
        assert "error" not in pair.server.publish(subj(s, t), b"x", headers=hdrs)
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, t) for t, _ in rows],
        "data": [b"x"] * len(rows),
        "headers": H.to_arrow([h for _, h in rows]),
    }))


def _expect_last(seq: int, on: str | None = None) -> list[tuple[str, str]]:
    return [("Nats-Expected-Last-Subject-Sequence", str(seq))] + (
        [("Nats-Expected-Last-Subject-Sequence-Subject", on)] if on else [])


def test_expected_last_subject_sequence_in_a_lake_batch_counts_only_what_it_stored(pair: Pair) -> None:
    """On an interest stream a message nobody wants takes a seq but is not stored: a later
    message of the batch expecting its subject's last seq reads 0 (or what was stored before),
    and on ``>`` the message at the last seq, which is not stored."""
    s = pair.stream(retention="interest")
    pair.consumer_create(s, {"durable_name": "K", "ack_policy": "explicit", "filter_subject": subj(s, "a")})
    _one_by_one_and_as_a_lake_batch(pair, s, [
        ("b", None), ("b", _expect_last(0)), ("a", None), ("b", None), ("a", _expect_last(0, ">")),
        ("a", _expect_last(5)),
    ])
    pair.check(s)


def test_expected_last_subject_sequence_after_a_rollup_of_all_in_a_lake_batch(pair: Pair) -> None:
    """A rollup of all takes every message before it, the batch's own included."""
    s = pair.stream(allow_rollup_hdrs=True)
    pair.publish(subj(s, "b"), b"before")
    _one_by_one_and_as_a_lake_batch(pair, s, [
        ("a", None), ("b", None), ("c", [("Nats-Rollup", "all")]),
        ("a", _expect_last(0, subj(s, "b"))), ("a", _expect_last(5)), ("c", _expect_last(6, subj(s, "*"))),
    ])
    pair.check(s)


@pytest.mark.parametrize("limit", [{"max_msgs": 2}, {"max_bytes": 100}, {"max_msgs": 2, "max_msgs_per_subject": 1}])
def test_expected_last_subject_sequence_after_a_limit_took_it_in_a_lake_batch(pair: Pair, limit: dict[str, Any]) -> None:
    """Discard-old totals push out the oldest messages as the server stores the batch's rows
    one by one: a subject whose last message went by the time a later row is checked reads 0.
    Each row expects what the server says just before it, and the lake takes them as a batch."""
    s = pair.stream(**limit)
    pair.publish(subj(s, "a"), b"x")
    plan = [("b", None), ("c", None), ("d", "a"), ("e", None), ("b", None), ("c", "c"), ("d", "b"), ("e", "*")]
    rows: list[tuple[str, list[tuple[str, str]] | None]] = []
    read = []
    for t, on in plan:
        hdrs = None
        if on is not None:
            last = pair.server.msg_get(s, subject=subj(s, on))
            read.append(last.get("seq", 0))
            hdrs = _expect_last(read[-1], subj(s, on))
        rows.append((t, hdrs))
        assert "error" not in pair.server.publish(subj(s, t), b"x", headers=hdrs)
    assert read[0] == 0  # a's only message was pushed out by then
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, t) for t, _ in rows],
        "data": [b"x"] * len(rows),
        "headers": H.to_arrow([h for _, h in rows]),
    }))
    pair.check(s)


@pytest.mark.parametrize("remove", ["purge", "purge subject", "delete last", "none"])
def test_expected_last_msg_id_is_the_last_accepted_one(pair: Pair, remove: str) -> None:
    """The server compares with the id of the last message it accepted, whatever removed it
    since (purge, delete) and whether or not it was stored."""
    s = pair.stream(duplicate_window=WINDOW)
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-Msg-Id", "m1")])
    pair.publish(subj(s, "b"), b"2", headers=[("Nats-Msg-Id", "m2")])
    if remove == "purge":
        pair.purge(s)
    elif remove == "purge subject":
        pair.server.purge(s, filter=subj(s, "b"))
        pair.lake.purge(s, subject=subj(s, "b"))
    elif remove == "delete last":
        pair.delete_msg(s, 2)
    pair.publish(subj(s, "a"), b"3", headers=[("Nats-Expected-Last-Msg-Id", "m1")])
    pair.publish(subj(s, "a"), b"4", headers=[("Nats-Expected-Last-Msg-Id", "m2")])
    pair.check(s)


def test_expected_last_msg_id_of_a_message_nobody_wanted(pair: Pair) -> None:
    s = pair.stream(retention="interest", duplicate_window=WINDOW)
    pair.publish(subj(s, "a"), b"skipped", headers=[("Nats-Msg-Id", "m1")])
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-Expected-Last-Msg-Id", "m1")])
    pair.check(s)


def test_expected_last_msg_id_after_a_lake_batch(pair: Pair) -> None:
    """After a batch, the last id is the last accepted message's (none when it had none)."""
    s = pair.stream(duplicate_window=WINDOW)
    rows = [("m1", b"1"), (None, b"2"), ("m3", b"3"), ("m1", b"dup")]
    for mid, data in rows:
        pair.server.publish(subj(s, "a"), data, headers=[("Nats-Msg-Id", mid)] if mid else None)
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, "a")] * len(rows),
        "data": [d for _, d in rows],
        "headers": H.to_arrow([[("Nats-Msg-Id", m)] if m else None for m, _ in rows]),
    }))
    pair.publish(subj(s, "a"), b"4", headers=[("Nats-Expected-Last-Msg-Id", "m1")])
    pair.publish(subj(s, "a"), b"5", headers=[("Nats-Expected-Last-Msg-Id", "m3")])
    pair.check(s)


def test_delete_of_a_deleted_sequence_inside_the_stream(pair: Pair) -> None:
    s = pair.stream()
    for i in range(4):
        pair.publish(subj(s, "a"), f"{i}".encode())
    pair.delete_msg(s, 2)
    pair.delete_msg(s, 2)  # inside the stream: 400/10043 "sequence 2 not found"
    pair.delete_msg(s, 4)
    pair.delete_msg(s, 4)  # the deleted tail is still inside it
    pair.delete_msg(s, 1)
    pair.delete_msg(s, 1)  # below the first seq: 10057
    pair.check(s)


def test_purge_with_seq_and_keep_is_a_bad_request_before_deny_purge(pair: Pair) -> None:
    s = pair.stream(deny_purge=True)
    pair.publish(subj(s, "a"), b"1")
    assert pair.server.purge(s, seq=2, keep=1) == pair.lake.purge(s, seq=2, keep=1)
    pair.check(s)


@pytest.mark.parametrize("req", [{"seq": 0}, {"filter": ">"}, {"filter": ">", "seq": 0}])
def test_full_purge_forms_of_a_never_written_stream(pair: Pair, req: dict[str, Any]) -> None:
    s = pair.stream()
    lake_req = {("subject" if k == "filter" else k): v for k, v in req.items()}
    assert pair.server.purge(s, **req) == pair.lake.purge(s, **lake_req)
    pair.check(s)
    pair.publish(subj(s, "a"), b"1")
    pair.check(s)


@pytest.mark.parametrize("key", ["allow_msg_counter", "allow_msg_schedules", "allow_atomic", "allow_batched"])
def test_lake_refuses_features_it_does_not_have(tmp_path: Any, key: str) -> None:
    """Counters, schedules, atomic and fast batches would change what a publish stores and
    answers: a lake stream enabling one is refused at create and update, naming the field, and
    nothing is created."""
    lake = connect(tmp_path / "lake")
    with pytest.raises(UnsupportedConfigError, match=f"stream 'U': {key} is not supported by a lake stream"):
        lake.add_stream({"name": "U", "subjects": ["u.>"], key: True})
    assert lake.streams_info() == []
    lake.add_stream({"name": "U", "subjects": ["u.>"]})
    # a server cannot turn counters on by an update at all (10052), which it says first
    with pytest.raises(APIError if key == "allow_msg_counter" else UnsupportedConfigError):
        lake.update_stream({"name": "U", "subjects": ["u.>"], key: True})
    assert getattr(lake.stream_info("U").config, key) is False


def test_sourced_rollup_applies_on_a_stream_that_allows_rollups(pair: Pair) -> None:
    """A rollup that arrives from an origin purges the sourcing stream's own messages too: the
    server's source does it, and so does ``store_sourced`` into a lake stream."""
    o = pair.stream(allow_rollup_hdrs=True)
    target = {"name": f"{o}S", "subjects": [f"{subj(o, '')[:-1]}s.>"], "allow_rollup_hdrs": True,
              "sources": [{"name": o}]}
    assert pair.add_stream(target) == {"ok": True}
    pair.streams.append(target["name"])
    pair.publish(f"{subj(o, '')[:-1]}s.own", b"own")
    pair.server.publish(subj(o, "a"), b"1")
    wait_for(lambda: pair.server.state(target["name"])["last_seq"] == 2, 10, "o.a sourced")  # before O rolls it up
    pair.server.publish(subj(o, "b"), b"roll all", headers=[("Nats-Rollup", "all")])
    wait_for(lambda: pair.server.state(target["name"])["last_seq"] == 3, 10, "the rollup sourced")
    published = [(1, subj(o, "a"), b"1", None), (2, subj(o, "b"), b"roll all", [("Nats-Rollup", "all")])]
    store_sourced(pair.lake.lake, target["name"], pa.table({
        "seq": [m[0] for m in published],
        "ts_ns": [0] * len(published),
        "subject": [m[1] for m in published],
        "data": [m[2] for m in published],
        "headers": H.to_arrow([m[3] for m in published]),
    }), origin=o, identity=identity_of(pair.server._req(f"$JS.API.STREAM.INFO.{o}")["created"]))
    pair.check(target["name"])



@pytest.mark.parametrize(("ttl", "per_subject"), [("10s", -1), ("1m30s", -1), ("3", 1), ("never", -1)])
def test_ttl_shorter_than_the_delete_markers_is_raised(pair: Pair, ttl: str, per_subject: int) -> None:
    """With subject delete markers a shorter TTL is stored as the markers' (whole seconds,
    header moved last), except where a subject keeps one message."""
    s = pair.stream(subject_delete_marker_ttl=60 * 10**9, max_msgs_per_subject=per_subject)
    pair.publish(subj(s, "a"), b"x", headers=[("Nats-TTL", ttl), ("X-After", "1")])
    pair.check(s)


@pytest.mark.parametrize("per_subject", [-1, 1])
def test_a_sourced_ttl_shorter_than_the_delete_markers_is_raised(pair: Pair, per_subject: int) -> None:
    """The server raises a sourced message's TTL to the target's marker TTL too (its publish
    path has no exception for sourced messages): the header moves after ``Nats-Stream-Source``."""
    o = pair.stream(allow_msg_ttl=True)
    target = {"name": f"{o}M", "subjects": [f"{o.lower()}m.>"], "subject_delete_marker_ttl": 60 * 10**9,
              "max_msgs_per_subject": per_subject, "sources": [{"name": o}]}
    assert pair.add_stream(target) == {"ok": True}
    pair.streams.append(target["name"])
    msgs = [("a", b"1", [("Nats-TTL", "5s"), ("X-After", "1")]), ("b", b"2", [("Nats-TTL", "never")]),
            ("c", b"3", [("Nats-TTL", "90")]), ("d", b"4", None), ("e", b"5", [("X-Only", "1")])]
    for t, d, h in msgs:
        pair.server.publish(subj(o, t), d, headers=h)
    wait_for(lambda: pair.server.state(target["name"])["last_seq"] == len(msgs), 10, "all sourced")
    _land_in_one_call(pair, target["name"], o, msgs, mirror=False)
    pair.check(target["name"])


def _expire_like_the_server(pair: Pair, s: str, settled: Any) -> None:
    """Wait (bounded) until the server's timers removed what they remove, then apply the
    lake's limits as of a moment later: the lake's copies were stored just after the server's."""
    wait_for(lambda: settled(pair.server.state(s)), 10, "the server's timers")
    pair.lake.lake.stream(s).enforce_limits(now_ns=time.time_ns() + 200_000_000)
    pair.check(s)


def test_messages_expire_by_their_ttl(pair: Pair) -> None:
    s = pair.stream(allow_msg_ttl=True)
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-TTL", "1s")])
    pair.publish(subj(s, "b"), b"2")
    pair.publish(subj(s, "c"), b"3", headers=[("Nats-TTL", "1h")])
    _expire_like_the_server(pair, s, lambda st: st["messages"] == 2)


def test_ttls_whose_expiry_wraps_int64(pair: Pair) -> None:
    """The server reads a number of seconds with the wrapping ``parseInt64`` and adds
    ``ts + ttl*1s`` in int64: 2^64+1 is a TTL of 1s, 2^64 none; ``2562047h`` (the longest
    duration in hours) and ``10000000000`` overflow into the past and expire at once."""
    s = pair.stream(allow_msg_ttl=True)
    for i, value in enumerate([str(2**64 + 1), "2562047h", "10000000000", "1" * 30, str(2**64), "1h"]):
        pair.publish(subj(s, f"m{i}"), b"", headers=[("Nats-TTL", value)])
    _expire_like_the_server(pair, s, lambda st: st["messages"] <= 2)


def test_a_ttl_of_never_outlives_max_age(pair: Pair) -> None:
    s = pair.stream(allow_msg_ttl=True, max_age=10**9)
    pair.publish(subj(s, "a"), b"1", headers=[("Nats-TTL", "never")])
    pair.publish(subj(s, "b"), b"2")
    _expire_like_the_server(pair, s, lambda st: st["messages"] == 1)
    pair.publish(subj(s, "b"), b"3")  # a publish after it expires nothing more
    pair.check(s)


@pytest.mark.filterwarnings("ignore::jsspark.errors.ConfigIgnoredWarning")  # storage: memory
@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize("mirror", [False, True])
def test_a_landed_ttl_of_never_outlives_max_age_without_allow_msg_ttl(pair: Pair, mirror: bool, storage: str) -> None:
    """A sourced or mirrored ``Nats-TTL: never`` exempts the message from the target's
    ``max_age`` even where the target does not allow TTLs (the file and memory stores' age
    pass skips it either way); a positive TTL there is ignored: ``max_age`` removes it."""
    o = pair.stream(allow_msg_ttl=True)
    target: dict[str, Any] = {"name": f"{o}N", "max_age": 10**9, "storage": storage}
    target.update({"mirror": {"name": o}} if mirror else {"subjects": [f"{o.lower()}n.>"], "sources": [{"name": o}]})
    assert pair.add_stream(target) == {"ok": True}
    pair.streams.append(target["name"])
    msgs = [("a", b"1", [("Nats-TTL", "never")]), ("b", b"2", None), ("c", b"3", [("Nats-TTL", "1h")]),
            ("d", b"4", [("Nats-TTL", "NEVER"), ("X-After", "1")])]
    for t, d, h in msgs:
        pair.server.publish(subj(o, t), d, headers=h)
    wait_for(lambda: pair.server.state(target["name"])["last_seq"] == len(msgs), 10, "all landed")
    _land_in_one_call(pair, target["name"], o, msgs, mirror)

    def same() -> None:  # a lake stream keeps no memory store: its byte count is the file store's
        pair.messages(target["name"])
        states = [{k: v for k, v in b.state(target["name"]).items() if storage == "file" or k != "bytes"}
                  for b in (pair.server, pair.lake)]
        assert states[0] == states[1]

    same()
    wait_for(lambda: pair.server.state(target["name"])["messages"] == 2, 10, "the server's max_age")
    pair.lake.lake.stream(target["name"]).enforce_limits(now_ns=time.time_ns() + 200_000_000)
    same()


def test_the_last_message_of_a_subject_to_expire_leaves_a_marker(pair: Pair) -> None:
    """With subject delete markers the newest expiring message of a subject that empties is
    replaced by a marker (reason MaxAge, the markers' TTL as a Go duration, rollup sub)."""
    s = pair.stream(max_age=10**9, subject_delete_marker_ttl=60 * 10**9)
    pair.publish(subj(s, "a"), b"1")
    pair.publish(subj(s, "b"), b"2")
    pair.publish(subj(s, "b"), b"3")
    _expire_like_the_server(pair, s, lambda st: st["last_seq"] == 5 and st["messages"] == 2)
    assert pair.lake.messages(s)[0][3] == [
        ("Nats-Marker-Reason", "MaxAge"), ("Nats-TTL", "1m0s"), ("Nats-Rollup", "sub")
    ]


def _batch_and_one_by_one(pair: Pair, s: str, msgs: list[tuple[str, bytes, Any]]) -> list[dict[str, Any]]:
    """``msgs`` published one by one to the server and as one lake batch; the server's acks."""
    acks = [pair.server.publish(subj(s, t), d, headers=h) for t, d, h in msgs]
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, t) for t, _, _ in msgs],
        "data": [d for _, d, _ in msgs],
        "headers": H.to_arrow([h for _, _, h in msgs]),
    }))
    return acks


@pytest.mark.parametrize(
    "limits",
    [{"max_msgs_per_subject": 1, "discard_new_per_subject": True}, {"max_msgs": 2}],
)
def test_a_rollup_in_a_discard_new_batch_frees_room_for_the_messages_after_it(
    pair: Pair, limits: dict[str, Any]
) -> None:
    s = pair.stream(allow_rollup_hdrs=True, discard="new", **limits)
    pair.publish(subj(s, "z"), b"0")
    acks = _batch_and_one_by_one(pair, s, [("y", b"1", [("Nats-Rollup", "all")]), ("z", b"2", None)])
    assert all("error" not in a for a in acks)
    pair.check(s)


@pytest.mark.parametrize("order", ["rollup first", "rollup second"])
def test_only_the_rolling_message_passes_discard_new_per_subject(pair: Pair, order: str) -> None:
    """The server refuses the plain message (10077); the lake's batch, atomic, is refused whole."""
    s = pair.stream(allow_rollup_hdrs=True, discard="new", max_msgs_per_subject=1, discard_new_per_subject=True)
    pair.publish(subj(s, "b"), b"0")
    rolling, plain = ("b", b"r", [("Nats-Rollup", "sub")]), ("b", b"p", None)
    msgs = [rolling, plain] if order == "rollup first" else [plain, rolling]
    refused = pair.server.publish(subj(s, msgs[1 if order == "rollup first" else 0][0]), b"p")
    assert refused["error"]["err_code"] == 10077
    batch = pa.table({"subject": [subj(s, t) for t, _, _ in msgs], "data": [d for _, d, _ in msgs],
                      "headers": H.to_arrow([h for _, _, h in msgs])})  # fmt: skip
    with pytest.raises(APIError) as err:
        pair.lake.lake.publish_batch(s, batch)
    assert err.value.to_dict() == refused["error"]
    assert pair.lake.messages(s) == [(1, subj(s, "b"), b"0", None)]


def test_a_replacing_message_past_max_bytes_may_not_be_larger(pair: Pair) -> None:
    """Discard new, one per subject, max_bytes: past the byte limit a message may replace its
    subject's oldest only if it is no larger (``storeRawMsg``: ``sizeForSeq(fseq) < msz``)."""
    s = pair.stream(discard="new", max_msgs_per_subject=1, max_bytes=100)
    pair.publish(subj(s, "a"), b"x" * 10)
    pair.publish(subj(s, "b"), b"x" * 40)
    pair.publish(subj(s, "a"), b"x" * 30)
    pair.publish(subj(s, "a"), b"x" * 5)
    pair.check(s)


def test_enforce_limits_keeps_a_discard_new_streams_messages(pair: Pair) -> None:
    """Lowering max_msgs of a discard-new stream removes nothing: the file store trims totals
    for discard old only."""
    s = pair.stream(discard="new", max_msgs=3)
    for i in range(3):
        pair.publish(subj(s, "a"), f"{i}".encode())
    cfg = {"name": s, "subjects": [subj(s, ">")], "discard": "new", "max_msgs": 2}
    assert pair.server._req(f"$JS.API.STREAM.UPDATE.{s}", cfg).get("error") is None
    pair.lake.lake.update_stream(cfg)
    pair.lake.lake.enforce_limits(s)
    pair.check(s)


def test_a_marker_a_full_discard_new_stream_refuses_leaves_the_message(pair: Pair) -> None:
    """The marker is stored through the publish path; a full discard-new stream refuses it, and
    the expired message, which only the marker's rollup would remove, stays."""
    s = pair.stream(max_age=10**9, subject_delete_marker_ttl=10**9, max_msgs=1, discard="new")
    pair.publish(subj(s, "a"), b"1")
    pair.lake.lake.stream(s).enforce_limits(now_ns=time.time_ns() + 2 * 10**9)
    pair.check(s)


def _land_in_one_call(pair: Pair, target: str, origin: str, msgs: list[tuple[str, bytes, Any]], mirror: bool) -> None:
    """The lake lands the origin's messages in one store call; the server took them one by one."""
    table = pa.table({
        "seq": list(range(1, len(msgs) + 1)), "ts_ns": [time.time_ns()] * len(msgs),
        "subject": [subj(origin, t) for t, _, _ in msgs], "data": [d for _, d, _ in msgs],
        "headers": H.to_arrow([h for _, _, h in msgs]),
    })  # fmt: skip
    if mirror:
        store_mirrored(pair.lake.lake, target, table)
    else:
        ident = identity_of(pair.server._req(f"$JS.API.STREAM.INFO.{origin}")["created"])
        store_sourced(pair.lake.lake, target, table, origin=origin, identity=ident)


@pytest.mark.parametrize("mirror", [False, True])
def test_a_landing_applies_limits_and_rollups_message_by_message(pair: Pair, mirror: bool) -> None:
    o = pair.stream(allow_rollup_hdrs=True)
    target: dict[str, Any] = {"name": f"{o}T", "allow_rollup_hdrs": True, "max_msgs": 3}
    target.update({"mirror": {"name": o}} if mirror else {"subjects": [f"{o.lower()}t.>"], "sources": [{"name": o}]})
    assert pair.add_stream(target) == {"ok": True}
    pair.streams.append(target["name"])
    msgs = [("x", b"1", None), ("a", b"1", None), ("a", b"2", [("Nats-Rollup", "sub")]), ("y", b"1", None)]
    for i, (t, d, h) in enumerate(msgs, 1):  # one at a time: the target takes each before the next
        pair.server.publish(subj(o, t), d, headers=h)
        wait_for(lambda i=i: pair.server.state(target["name"])["last_seq"] == i, 10, f"message {i} landed")
    _land_in_one_call(pair, target["name"], o, msgs, mirror)
    pair.check(target["name"])


def test_an_interest_target_stores_no_landed_message_nobody_wants(pair: Pair) -> None:
    o = pair.stream()
    target = {"name": f"{o}I", "subjects": [f"{o.lower()}i.>"], "retention": "interest", "sources": [{"name": o}]}
    assert pair.add_stream(target) == {"ok": True}
    pair.streams.append(target["name"])
    msgs = [("a", b"1", None), ("b", b"2", None), ("a", b"3", None)]
    for t, d, h in msgs:
        pair.server.publish(subj(o, t), d, headers=h)
    wait_for(lambda: pair.server.state(target["name"])["last_seq"] == 3, 10, "three messages sourced")
    _land_in_one_call(pair, target["name"], o, msgs, mirror=False)
    pair.check(target["name"])


@pytest.mark.parametrize("rollup", ["sub", "all"])
def test_a_landed_rollup_nobody_wants_still_purges(pair: Pair, rollup: str) -> None:
    """An interest target does not store a landed message no consumer wants, but its rollup
    still purges (keep 0): ``all`` empties the stream, and the consumer moves past it."""
    o = pair.stream(allow_rollup_hdrs=True)
    target = {"name": f"{o}I", "subjects": [f"{o.lower()}i.>"], "retention": "interest", "allow_rollup_hdrs": True,
              "sources": [{"name": o}]}
    assert pair.add_stream(target) == {"ok": True}
    pair.streams.append(target["name"])
    pair.consumer_create(target["name"], {"durable_name": "B", "ack_policy": "explicit",
                                          "filter_subjects": [subj(o, "b"), subj(o, "c")]})
    msgs = [("b", b"1", None), ("c", b"2", None), ("a", b"3", [("Nats-Rollup", rollup)]), ("c", b"4", None)]
    for i, (t, d, h) in enumerate(msgs, 1):  # one at a time: the target takes each before the next
        pair.server.publish(subj(o, t), d, headers=h)
        wait_for(lambda i=i: pair.server.state(target["name"])["last_seq"] == i, 10, f"message {i} landed")
    _land_in_one_call(pair, target["name"], o, msgs, mirror=False)
    pair.check(target["name"])
    pair.settled("consumer_info", target["name"], "B")


def test_a_discard_new_target_refuses_a_landing_past_its_limit(tmp_path: Any) -> None:
    """The server refuses the message and retries its origin until there is room; the lake
    refuses the landing with the server's error, storing nothing of it (nothing skipped)."""
    lake = connect(tmp_path / "lake")
    lake.add_stream({"name": "T", "subjects": ["t.>"], "max_msgs": 2, "discard": "new", "sources": [{"name": "O"}]})
    rows = pa.table({"seq": [1, 2, 3], "ts_ns": [1, 2, 3], "subject": ["o.a"] * 3, "data": [b"x"] * 3})
    with pytest.raises(APIError, match="maximum messages exceeded"):
        store_sourced(lake, "T", rows, origin="O")
    assert lake.stream_info("T").state.messages == 0
    store_sourced(lake, "T", rows.slice(0, 2), origin="O")
    assert lake.stream_info("T").state.messages == 2
