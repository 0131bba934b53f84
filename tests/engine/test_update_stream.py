"""Stream updates on a real nats-server and on a lake, compared step by step: the update's
answer (error object, or stored config), then what the updated stream does with publishes,
purges and deletes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jsspark.engine.lake import connect
from tests.config.conftest import stored
from tests.engine.backends import LakeBackend, ServerBackend
from tests.engine.test_differential import Pair, paired, subj


class UpdatingServer(ServerBackend):
    def update_stream(self, cfg: dict[str, Any]) -> dict[str, Any]:
        r = self._req(f"$JS.API.STREAM.UPDATE.{cfg['name']}", cfg)
        return {"error": r["error"]} if "error" in r else {"config": stored(r["config"])}


class UpdatingLake(LakeBackend):
    def update_stream(self, cfg: dict[str, Any]) -> dict[str, Any]:
        r = self._call(self.lake.update_stream, cfg)
        return r if isinstance(r, dict) else {"config": r.config.to_json()}


@pytest.fixture
def pair(nats_server: Any, tmp_path: Any) -> Iterator[Pair]:
    yield from paired(UpdatingServer(nats_server.url), UpdatingLake(connect(tmp_path / "lake")))


def test_add_subject_and_raise_max_msgs(pair: Pair) -> None:
    s = pair.stream(max_msgs=3)
    own = subj(s, ">")
    for i in range(4):
        pair.publish(subj(s, f"a.{i}"), b"x")
    pair.update_stream({"name": s, "subjects": [own, f"x{s}.>"], "max_msgs": 10})
    for i in range(8):
        pair.publish(subj(s, f"b.{i}") if i % 2 else f"x{s}.{i}", b"y")
    pair.check(s)


def _sealed(pair: Pair) -> str:
    s = pair.stream(max_age=3600 * 10**9, allow_rollup_hdrs=True)
    pair.publish(subj(s, "a"), b"1")
    pair.publish(subj(s, "b"), b"2")
    cfg = {"name": s, "subjects": [subj(s, ">")], "max_age": 3600 * 10**9, "allow_rollup_hdrs": True}
    sealed = pair.update_stream({**cfg, "sealed": True})
    assert sealed["config"]["sealed"] and sealed["config"]["max_age"] == 0
    return s


def test_seal_then_publish_and_unseal_refused(pair: Pair) -> None:
    s = _sealed(pair)
    pair.publish(subj(s, "c"), b"3")
    cfg = {"name": s, "subjects": [subj(s, ">")]}
    assert "unseal" in pair.update_stream(cfg)["error"]["description"]
    pair.update_stream({**cfg, "sealed": True, "description": "still sealed"})
    pair.check(s)


def test_sealed_refuses_delete_and_purge_as_sealed(pair: Pair) -> None:
    s = _sealed(pair)
    pair.delete_msg(s, 1)
    assert pair.server.purge(s) == pair.lake.purge(s)


def test_refused_updates(pair: Pair) -> None:
    s = pair.stream(deny_delete=True)
    other = pair.stream()
    base = {"name": s, "subjects": [subj(s, ">")], "deny_delete": True}
    pair.update_stream({**base, "storage": "memory"})
    pair.update_stream({**base, "retention": "workqueue"})
    pair.update_stream({**base, "deny_delete": False})
    pair.update_stream({**base, "mirror": {"name": other}, "subjects": []})
    pair.update_stream({**base, "subjects": [subj(s, ">"), subj(other, "a")]})  # overlap 10065
    pair.update_stream({**base, "duplicate_window": -1})
    pair.update_stream({"name": "NOPE_UPDATE", "subjects": ["nope.update"]})
    pair.update_stream({"name": "NOPE_UPDATE", "duplicate_window": -1})
    pair.publish(subj(s, "a"), b"still writable")
    pair.check(s)


@pytest.mark.parametrize("limits", [{"max_msgs": 2}, {"max_msgs_per_subject": 1}, {"max_bytes": 150}])
def test_lowered_limits_apply_on_update(pair: Pair, limits: dict[str, Any]) -> None:
    s = pair.stream()
    for t in "abab":
        pair.publish(subj(s, t), b"x" * 20)
    pair.update_stream({"name": s, "subjects": [subj(s, ">")], **limits})
    pair.check(s)


@pytest.mark.parametrize("max_bytes", [None, 1000])
def test_a_discard_new_stream_over_a_lowered_max_msgs_takes_what_replaces(pair: Pair, max_bytes: int | None) -> None:
    """A discard-new stream lowered below what it holds keeps its messages (the update trims
    only discard-old streams), and ``storeRawMsg`` still takes a message that replaces one of
    its subject's (``max_msgs_per_subject`` reached): ``max_msgs`` does not count it, however
    far over the stream is. A message of a subject with room is refused. With ``max_bytes``
    the lake decides message by message, without it for the whole batch: both are checked."""
    limits: dict[str, Any] = {"max_msgs": 9, "max_msgs_per_subject": 3, "discard": "new"}
    if max_bytes is not None:
        limits["max_bytes"] = max_bytes
    s = pair.stream(**limits)
    for t in "ccccb":
        pair.publish(subj(s, t), t.encode())
    pair.update_stream({"name": s, "subjects": [subj(s, ">")], **limits, "max_msgs": 2})
    pair.check(s)
    assert "error" in pair.publish(subj(s, "b"), b"room on b: counts, refused")
    assert pair.publish(subj(s, "c"), b"replaces the oldest c")["seq"] == 6
    pair.check(s)


def test_update_checks_that_look_at_the_other_streams(pair: Pair) -> None:
    """An update is checked against the other streams as a create is: a cycle it would close
    (10052, before a mirror that cannot be added is refused), an origin allowing larger
    messages than a source (10046) or a mirror (10030) now does, an external deliver prefix
    that captures a local origin's subjects (10022); a mirror updated after its origin
    turned ``allow_direct`` on takes it."""
    a, b = pair.stream(), pair.stream()
    pair.update_stream({"name": a, "subjects": [subj(a, ">")], "sources": [{"name": b}]})
    cycle = pair.update_stream({"name": b, "subjects": [subj(b, ">")], "sources": [{"name": a}]})
    assert cycle["error"]["err_code"] == 10052
    m = pair.stream(subjects=[], mirror={"name": b})
    assert pair.update_stream({"name": b, "mirror": {"name": m}})["error"]["err_code"] == 10052

    o = pair.stream(max_msg_size=1000)
    s = pair.stream(max_msg_size=1000, sources=[{"name": o}])
    assert pair.update_stream({"name": s, "subjects": [subj(s, ">")], "max_msg_size": 10,
                               "sources": [{"name": o}]})["error"]["err_code"] == 10046
    mo = pair.stream(subjects=[], max_msg_size=1000, mirror={"name": o})
    assert pair.update_stream({"name": mo, "max_msg_size": 10, "mirror": {"name": o}})["error"]["err_code"] == 10030
    external = {"name": "X", "external": {"api": "$JS.x.API", "deliver": subj(o, "")[:-1]}}
    assert pair.update_stream({"name": s, "subjects": [subj(s, ">")], "max_msg_size": 1000,
                               "sources": [{"name": o}, external]})["error"]["err_code"] == 10022

    assert pair.config(mo)["mirror_direct"] is False
    pair.update_stream({"name": o, "subjects": [subj(o, ">")], "max_msg_size": 1000, "allow_direct": True})
    updated = pair.update_stream({"name": mo, "max_msg_size": 1000, "mirror": {"name": o}})
    assert updated["config"]["mirror_direct"] is True
    pair.config(mo)


def test_lowered_consumer_limits_refused_over_an_existing_consumer(pair: Pair) -> None:
    """``updateWithAdvisory``: a changed, positive ``consumer_limits`` value is checked against
    every consumer's own (its stored ``max_ack_pending`` default 1000 counts): 10069 naming the
    consumers above it; a consumer created after a refused update still gets the old defaults.
    One consumer violates at a time (the server lists several in Go map order)."""
    s = pair.stream()
    cfg = {"name": s, "subjects": [subj(s, ">")]}
    pair.consumer_create(s, {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 100})
    refused = pair.update_stream({**cfg, "consumer_limits": {"max_ack_pending": 10}})
    assert refused["error"]["err_code"] == 10069 and refused["error"]["description"].endswith(": C")
    pair.update_stream({**cfg, "consumer_limits": {"max_ack_pending": 100}})
    pair.consumer_create(s, {"durable_name": "D", "ack_policy": "explicit", "inactive_threshold": 60 * 10**9})
    limits = {"max_ack_pending": 100, "inactive_threshold": 10 * 10**9}
    assert pair.update_stream({**cfg, "consumer_limits": limits})["error"]["description"].endswith(": D")
    pair.consumer_create(s, {"durable_name": "E", "ack_policy": "explicit"})
    pair.update_stream({**cfg, "consumer_limits": {**limits, "inactive_threshold": 60 * 10**9}})
    pair.update_stream({**cfg, "consumer_limits": {"max_ack_pending": 0}})  # unset: nothing checked


def test_limits_to_interest_applies_interest_at_once(pair: Pair) -> None:
    """``updateWithAdvisory`` on a retention change to interest runs each consumer's
    ``checkStateForInterestStream``: what it acked (up to its ack floor, or delivered and no
    longer pending) goes unless another consumer still needs it, before the update answers.
    Messages no consumer has got to yet, or outside every filter, stay."""
    s = pair.stream()
    cfg = {"name": s, "subjects": [subj(s, ">")]}
    for t in "ababa":
        pair.publish(subj(s, t), t.encode())
    pair.consumer_create(s, {"durable_name": "C", "ack_policy": "explicit"})
    pair.consumer_create(s, {"durable_name": "A", "ack_policy": "all", "filter_subject": subj(s, "a")})
    pair.consumer_create(s, {"durable_name": "X", "ack_policy": "explicit", "filter_subject": subj(s, "x")})
    pair.fetch(s, "C", 4)
    pair.ack(s, "C", 1, 1)
    pair.ack(s, "C", 2, 2)  # in order: the lake acks an explicit consumer cumulatively
    pair.fetch(s, "A", 3)
    pair.ack(s, "A", 3, 2)
    assert pair.update_stream({**cfg, "retention": "interest"})["config"]["retention"] == "interest"
    pair.check(s)
    pair.consumer_info(s, "C")
    pair.consumer_info(s, "A")
    assert pair.update_stream({**cfg, "retention": "workqueue"})["error"]["err_code"] == 10052
    pair.update_stream({**cfg, "retention": "limits"})
    pair.check(s)


@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize("written", [0, 3])
def test_limits_to_interest_without_consumers_empties_the_stream(pair: Pair, storage: str, written: int) -> None:
    """No consumer has interest: the server's update reply already shows the stream empty
    (first_seq last+1); a publish after is not stored."""
    s = pair.stream(storage=storage)
    cfg = {"name": s, "subjects": [subj(s, ">")], "storage": storage}
    for _ in range(written):
        pair.publish(subj(s, "a"), b"x")
    pair.update_stream({**cfg, "retention": "interest"})
    pair.check(s)
    pair.publish(subj(s, "a"), b"y")
    pair.check(s)


def test_an_update_records_where_a_republish_it_sets_begins(tmp_path: Any) -> None:
    """A server republishes at store time: what an update that sets or changes ``republish``
    finds stored is never republished. The update records that last sequence; an update that
    keeps the republish keeps it; removing republish clears it."""
    lake = connect(str(tmp_path / "lake"))
    lake.add_stream(name="EV", subjects=["ev.>"], republish={"src": "ev.>", "dest": "out.>"})
    assert lake.republish_after("EV") == 0  # set at creation: everything is stored after it
    for s in ("ev.1", "ev.2", "ev.3"):
        lake.publish(s, b"x")
    lake.update_stream(name="EV", subjects=["ev.>"])
    assert lake.republish_after("EV") == 0
    lake.update_stream(name="EV", subjects=["ev.>"], republish={"src": "ev.>", "dest": "out.>"})
    assert lake.republish_after("EV") == 3
    lake.publish("ev.4", b"x")
    lake.update_stream(name="EV", subjects=["ev.>"], republish={"src": "ev.>", "dest": "out.>"}, max_msgs=100)
    assert lake.republish_after("EV") == 3  # the same republish
    lake.update_stream(name="EV", subjects=["ev.>"], republish={"src": "ev.>", "dest": "new.>"}, max_msgs=100)
    assert lake.republish_after("EV") == 4
    lake.update_stream(name="EV", subjects=["ev.>"], max_msgs=100)
    assert lake.republish_after("EV") == 0


def test_an_update_keeps_the_first_seq_a_purge_gave_a_never_written_stream(pair: Pair) -> None:
    """A purge moves a never-written stream's first seq from 0 to 1 (``mark_purged``); the
    config update's own commit (``record_config``) keeps it, as the server's state does.
    Found by ``fuzz_differential --mode stream``, seed 360296."""
    s = pair.stream(max_msgs=4)
    pair.purge(s)
    pair.update_stream({"name": s, "subjects": [subj(s, ">")], "max_msgs": 5})
    pair.check(s)
    pair.publish(subj(s, "a"), b"x")
    pair.check(s)
