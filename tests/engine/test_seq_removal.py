"""Removals of many scattered messages: a bounded Delta predicate, the messages it matches but
keeps written again unchanged.

A purge of one of two interleaved subjects, or a batch replacing thousands of keys, removes
messages that are not next to each other (the kept ones are picked by the smaller set: in the
first by the kept seqs, in the second by the removed ones within the ranges). One seq range per run made a predicate of tens of
thousands of ranges: minutes of delta-rs time, and at about 30,000 its parser overflowed the
stack and the process died (exit 139).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import jsspark
from jsspark.engine import limits, table
from jsspark.engine.index import MessageIndex
from jsspark.engine.limits import seq_removal
from jsspark.engine.schema import INDEX_COLUMNS

_TERM = re.compile(r"seq = (\d+)|\(seq >= (\d+) AND seq <= (\d+)\)")


def _matched(predicate: str, all_seqs: np.ndarray) -> tuple[np.ndarray, int]:
    """The seqs of ``all_seqs`` the predicate matches, and how many ranges it names."""
    hit = np.zeros(len(all_seqs), dtype=bool)
    terms = predicate.split(" OR ")
    for term in terms:
        m = _TERM.fullmatch(term)
        assert m, term
        lo, hi = (int(m[1]), int(m[1])) if m[1] else (int(m[2]), int(m[3]))
        hit |= (all_seqs >= lo) & (all_seqs <= hi)
    return all_seqs[hit], len(terms)


@pytest.mark.parametrize("max_ranges", [1, 2, 5, 32])
def test_seq_removal_matches_the_removed_and_keeps_the_fewest(max_ranges: int) -> None:
    rng = random.Random(max_ranges)
    for _ in range(200):
        all_seqs = np.array(sorted(rng.sample(range(1, 2000), rng.randrange(1, 300))), dtype=np.int64)
        removed = np.array(sorted(rng.sample(all_seqs.tolist(), rng.randrange(1, len(all_seqs) + 1))), np.int64)
        r = seq_removal(all_seqs, removed, max_ranges)
        assert r is not None
        matched, n_ranges = _matched(r.predicate, all_seqs)
        assert n_ranges <= max_ranges and len(r.ranges[0]) == n_ranges
        assert np.array_equal(r.removed, removed)
        assert np.array_equal(np.setdiff1d(matched, r.kept), removed)
        assert np.isin(r.kept, matched).all() and not np.isin(r.kept, removed).any()
        # the fewest kept: the live messages of all but the max_ranges - 1 widest gaps between runs
        pos = np.searchsorted(all_seqs, removed)
        runs = np.flatnonzero(np.diff(pos) != 1)
        gaps = sorted((pos[runs + 1] - pos[runs] - 1).tolist())
        assert len(r.kept) == sum(gaps[: max(len(gaps) - (max_ranges - 1), 0)])
    assert seq_removal(np.arange(5), np.zeros(0, np.int64)) is None


def _check_against_full_read(root: Path, name: str) -> None:
    s = jsspark.connect(str(root)).stream(name)
    snap = s.table.snapshot()
    full = MessageIndex(s.table.read(snap, columns=INDEX_COLUMNS), snap.version)
    assert s.index().rows.to_pydict() == full.rows.to_pydict()
    assert s.index().subject_stats().sort_by("subject").equals(full.subject_stats().sort_by("subject"))


def test_purging_one_of_two_interleaved_subjects(tmp_path: Path) -> None:
    """80,000 messages, every other one on the purged subject: 40,000 runs of one."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream({"name": "S", "subjects": ["s.>"]})
    n = 80_000
    lake.publish_batch("S", pa.table({
        "subject": [f"s.{i % 2}" for i in range(n)],
        "data": pa.array([str(i).encode() for i in range(n)], pa.binary()),
        "headers": pa.array([[{"name": "i", "value": str(i)}] for i in range(n)],
                            pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))),
    }))
    before = lake.stream("S").read().sort_by("seq")
    lake.purge_stream("S", subject="s.1")
    after = lake.stream("S").read().sort_by("seq")
    want = before.filter(pa.array(np.arange(n) % 2 == 0))
    assert after.select(want.column_names).equals(want)  # kept messages rewritten byte for byte
    state = lake.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (n // 2, 1, n, n // 2)
    _check_against_full_read(tmp_path, "S")


def test_a_batch_replacing_many_keys(tmp_path: Path) -> None:
    """A KV-shaped stream; one batch puts 40,000 of its 100,000 keys again, at random."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream({"name": "KV", "subjects": ["kv.>"], "max_msgs_per_subject": 1, "allow_direct": True})
    n, k = 100_000, 40_000
    lake.publish_batch("KV", pa.table({"subject": [f"kv.{i}" for i in range(n)],
                                       "data": pa.array([b"v1"] * n, pa.binary())}))
    keys = np.random.default_rng(3).choice(n, k, replace=False)
    lake.publish_batch("KV", pa.table({"subject": [f"kv.{i}" for i in keys],
                                       "data": pa.array([f"v2.{i}".encode() for i in keys], pa.binary())}))
    state = lake.stream_info("KV").state
    assert (state.messages, state.last_seq, state.num_subjects) == (n, n + k, n)
    rows = lake.stream("KV").read(columns=["subject", "data"])
    got = dict(zip(rows["subject"].to_pylist(), rows["data"].to_pylist(), strict=True))
    replaced = set(keys.tolist())
    assert got == {f"kv.{i}": (f"v2.{i}".encode() if i in replaced else b"v1") for i in range(n)}
    _check_against_full_read(tmp_path, "KV")


def test_every_removal_path_with_one_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a single range allowed, every scattered removal keeps (and writes again) the
    messages between: deletes, per-subject limits, purges. What is stored is what an
    exact removal leaves, headers, ids and times included, in the partition each belongs to."""
    monkeypatch.setattr(limits, "MAX_RANGES", 1)
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 3, "duplicate_window": 60 * 10**9})
    rng = random.Random(11)
    model: dict[int, tuple[str, bytes]] = {}
    seq = 0
    for step in range(30):
        subjects = [f"s.{rng.randrange(12)}" for _ in range(rng.randrange(1, 15))]
        if step % 5 == 4:
            lake.purge_stream("S", subject=subjects[0])
            model = {q: v for q, v in model.items() if v[0] != subjects[0]}
            continue
        payloads = [f"{step}.{j}".encode() for j in range(len(subjects))]
        lake.publish_batch("S", pa.table({"subject": subjects, "data": pa.array(payloads, pa.binary())}))
        for subject, data in zip(subjects, payloads, strict=True):
            seq += 1
            model[seq] = (subject, data)
            mine = sorted(q for q, v in model.items() if v[0] == subject)
            for q in mine[:-3]:
                del model[q]
        if model and step % 3 == 0:
            victim = rng.choice(sorted(model))
            lake.delete_msg("S", victim)
            del model[victim]
    rows = lake.stream("S").read().sort_by("seq")
    assert rows["seq"].to_pylist() == sorted(model)
    assert list(zip(rows["subject"].to_pylist(), rows["data"].to_pylist(), strict=True)) == [
        model[q] for q in sorted(model)]
    assert lake.stream_info("S").state.messages == len(model)
    _check_against_full_read(tmp_path, "S")


