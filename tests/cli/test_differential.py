"""``stream info -j`` has the server's shape: the same config and state keys as a real
nats-server's ``$JS.API.STREAM.INFO`` answer for the same stream, and the same error.
``pub --count N`` ends as N separate publishes to the server do."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from jsspark.nats_server import NatsServer
from tests.cli.conftest import Run

pytestmark = pytest.mark.nats

CONFIG = {
    "name": "DIFF", "subjects": ["diff.*"], "max_msgs": 100, "max_age": 3_600_000_000_000,
    "duplicate_window": 60_000_000_000, "allow_direct": True, "deny_purge": True, "discard": "new",
    "max_msgs_per_subject": 10, "metadata": {"team": "x"},
}  # fmt: skip


def _server_answers(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        nc = await nats.connect(url)
        try:

            async def req(subject: str, body: Any = None) -> dict[str, Any]:
                msg = await nc.request(
                    subject, json.dumps(body).encode() if body is not None else b"", timeout=5
                )
                return json.loads(msg.data)

            await req("$JS.API.STREAM.DELETE.DIFF")
            created = await req("$JS.API.STREAM.CREATE.DIFF", CONFIG)
            assert "error" not in created, created
            for subject in ("diff.a", "diff.b", "diff.a"):
                await nc.request(subject, b"x", timeout=5)
            await req("$JS.API.STREAM.MSG.DELETE.DIFF", {"seq": 2})
            return await req("$JS.API.STREAM.INFO.DIFF"), await req("$JS.API.STREAM.INFO.NOPE")
        finally:
            await nc.close()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


def test_stream_info_json_keys_match_the_server(cli: Run, tmp_path: Any, nats_server: NatsServer) -> None:
    server, missing = _server_answers(nats_server.url)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONFIG))
    cli("stream", "add", "--config", str(path))
    for subject in ("diff.a", "diff.b", "diff.a"):
        cli("pub", subject, "x")
    assert cli("stream", "rmm", "DIFF", "2", "-f").code == 0
    mine = cli("stream", "info", "DIFF", "-j").json()
    # the server also sends the response type, its time, cluster info and subject paging
    assert set(server) - set(mine) == {"type", "cluster", "ts", "total", "offset", "limit"}
    assert set(mine) <= set(server)
    assert list(mine["config"]) == list(server["config"])
    # same keys; the engine writes consumer_count before num_subjects/num_deleted (the server's
    # struct order puts it last), which JSON readers do not see
    assert set(mine["state"]) == set(server["state"])
    for key in (
        "messages",
        "bytes",
        "first_seq",
        "last_seq",
        "num_subjects",
        "num_deleted",
        "consumer_count",
    ):
        assert mine["state"].get(key) == server["state"].get(key), key
    for key in (
        "max_msgs",
        "max_age",
        "duplicate_window",
        "allow_direct",
        "deny_purge",
        "discard",
        "max_msgs_per_subject",
    ):
        assert mine["config"][key] == server["config"][key], key
    err = missing["error"]
    res = cli("stream", "info", "NOPE")
    assert (
        res.err
        == f"jsspark: error: could not get info for stream NOPE: {err['description']} ({err['err_code']})\n"
    )


# streams whose N-th publish is refused: (name, config, headers of each publish, N)
REFUSING = [
    ("PCNEW", {"subjects": ["pcnew.>"], "max_msgs": 3, "discard": "new"}, {}, 5),
    ("PCSEQ", {"subjects": ["pcseq.>"]}, {"Nats-Expected-Last-Sequence": "0"}, 3),
]


def _server_publishes(url: str) -> dict[str, tuple[int, dict[str, Any] | None]]:
    """Per stream of ``REFUSING``: the messages stored after N separate publishes (stopping at
    the first refusal, as ``nats pub --count`` does) and that refusal's error."""

    async def go() -> dict[str, tuple[int, dict[str, Any] | None]]:
        nc = await nats.connect(url)
        out = {}
        try:
            for name, config, headers, n in REFUSING:
                await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=5)
                created = json.loads(
                    (
                        await nc.request(
                            f"$JS.API.STREAM.CREATE.{name}",
                            json.dumps({"name": name, **config}).encode(),
                            timeout=5,
                        )
                    ).data
                )
                assert "error" not in created, created
                error = None
                for _ in range(n):
                    ack = json.loads(
                        (await nc.request(f"{name.lower()}.1", b"x", headers=headers or None, timeout=5)).data
                    )
                    if "error" in ack:
                        error = ack["error"]
                        break
                info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
                out[name] = (info["state"]["messages"], error)
        finally:
            await nc.close()
        return out

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


def test_pub_count_stops_where_separate_publishes_are_refused(
    cli: Run, tmp_path: Any, nats_server: NatsServer
) -> None:
    server = _server_publishes(nats_server.url)
    for name, config, headers, n in REFUSING:
        stored, error = server[name]
        assert error is not None, name
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"name": name, **config}))
        assert cli("stream", "add", "--config", str(path)).code == 0
        flags = [a for k, v in headers.items() for a in ("-H", f"{k}:{v}")]
        res = cli("pub", f"{name.lower()}.1", "x", "--count", str(n), *flags, "-j")
        assert res.code == 1, name
        doc = json.loads(res.out)
        assert (doc["stored"], doc["error"]) == (stored, error), name
        assert (
            f"message {stored + 1} of {n}" in res.err
            and f"{error['description']} ({error['err_code']})" in res.err
        )
        assert cli("stream", "info", name, "-j").json()["state"]["messages"] == stored, name
