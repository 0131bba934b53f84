"""The dedup window kept across publishes (``engine/dedup.py``) answers what rebuilding it for
every publish answered: ids this process accepted stay known for the window even after their
messages are removed; ids stored by another writer are known while stored; ids leave the window
with time, also when publish times go back."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import jsspark
from jsspark.engine import headers as H
from jsspark.engine.stream import Incoming, LakeStream

SEC = 1_000_000_000
T0 = 1_700_000_000 * SEC


def _pub(s: LakeStream, ids: list[str | None], now: int) -> list[tuple[int, bool]]:
    n = len(ids)
    batch = Incoming(
        pa.array([f"d.{i % 3}" for i in range(n)], pa.string()),
        pa.array([b"x"] * n, pa.binary()),
        H.to_arrow([[(H.MSG_ID, i)] if i else None for i in ids]),
    )
    ack = s.publish_batch(batch, now_ns=now)
    return list(zip(ack.seqs.tolist(), ack.duplicates.tolist(), strict=True))


def _stream(root: Path, **cfg: object) -> LakeStream:
    lake = jsspark.connect(str(root))
    lake.add_stream(name="D", subjects=["d.>"], duplicate_window=2.0, **cfg)
    return lake.stream("D")


def test_in_batch_and_window_duplicates(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    assert _pub(s, ["a", "b", "a", None, None], T0) == [(1, False), (2, False), (1, True), (3, False), (4, False)]
    assert _pub(s, ["b", "c"], T0 + SEC) == [(2, True), (5, False)]
    # 2 s after "a" and "b" were stored they are out of the window; "c" is not yet
    assert _pub(s, ["a", "c"], T0 + 2 * SEC + 1) == [(6, False), (5, True)]


def test_accepted_ids_outlive_their_messages_within_the_window(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    _pub(s, ["a", "b"], T0)
    s.purge()
    assert _pub(s, ["a", "x"], T0 + SEC) == [(1, True), (3, False)]
    # a new process knows only stored ids, as a restarted server does
    other = jsspark.connect(str(tmp_path)).stream("D")
    assert _pub(other, ["b", "x"], T0 + SEC) == [(4, False), (3, True)]


def test_ids_stored_by_another_writer(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    other = jsspark.connect(str(tmp_path)).stream("D")
    _pub(s, ["a"], T0)
    _pub(other, ["b"], T0)
    assert _pub(s, ["b", "a"], T0 + SEC) == [(2, True), (1, True)]
    # removed by this process: the other writer's id is no longer known here, its own still is
    s.purge()
    assert _pub(s, ["b", "a"], T0 + SEC) == [(3, False), (1, True)]


def test_publish_time_going_back_sees_stored_ids_again(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    _pub(s, ["a"], T0)
    assert _pub(s, ["z"], T0 + 3 * SEC) == [(2, False)]  # "a" left the window (and was dropped)
    # a publish stamped earlier again: "a" is stored at T0, within 2 s of T0 + 1 s
    assert _pub(s, ["a"], T0 + SEC) == [(1, True)]
