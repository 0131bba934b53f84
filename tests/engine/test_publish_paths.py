"""A large ``publish_batch`` looks its subjects up on a second thread while it builds the other
columns (``stream.OVERLAP_ROWS``); it must store, answer and account exactly as the direct path.
Batches cover the subject encodings: a new stream, every known subject plus new ones, a subset
of the known ones; with duplicates by msg id and a per-subject limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import jsspark
from jsspark.engine import stream as stream_mod
from jsspark.engine.headers import HEADER_TYPE
from jsspark.engine.stream import Incoming, NoRespondersError

NOW = 1_700_000_000_123_456_789


def _batch(subjects: list[str], ids: list[str | None]) -> pa.Table:
    headers = pa.array([None if i is None else [{"name": "Nats-Msg-Id", "value": i}] for i in ids], HEADER_TYPE)
    data = [b"%d" % k * (k % 7) for k in range(len(subjects))]
    return pa.table({"subject": subjects, "data": pa.array(data, pa.binary()), "headers": headers})


BATCHES = [
    # a new stream: 40 subjects, some msg ids, one repeated within the batch
    _batch([f"t.{k % 40}" for k in range(300)], [f"a{k}" if k % 3 else None for k in range(299)] + ["a1"]),
    # every known subject and 10 new ones, an id already stored
    _batch([f"t.{k % 50}" for k in range(500)], ["a2", *[None] * 499]),
    # a subset of the known subjects
    _batch([f"t.{k % 7}" for k in range(200)], [None] * 200),
]


def _publish_all(root: Path, overlap_rows: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list, object, pa.Table]:
    monkeypatch.setattr(stream_mod, "OVERLAP_ROWS", overlap_rows)
    lake = jsspark.connect(str(root))
    lake.add_stream(name="P", subjects=["t.>"], duplicate_window=120, max_msgs_per_subject=12)
    acks = []
    for k, b in enumerate(BATCHES):
        ack = lake.stream("P").publish_batch(Incoming.from_table(b), now_ns=NOW + k)
        acks.append((np.asarray(ack.seqs).tolist(), np.asarray(ack.duplicates).tolist(), ack.stored))
    with pytest.raises(NoRespondersError, match=r"u\.x"):  # nothing stored, on either path
        lake.stream("P").publish_batch(Incoming.from_table(_batch(["t.1", "u.x"], [None, None])), now_ns=NOW + 9)
    return acks, lake.stream_info("P").state, lake.stream("P").read().sort_by("seq")


def test_overlapped_publish_stores_what_the_direct_path_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threaded = _publish_all(tmp_path / "threaded", 1, monkeypatch)
    direct = _publish_all(tmp_path / "direct", 10**9, monkeypatch)
    assert threaded[0] == direct[0]
    assert threaded[1] == direct[1]
    assert threaded[2].equals(direct[2])

    acks, state, rows = threaded
    assert acks[0][1].count(True) == 1 and acks[0][2] == 299  # the repeated id
    assert acks[1][1][0] is True and acks[1][0][0] == acks[0][0][2]  # "a2" answers its first seq
    assert state.num_subjects == 50 and state.last_seq == 299 + 499 + 200
    assert state.messages == rows.num_rows == 40 * 12 + 10 * 10  # the newest 12 per subject (t.40-49 have 10)
    last = rows.group_by("subject").aggregate([("seq", "max")])
    lake = jsspark.connect(str(tmp_path / "threaded"))
    for subject, seq in zip(last["subject"].to_pylist()[:10], last["seq_max"].to_pylist()[:10], strict=True):
        assert lake.get_msg("P", subject=subject).seq == seq
