"""Fixtures for the subjects suite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from subjects_rawjs import RawJS


@pytest.fixture
def rawjs(nats_server: Any, run: Any) -> Iterator[RawJS]:
    js = run(RawJS.connect(nats_server.url))
    try:
        yield js
    finally:
        run(js.close())
