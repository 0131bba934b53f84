"""The catalog (streams, consumers, their state) stays as cheap to read after thousands of
changes as after a few: compacted, its log cleaned up, and a process's own writes kept
without a read; several writers still see each other's changes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jsspark.engine import catalog as catalog_module
from jsspark.engine.catalog import Catalog, Change


def _bodies(cat: Catalog) -> dict[tuple[str, str, str], dict]:
    return {k: r.body for k, r in cat.records().items()}


def test_many_changes_by_two_writers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "COMPACT_EVERY", 10)
    monkeypatch.setattr(catalog_module, "RETENTION", {"delta.logRetentionDuration": "interval 0 seconds",
                                                      "delta.deletedFileRetentionDuration": "interval 0 seconds"})
    monkeypatch.setattr(catalog_module, "VACUUM_AFTER_HOURS", 0)
    uri = str(tmp_path / "_catalog")
    writers = [Catalog(uri), Catalog(uri)]
    idle = Catalog(uri)
    idle.transact(lambda records: [Change("stream", "S", "", {"n": 0})])  # opened now, read again at the end
    model = {("stream", "S", ""): {"n": 0}}
    rng = random.Random(5)
    for step in range(95):
        cat = writers[step % 2]
        key = ("consumer", "S", f"c{rng.randrange(8)}")
        body = None if rng.random() < 0.2 else {"floor": step, "pending": list(range(step % 4))}

        def plan(records: dict, key: tuple = key, body: dict | None = body) -> list[Change]:
            return [Change(*key, body)]

        cat.transact(plan)
        if body is None:
            model.pop(key, None)
        else:
            model[key] = body
        assert _bodies(cat) == model  # its own write, kept without a read
        assert _bodies(writers[(step + 1) % 2]) == model  # the other writer's, read
    assert _bodies(Catalog(uri)) == model
    assert _bodies(idle) == model  # a handle from before the log it missed was cleaned up
    data_files = [p for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts]
    log_files = list((Path(uri) / "_delta_log").glob("*.json"))
    assert len(data_files) <= 11, len(data_files)  # compacted every 10 revisions, the rest vacuumed
    assert len(log_files) <= 25, len(log_files)  # cleaned up at each compaction


def test_a_writer_knows_the_revision_of_its_own_change_without_reading_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every change (a consumer's delivery, an ack) looked the catalog's revision up with
    ``DeltaTable.transaction_version``, which reads every log entry since the newest checkpoint: on
    an object store a GET each, so a delivery and an ack on S3 made 11 GETs after a checkpoint and
    ~200 before the next. A writer now takes the revision of a change it made itself from that
    change; another writer's is read from the log as before."""
    from tests.engine.log_reads import count_txn_lookups

    uri = str(tmp_path / "cat")
    cat, other = Catalog(uri), Catalog(uri)
    cat.transact(lambda records: [Change("k", "s", "n", {"v": 0})])
    looked = count_txn_lookups(monkeypatch)
    for v in range(1, 6):
        cat.transact(lambda records, v=v: [Change("k", "s", "n", {"v": v})])
    assert looked.count(catalog_module.CATALOG_APP_ID) == 0
    other.transact(lambda records: [Change("k", "s", "other", {"v": 0})])
    looked.clear()
    cat.transact(lambda records: [Change("k", "s", "n", {"v": 6})])  # on another writer's change
    assert looked.count(catalog_module.CATALOG_APP_ID) == 1
    revs = {k: r.rev for k, r in Catalog(uri).records().items()}
    assert revs == {("k", "s", "n"): 8, ("k", "s", "other"): 7}
