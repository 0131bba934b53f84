"""A probe for tests that bound how much of a stream an operation matches against filters."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


def count_matched(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[int]:
    """Record how many subjects each call of ``module.match_filter`` matches (the list returned
    fills as the code under test runs)."""
    matched: list[int] = []
    real = module.match_filter

    def counted(subjects: Any, filters: Any) -> Any:
        matched.append(len(subjects))
        return real(subjects, filters)

    monkeypatch.setattr(module, "match_filter", counted)
    return matched
