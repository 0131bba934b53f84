"""A streaming query restarted from its checkpoint, driven as Spark's driver calls the reader
(a new reader per run, offsets from the previous run): the stream deleted and created again
(also while the query runs: the same reader plans on), the durable consumer deleted, a
checkpoint reused by a query with another source config."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import InputPartition

import jsspark
from jsspark.datasource.options import OptionError
from jsspark.datasource.planning import Cursor, DataLossError
from jsspark.datasource.schema import spark_schema
from jsspark.datasource.source import JetStreamDataSource

pytestmark = pytest.mark.spark


def _reader(loc: str, **opts: str) -> Any:
    return JetStreamDataSource({"path": loc, "stream": "S", **opts}).streamReader(spark_schema())


def _batch(reader: Any, start: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """One micro-batch as Spark plans it: ``latestOffset(start)``, then ``partitions`` and the
    rows its tasks read; the end offset and the delivered sequences."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    seqs: list[int] = []
    for p in reader.partitions(start, end):
        for b in reader.read(p):
            seqs += b.column("seq").to_pylist()
    return end, seqs


def _publish(lake: Any, n: int, tag: str) -> None:
    for i in range(n):
        lake.publish("s.a", f"{tag}{i}".encode())


def _recreated(tmp_path: Path, **opts: str) -> tuple[str, Any, dict[str, Any]]:
    """A query read messages 1..5 of S; then S was deleted and created again with 8 messages."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, 5, "old")
    reader = _reader(loc, **opts)
    end, seqs = _batch(reader, reader.initialOffset())
    assert seqs == [1, 2, 3, 4, 5]
    reader.commit(end)
    lake.delete_stream("S")
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, 8, "new")
    return loc, lake, end


@pytest.mark.parametrize("durable", [False, True])
def test_restart_after_the_stream_was_created_again_fails_by_default(tmp_path: Path, durable: bool) -> None:
    opts = {"durable_name": "D"} if durable else {}
    loc, _lake, end = _recreated(tmp_path, **opts)
    old = Cursor.from_offset(end).origin
    reader = _reader(loc, **opts)
    new = reader.planner.origin
    with pytest.raises(DataLossError, match="deleted and created again") as e:
        reader.latestOffset(end, reader.getDefaultReadLimit())
    assert old is not None and old.table_id in str(e.value) and new.table_id in str(e.value)
    assert "failOnDataLoss=false" in str(e.value) and "new checkpoint" in str(e.value)


@pytest.mark.parametrize("durable", [False, True])
def test_restart_after_the_stream_was_created_again_reads_it_from_the_start(
    tmp_path: Path, durable: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """failOnDataLoss=false: the new stream is read from its start (all 8 messages), not from
    the old stream's sequence 5 on; a durable is created on the new stream."""
    opts = {"failOnDataLoss": "false", **({"durable_name": "D"} if durable else {})}
    loc, lake, end = _recreated(tmp_path, **opts)
    reader = _reader(loc, **opts)
    with caplog.at_level(logging.WARNING, logger="jsspark.datasource.planning"):
        nxt, seqs = _batch(reader, end)
    assert seqs == [1, 2, 3, 4, 5, 6, 7, 8]
    assert any("deleted and created again" in r.getMessage() for r in caplog.records)
    assert Cursor.from_offset(nxt).origin == reader.planner.origin
    assert _batch(reader, nxt) == (nxt, [])
    if durable:
        assert lake.consumer_info("S", "D").ack_floor.stream_seq == 8


