"""A job against a nats-server older than 2.14 (2.12.8: no ``flow_control`` acks, no consumer
reset): the runner's durable falls back to explicit/AckAll acks (``jsspark.live.legacy``). A filtered source
of a WorkQueue origin lands each selected message once, the origin removes exactly those (the
others stay for their own consumers), and reruns add nothing twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.engine.headers import STREAM_SOURCE
from jsspark.nats_server import NatsServer
from tests.jobs.test_live_jobs import lake_msgs, origin_items, publish_origin, run_all
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for
from tests.live.test_legacy_server import legacy_binary
from tests.rawnats import RawNats

pytestmark = [pytest.mark.nats, pytest.mark.spark]


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with NatsServer(store_dir=tmp_path_factory.mktemp("nats-2.12"), binary=legacy_binary()) as srv:
        yield srv


def test_filtered_workqueue_source_job_on_a_2_12_server(spark: Any, old: NatsServer, tmp_path: Path) -> None:
    nats, raw = SyncNats(old.url), RawNats(old.url)
    try:
        nats.add_stream(name="LWQ", subjects=["lwq.>"], storage="file", retention="workqueue")
        items = origin_items("LWQ", "lwq", 200)  # subjects lwq.a.x, lwq.b.y, lwq.a.z, lwq.c in turn
        publish_origin(nats, raw, "LWQ", items)
        source = {"name": "LWQ", "filter_subject": "lwq.a.>"}
        loc = str(tmp_path / "lake")
        lake = jsspark.connect(loc)
        job = {"stream": {"name": "LWS", "subjects": ["lws.>"], "sources": [source]}, "target": {"location": loc},
               "origins": {"*": {"servers": old.url, "options": {"maxMessagesPerTrigger": "40"}}},
               "trigger": "available_now"}

        def check(n: int) -> None:
            """The lake holds the selected ones of origin messages 1..n once each, in order; the
            origin holds exactly the others."""
            want = [(i + 1, it) for i, it in enumerate(items[:n]) if it[0].startswith("lwq.a.")]
            got = lake_msgs(lake, "LWS")
            assert [(m["subject"], m["data"]) for m in got] == [(s, d) for _, (s, d, _) in want]
            for m, (oseq, (subject, _, pairs)) in zip(got, want, strict=True):
                clean = [(k, v) for k, v in pairs if not k.startswith("Nats-Expected-")]
                assert m["headers"][:-1] == clean
                key, value = m["headers"][-1]  # no identity token: the origin's server has no API level
                assert key == STREAM_SOURCE and value.startswith(f"LWQ {oseq} ") and value.endswith(f" {subject}")
            wait_for(lambda: nats.state("LWQ")["messages"] == n - len(want), 90, "the selected messages to be removed")
            left = [nats.get("LWQ", s)["subject"] for s in range(1, n + 1) if "error" not in
                    nats.api("STREAM.MSG.GET.LWQ", {"seq": s})]
            assert len(left) == n - len(want) and not any(s.startswith("lwq.a.") for s in left)

        (done,) = run_all([job], spark)
        assert sum(1 for p in done.queries[0].recentProgress if p["numInputRows"]) >= 100 // 40
        check(200)
        cons = nats.api("CONSUMER.LIST.LWQ")["consumers"]
        # the fallback's durable (a 2.14+ server gets flow_control): explicit acks, as a WorkQueue needs
        assert [(c["config"]["ack_policy"], c["config"].get("filter_subject")) for c in cons] == [
            ("explicit", "lwq.a.>")]

        run_all([job], spark)  # same checkpoint, nothing new: nothing twice
        check(200)
        more = origin_items("LWQ", "lwq", 60, offset=200)
        items += more
        publish_origin(nats, raw, "LWQ", more)
        run_all([job], spark)
        check(260)
    finally:
        raw.close()
        nats.close()
