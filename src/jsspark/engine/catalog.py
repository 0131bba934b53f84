"""What streams and consumers exist under a location, kept as a small Delta table.

A record is ``(kind, stream, name) -> body`` (JSON); the newest record for a key wins and a
``deleted`` record removes it. Every change carries the ``txn`` app id ``jsspark.catalog`` at
the next revision, so concurrent changes from several processes serialise through Delta's
conflict checker exactly like stream commits do (see ``table.py``): a check-then-write (add a
stream only if absent, move an ack floor only forward) is atomic.

delta-rs rejects custom table properties, which is why configs live here and not in the
stream tables' metadata.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

CATALOG_APP_ID = "jsspark.catalog"
MAX_ATTEMPTS = 50

CATALOG_SCHEMA = pa.schema(
    [
        pa.field("rev", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("stream", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("body", pa.string()),
        pa.field("deleted", pa.bool_(), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
    ]
)

Key = tuple[str, str, str]


@dataclass(frozen=True)
class Record:
    kind: str
    stream: str
    name: str
    body: dict[str, Any]
    rev: int


@dataclass(frozen=True)
class Change:
    """One record to write: ``body=None`` deletes the key."""

    kind: str
    stream: str
    name: str
    body: dict[str, Any] | None


class Catalog:
    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self._dt: DeltaTable | None = None
        self._cache: tuple[int, dict[Key, Record]] | None = None

    def _table(self, create: bool = True) -> DeltaTable | None:
        """The catalog table; ``create=False`` answers ``None`` for a lake never written, so a
        read at a mistyped location leaves nothing behind."""
        if self._dt is None:
            try:
                self._dt = DeltaTable(self.uri, storage_options=self.storage_options)
            except TableNotFoundError:
                if not create:
                    return None
                DeltaTable.create(
                    self.uri, CATALOG_SCHEMA, mode="ignore", name="jsspark_catalog",
                    storage_options=self.storage_options,
                )
                self._dt = DeltaTable(self.uri, storage_options=self.storage_options)
        else:
            self._dt.update_incremental()
        return self._dt

    def records(self) -> dict[Key, Record]:
        """The live records, newest revision per key (cached per table version)."""
        dt = self._table(create=False)
        if dt is None:
            return {}
        version = dt.version()
        if self._cache and self._cache[0] == version:
            return self._cache[1]
        live: dict[Key, Record] = {}
        rows = dt.to_pyarrow_table().sort_by("rev").to_pylist()
        for r in rows:
            key = (r["kind"], r["stream"], r["name"])
            if r["deleted"]:
                live.pop(key, None)
            else:
                live[key] = Record(r["kind"], r["stream"], r["name"], json.loads(r["body"]), r["rev"])
        self._cache = (version, live)
        return live

    def get(self, kind: str, stream: str, name: str = "") -> Record | None:
        return self.records().get((kind, stream, name))

    def list(self, kind: str, stream: str | None = None) -> list[Record]:
        return sorted(
            (r for r in self.records().values() if r.kind == kind and (stream is None or r.stream == stream)),
            key=lambda r: (r.stream, r.name),
        )

    def transact(self, plan: Callable[[dict[Key, Record]], list[Change]]) -> list[Change]:
        """Run ``plan`` on the current records and commit its changes atomically.

        ``plan`` may raise to abort; on a concurrent change it runs again on the new records.
        """
        for _ in range(MAX_ATTEMPTS):
            dt = self._table()
            assert dt is not None
            records = self.records()
            changes = plan(records)
            if not changes:
                return changes
            rev = (dt.transaction_version(CATALOG_APP_ID) or 0) + 1
            now = time.time_ns()
            rows = pa.Table.from_pylist(
                [
                    {
                        "rev": rev,
                        "kind": c.kind,
                        "stream": c.stream,
                        "name": c.name,
                        "body": None if c.body is None else json.dumps(c.body, sort_keys=True),
                        "deleted": c.body is None,
                        "ts_ns": now,
                    }
                    for c in changes
                ],
                schema=CATALOG_SCHEMA,
            )
            try:
                write_deltalake(
                    dt,
                    rows,
                    mode="append",
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(CATALOG_APP_ID, rev)], max_commit_retries=0
                    ),
                )
                return changes
            except CommitFailedError:
                continue
        raise RuntimeError(f"catalog at {self.uri}: gave up after {MAX_ATTEMPTS} concurrent changes")
