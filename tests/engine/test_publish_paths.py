"""``publish_batch`` encodes a batch's subjects against the stream's known subjects in three
ways (a new stream; every known subject present, plus new ones; a subset of the known ones).
Each must store, ack and account exactly as publishing the same messages one at a time does,
with duplicates by msg id and a per-subject limit in play."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import jsspark
from jsspark.engine import arrays
from jsspark.engine.headers import HEADER_TYPE
from jsspark.engine.schema import value_lengths
from jsspark.engine.stream import Incoming


def _batch(subjects: list[str], ids: list[str | None]) -> pa.Table:
    headers = pa.array([None if i is None else [{"name": "Nats-Msg-Id", "value": i}] for i in ids], HEADER_TYPE)
    data = [b"%d" % k * (k % 7) for k in range(len(subjects))]
    return pa.table({"subject": subjects, "data": pa.array(data, pa.binary()), "headers": headers})


BATCHES = [
    # a new stream: 6 subjects, some msg ids, one repeated within the batch
    _batch([f"t.{k % 6}" for k in range(30)], [f"a{k}" if k % 3 else None for k in range(29)] + ["a1"]),
    # every known subject and 2 new ones, an id already stored
    _batch([f"t.{k % 8}" for k in range(40)], ["a2", *[None] * 39]),
    # a subset of the known subjects
    _batch([f"t.{k % 3}" for k in range(15)], [None] * 15),
]
KEPT = ["seq", "subject", "headers", "data", "msg_id", "size", "part"]


def _stream(root: Path) -> jsspark.engine.lake.Lake:
    lake = jsspark.connect(str(root))
    lake.add_stream(name="P", subjects=["t.>"], duplicate_window=120, max_msgs_per_subject=5)
    return lake


def test_batch_encodings_store_what_single_publishes_store(tmp_path: Path) -> None:
    batched, single = _stream(tmp_path / "batched"), _stream(tmp_path / "single")
    batch_acks, single_acks = [], []
    for b in BATCHES:
        ack = batched.stream("P").publish_batch(Incoming.from_table(b))
        batch_acks += zip(np.asarray(ack.seqs).tolist(), np.asarray(ack.duplicates).tolist(), strict=True)
        for row in b.to_pylist():
            headers = [(h["name"], h["value"]) for h in row["headers"] or []]
            a = single.publish(row["subject"], row["data"], headers=headers or None)
            single_acks.append((a.seq, bool(a.duplicate)))
    assert batch_acks == single_acks
    assert sum(d for _, d in batch_acks) == 2  # "a1" again in batch 1, "a2" again in batch 2

    stored = batched.stream("P").read().sort_by("seq")
    assert stored.select(KEPT).equals(single.stream("P").read().sort_by("seq").select(KEPT))
    state, expected = batched.stream_info("P").state, single.stream_info("P").state
    for field in ("messages", "bytes", "first_seq", "last_seq", "num_subjects", "num_deleted"):
        assert getattr(state, field) == getattr(expected, field), field
    assert state.num_subjects == 8 and state.messages == 8 * 5  # the newest 5 of each subject
    last = stored.group_by("subject").aggregate([("seq", "max")])
    for subject, seq in zip(last["subject"].to_pylist(), last["seq_max"].to_pylist(), strict=True):
        assert batched.get_msg("P", subject=subject).seq == seq


def test_batch_columns_are_read_by_name_or_fail_naming_the_column(tmp_path: Path) -> None:
    """A headers struct's fields are read by name (by position a value was stored as the name),
    and a column that cannot be a message's fails naming it rather than deep in the engine."""
    lake = _stream(tmp_path)
    swapped = pa.array([[{"value": "json", "name": "Content-Type"}], None],
                       pa.list_(pa.struct([("value", pa.string()), ("name", pa.string())])))
    lake.publish_batch("P", pa.table({"subject": ["t.a", "t.b"], "data": ["x", "y"], "headers": swapped}))
    stored = lake.stream("P").read().sort_by("seq")
    assert stored["headers"].to_pylist() == [[{"name": "Content-Type", "value": "json"}], None]
    assert stored["data"].to_pylist() == [b"x", b"y"]
    with pytest.raises(ValueError, match=r"column 'subject' is null in 1 of 2 rows"):
        lake.publish_batch("P", pa.table({"subject": ["t.a", None], "data": [b"x", b"y"]}))
    with pytest.raises(ValueError, match=r"column 'data' has type int64, which is not binary or string"):
        lake.publish_batch("P", pa.table({"subject": ["t.a"], "data": [3]}))
    with pytest.raises(ValueError, match=r"column 'headers' has type list<item: string>, which is not message headers"):
        lake.publish_batch("P", pa.table({"subject": ["t.a"], "headers": [["K: v"]]}))
    assert lake.stream_info("P").state.messages == 2


def test_a_data_column_over_2_gib_is_kept_in_its_chunks() -> None:
    """A binary array's offsets are int32, so a ``data`` column over 2 GiB cannot be one array:
    ``publish_batch`` of such a batch (a Spark micro-batch into a lake stream is one) failed with
    Arrow's ``offset overflow while concatenating arrays``. Its chunks are kept instead (30
    references to one 72 MiB chunk: 2.1 GiB of data in 72 MiB of memory)."""
    chunk = pa.array([b"z" * (8 << 20)] * 9, pa.binary())
    table = pa.table({"subject": pa.array(["t.a"] * 270), "data": pa.chunked_array([chunk] * 30)})
    data = arrays.data_column(table)
    assert isinstance(data, pa.ChunkedArray) and data.num_chunks == 30 and data.type == pa.binary()
    assert len(data) == 270 and int(value_lengths(data).sum()) == 270 * (8 << 20)


def test_a_batch_with_its_data_in_chunks_stores_what_one_chunk_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same batches, their data kept in chunks (the path of a column over 2 GiB, here for
    any size): the same rows, acks and duplicates as with one chunk, null and string data too."""
    def chunked(b: pa.Table) -> pa.Table:
        data = pa.array([None if i % 5 == 0 else x for i, x in enumerate(b["data"].to_pylist())], pa.binary())
        return pa.Table.from_batches(b.set_column(1, "data", data).to_batches(max_chunksize=7))

    whole, parts = _stream(tmp_path / "whole"), _stream(tmp_path / "parts")
    acks = [whole.publish_batch("P", chunked(b).combine_chunks()) for b in BATCHES]
    monkeypatch.setattr(arrays, "_INT32_MAX", 0)
    seen = []
    real = Incoming.from_table

    def kept(table: pa.Table) -> Incoming:
        seen.append(real(table).data.num_chunks)
        return real(table)

    monkeypatch.setattr(Incoming, "from_table", kept)
    got = [parts.publish_batch("P", chunked(b)) for b in BATCHES]
    assert seen == [5, 6, 3]
    assert [(list(a.seqs), list(a.duplicates)) for a in got] == [(list(a.seqs), list(a.duplicates)) for a in acks]
    stored = parts.stream("P").read().sort_by("seq").select(KEPT)
    assert stored.equals(whole.stream("P").read().sort_by("seq").select(KEPT))
    assert stored["data"].null_count == 0
