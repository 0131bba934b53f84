"""engine.sourcing and the source/mirror forms of engine.ingest: the server's iname and
``Nats-Stream-Source`` layout, first-match transforms, per-origin marks and resume, dedup in
the target's own window."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import jsspark
from jsspark.config import StreamSource
from jsspark.engine.headers import HEADER_TYPE
from jsspark.engine.ingest import sourced_seq, store_mirrored, store_sourced
from jsspark.engine.sourcing import Origin, server_hash


def rows(seqs: list[int], subjects: list[str] | None = None, ids: list[str | None] | None = None) -> pa.Table:
    subjects = subjects or [f"o.{s}" for s in seqs]
    hdrs = [None if not ids or ids[i] is None else [{"name": "Nats-Msg-Id", "value": ids[i]}] for i in range(len(seqs))]
    return pa.table({"seq": seqs, "ts_ns": [1_700_000_000_000_000_000 + s for s in seqs], "subject": subjects,
                     "data": [b"x"] * len(seqs), "headers": pa.array(hdrs, HEADER_TYPE)})


def stored(lake: object, name: str) -> list[tuple[int, str, str | None]]:
    out = []
    for r in lake.stream(name).read().sort_by("seq").to_pylist():  # type: ignore[attr-defined]
        src = next((h["value"] for h in r["headers"] or () if h["name"] == "Nats-Stream-Source"), None)
        out.append((r["seq"], r["subject"], src))
    return out


def test_iname_and_header_match_the_servers_observed_forms() -> None:
    # observed on nats-server 2.15.1 (reference digest section 3)
    assert Origin(name="O2").header(1, "o2.a", "2HwfT34c") == "O2 1 > > o2.a 2HwfT34c"
    assert Origin(name="O2", filter_subject="o2.a").header(1, "o2.a", "2HwfT34c") == "O2 1 o2.a > o2.a 2HwfT34c"
    two = Origin.of({"name": "O", "subject_transforms": [{"src": "o.a", "dest": "s.a"}, {"src": "o.b", "dest": ""}]})
    assert two.header(1, "o.a", "ARRb8opA") == "O 1 o.a\fo.b s.a\f> o.a ARRb8opA"
    ext = Origin.of(StreamSource(name="O", external={"api": "$JS.hub.API", "deliver": ""}))
    assert ext.iname == f"O:{server_hash('$JS.hub.API')} > >"
    assert len(server_hash("x")) == 8 and server_hash("x") == server_hash("x")


def test_first_matching_transform_wins_and_empty_dest_is_skipped() -> None:
    o = Origin.of({"name": "O", "subject_transforms": [
        {"src": "o.a", "dest": ""}, {"src": "o.*", "dest": "one.{{wildcard(1)}}"}, {"src": "o.b", "dest": "two"}]})
    mapped = o.map_subjects(pa.array(["o.a", "o.b", "p.c"])).to_pylist()
    assert mapped == ["one.a", "one.b", "p.c"]  # the empty-dest entry is no transform, as the server's nil
    assert o.filters() == ["o.a", "o.*", "o.b"]
    assert o.selected(pa.array(["o.a", "p.c"])).to_pylist() == [True, False]


def test_source_filters_maps_marks_and_resumes(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    src = {"name": "ORDERS", "subject_transforms": [{"src": "o.1", "dest": "eu.1"}, {"src": "o.3", "dest": ""}]}
    lake.add_stream(name="T", subjects=["t.>"], sources=[src, {"name": "OTHER"}])
    store_sourced(lake, "T", rows([1, 2, 3]), origin=src, identity="IDENT123", lag=5)
    assert stored(lake, "T") == [
        (1, "eu.1", "ORDERS 1 o.1\fo.3 eu.1\f> o.1 IDENT123"),
        (2, "o.3", "ORDERS 3 o.1\fo.3 eu.1\f> o.3 IDENT123"),
    ]  # o.2 matches no filter: not stored
    assert sourced_seq(lake, "T", src) == 3  # the mark counts filtered rows too: resume at 4
    assert sourced_seq(lake, "T", "OTHER") == 0
    # a reset back or a replay below the mark stores nothing again
    assert store_sourced(lake, "T", rows([1, 2, 3]), origin=src).seqs.tolist() == []
    store_sourced(lake, "T", rows([2, 4], ["o.1", "o.1"]), origin=src)
    assert [s for s, *_ in stored(lake, "T")] == [1, 2, 3]
    info = lake.stream_info("T")
    by_name = {s.name: s for s in info.sources}
    assert by_name["ORDERS"].seq == 4 and by_name["ORDERS"].active_ns >= 0
    assert by_name["OTHER"].seq == 0 and by_name["OTHER"].active_ns == -1


def test_sourced_seq_falls_back_to_scanning_headers(tmp_path: Path) -> None:
    """A stream holding source headers but no marks (filled by a server, or before marks)."""
    from jsspark.engine.ingest import _commit, _message_rows

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="T", subjects=["t.>"])
    ls = lake.stream("T")
    hdr = pa.array([[{"name": "Nats-Stream-Source", "value": "ORDERS 41 > > o.1 abcdefgh"}],
                    [{"name": "Nats-Stream-Source", "value": "ORDERS 42 o.2 > o.2"}],
                    [{"name": "Nats-Stream-Source", "value": "ORDERS 40 > > o.3"}]], HEADER_TYPE)
    built = _message_rows(pa.array([1, 2, 3]), pa.array([1, 2, 3]), pa.array(["t.a", "t.b", "t.c"]), hdr,
                      pa.array([b"", b"", b""]))
    _commit(ls, lambda snap: (built, 3, 3), None)
    assert sourced_seq(lake, "T", "ORDERS") == 41  # only headers of this iname (filter '>')
    assert sourced_seq(lake, "T", {"name": "ORDERS", "filter_subject": "o.2"}) == 42
    assert sourced_seq(lake, "T", "NONE") == 0


def test_dedup_in_the_targets_own_window_only_when_configured(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="NODUP", subjects=["n.>"], sources=[{"name": "O"}])
    lake.add_stream(name="DUP", subjects=["d.>"], sources=[{"name": "O"}], duplicate_window=60.0)
    assert lake.stream_info("NODUP").config.duplicate_window == 0  # the server's default for sourcing streams
    batch = rows([1, 2, 3], ids=["a", "a", None])
    assert len(store_sourced(lake, "NODUP", batch, origin="O").seqs) == 3
    assert len(store_sourced(lake, "DUP", batch, origin="O").seqs) == 2
    assert len(store_sourced(lake, "DUP", rows([4], ids=["a"]), origin="O").seqs) == 0
    assert sourced_seq(lake, "DUP", "O") == 4
    # ids all new and none repeated (taken without a row loop): every message stored
    assert len(store_sourced(lake, "DUP", rows([5, 6, 7], ids=["b", None, "c"]), origin="O").seqs) == 3
    assert len(store_sourced(lake, "DUP", rows([8, 9], ids=["d", "c"]), origin="O").seqs) == 1


def test_mirror_filter_and_transform(tmp_path: Path) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="M", mirror={"name": "O", "subject_transforms": [{"src": "o.a", "dest": "m.a"}]})
    store_mirrored(lake, "M", rows([1, 2, 3], ["o.a", "o.b", "o.a"]), lag=0)
    assert stored(lake, "M") == [(1, "m.a", None), (3, "m.a", None)]
    st = lake.stream_info("M")
    assert (st.state.first_seq, st.state.last_seq, st.state.num_deleted) == (1, 3, 1)
    assert st.mirror.name == "O" and st.mirror.lag == 0 and st.mirror.seq == 3


def test_stream_info_shows_a_sources_last_origin_seq_as_the_server(nats_server: object, tmp_path: Path) -> None:
    """nats-server 2.15.1's ``StreamSourceInfo`` carries ``seq`` (the last origin sequence a
    source took; left out while none, and on a mirror's entry), between ``lag`` and ``active``.
    The lake's JSON left it out of every entry (found next to the sources fuzz)."""
    import time

    from jsspark.live.landing import land_batch
    from tests.engine.backends import LakeBackend, ServerBackend
    from tests.engine.test_differential import Pair, paired

    gen = paired(ServerBackend(nats_server.url), LakeBackend(jsspark.connect(str(tmp_path))))  # type: ignore[attr-defined]
    pair: Pair = next(gen)
    try:
        pair.add_stream({"name": "SEQ_O", "subjects": ["seq_o.>"]})
        pair.streams.append("SEQ_O")
        for token in "abc":
            pair.publish(f"seq_o.{token}", b"x")
        targets = {"SEQ_M": {"mirror": {"name": "SEQ_O"}},
                   "SEQ_S": {"sources": [{"name": "SEQ_O", "filter_subject": "seq_o.b"},
                                         {"name": "SEQ_O", "filter_subject": "seq_o.zz"}]}}
        lake = pair.lake.lake
        origin = lake.stream("SEQ_O").read(columns=["seq", "ts_ns", "subject", "headers", "data"]).sort_by("seq")
        for name, cfg in targets.items():
            pair.add_stream({"name": name, **cfg})
            pair.streams.insert(0, name)
            for source in cfg.get("sources") or [cfg.get("mirror")]:
                rows = origin.filter(Origin.of(source).selected(origin["subject"]))
                if rows.num_rows:  # what a job's reader delivers, landed as the job lands it
                    land_batch(lake, name, rows, form="source" if "sources" in cfg else "mirror", origin=source)
        deadline = time.monotonic() + 10
        while pair.server.state("SEQ_M")["messages"] < 3 or pair.server.state("SEQ_S")["messages"] < 1:
            assert time.monotonic() < deadline, "the server's mirror and sources to catch up"
            time.sleep(0.05)  # polling the server's sourcing, bounded by the deadline
        assert pair.server.replication("SEQ_S") == pair.lake.replication("SEQ_S") == {"sources": [
            {"name": "SEQ_O", "lag": 0, "seq": 2, "filter_subject": "seq_o.b"},
            {"name": "SEQ_O", "lag": 0, "filter_subject": "seq_o.zz"}]}
        assert pair.server.replication("SEQ_M") == pair.lake.replication("SEQ_M") == {"mirror": {"name": "SEQ_O", "lag": 0}}
    finally:
        next(gen, None)


