"""``Nats-Rollup: sub`` and a purge filtered on one literal subject find what they remove among
the messages on that subject, not by matching every stored subject: compared with a real
nats-server where those messages lie far back, among deleted ones, under limits, in a lake batch
and after the lake is opened again; and how much of a large stream each reads.

The server purges the rolling message's subject down to it (``processJetStreamMsgWithRollup`` →
``purgeLocked``). The lake's subject stats say how many messages the subject has, and they are
read back from the newest over growing windows until all are found
(``MessageIndex.positions_on``, ``TAIL_WINDOW`` rows first: 2 here, so a few dozen messages span
many windows). At a million messages on 10,000 subjects a rollup on a subject it had rolled up
before took 192 ms against 14 ms for a plain publish, planning 160 of them
(``python3 dev.py bench rollups``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jsspark.engine import headers as H
from jsspark.engine import index as index_module
from jsspark.engine import index_store, limits, rollups
from jsspark.engine import stream as stream_module
from jsspark.engine.lake import connect
from tests.engine.backends import LakeBackend, ServerBackend
from tests.engine.matching import count_matched
from tests.engine.test_consumer_removals import _settle
from tests.engine.test_differential import Pair, paired, subj

SUB = [("Nats-Rollup", "sub")]
ALL = [("Nats-Rollup", "all")]


@pytest.fixture
def pair(nats_server: Any, tmp_path: Any) -> Iterator[Pair]:
    yield from paired(ServerBackend(nats_server.url), LakeBackend(connect(tmp_path / "lake")))


def _history(pair: Pair, s: str) -> None:
    """``a`` early and then seldom, ``b`` and ``c`` often, one of ``a``'s deleted."""
    for i, t in enumerate(["a", "b", "a", "c", "a", *"bcbcbcbcbc", "a", *"bcbcbc"]):
        pair.publish(subj(s, t), f"{t}{i}".encode())
    assert pair.delete_msg(s, 3) == {"ok": True}


@pytest.mark.parametrize(
    "limits",
    [{}, {"max_msgs_per_subject": 4}, {"max_msgs_per_subject": 4, "discard": "new"}, {"max_msgs": 20},
     {"max_msgs_per_subject": 4, "max_msgs": 20}, {"max_bytes": 900}],
)
def test_rollups_purge_what_the_server_purges_however_far_back(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, limits: dict[str, Any]
) -> None:
    """One by one, with consumers on every subject and on ``a``: a rollup on ``a`` (its
    messages far back, one deleted), on ``a`` again (one message, the newest), on a subject
    never stored, on ``b``, then a lake batch of rollups and plain messages."""
    monkeypatch.setattr(index_module, "TAIL_WINDOW", 2, raising=False)
    s = pair.stream(allow_rollup_hdrs=True, **limits)
    pair.consumer_create(s, {"durable_name": "ALL", "ack_policy": "none"})
    pair.consumer_create(s, {"durable_name": "A", "ack_policy": "none", "filter_subject": subj(s, "a")})
    _history(pair, s)
    pair.fetch(s, "ALL", 6)
    pair.fetch(s, "A", 1)
    for t in ["a", "a", "n", "b"]:
        pair.publish(subj(s, t), f"roll {t}".encode(), headers=SUB)
        _settle(pair, s, "ALL", "A")
    rows = [("c", None), ("a", SUB), ("c", None), ("c", SUB), ("a", None), ("b", None), ("a", SUB)]
    for t, hdrs in rows:
        assert "error" not in pair.server.publish(subj(s, t), b"x", headers=hdrs)
    pair.lake.lake.publish_batch(s, pa.table({
        "subject": [subj(s, t) for t, _ in rows], "data": [b"x"] * len(rows), "headers": H.to_arrow([h for _, h in rows]),
    }))
    _settle(pair, s, "ALL", "A")


@pytest.mark.parametrize("snapshot", [False, True], ids=["rebuilt", "from_snapshot"])
def test_a_rollup_after_the_lake_is_opened_again(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, snapshot: bool
) -> None:
    """A new process's index (built from the table, or loaded from its snapshot and the files
    written since) finds the same messages to purge."""
    monkeypatch.setattr(index_module, "TAIL_WINDOW", 2, raising=False)
    if snapshot:
        monkeypatch.setattr(index_store, "SAVE_MIN_ROWS", 1)
    s = pair.stream(allow_rollup_hdrs=True, max_msgs_per_subject=6)
    _history(pair, s)
    pair.lake.lake = connect(tmp_path / "lake")
    pair.check(s)  # (loads the index: with a snapshot, saves one)
    pair.publish(subj(s, "c"), b"more")
    pair.lake.lake = connect(tmp_path / "lake")
    pair.publish(subj(s, "a"), b"roll a", headers=SUB)
    pair.check(s)
    pair.lake.lake = connect(tmp_path / "lake")
    pair.publish(subj(s, "b"), b"roll b", headers=SUB)
    pair.publish(subj(s, "a"), b"roll a again", headers=SUB)
    pair.check(s)
    pair.publish(subj(s, "c"), b"roll all", headers=ALL)
    pair.check(s)


