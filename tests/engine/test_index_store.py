"""A persisted index snapshot plus the data files since gives exactly the index a full read
gives: after appends by another writer, removals (purge, delete, limits), compaction; and a
snapshot that cannot be used (its removed files vacuumed, the file damaged) is not used."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import jsspark
from jsspark.engine import headers as H
from jsspark.engine import index_store
from jsspark.engine.expiry import Expiries
from jsspark.engine.index import MessageIndex
from jsspark.engine.schema import INDEX_COLUMNS
from jsspark.engine.stream import Incoming, LakeStream


@pytest.fixture(autouse=True)
def _small_streams_are_saved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_store, "SAVE_MIN_ROWS", 0)


def _batch(start: int, n: int) -> pa.Table:
    return pa.table({
        "subject": [f"s.{(start + i) * 7 % 13}" for i in range(n)],
        "data": [b"x" * ((start + i) % 5) for i in range(n)],
    })


def _fresh(root: Path) -> LakeStream:
    return jsspark.connect(str(root)).stream("S")


def _check(root: Path) -> MessageIndex:
    """A new process's index (from the newest snapshot) equals a full read of the table."""
    s = _fresh(root)
    snap = s.table.snapshot()
    loaded = s._store.load(snap)
    assert loaded is not None, "the snapshot was not used"
    full = MessageIndex(s.table.read(snap, columns=INDEX_COLUMNS), snap.version)
    assert loaded.version == full.version
    assert loaded.rows.to_pydict() == full.rows.to_pydict()
    assert loaded.subject_stats().sort_by("subject").equals(full.subject_stats().sort_by("subject"))
    assert loaded.bytes == full.bytes
    return loaded


def _snapshots(root: Path) -> list[str]:
    d = root / "streams" / "S" / index_store.INDEX_DIR
    return sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.exists() else []


