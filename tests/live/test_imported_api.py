"""Batch reads through an account's import of another account's JetStream API.

SRC holds the stream and exports ``$JS.API.>``; APP imports it under ``$JS.src.API``. An export
without ``response: stream`` (singleton, the default) passes one reply per request, so a batched
direct get reaches APP as its first message only: no rest, no end of batch. With
``response: stream`` the whole batch comes. Either way a read through APP must return exactly
what the same read returns in SRC itself (whose batch read equals a server consumer:
``test_batch_read``), the singleton export one message per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from jsspark.live import snapshot
from jsspark.live.options import parse_live_read_options
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_batch_read import collect, load

pytestmark = [pytest.mark.nats]

CONFIG = """
accounts {{
  SRC: {{ jetstream: enabled, users: [{{user: src, password: srcpw}}],
         exports: [{{service: "$JS.API.>"{response}}}] }}
  APP: {{ jetstream: enabled, users: [{{user: app, password: apppw}}],
         imports: [{{service: {{account: SRC, subject: "$JS.API.>"}}, to: "$JS.src.API.>"}}] }}
}}
"""
SRC = {"user": "src", "password": "srcpw"}
APP = {"user": "app", "password": "apppw", "apiPrefix": "$JS.src.API"}
N = 2_500  # more than a batched direct get's DIRECT_BATCH
DELETED = (5, 2_000, 2_001)
CASES: list[dict[str, str]] = [
    {},
    {"filterSubject": "imp.a.>"},
    {"filterSubjects": "imp.b.1,imp.c.*", "deliverPolicy": "by_start_sequence", "optStartSeq": "700"},
    {"deliverPolicy": "last_per_subject", "filterSubjects": "imp.a.*,imp.b.2"},
    {"headersOnly": "true", "filterSubject": "imp.c.>"},
]


@pytest.fixture(scope="module", params=["singleton", "stream"])
def imported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(export response type, server url): stream IMP in SRC, N messages, three deleted."""
    root = tmp_path_factory.mktemp(f"nats-import-{request.param}")
    conf = root / "accounts.conf"
    conf.write_text(CONFIG.format(response=", response: stream" if request.param == "stream" else ""))
    with NatsServer(store_dir=root / "store", extra_args=["-c", str(conf)]) as srv:
        src = SyncNats(srv.url.replace("nats://", "nats://src:srcpw@"))
        try:
            src.add_stream(name="IMP", subjects=["imp.>"], allow_direct=True)
            src.publish_many([(f"imp.{'abc'[i % 3]}.{i % 4}", f"m{i}".encode() * (i % 3),
                               {"K": str(i)} if i % 2 else None) for i in range(N)])
            for seq in DELETED:
                assert src.api("STREAM.MSG.DELETE.IMP", {"seq": seq}).get("success"), seq
        finally:
            src.close()
        yield request.param, srv.url


def test_a_batch_read_through_an_imported_api_reads_what_the_account_itself_reads(
        imported: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Was (singleton export): each task's first batch gave one message, then ``nats: timeout``."""
    monkeypatch.setattr(snapshot, "PARTITION_SEQS", 997)  # several partitions, one batch cut in each
    _, url = imported
    for opts in CASES:
        want = collect(load(url, "IMP", **SRC, **opts))
        got = collect(load(url, "IMP", **APP, **opts))
        assert [r[0] for r in got] == [r[0] for r in want], opts
        assert got == want, opts
    everything = collect(load(url, "IMP", **APP))
    assert [r[0] for r in everything] == [s for s in range(1, N + 1) if s not in DELETED]
    lasts = collect(load(url, "IMP", **APP, deliverPolicy="last_per_subject", filterSubject="imp.>"))
    assert sorted(r[1] for r in lasts) == sorted({f"imp.{c}.{k}" for c in "abc" for k in range(4)})


def test_the_snapshot_tells_a_singleton_export_from_a_streamed_one(imported: tuple[str, str],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """``resolve_bounds`` probes once, so tasks through a singleton export go one message a
    request from the start (and the log says why and what to change)."""
    response, url = imported
    with caplog.at_level(logging.WARNING, logger="jsspark.live.snapshot"):
        bounds = asyncio.run(snapshot.resolve_bounds(parse_live_read_options({"servers": url, "stream": "IMP", **APP})))
    assert bounds.batched is (response == "stream")
    assert ("response: stream" in caplog.text) is (response == "singleton")
    own = asyncio.run(snapshot.resolve_bounds(parse_live_read_options({"servers": url, "stream": "IMP", **SRC})))
    assert own.batched is True


def subject_of(seq: int) -> str:
    i = seq - 1
    return f"imp.{'abc'[i % 3]}.{i % 4}"


@pytest.mark.parametrize("gap", [None, 0.0], ids=["gap", "every_batch_late"])
@pytest.mark.parametrize("filters", [(), ("imp.a.>", "imp.b.3")], ids=["all", "filters"])
def test_a_task_told_to_batch_finds_the_cut_itself(imported: tuple[str, str], filters: tuple[str, ...],
                                                   gap: float | None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition planned with batches (the legacy reader's gap repair reads this way too)
    through a singleton export: every message of the range, none twice. A batch only late
    (``BATCH_GAP`` 0: each is taken for cut after its first reply; with a streamed export the
    rest still comes, to an inbox no longer read) costs speed, never rows."""
    from jsspark.subjects import subject_matches

    if gap is not None:
        monkeypatch.setattr(snapshot, "BATCH_GAP", gap)
    _, url = imported
    conn = parse_live_read_options({"servers": url, "stream": "IMP", **APP}).conn
    part: dict[str, Any] = dict(conn=conn, stream="IMP", lo=3, hi=2_400, filters=filters, headers_only=False,
                                direct=True)  # batched, as planned by default
    got = asyncio.run(snapshot.read_rows(snapshot.SnapshotPartition(**part)))
    held = [s for s in range(4, 2_401) if s not in DELETED]
    assert [r[1] for r in got] == [s for s in held if not filters or any(subject_matches(f, subject_of(s))
                                                                         for f in filters)]
    assert all(r[0] == subject_of(r[1]) and r[4] == f"m{r[1] - 1}".encode() * ((r[1] - 1) % 3) for r in got)
    lasts = asyncio.run(snapshot.read_rows(snapshot.SnapshotPartition(**dict(part, filters=("imp.>",),
                                                                           last_per_subject=True))))
    assert [r[1] for r in lasts] == sorted({subject_of(s): s for s in range(1, 2_401) if s not in DELETED}.values())


def test_spark_reads_through_an_imported_api(spark: Any, imported: tuple[str, str]) -> None:
    """The real ``spark.read`` path (executors, pickled partitions). Was (singleton export): the
    job failed with ``TimeoutError: nats: timeout`` from its first task."""
    _, url = imported
    df = spark.read.format("jetstream").option("servers", url).options(**APP).option("stream", "IMP").load()
    rows = df.select("seq", "subject").collect()
    assert sorted(r.seq for r in rows) == [s for s in range(1, N + 1) if s not in DELETED]
    assert all(r.subject == subject_of(r.seq) for r in rows)
