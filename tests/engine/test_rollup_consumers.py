"""Consumers when a ``Nats-Rollup`` message purges what they had delivered, on a real
nats-server and on a lake, compared step by step.

The server applies a rollup as a purge of its subject (``sub``) or of the stream (``all``)
down to the rolling message (``processJetStreamMsgWithRollup`` → ``purgeLocked``): every
consumer within the subject moves past what went, a wider one to the stream's new first seq
(``consumer.purge``), and a purge that removes exactly one message also reports it as a single
removal, which a consumer that had it pending takes as acked (``decStreamPending``). On an
interest stream a rollup nobody wants (not stored) purges down to nothing (keep 0).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from jsspark.engine import headers as H
from jsspark.engine.lake import connect
from tests.engine.test_consumer_removals import _settle, _settle_racing
from tests.engine.test_differential import Pair, paired, subj
from tests.engine.test_update_stream import UpdatingLake, UpdatingServer

SUB = [("Nats-Rollup", "sub")]
ALL = [("Nats-Rollup", "all")]


@pytest.fixture
def pair(nats_server: Any, tmp_path: Any) -> Iterator[Pair]:
    yield from paired(UpdatingServer(nats_server.url), UpdatingLake(connect(tmp_path / "lake")))


def _settle_known(pair: Pair, s: str, name: str) -> bool:
    """Consumer ``name``'s info, where it acks all and a rollup purged deliveries it had pending
    on another subject than its filter's (a wider purge): 2.15.1 moves its floor past them yet
    still counts the older deliveries below the floor as pending; a lake consumer's pending lie
    above its floor, so it counts fewer. Everything else is equal.

    When the rollup purged exactly one of them, the server also acks that one in a goroutine
    (``decStreamPending`` → ``go o.processTerm``), unordered with the wider purge
    (``consumer.purge``). Purge first, that ack finds it gone (the usual order). Ack first, it
    acks every delivery below as an AckAll ack does, counts what the lake counts, and on an
    interest stream removes what no other consumer still needs (seen about once in 80 runs with
    the machine's cores busy). Returns whether the server acked first."""
    lake = pair.lake.consumer_info(s, name)
    deadline = time.monotonic() + 5
    while True:
        server = pair.server.consumer_info(s, name)
        if {**server, "num_ack_pending": 0} == {**lake, "num_ack_pending": 0} or time.monotonic() > deadline:
            break
        time.sleep(0.02)  # polling the server's answer, bounded by the deadline
    server_pending, lake_pending = server.pop("num_ack_pending"), lake.pop("num_ack_pending")
    assert server_pending >= lake_pending
    assert server == lake
    return server_pending == lake_pending


def _publish(pair: Pair, s: str, rows: list[tuple[str, list[tuple[str, str]] | None]]) -> None:
    for t, hdrs in rows:
        pair.publish(subj(s, t), t.encode(), headers=hdrs)


@pytest.mark.parametrize("ack", ["explicit", "all"])
@pytest.mark.parametrize("filtered", [None, "a", "b", "*"])
@pytest.mark.parametrize("rollup", ["sub one", "sub two", "all"])
def test_a_rollup_purges_what_consumers_had_pending(
    pair: Pair, ack: str, filtered: str | None, rollup: str
) -> None:
    """Consumers on the rolled-up subject, on another one and on every subject, with messages
    delivered and not acked when the rollup comes."""
    s = pair.stream(allow_rollup_hdrs=True)
    cfg: dict[str, Any] = {"durable_name": "C", "ack_policy": ack}
    if filtered:
        cfg["filter_subject"] = subj(s, filtered)
    pair.consumer_create(s, cfg)
    first = [("b", None), ("a", None), ("b", None)] if rollup == "sub one" else [("a", None), ("b", None), ("a", None)]
    _publish(pair, s, [*first, ("c", None)])
    pair.fetch(s, "C", 3)
    _publish(pair, s, [("a", ALL if rollup == "all" else SUB), ("b", None)])
    if ack == "all" and rollup != "all" and filtered in (None, "*"):
        _settle_known(pair, s, "C")
        _settle(pair, s)
        pair.fetch(s, "C", 5)
        _settle_known(pair, s, "C")
        _settle(pair, s)
        return
    if ack == "explicit" and rollup == "sub one" and filtered in (None, "*"):
        floor = {"ack_floor": {"consumer_seq": 0, "stream_seq": 0}}
        _settle_racing(pair, s, "C", **floor)
        pair.fetch(s, "C", 5)
        _settle_racing(pair, s, "C", **floor)
        return
    _settle(pair, s, "C")
    pair.fetch(s, "C", 5)
    _settle(pair, s, "C")


@pytest.mark.parametrize("rollup", [SUB, ALL])
def test_an_ack_all_consumer_on_an_interest_stream_acks_below_a_single_rolled_up_message(
    pair: Pair, rollup: list[tuple[str, str]]
) -> None:
    """The rollup moves the consumer's floor past what it purges; the messages below stay until
    acked. When it purges exactly one and the server acks that one first (``_settle_known``),
    the ack is an AckAll ack: what was pending below it, on other subjects, is acked with it and
    leaves the interest stream (where ``O`` acked it already); the lake is told the same."""
    s = pair.stream(allow_rollup_hdrs=True, retention="interest")
    pair.consumer_create(s, {"durable_name": "C", "ack_policy": "all"})
    pair.consumer_create(s, {"durable_name": "O", "ack_policy": "explicit", "filter_subject": subj(s, "b")})
    _publish(pair, s, [("b", None), ("c", None), ("a", None), ("c", None)])
    pair.fetch(s, "C", 4)
    pair.fetch(s, "O", 1)
    pair.ack(s, "O", 1, 1)
    _publish(pair, s, [("a", rollup)])
    if rollup is SUB and _settle_known(pair, s, "C"):
        for seq in (1, 2):  # what the ack took out, as the server removes it: no consumer has it pending
            pair.lake.delete_msg(s, seq)
    _settle(pair, s, *(["O"] if rollup is SUB else ["C", "O"]))


def test_a_rollup_nobody_wants_on_an_interest_stream_purges_to_nothing(pair: Pair) -> None:
    """Not stored (no consumer takes its subject), it still purges its subject (keep 0); an
    ``all`` one purges the whole stream and every consumer starts after it."""
    s = pair.stream(allow_rollup_hdrs=True, retention="interest")
    pair.consumer_create(s, {"durable_name": "B", "ack_policy": "explicit", "filter_subject": subj(s, "b")})
    pair.consumer_create(s, {"durable_name": "W", "ack_policy": "explicit", "filter_subject": subj(s, "*")})
    _publish(pair, s, [("b", None), ("b", None)])
    pair.fetch(s, "B", 1)
    pair.consumer_delete(s, "W")
    _publish(pair, s, [("a", SUB)])
    _settle(pair, s, "B")
    _publish(pair, s, [("a", ALL)])
    _settle(pair, s, "B")
    _publish(pair, s, [("b", None)])
    _settle(pair, s, "B")
    pair.fetch(s, "B", 3)


def test_rollups_in_one_lake_batch_tell_consumers_as_one_by_one_publishes(pair: Pair) -> None:
    """A lake batch is one commit; its rollups reach the consumers each at its place in it, as
    the server's one-by-one publishes do (a later message's limit does not move them further)."""
    s = pair.stream(allow_rollup_hdrs=True, max_msgs=4)
    pair.consumer_create(s, {"durable_name": "W", "ack_policy": "explicit"})
    pair.consumer_create(s, {"durable_name": "A", "ack_policy": "all", "filter_subject": subj(s, "a")})
    pair.consumer_create(s, {"durable_name": "B", "ack_policy": "explicit", "filter_subject": subj(s, "b")})
    _publish(pair, s, [("a", None), ("b", None), ("c", None), ("a", None)])
    for name in "WAB":
        pair.fetch(s, name, 3)
    rows = [("a", SUB), ("c", None), ("d", None), ("b", SUB), ("d", None), ("e", None)]
    for t, hdrs in rows:
        pair.server.publish(subj(s, t), t.encode(), headers=hdrs)
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, t) for t, _ in rows],
        "data": [t.encode() for t, _ in rows],
        "headers": H.to_arrow([h for _, h in rows]),
    }))
    _settle(pair, s, "W", "A", "B")
    for name in "WAB":
        pair.fetch(s, name, 5)
    _settle(pair, s, "W", "A", "B")
