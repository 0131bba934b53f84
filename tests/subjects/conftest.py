"""Fixtures for the subjects suite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from subjects_rawjs import RawJS

from jsspark.nats_server import NatsServer


@pytest.fixture(scope="package")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this package's own: the overlap tests compare with a server whose subject
    space holds only their streams, whatever other suites leave on the shared one."""
    with NatsServer(store_dir=tmp_path_factory.mktemp("nats-subjects")) as srv:
        yield srv


@pytest.fixture
def rawjs(nats_server: Any, run: Any) -> Iterator[RawJS]:
    js = run(RawJS.connect(nats_server.url))
    try:
        yield js
    finally:
        run(js.close())
