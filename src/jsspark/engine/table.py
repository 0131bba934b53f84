"""One stream's messages as a Delta table: commits that keep sequences unique and contiguous.

Every commit that changes a stream carries a Delta ``txn`` action with app id
``jsspark.seq``, whose version is the stream's last assigned sequence. That gives two things
with no scan and no lock service:

- ``last_seq`` is read from the log (``DeltaTable.transaction_version``);
- two writers that both read the same snapshot carry the same app id, so Delta's conflict
  checker fails the loser (``CommitFailedError``: concurrent transaction). The loser reloads,
  re-plans on the new state and tries again: sequences are never duplicated or skipped,
  whatever process the writers run in.

Commits also record the stream's resulting state in ``commitInfo`` (key ``jsspark.state``) so
``stream_info`` reads it from the newest commit instead of scanning.

Tables stay readable by Spark's Delta connector: reader 1 / writer 2, UTC timestamps, no
deletion vectors (delta-rs never writes them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from jsspark.engine.files import dataset_filesystem, table_filesystem
from jsspark.engine.limits import SeqRemoval
from jsspark.engine.maintenance import HOOKS, Upkeep
from jsspark.engine.schema import MESSAGE_SCHEMA, PARTITION_COLUMN

SEQ_APP_ID = "jsspark.seq"
# Version: the catalog revision of the stream config the table's writers must plan on. A config
# update commits it (with the sequence txn, so a publish planned before conflicts and re-plans).
CONFIG_APP_ID = "jsspark.config"
STATE_KEY = "jsspark.state"
# Small row groups: a get by sequence decodes one group of one file, not a whole file.
# Sequences and times ascend: delta-encoded they take a few bytes per row group, where the
# default dictionary of unique values took 8 bytes a row each (a 250,000-message commit whose
# payloads all compress to nothing: 4.6 MB of files -> 44 KB, written in 0.05 CPU-s, not 0.07).
# Spark's Parquet reader (vectorized or not) reads DELTA_BINARY_PACKED since 3.3.
_ASCENDING = ColumnProperties(dictionary_enabled=False, encoding="DELTA_BINARY_PACKED")
# No Parquet statistics on the payloads: delta-rs's writer keeps min and max values untruncated,
# so each row group's footer (and page index) held two more copies of its largest payloads,
# nothing reads them (no query prunes by payload), and the writer held them all in memory until
# the footer: a file of 4 MiB messages was 3 times their size, and its landing's peak
# memory 6 times (bench/landing.py).
_PAYLOAD = ColumnProperties(statistics_enabled="NONE")
ROW_GROUP_ROWS = 16_384
# ... and small in bytes too: a group of 16,384 messages of 1 MiB would be 16 GiB, all decoded
# for a get of one of them, so large messages get fewer rows per group (a power of two)
ROW_GROUP_BYTES = 4 << 20


@functools.cache
def _writer_properties(rows: int) -> WriterProperties:
    return WriterProperties(
        max_row_group_size=rows, compression="SNAPPY",
        column_properties={"seq": _ASCENDING, "ts_ns": _ASCENDING, "time": _ASCENDING, "data": _PAYLOAD},
    )


WRITER_PROPERTIES = _writer_properties(ROW_GROUP_ROWS)


def writer_properties(state: dict[str, Any] | None, rows: pa.Table | None = None) -> WriterProperties:
    """The writer properties for messages of the average size of ``rows`` (else of the stream
    in ``state``): row groups of ``ROW_GROUP_ROWS`` rows at most and about ``ROW_GROUP_BYTES``."""
    n, size = 0, 0
    if rows is not None and rows.num_rows:
        n, size = rows.num_rows, int(pc.sum(rows["size"]).as_py() or 0)
    elif state:
        n, size = int(state.get("messages") or 0), int(state.get("bytes") or 0)
    per_row = size // n if n else 0
    limit = ROW_GROUP_ROWS if per_row <= 0 else max(1, min(ROW_GROUP_ROWS, ROW_GROUP_BYTES // per_row))
    return _writer_properties(1 << (limit.bit_length() - 1))
# A commit that removes messages writes what it keeps of each file it touches in pieces of
# about this size (delta-rs rolls to a new file once it has written this much), so the next
# removal near them (the head of a stream at a limit, the older revision a KV put replaces)
# rewrites one piece, not a whole file of a large batch or a compaction. Its new rows, when
# larger, set the size instead: a big batch is not cut into many small files.
REWRITE_FILE_BYTES = 1 << 20
DEFAULT_FILE_BYTES = 100 << 20  # delta-rs's own target when none is passed
STATS_COLUMNS = 4  # the leading columns of MESSAGE_SCHEMA: seq, ts_ns, time, subject
NO_CHANGE = ("VACUUM START", "VACUUM END")  # commits that change no message and record no state
# How many commits that change no data (another engine's table properties, a Spark OPTIMIZE)
# ``recorded_state`` looks past for the newest state: beyond, the state is derived.
LOOK_PAST = 32
VACUUM_ATTEMPTS = 20
# How many versions a writer behind the newest reads from the log to catch up (its txn marks,
# its index: ``log_since``); further behind, it reads the table's state afresh.
CATCH_UP_VERSIONS = 100


def unique_app_transactions(txns: list[Transaction]) -> list[Transaction]:
    """``txns`` with each app id once (the same version given again is dropped, as Spark's writer
    drops it). ``ValueError`` for an app id given two versions: a Delta snapshot holds one version
    per app id (PROTOCOL.md, Action Reconciliation), and readers disagree on which of two in one
    commit wins (delta-rs keeps the first, Spark's log replay the last)."""
    seen: dict[str, Transaction] = {}
    for t in txns:
        if seen.setdefault(t.app_id, t).version != t.version:
            raise ValueError(f"txn app id {t.app_id!r} given two versions in one commit: "
                             f"{seen[t.app_id].version} and {t.version}")
    return list(seen.values())


def check_user_app_ids(app_ids: list[str]) -> None:
    """A writer's own ``txn`` app ids may not be the table's marks (``SEQ_APP_ID``, ``CONFIG_APP_ID``)."""
    for app in app_ids:
        if app in (SEQ_APP_ID, CONFIG_APP_ID):
            raise ValueError(f"txn app id {app!r} is the stream table's own mark: use another app id")


class ConcurrentCommit(Exception):
    """Another writer committed first; the caller re-plans on the new snapshot."""


def _unmoved(snap: Snapshot) -> None:
    """``ConcurrentCommit`` when ``snap``'s table handle was refreshed past ``snap`` since it was
    taken (``MessageTable.snapshot`` refreshes the one handle in place, e.g. while a publish
    rereads its config): delta-rs commits on the handle's version, so a commit planned on
    ``snap`` would land on top of commits it never saw, with its own sequences again."""
    if snap.table.version() != snap.version:
        raise ConcurrentCommit(f"table moved from version {snap.version} to {snap.table.version()} while planning")


@dataclass
class Snapshot:
    """A pinned version of a stream table and the sequence counter it carries."""

    table: DeltaTable
    version: int
    last_seq: int
    # txn versions known at ``version`` (``txn_version``), shared with the table's cache
    known: dict[str, int | None] = field(default_factory=dict, repr=False, compare=False)

    def txn_version(self, app_id: str) -> int | None:
        """``DeltaTable.transaction_version`` at this version, remembered: delta-rs reads every log
        entry since the newest checkpoint for it (a GET each on an object store)."""
        if app_id not in self.known:
            self.known[app_id] = self.table.transaction_version(app_id)
        return self.known[app_id]

    @property
    def table_id(self) -> str:
        """The Delta table's id: a stream deleted and created again under its name is another table."""
        return str(self.table.metadata().id)


class MessageTable:
    """Delta I/O for one stream; knows nothing of JetStream rules."""

    def __init__(
        self, uri: str, storage_options: dict[str, str] | None = None, *, as_of: int | datetime | str | None = None
    ) -> None:
        """``as_of`` pins a read-only view at a table version or a time (Delta time travel)."""
        self.uri = uri
        self.storage_options = storage_options
        self.as_of = as_of
        self._dt: DeltaTable | None = None
        self._dataset: tuple[tuple[str, int], ds.Dataset] | None = None
        self._mark: tuple[int, bytes] | None = None  # a commit of the held table: (version, digest)
        # (version, txn versions known there): those a commit this process made wrote, and those
        # looked up since (``Snapshot.txn_version``); ``transaction_version`` finds one only by
        # reading every log entry since the newest checkpoint (up to ``delta.checkpointInterval``
        # GETs on an object store)
        self._txns_at: tuple[int, dict[str, int | None]] | None = None
        self._fs: Any = None
        self._log: dict[int, list[dict[str, Any]]] = {}  # commit entries read (``log_since``)

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def create(
        cls, uri: str, storage_options: dict[str, str] | None = None, *, name: str = "",
        state: dict[str, Any] | None = None,
    ) -> MessageTable:
        """A new table whose first commit already carries the stream's starting ``state`` (its
        sequence counter at ``last_seq``: a ``first_seq`` needs no later purge). Fails with
        ``DeltaError`` when a table exists at ``uri``."""
        last_seq = int(state["last_seq"]) if state else 0
        DeltaTable.create(
            uri,
            MESSAGE_SCHEMA,
            mode="error",
            partition_by=[PARTITION_COLUMN],
            name=name or None,
            description="jsspark lake stream",
            # file statistics for seq, ts_ns, time, subject only: what readers prune on
            configuration={"delta.dataSkippingNumIndexedCols": str(STATS_COLUMNS)},
            storage_options=storage_options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(SEQ_APP_ID, last_seq)],
                custom_metadata={STATE_KEY: json.dumps(state)} if state is not None else None,
            ),
        )
        return cls(uri, storage_options)

    def table_id(self) -> str:
        """The Delta table's id (its metadata's, new with every creation): which creation of a
        stream this table is. ``FileNotFoundError`` when there is none."""
        return str(self.snapshot().table.metadata().id)

    def table_id_or_none(self) -> str | None:
        """``table_id``, or None when no table is there (or it is being removed)."""
        try:
            return self.table_id()
        except (FileNotFoundError, OSError, DeltaError):
            return None

    def exists(self) -> bool:
        return DeltaTable.is_deltatable(self.uri, storage_options=self.storage_options)

    def snapshot(self) -> Snapshot:
        """The newest version (incrementally refreshed; loaded afresh when the table at this URI
        is another one since: ``_refresh``)."""
        if self._dt is None:
            self._open()
        elif self.as_of is None:
            self._refresh()
        assert self._dt is not None
        version = self._dt.version()
        if self._txns_at is None or self._txns_at[0] != version:
            self._txns_at = (version, self._txns_carried(version))
        known = self._txns_at[1]
        if SEQ_APP_ID not in known:
            known[SEQ_APP_ID] = self._dt.transaction_version(SEQ_APP_ID)
        return Snapshot(self._dt, version, known[SEQ_APP_ID] or 0, known)

    def _txns_carried(self, version: int) -> dict[str, int | None]:
        """The txn versions known at ``version``: those known at an older version, with the
        ``txn`` actions of the commits since (``log_since``), so a writer that lost a race does
        not look them up through the whole log again. Empty when they cannot be carried."""
        if self._txns_at is None or self._txns_at[0] >= version or not self._txns_at[1]:
            return {}
        entries = self.log_since(self._txns_at[0], version)
        if entries is None:
            return {}
        known = dict(self._txns_at[1])
        for actions in entries:
            for a in actions:
                txn = a.get("txn")
                if txn is not None and txn.get("appId") in known:
                    known[txn["appId"]] = int(txn["version"])
        return known

    def log_since(self, version: int, upto: int) -> list[list[dict[str, Any]]] | None:
        """The actions of each commit ``version + 1 .. upto`` of the held table, read from its
        log entries (each once per table: an entry is never rewritten); None when there are more
        than ``CATCH_UP_VERSIONS`` or one is gone (log cleanup)."""
        if not 0 <= upto - version <= CATCH_UP_VERSIONS or self.as_of is not None:
            return None
        if self._fs is None:
            self._fs = table_filesystem(self.uri, self.storage_options)
        entries = []
        for v in range(version + 1, upto + 1):
            actions = self._log.get(v)
            if actions is None:
                try:
                    with self._fs.open_input_stream(f"_delta_log/{v:020d}.json") as f:
                        actions = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
                except (FileNotFoundError, OSError):
                    return None
                self._log[v] = actions
            entries.append(actions)
        for v in [v for v in self._log if v <= upto - CATCH_UP_VERSIONS]:
            del self._log[v]
        return entries

    def files_since(self, version: int, upto: int) -> tuple[list[str], list[str]] | None:
        """The data files the commits ``version + 1 .. upto`` added and removed, net: a file
        both added and removed in between is in neither, so the rows of ``upto`` are those of
        ``version`` less the removed files' plus the added files' (a row in both was moved by a
        rewrite). None when the log cannot tell (``log_since``), or a file has a deletion vector."""
        entries = self.log_since(version, upto)
        if entries is None:
            return None
        added: dict[str, None] = {}
        removed: list[str] = []
        for actions in entries:
            for a in actions:
                for kind in ("add", "remove"):
                    f = a.get(kind)
                    if f is None:
                        continue
                    if f.get("deletionVector"):
                        return None
                    path = unquote(f["path"])
                    if kind == "add":
                        added[path] = None
                    elif path in added:
                        del added[path]
                    else:
                        removed.append(path)
        return list(added), removed

    def read_files(self, paths: list[str], schema: pa.Schema) -> pa.Table:
        """The ``schema`` columns of data files of the table (live or removed) by path.
        ``FileNotFoundError`` when one was vacuumed."""
        if self._fs is None:
            self._fs = table_filesystem(self.uri, self.storage_options)
        if not paths:
            return schema.empty_table()
        return ds.dataset(paths, schema=schema, format="parquet", filesystem=self._fs).to_table()

    def _open(self) -> None:
        self._txns_at = None  # a table loaded afresh may be another one (deleted and created again)
        self._log = {}
        try:
            self._dt = DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            raise FileNotFoundError(f"no lake stream table at {self.uri}") from None
        if self.as_of is not None:
            self._dt.load_as_version(self.as_of)
        else:
            self._mark = self._commit_mark(self._dt.version())

    def _refresh(self) -> None:
        """``update_incremental``, unless the stream's table was deleted and created again at this
        URI since the held version: delta-rs then lays the new log's versions above the held one
        over the old snapshot (rows of one table read as the other's), or fails with "the newest
        version in the log ... is older than the existing snapshot". A held commit's file is
        never rewritten, so the same bytes after the update mean the same table; else (or on
        that failure) the table is loaded afresh."""
        assert self._dt is not None
        held = self._mark
        try:
            self._dt.update_incremental()
            same = held is not None and self._commit_mark(held[0]) == held
        except DeltaError:
            same = False
        if not same:
            self._dataset = None
            try:
                self._open()
            except DeltaError as e:  # deleted, and the new table's log not yet written
                raise FileNotFoundError(f"no lake stream table at {self.uri} (the one read before was "
                                        f"deleted): {e}") from e
        elif self._dt.version() != held[0]:
            self._mark = self._commit_mark(self._dt.version())

    def _commit_mark(self, version: int) -> tuple[int, bytes] | None:
        """(version, digest of its commit file); None when that file is gone (log cleanup)."""
        if self._fs is None:
            self._fs = table_filesystem(self.uri, self.storage_options)
        try:
            with self._fs.open_input_stream(f"_delta_log/{version:020d}.json") as f:
                return version, hashlib.blake2b(f.read(), digest_size=16).digest()
        except (FileNotFoundError, OSError):
            return None

    def at_version(self, version: int) -> Snapshot:
        return self._pin(DeltaTable(self.uri, version=version, storage_options=self.storage_options))

    @staticmethod
    def _pin(dt: DeltaTable) -> Snapshot:
        return Snapshot(dt, dt.version(), dt.transaction_version(SEQ_APP_ID) or 0)

    # -- reads -------------------------------------------------------------------------------
    def dataset(self, snap: Snapshot) -> ds.Dataset:
        """The pyarrow dataset of a version (cached: building it walks every file's stats).

        Each fragment carries its partition value and min/max stats as a guarantee, so filters
        on ``part`` and ``seq`` skip whole files before any is opened.
        """
        key = (snap.table_id, snap.version)
        if self._dataset is None or self._dataset[0] != key:
            # ``snapshot()`` refreshes one DeltaTable in place: a snapshot pinned before a newer
            # one was taken must read its own version's files, not the newer ones.
            dt = snap.table if snap.table.version() == snap.version else self.at_version(snap.version).table
            self._dataset = (key, dt.to_pyarrow_dataset(filesystem=dataset_filesystem(self.uri, dt)))
        return self._dataset[1]

    def read(
        self,
        snap: Snapshot,
        filter: ds.Expression | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table:
        return self.dataset(snap).to_table(columns=columns, filter=filter)

    def recorded_state(self, snap: Snapshot) -> dict[str, Any] | None:
        """The state the newest commit that may change the stream recorded, if that commit was
        ours. Commits that change no message are looked past: a vacuum's, and another engine's
        that change no data (table properties, protocol, a Spark OPTIMIZE: its files are
        ``dataChange=false``); they would otherwise lose what only the record holds (the last
        msg id and time across deletes, which the server keeps)."""
        # the newest commit's entry when ``log_since`` read it (of the held table: ``_open`` forgets them)
        newest = self._log.get(snap.version) if snap.table is self._dt else None
        info = next((a["commitInfo"] for a in newest or () if "commitInfo" in a), None)
        if info is not None and info.get(STATE_KEY) is not None:
            state = json.loads(info[STATE_KEY])
            return state if state.get("last_seq") == snap.last_seq else None
        limit = 1 + len(NO_CHANGE)
        while True:
            entries = snap.table.history(limit)
            for h in entries:  # newest first
                raw = h.get(STATE_KEY)
                if raw is not None:
                    state = json.loads(raw)
                    return state if state.get("last_seq") == snap.last_seq else None
                if h.get("operation") not in NO_CHANGE and self._changes_data(int(h["version"])):
                    return None
            if len(entries) < limit or limit >= LOOK_PAST:
                return None
            limit = LOOK_PAST

    def _changes_data(self, version: int) -> bool:
        """Whether commit ``version`` adds or removes data (True when its log entry is gone)."""
        try:
            with table_filesystem(self.uri, self.storage_options).open_input_stream(
                    f"_delta_log/{version:020d}.json") as f:
                actions = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
        except (FileNotFoundError, OSError):
            return True
        return any(a[k].get("dataChange", True) for a in actions for k in ("add", "remove", "cdc") if k in a)

    @staticmethod
    def file_stats(snap: Snapshot) -> pa.Table:
        """One row per data file: path, num_records, min/max of seq and ts_ns, partition."""
        return pa.table(snap.table.get_add_actions(flatten=True))

    def stored_since(self, snap: Snapshot, lo: int, hi: int, columns: list[str]) -> pa.Table | None:
        """``columns`` of every row with ``lo < seq <= hi`` that any version up to ``snap``
        stored, live or removed since: read from the files the Delta log added after the newest
        commit that recorded a last sequence at most ``lo`` (every message of the range was
        stored after it). A row rewritten by a later commit (a delete that kept it, compaction)
        comes once per file that held it. ``None`` when this cannot be told any more: the log
        no longer reaches back that far, or one of those files was vacuumed."""
        base = self._base_version(snap, lo)
        if base is None:
            return None
        filesystem = table_filesystem(self.uri, self.storage_options)
        paths: list[str] = []
        try:
            for version in range(base + 1, snap.version + 1):
                with filesystem.open_input_stream(f"_delta_log/{version:020d}.json") as f:
                    lines = f.read().decode().splitlines()
                for line in lines:
                    add = json.loads(line).get("add") if line.strip() else None
                    if add is None:
                        continue
                    stats = json.loads(add.get("stats") or "{}")
                    fmin, fmax = stats.get("minValues", {}).get("seq"), stats.get("maxValues", {}).get("seq")
                    if (fmin is None or fmin <= hi) and (fmax is None or fmax > lo):
                        paths.append(unquote(add["path"]))
            schema = pa.schema([MESSAGE_SCHEMA.field(c) for c in columns])
            dataset = ds.dataset(paths, schema=schema, format="parquet", filesystem=filesystem)
            return dataset.to_table(filter=(ds.field("seq") > lo) & (ds.field("seq") <= hi))
        except (FileNotFoundError, OSError):
            return None

    @staticmethod
    def _base_version(snap: Snapshot, lo: int) -> int | None:
        """The newest version at or below ``snap`` whose commit recorded ``last_seq <= lo``
        (-1: before the first commit); ``None`` when the log no longer holds such a commit."""
        limit = 64
        while True:
            entries = snap.table.history(limit)
            for h in entries:  # newest first
                version = int(h["version"])
                if version > snap.version:
                    continue
                raw = h.get(STATE_KEY)
                if raw is not None and int(json.loads(raw).get("last_seq", 0)) <= lo:
                    return version
                if version == 0:
                    return -1 if raw is not None else 0  # version 0 created the table (nothing stored)
            if len(entries) < limit:
                return None  # log cleaned up before reaching a commit below the range
            limit *= 8

    # -- writes ------------------------------------------------------------------------------
    def commit(
        self,
        snap: Snapshot,
        rows: pa.Table | None,
        *,
        last_seq: int,
        removal: SeqRemoval | None = None,
        state: dict[str, Any] | None = None,
        app_transactions: list[Transaction] | None = None,
    ) -> int:
        """Append ``rows`` and remove what ``removal`` matches, as one Delta commit; the
        messages it matches but keeps are written again with the rows.

        Raises ``ConcurrentCommit`` when another writer committed after ``snap``.
        Returns the version this commit made.
        """
        _unmoved(snap)
        remove_predicate = removal.predicate if removal is not None else None
        wp = writer_properties(state, rows)
        data: pa.Table | pa.RecordBatchReader | None = None
        if rows is not None and rows.num_rows:
            data = rows.select(MESSAGE_SCHEMA.names).cast(MESSAGE_SCHEMA)
        if removal is not None and len(removal.kept):
            data = self._kept_then(snap, removal, data)
        txns = unique_app_transactions([Transaction(SEQ_APP_ID, last_seq), *(app_transactions or [])])
        props = CommitProperties(
            app_transactions=txns,
            custom_metadata={STATE_KEY: json.dumps(state)} if state is not None else None,
            max_commit_retries=0,
        )
        try:
            if remove_predicate:
                # Predicate overwrite: delete matches and add the new rows atomically. The new
                # rows satisfy the predicate through its ``seq > snapshot last`` arm, the kept
                # ones through its ranges; the rest of a file it matches is written again by
                # delta-rs, in pieces (``REWRITE_FILE_BYTES``), as the kept rows are.
                new_bytes = rows.nbytes if rows is not None and rows.num_rows else 0
                write_deltalake(
                    snap.table,
                    data if data is not None else MESSAGE_SCHEMA.empty_table(),
                    mode="overwrite",
                    predicate=f"({remove_predicate}) OR seq > {snap.last_seq}",
                    partition_by=[PARTITION_COLUMN],
                    target_file_size=min(DEFAULT_FILE_BYTES, max(REWRITE_FILE_BYTES, new_bytes)),
                    commit_properties=props,
                    writer_properties=wp,
                    post_commithook_properties=HOOKS,
                )
            elif data is not None:
                write_deltalake(
                    snap.table, data, mode="append", partition_by=[PARTITION_COLUMN], commit_properties=props,
                    writer_properties=wp, post_commithook_properties=HOOKS,
                )
            else:
                # Nothing stored (e.g. interest retention, no interest) but sequences consumed:
                # an empty append still records the new last sequence.
                write_deltalake(
                    snap.table,
                    MESSAGE_SCHEMA.empty_table(),
                    mode="append",
                    partition_by=[PARTITION_COLUMN],
                    commit_properties=props,
                    post_commithook_properties=HOOKS,
                )
        except CommitFailedError as e:
            raise ConcurrentCommit(str(e)) from e
        version = snap.table.version()  # the write moved the handle to the version it made, no further
        # what this commit's version holds: what its snapshot's did, and the txns it wrote
        known = dict(snap.known) if self._txns_at is not None and self._txns_at[0] == snap.version else {}
        known.update({t.app_id: t.version for t in txns})
        self._txns_at = (version, known)
        return version

    def _kept_then(self, snap: Snapshot, removal: SeqRemoval, rows: pa.Table | None) -> pa.RecordBatchReader:
        """The stored rows ``removal`` keeps, a file at a time, then ``rows``: streamed into the
        commit, so a removal that keeps most of a large stream holds no more than a batch. The
        kept rows are picked by the smaller of the two sets (kept, or removed within the ranges)."""
        seq = ds.field("seq")
        if removal.ranges is None or len(removal.kept) <= len(removal.removed):
            pick = seq.isin(pa.array(removal.kept, pa.int64()))
        else:
            lo, hi = removal.ranges
            within = functools.reduce(operator.or_, [(seq >= a) & (seq <= b) for a, b in zip(
                lo.tolist(), hi.tolist(), strict=True)])
            if removal.parts is not None:
                within = ds.field(PARTITION_COLUMN).isin(pa.array(removal.parts, pa.string())) & within
            pick = within & ~seq.isin(pa.array(removal.removed, pa.int64()))
        scanner = self.dataset(snap).scanner(columns=MESSAGE_SCHEMA.names, filter=pick)
        want = len(removal.kept)

        def batches() -> Iterator[pa.RecordBatch]:
            found = 0
            for batch in scanner.to_batches():
                if batch.num_rows:
                    found += batch.num_rows
                    yield batch.cast(MESSAGE_SCHEMA)
            if found != want:  # the index and the table disagree: fail the write rather than lose rows
                raise RuntimeError(f"table {self.uri}: {want} messages to keep at version {snap.version}, "
                                   f"{found} found")
            if rows is not None:
                yield from rows.to_batches()

        return pa.RecordBatchReader.from_batches(MESSAGE_SCHEMA, batches())

    def compact(self, snap: Snapshot, state: dict[str, Any] | None, target_size: int | None = None) -> dict[str, Any]:
        """Rewrite files smaller than ``target_size`` into larger ones (``dataChange=false``:
        streaming readers skip it), with the writer properties of every other commit.

        Carries the unchanged state like any other commit; delta-rs's optimize writes no ``txn``
        (it drops the ``app_transactions`` given here), which changes nothing: the sequence mark
        stands from the commit that wrote it. A concurrent writer's commit fails it
        (``ConcurrentCommit``: no retries, delta-rs's conflict check). The handle is left at the
        version it made (or at ``snap`` when there was nothing to merge).
        """
        _unmoved(snap)
        props = CommitProperties(
            app_transactions=[Transaction(SEQ_APP_ID, snap.last_seq)],
            custom_metadata={STATE_KEY: json.dumps(state)} if state is not None else None,
            max_commit_retries=0,
        )
        try:
            return snap.table.optimize.compact(
                target_size=target_size, commit_properties=props, writer_properties=writer_properties(state),
                post_commithook_properties=HOOKS,
            )
        except CommitFailedError as e:
            raise ConcurrentCommit(str(e)) from e

    def upkeep(self, snap: Snapshot, state: dict[str, Any], upkeep: Upkeep) -> int | None:
        """``upkeep`` (``maintenance.py``) right after this process committed ``snap``, whose
        recorded state is ``state``. Returns the version the table is at afterwards when only
        upkeep's own commits followed ``snap`` (an index of ``snap`` is still exact there), else
        None. Raises ``ConcurrentCommit`` when another writer's commit came before compaction's
        and conflicts with it; delta-rs commits a compaction above appends it does not conflict
        with (they touch none of its files), and then the index of ``snap`` lacks their rows."""
        dt = snap.table
        self.compact(snap, state, upkeep.target_size)
        followed = dt.version() in (snap.version, snap.version + 1)  # nothing to merge, or merged next
        dt.cleanup_metadata()  # the log older than the table's logRetentionDuration, to a checkpoint
        if upkeep.vacuum:
            before = dt.version()
            # full: what the table's deletedFileRetentionDuration allows, found by listing (the
            # removes it is told of are only those since the newest checkpoint)
            dt.vacuum(None, dry_run=False, enforce_retention_duration=True, full=True,
                      post_commithook_properties=HOOKS)
            if dt.version() not in (before, before + 2):  # its start and end commits, or none
                return None
        return dt.version() if followed else None

    def vacuum(self, retention_hours: int = 168) -> list[str]:
        """Delete files no version within ``retention_hours`` needs, and files of lost commits
        (in the table's folders, in no log entry: a writer that lost the race or died) written
        more than ``retention_hours`` ago; a younger one may be a commit still in flight.

        ``full``: found by listing, as upkeep does; without it delta-rs only deletes the files
        the log's removes name, and never a lost commit's."""
        for _ in range(VACUUM_ATTEMPTS):
            dt = self.snapshot().table
            try:
                return dt.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False,
                                 full=True)
            except CommitFailedError:
                continue  # a writer committed between the vacuum's read and its commit: again, on the new version
        raise ConcurrentCommit(f"table {self.uri}: gave up vacuuming after {VACUUM_ATTEMPTS} concurrent commits")
