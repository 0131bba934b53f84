"""Two OS processes publishing to one lake stream at once: the union, with unique contiguous
sequences (Delta's txn conflict serialises the commits; losers re-plan)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import jsspark
from jsspark.engine.stream import Incoming
from jsspark.engine.table import MessageTable
from jsspark.errors import APIError, api_error
from tests.engine.backends import LakeBackend
from tests.engine.test_update_stream import UpdatingServer

WRITER = textwrap.dedent(
    """
    import sys, pyarrow as pa, jsspark
    location, tag, batches, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    lake = jsspark.connect(location)
    for b in range(batches):
        subjects = [f"c.{tag}.{b}.{i}" for i in range(size)]
        data = [f"{tag}-{b}-{i}".encode() for i in range(size)]
        lake.publish_batch("C", pa.table({"subject": subjects, "data": data}))
        lake.publish(f"c.{tag}.single.{b}", f"{tag}-single-{b}".encode())
    """
)


def test_two_processes_publish_union_with_contiguous_sequences(tmp_path: Path) -> None:
    location = str(tmp_path / "lake")
    lake = jsspark.connect(location)
    lake.add_stream(name="C", subjects=["c.>"])
    batches, size = 15, 20
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, location, tag, str(batches), str(size)])
        for tag in ("p1", "p2")
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0
    table = lake.stream("C").read(columns=["seq", "data"]).sort_by("seq")
    expected_total = 2 * batches * (size + 1)
    seqs = table["seq"].to_pylist()
    assert seqs == list(range(1, expected_total + 1))
    payloads = sorted(x.decode() for x in table["data"].to_pylist())
    want = sorted(
        [f"{t}-{b}-{i}" for t in ("p1", "p2") for b in range(batches) for i in range(size)]
        + [f"{t}-single-{b}" for t in ("p1", "p2") for b in range(batches)]
    )
    assert payloads == want
    state = lake.stream_info("C").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (expected_total, 1, expected_total, 0)
    # each writer's own messages keep their relative order
    for t in ("p1", "p2"):
        mine = table.filter(pc.starts_with(table["data"].cast("string"), f"{t}-"))
        order = [x.decode() for x in mine["data"].to_pylist()]
        expect = [m for b in range(batches) for m in [*(f"{t}-{b}-{i}" for i in range(size)), f"{t}-single-{b}"]]
        assert order == expect


def test_a_kept_lake_sees_a_stream_deleted_and_created_again_by_another(tmp_path: Path) -> None:
    """A long-lived ``Lake`` (a job's driver, the sink's commit worker) keeps each stream's
    engine and index. Another process deleting the stream and creating one of the same name
    must not leave it on the old stream's index, even where the new table has reached the same
    Delta version."""
    from jsspark.sink.lake_sink import commit_lake

    kept = commit_lake(str(tmp_path), None)
    assert commit_lake(str(tmp_path) + "/", None) is kept  # one per location
    kept.add_stream(name="S", subjects=["s.>"])
    for i in range(3):
        kept.publish("s.a", b"old%d" % i)
    assert kept.stream_info("S").state.messages == 3
    version = kept.stream("S").table.snapshot().version

    other = jsspark.connect(str(tmp_path))
    other.delete_stream("S")
    other.add_stream(name="S", subjects=["s.>"])
    while other.stream("S").table.snapshot().version < version:
        other.publish("s.b", b"new")
    assert other.stream("S").table.snapshot().version == version
    expected = other.stream_info("S").state

    state = kept.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (expected.messages, expected.first_seq, expected.last_seq)
    ack = kept.publish("s.c", b"after")
    assert ack.seq == expected.last_seq + 1
    assert kept.get_msg("S", 1).data == b"new"


@pytest.mark.parametrize("new_commits", [1, 3, 6])
def test_a_held_table_reloads_a_stream_deleted_and_created_again(tmp_path: Path, new_commits: int) -> None:
    """A ``MessageTable`` kept across snapshots (a streaming query's planner) while its stream is
    deleted and created again by another process, whose new table has fewer, as many or more
    Delta versions than the held one: the next snapshot is the new table, never the new log's
    later versions laid over the old snapshot (delta-rs's ``update_incremental``) nor its
    "newest version in the log is older than the existing snapshot" error."""
    from jsspark.engine.table import MessageTable

    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="S", subjects=["s.>"])
    for i in range(3):
        lake.publish("s.a", b"old%d" % i)
    held = MessageTable(lake.stream_uri("S"))
    old = held.snapshot()
    assert (old.version, old.last_seq) == (3, 3)
    old_id = old.table_id

    lake.delete_stream("S")
    lake.add_stream(name="S", subjects=["s.>"])
    for i in range(new_commits):
        lake.publish("s.a", b"new%d" % i)

    snap = held.snapshot()
    assert snap.table_id != old_id
    assert (snap.version, snap.last_seq) == (new_commits, new_commits)
    rows = held.read(snap, columns=["seq", "data"]).sort_by("seq")
    assert rows["data"].to_pylist() == [b"new%d" % i for i in range(new_commits)]
    lake.publish("s.a", b"more")  # and it goes on refreshing incrementally
    assert held.snapshot().last_seq == new_commits + 1


HELD = textwrap.dedent(
    """
    import json, sys, pyarrow as pa, jsspark
    from jsspark.engine import table
    from jsspark.errors import APIError
    location, name, method, n, op = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    original = getattr(table.MessageTable, method)
    first = [True]

    def held(self, *a, **k):
        if first[0]:  # as a slow object store would hold it: until the test says go
            first[0] = False
            print("held", flush=True)
            sys.stdin.readline()
        return original(self, *a, **k)

    setattr(table.MessageTable, method, held)
    lake = jsspark.connect(location)
    try:
        if op == "purge":
            print(json.dumps({"purged": lake.purge(name)}))
        elif op == "delete":
            print(json.dumps({"deleted": lake.delete_msg(name, n)}))
        else:
            ack = lake.publish_batch(name, pa.table({"subject": [f"{name}.b"] * n, "data": [b"b"] * n}))
            print(json.dumps({"stored": ack.stored}))
    except APIError as e:
        print(json.dumps({"error": e.to_dict()}))
    """
)


def _held_publish(location: str, name: str, method: str, n: int, op: str = "publish") -> subprocess.Popen[str]:
    """A process publishing ``n`` messages to ``name`` (or ``op`` "purge": purging it, "delete":
    deleting message ``n``) whose first ``MessageTable.method`` call waits, once it printed
    ``held``, until a line on its stdin."""
    p = subprocess.Popen([sys.executable, "-c", HELD, location, name, method, str(n), op],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def _released(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = p.communicate("go\n", timeout=120)
    assert p.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def _filled(cfg: dict[str, Any], n: int, lake: LakeBackend, server: UpdatingServer) -> None:
    """The stream ``cfg`` on both, with ``n`` messages on ``<name>.a``."""
    for b in (lake, server):
        assert b.add_stream(cfg) == {"ok": True}
        for _ in range(n):
            b.publish(f"{cfg['name']}.a", b"a")


def _updated(cfg: dict[str, Any], update: dict[str, Any], lake: LakeBackend, server: UpdatingServer) -> None:
    """``update`` applied to the stream on both; the stored configs equal."""
    mine = lake.lake.update_stream(**cfg, **update).config.to_json()
    assert mine == server.update_stream({**cfg, **update})["config"]


@pytest.mark.parametrize("update", [{"sealed": True}, {"max_msgs": 10}, {"deny_delete": True, "max_msgs_per_subject": 5}])
def test_an_update_that_replied_decides_a_publish_planned_before_it(
    nats_server: Any, tmp_path: Path, update: dict[str, Any]
) -> None:
    """A publish planned on the old config, its commit held (a slow upload) while another
    process updates the stream: once the update replied, the publish is decided on the new
    config, as the server's are (updates and stores serialise under the stream lock,
    ``processJetStreamMsg`` checks ``Sealed`` and the limits there). Compared with the server
    taking the update, then the publishes."""
    location, name = str(tmp_path / "lake"), "S"
    cfg = {"name": name, "subjects": [f"{name}.>"]}
    lake, server = LakeBackend(jsspark.connect(location)), UpdatingServer(nats_server.url)
    try:
        _filled(cfg, 20, lake, server)
        held = _held_publish(location, name, "commit", 50)  # planned on the old config
        _updated(cfg, update, lake, server)
        answers = {server.publish(f"{name}.b", b"b").get("error", {}).get("err_code") for _ in range(50)}
        outcome = _released(held)
        if update.get("sealed"):
            assert answers == {10109}
            assert outcome == {"error": server.publish(f"{name}.b", b"b")["error"]}
        else:
            assert answers == {None} and "stored" in outcome
        assert lake.state(name) == server.state(name)
    finally:
        server.delete_stream(name)
        server.close()


@pytest.mark.parametrize(("op", "update"), [("purge", {"sealed": True}), ("purge", {"deny_purge": True}),
                                           ("delete", {"sealed": True}), ("delete", {"deny_delete": True})])
def test_an_update_that_replied_decides_a_removal_planned_before_it(
    nats_server: Any, tmp_path: Path, op: str, update: dict[str, Any]
) -> None:
    """A purge or message delete planned on the old config, its commit held while another
    process seals the stream or denies the removal: once the update replied, the removal is
    refused as the server refuses it after the update (10109, 10075 or 10057), nothing removed."""
    location, name = str(tmp_path / "lake"), "R"
    cfg = {"name": name, "subjects": [f"{name}.>"]}
    lake, server = LakeBackend(jsspark.connect(location)), UpdatingServer(nats_server.url)
    try:
        _filled(cfg, 5, lake, server)
        held = _held_publish(location, name, "commit", 2, op)  # delete: message 2
        _updated(cfg, update, lake, server)
        want = server.purge(name) if op == "purge" else server.delete_msg(name, 2)
        assert "error" in want
        assert _released(held) == want
        assert lake.state(name) == server.state(name)
    finally:
        server.delete_stream(name)
        server.close()


def test_a_publish_whose_stream_is_deleted_meanwhile_answers_stream_not_found(tmp_path: Path) -> None:
    """A publish that looked the stream up before another process deleted it finds no table
    when it reads it: the server's stream not found (10059), not delta-rs's error."""
    location = str(tmp_path / "lake")
    lake = jsspark.connect(location)
    lake.add_stream(name="S", subjects=["S.>"])
    held = _held_publish(location, "S", "snapshot", 5)
    lake.delete_stream("S")
    assert _released(held) == {"error": api_error("JSStreamNotFoundErr").to_dict()}


def test_vacuum_while_another_process_publishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vacuum whose table another writer's commit removed files from after it read it
    (delta-rs: "a concurrent transaction deleted data this operation read") vacuums again on
    the new version (its start and end commits change no message) instead of failing."""
    location = str(tmp_path / "lake")
    lake, other = jsspark.connect(location), jsspark.connect(location)
    lake.add_stream(name="S", subjects=["S.>"], max_msgs_per_subject=1)  # each publish removes a file
    lake.publish("S.a", b"1")
    lake.publish("S.a", b"2")  # a removed file for the vacuum to delete
    original, calls = MessageTable.snapshot, [0]

    def raced(self: MessageTable) -> Any:
        snap = original(self)
        calls[0] += 1
        if calls[0] == 1:  # the vacuum's read: another writer commits before the vacuum does
            other.publish("S.a", b"3")
        return snap

    monkeypatch.setattr(MessageTable, "snapshot", raced)
    lake.vacuum("S", retention_hours=0)
    assert calls[0] >= 2
    state = lake.stream_info("S").state
    assert (state.messages, state.last_seq) == (1, 3)
    assert lake.get_msg("S", 3).data == b"3"


def test_a_held_engine_reads_a_config_another_writer_updated(tmp_path: Path) -> None:
    """An engine held across publishes skips the config-mark lookup while it made every commit
    since it last looked; once another writer's update committed its mark, the next publish
    looks, reads the new config and is decided on it (sealed: 10109, nothing stored)."""
    location = str(tmp_path / "lake")
    mine, other = jsspark.connect(location), jsspark.connect(location)
    mine.add_stream(name="S", subjects=["S.>"])
    engine = mine.stream("S")
    for i in range(3):
        assert engine.publish_batch(Incoming.one("S.a", b"%d" % i, None)).acks()[0].seq == i + 1
    other.update_stream(name="S", subjects=["S.>"], sealed=True)
    with pytest.raises(APIError) as refused:
        engine.publish_batch(Incoming.one("S.a", b"late", None))
    assert refused.value.err_code == 10109
    assert other.stream_info("S").state.messages == 3


def test_a_publish_whose_config_reread_sees_another_commit_plans_again(tmp_path: Path) -> None:
    """A held engine that finds another writer's config update in the snapshot it is about to
    plan on rereads the config, and opening the stream again refreshes the table it shares
    with that snapshot. When a third commit landed in between (here another process's
    publish), the publish planned on the older snapshot must not commit on top of it: it took
    seq 2 a second time (two messages with seq 2). It plans again and takes seq 3."""
    location = str(tmp_path / "lake")
    mine, other = jsspark.connect(location), jsspark.connect(location)
    mine.add_stream(name="S", subjects=["S.>"])
    engine = mine.stream("S")
    engine.publish_batch(Incoming.one("S.a", b"first", None))
    other.update_stream(name="S", subjects=["S.>"], description="changed")
    reread = engine.reread_config
    assert reread is not None

    def reread_after_another_publish() -> None:
        assert other.publish("S.b", b"other").seq == 2
        reread()

    engine.reread_config = reread_after_another_publish
    assert engine.publish_batch(Incoming.one("S.a", b"mine", None)).acks()[0].seq == 3
    rows = jsspark.connect(location).stream("S").read(columns=["seq", "data"]).sort_by("seq")
    assert rows["seq"].to_pylist() == [1, 2, 3]
    assert rows["data"].to_pylist() == [b"first", b"other", b"mine"]


def test_a_landing_planned_before_an_update_is_decided_on_the_updated_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source's landing (``store_sourced``) planned while another process lowers the target's
    ``max_msgs`` (discard new) conflicts with the update's config mark and plans again on the new
    config, as a publish does: refused as a landing after the update is (10077, nothing stored),
    where it stored all 10 messages over a limit of 3 for good (discard new never trims)."""
    from jsspark.engine import ingest
    from jsspark.engine.stream import LakeStream

    location = str(tmp_path / "lake")
    mine, other = jsspark.connect(location), jsspark.connect(location)
    mine.add_stream(name="T", subjects=["t.>"], discard="new")
    original, fired = LakeStream.landing, [False]

    def landing(self: LakeStream, index: Any, rows: Any) -> Any:
        if not fired[0]:
            fired[0] = True
            other.update_stream(name="T", subjects=["t.>"], discard="new", max_msgs=3)
        return original(self, index, rows)

    monkeypatch.setattr(LakeStream, "landing", landing)
    rows = pa.table({"seq": pa.array(range(1, 11), pa.int64()), "subject": [f"o.{i}" for i in range(10)],
                     "data": [b"x"] * 10})
    with pytest.raises(APIError) as refused:
        ingest.store_sourced(mine, "T", rows, origin="O")
    assert refused.value.err_code == 10077
    monkeypatch.undo()
    assert jsspark.connect(location).stream_info("T").state.messages == 0
    with pytest.raises(APIError) as after:  # the same landing once the update is in
        ingest.store_sourced(jsspark.connect(location), "T", rows, origin="O")
    assert after.value.to_dict() == refused.value.to_dict()


def test_an_upkeep_compaction_committed_above_another_writers_appends_leaves_no_stale_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer that owes a table upkeep compacts after its commit; delta-rs commits the
    compaction above other writers' appends that came in between (they touch none of its
    files). The writer's index then lacked those appends while taken as exact at the
    compaction's version: its next commit recorded 3 messages too few (found by
    ``bench/contention.py`` with 8 writers: state 20,500 messages, 20,503 stored)."""
    from jsspark.engine import maintenance

    location = str(tmp_path / "lake")
    mine, other = jsspark.connect(location), jsspark.connect(location)
    mine.add_stream(name="S", subjects=["s.>"])
    monkeypatch.setattr(maintenance, "EVERY", 5)
    compact, raced = MessageTable.compact, [0]

    def compact_after_others(self: MessageTable, *args: Any, **kwargs: Any) -> Any:
        if not raced[0]:
            raced[0] = 1
            for i in range(3):
                other.publish("s.other", b"%d" % i)
        return compact(self, *args, **kwargs)

    monkeypatch.setattr(MessageTable, "compact", compact_after_others)
    for i in range(6):  # one of these commits version 5 and compacts
        mine.publish("s.mine", b"%d" % i)
    assert raced == [1]
    mine.publish("s.mine", b"last")
    monkeypatch.undo()
    stored = jsspark.connect(location).stream("S").read(columns=["seq"])
    state = mine.stream_info("S").state
    assert (state.messages, state.last_seq) == (stored.num_rows, 10) == (10, 10)


def _lose_the_next_race(monkeypatch: pytest.MonkeyPatch, other: Any, subject: str, n: int) -> list[int]:
    """Make this process's next commit lose: ``other`` publishes ``n`` messages first."""
    original, lost = MessageTable.commit, [0]

    def raced(self: MessageTable, *args: Any, **kwargs: Any) -> int:
        if not lost[0]:
            lost[0] = 1
            for i in range(n):
                other.publish(subject, b"other%d" % i)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MessageTable, "commit", raced)
    return lost