def test_restart_from_an_offset_without_origin_keeps_working(tmp_path: Path) -> None:
    """A checkpoint written before offsets carried an origin continues where it stood."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, 8, "m")
    reader = _reader(loc)
    nxt, seqs = _batch(reader, {"seq": 5, "dseq": 5})
    assert seqs == [6, 7, 8] and Cursor.from_offset(nxt).origin == reader.planner.origin


@pytest.mark.parametrize("retention", ["limits", "workqueue"])
def test_restart_creates_a_deleted_durable_again_at_the_checkpoint(tmp_path: Path, retention: str) -> None:
    """The durable was deleted while the query was stopped, after its last batch committed and
    before that batch was acked (the next planning acks it): the restart creates it again at
    the checkpoint's cursor, so the query goes on with 6.. (nothing twice), and a work-queue
    stream drops the committed 1..5 (nothing kept for ever, nothing lost). A deletion while the
    query runs still fails, saying a restart creates the durable again."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"], retention=retention)
    _publish(lake, 5, "a")
    opts = {"durable_name": "D", "ack_policy": "explicit"}
    reader = _reader(loc, **opts)
    end, seqs = _batch(reader, reader.initialOffset())
    assert seqs == [1, 2, 3, 4, 5]
    lake.delete_consumer("S", "D")
    _publish(lake, 5, "b")
    reader = _reader(loc, **opts)  # the restart
    nxt, seqs = _batch(reader, end)
    assert seqs == [6, 7, 8, 9, 10]
    info = lake.consumer_info("S", "D")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.ack_floor.consumer_seq) == (5, 5, 5)
    if retention == "workqueue":
        assert lake.stream_info("S").state.first_seq == 6
    assert _batch(reader, nxt) == (nxt, [])
    assert lake.consumer_info("S", "D").ack_floor.stream_seq == 10
    lake.delete_consumer("S", "D")
    with pytest.raises(Exception, match="deleted while the query used it; restart the query to create it again"):
        reader.latestOffset(nxt, reader.getDefaultReadLimit())
    _publish(lake, 1, "c")
    reader = _reader(loc, **opts)
    assert _batch(reader, nxt)[1] == [11]


def test_a_durable_kept_by_planning_and_deleted_when_no_batch_is_planned_within_its_inactive_threshold(
    tmp_path: Path,
) -> None:
    """Planning a batch is the query's pull: a durable with an ``inactive_threshold`` (here the
    stream's ``consumer_limits`` default) stays while
    the query plans, and goes once no batch is planned within it (the server's delete timer).
    The next planning then fails saying a restart creates it again, and the restart does, at
    the checkpoint: nothing read twice, nothing lost."""
    import time

    from jsspark.engine import inactive
    from jsspark.engine.consumer_state import Consumer

    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream({"name": "S", "subjects": ["s.>"], "consumer_limits": {"inactive_threshold": 1_000_000_000}})
    _publish(lake, 3, "a")
    opts = {"durable_name": "D", "ack_policy": "explicit"}
    reader = _reader(loc, **opts)
    end, seqs = _batch(reader, reader.initialOffset())
    assert seqs == [1, 2, 3]
    began = time.monotonic()
    while time.monotonic() - began < 2.5:  # an idle query planning for more than twice the threshold
        assert _batch(reader, end) == (end, [])
        time.sleep(0.05)  # pacing the plannings
    assert lake.consumer_info("S", "D").ack_floor.stream_seq == 3

    def due() -> bool:
        c = Consumer.of(lake.catalog.get("consumer", "S", "D"))
        return inactive.deadline(c, lambda: 0) <= time.time_ns()

    def idle() -> None:  # no planning (a trigger interval longer than the threshold, or the query stopped)
        deadline = time.monotonic() + 5
        while not due():
            assert time.monotonic() < deadline
            time.sleep(0.05)

    idle()
    _publish(lake, 2, "b")
    with pytest.raises(Exception, match="deleted while the query used it; restart the query to create it again"):
        reader.latestOffset(end, reader.getDefaultReadLimit())
    assert lake.consumers_info("S") == []
    reader = _reader(loc, **opts)  # the restart
    end, seqs = _batch(reader, end)
    assert seqs == [4, 5]
    assert lake.consumer_info("S", "D").delivered.stream_seq == 3  # acked up to the checkpoint, 4..5 planned
    idle()  # stopped longer than the threshold, nothing swept meanwhile: the restart creates it again
    _publish(lake, 1, "c")
    assert _batch(_reader(loc, **opts), end)[1] == [6]


