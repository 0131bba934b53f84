"""What streams and consumers exist under a location, kept as a small Delta table.

A record is ``(kind, stream, name) -> body`` (JSON); the newest record for a key wins and a
``deleted`` record removes it. Every change carries the ``txn`` app id ``jsspark.catalog`` at
the next revision, so concurrent changes from several processes serialise through Delta's
conflict checker exactly like stream commits do (see ``table.py``): a check-then-write (add a
stream only if absent, move an ack floor only forward) is atomic.

delta-rs rejects custom table properties, which is why configs live here and not in the
stream tables' metadata.

The table is a log: every change appends a file, and reading it replays every file. So that
the cost of a read does not grow with the catalog's history (a durable consumer moves its ack
floor with every batch of a streaming query, for days), every ``COMPACT_EVERY`` revisions the
live records are written as one file in place of all the others, in a commit of its own that
serialises with changes like any change does; then the table is checkpointed, its log cleaned
up and the files it no longer uses vacuumed (``RETENTION``). A process also keeps what it
wrote: after its own commit, the records it read plus its changes are the records at the new
version, and it reads nothing.
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

from jsspark.engine.files import dataset_filesystem
from jsspark.engine.maintenance import HOOKS

CATALOG_APP_ID = "jsspark.catalog"
MAX_ATTEMPTS = 50
COMPACT_EVERY = 200  # revisions between rewrites of the live records as one file
# What a compaction leaves behind, kept this long: a reader updates its handle before every read
# (from the newest checkpoint, if the log it missed is gone), so none needs them for long.
# Without log cleanup, every commit lists a longer log: +10 ms a commit per 1,000 commits.
RETENTION = {"delta.logRetentionDuration": "interval 10 minutes",
             "delta.deletedFileRetentionDuration": "interval 1 hours"}
VACUUM_AFTER_HOURS = 1

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
        # (version, revision) of a change this process committed: the revision at that version,
        # which ``transaction_version`` finds only by reading every log entry since the newest
        # checkpoint (a GET each on an object store)
        self._rev_at: tuple[int, int] | None = None

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
        return self._records_of(self._table(create=False))

    def _records_of(self, dt: DeltaTable | None) -> dict[Key, Record]:
        """``records`` of the table as ``dt`` last saw it (refreshed by the caller)."""
        if dt is None:
            return {}
        version = dt.version()
        if self._cache and self._cache[0] == version:
            return self._cache[1]
        live: dict[Key, Record] = {}
        # read as the streams are (``dataset_filesystem``): delta-rs's default store is a Python
        # filesystem to Arrow even on the local disk, whose buffers an Arrow thread tearing the
        # scan down after it returned released at exit without the GIL (SIGABRT, exit 134)
        rows = dt.to_pyarrow_table(filesystem=dataset_filesystem(self.uri, dt)).sort_by("rev").to_pylist()
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
            records = self._records_of(dt)
            changes = plan(records)
            if not changes:
                return changes
            version = dt.version()
            rev = self._revision(dt) + 1
            now = time.time_ns()
            rows = [_row(rev, c.kind, c.stream, c.name, c.body, now) for c in changes]
            if not self._commit(dt, rows, rev, "append"):
                continue
            live = dict(records)
            for c in changes:
                if c.body is None:
                    live.pop((c.kind, c.stream, c.name), None)
                else:
                    live[(c.kind, c.stream, c.name)] = Record(c.kind, c.stream, c.name, _copy(c.body), rev)
            self._kept(dt, version + 1, live)
            if rev % COMPACT_EVERY == 0:
                self.compact()
            return changes
        raise RuntimeError(f"catalog at {self.uri}: gave up after {MAX_ATTEMPTS} concurrent changes")

    def _commit(self, dt: DeltaTable, rows: list[dict[str, Any]], rev: int, mode: str) -> bool:
        """Write ``rows`` at revision ``rev``; False when another change got there first."""
        try:
            write_deltalake(
                dt,
                pa.Table.from_pylist(rows, schema=CATALOG_SCHEMA),
                mode=mode,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(CATALOG_APP_ID, rev)], max_commit_retries=0
                ),
                post_commithook_properties=HOOKS,  # the log is cleaned up at compaction, not listed per change
            )
        except CommitFailedError:
            return False
        self._rev_at = (dt.version(), rev)  # the write moved ``dt`` to the version it made
        return True

    def _revision(self, dt: DeltaTable) -> int:
        """The revision at ``dt``'s version: known when this process made that version."""
        if self._rev_at is not None and self._rev_at[0] == dt.version():
            return self._rev_at[1]
        return dt.transaction_version(CATALOG_APP_ID) or 0

    def _kept(self, dt: DeltaTable, version: int, live: dict[Key, Record]) -> None:
        """Cache ``live`` as the records at ``version`` if that is the version this process's
        commit made (the write moves ``dt`` to it; another commit came first: the next read reads)."""
        self._cache = (version, live) if dt.version() == version else None

    def compact(self) -> bool:
        """Rewrite the live records as the table's one file, at a revision of its own; then
        checkpoint, clean up the log and vacuum what is past ``RETENTION``. False if a
        concurrent change came first (the next compaction will do)."""
        dt = self._table()
        assert dt is not None
        records = self._records_of(dt)
        version = dt.version()
        rev = self._revision(dt) + 1
        now = time.time_ns()
        rows = [_row(r.rev, r.kind, r.stream, r.name, r.body, now)
                for r in sorted(records.values(), key=lambda r: (r.rev, r.kind, r.stream, r.name))]
        if not self._commit(dt, rows, rev, "overwrite"):
            return False
        self._kept(dt, version + 1, records)
        try:  # best effort: what is left behind costs disk and log listing, never a wrong read
            config = dt.metadata().configuration
            if any(config.get(k) != v for k, v in RETENTION.items()):
                dt.alter.set_table_properties(RETENTION)
            dt.create_checkpoint()
            dt.cleanup_metadata()
            # full: the checkpoint dropped the expired removes, so only a listing finds their files
            # (a write under way elsewhere is younger than the retention and stays)
            dt.vacuum(VACUUM_AFTER_HOURS, dry_run=False, enforce_retention_duration=False, full=True)
        except Exception:
            self._cache = None
        return True


def _row(rev: int, kind: str, stream: str, name: str, body: dict[str, Any] | None, now: int) -> dict[str, Any]:
    """A record as the table stores it (``body`` None: the key is deleted)."""
    return {"rev": rev, "kind": kind, "stream": stream, "name": name,
            "body": None if body is None else json.dumps(body, sort_keys=True), "deleted": body is None, "ts_ns": now}


def _copy(body: dict[str, Any]) -> dict[str, Any]:
    """A record's body as a read gives it: its own copy, through JSON, so what a caller later
    does to the dict it handed in does not change the cache."""
    return json.loads(json.dumps(body, sort_keys=True))
