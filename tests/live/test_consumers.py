"""The live source's consumer handling without Spark: binding rules, Interest origins, resets
made by another process, and secrets kept out of errors. ``Ingestor`` is driven the way Spark
drives it: ``latest(start)`` -> ``plan(start, end)`` -> read -> the next ``latest(end)``."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jsspark.datasource.options import OptionError
from jsspark.datasource.partition import DataLossError
from jsspark.live import consumer as C
from jsspark.live.ingestor import Ingestor, LiveSourceError
from jsspark.live.options import parse_live_read_options
from jsspark.live.spill import mark_landed, read_spill
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_crashes import fast_publish
from tests.live.test_durable_source import wait_for
from tests.rawnats import RawNats

pytestmark = [pytest.mark.nats]


def read_range(ing: Ingestor, start: int, end: int) -> list[int]:
    parts = ing.plan(start, end)
    batches = [b for p in parts for b in read_spill(p)]
    return pa.Table.from_batches(batches).column("seq").to_pylist() if batches else []


def drain(ing: Ingestor, start: int, until: int, timeout: float = 30) -> tuple[int, list[int]]:
    """Run batches up to exactly ``until`` (at most 400 messages each); every batch is
    'committed' by the next call."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while start < until:
        assert time.monotonic() < deadline, f"stuck at {start}"
        end = ing.latest(start, min(400, until - start), None)
        if end > start:
            got.extend(read_range(ing, start, end))
            start = end
    ing.latest(start, 400, None)  # commits the last batch
    return start, got


def opts(url: str, stream: str, tmp: Path, **kw: str) -> object:
    return parse_live_read_options({"servers": url, "stream": stream, "spillDir": str(tmp), **kw})


