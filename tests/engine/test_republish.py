"""RePublish computed over stored lake messages (``engine.republish``): headers, headers_only,
``Nats-Last-Sequence`` across batches and from the lake, suppression, the implicit form, and
the same messages on a real nats-server compared byte for byte (times aside)."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import jsspark
from jsspark.config import RePublish, StreamConfig
from jsspark.engine import headers as H
from jsspark.engine.api import rfc3339nano
from jsspark.engine.index import MessageIndex
from jsspark.engine.republish import (
    REPUBLISH_HEADERS,
    LastSequences,
    effective_republish,
    lake_last_seqs,
    republish_batch,
    rfc3339nano_array,
    valid_publish_subjects,
)
from jsspark.subjects import is_valid_publish_subject
from tests.rawnats import RawNats

_names = itertools.count()
BASE_NS = 1_700_000_000_000_000_000


def rows(subjects: list[str], *, start: int = 1, headers: list[Any] | None = None,
         data: list[bytes | None] | None = None, ts: list[int] | None = None) -> pa.Table:
    n = len(subjects)
    return pa.table({
        "seq": pa.array(range(start, start + n), pa.int64()),
        "ts_ns": pa.array(ts or [BASE_NS + i for i in range(n)], pa.int64()),
        "subject": pa.array(subjects, pa.string()),
        "headers": H.to_arrow(headers or [None] * n),
        "data": pa.array(data if data is not None else [f"m{i}".encode() for i in range(n)], pa.binary()),
    })


def pairs_of(out: pa.Table) -> list[list[tuple[str, str]]]:
    return [H.from_arrow(h) or [] for h in out["headers"].to_pylist()]


def appended(p: list[tuple[str, str]]) -> dict[str, str]:
    return dict(p[-5:]) if p[-1][0] != "Nats-Msg-Size" else dict(p[-6:])


def last_seqs(out: pa.Table) -> list[int]:
    return [int(appended(p)["Nats-Last-Sequence"]) for p in pairs_of(out)]


# -- headers -----------------------------------------------------------------------------------
def test_headers_appended_after_the_original_ones_in_order() -> None:
    t = rows(["rp.a", "rp.b", "rp.a"], headers=[[("K", "v"), ("K", "w"), ("Nats-Msg-Id", "x")], None, [("A", "1")]],
             data=[b"one", b"", None])
    out = republish_batch("ORDERS", RePublish(src="rp.*", dest="out.$1"), t)
    assert out["subject"].to_pylist() == ["out.a", "out.b", "out.a"]
    assert out["seq"].to_pylist() == [1, 2, 3]
    assert out["data"].to_pylist() == [b"one", b"", b""]
    p = pairs_of(out)
    assert p[0] == [("K", "v"), ("K", "w"), ("Nats-Msg-Id", "x"), ("Nats-Stream", "ORDERS"), ("Nats-Subject", "rp.a"),
                    ("Nats-Sequence", "1"), ("Nats-Time-Stamp", rfc3339nano(BASE_NS)), ("Nats-Last-Sequence", "0")]
    assert [k for k, _ in p[1]] == list(REPUBLISH_HEADERS)
    assert p[2][0] == ("A", "1") and appended(p[2])["Nats-Last-Sequence"] == "1"  # observed: 0, 0, 1


def test_time_stamp_is_gos_rfc3339nano() -> None:
    s = 1_700_000_000 * 1_000_000_000
    cases = {
        s: "2023-11-14T22:13:20Z",  # no fraction: no dot
        s + 100_000_000: "2023-11-14T22:13:20.1Z",
        s + 120_000_000: "2023-11-14T22:13:20.12Z",
        s + 1: "2023-11-14T22:13:20.000000001Z",
        s + 123_456_789: "2023-11-14T22:13:20.123456789Z",
        s + 100: "2023-11-14T22:13:20.0000001Z",
        0: "1970-01-01T00:00:00Z",
        5: "1970-01-01T00:00:00.000000005Z",
    }
    assert rfc3339nano_array(pa.array(list(cases), pa.int64())).to_pylist() == list(cases.values())
    rng = np.random.default_rng(7)
    ns = rng.integers(0, 4_000_000_000 * 10**9, 2000, dtype=np.int64)
    ns[::3] -= ns[::3] % 1_000_000  # milliseconds and whole seconds too
    ns[::7] -= ns[::7] % 1_000_000_000
    assert rfc3339nano_array(pa.array(ns)).to_pylist() == [rfc3339nano(int(x)) for x in ns]


def test_headers_only_sends_an_empty_body_and_the_size() -> None:
    t = rows(["a", "b", "c"], data=[b"x" * 512, b"", None], headers=[[("K", "v")], None, None])
    out = republish_batch("S", RePublish(src=">", dest="rp.>", headers_only=True), t)
    assert out["data"].to_pylist() == [b"", b"", b""]
    p = pairs_of(out)
    assert [q[-1] for q in p] == [("Nats-Msg-Size", "512"), ("Nats-Msg-Size", "0"), ("Nats-Msg-Size", "0")]
    assert p[0][0] == ("K", "v") and [k for k, _ in p[1]] == [*REPUBLISH_HEADERS, "Nats-Msg-Size"]


# -- Nats-Last-Sequence ------------------------------------------------------------------------
def test_last_sequence_within_and_across_batches() -> None:
    rng = random.Random(3)
    subjects = [f"rp.{rng.choice('abcdefg')}" for _ in range(300)]
    rp = RePublish(src="rp.*", dest="out.$1")
    whole = last_seqs(republish_batch("S", rp, rows(subjects)))
    expected, seen = [], {}
    for i, s in enumerate(subjects, start=1):
        expected.append(seen.get(s, 0))
        seen[s] = i
    assert whole == expected
    carry = LastSequences()
    got: list[int] = []
    for lo, hi in [(0, 1), (1, 40), (40, 41), (41, 200), (200, 300)]:
        got += last_seqs(republish_batch("S", rp, rows(subjects[lo:hi], start=lo + 1), carry=carry))
    assert got == expected
    assert carry.through == 300 and carry.last == {s: max(i for i, x in enumerate(subjects, 1) if x == s)
                                                   for s in set(subjects)}


def test_a_replayed_batch_drops_the_carry_and_asks_the_lookup() -> None:
    carry = LastSequences()
    rp = RePublish(src=">", dest="o.>")
    republish_batch("S", rp, rows(["a", "b", "a"]), carry=carry)
    asked: list[tuple[int, Any]] = []

    def lookup(seq: int, subjects: pa.Array | None) -> pa.Table | None:
        asked.append((seq, None if subjects is None else sorted(subjects.to_pylist())))
        if subjects is None:
            return None  # too many to carry: ask per subject
        return pa.table({"subject": subjects, "last_seq": pa.array([1] * len(subjects), pa.int64())})

    out = republish_batch("S", rp, rows(["a", "b", "a"], start=2), carry=carry, lookup=lookup)  # overlaps 2..3
    assert asked == [(2, None), (2, ["a", "b"])]
    assert last_seqs(out) == [1, 1, 2]
    assert carry.through == 4 and not carry.complete


def test_a_carry_from_the_first_sequence_never_looks_up() -> None:
    def lookup(seq: int, subjects: pa.Array | None) -> pa.Table | None:
        raise AssertionError("nothing is below sequence 1, and the carry then knows every subject")

    carry, rp = LastSequences(), RePublish(src=">", dest="o.>")
    assert last_seqs(republish_batch("S", rp, rows(["a", "b"]), carry=carry, lookup=lookup)) == [0, 0]
    assert last_seqs(republish_batch("S", rp, rows(["c", "a"], start=3), carry=carry, lookup=lookup)) == [0, 1]
    assert carry.complete and carry.through == 4


def test_last_sequence_below_the_batch_comes_from_the_lake(tmp_path: Path) -> None:
    lake = jsspark.connect(tmp_path / "lake")
    lake.add_stream(name="S", subjects=["s.>"])
    rng = random.Random(5)
    subjects = [f"s.{rng.randrange(40)}" for _ in range(2_000)]
    lake.publish_batch("S", pa.table({"subject": subjects, "data": [b"x"] * len(subjects)}))
    for seq in (7, 500, 1_001):
        lake.delete_msg("S", seq)
    stored = lake.stream("S").read(columns=["seq", "ts_ns", "subject", "headers", "data"]).sort_by("seq")
    live = dict(zip(stored["seq"].to_pylist(), stored["subject"].to_pylist(), strict=True))

    def expected(lo: int) -> list[int]:
        out, seen = [], {}
        for seq in sorted(live):
            s = live[seq]
            if seq >= lo:
                out.append(seen.get(s, 0))
            seen[s] = seq
        return out

    rp = RePublish(src=">", dest="o.>")
    for lo, carry_it in [(1_200, True), (1_200, False), (2, True), (1_990, False)]:
        batch = stored.filter(pc.greater_equal(stored["seq"], lo))
        carry = LastSequences() if carry_it else None
        got = last_seqs(republish_batch("S", rp, batch, carry=carry, lookup=lake_last_seqs(lake, "S")))
        assert got == expected(lo), lo
        if carry is not None:
            assert carry.complete  # seeded with every subject below the batch


def test_index_last_seqs_before_matches_a_scan() -> None:
    rng = np.random.default_rng(11)
    n = 30_000
    seqs = np.sort(rng.choice(np.arange(1, 40_000), n, replace=False)).astype(np.int64)
    pool = [f"x.{i}" for i in range(300)] + [f"rare.{i}" for i in range(5)]
    weights = np.r_[np.ones(300), np.full(5, 0.002)]
    subjects = rng.choice(pool, n, p=weights / weights.sum())
    index = MessageIndex(pa.table({"seq": seqs, "ts_ns": seqs, "subject": subjects, "msg_id": pa.nulls(n, pa.string()),
                                   "size": np.ones(n, np.int64)}), 1)

    def scan(bound: int, names: list[str]) -> dict[str, int]:
        out = dict.fromkeys(names, 0)
        for s, q in zip(subjects, seqs, strict=True):
            if q < bound and s in out:
                out[s] = max(out[s], int(q))
        return out

    for bound in (1, 50, 20_000, 39_999, 50_000):
        names = [*pool, "never.seen"]
        got = index.last_seqs_before(bound, names)
        assert dict(zip(got["subject"].to_pylist(), got["last_seq"].to_pylist(), strict=True)) == scan(bound, names)
        everything = index.last_seqs_before(bound)
        want = {k: v for k, v in scan(bound, pool).items() if v}
        assert dict(zip(everything["subject"].to_pylist(), everything["last_seq"].to_pylist(), strict=True)) == want


# -- what is (not) republished -----------------------------------------------------------------
def test_invalid_destinations_are_suppressed_and_unmatched_subjects_skipped() -> None:
    t = rows(["rps.a-b", "rps.--", "other.x", "rps.x--y", "rps.a-b"])
    out = republish_batch("S", RePublish(src="rps.*", dest="out.{{split(1,-)}}"), t)
    assert out["subject"].to_pylist() == ["out.a.b", "out.x.y", "out.a.b"]  # "out." is not a publish subject
    assert out["seq"].to_pylist() == [1, 4, 5] and last_seqs(out) == [0, 0, 1]
    hijack = RePublish(src="one", dest="uno\r\nPUB hijack.subject 8\r\nhijacked!\r\n")
    assert republish_batch("S", hijack, rows(["one", "one"])).num_rows == 0  # TestJetStreamStreamRepublishSuppresses...
    assert republish_batch("S", RePublish(src=">", dest=""), rows(["a"])).num_rows == 0  # no dest: no transform


def test_valid_publish_subjects_is_the_scalar_rule() -> None:
    corpus = ["a", "a.b", "a.", ".a", "a..b", "*", ">", "a.*", "a.>", "*a", "a*", "a.>b", "a b", "a\tb", "a\r\nb", "",
              "a.*.c", "$JS.API.x", "ü.ñ", "a.b.c.d.e.f", ">.a", "a.>.b", "\x00", "a\fb", "a\x0bb"]
    got = valid_publish_subjects(pa.array([*corpus, None], pa.string())).to_pylist()
    assert got == [is_valid_publish_subject(s) for s in corpus] + [False]


def test_implicit_republish_follows_the_subject_transform() -> None:
    cfg = StreamConfig(name="T", subjects=["a.>"], subject_transform={"src": "a.>", "dest": "b.>"},
                       republish=RePublish(dest=">"))
    rp = effective_republish(cfg)
    assert (rp.src, rp.dest) == ("b.>", "b.>")
    out = republish_batch("T", rp, rows(["b.hello"]))
    assert out["subject"].to_pylist() == ["b.hello"]
    other = effective_republish(cfg.model_copy(update={"subjects": ["a.>", "c.>"]}))
    assert (other.src, other.dest) == (">", ">")  # not the only subject: not implicit


def test_the_lake_stores_a_republish_config_with_the_servers_checks(tmp_path: Path) -> None:
    lake = jsspark.connect(tmp_path / "lake")
    with pytest.raises(Exception, match="republish destination forms a cycle"):
        lake.add_stream(name="C", subjects=["c.>"], republish={"src": ">", "dest": "c.x.>"})
    info = lake.add_stream(name="I", subjects=["a.>"], subject_transform={"src": "a.>", "dest": "b.>"},
                           republish={"dest": ">"})
    assert (info.config.republish.src, info.config.republish.dest) == ("b.>", "b.>")


# -- against a real server ---------------------------------------------------------------------
SCENARIOS = [
    # (stream config without name, messages (subject, data, header pairs), a republished sentinel subject)
    ({"subjects": ["P.in.>", "P.other.>"], "republish": {"src": "P.in.>", "dest": "P.out.>"}},
     [("P.in.a", b"1", [("K", "v"), ("K", "w"), ("Nats-Msg-Id", "id-1")]), ("P.in.b", b"22", None),
      ("P.other.x", b"no", None), ("P.in.a", b"", [("A", " spaced")]), ("P.in.c.d", b"x" * 300, None),
      ("P.in.b", b"last", [("Z", "z")])], "P.in.z"),
    ({"subjects": ["P.h.*"], "republish": {"dest": "P.hout.>", "headers_only": True}},
     [("P.h.a", b"x" * 512, [("K", "v")]), ("P.h.b", b"", None), ("P.h.a", b"abc", None)], "P.h.z"),
    ({"subjects": ["P.s.*"], "republish": {"src": "P.s.*", "dest": "P.sout.{{split(1,-)}}"}},
     [("P.s.a-b", b"1", None), ("P.s.--", b"suppressed", None), ("P.s.x--y", b"2", None), ("P.s.a-b", b"3", None)],
     "P.s.z"),
    ({"subjects": ["P.i.>"], "subject_transform": {"src": "P.i.>", "dest": "P.ib.>"}, "republish": {"dest": ">"}},
     [("P.i.hello", b"1", None), ("P.i.x.y", b"2", [("K", "v")]), ("P.i.hello", b"3", None)], "P.i.z"),
    ({"subjects": ["P.p.*.*"], "republish": {"src": "P.p.*.*", "dest": "P.pout.{{partition(5,1,2)}}.$2.$1"}},
     [("P.p.a.b", b"1", None), ("P.p.c.d", b"2", None), ("P.p.a.b", b"3", None)], "P.p.z.z"),
]


@pytest.fixture
def server_side(nats_server: Any) -> Iterator[tuple[Any, RawNats, list[str]]]:
    """A JetStream API client, a raw wire client, and the streams to delete afterwards."""
    from tests.live.conftest import SyncNats

    api, raw = SyncNats(nats_server.url), RawNats(nats_server.url)
    created: list[str] = []
    try:
        yield api, raw, created
    finally:
        for name in created:
            api.api(f"STREAM.DELETE.{name}")
        raw.close()
        api.close()


def on_server(api: Any, raw: RawNats, created: list[str], cfg: dict[str, Any],
              msgs: list[tuple[str, bytes, Any]], sentinel: str) -> list[Any]:
    """Create ``cfg`` on the server, publish ``msgs`` (raw header blocks), then ``sentinel``;
    every republish of ``msgs`` has arrived once the sentinel's has (one stream sends in store
    order). Returns the republished messages of ``msgs``, in order."""
    name = cfg["name"]
    sid = raw.subscribe(">")
    api.add_stream(**cfg)
    created.append(name)
    for subject, data, pairs in [*msgs, (sentinel, b"sentinel", None)]:
        raw.publish(subject, data, pairs)
    sentinel_seq = str(len(msgs) + 1)
    got = raw.wait(lambda ms: any(m.header("Nats-Stream") == name and m.header("Nats-Sequence") == sentinel_seq
                                  for m in ms), sid, what=f"the republish of {sentinel}")
    return [m for m in got if m.header("Nats-Stream") == name and m.header("Nats-Sequence") != sentinel_seq]


def on_lake(lake: Any, cfg: dict[str, Any], msgs: list[tuple[str, bytes, Any]]) -> tuple[pa.Table, pa.Table]:
    """The same stream and messages on a lake: (stored rows, what republish sends for them)."""
    name = cfg["name"]
    lake.add_stream(cfg)
    lake.publish_batch(name, pa.table({"subject": [m[0] for m in msgs], "data": [m[1] for m in msgs],
                                       "headers": H.to_arrow([m[2] for m in msgs])}))
    stored = lake.stream(name).read(columns=["seq", "ts_ns", "subject", "headers", "data"]).sort_by("seq")
    rp = effective_republish(lake.stream_info(name).config)
    return stored, republish_batch(name, rp, stored, carry=LastSequences(), lookup=lake_last_seqs(lake, name))


def assert_same_republish(api: Any, name: str, stored: pa.Table, mine: list[dict[str, Any]], theirs: list[Any]) -> None:
    """Subjects, bodies and header blocks byte for byte; ``Nats-Time-Stamp`` is each side's own
    store time in the server's format."""
    from tests.live.conftest import rfc3339_ns

    assert mine and len(mine) == len(theirs), ([m["subject"] for m in mine], [t.subject for t in theirs])
    ts_by_seq = dict(zip(stored["seq"].to_pylist(), stored["ts_ns"].to_pylist(), strict=True))
    for m, t in zip(mine, theirs, strict=True):
        assert (m["subject"], m["data"]) == (t.subject, t.data)
        pairs = H.from_arrow(m["headers"]) or []
        server_ts = t.header("Nats-Time-Stamp")
        got = api.api(f"STREAM.MSG.GET.{name}", {"seq": int(t.header("Nats-Sequence"))})["message"]
        assert server_ts == got["time"]  # the server's RFC3339Nano of its store time
        assert rfc3339nano_array(pa.array([rfc3339_ns(server_ts)], pa.int64())).to_pylist() == [server_ts]
        assert dict(pairs)["Nats-Time-Stamp"] == rfc3339nano(ts_by_seq[m["seq"]])
        same = [(k, server_ts if k == "Nats-Time-Stamp" else v) for k, v in pairs]
        assert H.encode(same) == t.header_block  # byte for byte: order, repeats, spacing


@pytest.mark.nats
@pytest.mark.parametrize("case", range(len(SCENARIOS)))
def test_republish_matches_a_real_server(case: int, server_side: Any, tmp_path: Path) -> None:
    api, raw, created = server_side
    prefix = f"rpd{next(_names)}x{case}"
    cfg_json, msgs, sentinel = SCENARIOS[case]
    cfg = {"name": prefix.upper(), **json.loads(json.dumps(cfg_json).replace('"P.', f'"{prefix}.'))}
    msgs = [(s.replace("P.", f"{prefix}.", 1), d, h) for s, d, h in msgs]
    theirs = on_server(api, raw, created, cfg, msgs, sentinel.replace("P.", f"{prefix}.", 1))
    stored, out = on_lake(jsspark.connect(tmp_path / "lake"), cfg, msgs)
    assert_same_republish(api, cfg["name"], stored, out.to_pylist(), theirs)
