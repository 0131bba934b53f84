"""A lake process SIGKILLed between the steps of a stream operation: the next process to open
the stream finds what a nats-server finds after a crash (its store recovered, the config's limits
and interest retention applied), and a stream's creation is one commit, never half done.

Each kill is placed by monkeypatching one jsspark function in a child process; the server side
of each comparison runs the same requests, uninterrupted (a server applies them atomically, and
applies them again when it recovers a store)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import jsspark
from jsspark.engine.stream import NoRespondersError
from jsspark.errors import MessageNotFoundError, StreamNotFoundError
from jsspark.nats_server import NatsServer
from tests.engine.backends import ServerBackend

KILL = "import os, signal\ndef die(*a, **k):\n    os.kill(os.getpid(), signal.SIGKILL)\n"


def run_killed(location: str, body: str) -> None:
    """Run ``body`` in a child process with ``location`` as ``loc``; it must die by SIGKILL."""
    code = "import sys, jsspark\nloc = sys.argv[1]\n" + KILL + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code, location], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr


@pytest.fixture
def srv(nats_server: NatsServer) -> Iterator[ServerBackend]:
    backend = ServerBackend(nats_server.url)
    yield backend
    backend.close()


def state_of(info: Any) -> dict[str, int]:
    s = info.state
    return {"messages": s.messages, "first_seq": s.first_seq, "last_seq": s.last_seq}


def server_state(srv: ServerBackend, name: str) -> dict[str, int]:
    s = srv.state(name)
    return {k: s[k] for k in ("messages", "first_seq", "last_seq")}


# -- limits lowered by an update ---------------------------------------------------------------


def test_update_killed_before_its_limits_are_applied_on_the_next_open(tmp_path: Path, srv: ServerBackend) -> None:
    """``update_stream`` commits the lowered ``max_msgs`` and dies before enforcing it: the next
    open enforces it, as the file store does in ``UpdateConfig`` and again on recovery."""
    loc = str(tmp_path)
    lake = jsspark.connect(loc)
    lake.add_stream(name="UK", subjects=["uk.>"])
    lake.publish_batch("UK", pa.table({"subject": [f"uk.{i % 7}" for i in range(400)], "data": [b"x"] * 400}))
    run_killed(loc, """
        from jsspark.engine import stream
        stream.LakeStream.enforce_limits = die
        jsspark.connect(loc).update_stream(name="UK", subjects=["uk.>"], max_msgs=50)
    """)
    srv.delete_stream("UK")
    srv.add_stream({"name": "UK", "subjects": ["uk.>"]})
    for i in range(400):
        srv.publish(f"uk.{i % 7}", b"x")
    srv._req("$JS.API.STREAM.UPDATE.UK", {"name": "UK", "subjects": ["uk.>"], "max_msgs": 50})

    reopened = jsspark.connect(loc)
    info = reopened.stream_info("UK")
    assert info.config.max_msgs == 50  # the update's commit happened
    assert state_of(info) == server_state(srv, "UK") == {"messages": 50, "first_seq": 351, "last_seq": 400}
    with pytest.raises(MessageNotFoundError):
        reopened.get_msg("UK", seq=1)
    assert srv.msg_get("UK", seq=1)["error"]["err_code"] == 10037


@pytest.mark.parametrize(
    "lowered",
    [{"max_msgs_per_subject": 3}, {"max_age": 200_000_000}],
    ids=["max_msgs_per_subject", "max_age"],
)
def test_an_update_lowering_a_subject_or_age_limit_killed_before_applying_it(
    tmp_path: Path, srv: ServerBackend, lowered: dict[str, int]
) -> None:
    """As above for the limits the recorded state cannot show: the file store's recovery runs
    ``expireMsgsOnRecover`` and ``enforceMsgPerSubjectLimit`` too. One subject holds 10
    messages and ten hold one each, so only that subject is over (20 messages < 3 x 11)."""
    loc = str(tmp_path)
    subjects = ["uk.hot"] * 10 + [f"uk.{i}" for i in range(10)]
    lake = jsspark.connect(loc)
    lake.add_stream(name="UK", subjects=["uk.>"])
    lake.publish_batch("UK", pa.table({"subject": subjects, "data": [b"x"] * 20}))
    srv.delete_stream("UK")
    srv.add_stream({"name": "UK", "subjects": ["uk.>"]})
    for s in subjects:
        srv.publish(s, b"x")
    newest = lake.stream_info("UK").state.last_ts_ns
    deadline = time.monotonic() + 10
    while time.time_ns() - newest <= lowered.get("max_age", 0) and time.monotonic() < deadline:
        time.sleep(0.02)  # the messages must have aged past the lowered max_age: the scenario, not a sync
    run_killed(loc, f"""
        from jsspark.engine import stream
        stream.LakeStream.enforce_limits = die
        jsspark.connect(loc).update_stream({{"name": "UK", "subjects": ["uk.>"], **{lowered!r}}})
    """)
    assert "error" not in srv._req("$JS.API.STREAM.UPDATE.UK", {"name": "UK", "subjects": ["uk.>"], **lowered})

    reopened = jsspark.connect(loc)
    info = reopened.stream_info("UK")
    assert info.config.to_json()[next(iter(lowered))] == next(iter(lowered.values()))  # the update's commit happened
    expected = {"messages": 13, "first_seq": 8, "last_seq": 20} if "max_msgs_per_subject" in lowered else {
        "messages": 0, "first_seq": 21, "last_seq": 20}
    assert state_of(info) == server_state(srv, "UK") == expected
    with pytest.raises(MessageNotFoundError):
        reopened.get_msg("UK", seq=1)
    assert srv.msg_get("UK", seq=1)["error"]["err_code"] == 10037


def test_a_retention_change_to_interest_killed_before_applying_it(tmp_path: Path, srv: ServerBackend) -> None:
    """``update_stream`` to interest retention on a stream with no consumer commits and dies
    before dropping the messages (``to_interest``): the server's update drops them all (an
    interest stream keeps nothing nobody is interested in), and the next open now does too; it
    kept all five."""
    loc = str(tmp_path)
    lake = jsspark.connect(loc)
    lake.add_stream(name="IN", subjects=["in.>"])
    for _ in range(5):
        lake.publish("in.a", b"x")
    run_killed(loc, """
        from jsspark.engine import consumers
        consumers.Consumers.to_interest = die
        jsspark.connect(loc).update_stream(name="IN", subjects=["in.>"], retention="interest")
    """)
    srv.delete_stream("IN")
    srv.add_stream({"name": "IN", "subjects": ["in.>"]})
    for _ in range(5):
        srv.publish("in.a", b"x")
    try:
        assert srv._req("$JS.API.STREAM.UPDATE.IN", {"name": "IN", "subjects": ["in.>"], "retention": "interest"})[
            "config"]["retention"] == "interest"
        info = jsspark.connect(loc).stream_info("IN")
        assert info.config.retention.value == "interest"  # the update's commit happened
        assert state_of(info) == server_state(srv, "IN") == {"messages": 0, "first_seq": 6, "last_seq": 5}
    finally:
        srv.delete_stream("IN")


# -- work queue: an ack whose removal a crash interrupted ---------------------------------------


def test_work_queue_ack_killed_before_the_removal_is_finished_on_the_next_open(
    tmp_path: Path, srv: ServerBackend
) -> None:
    """The ack's catalog commit lands, the removal does not: the next open removes the acked
    message (``checkInterestState`` at startup) and a new consumer never gets it again."""
    loc = str(tmp_path)
    lake = jsspark.connect(loc)
    lake.add_stream(name="WK", subjects=["wk.>"], retention="workqueue")
    lake.add_consumer("WK", durable_name="W", ack_policy="explicit")
    for i in range(5):
        lake.publish("wk.a", b"job%d" % i)
    run_killed(loc, """
        from jsspark.engine import consumers
        consumers.Consumers._after_ack = die
        lake = jsspark.connect(loc)
        seqs = lake.next_seqs("WK", "W", 3)
        lake.record_delivered("WK", "W", seqs[-1])
        lake.ack("WK", "W", seqs[0])
    """)
    srv.delete_stream("WK")
    srv.add_stream({"name": "WK", "subjects": ["wk.>"], "retention": "workqueue"})
    srv.add_consumer("WK", {"durable_name": "W", "ack_policy": "explicit"})
    for i in range(5):
        srv.publish("wk.a", b"job%d" % i)
    got = srv.fetch("WK", "W", 3)
    srv.ack("WK", "W", got[0][0], got[0][1])

    reopened = jsspark.connect(loc)
    assert reopened.consumer_info("WK", "W").ack_floor.stream_seq == 1
    assert state_of(reopened.stream_info("WK")) == server_state(srv, "WK") == {
        "messages": 4, "first_seq": 2, "last_seq": 5}
    reopened.delete_consumer("WK", "W")
    reopened.add_consumer("WK", durable_name="W2", ack_policy="explicit")
    srv.consumer_delete("WK", "W")
    srv.add_consumer("WK", {"durable_name": "W2", "ack_policy": "explicit"})
    assert reopened.next_seqs("WK", "W2", 10) == [s for s, _, _ in srv.fetch("WK", "W2", 10)] == [2, 3, 4, 5]


# -- creation and deletion are one commit each ---------------------------------------------------

CREATE = 'jsspark.connect(loc).add_stream(name="S", subjects=["s.>"], first_seq=100)\n'


@pytest.mark.parametrize(
    "kill",
    [
        # entering the table's creation
        "from jsspark.engine import table\ntable.MessageTable.create = classmethod(die)\n",
        # with the table made
        "from jsspark.engine import table\norig = table.MessageTable.create.__func__\n"
        "table.MessageTable.create = classmethod(lambda cls, *a, **k: (orig(cls, *a, **k), die()))\n",
        # right after the stream's catalog commit
        "from jsspark.engine import catalog\norig = catalog.Catalog.transact\n"
        "catalog.Catalog.transact = lambda self, plan: (orig(self, plan), die())\n",
    ],
    ids=["entering-table-create", "table-made", "after-catalog-commit"],
)
def test_add_stream_killed_anywhere_leaves_no_half_made_stream(
    tmp_path: Path, srv: ServerBackend, kill: str
) -> None:
    """Killed at any step, the stream either exists whole (its first message at ``first_seq``)
    or not at all (10059, not listed, and creating it again works), as the server's atomic create."""
    loc = str(tmp_path)
    jsspark.connect(loc).add_stream(name="OTHER", subjects=["o"])
    run_killed(loc, kill + CREATE)
    lake = jsspark.connect(loc)
    try:
        lake.stream_info("S")
    except StreamNotFoundError:
        assert [i.config.name for i in lake.streams_info()] == ["OTHER"]
        with pytest.raises(NoRespondersError):
            lake.publish("s.a", b"x")
    info = lake.add_stream(name="S", subjects=["s.>"], first_seq=100)
    assert state_of(info) == {"messages": 0, "first_seq": 100, "last_seq": 99}
    srv.delete_stream("S")
    srv.add_stream({"name": "S", "subjects": ["s.>"], "first_seq": 100})
    assert lake.publish("s.a", b"x").seq == srv.publish("s.a", b"x")["seq"] == 100
    assert lake.stream_info("S").config.first_seq == 100


