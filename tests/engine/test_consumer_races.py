"""A consumer changed by two processes at once: one acks (or removes a message it has pending)
while another publishes and records deliveries. Each change is planned on the consumer record
as the catalog holds it when it commits; the stream's messages it is planned with must reach at
least as far as that record's deliveries, or the pending acks derived from them miss the newer
ones and the change takes them as acked (the floor jumps to the delivered position, and a
work-queue stream drops messages nobody acked)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.engine.consumer_state import StreamView
from jsspark.engine.lake import Lake


def _meanwhile(monkeypatch: pytest.MonkeyPatch, lake: Lake, stream: str, other: Callable[[], None]) -> None:
    """``other`` runs (once) right after ``lake`` first reads ``stream``'s messages for a
    consumer change: another process's commits landing between that read and the change's."""
    original = StreamView.of.__func__  # type: ignore[attr-defined]
    fired = [False]

    def of(cls: type[StreamView], engine: Any) -> StreamView:
        view = original(cls, engine)
        if not fired[0] and engine is lake.stream(stream):
            fired[0] = True
            other()
        return view

    monkeypatch.setattr(StreamView, "of", classmethod(of))


def test_an_ack_while_another_process_delivers_more_keeps_those_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process A acks message 5 of a work queue while process B publishes 6..10 and records
    their delivery on the same consumer: the floor is 5 and 6..10 stay stored and pending, as a
    server answers an ack of 5 with 10 delivered; only 1..5 leave the stream."""
    a, b = jsspark.connect(tmp_path), jsspark.connect(tmp_path)
    a.add_stream(name="WQ", subjects=["wq.>"], retention="workqueue")
    a.add_consumer("WQ", durable_name="C", ack_policy="explicit")
    for i in range(5):
        a.publish("wq.a", b"%d" % i)
    a.record_delivered("WQ", "C", 5)

    def deliver_more() -> None:
        for i in range(5, 10):
            b.publish("wq.a", b"%d" % i)
        b.record_delivered("WQ", "C", 10)

    _meanwhile(monkeypatch, a, "WQ", deliver_more)
    assert a.ack("WQ", "C", 5)
    monkeypatch.undo()
    fresh = jsspark.connect(tmp_path)
    info = fresh.consumer_info("WQ", "C")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending) == (10, 5, 5)
    state = fresh.stream_info("WQ").state
    assert (state.messages, state.first_seq, state.last_seq) == (5, 6, 10)


def test_a_removal_while_another_process_delivers_more_keeps_those_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process A deletes message 1, the one its consumer has pending, while process B publishes
    2 and 3 and records their delivery: 1 counts as acked (the floor moves to it) and 2 and 3
    stay pending, as on a server where the delete and the deliveries serialise."""
    a, b = jsspark.connect(tmp_path), jsspark.connect(tmp_path)
    a.add_stream(name="S", subjects=["s.>"])
    a.add_consumer("S", durable_name="C", ack_policy="explicit")
    a.publish("s.a", b"1")
    a.record_delivered("S", "C", 1)

    def deliver_more() -> None:
        b.publish("s.a", b"2")
        b.publish("s.a", b"3")
        b.record_delivered("S", "C", 3)

    _meanwhile(monkeypatch, a, "S", deliver_more)
    assert a.delete_msg("S", 1)
    monkeypatch.undo()
    info = jsspark.connect(tmp_path).consumer_info("S", "C")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending) == (3, 1, 2)


def test_a_consumer_listing_while_another_process_delivers_counts_those_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer listing while another process publishes and records deliveries answers one
    moment: every message its delivered position covers is a pending ack (3 delivered, 3
    pending; or, before them, none of either), never deliveries without their pending acks."""
    a, b = jsspark.connect(tmp_path), jsspark.connect(tmp_path)
    a.add_stream(name="S", subjects=["s.>"])
    a.add_consumer("S", durable_name="C", ack_policy="explicit")

    def deliver() -> None:
        for i in range(3):
            b.publish("s.a", b"%d" % i)
        b.record_delivered("S", "C", 3)

    _meanwhile(monkeypatch, a, "S", deliver)
    [listed] = a.consumers_info("S")
    monkeypatch.undo()
    assert listed.num_ack_pending == listed.delivered.stream_seq


def _before_next_change(monkeypatch: pytest.MonkeyPatch, lake: Lake, other: Callable[[], None]) -> None:
    """``other`` runs (once) right before ``lake``'s next catalog change is planned: another
    process's commits landing between a stream commit of ``lake`` and what it tells consumers."""
    original = lake.catalog.transact
    fired = [False]

    def transact(plan: Any) -> Any:
        if not fired[0]:
            fired[0] = True
            other()
        return original(plan)

    monkeypatch.setattr(lake.catalog, "transact", transact)


def test_a_purge_while_another_process_delivers_more_keeps_those_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process A purges the stream while its consumer has 1 and 2 pending, and process B
    publishes and delivers two more before A's purge reaches the consumer: the purged ones
    count as acked (floor 2), the two newer ones stay pending, as on a server where the purge
    and the deliveries serialise."""
    a, b = jsspark.connect(tmp_path), jsspark.connect(tmp_path)
    a.add_stream(name="S", subjects=["s.>"])
    a.add_consumer("S", durable_name="C", ack_policy="explicit")
    a.publish("s.a", b"1")
    a.publish("s.a", b"2")
    a.record_delivered("S", "C", 2)

    def deliver_more() -> None:
        b.publish("s.a", b"new")
        b.publish("s.a", b"new")
        b.record_delivered("S", "C", 4)

    _before_next_change(monkeypatch, a, deliver_more)
    a.purge("S")
    monkeypatch.undo()
    info = jsspark.connect(tmp_path).consumer_info("S", "C")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending) == (4, 2, 2)
