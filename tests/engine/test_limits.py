"""What a publish at a stream's limits removes (on a real nats-server and on a lake, compared
step by step), and how much of the stream the lake reads to find it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from jsspark.engine import index as index_module
from jsspark.engine import limits
from jsspark.engine import stream as stream_module
from jsspark.engine.lake import connect
from jsspark.engine.limits import HEAD_WINDOW
from jsspark.engine.stream import Incoming
from jsspark.errors import MessageNotFoundError
from tests.engine.backends import LakeBackend, ServerBackend
from tests.engine.test_differential import Pair, paired, subj


@pytest.fixture
def pair(nats_server: Any, tmp_path: Any) -> Iterator[Pair]:
    yield from paired(ServerBackend(nats_server.url), LakeBackend(connect(tmp_path / "lake")))


def rows_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many rows of the stream the limits read on each publish: the rows a whole
    ``removal_mask`` is given, or the most ``oldest_removals`` takes from the head."""
    read: list[int] = []
    whole, from_head = stream_module.removal_mask, getattr(stream_module, "oldest_removals", None)

    def mask(rows: pa.Table, **kw: Any) -> Any:
        read.append(rows.num_rows)
        return whole(rows, **kw)

    def oldest(head: Callable[[int], pa.Table], *a: Any, **kw: Any) -> Any:
        most = [0]

        def counted(k: int) -> pa.Table:
            most[0] = max(most[0], k)
            return head(k)

        try:
            return from_head(counted, *a, **kw)  # type: ignore[misc]
        finally:
            read.append(most[0])

    monkeypatch.setattr(stream_module, "removal_mask", mask)
    if from_head is not None:
        monkeypatch.setattr(stream_module, "oldest_removals", oldest)
    return read


LIMITS = [
    {"max_msgs": 20},
    {"max_bytes": 1000},
    {"max_msgs_per_subject": 6},
    {"max_msgs_per_subject": 7, "max_msgs": 20},
    {"max_msgs_per_subject": 6, "max_bytes": 900},
    {"max_msgs_per_subject": 6, "max_msgs": 20, "discard": "new"},
]


@pytest.mark.parametrize("limit", LIMITS)
def test_publishes_at_a_limit_remove_what_the_server_removes(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, limit: dict[str, Any]
) -> None:
    """Messages of every size; a subject seen twice at the start and then seldom, ten seen
    once, then four often: with windows of 4 rows from the head, what goes is found however
    far from the head it is."""
    monkeypatch.setattr(limits, "HEAD_WINDOW", 4, raising=False)
    read = rows_read(monkeypatch)
    s = pair.stream(**limit)
    for t in ["r", "r", *(f"f{i}" for i in range(10))]:
        pair.publish(subj(s, t), b"once")
    for i in range(60):
        pair.publish(subj(s, "abcd"[i % 4] if i % 7 else "r"), b"x" * (3 + (i * 11) % 17))
        pair.state(s)
    pair.check(s)
    assert max(read[12:]) < pair.lake.state(s)["messages"]  # past the first 12, never the whole stream


@pytest.mark.parametrize(
    "limit",
    [
        {"max_msgs": 20_000},
        {"max_bytes": 20_000 * 54},
        {"max_msgs_per_subject": 400},
        {"max_msgs_per_subject": 400, "max_msgs": 20_000},
    ],
)
def test_a_publish_at_a_limit_reads_the_head_not_the_stream(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, limit: dict[str, Any]
) -> None:
    """20,000 messages on 50 subjects (54 bytes each), at the limit: each publish removes the
    oldest message, and reads a few rows from the head to find it (it read all 20,000: 70-138 ms
    a publish at 3 million)."""
    n = 20_000
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="L", subjects=["l.>"])
    lake.publish_batch(
        "L",
        pa.table(
            {"subject": [f"l.{i % 50:02d}" for i in range(n)], "data": pa.array([b"x" * 20] * n, pa.binary())}
        ),
    )
    assert lake.stream_info("L").state.bytes == n * 54
    lake.update_stream(name="L", subjects=["l.>"], **limit)
    read = rows_read(monkeypatch)
    for i in range(5):
        lake.publish(f"l.{i:02d}", b"y" * 20)
    state = lake.stream_info("L").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (n, 6, n + 5, 0)
    assert len(read) == 5 and max(read) <= n // 4


