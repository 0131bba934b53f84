"""A probe for tests that bound how much of a stream an operation matches against filters."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


def count_matched(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> list[int]:
    """Record how many subjects each call of ``match_filter`` from any of ``modules`` matches
    (the list returned fills as the code under test runs)."""
    matched: list[int] = []
    for module in modules:
        real = module.match_filter

        def counted(subjects: Any, filters: Any, real: Any = real) -> Any:
            matched.append(len(subjects))
            return real(subjects, filters)

        monkeypatch.setattr(module, "match_filter", counted)
    return matched