def test_a_sources_seq_is_the_last_origin_seq_stored_and_a_restart_resumes_past_the_skipped(
    nats_server: object, tmp_path: Path
) -> None:
    """The server's source ``seq`` is the last origin sequence the target stored: a message an
    interest target skips (nobody wants it: none while it has no consumer) or a target's
    duplicate window drops leaves it where it was. The lake showed its mark, which passes them
    too. The mark stays where a restart resumes: a redelivery after a crash between landing and
    ack (everything again) stores nothing twice, and a restarted job's plan starts after it, so
    a skipped message is not stored later (found on an interest target in the sources fuzz)."""
    import time

    import pyarrow.compute as pc

    from jsspark.jobs.runner import Job
    from jsspark.jobs.spec import load_job
    from jsspark.live.landing import land_batch
    from tests.engine.backends import LakeBackend, ServerBackend
    from tests.engine.test_differential import Pair, paired

    loc = str(tmp_path)
    gen = paired(ServerBackend(nats_server.url), LakeBackend(jsspark.connect(loc)))  # type: ignore[attr-defined]
    pair: Pair = next(gen)
    lake = pair.lake.lake
    cols = ["seq", "ts_ns", "subject", "headers", "data"]

    def land(target: str, origin: str, first: int) -> None:  # what the job's reader delivers from ``first``
        got = lake.stream(origin).read(columns=cols).sort_by("seq")
        land_batch(lake, target, got.filter(pc.greater_equal(got["seq"], first)), form="source",
                   origin={"name": origin})

    def settled(target: str, last_seq: int) -> None:
        deadline = time.monotonic() + 10
        while pair.server.state(target)["last_seq"] < last_seq or pair.server.replication(target)["sources"][0][
                "lag"]:
            assert time.monotonic() < deadline, f"the server's sourcing into {target} to catch up"
            time.sleep(0.05)  # polling the server's sourcing, bounded by the deadline

    try:
        pair.add_stream({"name": "SQI_O", "subjects": ["sqi_o.>"]})
        pair.add_stream({"name": "SQD_O", "subjects": ["sqd_o.>"], "duplicate_window": 100_000_000})
        pair.streams += ["SQI_O", "SQD_O"]
        pair.add_stream({"name": "SQI", "retention": "interest", "sources": [{"name": "SQI_O"}]})
        pair.add_stream({"name": "SQD", "duplicate_window": 60_000_000_000, "sources": [{"name": "SQD_O"}]})
        pair.streams[:0] = ["SQI", "SQD"]
        for i in range(3):
            pair.publish("sqi_o.a", b"%d" % i)  # no consumer: none stored
        settled("SQI", 3)
        land("SQI", "SQI_O", 1)
        assert pair.server.replication("SQI") == pair.lake.replication("SQI") == {
            "sources": [{"name": "SQI_O", "lag": 0}]}
        pair.add_consumer("SQI", {"durable_name": "C", "ack_policy": "explicit", "filter_subject": "sqi_o.b"})
        for s in ("sqi_o.a", "sqi_o.b", "sqi_o.a"):
            pair.publish(s, b"x")
        settled("SQI", 6)
        land("SQI", "SQI_O", 4)
        assert pair.server.replication("SQI") == pair.lake.replication("SQI") == {
            "sources": [{"name": "SQI_O", "lag": 0, "seq": 5}]}
        keys = ("messages", "first_seq", "last_seq", "num_deleted")  # bytes: only the server's header has an identity
        assert {k: pair.server.state("SQI")[k] for k in keys} == {k: pair.lake.state("SQI")[k] for k in keys} == {
            "messages": 1, "first_seq": 5, "last_seq": 6, "num_deleted": 1}

        pair.publish("sqd_o.a", b"1", [("Nats-Msg-Id", "one")])
        pair.publish("sqd_o.a", b"2", [("Nats-Msg-Id", "two")])
        time.sleep(0.15)  # past the origin's own 100 ms window: the scenario, not a sync
        pair.publish("sqd_o.a", b"3", [("Nats-Msg-Id", "one")])  # stored by the origin, a duplicate in SQD
        settled("SQD", 2)
        land("SQD", "SQD_O", 1)
        assert pair.server.replication("SQD") == pair.lake.replication("SQD") == {
            "sources": [{"name": "SQD_O", "lag": 0, "seq": 2}]}

        # a crash between the landing and its ack: the reader gets everything again
        before = {t: lake.stream(t).read().num_rows for t in ("SQI", "SQD")}
        land("SQI", "SQI_O", 1)
        land("SQD", "SQD_O", 1)
        assert {t: lake.stream(t).read().num_rows for t in ("SQI", "SQD")} == before
        assert pair.lake.replication("SQI")["sources"][0]["seq"] == 5
        # a restarted job resumes after every origin message it decided on, stored or not
        pair.add_consumer("SQI", {"durable_name": "D", "ack_policy": "explicit"})  # now sqi_o.a is wanted
        for name, resume in (("SQI", 7), ("SQD", 4)):
            cfg = lake.stream_info(name).config.to_json()
            job = Job(load_job({"stream": cfg, "target": {"location": loc}, "origins": {"*": {"location": loc}},
                                "trigger": "available_now"}))
            assert [p.start_seq for p in job.plan()] == [resume]
        pair.publish("sqi_o.a", b"y")
        settled("SQI", 7)
        land("SQI", "SQI_O", 7)
        assert [r["subject"] for r in lake.stream("SQI").read().sort_by("seq").to_pylist()] == ["sqi_o.b", "sqi_o.a"]
        assert pair.server.replication("SQI") == pair.lake.replication("SQI") == {
            "sources": [{"name": "SQI_O", "lag": 0, "seq": 7}]}
    finally:
        next(gen, None)


