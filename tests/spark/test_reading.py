"""Executor-side reading without Spark: pacing (replay_policy original, rate_limit_bps),
partition planning, offsets that never skip a skip-list message."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import jsspark
from jsspark.datasource.options import parse_read_options
from jsspark.datasource.planning import Cursor, Planner
from jsspark.datasource.reading import _seq_filter, read_partition
from jsspark.datasource.schema import ARROW_SCHEMA

pytestmark = pytest.mark.spark


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(round(s, 6))
        self.now += s


def _lake(tmp_path: Path) -> tuple[str, Any]:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"])
    return loc, lake


def _planner(loc: str, **opts: str) -> Planner:
    return Planner(parse_read_options({"path": loc, "stream": "S", **opts}))


def test_replay_original_keeps_the_publish_gaps(tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    stream = lake.stream("S")
    from jsspark.engine.stream import Incoming

    base = 1_000_000_000_000_000_000
    for i, gap_ms in enumerate([0, 200, 200, 700]):
        base += gap_ms * 1_000_000
        stream.publish_batch(Incoming.one(f"s.{i}", b"x", None), now_ns=base)
    parts = _planner(loc, replay_policy="original", minPartitions="4").partitions(Cursor(0), None)
    assert len(parts) == 1  # pacing is per task
    clock = FakeClock()
    batches = list(read_partition(parts[0], clock=clock, sleep=clock.sleep))
    assert [b.num_rows for b in batches] == [1, 1, 1, 1]
    assert clock.sleeps == [0.2, 0.2, 0.7]
    assert all(b.schema.equals(ARROW_SCHEMA) for b in batches)


def _publish_at(lake: Any, offsets_ms: list[int], data: bytes = b"x") -> None:
    """Messages stored at these times (ms after a fixed origin)."""
    from jsspark.engine.stream import Incoming

    stream = lake.stream("S")
    for i, at in enumerate(offsets_ms):
        stream.publish_batch(Incoming.one(f"s.{i}", data, None), now_ns=1_000_000_000_000_000_000 + at * 1_000_000)


def _released(parts: list[Any], clock: FakeClock) -> list[float]:
    """When each message of these partitions left (the fake clock at each batch's release)."""
    out: list[float] = []
    for p in parts:
        for b in read_partition(p, clock=clock, sleep=clock.sleep):
            out += [round(clock.now, 6)] * b.num_rows
    return out


def _charged(batch_rows: list[dict[str, Any]], consumer: str = "x" * 8) -> list[int]:
    """What nats-server's rate limit charges each delivered row (``loopAndGatherMsgs``: subject,
    ack reply ``$JS.ACK.<stream>.<consumer>.<dc>.<seq>.<dseq>.<ts>.<pending>``, payload)."""
    return [
        len(r["subject"]) + len(r["data"])
        + len(f"$JS.ACK.{r['stream']}.{consumer}.1.{r['seq']}.{r['delivery_seq']}.{r['ts_ns']}.{r['num_pending']}")
        for r in batch_rows
    ]


def test_rate_limit_bps_is_a_token_bucket_that_starts_full(tmp_path: Path) -> None:
    """The server's limiter (``setRateLimit``) starts full with the stream's max_msg_size as its
    burst: what fits goes at once, the rest as the bucket refills at bps/8 bytes a second."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"], max_msg_size=500)
    lake.publish_batch("S", pa.table({"subject": ["s.a"] * 5, "data": [b"x" * 150] * 5}))
    parts = _planner(loc, rate_limit_bps=str(8 * 1000)).partitions(Cursor(0), None)  # 1000 bytes/s
    clock = FakeClock()
    released = _released(parts, clock)
    again = FakeClock()
    rows = [r for p in parts for b in read_partition(p, clock=again, sleep=again.sleep) for r in b.to_pylist()]
    sz = _charged(rows)
    assert 190 < sz[0] < 210  # 3 + 150 + a 47-byte ack reply, not the 183 stored bytes
    expected, tokens, at = [], 500.0, 0.0
    for n in sz:  # golang.org/x/time/rate: ReserveN at the previous release; 1000 tokens a second
        tokens = min(500.0, tokens) - n
        wait = max(0.0, -tokens / 1000)
        at += wait
        tokens += wait * 1000
        expected.append(round(at, 6))
    assert expected[:2] == [0.0, 0.0]  # the burst
    assert released == pytest.approx(expected, abs=1e-6)


def test_rate_limit_bps_carries_across_micro_batches(tmp_path: Path) -> None:
    """One message per micro-batch: the bucket the first batch drained is the one the next
    batch waits on, as one server consumer's limiter lasts across all its deliveries."""
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="S", subjects=["s.>"], max_msg_size=1000)
    lake.publish_batch("S", pa.table({"subject": ["s.a"] * 3, "data": [b"x" * 900] * 3}))
    clock = FakeClock()
    clock.now = 1_000.0
    planner = Planner(parse_read_options({"path": loc, "stream": "S", "rate_limit_bps": "8000"}), clock=clock)
    released = []
    for k in range(3):
        released += _released(planner.partitions(Cursor(k, k), Cursor(k + 1, k + 1)), clock)
        clock.now += 0.05  # Spark's own time between batches
    sz = 3 + 900 + len("$JS.ACK.S.xxxxxxxx.1.1.1.1000000000000000000.2")
    assert released[0] == 1_000.0  # a full bucket
    assert released[1] == pytest.approx(1_000.0 + (2 * sz - 1000) / 1000, abs=1e-6)
    assert released[2] == pytest.approx(released[1] + sz / 1000, abs=1e-6)