def test_a_writer_that_lost_the_race_reads_only_what_the_winners_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish whose commit lost to other writers' plans again on the new version with its
    index carried forward by the files those commits added and removed (read from the Delta
    log), not by reading every file of the table again as a new process does: the winners
    update theirs by their own commits, so a loser that rebuilt lost again and again (8
    processes: waits of up to 17 s and 63 attempts, ``bench/contention.py``)."""
    from deltalake import DeltaTable

    from tests.engine.log_reads import count_txn_lookups

    location = str(tmp_path / "lake")
    mine, other = jsspark.connect(location), jsspark.connect(location)
    mine.add_stream(name="S", subjects=["s.>"], max_msgs_per_subject=2, duplicate_window=60.0)
    for i in range(20):
        mine.publish(f"s.{i % 10}", b"mine%d" % i, headers={"Nats-Msg-Id": f"m{i}"})
    other.publish("s.0", b"other-first", headers={"Nats-Msg-Id": "o1"})
    full_reads: list[int] = []
    reads, datasets = MessageTable.read, DeltaTable.to_pyarrow_dataset
    monkeypatch.setattr(MessageTable, "read", lambda self, *a, **k: full_reads.append(1) or reads(self, *a, **k))
    monkeypatch.setattr(DeltaTable, "to_pyarrow_dataset",
                        lambda self, *a, **k: full_reads.append(2) or datasets(self, *a, **k))
    looked = count_txn_lookups(monkeypatch)
    ack = mine.publish("s.2", b"dup", headers={"Nats-Msg-Id": "o1"})
    assert (ack.seq, ack.duplicate) == (21, True)  # the other writer's id, known once caught up
    lost = _lose_the_next_race(monkeypatch, other, "s.1", 3)  # each removes the oldest message of s.1
    ack = mine.publish("s.2", b"mine-last", headers={"Nats-Msg-Id": "m-last"})
    assert lost == [1]
    assert (ack.seq, bool(ack.duplicate)) == (25, False)
    assert (full_reads, looked) == ([], [])
    monkeypatch.undo()
    fresh = jsspark.connect(location)
    rows = fresh.stream("S").read(columns=["seq", "subject"]).sort_by("seq")
    per_subject: dict[str, int] = {}
    for s in rows["subject"].to_pylist():
        per_subject[s] = per_subject.get(s, 0) + 1
    assert max(per_subject.values()) == 2
    state = mine.stream_info("S").state
    assert (state.messages, state.last_seq, state.num_subjects) == (rows.num_rows, 25, len(per_subject))
    assert mine.stream("S")._load()[1].rows.equals(fresh.stream("S")._load()[1].rows)


def test_a_publish_that_loses_every_race_gives_up_in_time_naming_the_stream_and_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Losing the race for the next version is retried (after a random wait that grows) until
    ``GIVE_UP_SECONDS``, a bound on the caller's wait whatever an attempt costs; then the error
    names the stream, what it did and how many attempts it made."""
    from jsspark.engine import contention
    from jsspark.engine.table import ConcurrentCommit

    location = str(tmp_path / "lake")
    lake = jsspark.connect(location)
    lake.add_stream(name="S", subjects=["s.>"])
    attempts = [0]

    def always_lost(self: MessageTable, *args: Any, **kwargs: Any) -> int:
        attempts[0] += 1
        raise ConcurrentCommit("another writer committed first")

    monkeypatch.setattr(MessageTable, "commit", always_lost)
    monkeypatch.setattr(contention, "GIVE_UP_SECONDS", 1.5)  # >10x a loaded first attempt (0.14 s)
    with pytest.raises(contention.GaveUp, match=r"^stream S: gave up publishing after \d+ attempts in \d+s: ") as gave_up:
        lake.publish("s.a", b"x")
    assert f"after {attempts[0]} attempts" in str(gave_up.value)
    assert attempts[0] > 1
    monkeypatch.undo()
    assert lake.stream_info("S").state.messages == 0