def test_delete_killed_before_removing_the_table_leaves_the_name_free(tmp_path: Path) -> None:
    """The delete's catalog commit is the delete: a table it left is no stream, and a new
    stream of the name starts at seq 1 (the server's new stream after a delete)."""
    loc = str(tmp_path)
    lake = jsspark.connect(loc)
    lake.add_stream(name="D", subjects=["d.>"])
    for _ in range(3):
        lake.publish("d.a", b"x")
    run_killed(loc, 'from jsspark.engine import lake as L\nL._remove_tree = die\njsspark.connect(loc).delete_stream("D")\n')
    lake = jsspark.connect(loc)
    with pytest.raises(StreamNotFoundError):
        lake.stream_info("D")
    assert state_of(lake.add_stream(name="D", subjects=["d.>"])) == {"messages": 0, "first_seq": 0, "last_seq": 0}
    assert lake.publish("d.a", b"y").seq == 1


CREATOR_PAUSED = """
import os, sys, time, jsspark
from jsspark.engine import table
orig = table.MessageTable.create.__func__
def paused(cls, *a, **k):
    made = orig(cls, *a, **k)
    print("created", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return made
table.MessageTable.create = classmethod(paused)
jsspark.connect(sys.argv[1]).add_stream(name="S", subjects=["s.>"], first_seq=100)
print("done", flush=True)
"""