def _matched_confined(predicate: str, all_seqs: np.ndarray, parts: np.ndarray) -> tuple[np.ndarray, int]:
    """Like ``_matched`` for ``part IN (...) AND (ranges)``."""
    m = re.fullmatch(r"part IN \((.*?)\) AND \((.*)\)", predicate)
    assert m, predicate
    names = [n.replace("''", "'") for n in re.findall(r"'((?:[^']|'')*)'", m[1])]
    inside = np.isin(parts, names)
    matched, n_ranges = _matched(m[2], all_seqs)
    return all_seqs[inside & np.isin(all_seqs, matched)], n_ranges


@pytest.mark.parametrize("max_ranges", [1, 3, 32])
def test_a_removal_confined_to_the_partitions_it_touches(max_ranges: int) -> None:
    """Given the partition of every live message, a removal that would keep messages names the
    partitions of the removed ones and keeps only messages of those: matched minus kept is the
    removed, and it keeps no more than the removal over every partition would."""
    rng = random.Random(max_ranges)
    names = np.array(["0", "1", "2", "3", "o'k", "5"], dtype=object)
    confined = 0
    for _ in range(300):
        all_seqs = np.array(sorted(rng.sample(range(1, 3000), rng.randrange(2, 400))), dtype=np.int64)
        parts = names[np.array([rng.randrange(len(names)) for _ in all_seqs])]
        chosen = set(rng.sample(names.tolist(), rng.randrange(1, 3)))
        candidates = all_seqs[np.isin(parts, list(chosen))].tolist()
        if not candidates:
            continue
        removed = np.array(sorted(rng.sample(candidates, rng.randrange(1, len(candidates) + 1))), np.int64)
        r = seq_removal(all_seqs, removed, max_ranges, parts=lambda at, p=parts: p[at])
        plain = seq_removal(all_seqs, removed, max_ranges)
        assert r is not None and plain is not None
        if r.parts is None:  # nothing kept over every partition, or they all are touched
            assert r.predicate == plain.predicate and np.array_equal(r.kept, plain.kept)
            continue
        confined += 1
        assert set(r.parts) == set(parts[np.isin(all_seqs, removed)].tolist())
        matched, n_ranges = _matched_confined(r.predicate, all_seqs, parts)
        assert n_ranges <= max_ranges
        assert np.array_equal(np.setdiff1d(matched, r.kept), removed)
        assert np.isin(r.kept, matched).all() and not np.isin(r.kept, removed).any()
        assert np.isin(parts[np.isin(all_seqs, r.kept)], list(r.parts)).all()
        assert len(r.kept) <= len(plain.kept)
        # told there are no more partitions than those touched, it does not confine
        every = seq_removal(all_seqs, removed, max_ranges, parts=lambda at, p=parts: p[at], n_parts=len(r.parts))
        assert every is not None and every.parts is None and np.array_equal(every.kept, plain.kept)
    assert confined > 50


