"""A raw JetStream API client on the session's real server, for differential config tests."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from jsspark.config import (
    DYNAMIC_METADATA_KEYS,
    ConsumerConfig,
    StreamConfig,
    check_consumer_config,
    check_stream_config,
)
from jsspark.errors import APIError, ConfigIgnoredWarning

_names = itertools.count()


def unique(prefix: str = "T") -> str:
    """A stream or consumer name no other test uses."""
    return f"{prefix}{next(_names)}_{uuid.uuid4().hex[:6]}"


def stored(config: dict[str, Any]) -> dict[str, Any]:
    """A config from a server response without the metadata the server adds only to responses."""
    out = dict(config)
    meta = {k: v for k, v in out.get("metadata", {}).items() if k not in DYNAMIC_METADATA_KEYS}
    if meta:
        out["metadata"] = meta
    else:
        out.pop("metadata", None)
    return out


class RawJS:
    """Sends JetStream API requests as raw JSON and returns the raw JSON answer."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(url))

    def request(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        msg = self.loop.run_until_complete(self.nc.request(subject, payload, timeout=5))
        return json.loads(msg.data)

    def create_stream(self, cfg: dict[str, Any], pedantic: bool = False) -> dict[str, Any]:
        body = {**cfg, "pedantic": True} if pedantic else cfg
        return self.request(f"$JS.API.STREAM.CREATE.{cfg['name']}", body)

    def delete_stream(self, name: str) -> None:
        self.request(f"$JS.API.STREAM.DELETE.{name}")

    def stream_info(self, name: str) -> dict[str, Any]:
        return self.request(f"$JS.API.STREAM.INFO.{name}")

    def create_consumer(self, stream: str, cfg: dict[str, Any], pedantic: bool = False) -> dict[str, Any]:
        """New-style create subject when the config names the consumer, legacy ephemeral otherwise."""
        name = cfg.get("durable_name") or cfg.get("name")
        subject = f"$JS.API.CONSUMER.CREATE.{stream}" + (f".{name}" if name else "")
        body: dict[str, Any] = {"stream_name": stream, "config": cfg}
        if pedantic:
            body["pedantic"] = True
        return self.request(subject, body)

    def delete_consumer(self, stream: str, name: str) -> None:
        self.request(f"$JS.API.CONSUMER.DELETE.{stream}.{name}")

    def close(self) -> None:
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()


@pytest.fixture(scope="session")
def js(nats_server: Any) -> Iterator[RawJS]:
    client = RawJS(nats_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(autouse=True)
def _quiet_ignored_fields() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigIgnoredWarning)
        yield


def ours_stream(cfg: dict[str, Any], pedantic: bool = False, lookup: Any = None) -> dict[str, Any]:
    """Our answer in the server's response shape: ``{"error": ...}`` or ``{"config": ...}``."""
    try:
        return {
            "config": check_stream_config(
                StreamConfig.from_json(cfg), pedantic=pedantic, lookup=lookup
            ).to_json()
        }
    except APIError as err:
        return {"error": err.to_dict()}


def ours_consumer(cfg: dict[str, Any], stream: dict[str, Any], pedantic: bool = False) -> dict[str, Any]:
    try:
        got = check_consumer_config(
            ConsumerConfig.from_json(cfg), StreamConfig.from_json(stream), pedantic=pedantic
        )
        return {"config": got.to_json()}
    except APIError as err:
        return {"error": err.to_dict()}


def server_answer(resp: dict[str, Any]) -> dict[str, Any]:
    if "error" in resp:
        return {"error": resp["error"]}
    return {"config": stored(resp["config"])}


def assert_same_stream(
    js: RawJS, cfg: dict[str, Any], pedantic: bool = False, lookup: Any = None
) -> dict[str, Any]:
    """Our check and the server's create agree exactly (error object, or stored config)."""
    want = server_answer(js.create_stream(cfg, pedantic))
    if "config" in want:
        js.delete_stream(cfg["name"])
    assert ours_stream(cfg, pedantic, lookup) == want
    return want


def assert_same_consumer(
    js: RawJS, stream: dict[str, Any], cfg: dict[str, Any], pedantic: bool = False
) -> dict[str, Any]:
    """Create ``stream`` (a fresh name is filled in), then compare a consumer create on it."""
    stream = {"storage": "memory", **stream, "name": unique("C")}  # memory: no file-store churn
    created = js.create_stream(stream)
    assert "error" not in created, created
    try:
        resp = js.create_consumer(stream["name"], cfg, pedantic)
        want = server_answer(resp)
        if "config" in want and cfg.get("name") is None and cfg.get("durable_name") is None:
            # a legacy ephemeral gets a random name the server does not store in its config
            want["config"].pop("name", None)
        assert ours_consumer(cfg, created["config"], pedantic) == want
        return want
    finally:
        js.delete_stream(stream["name"])