def test_nothing_is_acked_inside_a_creation_that_is_not_committed(tmp_path: Path) -> None:
    """Another process publishing while a creation is under way gets no responders (the stream
    does not exist yet) rather than an ack for a message the creation's ``first_seq`` then
    purges; the first message after it gets seq 100 and stays."""
    loc, go = str(tmp_path / "lake"), tmp_path / "go"
    creator = subprocess.Popen([sys.executable, "-c", CREATOR_PAUSED, loc, str(go)], stdout=subprocess.PIPE, text=True)
    try:
        assert creator.stdout is not None
        assert creator.stdout.readline().strip() == "created"
        lake = jsspark.connect(loc)
        acked = []
        with contextlib.suppress(NoRespondersError):
            acked.append(lake.publish("s.a", b"inside").seq)
        with pytest.raises(StreamNotFoundError):
            lake.stream_info("S")
        go.touch()
        assert creator.stdout.readline().strip() == "done"
        assert creator.wait(timeout=60) == 0
    finally:
        go.touch()
        creator.kill()
    acked.append(lake.publish("s.a", b"after").seq)
    assert acked == [100]
    assert [lake.get_msg("S", seq=s).seq for s in acked] == acked


CREATOR = """
import os, sys, time, jsspark
from jsspark.errors import APIError
from jsspark.engine import lake as L, table
def held(step, orig):
    def run(*a, **k):
        if step == "clearing":
            print("clearing", flush=True)
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.01)
        return orig(*a, **k)
    return run
if sys.argv[4] == "made":  # held with its table made, before its catalog commit
    made = table.MessageTable.create.__func__
    def create(cls, *a, **k):
        t = made(cls, *a, **k)
        print("created", flush=True)
        held("made", lambda: None)()
        return t
    table.MessageTable.create = classmethod(create)
else:  # held where it clears another's table
    L._remove_tree = held("clearing", L._remove_tree)
try:
    info = jsspark.connect(sys.argv[1]).add_stream(name="S", subjects=["s.>"], first_seq=int(sys.argv[2]))
    print("ok", info.config.first_seq, flush=True)
except APIError as e:
    print("error", e.code, e.err_code, e.description, flush=True)
"""