class _Counting:
    """``pyarrow.compute`` for a module, recording the length of every array it hashes or
    matches subjects in (``is_in``, ``index_in``, ``dictionary_encode``)."""

    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    def __getattr__(self, name: str) -> Any:
        real = getattr(pc, name)
        if name not in ("is_in", "index_in", "dictionary_encode"):
            return real

        def counted(values: Any, *a: Any, **kw: Any) -> Any:
            self.seen.append(len(values))
            return real(values, *a, **kw)

        return counted


def _matched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What the publish path matches against the stored rows (``_Counting``): the stream, its
    index, rollups and limits (not the subject stats' lookup of the batch's names)."""
    seen: list[int] = []
    for module in (stream_module, index_module, rollups, limits):
        monkeypatch.setattr(module, "pc", _Counting(seen))
    return seen


@pytest.mark.parametrize("discard_new", [False, True], ids=["discard_old", "discard_new_per_subject_limit"])
def test_a_rollup_reads_the_newest_rows_not_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, discard_new: bool
) -> None:
    """20,000 messages on 20,000 subjects (a KV bucket's shape; with a per-subject limit under
    discard new, whose check reads what the touched subjects hold): a rollup on a subject whose
    one message is the newest, and on a subject never stored, match no more than the first
    window of the newest rows. Each matched every stored row (20,002 of them) twice."""
    n = 20_000
    lake = connect(tmp_path / "lake")
    cfg: dict[str, Any] = {"name": "L", "subjects": ["l.>"], "allow_rollup_hdrs": True}
    if discard_new:
        cfg.update(max_msgs_per_subject=5, discard="new")
    lake.add_stream(cfg)
    lake.publish_batch("L", pa.table({"subject": [f"l.k{i}" for i in range(n)],
                                      "data": pa.array([b"x"] * n, pa.binary())}))
    for i in range(4):
        lake.publish("l.again", b"%d" % i, headers=SUB)
    seen = _matched(monkeypatch)
    assert lake.publish("l.again", b"last", headers=SUB).seq == n + 5
    assert lake.publish("l.new", b"new", headers=SUB).seq == n + 6
    assert seen and max(seen) <= getattr(index_module, "TAIL_WINDOW", 4096)
    state = lake.stream_info("L").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (n + 2, 1, n + 6, 4)
    assert lake.get_msg("L", subject="l.again").data == b"last"


@pytest.mark.parametrize(
    "req",
    [{"filter": "a"}, {"filter": "a", "keep": 1}, {"filter": "a", "keep": 9}, {"filter": "a", "seq": 16},
     {"filter": "b", "seq": 9, "keep": 2}, {"filter": "n"}, {"filter": "*", "keep": 1}],
)
def test_a_purge_of_one_subject_purges_what_the_server_purges(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, req: dict[str, Any]
) -> None:
    """A purge filtered on a literal subject takes its messages the same way as a rollup."""
    monkeypatch.setattr(index_module, "TAIL_WINDOW", 2, raising=False)
    s = pair.stream()
    pair.consumer_create(s, {"durable_name": "ALL", "ack_policy": "none"})
    _history(pair, s)
    pair.fetch(s, "ALL", 6)
    req = {**req, "filter": subj(s, req["filter"])}
    server_req, lake_req = dict(req), {("subject" if k == "filter" else k): v for k, v in req.items()}
    assert pair.server.purge(s, **server_req) == pair.lake.purge(s, **lake_req)
    _settle(pair, s, "ALL")


def test_a_purge_of_a_recent_subject_reads_the_newest_rows_not_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 messages, then three on one subject: purging it matches no stored subject and
    looks up only its seqs. It matched all 20,003 subjects and sorted every seq (``np.isin``)."""
    n = 20_000
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="L", subjects=["l.>"])
    lake.publish_batch("L", pa.table({"subject": [f"l.k{i % 50}" for i in range(n)],
                                      "data": pa.array([b"x"] * n, pa.binary())}))
    for i in range(3):
        lake.publish("l.recent", b"%d" % i)
    seen = _matched(monkeypatch)
    filtered = count_matched(monkeypatch, stream_module)
    isin: list[int] = []
    real_isin = stream_module.np.isin

    def counted_isin(a: Any, *rest: Any, **kw: Any) -> Any:
        isin.append(len(a))
        return real_isin(a, *rest, **kw)

    monkeypatch.setattr(stream_module.np, "isin", counted_isin)
    assert lake.purge("L", subject="l.recent", keep=1) == 2
    assert filtered == [] and max(seen, default=0) <= getattr(index_module, "TAIL_WINDOW", 4096)
    assert max(isin, default=0) < n // 4
    state = lake.stream_info("L").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (n + 1, 1, n + 3, 2)