def test_user_managed_binding_requires_flow_control(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    nats.add_stream(name="UM", subjects=["um.>"])
    resp = nats.api("CONSUMER.CREATE.UM.explicit", {"stream_name": "UM", "config": {
        "durable_name": "explicit", "deliver_subject": "dlv.um.x", "ack_policy": "explicit"}})
    assert "error" not in resp, resp
    ing = Ingestor(opts(server.url, "UM", tmp_path, consumerMode="user", consumer="explicit",
                        deliverSubject="dlv.um.x"))
    with pytest.raises(LiveSourceError, match=r"10217.*stream source consumer requires flow control ack policy"):
        ing.start(None)
    ing.stop()
    resp = nats.api("CONSUMER.CREATE.UM.fc", {"stream_name": "UM", "config": {
        "durable_name": "fc", "deliver_subject": "dlv.um.fc", "ack_policy": "flow_control",
        "flow_control": True, "idle_heartbeat": 1_000_000_000, "max_ack_pending": 100}})
    assert "error" not in resp, resp
    wrong = Ingestor(opts(server.url, "UM", tmp_path, consumerMode="user", consumer="fc", deliverSubject="dlv.um.other"))
    with pytest.raises(LiveSourceError, match="10215"):
        wrong.start(None)
    wrong.stop()
    fast_publish(nats, "um", 0, 250)
    ing = Ingestor(opts(server.url, "UM", tmp_path, consumerMode="user", consumer="fc", deliverSubject="dlv.um.fc"))
    ing.start(None)
    try:
        _, got = drain(ing, ing.floor, 250)
        assert got == list(range(1, 251))  # max_ack_pending 100 < 250: progress needs our acks
    finally:
        ing.stop()


def test_interest_origin_keeps_messages_until_committed(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    nats.add_stream(name="INT", subjects=["int.>"], retention="interest")
    ing = Ingestor(opts(server.url, "INT", tmp_path, consumer="lake"))
    ing.start(None)  # the durable exists before publishing: it holds interest
    try:
        fast_publish(nats, "int", 0, 1_000)
        end = 0
        wait_for(lambda: ing.latest(0, None, None) >= 1_000, 20, "1000 buffered")
        end = ing.latest(0, 600, None)
        assert read_range(ing, 0, end) == list(range(1, end + 1))
        seen = ing.controls_seen
        wait_for(lambda: ing.controls_seen >= seen + 2, 10, "two heartbeats or flow-control requests")
        assert nats.state("INT")["messages"] == 1_000  # answered them, nothing committed: nothing acked
        end2 = ing.latest(end, None, None)  # commits (0, end]
        wait_for(lambda: nats.state("INT")["first_seq"] == end + 1, 10, "acks up to the committed batch")
        assert nats.state("INT")["messages"] == 1_000 - end
        assert read_range(ing, end, end2) == list(range(end + 1, 1_001))
        ing.latest(end2, None, None)
        wait_for(lambda: nats.state("INT")["messages"] == 0, 10, "everything acked")
    finally:
        ing.stop()


def test_reset_by_another_process(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    nats.add_stream(name="RS", subjects=["rs.>"])
    fast_publish(nats, "rs", 0, 600)
    ing = Ingestor(opts(server.url, "RS", tmp_path, consumer="lake"))
    ing.start(None)
    try:
        start, got = drain(ing, 0, 300)
        # backward: redelivers what we already have; nothing may appear twice
        resp = nats.api("CONSUMER.RESET.RS.lake", {"seq": 1})
        assert "error" not in resp, resp
        start, more = drain(ing, start, 600)
        assert got + more == list(range(1, 601))
        # forward: the origin skips 601..700 for this consumer; they are not invented
        fast_publish(nats, "rs", 600, 200)
        resp = nats.api("CONSUMER.RESET.RS.lake", {"seq": 701})
        assert "error" not in resp, resp
        wait_for(lambda: ing.latest(start, None, None) >= 800, 20, "delivery after the forward reset")
        tail = read_range(ing, start, 800)
        assert set(tail) <= set(range(601, 801)) and tail[-100:] == list(range(701, 801))
        ing.latest(800, None, None)
        wait_for(lambda: nats.api("CONSUMER.INFO.RS.lake")["ack_floor"]["stream_seq"] == 800, 10, "acks resume")
    finally:
        ing.stop()


@pytest.mark.parametrize("retention", ["workqueue", "limits"])
def test_an_ack_that_crosses_a_reset_by_another_process(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                        retention: str) -> None:
    """An answer to a flow-control request sent just before another process reset the durable
    can reach the server just after it (``test_consumer_reset_by_another_process_during_ingest``
    hit it): a reset leaves the request outstanding, so its answer's ack is taken, naming a
    delivery seq of the old generation; the server then drops every ack of the new one up to
    that seq, and at ``max_ack_pending`` (200) delivers nothing more, for good. Made at will:
    the reader acked up to 1,000 (delivery seq 1,000) and holds the request the server sent at
    ``max_ack_pending``; a reset, then that request answered with the ack of 1,000 again.

    - WorkQueue, reset to seq 1 (the oldest stored, 1,001): the durable's store refuses that ack
      (seq 1,000 is not pending), so its ack floor stays below the reader's next ack.
    - Limits, reset to seq 801: the answer comes once 801..1,000 are delivered again (delivery
      seqs 1..200), so the store takes it (ack floor delivery seq 1,000) and shows more pending
      than delivered above it. The reader commits nothing more until its repair.

    Either way the reader finds its durable acked out of order, resets it and reads on."""
    name = f"XR{retention[0]}".upper()
    nats.add_stream(name=name, subjects=[f"{name.lower()}.>"], retention=retention)
    fast_publish(nats, name.lower(), 0, 3_000)
    ing = Ingestor(opts(server.url, name, tmp_path, consumer="lake", maxAckPending="200"))
    ing.start(None)
    try:
        start, got = drain(ing, 0, 1_000)
        wait_for(lambda: nats.api(f"CONSUMER.INFO.{name}.lake")["ack_floor"]["stream_seq"] == 1_000, 30,
                 "acks up to 1,000")
        assert nats.api(f"CONSUMER.INFO.{name}.lake")["ack_floor"]["consumer_seq"] == 1_000
        wait_for(lambda: ing._held_fc is not None, 10, "the request at max_ack_pending, held")
        request = ing._held_fc
        back = 1 if retention == "workqueue" else 801
        assert "error" not in nats.api(f"CONSUMER.RESET.{name}.lake", {"seq": back})
        if retention == "limits":
            wait_for(lambda: nats.api(f"CONSUMER.INFO.{name}.lake")["delivered"]["stream_seq"] >= 1_000, 10,
                     "801..1,000 delivered again")

        async def stale_answer() -> None:
            await nats.nc.publish(request, b"", headers={"Nats-Last-Stream": "1000", "Nats-Last-Consumer": "1000"})
            await nats.nc.flush()

        nats.run(stale_answer())
        if retention == "limits":
            info = nats.api(f"CONSUMER.INFO.{name}.lake")
            assert info["ack_floor"]["consumer_seq"] == 1_000 > info["delivered"]["consumer_seq"]
            wait_for(lambda: ing.ack_repairs == 1, 30, "the reader's repair")
        _, more = drain(ing, start, 3_000)
        assert got + more == list(range(1, 3_001))
        wait_for(lambda: nats.api(f"CONSUMER.INFO.{name}.lake")["ack_floor"]["stream_seq"] == 3_000, 30,
                 "acks up to 3,000")
        # the server moves the ack floor first and removes what the ack covers after (processAckMsg)
        kept = 0 if retention == "workqueue" else 3_000
        wait_for(lambda: nats.state(name)["messages"] == kept, 30, "what the acks cover removed",
                 lambda: str(nats.state(name)))
        assert ing.ack_repairs == 1
    finally:
        ing.stop()


@pytest.mark.parametrize(("retention", "floor"), [("workqueue", 2_500), ("workqueue", None), ("interest", 2_500)])
def test_acked_messages_still_stored_are_cleared(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                 retention: str, floor: int | None) -> None:
    """A nats-server killed while an ack's removals run comes back with the durable's ack floor
    and the oldest acked messages still stored (``tests/live/test_crashes.py`` hits it); on a
    WorkQueue a standalone server never removes them, on an Interest stream the reset that binds
    us does. The same state, made at will: the durable acked (and the origin removed) up to
    2,000, then a reset ahead put its ack floor at 2,500 with 2,001..2,500 still stored. The
    next reader to bind (from Spark's checkpoint at 2,500, or a new query) clears them without
    reading them again: it reads 2,501..3,000 and the origin ends empty."""
    name = f"OR{retention[0]}{'C' if floor else 'N'}".upper()
    nats.add_stream(name=name, subjects=[f"{name.lower()}.>"], retention=retention)
    first = Ingestor(opts(server.url, name, tmp_path / "first", consumer="lake"))
    first.start(0)  # the durable exists before publishing: it holds interest
    try:
        fast_publish(nats, name.lower(), 0, 3_000)
        drain(first, 0, 2_000)
        wait_for(lambda: nats.state(name)["first_seq"] == 2_001, 30, "acks up to 2,000", lambda: str(nats.state(name)))
    finally:
        first.stop()
    assert "error" not in nats.api(f"CONSUMER.RESET.{name}.lake", {"seq": 2_501})
    assert nats.api(f"CONSUMER.INFO.{name}.lake")["ack_floor"]["stream_seq"] == 2_500
    assert nats.state(name)["messages"] == (1_000 if retention == "workqueue" else 500)
    again = Ingestor(opts(server.url, name, tmp_path / "again", consumer="lake"))
    again.start(floor)
    try:
        assert again.floor == 2_500
        _, got = drain(again, again.floor, 3_000)
        assert got == list(range(2_501, 3_001))
        wait_for(lambda: nats.state(name)["messages"] == 0, 30, "the origin acked empty",
                 lambda: str(nats.state(name)))
        assert again.orphan_resets == (1 if retention == "workqueue" else 0)
    finally:
        again.stop()


def test_acked_messages_still_stored_are_cleared_while_reading(server: NatsServer, nats: SyncNats,
                                                              tmp_path: Path) -> None:
    """The same state made while the reader runs: it holds 1..3,000, has acked up to 2,000, and
    another process resets its durable ahead to 2,501, so 2,001..2,500 stay stored below the ack
    floor once the reader acks 3,000 (a reset that drops messages an ack that crossed it left
    pending does the same). No bind of ours comes to clear them: the check while idle finds
    them (at two checks in a row) and the reader clears them, landing nothing twice."""
    nats.add_stream(name="ORRUN", subjects=["orrun.>"], retention="workqueue")
    fast_publish(nats, "orrun", 0, 3_000)
    ing = Ingestor(opts(server.url, "ORRUN", tmp_path, consumer="lake"))
    ing.start(None)
    try:
        start, got = drain(ing, 0, 2_000)
        wait_for(lambda: nats.state("ORRUN")["first_seq"] == 2_001, 30, "acks up to 2,000")
        wait_for(lambda: ing.latest(start, None, None) >= 3_000, 30, "3,000 held")
        assert "error" not in nats.api("CONSUMER.RESET.ORRUN.lake", {"seq": 2_501})
        _, more = drain(ing, start, 3_000)
        assert got + more == list(range(1, 3_001))
        wait_for(lambda: nats.state("ORRUN")["messages"] == 0, 40, "the origin acked empty",
                 lambda: str(nats.state("ORRUN")))
        assert (ing.ack_repairs, ing.orphan_resets) == (1, 1)
    finally:
        ing.stop()


def test_a_look_for_acked_messages_that_times_out_is_made_again(
    server: NatsServer, nats: SyncNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    """The look for acked messages still stored gets no answer while a cluster elects the
    stream's leader (the consumer's answers meanwhile). One such timeout switched the look off
    for good, as a refusal does; on a standalone server (which never removes them itself) the
    acked messages a reset by another process stranded then stayed stored for good. It is made
    again at the next check; here its first answer is lost, then the state of the test above."""
    from nats.errors import TimeoutError as NatsTimeout

    from jsspark.live import ingestor as I

    real, looks = C.oldest_stored, []

    async def first_lost(*args: Any, **kw: Any) -> int | None:
        looks.append(args)
        if len(looks) == 1:
            raise NatsTimeout
        return await real(*args, **kw)

    monkeypatch.setattr(C, "oldest_stored", first_lost)
    monkeypatch.setattr(I, "STALL_SECONDS", 2.0)  # idle checks come sooner
    nats.add_stream(name="ORTO", subjects=["orto.>"], retention="workqueue")
    fast_publish(nats, "orto", 0, 3_000)
    ing = Ingestor(opts(server.url, "ORTO", tmp_path, consumer="lake"))
    ing.start(None)
    try:
        with caplog.at_level(logging.WARNING, logger="jsspark.live.ingestor"):
            start, got = drain(ing, 0, 2_000)
            wait_for(lambda: nats.state("ORTO")["first_seq"] == 2_001, 30, "acks up to 2,000")
            wait_for(lambda: ing.latest(start, None, None) >= 3_000, 30, "3,000 held")
            wait_for(lambda: len(looks) >= 1, 20, "an idle check's look (its answer lost)")
            assert "error" not in nats.api("CONSUMER.RESET.ORTO.lake", {"seq": 2_501})
            _, more = drain(ing, start, 3_000)
            assert got + more == list(range(1, 3_001))
            wait_for(lambda: nats.state("ORTO")["messages"] == 0, 40, "the origin acked empty",
                     lambda: str(nats.state("ORTO")))
        assert ing.orphan_resets == 1 and len(looks) > 1
        assert not [r for r in caplog.records if "not trying again" in r.getMessage()]
    finally:
        ing.stop()


def test_reader_permitted_only_the_consumer_api(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A user allowed the consumer API, acks and flow-control replies, but not ``STREAM.INFO`` or
    ``STREAM.MSG.GET``: the look for acked messages still stored is skipped (a warning, once),
    and the reader binds, reads and acks as before."""
    (tmp_path / "store").mkdir()
    conf = tmp_path / "perms.conf"
    conf.write_text("""authorization { users = [
      {user: admin, password: admin-pw}
      {user: reader, password: reader-pw, permissions: {
        publish: {allow: ["$JS.API.CONSUMER.>", "$JS.ACK.>", "$JS.FC.>"]}, subscribe: {allow: ["_INBOX.>"]}}}
    ]}""")
    with NatsServer(store_dir=tmp_path / "store", extra_args=["-c", str(conf)]) as srv:
        admin = SyncNats(srv.url.replace("nats://", "nats://admin:admin-pw@"))
        try:
            admin.add_stream(name="PW", subjects=["pw.>"], retention="workqueue")
            fast_publish(admin, "pw", 0, 500)
            ing = Ingestor(opts(srv.url, "PW", tmp_path / "spill", consumer="lake", user="reader",
                                password="reader-pw", maxAckPending="200"))
            with caplog.at_level(logging.WARNING, logger="jsspark.live.ingestor"):
                ing.start(None)
                try:
                    _, got = drain(ing, ing.floor, 500)
                    assert got == list(range(1, 501))  # max_ack_pending 200 < 500: progress needs our acks
                    wait_for(lambda: admin.state("PW")["messages"] == 0, 30, "the origin acked empty")
                finally:
                    ing.stop()
            assert ing.orphan_resets == 0
            lookups = [r.getMessage() for r in caplog.records if "cannot look for acked messages" in r.getMessage()]
            assert len(lookups) == 1 and "PW" in lookups[0] and "reader-pw" not in lookups[0], lookups
        finally:
            admin.close()


def test_secrets_never_in_errors(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    with NatsServer(store_dir=tmp_path / "store", extra_args=["--user", "alice", "--pass", "s3cr3t-pw"]) as srv:
        good = opts(srv.url, "X", tmp_path, user="alice", password="s3cr3t-pw")
        assert "s3cr3t-pw" not in repr(good)
        bad_url = srv.url.replace("nats://", "nats://alice:s3cr3t-pw@")
        ing = Ingestor(opts(bad_url, "NOPE", tmp_path, waitTimeout="5"))
        with pytest.raises(LiveSourceError) as info:
            ing.start(None)
        ing.stop()
        assert "s3cr3t-pw" not in str(info.value)
        assert "s3cr3t-pw" not in repr(opts(bad_url, "X", tmp_path))
        ing = Ingestor(opts(srv.url, "NOPE", tmp_path, user="alice", password="wrong-s3cr3t", waitTimeout="5"))
        with pytest.raises(LiveSourceError) as info:
            ing.start(None)
        ing.stop()
        assert "wrong-s3cr3t" not in str(info.value)


def test_ordered_mode_on_a_limits_origin(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    nats.add_stream(name="LIM", subjects=["lim.>"])
    fast_publish(nats, "lim", 0, 900)
    ing = Ingestor(opts(server.url, "LIM", tmp_path, consumerMode="ordered"))
    ing.start(None)
    try:
        start, got = drain(ing, ing.floor, 900)
        assert got == list(range(1, 901))
        resets = ing.resets
    finally:
        ing.stop()
    # a restart at a committed offset recreates the ephemeral there: nothing before it again
    fast_publish(nats, "lim", 900, 100)
    ing = Ingestor(opts(server.url, "LIM", tmp_path, consumerMode="ordered"))
    ing.start(start)
    try:
        _, tail = drain(ing, start, 1000)
        assert tail == list(range(901, 1001)) and resets >= 1
        assert nats.state("LIM")["messages"] == 1000  # ordered mode never acks anything away
    finally:
        ing.stop()


def test_user_mode_looks_the_durable_up_before_it_resets_it(server: NatsServer, nats: SyncNats,
                                                            tmp_path: Path) -> None:
    """User mode asks CONSUMER.INFO first: a missing durable fails at once with the server's
    10014 (a reset of no consumer is answered by nothing: a timeout naming nothing), and a durable
    it refuses (here a pull consumer with messages in flight: 10217) is left as it was, not reset
    (which would redeliver its in-flight messages to its own clients); a deliver_group or a pause
    (which would bind and then deliver nothing) is refused naming it."""
    nats.add_stream(name="UL", subjects=["ul.>"])
    fast_publish(nats, "ul", 0, 20)
    assert "error" not in nats.api("CONSUMER.CREATE.UL.pull", {"stream_name": "UL", "config": {
        "durable_name": "pull", "ack_policy": "explicit", "ack_wait": 60_000_000_000}})

    async def pull_one() -> None:  # one in flight to a client of the pull consumer
        await nats.nc.subscribe("pulled")
        await nats.nc.publish("$JS.API.CONSUMER.MSG.NEXT.UL.pull", b'{"batch": 1}', reply="pulled")
        await nats.nc.flush()

    nats.run(pull_one())
    wait_for(lambda: nats.api("CONSUMER.INFO.UL.pull")["num_ack_pending"] == 1, 10, "the pull to deliver one")
    before = nats.api("CONSUMER.INFO.UL.pull")
    assert before["delivered"]["stream_seq"] == 1 and before["num_ack_pending"] == 1
    fc = {"ack_policy": "flow_control", "flow_control": True, "idle_heartbeat": 1_000_000_000}
    for name, extra in (("grp", {"deliver_group": "workers"}), ("pz", {"pause_until": "2099-01-01T00:00:00Z"})):
        resp = nats.api(f"CONSUMER.CREATE.UL.{name}", {"stream_name": "UL", "config": {
            "durable_name": name, "deliver_subject": f"dlv.{name}", **fc, **extra}})
        assert "error" not in resp, resp
    cases = (("nope", r"ConsumerNotFoundError: .*err_code=10014 description='consumer not found'"),
             ("pull", "10217"),
             ("grp", r"durable 'grp' on stream UL has deliver_group 'workers'"),
             ("pz", r"durable 'pz' on stream UL is paused until 2099-01-01T00:00:00Z"))
    for name, match in cases:
        ing = Ingestor(opts(server.url, "UL", tmp_path, consumerMode="user", consumer=name, deliverSubject=f"dlv.{name}"))
        began = time.monotonic()
        try:
            with pytest.raises(LiveSourceError, match=match):
                ing.start(None)
        finally:
            ing.stop()
        assert time.monotonic() - began < 5, name  # the server's answer, not a request timing out
    after = nats.api("CONSUMER.INFO.UL.pull")
    assert (after["delivered"], after["num_ack_pending"]) == (before["delivered"], 1)


def test_server_mode_never_takes_over_an_operators_durable(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    """Server mode creates its durable with action create: the server refuses another config
    with 10148 (addConsumerWithAssignmentAndMode), and jsspark updates only a durable it made
    (its metadata mark, or made before the mark: flow control to the subject server mode gives).
    Before, create-or-update rewrote the operator's durable as jsspark's."""
    nats.add_stream(name="HJ", subjects=["hj.>"])
    fast_publish(nats, "hj", 0, 20)
    ops = {"durable_name": "ops", "ack_policy": "flow_control", "deliver_subject": "dlv.ops", "flow_control": True,
           "idle_heartbeat": 1_000_000_000, "max_ack_pending": 7, "filter_subject": "hj.1"}
    assert "error" not in nats.api("CONSUMER.CREATE.HJ.ops", {"stream_name": "HJ", "config": ops})
    ing = Ingestor(opts(server.url, "HJ", tmp_path, consumer="ops"))
    try:
        with pytest.raises(LiveSourceError, match=r"10148.*durable 'ops' on stream HJ .*not created by jsspark.*"
                                                  r"consumerMode user.*another name"):
            ing.start(None)
    finally:
        ing.stop()
    cfg = nats.api("CONSUMER.INFO.HJ.ops")["config"]
    assert (cfg["deliver_subject"], cfg["max_ack_pending"], cfg["filter_subject"]) == ("dlv.ops", 7, "hj.1")
    # made by an older jsspark (no mark): still jsspark's, updated to the options and marked
    older = {k: v for k, v in C.durable_config(opts(server.url, "HJ", tmp_path, consumer="old")).items()
             if k != "metadata"}
    assert "error" not in nats.api("CONSUMER.CREATE.HJ.old", {"stream_name": "HJ", "config": older})
    for mine in ({"consumer": "old", "maxAckPending": "50"}, {"consumer": "new"}, {"consumer": "new", "maxAckPending": "9"}):
        ing = Ingestor(opts(server.url, "HJ", tmp_path, **mine))
        ing.start(None)
        try:
            floor = ing.floor
            _, got = drain(ing, floor, 20)
            assert got == list(range(floor + 1, 21))
        finally:
            ing.stop()
        cfg = nats.api(f"CONSUMER.INFO.HJ.{mine['consumer']}")["config"]
        assert cfg["metadata"]["jsspark"] == "live" and cfg["max_ack_pending"] == int(mine.get("maxAckPending", 200_000))


@pytest.mark.parametrize("retention", ["interest", "workqueue"])
def test_ordered_mode_is_refused_where_acks_remove_messages(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                            retention: str) -> None:
    """An AckNone consumer that is an Interest stream's only interest has each message removed
    as it is delivered, before Spark commits it; a WorkQueue refuses one (10098). Refused before
    anything is created, naming the option, the stream and its retention."""
    name = f"ORD{retention.upper()}"
    nats.add_stream(name=name, subjects=[f"{name.lower()}.>"], retention=retention)
    # an operator's durable: an Interest stream keeps messages only while something is interested
    assert "error" not in nats.api(f"CONSUMER.CREATE.{name}.ops", {"stream_name": name, "config": {
        "durable_name": "ops", "ack_policy": "explicit"}})
    fast_publish(nats, name.lower(), 0, 20)
    wait_for(lambda: nats.state(name)["messages"] == 20, 10, "the 20 stored")  # core publishes: stored from a queue
    ing = Ingestor(opts(server.url, name, tmp_path, consumerMode="ordered"))
    try:
        with pytest.raises(OptionError, match=f"consumerMode ordered .* stream {name} has retention {retention}"):
            ing.start(None)
    finally:
        ing.stop()
    state = nats.state(name)
    assert state["consumer_count"] == 1 and state["messages"] == 20  # nothing created, nothing removed


def test_a_restart_whose_reset_fails_is_made_again(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A reconnect or a gap restarts delivery with a reset. When that request fails (lost with a
    half-open connection, no JetStream yet), deliveries of the old generation go on being
    dropped while the reader waits for the reset's first one; the durable's heartbeats go on
    too, so the watchdog sees no silence. The reader must reset again, not wait for good."""
    real, calls = C.reset_consumer, []

    async def fails_once(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(args)
        if len(calls) == 2:  # the first is the bind's
            raise TimeoutError("nats: timeout")
        return await real(*args, **kwargs)

    monkeypatch.setattr(C, "reset_consumer", fails_once)
    nats.add_stream(name="RF", subjects=["rf.>"])
    fast_publish(nats, "rf", 0, 300)
    ing = Ingestor(opts(server.url, "RF", tmp_path, consumer="lake"))
    ing.start(None)
    try:
        start, got = drain(ing, 0, 300)
        assert ing._loop is not None
        asyncio.run_coroutine_threadsafe(ing._restart_delivery(), ing._loop).result(10)  # as a reconnect does
        assert len(calls) == 2 and "timeout" in (ing.last_error or "")
        fast_publish(nats, "rf", 300, 200)
        _, more = drain(ing, start, 500)
        assert got + more == list(range(1, 501))
        assert len(calls) == 3  # reset again, once
    finally:
        ing.stop()


def test_a_failed_restart_is_made_again_while_the_durable_goes_on_delivering(
    server: NatsServer, nats: SyncNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, with messages coming in all along: the durable goes on delivering (the reader
    drops them, waiting for its reset's first delivery), so neither a silence nor an idle
    heartbeat came to make the restart again, and reading stalled until publishing paused (on a
    cluster after a node kill, 18 s with one message per 20 ms). It is made again
    ``STALL_SECONDS`` after it failed."""
    from jsspark.live import ingestor as I

    real, calls = C.reset_consumer, []

    async def fails_once(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(time.monotonic())
        if len(calls) == 2:  # the first is the bind's
            raise TimeoutError("nats: timeout")
        return await real(*args, **kwargs)

    monkeypatch.setattr(C, "reset_consumer", fails_once)
    nats.add_stream(name="RD", subjects=["rd.>"], retention="workqueue")
    ing = Ingestor(opts(server.url, "RD", tmp_path, consumer="lake"))
    ing.start(None)
    stop, sent = threading.Event(), [0]

    def steady() -> None:  # one message per 50 ms: never a second without a delivery
        while not stop.is_set():
            nats.run(nats.nc.jetstream().publish("rd.x", b"m"))
            sent[0] += 1
            time.sleep(0.05)

    publisher = threading.Thread(target=steady, daemon=True)
    try:
        publisher.start()
        wait_for(lambda: sent[0] >= 20, 10, "deliveries under way")
        assert ing._loop is not None
        asyncio.run_coroutine_threadsafe(ing._restart_delivery(), ing._loop).result(10)  # as a reconnect does
        failed = time.monotonic()
        assert len(calls) == 2 and "timeout" in (ing.last_error or "")
        wait_for(lambda: len(calls) == 3, I.STALL_SECONDS + 5, "the restart made again while delivering")
        assert calls[2] - failed < I.STALL_SECONDS + 2.5 and publisher.is_alive()
        stop.set()
        publisher.join(10)
        _, got = drain(ing, 0, sent[0])
        assert got == list(range(1, sent[0] + 1))
        wait_for(lambda: nats.state("RD")["messages"] == 0, 10, "the origin acked empty")
    finally:
        stop.set()
        ing.stop()


def test_an_ordered_consumer_left_behind_by_a_failed_delete_cannot_reach_the_reader(
    server: NatsServer, nats: SyncNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ordered reader recreates its consumer to restart delivery, deleting the old one. If
    that delete fails, the old one lives on (a listener on its inbox holds it); were it on the
    same inbox, its deliveries and heartbeats would come in with delivery seqs not ours and
    restart delivery again and again. Each creation takes a new inbox (as nats.go's ordered
    consumer does), so the old one is never heard again, and expires without interest."""
    real, deletes = C.delete_consumer, []

    async def fails(*args: Any, **kwargs: Any) -> None:
        deletes.append(args)
        raise TimeoutError("nats: timeout")

    nats.add_stream(name="OD", subjects=["od.>"])
    fast_publish(nats, "od", 0, 300)
    ing = Ingestor(opts(server.url, "OD", tmp_path, consumerMode="ordered"))
    ing.start(None)
    try:
        start, got = drain(ing, ing.floor, 300)
        old = ing._consumer_name
        monkeypatch.setattr(C, "delete_consumer", fails)
        assert ing._loop is not None
        asyncio.run_coroutine_threadsafe(ing._restart_delivery(), ing._loop).result(10)  # as a gap does
        monkeypatch.setattr(C, "delete_consumer", real)
        assert deletes and ing._consumer_name != old
        assert "error" not in nats.api(f"CONSUMER.INFO.OD.{old}")  # left behind (30 s without interest)
        resets = ing.resets
        fast_publish(nats, "od", 300, 200)  # on one inbox, the old consumer would deliver these too
        _, more = drain(ing, start, 500)
        assert got + more == list(range(1, 501))
        seen = ing.controls_seen
        wait_for(lambda: ing.controls_seen >= seen + 3, 15, "three heartbeats of the reader's consumer")
        assert ing.resets == resets  # nothing of the old consumer restarted delivery
    finally:
        ing.stop()


def test_a_subject_that_is_not_utf8_is_stored_as_the_servers_api_shows_it(server: NatsServer, nats: SyncNats,
                                                                           raw: RawNats, tmp_path: Path) -> None:
    """The server stores a subject of any bytes (core publishes are not checked); its JSON API
    shows one that is not UTF-8 with replacement characters, one per byte as Go writes them
    (a cut character ``e2 82`` is two; Python's ``errors="replace"`` makes one). The reader
    stores it so, where it could not store it at all before (every spill of the buffer failed,
    for good)."""
    nats.add_stream(name="U8", subjects=["u8.>"])
    raw._send(b"PUB u8.\xff\xfe 1\r\nx\r\nPUB u8.ok 1\r\ny\r\nPUB u8.\xe2\x82 1\r\nz\r\n")  # no client library sends such bytes
    raw.flush()
    wait_for(lambda: nats.state("U8")["messages"] == 3, 10, "the origin to store all three")
    ing = Ingestor(opts(server.url, "U8", tmp_path, consumer="lake"))
    ing.start(None)
    try:
        wait_for(lambda: ing.latest(0, None, None) == 3, 20, "the messages buffered")
        end = ing.latest(0, None, None)
        rows = pa.Table.from_batches([b for p in ing.plan(0, end) for b in read_spill(p)])
        server_subjects = [nats.api("STREAM.MSG.GET.U8", {"seq": s})["message"]["subject"] for s in (1, 2, 3)]
        assert rows.column("subject").to_pylist() == server_subjects == ["u8.\ufffd\ufffd", "u8.ok", "u8.\ufffd\ufffd"]
    finally:
        ing.stop()


def publish_without_preamble(raw: RawNats, subject: str, block: bytes, data: bytes) -> None:
    """A raw ``HPUB`` whose header block lacks the ``NATS/1.0`` line: the server stores it as sent."""
    raw._send(b"HPUB %s %d %d\r\n" % (subject.encode(), len(block), len(block) + len(data)) + block + data + b"\r\n")


def test_a_header_block_without_the_nats_line_is_stored_with_its_lines(
    server: NatsServer, nats: SyncNats, raw: RawNats, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server stores any header bytes a publisher sent. A block without the ``NATS/1.0``
    line is stored in the lake with the ``K: V`` lines it holds (what the server's own header
    lookups read), with a warning naming the message; before, it failed every later read of
    the buffer, for good."""
    nats.add_stream(name="NP", subjects=["np.>"])
    publish_without_preamble(raw, "np.1", b"X-Foo: bar\r\nX-Two: 2\r\n\r\n", b"a")
    raw.publish("np.2", b"b", [("K", "v")])
    raw.flush()
    wait_for(lambda: nats.state("NP")["messages"] == 2, 10, "the origin to store both")
    ing = Ingestor(opts(server.url, "NP", tmp_path, consumer="lake"))
    ing.start(None)
    try:
        with caplog.at_level(logging.WARNING, logger="jsspark.live.ingestor"):
            wait_for(lambda: ing.latest(0, None, None) == 2, 20, "both messages buffered")
        end = ing.latest(0, None, None)
        rows = pa.Table.from_batches([b for p in ing.plan(0, end) for b in read_spill(p)])
        assert rows.column("seq").to_pylist() == [1, 2]
        headers = [[(h["name"], h["value"]) for h in hs] for hs in rows.column("headers").to_pylist()]
        assert headers == [[("X-Foo", "bar"), ("X-Two", "2")], [("K", "v")]]
        assert rows.column("data").to_pylist() == [b"a", b"b"]
        assert any("NP seq 1 has a header block without the NATS/1.0 line" in r.getMessage() for r in caplog.records)
    finally:
        ing.stop()


def test_a_landing_sinks_mark_acks_the_batch_before_spark_commits_it(
    server: NatsServer, nats: SyncNats, tmp_path: Path
) -> None:
    """Jobs land rows by reference; the sink's mark (``spill.mark_landed``) written after its
    Delta commit acks the batch at once, so delivery resumes before Spark plans the next batch.
    A batch Spark runs again after a crash between that commit and its commit log plans no rows:
    the origin removed them (the lake holds them) and the rest follows exactly once."""
    nats.add_stream(name="LM", subjects=["lm.>"], retention="workqueue")
    fast_publish(nats, "lm", 0, 300)
    o = opts(server.url, "LM", tmp_path, consumer="lake", maxAckPending="100", spillReferences="true")
    ing = Ingestor(o)
    ing.start(None)
    try:
        wait_for(lambda: ing.latest(0, None, None) >= 100, 20, "a full window buffered")
        end = ing.latest(0, None, None)
        assert end == 100  # max_ack_pending: the server stops until we ack
        refs = [p.to_json() for p in ing.plan(0, end, by_reference=True)]
        seen = ing.controls_seen
        wait_for(lambda: ing.controls_seen > seen, 10, "a heartbeat or flow-control request")
        assert nats.state("LM")["messages"] == 300  # landed nowhere yet: nothing acked
        mark_landed(refs)  # the sink's Delta commit holds (0, 100]; Spark has not committed it
        wait_for(lambda: nats.state("LM")["first_seq"] == end + 1, 10, "the landed batch acked")
        assert nats.api("CONSUMER.INFO.LM.lake")["ack_floor"]["stream_seq"] == end  # that far, no further
        assert ing.floor == 0  # Spark's commit is still to come
        wait_for(lambda: len(ing._seqs) >= 200, 10, "delivery resumed without a Spark commit")
    finally:
        ing.stop()
    # the driver dies before Spark's commit log: the batch (0, 100] runs again in a new process
    again = Ingestor(o)
    again.start(0)
    try:
        assert again.plan(0, end) == []  # acked after its landing: not delivered again, not lost
        _, rest = drain(again, end, 300)
        assert rest == list(range(101, 301))
        wait_for(lambda: nats.state("LM")["messages"] == 0, 10, "everything acked")
    finally:
        again.stop()


def test_a_flow_control_request_near_max_ack_pending_is_held_for_the_ack(
    server: NatsServer, nats: SyncNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server sends a flow-control request at half its pending-bytes window (1 MiB at
    first: here after about 950 deliveries of 1 KiB) and none while one is outstanding. So a
    request that comes with fewer deliveries left before ``max_ack_pending`` (1,500) than came
    since the one before is likely still outstanding when the server stops there. Answered at
    once with nothing to ack, it would leave the server stalled with no request until its next
    idle heartbeat (up to a second per batch), depending on which side was faster. Every such
    request is held when it comes (a heartbeat saying the server stalls on it earlier, on its
    byte window, still gets it answered: the next test), the one the server stops on is still
    held, and the batch's landing mark answers it with the ack."""
    W = 1500
    requests: list[tuple[str, int, int]] = []  # (reply, deliveries so far, unacked) on arrival
    answered: list[str] = []  # requests answered when they came
    on_control, answer_fc = Ingestor._on_control, Ingestor._answer_fc

    def spy_control(self: Ingestor, reply: bytes, block: bytes) -> None:
        if b"FlowControl" in block and reply:
            requests.append((reply.decode(), self._last_dseq, self._gen_count))
        on_control(self, reply, block)

    async def spy_answer(self: Ingestor, subject: str, *near: bool) -> None:
        await answer_fc(self, subject, *near)
        if near and self._held_fc != subject:  # called for a request as it came (not a heartbeat's)
            answered.append(subject)

    monkeypatch.setattr(Ingestor, "_on_control", spy_control)
    monkeypatch.setattr(Ingestor, "_answer_fc", spy_answer)
    nats.add_stream(name="FCW", subjects=["fcw.>"], retention="workqueue")

    fast_publish(nats, "fcw", 0, 3000, lambda i: b"x" * 1024)
    o = opts(server.url, "FCW", tmp_path, consumer="lake", maxAckPending=str(W), spillReferences="true")
    ing = Ingestor(o)
    ing.start(None)
    try:
        wait_for(lambda: ing.latest(0, None, None) >= W, 20, "a full window buffered")
        assert ing.latest(0, None, None) == W  # max_ack_pending: the server stops until we ack
        wait_for(lambda: ing._held_fc is not None, 10, "a flow-control request held")
        assert ing._held_fc == requests[-1][0]  # the one the server stopped on
        near = [r for (r, dseq, unacked), (_, before, _) in zip(requests, [("", 0, 0), *requests[:-1]], strict=True)
                if W - unacked <= dseq - before]
        assert near and not set(near) & set(answered), (requests, answered)
        assert nats.state("FCW")["messages"] == 3000  # nothing acked before the landing
        mark_landed([p.to_json() for p in ing.plan(0, W, by_reference=True)])
        wait_for(lambda: nats.state("FCW")["first_seq"] == W + 1, 10, "the landed window acked")
        wait_for(lambda: len(ing._seqs) == 3000, 10, "delivery resumed")
    finally:
        ing.stop()


def test_a_held_request_is_answered_when_the_byte_window_stalls_first(
    server: NatsServer, nats: SyncNats, tmp_path: Path
) -> None:
    """Held near ``max_ack_pending`` on the sizes seen so far, a request can still run the
    server's byte window out first: 950 messages of 1 KiB, then 8 KiB ones. Its idle heartbeat
    then names the request it stalls on, and that is answered at once (nothing is acked), so
    delivery goes on up to ``max_ack_pending`` without any batch committed."""
    nats.add_stream(name="FCB", subjects=["fcb.>"], retention="workqueue")

    fast_publish(nats, "fcb", 0, 1600, lambda i: b"x" * (1024 if i < 950 else 8192))
    o = opts(server.url, "FCB", tmp_path, consumer="lake", maxAckPending="1500", spillReferences="true")
    ing = Ingestor(o)
    ing.start(None)
    try:
        wait_for(lambda: ing.latest(0, None, None) >= 1500, 20, "delivery up to max_ack_pending")
        assert ing.latest(0, None, None) == 1500
        assert nats.state("FCB")["messages"] == 1600  # nothing acked: no batch landed
    finally:
        ing.stop()


def test_stopping_a_reader_leaves_no_flow_control_answer_pending(
    server: NatsServer, nats: SyncNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flow-control answer awaits its flush's PONG. One still under way when the reader
    stops (here it never gets its PONG) is cancelled and finished by ``stop``, not left pending
    on the stopped loop, where asyncio reports it as a task destroyed while pending."""
    under_way: list[asyncio.Task[None]] = []

    async def answer_awaiting_a_pong(self: Ingestor, subject: str, near: bool = False) -> None:
        under_way.append(asyncio.current_task())  # type: ignore[arg-type]
        await asyncio.get_running_loop().create_future()  # the PONG that never comes

    monkeypatch.setattr(Ingestor, "_answer_fc", answer_awaiting_a_pong)
    nats.add_stream(name="FCS", subjects=["fcs.>"], retention="workqueue")
    fast_publish(nats, "fcs", 0, 1200, lambda i: b"x" * 1024)  # past the first request, at about 950
    ing = Ingestor(opts(server.url, "FCS", tmp_path, consumer="lake"))
    ing.start(None)
    try:
        wait_for(lambda: bool(under_way), 20, "a flow-control answer under way")
    finally:
        ing.stop()
    assert under_way and all(task.cancelled() for task in under_way), under_way
    assert not ing._tasks


def test_paced_batches_wait_for_a_full_batch_or_the_delay(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    """``minMessagesPerTrigger`` / ``maxTriggerDelay`` (what a job sets for an interval trigger):
    a batch that is not full waits until the delay has passed since the last batch, a full one
    goes at once and so does the tail right after it; an AvailableNow run is never held."""
    nats.add_stream(name="PC", subjects=["pc.>"])
    delay = 6.0
    ing = Ingestor(opts(server.url, "PC", tmp_path, consumerMode="ordered", minMessagesPerTrigger="100",
                        maxTriggerDelay=f"{int(delay)} seconds"))
    ing.start(None)
    try:
        fast_publish(nats, "pc", 0, 30)
        wait_for(lambda: ing._highest >= 30, 10, "30 buffered")
        # the delay counts from the batch's own time, read inside latest(): no earlier than
        # ``before``, and possibly earlier than ``last`` by however long the thread waited for the CPU
        before = time.monotonic()
        assert ing.latest(0, None, None) == 30  # the first batch is due at once
        last = time.monotonic()
        fast_publish(nats, "pc", 30, 30)
        wait_for(lambda: ing._highest >= 60, 10, "60 buffered")
        assert ing.latest(30, None, None) == 30 and time.monotonic() - last < delay  # 30 < 100, too soon
        wait_for(lambda: ing.latest(30, None, None) == 60, delay + 10, "the delay to pass")
        assert time.monotonic() - before >= delay
        last = time.monotonic()
        fast_publish(nats, "pc", 60, 5)
        wait_for(lambda: ing._highest >= 65, 10, "65 buffered")
        assert ing.latest(60, None, 65) == 65 and time.monotonic() - last < delay  # AvailableNow: not held
        fast_publish(nats, "pc", 65, 150)
        wait_for(lambda: ing._highest >= 215, 10, "215 buffered")
        assert ing.latest(65, None, None) == 215 and time.monotonic() - last < delay  # full: at once
        fast_publish(nats, "pc", 215, 20)
        wait_for(lambda: ing._highest >= 235, 10, "235 buffered")
        assert ing.latest(215, None, None) == 235 and time.monotonic() - last < delay  # the tail after a full batch
        assert read_range(ing, 215, 235) == list(range(216, 236))
    finally:
        ing.stop()


def test_a_batch_by_reference_is_one_partition_with_its_sequences(
    server: NatsServer, nats: SyncNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read by value, a batch splits into partitions of at most ``PARTITION_ROWS`` spill rows
    (tasks read files in parallel); by reference it stays one partition (a task only emits
    sequences), whose ``seqs`` are a ``range`` when the batch has no gap and the exact tuple
    when it has: either way the reference rows are one per message held."""
    import pickle

    from jsspark.live import ingestor as ingestor_module
    from jsspark.live.spill import reference_batch

    monkeypatch.setattr(ingestor_module, "PARTITION_ROWS", 40)
    nats.add_stream(name="REF", subjects=["ref.>"])
    fast_publish(nats, "ref", 0, 300)
    wait_for(lambda: nats.state("REF")["last_seq"] == 300, 10, "300 messages stored")
    resp = nats.api("STREAM.MSG.DELETE.REF", {"seq": 150, "no_erase": True})
    assert resp.get("success"), resp
    ing = Ingestor(opts(server.url, "REF", tmp_path, consumerMode="ordered", chunkRows="20"))
    ing.start(None)
    try:
        wait_for(lambda: ing.latest(0, None, None) >= 300, 20, "all 299 messages buffered")
        assert len(ing.plan(0, 100)) == 3  # by value: 20-row chunks grouped by at most 40 rows
        for start, want in ((0, list(range(1, 101))), (100, [*range(101, 150), *range(151, 201)])):
            (part,) = ing.plan(start, start + 100, by_reference=True)  # (planning 100 commits 0..100)
            if start == 0:
                assert part.seqs == range(1, 101) and len(pickle.dumps(part)) < 1000
            else:
                assert part.seqs == tuple(want)
            assert reference_batch(part).column("seq").to_pylist() == want
            assert [s for b in read_spill(part) for s in b.column("seq").to_pylist()] == want
            assert json.loads(part.to_json())["rows"] == len(want)
    finally:
        ing.stop()


def test_a_bind_whose_reset_gets_no_answer_tries_again(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clustered JetStream a reset sent just after the durable's creation or a leader change
    can go unanswered: only the consumer leader answers, and only once its proposal applied
    (``resetStartingSeqLocked``). A start within ``waitTimeout`` asks again rather than failing the
    query on that one timeout. Here the first reset takes effect, its answer is lost."""
    from nats.errors import TimeoutError as NatsTimeout

    nats.add_stream(name="NA", subjects=["na.>"], retention="workqueue")
    fast_publish(nats, "na", 0, 300)
    wait_for(lambda: nats.state("NA")["messages"] == 300, 10, "300 stored")
    real, calls = C.reset_consumer, []

    async def answer_lost(*args: Any, **kw: Any) -> dict[str, Any]:
        calls.append(args)
        resp = await real(*args, **kw)
        if len(calls) == 1:
            raise NatsTimeout
        return resp

    monkeypatch.setattr(C, "reset_consumer", answer_lost)
    ing = Ingestor(opts(server.url, "NA", tmp_path, consumer="lake", waitTimeout="30"))
    ing.start(None)
    try:
        assert len(calls) == 2
        _, got = drain(ing, 0, 300)
        assert got == list(range(1, 301))
        wait_for(lambda: nats.state("NA")["messages"] == 0, 10, "the origin to be acked")
    finally:
        ing.stop()


def test_a_restart_whose_request_goes_unanswered_sends_it_again(
    server: NatsServer, nats: SyncNats, tmp_path: Path
) -> None:
    """On a clustered JetStream a request sent while the consumer's (or the stream's, or the meta)
    leader is elected gets no answer at all, though the new leader answers one sent seconds later.
    A restart after a node kill waited the whole request timeout (10 s) on such a request, so
    reading stalled 10-16 s per kill (and failed restarts on top). The restart's first request,
    the durable's creation, is sent again every ``RESEND_SECONDS`` within that timeout, the first
    answer taken; its reset then goes to a leader that answers (a reset is never resent on its
    own). Here a relay in front of the JetStream API (``apiPrefix``) drops the restart's first
    creation, as a cluster without a leader does."""
    nats.add_stream(name="RU", subjects=["ru.>"], retention="workqueue")
    fast_publish(nats, "ru", 0, 300)
    creates, dropping = [], [False]

    async def relay(msg: Any) -> None:
        api = msg.subject.removeprefix("relay.API.")
        if api.startswith("CONSUMER.CREATE."):
            creates.append(api)
            if dropping[0] and len(creates) == 2:  # the bind's went through
                return
        resp = await nats.nc.request(f"$JS.API.{api}", msg.data, timeout=10)
        await msg.respond(resp.data)

    sub = nats.run(nats.nc.subscribe("relay.API.>", cb=relay))
    ing = Ingestor(opts(server.url, "RU", tmp_path, consumer="lake", apiPrefix="relay.API"))
    ing.start(None)
    try:
        start, got = drain(ing, 0, 300)
        dropping[0] = True
        assert ing._loop is not None
        began = time.monotonic()
        info = asyncio.run_coroutine_threadsafe(ing._restart_delivery(), ing._loop).result(C.REQUEST_TIMEOUT + 5)
        took = time.monotonic() - began
        assert info and len(creates) == 3, (ing.last_error, creates)  # answered when sent again
        assert C.RESEND_SECONDS <= took < C.REQUEST_TIMEOUT / 2, took
        fast_publish(nats, "ru", 300, 200)
        _, more = drain(ing, start, 500)
        assert got + more == list(range(1, 501))
        wait_for(lambda: nats.state("RU")["messages"] == 0, 10, "the origin acked empty")
    finally:
        ing.stop()
        nats.run(sub.unsubscribe())


@pytest.mark.parametrize("start", [{"deliverPolicy": "new"}, {"deliverPolicy": "by_start_sequence", "optStartSeq": "3"},
                                   {"deliverPolicy": "by_start_time", "optStartTime": "2020-01-01T00:00:00Z"}])
def test_a_restart_with_other_start_options_resumes_the_durable(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture,
                                                                start: dict[str, str]) -> None:
    """A durable's start cannot be updated (the server's 10012 "deliver policy can not be
    updated", "start sequence ...", "start time ..."), and it is moot for one that exists: it
    resumes at its ack floor or the checkpoint. As Spark's Kafka source ignores startingOffsets
    on a restart, the query restarted with other start options resumes, keeps the durable's start
    and says so; another option it changes (maxAckPending) is applied. Before, the restart failed with the server's
    10012 and no word of which option to drop."""
    stream = "RS_" + start["deliverPolicy"].upper()
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    fast_publish(nats, stream.lower(), 0, 10)
    first = Ingestor(opts(server.url, stream, tmp_path, consumer="dur"))
    first.start(None)
    try:
        committed, got = drain(first, first.floor, 6)
        assert got == list(range(1, 7))
        assert first.flush_acks(10)
    finally:
        first.stop()
    caplog.set_level(logging.WARNING, "jsspark.live.consumer")
    again = Ingestor(opts(server.url, stream, tmp_path, consumer="dur", maxAckPending="50", **start))
    again.start(committed)  # from the checkpoint's offset
    try:
        _, got = drain(again, committed, 10)
        assert got == [7, 8, 9, 10]
    finally:
        again.stop()
    cfg = nats.api(f"CONSUMER.INFO.{stream}.dur")["config"]
    assert (cfg["deliver_policy"], cfg.get("opt_start_seq"), cfg.get("opt_start_time"), cfg["max_ack_pending"]) == (
        "all", None, None, 50)
    assert any("durable 'dur' on stream " + stream in r.getMessage() and "deliverPolicy=all" in r.getMessage()
               and "deliverPolicy=" + start["deliverPolicy"] in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("mode", ["ordered", "server"])
def test_messages_removed_before_a_restart_read_them_are_data_loss(server: NatsServer, nats: SyncNats, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture, mode: str) -> None:
    """A query stopped while its Limits origin dropped messages it had not read (max_msgs here)
    restarts from its checkpoint past them: the server starts the new or reset consumer at the
    first stored message without a word. As the lake source and Spark's Kafka source (offsets
    out of range): DataLossError naming them, or with failOnDataLoss=false a warning and the
    rest. Before, both modes read on from the first stored message, silently (5 of 13 lost)."""
    stream = f"GONE_{mode.upper()}"
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], max_msgs=5)
    fast_publish(nats, stream.lower(), 0, 3)
    more = {"consumerMode": mode, **({"consumer": "dur"} if mode == "server" else {})}
    ing = Ingestor(opts(server.url, stream, tmp_path, **more))
    ing.start(None)
    try:
        committed, got = drain(ing, ing.floor, 3)
        assert got == [1, 2, 3]
        assert ing.flush_acks(10)
    finally:
        ing.stop()
    fast_publish(nats, stream.lower(), 3, 10)  # seqs 4..13, of which 9..13 stay
    wait_for(lambda: nats.state(stream)["last_seq"] == 13, 10, "the 10 messages stored")
    assert nats.state(stream)["first_seq"] == 9
    ing = Ingestor(opts(server.url, stream, tmp_path, **more))
    try:
        with pytest.raises(DataLossError, match=rf"stream {stream}: messages 4\.\.8 were removed .*first sequence is "
                                                r"now 9\. Set failOnDataLoss=false to skip them"):
            ing.start(committed)
    finally:
        ing.stop()
    caplog.set_level(logging.WARNING, "jsspark.live.ingestor")
    ing = Ingestor(opts(server.url, stream, tmp_path, failOnDataLoss="false", **more))
    ing.start(committed)
    try:
        _, got = drain(ing, committed, 13)
        assert got == [9, 10, 11, 12, 13]
    finally:
        ing.stop()
    assert any("messages 4..8 were removed" in r.getMessage() and "skipping them" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("fail", [True, False])
def test_messages_removed_while_a_durable_waits_for_its_ack_are_data_loss(server: NatsServer, nats: SyncNats,
                                                                         tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                         fail: bool) -> None:
    """A running query's durable waits at maxAckPending for Spark's commit while its Limits origin
    removes what it has not delivered yet (max_msgs here): once acked, the server delivers from
    the first stored message on, without a word. The jump in delivered sequences is checked
    against the origin's first sequence: DataLossError naming the messages, or with
    failOnDataLoss=false a warning and the rest. Before, the query read on past them silently."""
    stream = f"LAG_{fail}".upper()
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], max_msgs=5)
    fast_publish(nats, stream.lower(), 0, 2)
    more = {} if fail else {"failOnDataLoss": "false"}
    caplog.set_level(logging.WARNING, "jsspark.live.ingestor")
    ing = Ingestor(opts(server.url, stream, tmp_path, consumer="dur", maxAckPending="2", **more))
    ing.start(None)
    removed = re.compile(rf"stream {stream}: messages (\d+)\.\.(\d+) were removed .*first sequence is now (\d+)")
    try:
        end = ing.latest(ing.floor, None, None)
        assert read_range(ing, 0, end) == [1, 2]
        # seqs 3..12, of which 8..12 stay. Which of 3..7 the server delivers before the limit
        # removes them depends on timing (a pending message the limit removes frees its slot:
        # seen in CI as 3 and 5 delivered, 4 reported), so what is asserted is that none goes
        # unsaid: each is delivered or named as removed
        fast_publish(nats, stream.lower(), 2, 10)
        wait_for(lambda: nats.state(stream)["first_seq"] == 8, 10, "the limit to remove 1..7")
        if fail:
            deadline = time.monotonic() + 20
            with pytest.raises(DataLossError, match=r"Set failOnDataLoss=false to skip them") as raised:
                while time.monotonic() < deadline:
                    end = ing.latest(end, None, None)  # commits the batch: the durable delivers on
            lo, hi, first = map(int, removed.search(str(raised.value)).groups())  # type: ignore[union-attr]
            assert 3 <= lo <= hi <= 7 and hi < first <= 8
            return
        _, got = drain(ing, end, 12)
    finally:
        ing.stop()
    assert got == sorted(set(got)) and set(got) >= {8, 9, 10, 11, 12} and set(got) <= set(range(3, 13))
    said: set[int] = set()
    for r in caplog.records:
        m = removed.search(r.getMessage())
        if m and "skipping them" in r.getMessage():
            lo, hi, first = map(int, m.groups())
            assert hi < first <= 8, r.getMessage()
            said |= set(range(lo, hi + 1))
    assert said and set(range(3, 8)) - set(got) == said


def test_a_batch_a_landing_sink_acked_before_a_crash_is_no_data_loss(server: NatsServer, nats: SyncNats,
                                                                     tmp_path: Path) -> None:
    """A WorkQueue origin removes the batch a landing sink acked after its Delta commit, before
    Spark's commit log: the driver dies there, and the new one resumes at the checkpoint (100)
    while delivery goes on after the durable's ack floor (200). That jump over removed messages is
    no loss: they are in the lake. (The crash test's workqueue-job run met it as a DataLossError
    over the acked batch, when the jump check compared only with what the reader held.)"""
    nats.add_stream(name="LMJ", subjects=["lmj.>"], retention="workqueue")
    fast_publish(nats, "lmj", 0, 300)
    o = opts(server.url, "LMJ", tmp_path, consumer="lake", maxAckPending="100", spillReferences="true")
    ing = Ingestor(o)
    ing.start(None)
    try:
        wait_for(lambda: ing.latest(0, None, None) >= 100, 20, "a full window buffered")
        assert ing.latest(0, None, None) == 100
        wait_for(lambda: ing.latest(100, None, None) >= 200, 20, "the next window, once Spark committed 100")
        refs = [p.to_json() for p in ing.plan(100, 200, by_reference=True)]
        mark_landed(refs)  # the sink's Delta commit holds (100, 200]; Spark has not committed it
        wait_for(lambda: nats.state("LMJ")["first_seq"] == 201, 10, "the landed batch acked")
    finally:
        ing.stop()
    again = Ingestor(o)
    again.start(100)  # the checkpoint: Spark runs (100, 200] again
    try:
        assert again.plan(100, 200) == []
        _, rest = drain(again, 200, 300)
        assert rest == list(range(201, 301))
    finally:
        again.stop()