def test_replay_original_carries_gaps_across_micro_batches(tmp_path: Path) -> None:
    """One message per micro-batch still keeps the original gaps, counted from the previous
    message's release; a task that starts late releases at once and counts on from there.
    Replay ends once the query has caught up with the stream's last sequence at its start and
    found nothing more (``o.replay = false``): a message stored later goes at once."""
    loc, lake = _lake(tmp_path)
    _publish_at(lake, [0, 200, 500, 600])
    clock = FakeClock()
    clock.now = 1_000.0
    planner = Planner(parse_read_options({"path": loc, "stream": "S", "replay_policy": "original"}), clock=clock)

    def batch(k: int, n: int = 1) -> list[float]:
        return _released(planner.partitions(Cursor(k, k), Cursor(k + n, k + n)), clock)

    assert batch(0) == [1_000.0]
    clock.now += 0.05
    assert batch(1) == [1_000.2]  # 0.2 s after the first, not as soon as its batch starts
    clock.now += 0.5  # the next task starts 0.2 s after its message was due
    assert batch(2) == [1_000.7]
    assert batch(3) == [1_000.8]  # 0.1 s after the late one
    _publish_at(lake, [10_600])  # stored 10 s after the last: replay is over
    assert batch(4) == [1_000.8]


def test_replay_original_goes_on_past_the_start_until_caught_up(tmp_path: Path) -> None:
    """Messages stored after the query started, before it caught up, are still replayed."""
    loc, lake = _lake(tmp_path)
    _publish_at(lake, [0, 100])
    clock = FakeClock()
    planner = Planner(parse_read_options({"path": loc, "stream": "S", "replay_policy": "original"}), clock=clock)
    assert _released(planner.partitions(Cursor(0, 0), Cursor(1, 1)), clock) == [0.0]
    _publish_at(lake, [400])  # the third arrives before the query catches up
    assert _released(planner.partitions(Cursor(1, 1), None), clock) == [0.1, 0.4]