def test_two_creators_of_one_name_with_other_configs_answer_one_success_and_10058(
    tmp_path: Path, srv: ServerBackend
) -> None:
    """Creator A (``first_seq`` 1) has made its table and not yet committed; creator B
    (``first_seq`` 100) finds that table, no stream record, and clears it. The server takes two
    creates of a name with other configs as one success and 10058, and keeps what the first one's
    stream acked. The lake answered both with success: B cleared A's table after A's commit,
    so A's stream and a message it had acked were gone."""
    loc, go_a, go_b = str(tmp_path / "lake"), tmp_path / "go_a", tmp_path / "go_b"
    a = subprocess.Popen([sys.executable, "-c", CREATOR, loc, "1", str(go_a), "made"], stdout=subprocess.PIPE, text=True)
    b = None
    try:
        assert a.stdout is not None and a.stdout.readline().strip() == "created"
        b = subprocess.Popen([sys.executable, "-c", CREATOR, loc, "100", str(go_b), "clearing"],
                             stdout=subprocess.PIPE, text=True)
        assert b.stdout is not None and b.stdout.readline().strip() == "clearing"
        go_a.touch()
        answer_a = a.stdout.readline().strip()
        lake = jsspark.connect(loc)
        acked = []
        with contextlib.suppress(NoRespondersError):
            acked.append(lake.publish("s.a", b"acked").seq)  # into A's stream, if A's create succeeded
        go_b.touch()
        answer_b = b.stdout.readline().strip()
        assert a.wait(timeout=60) == 0 and b.wait(timeout=60) == 0
    finally:
        go_a.touch()
        go_b.touch()
        a.kill()
        if b is not None:
            b.kill()
    srv.delete_stream("S")
    try:
        assert srv.add_stream({"name": "S", "subjects": ["s.>"], "first_seq": 1}) == {"ok": True}
        refused = srv.add_stream({"name": "S", "subjects": ["s.>"], "first_seq": 100})["error"]
    finally:
        srv.delete_stream("S")  # the session's server: other modules name streams S too
    assert refused == {"code": 400, "err_code": 10058,
                       "description": "stream name already in use with a different configuration"}
    answers = {answer_a, answer_b}
    assert answers in ({"ok 1", "error 400 10058 " + refused["description"]},
                       {"ok 100", "error 400 10058 " + refused["description"]}), answers
    winner = 1 if "ok 1" in answers else 100
    lake = jsspark.connect(loc)
    assert lake.stream_info("S").config.first_seq == winner
    acked.append(lake.publish("s.a", b"after").seq)
    assert [lake.get_msg("S", seq=s).seq for s in acked] == acked  # nothing acked was lost


RACER = """
import sys, collections, jsspark
from jsspark.errors import APIError
from jsspark.engine.stream import NoRespondersError
lake = jsspark.connect(sys.argv[1]); odd = collections.Counter()
for _ in range(int(sys.argv[2])):
    for step in ("add", "pub", "del"):
        try:
            if step == "add": lake.add_stream(name="S", subjects=["s.>"])
            elif step == "pub": lake.publish("s.x", b"x")
            else: lake.delete_stream("S")
        except APIError as e:
            if e.err_code not in (10058, 10059):
                odd[f"{step} {e.err_code}"] += 1
        except NoRespondersError:
            pass
        except Exception as e:
            odd[f"{step} {type(e).__name__}: {str(e)[:80]}"] += 1
print(dict(odd))
"""


def test_racing_creates_and_deletes_answer_only_with_jetstream_errors(tmp_path: Path) -> None:
    """Two processes creating, publishing to and deleting one stream in loops: every failure
    is 10058 / 10059 / no responders, as on the server, and the stream ends usable."""
    loc = str(tmp_path)
    jsspark.connect(loc).add_stream(name="OTHER", subjects=["o"])
    procs = [subprocess.Popen([sys.executable, "-c", RACER, loc, "40"], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0].strip() for p in procs]
    assert outs == ["{}", "{}"]
    lake = jsspark.connect(loc)
    if "S" not in lake.stream_names():
        lake.add_stream(name="S", subjects=["s.>"])
    last = lake.stream_info("S").state.last_seq
    assert lake.publish("s.x", b"y").seq == last + 1