def test_snapshot_then_appends_and_removals(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"])
    for b in range(3):
        lake.publish_batch("S", _batch(b * 50, 50))
    _fresh(tmp_path).index()  # a load that read much saves a snapshot
    assert {"index-00000000000000000003.arrow", "subjects-00000000000000000003.arrow"} <= set(_snapshots(tmp_path))

    other = jsspark.connect(str(tmp_path))  # another writer appends
    other.publish_batch("S", _batch(150, 40))
    other.publish_batch("S", _batch(190, 40))
    _check(tmp_path)

    other.purge_stream("S", subject="s.3")  # rewrites files: removals
    other.delete_msg("S", 8)
    _check(tmp_path)
    other.purge_stream("S", seq=60)
    _check(tmp_path)


def test_snapshot_across_limits_and_compaction(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"], max_msgs_per_subject=6, max_msgs=200)
    lake.publish_batch("S", _batch(0, 120))
    _fresh(tmp_path).index()
    for b in range(1, 5):
        lake.publish_batch("S", _batch(b * 120, 120))
        _check(tmp_path)
    lake.compact("S")  # every file replaced; compaction saves a snapshot of the new layout
    assert _check(tmp_path).version == lake.stream("S").table.snapshot().version
    lake.publish_batch("S", _batch(900, 30))
    _check(tmp_path)


def test_unusable_snapshots_are_not_used(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"])
    lake.publish_batch("S", _batch(0, 100))
    _fresh(tmp_path).index()
    lake.purge_stream("S", subject="s.1")
    lake.vacuum("S", retention_hours=0)  # the files the snapshot knew are gone
    s = _fresh(tmp_path)
    assert s._store.load(s.table.snapshot()) is None
    assert s.index().msgs == lake.stream_info("S").state.messages  # rebuilt, and saved again

    for name in _snapshots(tmp_path):
        (tmp_path / "streams" / "S" / index_store.INDEX_DIR / name).write_bytes(b"not arrow")
    s = _fresh(tmp_path)
    assert s._store.load(s.table.snapshot()) is None
    assert s.index().msgs == lake.stream_info("S").state.messages


def test_spark_readers_and_vacuum_leave_the_snapshot_directory_alone(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"])
    lake.publish_batch("S", _batch(0, 100))
    _fresh(tmp_path).index()
    before = _snapshots(tmp_path)
    lake.vacuum("S", retention_hours=0)
    assert _snapshots(tmp_path) == before
    assert lake.stream("S").read().num_rows == 100


def test_snapshot_on_an_object_store(s3: dict[str, str]) -> None:
    lake = jsspark.connect("s3://lake/idx", storage_options=s3)
    lake.add_stream(name="S", subjects=["s.>"])
    lake.publish_batch("S", _batch(0, 80))
    jsspark.connect("s3://lake/idx", storage_options=s3).stream("S").index()
    lake.publish_batch("S", _batch(80, 80))
    lake.purge_stream("S", subject="s.2")
    s = jsspark.connect("s3://lake/idx", storage_options=s3).stream("S")
    snap = s.table.snapshot()
    loaded = s._store.load(snap)
    assert loaded is not None
    full = MessageIndex(s.table.read(snap, columns=INDEX_COLUMNS), snap.version)
    assert loaded.rows.to_pydict() == full.rows.to_pydict()


def test_replaced_keys_keep_the_snapshots_subject_stats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A KV-shaped stream whose puts replace a key's message rewrite the file that held it: the
    rows of such a file are moved, not removed, and the snapshot's subject stats are carried
    over by the difference (not rebuilt from every row) and answer as a full read's do."""
    monkeypatch.setattr(index_store, "REPLAY_SAVE_FRACTION", float("inf"))  # every load replays from the first
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"], max_msgs_per_subject=2)
    keys = [f"s.k{i}" for i in range(300)]
    lake.publish_batch("S", pa.table({"subject": keys + keys[:100], "data": [b"v1"] * 400}))
    first = _fresh(tmp_path)
    snapshot_version = first.table.snapshot().version
    assert first._store.save(first.index(), first.table.snapshot())

    other = jsspark.connect(str(tmp_path))
    for i in (5, 150, 299):
        other.publish(f"s.k{i}", b"v2")  # one more on a key: s.k5 drops its oldest, the others keep two
    other.publish("s.new", b"n")  # a subject new since the snapshot
    last_of_k7 = other.stream("S").index().last_seq_of("s.k7")
    other.delete_msg("S", last_of_k7)  # s.k7 keeps its older message, whose seq is now its last
    other.delete_msg("S", other.stream("S").index().last_seq_of("s.k200"))  # s.k200 empties
    other.purge_stream("S", subject="s.k9")

    s = _fresh(tmp_path)
    loaded = s._store.load(s.table.snapshot())
    assert loaded is not None and loaded._subjects is not None, "the snapshot's stats were not carried"
    assert max(int(n.split("-")[1].split(".")[0]) for n in _snapshots(tmp_path)) == snapshot_version
    _check(tmp_path)
    assert loaded.last_seq_of("s.k7") == 8 and loaded.last_seq_of("s.k200") == 0
    assert loaded.num_subjects == 300 - 2 + 1

    # without the stats file the rows are the same and the stats are rebuilt when asked
    (tmp_path / "streams" / "S" / index_store.INDEX_DIR / f"subjects-{snapshot_version:020d}.arrow").unlink()
    s = _fresh(tmp_path)
    assert s._store.load(s.table.snapshot())._subjects is None
    _check(tmp_path)


def _ttl_batch(start: int, n: int) -> pa.Table:
    """Messages on 13 subjects, every third with a TTL (1 h, 2 h or ``never``)."""
    ttls = ["1h", "2h", "never"]
    return pa.table({
        "subject": [f"s.{(start + i) * 7 % 13}" for i in range(n)],
        "data": [b"x"] * n,
        "headers": H.to_arrow([[(H.TTL, ttls[(start + i) // 3 % 3])] if (start + i) % 3 == 0 else None
                               for i in range(n)]),
    })


def _check_expiries(root: Path) -> Expiries:
    """A new process's TTL expiries (from the newest snapshot of them) equal a full read's."""
    s = _fresh(root)
    snap, index = s._load()
    loaded = s._store.load_expiries(snap, index.msgs)
    assert loaded is not None, "the expiries snapshot was not used"
    full = Expiries.of(s.table.read(snap, columns=index_store.EXPIRY_COLUMNS), snap.version)
    assert loaded.version == full.version == snap.version
    assert loaded.seqs.tolist() == full.seqs.tolist() and loaded.expires.tolist() == full.expires.tolist()
    assert len(full.seqs)
    return loaded


def test_ttl_expiries_snapshot_then_appends_removals_and_compaction(tmp_path: Path) -> None:
    """A stream with TTLs keeps its messages' expiries beside the index: a new process reads
    the headers of the files added since the snapshot only, and gets what a full read gives
    after another writer's appends, a delete, a purge, a limit and a compaction."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"], allow_msg_ttl=True, max_msgs=400)
    for b in range(3):
        lake.publish_batch("S", _ttl_batch(b * 60, 60))
    first = _fresh(tmp_path)
    first.publish_batch(Incoming.from_table(_ttl_batch(180, 1)))  # a publish reads every header once, and saves them
    assert any(n.startswith("expiries-") for n in _snapshots(tmp_path))

    other = jsspark.connect(str(tmp_path))  # another writer appends and removes
    other.publish_batch("S", _ttl_batch(181, 50))
    _check_expiries(tmp_path)
    other.delete_msg("S", 3)  # one with a TTL
    other.purge_stream("S", subject="s.4")
    _check_expiries(tmp_path)
    other.publish_batch("S", _ttl_batch(231, 200))  # max_msgs removes the oldest
    _check_expiries(tmp_path)
    other.compact("S")  # every file replaced: the messages moved, none removed
    assert _check_expiries(tmp_path).version == other.stream("S").table.snapshot().version


def test_a_new_process_expires_messages_without_reading_old_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a snapshot of the expiries, a new process's publishes and expiries never read the
    headers of the messages stored before it: they expire at their own time all the same."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"], allow_msg_ttl=True)
    lake.publish_batch("S", _ttl_batch(0, 90))
    assert _fresh(tmp_path).save_index()  # a job's shutdown: the index and the expiries
    stored = lake.stream("S").read(columns=["seq", "ts_ns", "headers"])

    def never(*_: object) -> Expiries:
        raise AssertionError("read every message's headers")

    monkeypatch.setattr(Expiries, "of", classmethod(never))
    s = _fresh(tmp_path)
    s.publish_batch(Incoming.from_table(_ttl_batch(90, 9)))
    last_ts = max(stored["ts_ns"].to_pylist())
    removed = s.enforce_limits(now_ns=last_ts + 3600 * 10**9 + 1)  # the 1 h TTLs are due
    with_1h = [r["seq"] for r in stored.to_pylist() if H.get(H.from_arrow(r["headers"]), H.TTL) == "1h"]
    assert removed >= len(with_1h) > 0
    left = set(s.read(columns=["seq"])["seq"].to_pylist())
    assert not left & set(with_1h)
    assert {r["seq"] for r in stored.to_pylist()} - set(with_1h) <= left


def test_unusable_expiry_snapshots_are_not_used(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"], allow_msg_ttl=True)
    lake.publish_batch("S", _ttl_batch(0, 90))
    assert _fresh(tmp_path).save_index()
    lake.purge_stream("S", subject="s.1")
    lake.vacuum("S", retention_hours=0)  # the files the snapshot knew are gone
    s = _fresh(tmp_path)
    snap, index = s._load()
    assert s._store.load_expiries(snap, index.msgs) is None
    s.publish_batch(Incoming.from_table(_ttl_batch(90, 3)))  # read from the headers, and saved again
    _check_expiries(tmp_path)

    for name in _snapshots(tmp_path):
        if name.startswith("expiries-"):
            (tmp_path / "streams" / "S" / index_store.INDEX_DIR / name).write_bytes(b"not arrow")
    s = _fresh(tmp_path)
    snap, index = s._load()
    assert s._store.load_expiries(snap, index.msgs) is None
    s.publish_batch(Incoming.from_table(_ttl_batch(93, 3)))
    _check_expiries(tmp_path)