def test_the_inactive_threshold_option_sets_the_durables(tmp_path: Path) -> None:
    """``inactive_threshold`` (ConsumerConfig's name: nanoseconds, or a Go duration) is the
    durable's, as a query without a checkpoint creates or binds it (the server's
    create-or-update); a restart from a checkpoint reads on with the durable as it stands, as
    for every consumer option. A value that is not a duration fails at load naming it."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream({"name": "S", "subjects": ["s.>"]})
    _publish(lake, 2, "a")
    reader = _reader(loc, durable_name="D", inactive_threshold="1h")
    end, seqs = _batch(reader, reader.initialOffset())
    assert seqs == [1, 2]
    assert lake.consumer_info("S", "D").config.inactive_threshold == 3600 * 10**9
    _publish(lake, 1, "b")
    assert _batch(_reader(loc, durable_name="D", inactive_threshold="90s"), end)[1] == [3]  # a restart
    assert lake.consumer_info("S", "D").config.inactive_threshold == 3600 * 10**9
    reader = _reader(loc, durable_name="D", inactive_threshold=str(90 * 10**9))  # a new query binds it
    reader.initialOffset()
    assert lake.consumer_info("S", "D").config.inactive_threshold == 90 * 10**9
    with pytest.raises(Exception, match=r"(?s)invalid consumer option.*inactive_threshold.*invalid duration .soon."):
        _reader(loc, durable_name="E", inactive_threshold="soon")


@pytest.mark.parametrize("new_count", [3, 20])
def test_running_query_sees_the_stream_created_again(tmp_path: Path, new_count: int) -> None:
    """The same reader plans on after its stream is deleted and created again: with fewer Delta
    versions than the old table (delta-rs's "older than the existing snapshot" error before) or
    more (new messages read as the old stream's sequences 6.. before, the first five skipped).
    It fails naming both tables, as on a restart; the batch planned before the deletion fails
    too, in planning and in a task already holding its partition, rather than read the new
    table's rows at those sequences."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, 5, "old")
    reader = _reader(loc)
    end, seqs = _batch(reader, reader.initialOffset())
    assert seqs == [1, 2, 3, 4, 5]
    _publish(lake, 5, "old")
    planned = reader.latestOffset(end, reader.getDefaultReadLimit())
    tasks = reader.partitions(end, planned)
    old = reader.planner.origin.table_id
    lake.delete_stream("S")
    with pytest.raises(DataLossError, match="stream S was deleted while this query read it"):
        reader.latestOffset(planned, reader.getDefaultReadLimit())
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, new_count, "new")
    new = jsspark.connect(loc).stream("S").table.snapshot().table_id
    values = [t.value for t in tasks]
    for value in [*values, *(replace(v, files=(), table_schema=None) for v in values)]:  # files direct, or the log
        with pytest.raises(DataLossError, match="deleted and created again") as e:
            list(reader.read(InputPartition(value)))
        assert old in str(e.value) and new in str(e.value)
    with pytest.raises(DataLossError, match="deleted and created again") as e:
        reader.partitions(end, planned)
    assert old in str(e.value) and new in str(e.value)
    with pytest.raises(DataLossError, match="deleted and created again") as e:
        reader.latestOffset(planned, reader.getDefaultReadLimit())
    assert old in str(e.value) and new in str(e.value) and "failOnDataLoss=false" in str(e.value)


def test_running_query_reads_the_stream_created_again_from_its_start(tmp_path: Path) -> None:
    """failOnDataLoss=false: the running query skips the old stream's lost batch and reads every
    message of the new one, from sequence 1 (new0..), none as an old sequence."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, 10, "old")
    reader = _reader(loc, failOnDataLoss="false")
    end, seqs = _batch(reader, reader.initialOffset())
    assert seqs == list(range(1, 11))
    lake.delete_stream("S")
    assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end  # no stream now: no batch
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, 20, "new")
    nxt, seqs = _batch(reader, end)
    assert seqs == list(range(1, 21))
    data = [d for p in reader.partitions(end, nxt) for b in reader.read(p) for d in b.column("data").to_pylist()]
    assert data == [f"new{i}".encode() for i in range(20)]
    assert _batch(reader, nxt) == (nxt, [])


def test_checkpoint_of_another_stream_is_refused_as_such(tmp_path: Path) -> None:
    """A checkpoint written by a query on stream A reused by one on stream B: B was never deleted,
    so not data loss; the error names both streams and a new checkpointLocation, whatever
    failOnDataLoss says (Spark's Kafka source ties a checkpoint to its topics too)."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    for name in ("A", "B"):
        lake.add_stream(name=name, subjects=[name.lower() + ".>"])
    lake.publish("a.x", b"1")
    lake.publish("b.x", b"1")
    reader = JetStreamDataSource({"path": loc, "stream": "A"}).streamReader(spark_schema())
    end, seqs = _batch(reader, reader.initialOffset())
    assert seqs == [1]
    for opts in ({}, {"failOnDataLoss": "false"}):
        other = JetStreamDataSource({"path": loc, "stream": "B", **opts}).streamReader(spark_schema())
        with pytest.raises(OptionError, match="checkpoint") as planning:
            other.latestOffset(end, other.getDefaultReadLimit())
        with pytest.raises(OptionError, match="checkpoint") as replay:  # a restart replays the last batch
            other.partitions(reader.initialOffset(), end)
        for msg in (str(planning.value), str(replay.value)):
            assert "stream B" in msg and "stream A" in msg and "new checkpointLocation" in msg
            assert "deleted" not in msg


@pytest.mark.parametrize("before", [{}, {"durable_name": "other"}, {"durable_name": "D"}])
def test_restart_with_a_durable_says_where_the_checkpoint_came_from(
    tmp_path: Path, before: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint written without ``durable_name`` (or with another one) restarted with
    ``durable_name=D``: D is created at the checkpoint's position and the log says so, not that
    D "was deleted while the query was stopped" (only true when the offsets name D)."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"])
    _publish(lake, 5, "a")
    reader = _reader(loc, **before)
    end, _ = _batch(reader, reader.initialOffset())
    if before.get("durable_name") == "D":
        lake.delete_consumer("S", "D")
    _publish(lake, 2, "b")
    reader = _reader(loc, durable_name="D")
    with caplog.at_level(logging.WARNING, logger="jsspark.datasource.planning"):
        _, seqs = _batch(reader, end)
    assert seqs == [6, 7]
    assert lake.consumer_info("S", "D").ack_floor.stream_seq == 5
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "stream sequence 5" in said
    if before.get("durable_name") == "D":
        assert "'D' on stream S was deleted while the query was stopped" in said
    else:
        assert "deleted" not in said
        assert ("without a durable consumer" if not before else "durable consumer 'other'") in said


def test_a_planned_batch_replayed_with_another_filter_reads_it_with_that_filter(tmp_path: Path) -> None:
    """A query stopped (or failed in its sink) after planning a batch and before committing it,
    restarted with another filter_subject: Spark replays the planned batch, which is read with
    the new filter, as every batch after it, and no message on it is missed or read twice.
    Before, the planned count (6 on s.a) against what s.b has in that range (4) failed the
    query as data loss ('purged, deleted or expired by a limit'): nothing had been removed."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"])
    for i in range(10):
        lake.publish("s.b" if i % 3 == 0 else "s.a", f"m{i}".encode())  # s.b at 1, 4, 7, 10
    first = _reader(loc, filter_subject="s.a")
    start = first.initialOffset()
    end = first.latestOffset(start, first.getDefaultReadLimit())  # planned, never committed
    assert (end["seq"], end["dseq"]) == (10, 6)
    again = _reader(loc, filter_subject="s.b")
    seqs = [s for p in again.partitions(start, end) for b in again.read(p) for s in b.column("seq").to_pylist()]
    assert seqs == [1, 4, 7, 10]
    lake.publish("s.b", b"m10")
    lake.publish("s.a", b"m11")
    _, more = _batch(again, end)
    assert more == [11]
