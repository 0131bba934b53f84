"""A probe for tests that bound how often a writer reads the Delta log for a txn version."""

from __future__ import annotations

import pytest


def count_txn_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the app id of each ``DeltaTable.transaction_version`` call, which reads every log
    entry since the newest checkpoint (the list returned fills as the code under test runs)."""
    from deltalake import DeltaTable

    looked: list[str] = []
    lookup = DeltaTable.transaction_version

    def counted(self: DeltaTable, app_id: str) -> int | None:
        looked.append(app_id)
        return lookup(self, app_id)

    monkeypatch.setattr(DeltaTable, "transaction_version", counted)
    return looked
