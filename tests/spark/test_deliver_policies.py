"""What a batch read delivers equals what a real nats-server consumer with the same config
delivers on the same messages: stream sequences, delivery sequences, pending counts, and
(headers_only) the headers. Invalid option combinations fail at ``load()`` with the text the
server answers for the same consumer config."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import ConsumerConfig as NatsConsumerConfig

import jsspark
from jsspark.engine.lake import Lake

pytestmark = [pytest.mark.spark, pytest.mark.nats]

_ids = itertools.count()
SUBJECTS = ["a.x", "a.y", "b.x", "a.x", "b.y", "a.y", "a.z", "b.x", "a.x", "a.y"]


class Both:
    """The same stream on a real server and on a lake; publishes go to both."""

    def __init__(self, url: str, loc: str) -> None:
        self.name = f"P{next(_ids)}"
        self.prefix = self.name.lower()
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(url))
        self.js = self.nc.jetstream()
        self.loop.run_until_complete(self.js.add_stream(name=self.name, subjects=[f"{self.prefix}.>"]))
        self.loc = loc
        self.lake: Lake = jsspark.connect(loc)
        self.lake.add_stream(name=self.name, subjects=[f"{self.prefix}.>"])

    def close(self) -> None:
        self.loop.run_until_complete(self.js.delete_stream(self.name))
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()

    def publish(self, subjects: list[str]) -> None:
        for i, s in enumerate(subjects):
            subject, data = f"{self.prefix}.{s}", f"{s}-{i}".encode() * (i + 1)
            headers = {"K": str(i)} if i % 2 else None
            self.loop.run_until_complete(self.js.publish(subject, data, headers=headers))
            self.lake.publish(subject, data, headers=headers)

    def server(self, cfg: dict[str, Any]) -> list[tuple[int, int, int, dict[str, str] | None]]:
        """(stream seq, delivery seq, num_pending, headers) of everything a fresh consumer gets."""
        durable = f"C{next(_ids)}"

        async def go() -> list[tuple[int, int, int, dict[str, str] | None]]:
            config = NatsConsumerConfig.from_response({**cfg, "durable_name": durable, "ack_policy": "none"})
            await self.js.add_consumer(self.name, config)
            sub = await self.js.pull_subscribe_bind(durable, self.name)
            out = []
            while True:
                try:
                    msgs = await sub.fetch(100, timeout=0.5)
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                for m in msgs:
                    md = m.metadata
                    out.append((md.sequence.stream, md.sequence.consumer, md.num_pending, m.headers))
            await sub.unsubscribe()
            await self.js.delete_consumer(self.name, durable)
            return out

        return self.loop.run_until_complete(go())

    def server_error(self, cfg: dict[str, Any]) -> str:
        async def go() -> str:
            import json

            req = {"stream_name": self.name, "config": cfg}
            name = cfg.get("durable_name")
            subject = f"$JS.API.CONSUMER.CREATE.{self.name}" + (f".{name}" if name else "")
            msg = await self.nc.request(subject, json.dumps(req).encode(), timeout=5)
            return json.loads(msg.data)["error"]["description"]

        return self.loop.run_until_complete(go())


@pytest.fixture
def both(nats_server: Any, tmp_path: Path) -> Iterator[Both]:
    b = Both(nats_server.url, str(tmp_path / "lake"))
    try:
        yield b
    finally:
        b.close()


def _lake_read(spark: Any, both: Both, cfg: dict[str, Any]) -> list[tuple[int, int, int, dict[str, str] | None]]:
    r = spark.read.format("jetstream").option("stream", both.name)
    for k, v in cfg.items():
        r = r.option(k, ",".join(v) if isinstance(v, list) else str(v))
    rows = r.load(both.loc).orderBy("seq").collect()
    return [
        (r.seq, r.delivery_seq, r.num_pending, {h.name: h.value for h in r.headers} if r.headers else None)
        for r in rows
    ]


CASES: list[tuple[str, dict[str, Any]]] = [
    ("all", {}),
    ("all-filter", {"filter_subject": "{p}.a.*"}),
    ("all-filters", {"filter_subjects": ["{p}.a.x", "{p}.b.>"]}),
    ("by_start_sequence", {"deliver_policy": "by_start_sequence", "opt_start_seq": 4}),
    ("by_start_sequence-filter", {"deliver_policy": "by_start_sequence", "opt_start_seq": 4, "filter_subject": "{p}.b.*"}),
    ("by_start_sequence-past-end", {"deliver_policy": "by_start_sequence", "opt_start_seq": 50}),
    ("headers_only", {"headers_only": True, "filter_subject": "{p}.a.>"}),
    ("last", {"deliver_policy": "last"}),
    ("last-filter", {"deliver_policy": "last", "filter_subject": "{p}.b.*"}),
    ("new", {"deliver_policy": "new"}),
    ("last_per_subject", {"deliver_policy": "last_per_subject", "filter_subject": "{p}.a.*"}),
    ("last_per_subject-multi", {"deliver_policy": "last_per_subject", "filter_subjects": ["{p}.a.x", "{p}.b.*"]}),
]


def _fill(cfg: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if isinstance(v, str):
            v = v.replace("{p}", prefix)
        elif isinstance(v, list):
            v = [s.replace("{p}", prefix) for s in v]
        out[k] = v
    return out


@pytest.mark.parametrize(("case", "cfg"), CASES, ids=[c for c, _ in CASES])
def test_delivers_what_the_server_delivers(spark: Any, both: Both, case: str, cfg: dict[str, Any]) -> None:
    both.publish(SUBJECTS)
    cfg = _fill(cfg, both.prefix)
    server = both.server(cfg)
    lake = _lake_read(spark, both, cfg)
    assert lake == server
    if case not in ("new", "by_start_sequence-past-end"):
        assert lake


def test_by_start_time_matches_the_server(spark: Any, both: Both) -> None:
    both.publish(SUBJECTS[:5])
    time.sleep(0.05)  # the clock itself must pass the first messages' times: no other actor to wait on
    from datetime import UTC, datetime

    start = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    time.sleep(0.05)  # and move on before the next ones
    both.publish(SUBJECTS[5:])
    cfg = {"deliver_policy": "by_start_time", "opt_start_time": start}
    assert _lake_read(spark, both, cfg) == both.server(cfg)


INVALID: list[dict[str, Any]] = [
    {"deliver_policy": "by_start_sequence"},
    {"deliver_policy": "by_start_time"},
    {"deliver_policy": "all", "opt_start_seq": 3},
    {"deliver_policy": "last_per_subject"},
    {"filter_subject": "{p}.a", "filter_subjects": ["{p}.b"]},
    {"filter_subjects": ["{p}.a.>", "{p}.a.x"]},
    {"filter_subject": "{p}..bad"},
    {"durable_name": "bad/name"},
]


@pytest.mark.parametrize("cfg", INVALID, ids=[",".join(c) for c in INVALID])
def test_invalid_options_fail_at_load_with_the_server_text(spark: Any, both: Both, cfg: dict[str, Any]) -> None:
    cfg = _fill(cfg, both.prefix)
    expected = both.server_error(cfg)
    with pytest.raises(Exception) as info:
        r = spark.read.format("jetstream").option("stream", both.name)
        for k, v in cfg.items():
            r = r.option(k, ",".join(v) if isinstance(v, list) else str(v))
        r.load(both.loc)
    assert expected in str(info.value)
