"""The durables a job reads Interest/WorkQueue origins through: named as the server names its
sourcing consumers (``createSourcingConsumerHash``), the names jobs used before adopted, the
ones no source reads any more found for deletion; and what a lake durable's ack removes."""

from __future__ import annotations

from pathlib import Path

import jsspark
from jsspark.config import StreamSource
from jsspark.datasource.planning import Cursor, Durable, settle
from jsspark.jobs.origins import choose_durable, consumer_name, legacy_consumer_name, owned_durables


def _src(name: str, filt: str = "") -> StreamSource:
    return StreamSource.from_json({"name": name, **({"filter_subject": filt} if filt else {})})


def test_the_name_is_stable_per_target_and_origin_unless_the_origin_is_read_twice() -> None:
    plain, filtered, other = _src("WQ"), _src("WQ", "wq.a.>"), _src("P")
    assert consumer_name("T", plain, [plain, other]) == consumer_name("T", filtered, [filtered])
    assert consumer_name("T", plain, [plain]) != consumer_name("U", plain, [plain])
    a, b = _src("WQ", "wq.a.>"), _src("WQ", "wq.b.>")
    # the same origin twice: the iname joins the hash (as the server's), one durable each
    assert consumer_name("T", a, [a, b]) != consumer_name("T", b, [a, b])
    assert consumer_name("T", a, [a, b]) == legacy_consumer_name("T", a)


def test_choosing_a_durable_adopts_the_old_names_and_finds_the_stale_ones() -> None:
    old, new = _src("WQ"), _src("WQ", "wq.a.>")
    want = consumer_name("T", new, [new])
    others = ["mine", "jsspark_TX_abcdefgh", "jsspark_T_toolongname"]
    # nothing there: the stable name, created
    assert choose_durable("T", new, [new], others) == (want, ())
    # a job that ran with the old naming keeps its durable (its checkpoint's offsets name it)
    legacy = legacy_consumer_name("T", new)
    assert choose_durable("T", new, [new], [*others, legacy]) == (legacy, ())
    # the filter changed since: that job's one durable there is adopted, its filter updated
    before = legacy_consumer_name("T", old)
    assert choose_durable("T", new, [new], [before, *others]) == (before, ())
    # the stable one wins; any other job durable there is stale
    assert choose_durable("T", new, [new], [before, want]) == (want, (before,))
    # the origin read twice: each source its own, a left-over one stale
    a, b = _src("WQ", "wq.a.>"), _src("WQ", "wq.b.>")
    assert choose_durable("T", a, [a, b], [before]) == (consumer_name("T", a, [a, b]), (before,))
    assert owned_durables("T", ["jsspark_T_abcdefgh", "jsspark_TX_abcdefgh", "jsspark_T_abc"]) == ["jsspark_T_abcdefgh"]


def test_a_lake_readers_ack_removes_from_a_work_queue_only_what_its_filter_delivered(tmp_path: Path) -> None:
    """A filtered durable's cursor can end on a message its filter passed over; the ack must not
    name that one (a work queue removes the message an ack names, ``stream.ackMsg``), or the
    message another consumer would read is lost."""
    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="WQ", subjects=["wq.>"], retention="workqueue")
    for s in ("wq.a.1", "wq.b.1"):
        lake.publish(s, b"x")
    lake.add_consumer("WQ", durable_name="D", ack_policy="explicit", filter_subject="wq.a.>")
    settle(lake, Cursor(2, 1, gen=0, durable=Durable(lake.location, "WQ", "D")))
    assert [r["subject"] for r in lake.stream("WQ").read().to_pylist()] == ["wq.b.1"]
    info = lake.consumer_info("WQ", "D")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending) == (2, 2, 0)