def test_a_full_discard_new_target_lands_once_what_it_holds_expired(nats_server: object, tmp_path: Path) -> None:
    """A sourcing target with discard new at ``max_msgs`` 3 whose third sourced message carries
    a 1 s TTL: once it is due, the server's timer has removed it and its source stores the
    fourth. The lake's landing refused the fourth (10077 maximum messages exceeded) and kept
    the expired message; it now expires what is due first, as a publish does."""
    import time

    import pyarrow.compute as pc

    from jsspark.live.landing import land_batch
    from tests.engine.backends import LakeBackend, ServerBackend
    from tests.engine.test_differential import Pair, paired

    gen = paired(ServerBackend(nats_server.url), LakeBackend(jsspark.connect(str(tmp_path))))  # type: ignore[attr-defined]
    pair: Pair = next(gen)
    lake = pair.lake.lake

    def land(first: int) -> None:
        got = lake.stream("DN_O").read(columns=["seq", "ts_ns", "subject", "headers", "data"]).sort_by("seq")
        land_batch(lake, "DN_T", got.filter(pc.greater_equal(got["seq"], first)), form="source",
                   origin={"name": "DN_O"})

    def server_holds(seqs: list[int]) -> None:
        deadline = time.monotonic() + 10
        while [m[0] for m in pair.server.messages("DN_T")] != seqs:
            assert time.monotonic() < deadline, f"the server's target to hold {seqs}"
            time.sleep(0.05)  # polling the server's sourcing and expiry, bounded by the deadline

    try:
        pair.add_stream({"name": "DN_O", "subjects": ["dn_o.>"], "allow_msg_ttl": True})
        pair.add_stream({"name": "DN_T", "sources": [{"name": "DN_O"}], "allow_msg_ttl": True, "max_msgs": 3,
                         "discard": "new"})
        pair.streams += ["DN_T", "DN_O"]
        for data, headers in ((b"1", None), (b"2", None), (b"3", [("Nats-TTL", "1s")])):
            pair.publish("dn_o.a", data, headers)
        land(1)
        server_holds([1, 2])  # the TTL message expired
        pair.publish("dn_o.a", b"4")
        land(4)
        server_holds([1, 2, 4])
        assert [m[0] for m in pair.lake.messages("DN_T")] == [1, 2, 4]
    finally:
        next(gen, None)
