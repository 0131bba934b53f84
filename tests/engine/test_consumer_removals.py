"""Consumers when their pending messages go other ways than an ack, on a real nats-server and
on a lake, compared step by step.

A message removed by a delete or a limit while a consumer had it pending is acked for that
consumer (``stream.storeUpdates`` → ``consumer.decStreamPending`` → ``processTerm``), which on
interest and work-queue streams can take other messages with it. A filter update keeps what the
old filter delivered pending (``updateConfig`` leaves ``o.pending`` alone). The server does both
after it answered (in a goroutine), so its answers are read with ``Pair.settled``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from jsspark.engine.ingest import store_sourced
from jsspark.engine.lake import connect
from jsspark.engine.sourcing import identity_of
from tests.engine.test_differential import Pair, paired, subj
from tests.engine.test_update_stream import UpdatingLake, UpdatingServer
from tests.live.test_durable_source import wait_for


@pytest.fixture
def pair(nats_server: Any, tmp_path: Any) -> Iterator[Pair]:
    """Backends that also update streams (lowered limits apply at once)."""
    yield from paired(UpdatingServer(nats_server.url), UpdatingLake(connect(tmp_path / "lake")))


def _settle(pair: Pair, s: str, *consumers: str) -> None:
    """The consumers' infos and the stream's state and messages, once the server caught up."""
    for name in consumers:
        pair.settled("consumer_info", s, name)
    pair.settled("state", s)
    pair.settled("messages", s)


def _settle_racing(pair: Pair, s: str, name: str, **term_first: Any) -> bool:
    """``_settle``, where a purge by subject (or a rollup) removed exactly one message that
    explicit consumer ``name``, wider than the purge, had pending. The server tells the consumer
    twice: as a single removal, acked in a goroutine (``decStreamPending`` → ``go
    o.processTerm``), and as a wider purge (``consumer.purge``), and does not order them. Wider
    purge first (the lake's answer, and the server's on an idle machine) moves the ack floor past
    the purged delivery; the ack first leaves the floor where it was (``term_first``): seen once
    in 150 runs with the machine's cores busy, and once in a CI run. Everything but the floor is
    equal either way. Returns whether the server acked first."""
    lake = pair.lake.consumer_info(s, name)
    either = (lake, {**lake, **term_first})
    deadline = time.monotonic() + 5
    server = pair.server.consumer_info(s, name)
    while server not in either and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the server's answer, bounded by the deadline
        server = pair.server.consumer_info(s, name)
    assert server in either, f"server {server!r} != lake {lake!r} (or {term_first!r})"
    _settle(pair, s)
    return server != lake


def test_deleting_pending_messages_acks_them_for_an_explicit_consumer(pair: Pair) -> None:
    """A pending delivery that is not the oldest just leaves pending; the oldest moves the floor
    to just below the next one still pending, and the acks after that number from the gap."""
    s = pair.stream()
    pair.consumer_create(s, {"durable_name": "E", "ack_policy": "explicit"})
    for t in "abcde":
        pair.publish(subj(s, t), t.encode())
    got = pair.fetch(s, "E", 4)
    pair.delete_msg(s, 3)
    _settle(pair, s, "E")
    pair.delete_msg(s, 1)
    _settle(pair, s, "E")
    pair.ack(s, "E", *got[1][:2])
    pair.consumer_info(s, "E")
    pair.ack(s, "E", *got[3][:2])
    pair.consumer_info(s, "E")
    pair.delete_msg(s, 5)  # not delivered yet: nothing to ack
    _settle(pair, s, "E")
    pair.fetch(s, "E", 5)


@pytest.mark.parametrize("retention", ["limits", "interest"])  # a work queue takes explicit acks only
def test_deleting_a_pending_message_acks_all_below_it_for_an_ack_all_consumer(
    pair: Pair, retention: str
) -> None:
    """The removed message is acked as an AckAll ack: the floor moves to it and what was pending
    below is acked too, so on an interest stream it goes."""
    s = pair.stream(retention=retention)
    pair.consumer_create(s, {"durable_name": "C", "ack_policy": "all"})
    for t in "abcd":
        pair.publish(subj(s, t), t.encode())
    pair.fetch(s, "C", 3)
    pair.delete_msg(s, 2)
    _settle(pair, s, "C")
    pair.fetch(s, "C", 3)
    pair.ack(s, "C", 4, 3)
    _settle(pair, s, "C")


def test_an_ack_all_removal_below_the_floor_leaves_it_pending(pair: Pair) -> None:
    """The removal is acked as any AckAll ack, so one whose delivery seq is not above the floor's
    (here after an ack that named a later delivery seq) is ignored and stays pending."""
    s = pair.stream()
    pair.consumer_create(s, {"durable_name": "C", "ack_policy": "all"})
    for t in "ab":
        pair.publish(subj(s, t), t.encode())
    pair.fetch(s, "C", 2)
    pair.ack(s, "C", 1, 3)
    pair.delete_msg(s, 2)
    _settle(pair, s, "C")


def test_a_removal_outside_the_current_filter_leaves_it_pending(pair: Pair) -> None:
    """The server tells only the consumers whose filter takes the removed message's subject:
    a delivery made under an earlier filter stays pending when it is deleted."""
    s = pair.stream()
    cfg = {"durable_name": "E", "ack_policy": "explicit"}
    pair.consumer_create(s, cfg)
    for t in "ba":
        pair.publish(subj(s, t), t.encode())
    pair.fetch(s, "E", 2)
    pair.consumer_create(s, {**cfg, "filter_subject": subj(s, "a")})
    pair.delete_msg(s, 1)
    _settle(pair, s, "E")
    pair.delete_msg(s, 2)
    _settle(pair, s, "E")


@pytest.mark.parametrize("lowered", [{"max_msgs": 2}, {"max_msgs_per_subject": 1}, {"max_bytes": 150}])
@pytest.mark.parametrize("ack", ["all", "explicit"])
def test_lowered_limits_ack_what_they_remove(pair: Pair, lowered: dict[str, Any], ack: str) -> None:
    """A stream update that lowers a limit removes messages one by one, each acked for the
    consumers that had it pending."""
    s = pair.stream()
    pair.consumer_create(s, {"durable_name": "C", "ack_policy": ack})
    for t in "abab":
        pair.publish(subj(s, t), t.encode() * 40)
    pair.fetch(s, "C", 3)
    pair.update_stream({"name": s, "subjects": [subj(s, ">")], **lowered})
    _settle(pair, s, "C")
    pair.fetch(s, "C", 3)
    pair.consumer_info(s, "C")


def test_max_age_acks_what_it_expires(pair: Pair) -> None:
    """Messages that age out while pending are acked, here all of them: the floor moves to the
    delivered position. The lake applies ``max_age`` when ``enforce_limits`` runs."""
    max_age = 1_000_000_000
    s = pair.stream(max_age=max_age)
    pair.consumer_create(s, {"durable_name": "E", "ack_policy": "explicit"})
    for t in "abc":
        pair.publish(subj(s, t), t.encode())
    pair.fetch(s, "E", 2)
    newest = pair.lake.lake.stream(s).index().rows["ts_ns"][-1].as_py()
    deadline = time.monotonic() + 10
    while time.time_ns() <= newest + max_age:
        assert time.monotonic() < deadline
        time.sleep(0.01)  # waiting for the clock itself to pass max_age, not for another actor
    assert pair.lake.lake.enforce_limits(s) == 3
    _settle(pair, s, "E")


@pytest.mark.filterwarnings("ignore::jsspark.errors.ConfigIgnoredWarning")  # storage: memory
def test_a_purge_of_one_message_is_also_a_removal(pair: Pair) -> None:
    """A purge by subject that removes a single message is reported as a single removal as well
    (``PurgeEx``): consumers that had it pending take it as acked, also where the purge leaves
    their pending alone (a consumer wider than the purge, its floor at the new first seq). The
    file store reports the purge's subject, the memory store the message's, so only the memory
    store reaches a consumer filtered on the message's subject but not on the purge's. (The
    stores count bytes differently, so only the consumers are compared.)"""
    for storage in ("file", "memory"):
        s = pair.stream(storage=storage)
        for t in ("a", "c.y", "d"):
            pair.publish(subj(s, t), t.encode())
        start = {"ack_policy": "explicit", "deliver_policy": "by_start_sequence", "opt_start_seq": 2}
        pair.consumer_create(
            s, {"durable_name": "M", **start, "filter_subjects": [subj(s, "c.y"), subj(s, "d")]}
        )
        pair.consumer_create(s, {"durable_name": "U", **start})
        pair.fetch(s, "M", 5)
        pair.fetch(s, "U", 5)
        for purge in ({"subject": subj(s, "c.*")}, {"keep": 1}):
            pair.purge(s, **purge)
            pair.settled("consumer_info", s, "M")
            pair.settled("consumer_info", s, "U")


@pytest.mark.parametrize("limit", [{"max_msgs_per_subject": 1}, {"max_msgs": 2}])
def test_a_publish_pushing_out_a_pending_message_acks_it(pair: Pair, limit: dict[str, Any]) -> None:
    """A limit applied as a message is stored removes the oldest, pending or not, as any other
    removal: the consumers that had it pending take it as acked."""
    s = pair.stream(**limit)
    pair.consumer_create(s, {"durable_name": "E", "ack_policy": "explicit"})
    pair.consumer_create(s, {"durable_name": "A", "ack_policy": "all"})
    pair.publish(subj(s, "a"), b"1")
    pair.publish(subj(s, "b"), b"2")
    pair.fetch(s, "E", 1)
    pair.fetch(s, "A", 2)
    pair.publish(subj(s, "a"), b"3")
    _settle(pair, s, "E", "A")


def test_a_landing_pushing_out_a_pending_message_acks_it(pair: Pair) -> None:
    """Sourced messages are stored one by one, each applying the target's limits: what they
    push out is acked for the consumers that had it pending, as after a publish."""
    o = pair.stream()
    t = f"{o}T"
    assert pair.add_stream(
        {"name": t, "subjects": [f"{o.lower()}t.>"], "max_msgs": 2, "sources": [{"name": o}]}
    ) == {"ok": True}
    pair.streams.append(t)
    identity = identity_of(pair.server._req(f"$JS.API.STREAM.INFO.{o}")["created"])
    pair.consumer_create(t, {"durable_name": "E", "ack_policy": "explicit"})
    for first, subjects in ((1, "ab"), (3, "cd")):
        for x in subjects:
            pair.server.publish(subj(o, x), x.encode())
        last = first + len(subjects) - 1
        wait_for(lambda last=last: pair.server.state(t)["last_seq"] == last, 10, f"message {last} sourced")
        rows = pa.table({
            "seq": list(range(first, last + 1)), "subject": [subj(o, x) for x in subjects],
            "data": [x.encode() for x in subjects],
        })  # fmt: skip
        store_sourced(pair.lake.lake, t, rows, origin=o, identity=identity)
        pair.fetch(t, "E", 1)
    _settle(pair, t, "E")


@pytest.mark.parametrize("retention", ["limits", "interest", "workqueue"])
def test_a_filter_update_keeps_what_the_old_filter_left_pending(pair: Pair, retention: str) -> None:
    """Pending acks outlive a filter change, counted and acked as before (on an interest
    stream the message itself goes at the update, as nothing wants it any more)."""
    s = pair.stream(retention=retention)
    cfg = {"durable_name": "E", "ack_policy": "explicit"}
    pair.consumer_create(s, cfg)
    pair.publish(subj(s, "b"), b"b")
    pair.fetch(s, "E", 3)
    pair.consumer_create(s, {**cfg, "filter_subject": subj(s, "x")})
    _settle(pair, s, "E")
    pair.publish(subj(s, "x"), b"x")
    pair.fetch(s, "E", 3)
    pair.consumer_info(s, "E")
    pair.ack(s, "E", 1, 1)
    _settle(pair, s, "E")
    pair.ack(s, "E", 2, 2)
    _settle(pair, s, "E")


@pytest.mark.parametrize("ack", ["all", "explicit"])
def test_acks_after_a_wider_filter_cover_only_what_was_delivered(pair: Pair, ack: str) -> None:
    """After a consumer widens its filter, the messages it skipped below its position were never
    pending: its acks do not remove them (``ackMsg`` goes to pending entries only), and an
    explicit-ack consumer does not need them (``needAck``) once another consumer acked them."""
    s = pair.stream(retention="interest")
    pair.consumer_create(s, {"durable_name": "K", "ack_policy": "all", "filter_subject": subj(s, "b")})
    cfg = {"durable_name": "C", "ack_policy": ack, "filter_subject": subj(s, "a")}
    pair.consumer_create(s, cfg)
    for t in "aba":
        pair.publish(subj(s, t), t.encode())
    got = pair.fetch(s, "C", 2)
    pair.consumer_create(s, {**cfg, "filter_subject": subj(s, "*")})
    _settle(pair, s, "C")
    pair.fetch(s, "K", 1)
    pair.ack(s, "K", 2, 1)
    _settle(pair, s, "C", "K")
    for sseq, dseq, _ in got:
        pair.ack(s, "C", sseq, dseq)
        _settle(pair, s, "C")
    pair.purge(s)
    _settle(pair, s, "C", "K")


def test_a_purge_drops_what_an_old_filter_left_pending(pair: Pair) -> None:
    """A purge narrower than the consumer's filter drops the pending deliveries it removed and
    those already gone (one deleted outside the new filter stayed pending): with none left,
    the floor moves to the delivered position."""
    s = pair.stream()
    cfg = {"durable_name": "E", "ack_policy": "explicit"}
    pair.consumer_create(s, cfg)
    for t in ("a", "b", "c.x", "b"):
        pair.publish(subj(s, t), t.encode())
    pair.fetch(s, "E", 4)
    pair.ack(s, "E", 1, 1)
    pair.consumer_create(s, {**cfg, "filter_subject": subj(s, "*")})
    pair.delete_msg(s, 3)
    _settle(pair, s, "E")
    pair.purge(s, subject=subj(s, "b"))
    _settle(pair, s, "E")
    pair.publish(subj(s, "a"), b"a")
    pair.fetch(s, "E", 2)
    pair.consumer_info(s, "E")


def test_an_explicit_ack_takes_a_pending_message_below_a_purged_delivery(pair: Pair) -> None:
    """A wider purge that removes a later pending delivery moves the floor's delivery seq past
    the older one still pending; acking that one still takes it (``processAckMsg`` looks it up
    in ``o.pending``): nothing stays pending, and on an interest stream it goes. (The server then
    reports the floor's stream seq unmoved, unless it acked the purged one first (see
    ``_settle_racing``); the lake reports the delivered position.)"""
    s = pair.stream(retention="interest")
    pair.consumer_create(s, {"durable_name": "E", "ack_policy": "explicit"})
    pair.publish(subj(s, "a"), b"1")
    pair.publish(subj(s, "b"), b"2")
    got = pair.fetch(s, "E", 2)
    pair.purge(s, subject=subj(s, "b"))
    acked_first = _settle_racing(pair, s, "E", ack_floor={"consumer_seq": 0, "stream_seq": 0})
    pair.ack(s, "E", *got[0][:2])
    server, lake = pair.server.consumer_info(s, "E"), pair.lake.consumer_info(s, "E")
    assert (server["num_ack_pending"], lake["num_ack_pending"]) == (0, 0)
    # with the purged one acked first, the ack empties pending from a floor that followed it
    server_floor = {"consumer_seq": 2, "stream_seq": 2 if acked_first else 0}
    assert (server.pop("ack_floor"), lake.pop("ack_floor")) == (server_floor, {"consumer_seq": 2, "stream_seq": 2})
    assert server == lake
    pair.settled("state", s)
    pair.settled("messages", s)