def test_a_removal_on_one_subject_leaves_other_partitions_files_alone(tmp_path: Path) -> None:
    """A purge of one subject of many interleaved (hash(8) partitions): only its partition's
    files are rewritten, and every message left is the one stored before."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream({"name": "S", "subjects": ["s.>"]})
    n = 40_000
    lake.publish_batch("S", pa.table({"subject": [f"s.{i % 64}" for i in range(n)],
                                      "data": pa.array([str(i).encode() for i in range(n)], pa.binary())}))
    snap = lake.stream("S").table.snapshot()
    files = {a["path"]: a["partition.part"] for a in pa.table(snap.table.get_add_actions(flatten=True)).to_pylist()}
    before = lake.stream("S").read().sort_by("seq")
    lake.purge_stream("S", subject="s.5")
    after = lake.stream("S").read().sort_by("seq")
    want = before.filter(pa.array(np.arange(n) % 64 != 5))
    assert after.select(want.column_names).equals(want)
    now = {a["path"]: a["partition.part"]
           for a in pa.table(lake.stream("S").table.snapshot().table.get_add_actions(flatten=True)).to_pylist()}
    target = before.filter(pa.array(np.arange(n) % 64 == 5))["part"][0].as_py()
    assert {p for p, part in files.items() if part != target} == {p for p, part in now.items() if part != target}
    assert {p for p, part in files.items() if part == target}.isdisjoint(now)  # its own partition was rewritten
    _check_against_full_read(tmp_path, "S")


def _commit_files(root: Path, name: str, version: int) -> tuple[list[int], list[int]]:
    """The sizes of the data files commit ``version`` of stream ``name`` added and removed."""
    log = root / "streams" / name / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return ([a["add"]["size"] for a in actions if "add" in a],
            [a["remove"]["size"] for a in actions if "remove" in a])


def test_a_removal_rewrites_what_it_keeps_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish into a full stream removes its oldest message from a large file: what the file
    keeps is written in pieces of about ``REWRITE_FILE_BYTES``, so the next removal there
    rewrites one piece, not the file again; a delete (no new rows) too. A batch larger than a
    piece is not cut into pieces. What is stored is what the removals leave."""
    monkeypatch.setattr(table, "REWRITE_FILE_BYTES", 64 << 10)
    lake = jsspark.connect(str(tmp_path))
    n = 20_000
    lake.add_stream({"name": "S", "subjects": ["s.>"], "max_msgs": n})
    stream = lake.stream("S")
    rng = random.Random(5)
    payload = [rng.randbytes(100) for _ in range(n)]  # incompressible: the file is as large as its data
    lake.publish_batch("S", pa.table({"subject": ["s.a"] * n, "data": pa.array(payload, pa.binary())}))
    (whole,), _ = _commit_files(tmp_path, "S", stream.table.snapshot().version)
    assert whole > 1 << 20

    lake.publish("s.a", b"new.1")  # removes seq 1 from the one file
    added, removed = _commit_files(tmp_path, "S", stream.table.snapshot().version)
    assert removed == [whole] and len(added) > 8 and max(added) < whole // 4

    lake.publish("s.a", b"new.2")  # removes seq 2: the first piece only
    added, removed = _commit_files(tmp_path, "S", stream.table.snapshot().version)
    assert len(removed) == 1 and removed[0] < whole // 4 and len(added) <= 2

    lake.delete_msg("S", 5000)  # no new rows: the piece holding it, written again in pieces
    added, removed = _commit_files(tmp_path, "S", stream.table.snapshot().version)
    assert len(removed) == 1 and removed[0] < whole // 4 and len(added) <= 2

    big = 4_000  # 400 KB of new rows: they set the size, so they and what is kept are not cut up
    lake.publish_batch("S", pa.table({"subject": ["s.a"] * big,
                                      "data": pa.array([rng.randbytes(100) for _ in range(big)], pa.binary())}))
    added, removed = _commit_files(tmp_path, "S", stream.table.snapshot().version)
    assert removed and len(added) <= 3

    rows = stream.read(columns=["seq", "data"]).sort_by("seq")
    want = [q for q in range(big + 2, n + 2 + big + 1) if q != 5000]  # the delete left room for one
    assert rows["seq"].to_pylist() == want
    data = {q: d for q, d in zip(rows["seq"].to_pylist(), rows["data"].to_pylist(), strict=True)}
    assert data[n + 1] == b"new.1" and data[n + 2] == b"new.2"
    assert data[4999] == payload[4998] and data[5001] == payload[5000]
    _check_against_full_read(tmp_path, "S")