def test_partitions_split_by_sequence_and_file(tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    for k in range(3):
        lake.publish_batch("S", pa.table({"subject": [f"s.{i}" for i in range(5)], "data": [b"%d" % (k * 5 + i) for i in range(5)]}))
    planner = _planner(loc, minPartitions="3")
    parts = planner.partitions(Cursor(0), None)
    assert [(p.lo, p.hi) for p in parts] == [(0, 5), (5, 10), (10, 15)]
    assert [p.dseq_base for p in parts] == [0, 5, 10] and [p.pending_after for p in parts] == [10, 5, 0]
    snap = planner.snapshot()
    first_commit = {a["path"] for a in planner.table().file_stats(snap).to_pylist() if a["max.seq"] <= 5}
    assert set(parts[0].files) == first_commit
    rows = [r for p in parts for b in read_partition(p) for r in b.to_pylist()]
    assert [r["seq"] for r in rows] == list(range(1, 16))
    assert [r["delivery_seq"] for r in rows] == list(range(1, 16))
    # a pickled partition on an executor needs nothing else
    import pickle

    clone = pickle.loads(pickle.dumps(parts[1]))
    assert [r["seq"] for b in read_partition(clone) for r in b.to_pylist()] == list(range(6, 11))


def test_partitions_cut_between_commits_not_inside_one(tmp_path: Path) -> None:
    """Commits of 8 and 4 messages, 3 tasks wanted: the even cuts (after 4 and 8) would split the
    first commit, whose files interleave over seqs 1..8, so both tasks would decode them; the
    planner moves the cut to the commit boundary and each file is read by exactly one task."""
    loc, lake = _lake(tmp_path)
    for n in (8, 4):  # each commit's files hold s.a and s.b, alternating: every one spans the commit
        lake.publish_batch("S", pa.table({"subject": ["s.a", "s.b"] * (n // 2), "data": [b"x"] * n}))
    planner = _planner(loc, minPartitions="3")
    parts = planner.partitions(Cursor(0), None)
    assert [(p.lo, p.hi) for p in parts] == [(0, 8), (8, 12)]
    assert [p.dseq_base for p in parts] == [0, 8] and [p.pending_after for p in parts] == [4, 0]
    assert not set(parts[0].files) & set(parts[1].files)
    # each task's files lie wholly inside its range: read without a per-row sequence filter,
    # unless the dataset could hold other files (the Delta log's, when paths do not match)
    assert all(p.lo < a and b <= p.hi for p in parts for a, b in p.file_seqs)
    assert [_seq_filter(p, exact=True) for p in parts] == [None, None]
    assert all(_seq_filter(p, exact=False) is not None for p in parts)
    rows = [r for p in parts for b in read_partition(p) for r in b.to_pylist()]
    assert [(r["seq"], r["delivery_seq"], r["num_pending"]) for r in rows] == [(i, i, 12 - i) for i in range(1, 13)]
    # the same through the Delta log (no file sizes planned)
    rows = [r for p in parts for b in read_partition(replace(p, file_sizes=())) for r in b.to_pylist()]
    assert [r["seq"] for r in rows] == list(range(1, 13))


def test_one_commit_is_still_split_when_there_is_no_clean_cut(tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    lake.publish_batch("S", pa.table({"subject": ["s.a", "s.b"] * 6, "data": [b"x"] * 12}))
    parts = _planner(loc, minPartitions="3").partitions(Cursor(0), None)
    assert [(p.lo, p.hi) for p in parts] == [(0, 4), (4, 8), (8, 12)]
    assert all(_seq_filter(p, exact=True) is not None for p in parts)  # each file spans all three tasks
    assert [r["seq"] for p in parts for b in read_partition(p) for r in b.to_pylist()] == list(range(1, 13))


def test_whole_waves_halve_the_largest_tasks() -> None:
    from jsspark.datasource.planning import _whole_waves

    assert _whole_waves(np.array([0, 10, 20, 30]), 2).tolist() == [0, 5, 10, 20, 30]  # ties: the first
    assert _whole_waves(np.array([0, 4, 20]), 4).tolist() == [0, 4, 8, 12, 20]  # 16 -> 8+8 -> 8+4+4
    assert _whole_waves(np.array([0, 1, 2, 3]), 2).tolist() == [0, 1, 2, 3]  # nothing left to split
    assert _whole_waves(np.array([0, 10, 20]), 2).tolist() == [0, 10, 20]


def test_skip_list_cursor_keeps_resume_until_passed(tmp_path: Path) -> None:
    cur = Cursor(1, 0, (2, 5, 7), 9)
    assert cur.to_offset() == {"seq": 1, "dseq": 0, "skip": [2, 5, 7], "resume": 9}
    mid = cur.advance(5, 2)
    assert mid.to_offset() == {"seq": 5, "dseq": 2, "skip": [7], "resume": 9}
    assert mid.advance(9, 3).to_offset() == {"seq": 9, "dseq": 3}
    assert Cursor.from_offset(mid.to_offset()) == mid


def test_last_per_subject_in_bounded_batches(tmp_path: Path) -> None:
    """A skip list spread over several batches delivers exactly the last per subject."""
    loc, lake = _lake(tmp_path)
    lake.publish_batch("S", pa.table({"subject": ["s.a", "s.b", "s.a", "s.c", "s.b", "s.a"], "data": [b""] * 6}))
    planner = _planner(loc, deliver_policy="last_per_subject", filter_subject="s.*")
    cur = planner.initial()
    lake.publish_batch("S", pa.table({"subject": ["s.a", "s.d"], "data": [b""] * 2}))
    seen: list[int] = []
    while True:
        end = planner.latest(cur, 1, None)
        if end == cur:
            break
        seen += [r["seq"] for p in planner.partitions(cur, end) for b in read_partition(p) for r in b.to_pylist()]
        cur = Cursor.from_offset(end.to_offset())
    assert seen == [4, 5, 6, 7, 8]


def test_available_now_target_caps_latest(tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    lake.publish_batch("S", pa.table({"subject": ["s.a"] * 3, "data": [b""] * 3}))
    planner = _planner(loc)
    target = planner.latest_available()
    lake.publish_batch("S", pa.table({"subject": ["s.a"] * 3, "data": [b""] * 3}))
    # the end carries what is stored after it now (pending), past the target too
    assert planner.latest(Cursor(0), None, None, target).to_offset() == {"seq": 3, "dseq": 3, "pending": 3}
    assert planner.latest(Cursor(0), None, None).to_offset() == {"seq": 6, "dseq": 6, "pending": 0}


def test_filtered_cursor_moves_past_unwanted_tail(tmp_path: Path) -> None:
    loc, lake = _lake(tmp_path)
    lake.publish_batch("S", pa.table({"subject": ["s.a", "s.b", "s.b"], "data": [b""] * 3}))
    planner = _planner(loc, filter_subject="s.a")
    end = planner.latest(Cursor(0), 10, None)
    assert end.to_offset() == {"seq": 3, "dseq": 1, "pending": 0}
    part = replace(planner.partitions(Cursor(0), end)[0])
    assert (part.lo, part.hi, part.expected) == (0, 1, 1)


@pytest.mark.parametrize("subjects", [["s.a"], ["s.a", "s.b", "s.c"]], ids=["files-in-order", "files-interleaved"])
def test_rows_leave_in_sequence_order_sliced_or_taken(tmp_path: Path, subjects: list[str]) -> None:
    """One subject: each commit's one file is already in sequence order and the output slices
    are cut from it without a copy (``rows_at``). Three subjects: files of one commit interleave
    and the rows are taken in order. Both with a filter that leaves holes, and both the same rows."""
    from jsspark.datasource import reading

    loc, lake = _lake(tmp_path)
    n = len(subjects) * 40
    for _ in range(2):
        lake.publish_batch("S", pa.table({"subject": subjects * (n // len(subjects)), "data": [b"%d" % i for i in range(n)]}))
    planner = _planner(loc)
    whole = planner.partitions(Cursor(0), None)
    _, idx = reading.load_rows(whole[0])
    in_order = bool(np.all(np.diff(idx) == 1))
    assert in_order == (len(subjects) == 1)
    got = [r for p in whole for b in read_partition(p) for r in b.to_pylist()]
    assert [r["seq"] for r in got] == list(range(1, 2 * n + 1))
    assert [r["delivery_seq"] for r in got] == list(range(1, 2 * n + 1))
    assert [r["data"] for r in got] == [b"%d" % i for i in range(n)] * 2
    # a filter: the delivered rows are a subsequence, still in order and numbered 1..k
    filtered = _planner(loc, filter_subject="s.a").partitions(Cursor(0), None)
    got = [r for p in filtered for b in read_partition(p) for r in b.to_pylist()]
    want = [s for s in range(1, 2 * n + 1) if subjects[(s - 1) % len(subjects)] == "s.a"]
    assert [r["seq"] for r in got] == want
    assert [r["delivery_seq"] for r in got] == list(range(1, len(want) + 1))
    assert [r["num_pending"] for r in got] == list(range(len(want) - 1, -1, -1))


def test_rows_at_slices_runs_and_takes_the_rest() -> None:
    from jsspark.datasource.reading import rows_at

    rows = pa.table({"seq": pa.array(range(10), pa.int64()), "data": pa.array([b"%d" % i for i in range(10)])})
    run = rows_at(rows, np.arange(3, 7))
    assert run.column("seq").to_pylist() == [3, 4, 5, 6]
    assert run.column("data").chunk(0).buffers()[2].address == rows.column("data").chunk(0).buffers()[2].address
    taken = rows_at(rows, np.array([7, 2, 3]))
    assert taken.column("seq").to_pylist() == [7, 2, 3] and taken.column("data").num_chunks == 1
    assert rows_at(rows, np.array([], np.int64)).num_rows == 0


def test_replayed_batch_reports_the_same_num_pending(tmp_path: Path) -> None:
    """Spark replays a batch from its logged offsets (a crash before the commit log): the same
    offsets must give the same rows, num_pending included, however many messages came since.
    The batch end carries the pending count from planning; an offset without it (an older
    checkpoint) still reads, counting at replay as before."""
    loc, lake = _lake(tmp_path)
    lake.publish_batch("S", pa.table({"subject": [f"s.{i % 3}" for i in range(1, 11)], "data": [b""] * 10}))

    def rows(planner: Planner, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[int, int, int]]:
        parts = planner.partitions(Cursor.from_offset(start), Cursor.from_offset(end))
        got = [r for p in parts for b in read_partition(p) for r in b.to_pylist()]
        return [(r["seq"], r["delivery_seq"], r["num_pending"]) for r in got]

    planner = _planner(loc, filter_subject="s.1")
    first = planner.initial().to_offset()
    second = planner.latest(Cursor.from_offset(first), 2, None).to_offset()  # s.1 at 1, 4, 7, 10
    assert second["pending"] == 2
    end = planner.latest(Cursor.from_offset(second), 2, None).to_offset()
    planned = rows(planner, second, end)
    assert planned == [(7, 3, 1), (10, 4, 0)]
    lake.publish_batch("S", pa.table({"subject": [f"s.{i % 3}" for i in range(11, 16)], "data": [b""] * 5}))
    replayed = rows(_planner(loc, filter_subject="s.1"), second, end)  # a new driver, the logged offsets
    assert replayed == planned
    assert rows(_planner(loc, filter_subject="s.1"), first, second) == [(1, 1, 3), (4, 2, 2)]
    old = {k: v for k, v in end.items() if k != "pending"}  # written before ends carried it
    assert rows(_planner(loc, filter_subject="s.1"), second, old) == [(7, 3, 2), (10, 4, 1)]


def test_rate_limit_bps_releases_as_the_server_delivers(tmp_path: Path, server: Any, run: Any) -> None:
    """Against nats-server 2.15's push consumer at 8000 bps (1000 bytes/s): 8 x 1 KB fit the
    1 MiB burst and arrive at once; with a 2000-byte max_msg_size the burst holds one message,
    the second waits for the rest of its size, the third for all of it (~1.05 s); headers_only
    charges the header block, not the payload, so all three fit."""
    import asyncio
    import json
    import time

    import nats

    async def server_times(name: str, n: int, max_msg_size: int, headers_only: bool) -> list[float]:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], max_msg_size=max_msg_size)
            for i in range(n):
                await js.publish(f"{name.lower()}.{i}", b"x" * 1000)
            times: list[float] = []
            done = asyncio.Event()

            async def got(_: Any) -> None:
                times.append(time.monotonic())
                if len(times) == n:
                    done.set()

            await nc.subscribe(f"deliver.{name}", cb=got)
            req = {"stream_name": name, "config": {"deliver_subject": f"deliver.{name}", "rate_limit_bps": 8000,
                                                   "ack_policy": "none", "headers_only": headers_only}}
            t0 = time.monotonic()
            await nc.request(f"$JS.API.CONSUMER.CREATE.{name}", json.dumps(req).encode(), timeout=5)
            await asyncio.wait_for(done.wait(), 30)
            return [t - t0 for t in times]
        finally:
            await nc.close()

    def lake_times(name: str, n: int, max_msg_size: int, headers_only: bool) -> list[float]:
        loc = str(tmp_path / name)
        lake = jsspark.connect(loc)
        lake.add_stream(name=name, subjects=[f"{name.lower()}.>"], max_msg_size=max_msg_size)
        lake.publish_batch(name, pa.table({"subject": [f"{name.lower()}.{i}" for i in range(n)],
                                           "data": [b"x" * 1000] * n}))
        planner = Planner(parse_read_options({"path": loc, "stream": name, "rate_limit_bps": "8000",
                                              "headers_only": str(headers_only).lower()}))
        parts = planner.partitions(Cursor(0), None)  # the consumer's start: its bucket is full from here
        t0, times = time.monotonic(), []
        for p in parts:
            for b in read_partition(p):  # the real clock: the pacing is what is compared
                times += [time.monotonic()] * b.num_rows
        return [t - t0 for t in times]

    cases = (("BURST", 8, -1, False, [0.0] * 8), ("OVER", 3, 2000, False, [0.0, 0.1, 1.15]),
             ("HDRS", 3, 2000, True, [0.0] * 3))
    for name, n, max_size, headers_only, expected in cases:
        srv = run(server_times(name, n, max_size, headers_only))
        ours = lake_times(name, n, max_size, headers_only)
        assert srv == pytest.approx(expected, abs=0.15), (name, srv)
        assert ours == pytest.approx(srv, abs=0.15), (name, ours, srv)


def test_a_restart_after_the_skip_lists_remaining_entries_went_skips_their_older_messages(tmp_path: Path) -> None:
    """A durable query restarted from its consumer after every skip-list entry it had not
    handed out was deleted: the list still stands up to its ``resume`` (the server's is fixed
    at creation), so the subjects' older messages stay undelivered, as the engine's consumer
    (``next_seqs``, checked against the server in ``test_consumers``) delivers."""
    loc, lake = _lake(tmp_path)
    lake.publish_batch("S", pa.table({"subject": ["s.a", "s.b", "s.c", "s.b", "s.c"], "data": [b""] * 5}))
    opts = {"durable_name": "D", "deliver_policy": "last_per_subject", "filter_subject": "s.*"}
    planner = _planner(loc, **opts)
    start = planner.initial(bind=True)
    cur, _ = planner.on_planning(start)
    end = planner.latest(cur, 1, None)
    assert [r["seq"] for p in planner.partitions(cur, end) for b in read_partition(p) for r in b.to_pylist()] == [1]
    planner.on_planning(Cursor.from_offset(end.to_offset()))  # the batch committed: acked
    lake.delete_msg("S", 4)
    lake.delete_msg("S", 5)  # the list's entries for s.b and s.c, not handed out
    lake.publish("s.d", b"")
    expected = lake.next_seqs("S", "D", 10)

    restarted = _planner(loc, **opts)
    cur, _ = restarted.on_planning(restarted.initial(bind=True))
    end = restarted.latest(cur, 10, None)
    seen = [r["seq"] for p in restarted.partitions(cur, end) for b in read_partition(p) for r in b.to_pylist()]
    assert expected == [6]
    assert seen == expected  # not 2 and 3, the older s.b and s.c