@pytest.mark.parametrize(
    "limit",
    [{"max_msgs_per_subject": 1}, {"max_msgs_per_subject": 2, "discard": "new"},
     {"max_msgs_per_subject": 3, "max_msgs": 100, "discard": "new"}],
)
def test_a_subject_written_again_and_again_loses_what_the_server_removes(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, limit: dict[str, Any]
) -> None:
    """A hot subject among others written now and then: at its per-subject limit its messages
    are all among the newest rows, looked at first (``TAIL_WINDOW``, 4 here); another subject's,
    last written long ago, are found from the head. One by one and in a lake batch."""
    monkeypatch.setattr(index_module, "TAIL_WINDOW", 4, raising=False)
    monkeypatch.setattr(limits, "HEAD_WINDOW", 4, raising=False)
    s = pair.stream(**limit)
    for i in range(40):
        pair.publish(subj(s, "hot" if i % 3 else f"k{i % 7}"), b"x" * (i % 5))
        if i % 5 == 0:
            pair.state(s)
    pair.check(s)
    rows = ["hot", "k1", "hot", "hot", "k9", "hot", "k1"]
    for t in rows:
        assert "error" not in pair.server.publish(subj(s, t), b"b")
    pair.lake.lake.publish_batch(s, pa.table({"subject": [subj(s, t) for t in rows], "data": [b"b"] * len(rows)}))
    pair.check(s)


def test_a_key_written_again_and_again_reads_the_newest_rows_not_the_stream(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 keys of a bucket (one message per subject), then one key put again and again:
    each put replaces the key's newest message, found among the newest rows (no row read from
    the head). It read every row from the head (20,001) to reach it: 15 ms of a 42 ms put at
    a million keys, 27 ms now (/tmp/h7_rollup/hot.py)."""
    n = 20_000
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="KV", subjects=["k.>"], max_msgs_per_subject=1, discard="new")
    lake.publish_batch("KV", pa.table({"subject": [f"k.{i}" for i in range(n)], "data": pa.array([b"x"] * n, pa.binary())}))
    lake.publish("k.hot", b"0")
    read = rows_read(monkeypatch)
    for i in range(1, 4):
        lake.publish("k.hot", b"%d" % i)
    assert read == []
    state = lake.stream_info("KV").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (n + 1, 1, n + 4, 3)
    assert lake.get_msg("KV", subject="k.hot").data == b"3"


def test_max_age_reads_the_head_while_ages_follow_seqs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_age``: while the stored times never decrease with the seqs (a publisher's), the
    aged messages are the oldest, and a publish reads from the head until the first that is
    not (it read every stored time: 22 ms of a 31 ms publish at 3 million, nothing expiring).
    A message stored with an earlier time than the last (a mirror keeps its origin's) makes
    every time be read again, and the aged ones go wherever they are."""
    n, s = 10_000, 1_000_000_000
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="A", subjects=["a.>"], max_age=20.0)
    engine = lake.stream("A")
    t0 = time.time_ns()

    def publish(k: int, at: int) -> None:
        batch = pa.table(
            {"subject": [f"a.{i % 50}" for i in range(k)], "data": pa.array([b"x"] * k, pa.binary())}
        )
        engine.publish_batch(Incoming.from_table(batch), now_ns=at)

    publish(n, t0)
    publish(n, t0 + 10 * s)
    read = rows_read(monkeypatch)
    publish(1, t0 + 15 * s)  # nothing aged: the first row read is not
    publish(1, t0 + 25 * s)  # the first 10,000 aged
    state = lake.stream_info("A").state
    assert (state.messages, state.first_seq) == (n + 2, n + 1)
    assert read == [HEAD_WINDOW, 4 * HEAD_WINDOW]  # (of 20,001 and 20,002)
    publish(1, t0 + 5 * s)  # out of order: from now on every stored time is read
    publish(1, t0 + 31 * s)  # the second 10,000 aged, and the one at t0 + 5 s after them
    state = lake.stream_info("A").state
    assert (state.messages, state.first_seq, state.last_seq) == (3, 2 * n + 1, 2 * n + 4)
    assert read[2:] == [n + 3, n + 4]


