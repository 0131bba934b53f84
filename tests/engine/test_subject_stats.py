"""Per-subject stats kept across changes agree with a plain model, and with a rebuild.

``SubjectStats`` keeps its name lookup between publishes (a dict of slots, renumbered after
many removals); these tests churn through thousands of subjects so every path of that
bookkeeping (appends, removals that shift positions, renumbering) runs many times.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import jsspark
from jsspark.engine import subject_stats
from jsspark.engine.subject_stats import SubjectGroups, SubjectStats, find_in


def _groups(pairs: list[tuple[str, int]]) -> SubjectGroups:
    return SubjectGroups.of(pa.array([s for s, _ in pairs], pa.string()), np.array([q for _, q in pairs], np.int64))


def _check(stats: SubjectStats, model: dict[str, list[int]], rng: random.Random) -> None:
    assert len(stats) == len(model)
    assert sorted(stats.names.to_pylist()) == sorted(model)
    asked = list(model) + [f"never.{rng.randrange(10**6)}" for _ in range(5)]
    rng.shuffle(asked)
    # all names at once (Arrow's lookup), and a few at a time (the kept dict)
    few = [asked[i:i + 3] for i in range(0, len(asked), 3)] * 2  # twice: the second time remembered
    pos = np.concatenate([stats.positions(pa.array(asked, pa.string())),
                          *(stats.positions(pa.array(f, pa.string())) for f in few)])
    for name, p in zip(asked + [name for f in few for name in f], pos.tolist(), strict=True):
        if name not in model:
            assert p == -1, name
            continue
        assert stats.names[p].as_py() == name
        assert int(stats.counts[p]) == len(model[name])
        assert int(stats.last[p]) == max(model[name])
        assert stats.last_seq(name) == max(model[name])
    # encoding a batch: each dictionary entry comes with its position, known ones first
    batch = [rng.choice(asked) for _ in range(50)]
    encoded, (_, _, positions), counts = stats.encode(pa.array(batch, pa.string()))
    names = encoded.dictionary.to_pylist()
    known = [n in model for n in names]
    assert known == sorted(known, reverse=True)
    for name, p, c in zip(names, positions.tolist(), counts.tolist(), strict=True):
        assert p == (stats.names.to_pylist().index(name) if name in model else -1)
        assert c == batch.count(name)
    assert [names[i] for i in encoded.indices.to_pylist()] == batch


def test_find_in_hashes_either_side() -> None:
    rng = random.Random(5)
    for n_known, n_asked in ((1000, 3), (1000, 400), (50, 2000), (0, 4), (7, 0)):
        known = [f"k.{i}" for i in rng.sample(range(10 * n_known + 1), n_known)]
        pool = [*known, "other", "k.x"]
        asked = [rng.choice(pool) if rng.random() < 0.9 else None for _ in range(n_asked)]
        want = [known.index(a) if a in known else -1 for a in asked]
        got = find_in(pa.array(asked, pa.string()), pa.array(known, pa.string()))
        assert got.tolist() == want, (n_known, n_asked)


@pytest.mark.parametrize("dict_after", [subject_stats.LOOKUP_AFTER, 10**9], ids=["kept-dict", "scans-only"])
def test_stats_follow_a_model_through_heavy_churn(dict_after: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kept dict, and without it (every few-name lookup remembered or scanned)."""
    monkeypatch.setattr(subject_stats, "LOOKUP_AFTER", dict_after)
    rng = random.Random(7)
    model: dict[str, list[int]] = {}
    seq = 0
    first = []
    for i in range(20):
        seq += 1
        first.append((f"s.{i}", seq))
        model.setdefault(f"s.{i}", []).append(seq)
    stats = SubjectStats(_groups(first))
    fresh = 20
    for step in range(400):
        if rng.random() < 0.55 or not model:  # a batch: known subjects and new ones
            pairs = []
            for _ in range(rng.randrange(1, 40)):
                seq += 1
                if model and rng.random() < 0.4:
                    name = rng.choice(list(model))
                else:
                    name, fresh = f"s.{fresh}", fresh + 1
                pairs.append((name, seq))
            stats.add(_groups(pairs))
            for name, q in pairs:
                model.setdefault(name, []).append(q)
        else:  # removals: whole subjects, and the oldest messages of others (their last stays)
            gone: list[tuple[str, int]] = []
            for name in rng.sample(list(model), rng.randrange(1, min(len(model), 60) + 1)):
                seqs = sorted(model[name])
                take = len(seqs) if rng.random() < 0.7 or len(seqs) == 1 else rng.randrange(1, len(seqs))
                gone += [(name, q) for q in seqs[:take]]
                model[name] = seqs[take:]
                if not model[name]:
                    del model[name]
            stats.remove(_groups(gone))
        if step % 10 == 0 or step > 390:
            _check(stats, model, rng)
    assert fresh > 3000  # thousands of subjects came and went: renumbering ran


def test_a_limited_stream_keeps_its_subjects_like_a_rebuild(tmp_path: Path) -> None:
    """Unique subjects pushed out by max_msgs, and a per-subject limit: the stats the stream
    kept across publishes answer as the ones a new process builds from the table."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream({"name": "S", "subjects": ["s.>"], "max_msgs": 300, "max_msgs_per_subject": 2})
    rng = random.Random(3)
    for i in range(60):
        names = [f"s.{rng.randrange(40)}" if rng.random() < 0.3 else f"s.u{i}.{k}" for k in range(rng.randrange(1, 30))]
        if i % 7 == 0:
            for name in names:
                lake.publish(name, b"x")
        else:
            lake.publish_batch("S", pa.table({"subject": names, "data": pa.array([b"x"] * len(names), pa.binary())}))
    kept = lake.stream("S").index()
    rebuilt = jsspark.connect(str(tmp_path)).stream("S").index()
    assert kept.subject_stats().sort_by("subject").equals(rebuilt.subject_stats().sort_by("subject"))
    names = [*rebuilt.subject_stats()["subject"].to_pylist(), "s.none"]
    assert [kept.last_seq_of(n) for n in names] == [rebuilt.last_seq_of(n) for n in names]
    assert lake.stream_info("S").state.num_subjects == rebuilt.num_subjects