def test_a_purge_spread_over_the_stream_hashes_each_subject_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge of one subject of many interleaved keeps the other messages of its partition
    between the first and the last it removes; which those are was found by hashing the subject
    of every message in that span (a million messages: 0.35 s of a purge). Each distinct
    subject is hashed once now; the stream keeps what it kept."""
    from jsspark.engine import partitioning

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream({"name": "S", "subjects": ["s.>"]})
    n = 40_000
    subjects = [f"s.{i % 64}" for i in range(n)]
    data = pa.array([str(i).encode() for i in range(n)])
    lake.publish_batch("S", pa.table({"subject": subjects, "data": data}))
    before = lake.stream("S").read().sort_by("seq")
    hashed: list[int] = []
    real = partitioning.fnv1a_32_array

    def counted(subjects: pa.Array) -> pa.Array:
        hashed.append(len(subjects))
        return real(subjects)

    monkeypatch.setattr(partitioning, "fnv1a_32_array", counted)
    assert lake.purge("S", subject="s.5") == n // 64
    after = lake.stream("S").read().sort_by("seq")
    assert after.select(before.column_names).equals(before.filter(pa.array(np.arange(n) % 64 != 5)))
    assert 0 < sum(hashed) <= 2 * 64
    _check_against_full_read(tmp_path, "S")