@pytest.mark.parametrize("limit", [{"max_msgs": 3}, {"max_msgs_per_subject": 3}], ids=["max_msgs", "per_subject"])
def test_a_due_ttl_message_counts_toward_no_limit(pair: Pair, limit: dict[str, int]) -> None:
    """The newest of three messages has a TTL that is due when the fourth is published: the
    server's timer removed it before, so the stream is within its limit and keeps the oldest.
    The lake expired it in the same step as the limits, counting it, and removed seq 1 too."""
    s = pair.stream(allow_msg_ttl=True, **limit)
    for data, headers in ((b"1", None), (b"2", None), (b"3", [("Nats-TTL", "1s")])):
        pair.publish(subj(s, "a"), data, headers)
    deadline = time.monotonic() + 10
    while [m[0] for m in pair.server.messages(s)] != [1, 2]:
        assert time.monotonic() < deadline, "the server's TTL timer to remove seq 3"
        time.sleep(0.05)  # polling the server's expiry, bounded by the deadline
    pair.publish(subj(s, "a"), b"4")
    assert [m[0] for m in pair.server.messages(s)] == [m[0] for m in pair.lake.messages(s)] == [1, 2, 4]
    pair.check(s)


def test_a_due_ttl_alone_is_found_among_the_ttl_seqs_not_every_row(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish on a stream whose only removals are TTLs, expiring a due one: that message
    goes by itself, so it is found among the few seqs with a TTL (``Expiries``) and no stored
    row is read. It ran ``removal_mask`` over every stored row after building every row's
    expiry (49-125 ms of a 165-340 ms publish at a million messages, 15 ms now;
    /tmp/h6_left/cost_ttl2.py). With limits the general path reads them, as before."""
    n, s = 10_000, 1_000_000_000
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
    engine = lake.stream("T")
    engine.publish_batch(Incoming.from_table(pa.table({"subject": [f"t.{i % 50}" for i in range(n - 1)],
                                                       "data": pa.array([b"x"] * (n - 1), pa.binary())})))
    ttl = lake.publish("t.ttl", b"x", headers={"Nats-TTL": "1s"}).seq
    read = rows_read(monkeypatch)
    engine.publish_batch(Incoming.one("t.late", b"y", {"Nats-TTL": "1h"}), now_ns=time.time_ns() + 2 * s)
    assert read == []  # was [10,001]: every stored row
    with pytest.raises(MessageNotFoundError):
        lake.get_msg("T", seq=ttl)
    state = lake.stream_info("T").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (n, 1, n + 1, 1)
    assert lake.get_msg("T", seq=n + 1).subject == "t.late"  # its own TTL is not due


@pytest.mark.parametrize(
    ("limit", "ttl"),
    [
        ({"max_msgs": 3, "allow_msg_ttl": True}, "1s"),
        ({"max_msgs_per_subject": 3, "discard_new_per_subject": True, "allow_msg_ttl": True}, "1s"),
        ({"max_msgs": 3, "max_age": 1_000_000_000}, None),
    ],
    ids=["ttl_max_msgs", "ttl_per_subject", "max_age"],
)
def test_a_full_discard_new_stream_has_room_once_what_it_holds_expired(
    pair: Pair, limit: dict[str, Any], ttl: str | None
) -> None:
    """A discard-new stream at its limit whose newest message's TTL (or every message's
    ``max_age``) has passed: the server's timer removed it, so the next publish is taken. The
    lake refused it (10077 ``maximum messages exceeded`` / ``... per subject exceeded``) and
    kept the expired message, as nothing expired before the refusal."""
    s = pair.stream(discard="new", **limit)
    for data in (b"1", b"2", b"3"):
        pair.publish(subj(s, "a"), data, [("Nats-TTL", ttl)] if ttl and data == b"3" else None)
    left = [1, 2] if ttl else []
    deadline = time.monotonic() + 10
    while [m[0] for m in pair.server.messages(s)] != left:
        assert time.monotonic() < deadline, "the server's timer to remove what expired"
        time.sleep(0.05)  # polling the server's expiry, bounded by the deadline
    assert pair.publish(subj(s, "a"), b"4") == {"stream": s, "seq": 4}
    assert [m[0] for m in pair.lake.messages(s)] == [*left, 4]
    pair.check(s)
