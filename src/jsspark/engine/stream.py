"""One lake stream: the server's publish, limits, retention, purge and delete semantics.

A publish is planned on a pinned snapshot and its in-memory index, then committed as one
Delta commit (see ``table.py``). If another writer committed first, the plan is thrown away
and made again on the new state, so every check (dedup, expectations, limits) is decided on
the state the commit actually follows.

Batches are atomic: ``publish_batch`` stores all of its messages or none and raises the
first message's error as the server would have answered it for that message.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import Transaction
from deltalake.exceptions import DeltaError

from jsspark.engine import header_rules as rules
from jsspark.engine import headers as H
from jsspark.engine import maintenance
from jsspark.engine.api import BatchAck, SourceInfo, StreamState
from jsspark.engine.arrays import column, data_column, subject_column, take_rows
from jsspark.engine.contention import Retries
from jsspark.engine.dedup import DedupWindow, KnownIds
from jsspark.engine.expiry import NEVER as TTL_NEVER
from jsspark.engine.expiry import Expiries, expires_of, is_marker, marker_headers
from jsspark.engine.index import INDEX_SCHEMA, MessageIndex
from jsspark.engine.index_store import EXPIRY_COLUMNS, IndexStore
from jsspark.engine.limits import (
    SeqRemoval,
    expired,
    oldest_of_each,
    oldest_removals,
    removal_mask,
    seq_removal,
)
from jsspark.engine.partitioning import PartitionKey
from jsspark.engine.rollups import ALL as ROLLUP_ALL
from jsspark.engine.rollups import NEVER, MomentsOf, Reach, RolledUp, Rollup, first_reached
from jsspark.engine.rollups import SUBJECT as ROLLUP_SUBJECT
from jsspark.engine.schema import (
    INDEX_COLUMNS,
    MAX_SEQ,
    MESSAGE_SCHEMA,
    arrow_backed,
    sequence,
    stored_size,
    stored_sizes,
    value_lengths,
)
from jsspark.engine.subject_stats import KnownPositions, SubjectGroups
from jsspark.engine.table import (
    CONFIG_APP_ID,
    ConcurrentCommit,
    MessageTable,
    Snapshot,
    check_user_app_ids,
    unique_app_transactions,
)
from jsspark.errors import APIError, JSSparkError, api_error
from jsspark.subjects import SubjectTransform, match_filter, subject_matches
from jsspark.subjects.tokens import check_sendable_subject, is_literal
from jsspark.subjects.vectorized import check_sendable_subjects

log = logging.getLogger(__name__)
MAX_HEADER_BYTES = 65535
T = TypeVar("T")
_EMPTY_INDEX_ROWS = INDEX_SCHEMA.empty_table()
LAST_MSG_ID = "last_msg_id"
"""Recorded-state key of the last accepted message's id, which ``Nats-Expected-Last-Msg-Id``
compares with: the server keeps it whatever removed the message since, or whether it was
stored at all (interest retention)."""


class NoRespondersError(JSSparkError):
    """No stream listens on the subject: what a NATS client sees as "no responders"."""


def _v(x: Any) -> Any:
    return x.value if isinstance(x, Enum) else x


@dataclass
class Incoming:
    """Messages to publish, as Arrow columns of equal length."""

    subject: pa.Array
    data: pa.Array | pa.ChunkedArray  # chunked when over 2 GiB (``data_column``)
    headers: pa.Array
    # the subjects as plain strings when ``subject`` is their dictionary encoding (``encoded()``)
    plain_subject: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.subject)

    def encoded(self) -> Incoming:
        """The same messages with ``subject`` dictionary-encoded once (every subject step then
        runs on distinct values), keeping the strings as given for the stored column."""
        if pa.types.is_dictionary(self.subject.type):
            return self
        return Incoming(pc.dictionary_encode(self.subject), self.data, self.headers, self.subject)

    def with_headers(self, rows: dict[int, H.HeaderPairs]) -> Incoming:
        """The same messages, rows ``i`` of ``rows`` with other headers (as the server stores them)."""
        cells = self.headers.to_pylist()
        for i, pairs in rows.items():
            cells[i] = [{"name": k, "value": v} for k, v in pairs]
        return Incoming(self.subject, self.data, pa.array(cells, H.HEADER_TYPE), self.plain_subject)

    def subject_strings(self) -> pa.Array:
        if self.plain_subject is not None:
            return self.plain_subject
        return self.subject.cast(pa.string())

    @classmethod
    def from_table(cls, table: pa.Table | pa.RecordBatch) -> Incoming:
        names = table.schema.names
        if "subject" not in names:
            raise ValueError("publish_batch needs a 'subject' column")
        subject, headers = subject_column(table, "publish_batch"), H.headers_column(table)
        check_sendable_subjects(subject, "publish_batch")  # what no client could send is no message
        H.check_column(headers, "publish_batch")
        return cls(subject, data_column(table), headers)

    @classmethod
    def one(cls, subject: str, payload: bytes, headers: H.HeadersLike) -> Incoming:
        pairs = H.normalize(headers)
        check_sendable_subject(subject)
        H.check(pairs)
        return cls(pa.array([subject], pa.string()), pa.array([bytes(payload)], pa.binary()), H.to_arrow([pairs]))


@dataclass
class Coded:
    """A batch's subjects as stored (transformed if the stream transforms): dictionary-encoded
    against the index's known subjects (``SubjectStats.encode``), with each dictionary entry's
    position there and row count, and as strings."""

    subjects: pa.DictionaryArray
    known: KnownPositions
    plain: pa.Array
    counts: np.ndarray | None  # rows per dictionary entry (None if a subject is null)


@dataclass
class Plan:
    rows: pa.Table  # to store (full MESSAGE_SCHEMA)
    removed: np.ndarray  # existing seqs a limit removes
    last_seq: int
    seqs: np.ndarray  # per input row
    duplicates: np.ndarray
    state: dict[str, Any]
    groups: SubjectGroups  # the stored rows' subjects, computed once for state and index
    ids: list[str | None] | None = None  # per input row, when the dedup window needed them
    limited: pa.Table | None = None  # ``seq``, ``subject`` of the stored messages a limit pushed out
    rolled_up: RolledUp | None = None  # with rollups, what the consumers are told instead of ``limited``


@dataclass
class Checked:
    """The checks' verdict on a batch: which rows are accepted (the rest are duplicates),
    each row's seq, and the accepted rows that roll up (batch position, ``sub``/``all``)."""

    accepted: np.ndarray
    seqs: np.ndarray
    rollups: list[tuple[int, str]]
    rewritten: dict[int, H.HeaderPairs] = field(default_factory=dict)  # rows stored with other headers


class LakeStream:
    """A stream's semantics over its ``MessageTable``; one instance per process and stream."""

    def __init__(
        self,
        config: Any,
        table: MessageTable,
        *,
        partition_key: str,
        interest_filters: Callable[[], list[list[str]]],
        created_ns: int,
        config_rev: int = 0,
    ) -> None:
        self.config = config
        self.config_rev = config_rev  # the catalog revision ``config`` was read at
        # Reads the config again from the catalog (setting ``config`` and ``config_rev``);
        # raises the server's stream not found when the stream is gone.
        self.reread_config: Callable[[], None] | None = None
        # (table id, version) at which the table's config mark is known not to be newer than
        # ``config_rev``: this writer checked it there, or made every commit since (the mark
        # costs a delta-rs lookup of ~2 ms; a lone writer's publishes skip it).
        self._config_checked: tuple[str | None, int] | None = None
        self.table = table
        self.partition = PartitionKey(partition_key)
        self.interest_filters = interest_filters
        self.created_ns = created_ns
        self._index: MessageIndex | None = None
        self._index_table = ""  # the Delta table id the index is of
        self._last_ts: int | None = 0  # None: not computed for the current index yet
        self._recorded_last_ts = 0
        self._recorded_last_id: str | None = None  # None: the newest commit recorded none
        self._expiries: Expiries | None = None  # a stream with TTLs: when its messages expire
        self._exemptions: Expiries | None = None  # without TTLs but with max_age: the ``never`` ones
        # Told (seqs, subjects) after a commit removed stored messages one by one (a delete, a
        # limit, an expiry), as the server tells its consumers (``decStreamPending``); purges
        # and rollups are not single removals.
        self.on_removed: Callable[[np.ndarray, pa.Array], None] | None = None
        # Told after a commit that applied rollups, with those and the limits' removals in the
        # order the server makes them (``RolledUp``); then ``on_removed`` is not told.
        self.on_rolled_up: Callable[[RolledUp], None] | None = None
        self._dedup = DedupWindow()  # the msg ids of the dedup window (see dedup.py)
        self._store = IndexStore(table)

    @property
    def name(self) -> str:
        return self.config.name

    def as_of(self, version: int | datetime | str) -> LakeStream:
        """A read-only view of the stream at a table version or time: point-in-time reads the
        server cannot give once its retention removed the messages."""
        return LakeStream(
            self.config,
            MessageTable(self.table.uri, self.table.storage_options, as_of=version),
            partition_key=self.partition.spec,
            interest_filters=self.interest_filters,
            created_ns=self.created_ns,
        )

    def _writable(self) -> None:
        if self.table.as_of is not None:
            raise JSSparkError(f"stream {self.name} as of {self.table.as_of!r} is a read-only view")

    # -- state ---------------------------------------------------------------------------------
    def _load(self) -> tuple[Snapshot, MessageIndex]:
        snap = self.table.snapshot()
        if self._index is None or self._index.version != snap.version or self._index_table != snap.table_id:
            index = None
            if self._index is not None and self._index_table == snap.table_id:
                index = self._store.caught_up(self._index, snap)  # the files other writers' commits changed
            if index is None:
                index = self._store.load(snap)  # a persisted snapshot and the data files since
            if index is None:
                index = MessageIndex(self.table.read(snap, columns=INDEX_COLUMNS), snap.version)
                self._store.save_if_large(index, snap)  # the next process loads instead of rebuilding
            self._index, self._index_table = index, snap.table_id
            recorded = self.table.recorded_state(snap)
            self._recorded_last_ts = int(recorded["last_ts_ns"]) if recorded else 0
            self._recorded_last_id = recorded.get(LAST_MSG_ID) if recorded else None
            self._last_ts = None
        return snap, self._index

    @property
    def _last_ts_ns(self) -> int:
        """The stream's last message time: the newest commit's record, or the loaded index's
        newest message if later. Computed when first needed: only writes and state need it,
        and on a memory-mapped index the max touches every page of the column (0.13 s of a
        reading query's start on 10M messages)."""
        if self._last_ts is None:
            index = self._index
            newest = int(pc.max(index.rows["ts_ns"]).as_py() or 0) if index is not None and index.msgs else 0
            self._last_ts = max(newest, self._recorded_last_ts)
        return self._last_ts

    @_last_ts_ns.setter
    def _last_ts_ns(self, value: int) -> None:
        self._last_ts = value

    def _ttl_expiries(self, snap: Snapshot, index: MessageIndex) -> Expiries | None:
        """When the messages of a stream with TTLs expire (None: the stream has none), read
        from the headers once per index and kept in step with this process's commits.

        A stream without ``allow_msg_ttl`` but with ``max_age`` and a mirror or sources gets
        only the ``never`` exemptions: only sourced or mirrored messages carry a TTL there (a
        client's are refused), and the stores' ``max_age`` pass skips a ``never`` TTL whether
        TTLs are on or not, while positive TTLs only the hash wheel of a TTL stream expires.
        Other streams read no headers for this (a stream whose sources an update removed keeps
        no exemption for what they brought: a known divergence)."""
        cfg = self.config
        if not cfg.allow_msg_ttl and not (int(cfg.max_age or 0) > 0 and (cfg.mirror or cfg.sources)):
            return None
        expiries = self._all_expiries(snap, index)
        if cfg.allow_msg_ttl:
            return expiries
        if self._exemptions is None or self._exemptions.version != expiries.version:
            self._exemptions = expiries.exemptions()
        return self._exemptions

    def _all_expiries(self, snap: Snapshot, index: MessageIndex) -> Expiries:
        """Every TTL message's expiry at ``index``'s version, whatever the config (what is
        persisted: a config update that turns TTLs on finds the positive ones there)."""
        if self._expiries is None or self._expiries.version != index.version:
            expiries = self._store.load_expiries(snap, index.msgs)  # a persisted snapshot and the files since
            if expiries is None:
                expiries = Expiries.of(self.table.read(snap, columns=EXPIRY_COLUMNS), index.version)
                self._store.save_expiries_if_large(expiries, snap, index.msgs)
            self._expiries = expiries
        return self._expiries

    def _last_msg_id(self, index: MessageIndex) -> str:
        """The id of the last accepted message ('' if it had none): the newest commit's record,
        else (a table another engine wrote last) the newest stored message's, as the server
        derives it when it rebuilds a stream."""
        return self._recorded_last_id if self._recorded_last_id is not None else index.last_msg_id()

    def save_index(self) -> bool:
        """Persist the index as of the current table version (``index_store.py``), so the next
        process to open the stream loads it instead of rebuilding it (and, with TTLs, the
        messages' expiries instead of reading every header); jobs may call this on shutdown or
        on a schedule. Returns whether a snapshot was written."""
        snap, index = self._load()
        if self._ttl_expiries(snap, index) is not None:
            self._store.save_expiries(self._all_expiries(snap, index), snap)
        return self._store.save(index, snap)

    def state(self, consumer_count: int = 0) -> StreamState:
        """State from the newest commit's record; the index only if another engine wrote last."""
        snap = self.table.snapshot()
        recorded = self.table.recorded_state(snap)
        if recorded is None:
            snap, index = self._load()
            recorded = self._state_of(index, snap)
        return StreamState(consumer_count=consumer_count, **{k: v for k, v in recorded.items() if k != LAST_MSG_ID})

    def _state_of(self, index: MessageIndex, snap: Snapshot) -> dict[str, Any]:
        """The state to record with a commit that stores and removes nothing. A never-written
        stream's first seq is 0, or 1 once purged (``mark_purged``): only the record says which."""
        state = index.state_after(_EMPTY_INDEX_ROWS, None, snap.last_seq, self._last_ts_ns)
        state[LAST_MSG_ID] = self._last_msg_id(index)
        if not snap.last_seq and not state["messages"]:
            recorded = self.table.recorded_state(snap)
            if recorded is not None:
                state["first_seq"] = recorded["first_seq"]
        return state

    # -- publish -------------------------------------------------------------------------------
    def publish_batch(
        self, batch: Incoming, *, now_ns: int | None = None,
        txn: tuple[str, int] | list[tuple[str, int]] | None = None, internal: bool = False,
    ) -> BatchAck:
        """Store ``batch`` atomically with the server's per-message semantics.

        ``txn=(app_id, version)`` makes the publish idempotent for a writer that may replay
        (a Spark micro-batch: query id and batch id): the commit records it, and a batch
        whose version the table already holds for ``app_id`` is skipped (``replayed``).
        A list of them is recorded together; the batch is skipped when the table holds all.
        ``internal``: the stream's own messages (subject delete markers), already on stored
        subjects: neither routed nor transformed.
        """
        txns = [txn] if isinstance(txn, tuple) else list(txn or ())
        self._writable()
        check_user_app_ids([app for app, _ in txns])
        unique_app_transactions([Transaction(*t) for t in txns])
        if not len(batch):  # nothing to store: no commit, as a publish of nothing changes nothing
            return BatchAck(self.name, np.zeros(0, np.int64), np.zeros(0, bool), 0)

        def attempt(snap: Snapshot, index: MessageIndex) -> BatchAck:
            transform = None if internal else self._subject_transform()  # the config may be new
            given = batch
            if transform is not None:  # routable as published; stored (and checked) as transformed
                given = batch.encoded()
                self._check_routable(given.subject)
            coded = self._coded_subjects(index, given, transform)
            if transform is None and not internal:
                self._check_routable(coded.subjects, coded.known)
            done = [snap.txn_version(app) for app, _ in txns]
            if txns and all(d is not None and d >= v for d, (_, v) in zip(done, txns, strict=True)):
                return BatchAck(self.name, np.zeros(0, np.int64), np.zeros(0, bool), 0, replayed=True)
            now = now_ns or time.time_ns()
            plan = self._plan(snap, index, given, coded, now)
            if plan.last_seq == snap.last_seq and not len(plan.removed) and not txns:
                # all duplicates: nothing to commit
                return BatchAck(self.name, plan.seqs, plan.duplicates, 0)
            version = self.table.commit(
                snap,
                plan.rows,
                last_seq=plan.last_seq,
                # the live seqs are only needed (and only copied out of the index) when a limit removes
                removal=seq_removal(index.seq_array(), plan.removed, **self._parts(index))
                if len(plan.removed) else None,
                state=plan.state,
                app_transactions=[Transaction(*t) for t in txns] or None,
            )
            self._after_commit(index, snap, version, plan.rows, plan.removed, plan.state, plan.groups)
            self._remember_ids(given, plan, now)
            self._tell_consumers(plan.rolled_up, plan.limited)
            return BatchAck(self.name, plan.seqs, plan.duplicates, plan.rows.num_rows)

        try:
            return self._optimistic("publishing", attempt)
        except APIError as e:
            if not self.room_by_expiring(e, now_ns):
                raise
        return self._optimistic("publishing", attempt)

    def room_by_expiring(self, refused: APIError, now_ns: int | None = None) -> bool:
        """Whether a store a discard-new limit ``refused`` (10077) may be made again: what
        expired by now, the server's timer removed before the store came (on a stream placing
        no markers); it is expired here, and True when that removed something."""
        cfg = self.config
        timed = not cfg.subject_delete_marker_ttl and (int(cfg.max_age or 0) > 0 or cfg.allow_msg_ttl)
        return refused.err_code == 10077 and bool(timed) and self.enforce_limits(now_ns) > 0

    def _tell_consumers(self, rolled_up: RolledUp | None, limited: pa.Table | None) -> None:
        """After a commit: its rollups with the limits' removals in order (``on_rolled_up``),
        or without rollups the messages a limit pushed out (``on_removed``)."""
        if rolled_up is not None and self.on_rolled_up is not None:
            self.on_rolled_up(rolled_up)
        elif limited is not None and limited.num_rows and self.on_removed is not None:
            self.on_removed(limited["seq"].to_numpy(), limited["subject"])

    def _optimistic(self, what: str, attempt: Callable[[Snapshot, MessageIndex], T]) -> T:
        """Run ``attempt`` on the newest snapshot and index until its commit follows that state:
        a commit raising ``ConcurrentCommit`` (another writer got there first) is planned again,
        on the config the snapshot's writers must use (``record_config``). A table that fails
        to read because the stream was deleted meanwhile answers the server's stream not found."""
        retries = Retries(self.name, what)
        while True:
            try:
                snap, index = self._load()
                self.config_at(snap)
                return attempt(snap, index)
            except ConcurrentCommit:
                retries.lost()
            except (DeltaError, OSError):
                if self.reread_config is not None:
                    self.reread_config()  # raises when the stream is gone
                raise

    def config_at(self, snap: Snapshot) -> None:
        """Reread the config when ``snap`` carries the mark of a newer one than this engine's
        (``record_config``): what is planned on ``snap`` is decided on the config its writers
        must use. Looked up once per snapshot version."""
        if self._config_checked != (snap.table_id, snap.version):
            marked = snap.txn_version(CONFIG_APP_ID)
            if marked is not None and marked > self.config_rev and self.reread_config is not None:
                self.reread_config()
            self._config_checked = (snap.table_id, snap.version)

    def record_config(self) -> None:
        """Commit ``config_rev`` to the table once a config update is in the catalog, before
        the update answers: a publish planned on the old config then conflicts and re-plans
        on the new one, as the server serialises updates with stores (``processJetStreamMsg``
        checks ``Sealed`` and the limits under the stream lock)."""

        def attempt(snap: Snapshot, index: MessageIndex) -> None:
            state = self._state_of(index, snap)
            version = self.table.commit(snap, None, last_seq=snap.last_seq, state=state,
                                        app_transactions=[Transaction(CONFIG_APP_ID, self.config_rev)])
            self._after_commit(index, snap, version, None, None, state)

        self._writable()
        self._optimistic("recording a config update", attempt)

    def _commit_removal(
        self, snap: Snapshot, index: MessageIndex, mask: np.ndarray, *, last_seq: int | None = None,
        predicate: str | None = None,
    ) -> int:
        """Commit removing the live messages ``mask`` selects (``predicate`` when a simpler
        Delta predicate says exactly the same), optionally moving the last sequence; returns how many."""
        all_seqs = index.seq_array()
        removed = all_seqs[mask]
        last_seq = snap.last_seq if last_seq is None else last_seq
        state = index.state_after(_EMPTY_INDEX_ROWS, mask, last_seq, self._last_ts_ns)
        state[LAST_MSG_ID] = self._last_msg_id(index)
        removal = (SeqRemoval.where(predicate) if predicate
                   else seq_removal(all_seqs, removed, **self._parts(index))) if len(removed) else None
        version = self.table.commit(snap, None, last_seq=last_seq, removal=removal, state=state)
        self._after_commit(index, snap, version, None, removed, state)
        return len(removed)

    def _after_commit(
        self, index: MessageIndex, snap: Snapshot, version: int, added: pa.Table | None,
        removed: np.ndarray | None, state: dict[str, Any], groups: SubjectGroups | None = None,
    ) -> None:
        if version == snap.version + 1:
            if self._config_checked == (snap.table_id, snap.version):  # no other commit between
                self._config_checked = (snap.table_id, version)
            if removed is not None and len(removed):
                self._dedup.removed(index, removed)
            index.apply(added, removed, version, groups)
            self._last_ts_ns = state["last_ts_ns"]
            self._recorded_last_id = state.get(LAST_MSG_ID)
            if self._expiries is not None and self._expiries.version == snap.version:
                if added is not None and "headers" in added.column_names:
                    self._expiries.added(added, version)
                self._expiries.removed(removed if removed is not None else np.zeros(0, np.int64), version)
            upkeep = maintenance.due(version)
            if upkeep is not None:
                self._upkeep(index, Snapshot(snap.table, version, state["last_seq"]), state, upkeep)
        else:  # someone else's commit slipped in between: rebuild on next use
            self._index = None
            self._expiries = None

    def _upkeep(self, index: MessageIndex, snap: Snapshot, state: dict[str, Any], upkeep: maintenance.Upkeep) -> None:
        """The table upkeep this process owes after committing ``snap`` (``maintenance.py``).
        Never fails that commit: a concurrent commit leaves it to the next turn, an error is
        logged (the next load sees the version moved and reloads)."""
        try:
            version = self.table.upkeep(snap, state, upkeep)
        except ConcurrentCommit:
            return
        except Exception as e:  # the messages are committed; upkeep only saves later cost
            log.warning("stream %s: table upkeep after version %d failed (the next upkeep retries): %s",
                        self.name, snap.version, e)
            return
        if version is not None:
            self._relaid(index, version)

    def _relaid(self, index: MessageIndex, version: int) -> None:
        """The same messages are at ``version`` in other files (compaction, vacuum): the index
        and the expiries hold there too."""
        if self._expiries is not None and self._expiries.version == index.version:
            self._expiries.version = version
        index.version = version

    def _known_ids(self, index: MessageIndex, since_ns: int) -> KnownIds:
        return self._dedup.known(index, since_ns)

    def _remember_ids(self, batch: Incoming, plan: Plan, now: int) -> None:
        if not int(self.config.duplicate_window or 0):
            return
        if plan.ids is None:
            return
        fresh = [(mid, int(seq)) for mid, seq, dup in zip(plan.ids, plan.seqs, plan.duplicates, strict=True)
                 if mid is not None and not dup] if plan.duplicates.any() else None
        if fresh is not None:
            self._dedup.accepted([m for m, _ in fresh], [q for _, q in fresh], now)
        elif None in plan.ids:
            mine = [i for i, mid in enumerate(plan.ids) if mid is not None]
            self._dedup.accepted([plan.ids[i] for i in mine], plan.seqs[mine].tolist(), now)
        else:
            self._dedup.accepted(plan.ids, plan.seqs.tolist(), now)

    def _remember_stored(self, rows: pa.Table) -> None:
        """Ids of rows committed outside ``publish`` (mirror/source landing) join the dedup window,
        each at its message time, as ``_remember_ids`` does for publishes."""
        if not int(self.config.duplicate_window or 0) or not rows.num_rows:
            return
        ids = rows["msg_id"]
        if ids.null_count == len(ids):
            return
        known = rows.filter(pc.is_valid(ids))
        self._dedup.accepted(known["msg_id"].to_pylist(), known["seq"].to_pylist(), int(pc.max(known["ts_ns"]).as_py()))

    def _check_routable(self, published: pa.Array, known: KnownPositions | None = None) -> None:
        if self.config.mirror is not None:
            raise NoRespondersError(f"stream {self.name} is a mirror and takes no direct publishes")
        subjects = self.config.subjects or []  # a plain stream's defaults to its name; one with sources may have none
        if pa.types.is_dictionary(published.type):
            ok = _per_distinct(
                published.dictionary, known, "routable", tuple(subjects),
                lambda names: match_filter(names, subjects).to_numpy(zero_copy_only=False),
            )
            if ok.all():
                return  # every distinct subject is routable (the common case): no per-row check
        ok = match_filter(published, subjects)
        if not pc.all(ok).as_py():
            bad = published.filter(pc.invert(ok))[0].as_py()
            raise NoRespondersError(f"no responders: stream {self.name} does not listen on subject {bad!r}")

    def _parts(self, index: MessageIndex) -> dict[str, Any]:
        """``seq_removal``'s partition arguments: the partition value of the index's live
        messages at given positions (computed only for a removal that would rewrite kept
        messages), and how many values there can be."""
        subjects = index.rows.select(["subject"])

        def of(at: np.ndarray) -> np.ndarray:
            if len(at) and int(at[-1]) - int(at[0]) + 1 == len(at):  # a span: a slice, no copy
                picked = subjects.slice(int(at[0]), len(at))
            else:
                picked = take_rows(subjects, at)
            # dictionary-encoded: ``of`` works out each distinct subject's partition once (a span holds many of each)
            return self.partition.of(pc.dictionary_encode(picked["subject"]).combine_chunks()).to_numpy(
                zero_copy_only=False)

        return {"parts": of, "n_parts": self.partition.n if self.partition.kind == "hash" else None}

    def _partition_column(self, subjects: pa.DictionaryArray, known: KnownPositions) -> pa.Array:
        """The partition key of every row; for ``hash(N)`` from each known subject's bucket,
        computed once per subject and kept with the subject stats."""
        if self.partition.kind != "hash" or subjects.null_count:
            return self.partition.of(subjects)
        buckets = _per_distinct(subjects.dictionary, known, "partition", self.partition.spec, self.partition.buckets)
        return self.partition.strings(buckets, subjects.indices.to_numpy())

    def _subject_transform(self) -> SubjectTransform | None:
        tr = self.config.subject_transform
        return SubjectTransform(tr.src or ">", tr.dest) if tr is not None and tr.dest else None

    @staticmethod
    def _coded_subjects(
        index: MessageIndex, batch: Incoming, transform: SubjectTransform | None
    ) -> Coded:
        """The subjects to store (transformed if the stream transforms), encoded (``Coded``)."""
        if transform is None:
            plain = batch.subject_strings()
        else:
            plain = transform.apply_array(batch.subject, keep_unmatched=True)  # on distinct subjects
            if isinstance(plain, pa.ChunkedArray):
                plain = plain.combine_chunks()
        encoded, known, counts = index.subjects().encode(plain)
        return Coded(encoded, known, plain, counts)

    def _plan(
        self, snap: Snapshot, index: MessageIndex, batch: Incoming,
        coded: Coded, now: int,
    ) -> Plan:
        cfg = self.config
        if cfg.sealed:
            raise api_error("JSStreamSealedErr")
        subjects, known, plain = coded.subjects, coded.known, coded.plain
        n = len(batch)
        msg_ids = H.column_lookup(batch.headers, H.MSG_ID)
        hdr_len = H.column_encoded_len(batch.headers)
        data_len = value_lengths(batch.data)
        window = int(cfg.duplicate_window or 0)
        known_ids = self._known_ids(index, now - window) if window > 0 else None
        ids = msg_ids.to_pylist() if known_ids is not None and msg_ids.null_count < n else None
        # Interest retention: a message no consumer wants is not stored, but uses its sequence.
        wanted = self._wanted(subjects) if _v(cfg.retention) == "interest" else None
        self._check_sizes(hdr_len, data_len, batch.headers)  # the server's first check, before dedup
        if snap.last_seq + n > MAX_SEQ:  # a server's uint64 goes on; the int64 seq column cannot
            raise JSSparkError(
                f"stream {self.name}: {n} message(s) after sequence {snap.last_seq} would pass {MAX_SEQ}, "
                "the last sequence a lake stream's int64 seq column holds; nothing stored"
            )
        if H.any_has_prefix(batch.headers, H.CHECKED_ONE_BY_ONE):
            checked = self._check_sequential(snap, index, batch, subjects, msg_ids, known_ids, wanted)
        else:
            checked = self._check_vectorised(snap, batch, ids, msg_ids.null_count, known_ids)
        accepted, seqs = checked.accepted, checked.seqs
        if checked.rewritten:
            batch = batch.with_headers(checked.rewritten)
            hdr_len = H.column_encoded_len(batch.headers)
        duplicates = ~accepted
        last_seq = snap.last_seq + int(accepted.sum())
        store = accepted if wanted is None else accepted & wanted

        # the file store's size of every message, summed into the data lengths (checked above)
        sizes = stored_sizes(plain, hdr_len, data_len, reuse=True)
        del data_len
        counts = coded.counts
        rollups = [Rollup(int(seqs[i]), plain[i].as_py(), kind) for i, kind in checked.rollups]
        rollup_kinds = np.full(n, None, dtype=object)  # each row's rollup kind, None for none
        for i, kind in checked.rollups:
            rollup_kinds[i] = kind
        if store.all():
            new_subjects, new_headers, new_data, new_ids = subjects, batch.headers, batch.data, msg_ids
            new_seqs, new_sizes = seqs, sizes
        else:
            counts = None
            keep = np.flatnonzero(store)
            idx = pa.array(keep, pa.int64())
            new_subjects, new_headers = subjects.take(idx), batch.headers.take(idx)
            new_data, new_ids = batch.data.filter(pa.array(store)), msg_ids.take(idx)  # (take would join data's chunks)
            new_seqs, new_sizes = seqs[keep], sizes[keep]
            rollup_kinds = rollup_kinds[keep]
            plain = plain.take(idx)
        k = len(new_subjects)
        rows = pa.Table.from_arrays(
            [
                pa.array(new_seqs, pa.int64()),
                _constant(k, now, pa.int64()),
                _constant(k, now // 1000, TIME_TYPE),
                plain,
                new_headers,
                new_data,
                new_ids,
                pa.array(new_sizes),
                self._partition_column(new_subjects, known),
            ],
            schema=MESSAGE_SCHEMA,
        )
        groups = SubjectGroups.of(new_subjects, new_seqs, known, counts)
        self._check_discard_new(index, rows, rollup_kinds)
        track = bool(rollups) and self.on_rolled_up is not None
        removals = self._removals(index, rows, groups, rollups, now, self._ttl_expiries(snap, index), track)
        n_old = index.rows.num_rows
        removed_mask, limited, rolled_up = None, None, None
        if removals is not None:
            gone, rolled, moments_of = removals
            if moments_of is not None:
                stored = set(rows["seq"].to_pylist()) if not store.all() else None
                before = index.rows.select(["seq", "subject"])
                rolled_up = RolledUp(
                    rollups, [stored is None or r.seq in stored for r in rollups],
                    pa.concat_tables([before, rows.select(before.column_names).cast(before.schema)]), moments_of,
                )
            if gone[n_old:].any():
                rows = rows.filter(pa.array(~gone[n_old:]))
                groups = SubjectGroups.of(rows["subject"], rows["seq"].to_numpy())
            removed_mask = gone[:n_old]
            by_limits = removed_mask & ~rolled[:n_old]
            if by_limits.any():
                limited = take_rows(index.rows.select(["seq", "subject"]), np.flatnonzero(by_limits))
        removed = index.seq_array()[removed_mask] if removed_mask is not None else np.zeros(0, np.int64)
        last_ts = now if accepted.any() else self._last_ts_ns
        state = index.state_after(rows.select(INDEX_COLUMNS), removed_mask, last_seq, last_ts, groups)
        took = np.flatnonzero(accepted)
        state[LAST_MSG_ID] = (msg_ids[int(took[-1])].as_py() or "") if len(took) else self._last_msg_id(index)
        return Plan(rows, removed, last_seq, seqs, duplicates, state, groups, ids, limited, rolled_up)

    def _wanted(self, subjects: pa.Array) -> np.ndarray:
        """Per row of an interest stream's batch: does some consumer's filter match it?"""
        wanted = np.zeros(len(subjects), dtype=bool)
        for fs in self.interest_filters():
            wanted |= match_filter(subjects, fs or [">"]).to_numpy(zero_copy_only=False)
        return wanted

    def _removals(
        self, index: MessageIndex, rows: pa.Table, groups: SubjectGroups, rollups: list[Rollup], now: int,
        ttls: Expiries | None, track: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, MomentsOf | None] | None:
        """What the limits and rollups remove once ``rows`` are stored: masks over the index's
        rows followed by ``rows``, of all removals and of those by rollups (None: nothing), and
        with ``track`` when each went (``RolledUp.moments``, for the consumers, and their
        ``rolled``: the rollups that reached first).

        The server stores each message (applying limits) and then rolls up. Per-subject limits,
        ages and rollups remove the same whatever the order, so one pass does; ``max_msgs`` and
        ``max_bytes`` drop the oldest, which depends on what an earlier rollup of the batch freed,
        so with both, the batch is replayed rollup by rollup. Ages and TTLs expire here too,
        unless the stream places subject delete markers: those only ``enforce_limits`` places."""
        cfg = self.config
        markers = int(cfg.subject_delete_marker_ttl or 0) > 0
        max_age = 0 if markers else int(cfg.max_age or 0)
        expires = None
        if ttls is not None and not markers:
            fresh = expires_of(rows)
            if not cfg.allow_msg_ttl:  # only ``never`` exempts from max_age there
                fresh = np.where(fresh == TTL_NEVER, TTL_NEVER, 0)
            # without max_age (whose TTL exemptions they are) the expiries only matter once one is due
            if max_age or ttls.due(now) or ((fresh > 0) & (fresh <= now)).any():
                expires = fresh  # the batch's; the stored messages' are added below where needed
        if not rollups and not self._has_limits() and expires is None:
            return None
        totals = _v(cfg.discard) != "new" and (int(cfg.max_msgs) >= 0 or int(cfg.max_bytes) >= 0)
        if rollups and not totals:
            return self._limits_and_rollups(index, rows, groups, rollups, now, ttls, track)
        combined = pa.concat_tables([index.rows, rows.select(INDEX_COLUMNS).cast(index.rows.schema)])
        gone = np.zeros(combined.num_rows, dtype=bool)
        rolled = np.zeros(combined.num_rows, dtype=bool)
        per_subject = int(cfg.max_msgs_per_subject)
        # only the subjects over their limit after this batch (from the subject stats) are
        # ranked: picked out of the rows when they are few, else every subject is ranked
        over, counts = index.subjects().over(groups, per_subject) if per_subject > 0 else (None, None)
        if over is not None and not len(over):
            per_subject = 0
        elif over is not None and 4 * len(over) >= len(index.subjects()):
            over = None
        ordered = not max_age or (
            index.ts_ordered() and (not rows.num_rows or MessageIndex.ts_ordered_after(index.rows, rows))
        )
        if not rollups and expires is not None and ttls is not None and not max_age and not self._has_limits():
            # only TTLs remove: each due message by itself, found among the few seqs with a TTL
            due = index.positions_of(ttls.seqs[expired(ttls.seqs, 0, now, ttls.expires)])
            gone[due[due >= 0]] = True
            gone[index.rows.num_rows + np.flatnonzero(expired(expires, 0, now, expires))] = True
            return gone, rolled, None
        if not rollups and expires is None and not max_age and not totals and per_subject > 0 and over is not None:
            # only the per-subject limit removes: the oldest of each subject over it, often among the newest
            # rows (a key written again and again), which are read first
            at = self._over_among_newest(index, rows, over, counts - per_subject)
            if at is not None:
                gone[at] = True
                return gone, rolled, None
        if not rollups and expires is None and ordered and (per_subject <= 0 or over is not None):
            # what goes is the oldest of the subjects over their limit, the oldest of the rest, and the aged
            gone[
                oldest_removals(
                    lambda k: combined.slice(0, k),
                    combined.num_rows,
                    index.bytes + int(pc.sum(rows["size"]).as_py() or 0),
                    max_msgs=int(cfg.max_msgs),
                    max_bytes=int(cfg.max_bytes),
                    discard_old=_v(cfg.discard) != "new",
                    over=over if per_subject > 0 else None,
                    excess=None if counts is None else counts - per_subject,
                    aged_ns=now - max_age if max_age else None,
                )
            ] = True
            return gone, rolled, None
        if expires is not None and ttls is not None:
            expires = np.concatenate([ttls.over(index.seq_array()), expires])
        seqs = combined["seq"].to_numpy()

        def limits(upto: int) -> None:
            alive = np.flatnonzero(~gone[:upto])
            every = len(alive) == combined.num_rows
            gone[alive[removal_mask(
                combined if every else combined.take(alive),
                max_msgs=int(cfg.max_msgs),
                max_bytes=int(cfg.max_bytes),
                max_per_subject=per_subject,
                max_age_ns=max_age,
                now_ns=now,
                discard_old=_v(cfg.discard) != "new",
                expires=None if expires is None else (expires if every else expires[alive]),
                over_subjects=over,
            )]] = True

        moments = np.full(len(seqs), NEVER, dtype=np.int64) if track else None
        if rollups:
            reach = Reach(index, rows, rollups)
            for r in rollups:  # stored up to this rollup, limits applied, then rolled up
                limits(int(np.searchsorted(seqs, r.seq, side="right")))
                step = reach.purged([r]) & ~gone
                if moments is not None:
                    moments[gone & (moments == NEVER)] = r.seq  # pushed out on the way to it
                    moments[step] = r.seq
                rolled |= step
                gone |= rolled
        if self._has_limits() or expires is not None:
            limits(combined.num_rows)
        if moments is None:
            return gone, rolled, None
        moments[gone & (moments == NEVER)] = int(seqs[-1]) if len(seqs) else 0
        return gone, rolled, lambda _seqs, _subjects: (moments, rolled)

    def _limits_and_rollups(
        self, index: MessageIndex, rows: pa.Table, groups: SubjectGroups, rollups: list[Rollup], now: int,
        ttls: Expiries | None, track: bool,
    ) -> tuple[np.ndarray, np.ndarray, MomentsOf | None]:
        """``_removals`` without discard-old totals, where limits and rollups remove the same
        in any order: the limits' removals as a publish without rollups finds them, and the
        rollups' among the messages they can reach (``Reach``: the stored ones on their
        subjects, not every stored subject). When each went, only consumers need, and
        ``RolledUp`` works it out if one reads it (``first_reached``, over the whole stream)."""
        limits = self._removals(index, rows, groups, [], now, ttls)
        gone = limits[0] if limits is not None else np.zeros(index.rows.num_rows + rows.num_rows, dtype=bool)
        rolled = Reach(index, rows, rollups).purged(rollups) & ~gone
        when = None
        if track:
            limited, per_subject = gone.copy(), int(self.config.max_msgs_per_subject)
            when = lambda seqs, subjects: first_reached(seqs, subjects, limited, per_subject, rollups)  # noqa: E731
        return gone | rolled, rolled, when

    @staticmethod
    def _over_among_newest(
        index: MessageIndex, rows: pa.Table, over: pa.Array, excess: np.ndarray
    ) -> np.ndarray | None:
        """Positions (over the index's rows followed by ``rows``) of the oldest ``excess`` messages
        of each ``over`` subject, when all their stored ones are among the newest ``TAIL_WINDOW``
        rows; None when not (``oldest_removals`` then reads from the head, where they are)."""
        old = index.positions_among_newest(over)
        if old is None:
            return None
        new = np.flatnonzero(pc.is_in(rows["subject"], value_set=over).to_numpy(zero_copy_only=False))
        picked = pa.concat_arrays([column(take_rows(index.rows.select(["subject"]), old), "subject"),
                                   column(take_rows(rows.select(["subject"]), new), "subject").cast(pa.string())])
        codes = pc.index_in(picked, value_set=over).to_numpy(zero_copy_only=False)
        at = np.concatenate([old, index.msgs + new])
        return at[oldest_of_each(codes, excess)]

    def _has_limits(self) -> bool:
        cfg = self.config
        return (
            int(cfg.max_msgs) >= 0 or int(cfg.max_bytes) >= 0 or int(cfg.max_msgs_per_subject) > 0
            or int(cfg.max_age or 0) > 0
        )

    def _check_vectorised(
        self, snap: Snapshot, batch: Incoming, ids: list[str | None] | None, no_ids: int, known: KnownIds | None,
    ) -> Checked:
        """No header in the batch needs a message-by-message check (``H.CHECKED_ONE_BY_ONE``):
        every check is a column operation, and the dedup window's ids are looked up row by row
        only if some id repeats in the batch or may be known (``ids``: each row's msg id, None
        when the window is off or no row has one; ``no_ids``: how many rows have none)."""
        n = len(batch)
        if H.any_has_prefix(batch.headers, H.STREAM_SOURCE):
            raise api_error("JSMessageSourceHdrNotAllowedErr")
        accepted = np.ones(n, dtype=bool)
        orig = None
        if ids is not None and known is not None and (
            len(set(ids)) - (1 if no_ids else 0) < n - no_ids or known.any_of(ids)
        ):
            # some id repeats within the batch or may be in the window: decide row by row
            first_at: dict[str, int] = {}
            orig = np.zeros(n, dtype=np.int64)
            for i, mid in enumerate(ids):
                if mid is None:
                    continue
                if mid in known:
                    accepted[i] = False
                    orig[i] = known[mid]
                elif mid in first_at:
                    accepted[i] = False
                    orig[i] = -first_at[mid] - 1  # resolved below once seqs exist
                else:
                    first_at[mid] = i
        if accepted.all():  # no duplicates: the next n sequences
            return Checked(accepted, sequence(snap.last_seq + 1, n), [])
        seqs = snap.last_seq + np.cumsum(accepted, dtype=np.int64)
        seqs = np.where(accepted, seqs, orig)
        in_batch = seqs < 0
        if in_batch.any():
            seqs[in_batch] = seqs[-seqs[in_batch] - 1]
        return Checked(accepted, seqs, [])

    def _check_sizes(self, hdr_len: np.ndarray, data_len: np.ndarray, headers: pa.Array) -> None:
        """The server's size checks, before any other (whole message against ``max_msg_size``,
        then the header block against 64 KiB), on every message, duplicates included. A
        message with a ``Nats-Batch-Id`` takes the atomic batch path
        (``processJetStreamAtomicBatchMsg``), which checks ``max_msg_size`` and then refuses
        it as atomic publish is off (10174, in ``header_rules``) but never checks 64 KiB."""
        no_headers = hdr_len.strides == (0,) and (not len(hdr_len) or not hdr_len[0])  # the zero view
        max_size = int(self.config.max_msg_size)
        if max_size >= 0 and len(data_len):
            total = data_len if no_headers else hdr_len + data_len
            if total.max() > max_size:
                raise api_error("JSStreamMessageExceedsMaximumErr")
        if len(hdr_len) and not no_headers and hdr_len.max() > MAX_HEADER_BYTES:
            over = hdr_len > MAX_HEADER_BYTES
            in_batch = pc.is_valid(H.column_lookup(headers, H.BATCH_ID)).to_numpy(zero_copy_only=False)
            if (over & ~in_batch).any():
                raise api_error("JSStreamHeaderExceedsMaximumErr")

    def _check_sequential(
        self, snap: Snapshot, index: MessageIndex, batch: Incoming, subjects: pa.Array,
        msg_ids: pa.Array, known: KnownIds | None, wanted: np.ndarray | None,
    ) -> Checked:
        """Headers whose checks depend on the messages before: check message by message, in
        the server's order (``header_rules`` holds the rules that read no state)."""
        cfg = self.config
        n = len(batch)
        accepted = np.zeros(n, dtype=bool)
        seqs = np.zeros(n, dtype=np.int64)
        rollups: list[tuple[int, str]] = []
        rewritten: dict[int, H.HeaderPairs] = {}
        last_seq = snap.last_seq
        last_id = self._last_msg_id(index)
        subj_list = subjects.to_pylist()
        hdr_list = [H.from_arrow(h) for h in batch.headers.to_pylist()]
        ids = msg_ids.to_pylist()
        lengths: list[np.ndarray] = []

        def size_of(i: int) -> int:
            if not lengths:
                lengths.append(value_lengths(batch.data))
            return stored_size(subj_list[i], H.encoded_len(hdr_list[i]), int(lengths[0][i]))

        tail = _BatchTail(self, index, last_seq, size_of)
        window = int(cfg.duplicate_window or 0)
        may_roll_up = bool(cfg.allow_rollup_hdrs) and not cfg.deny_purge
        for i in range(n):
            hdrs, subject = hdr_list[i], subj_list[i]
            if not hdrs:
                last_seq += 1
                accepted[i], seqs[i] = True, last_seq
                tail.took(i, last_seq, subject, wanted is None or bool(wanted[i]))
                last_id = ""
                continue
            rules.check_before_expectations(hdrs, self.name, bool(cfg.allow_msg_ttl))
            exp_subj_seq = H.get(hdrs, H.EXPECTED_LAST_SUBJ_SEQ)
            exp_subj = H.get(hdrs, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ)
            if exp_subj_seq is not None:
                actual = tail.last_seq_on(exp_subj or subject, last_seq)
                if rules.parse_seq(exp_subj_seq) != actual:
                    raise api_error("JSStreamWrongLastSequenceErrF", seq=actual)
            elif exp_subj is not None:
                raise api_error("JSStreamExpectedLastSeqPerSubjectInvalid")
            exp_seq = H.get(hdrs, H.EXPECTED_LAST_SEQ)
            if exp_seq is not None and rules.parse_seq(exp_seq) != last_seq:
                raise api_error("JSStreamWrongLastSequenceErrF", seq=last_seq)
            rules.check_schedules(hdrs, subject)
            if H.get(hdrs, H.STREAM_SOURCE) is not None:
                raise api_error("JSMessageSourceHdrNotAllowedErr")
            mid = ids[i]
            if window > 0 and mid is not None and mid in known:
                seqs[i] = known[mid]
                continue
            exp_id = H.get(hdrs, H.EXPECTED_LAST_MSG_ID)
            if exp_id is not None and exp_id != last_id:
                raise api_error("JSStreamWrongLastMsgIDErrF", id=last_id)
            rollup = rules.rollup_of(hdrs, may_roll_up)
            if wanted is None or wanted[i]:  # a message nobody wants is skipped before this
                rules.check_ttl(hdrs)
                stored_as = rules.raised_ttl(hdrs, int(cfg.subject_delete_marker_ttl), int(cfg.max_msgs_per_subject))
                if stored_as is not None:
                    rewritten[i] = stored_as
            last_seq += 1
            accepted[i] = True
            seqs[i] = last_seq
            tail.took(i, last_seq, subject, wanted is None or bool(wanted[i]), rollup)
            last_id = mid or ""
            if rollup is not None:
                rollups.append((i, rollup))
            if mid is not None and window > 0:
                known[mid] = last_seq
        return Checked(accepted, seqs, rollups, rewritten)

    def _check_discard_new(self, index: MessageIndex, rows: pa.Table, rollups: np.ndarray) -> None:
        """Discard-new limits refuse the batch (``rollups``: each row's rollup kind or None).

        Per message, as the file store's ``storeRawMsg``: over ``max_msgs_per_subject`` it is
        refused with ``discard_new_per_subject`` unless it rolls up, else it replaces its
        subject's oldest (so ``max_msgs`` does not count it, and past ``max_bytes`` it may not
        be larger than the message it replaces); a rollup frees room for the messages after it.
        Without rollups, or without both a per-subject and a byte limit, the whole batch is
        decided at once."""
        cfg = self.config
        if _v(cfg.discard) != "new" or rows.num_rows == 0:
            return
        per_subj = int(cfg.max_msgs_per_subject)
        if any(k is not None for k in rollups) or (per_subj > 0 and int(cfg.max_bytes) >= 0):
            self._check_discard_new_one_by_one(index, rows, rollups)
            return
        replaced = 0
        if per_subj > 0:
            new_counts = rows.group_by("subject").aggregate([("seq", "count")])
            existing = index.subjects().counts_of(new_counts["subject"].combine_chunks())
            incoming = new_counts["seq_count"].to_numpy()
            over = existing + incoming - per_subj
            if (over > 0).any():
                if cfg.discard_new_per_subject:
                    raise api_error("JSStreamStoreFailedF", err="maximum messages per subject exceeded")
                replaced = int(np.clip(over, 0, None).sum())
        added = rows.num_rows - replaced  # the replacing ones pass however full the stream is
        if int(cfg.max_msgs) >= 0 and added > 0 and index.msgs + added > int(cfg.max_msgs):
            raise api_error("JSStreamStoreFailedF", err="maximum messages exceeded")
        new_bytes = int(pc.sum(rows["size"]).as_py() or 0)
        if int(cfg.max_bytes) >= 0 and index.bytes + new_bytes > int(cfg.max_bytes):
            raise api_error("JSStreamStoreFailedF", err="maximum bytes exceeded")

    def _check_discard_new_one_by_one(self, index: MessageIndex, rows: pa.Table, rollups: np.ndarray) -> None:
        cfg = self.config
        per_subj, max_msgs, max_bytes = int(cfg.max_msgs_per_subject), int(cfg.max_msgs), int(cfg.max_bytes)
        subjects, sizes = rows["subject"].to_pylist(), rows["size"].to_pylist()
        touched = pa.array(sorted(set(subjects)), pa.string())
        old = take_rows(index.rows.select(["subject", "size"]), index.positions_on(touched))
        queues: dict[str, deque[int]] = {s: deque() for s in touched.to_pylist()}  # sizes, oldest first
        for subj, size in zip(old["subject"].to_pylist(), old["size"].to_pylist(), strict=True):
            queues[subj].append(size)
        msgs, nbytes = index.msgs, index.bytes
        for subj, size, kind in zip(subjects, sizes, rollups, strict=True):
            q = queues[subj]
            replaces = 0 < per_subj < len(q) + 1
            if replaces and cfg.discard_new_per_subject and kind is None:
                raise api_error("JSStreamStoreFailedF", err="maximum messages per subject exceeded")
            if 0 <= max_msgs <= msgs and not replaces:
                raise api_error("JSStreamStoreFailedF", err="maximum messages exceeded")
            if 0 <= max_bytes < nbytes + size and (not replaces or q[0] < size):
                raise api_error("JSStreamStoreFailedF", err="maximum bytes exceeded")
            q.append(size)
            msgs, nbytes = msgs + 1, nbytes + size
            while (0 < per_subj < len(q)) or (kind is not None and len(q) > 1):  # its oldest go, or its rollup
                msgs, nbytes = msgs - 1, nbytes - q.popleft()
            if kind == ROLLUP_ALL:  # everything else goes
                for other in queues.values():
                    other.clear()
                q.append(size)
                msgs, nbytes = 1, size

    # -- removal -------------------------------------------------------------------------------
    def remove_seqs(self, choose: Callable[[Snapshot, MessageIndex], np.ndarray]) -> int:
        """Commit the removal of the live seqs ``choose`` picks on the current state; returns how many."""
        self._writable()

        def attempt(snap: Snapshot, index: MessageIndex) -> int:
            removed = np.asarray(choose(snap, index), dtype=np.int64)
            if not len(removed):
                return 0
            pos = index.positions_of(removed)  # (np.isin sorted every live seq: 80 ms at a million)
            mask = np.zeros(index.msgs, dtype=bool)
            mask[pos[pos >= 0]] = True
            return self._commit_removal(snap, index, mask)

        return self._optimistic("removing messages", attempt)

    def purge(self, subject: str | None = None, seq: int | None = None, keep: int | None = None) -> int:
        """The server's ``PurgeEx``: ``seq`` is exclusive; ``keep`` keeps the newest K across the
        filter. A filter of ``>`` is no filter, as in the file store."""
        check_purge_request(seq, keep)
        self._may_purge()
        subject = None if subject in ("", ">") else subject
        if not subject and not keep and seq is not None and seq > 1:
            return self._compact(seq)

        def choose(snap: Snapshot, index: MessageIndex) -> np.ndarray:
            self._may_purge()  # again on the config a re-plan read: an update that replied decides
            rows = index.rows
            if subject and is_literal(subject):  # its messages, found with the subject stats
                chosen = take_rows(rows.select(["seq"]), index.positions_on(pa.array([subject])))["seq"].to_numpy()
                if seq is not None and 0 < seq <= MAX_SEQ:
                    chosen = chosen[chosen < seq]
            else:
                mask = match_filter(rows["subject"], subject) if subject else pa.array(np.ones(rows.num_rows, dtype=bool))
                if seq is not None and 0 < seq <= MAX_SEQ:  # a larger bound is past every stored seq
                    mask = pc.and_(mask, pc.less(rows["seq"], seq))
                chosen = rows["seq"].filter(mask).to_numpy()
            if keep:
                chosen = chosen[: max(len(chosen) - keep, 0)]
            return chosen

        removed = self.remove_seqs(choose)
        if not removed and not subject and not seq and not keep:
            self.mark_purged()
        return removed

    @staticmethod
    def initial_state(first_seq: int) -> dict[str, Any]:
        """The state a new stream's table records in its first commit: empty, and with a
        ``first_seq`` its store purged up to it (the file store's ``purge(cfg.FirstSeq)`` at
        creation: the first message gets that seq, the state reads first ``first_seq``, last
        ``first_seq - 1``); without one the never-written 0/0."""
        last_seq = max(first_seq - 1, 0)
        state = MessageIndex.empty(-1).state_after(_EMPTY_INDEX_ROWS, None, last_seq, 0)
        if first_seq:
            state["first_seq"] = first_seq
        state[LAST_MSG_ID] = ""
        return state

    def mark_purged(self) -> None:
        """A never-written stream reports first_seq 0 until its first purge, then last+1: record it."""

        def attempt(snap: Snapshot, index: MessageIndex) -> None:
            state = self._state_of(index, snap)
            if state["messages"] or state["first_seq"]:
                return
            state["first_seq"] = snap.last_seq + 1
            version = self.table.commit(snap, None, last_seq=snap.last_seq, state=state)
            self._after_commit(index, snap, version, None, None, state)

        self._optimistic("marking the purge", attempt)

    def _compact(self, seq: int) -> int:
        """Purge everything below ``seq``; past the last seq, the next seq becomes ``seq``.

        The server's next seq may be any uint64; a lake's seq column is int64, so a next seq past
        ``MAX_SEQ`` is refused before anything is removed."""
        if seq > MAX_SEQ:
            raise JSSparkError(
                f"stream {self.name}: cannot purge up to sequence {seq}: the next message would get "
                f"sequence {seq}, and a lake stream's sequences end at {MAX_SEQ} (int64)"
            )

        def attempt(snap: Snapshot, index: MessageIndex) -> int:
            self._may_purge()
            mask = index.seq_array() < seq
            last_seq = max(snap.last_seq, seq - 1)
            if not mask.any() and last_seq == snap.last_seq:
                return 0
            return self._commit_removal(snap, index, mask, last_seq=last_seq, predicate=f"seq < {seq}")

        return self._optimistic("compacting to a sequence", attempt)

    def _may_purge(self) -> None:
        if self.config.sealed:  # before deny_purge, which sealing always sets: the server answers 10109
            raise api_error("JSStreamSealedErr")
        if self.config.deny_purge:
            raise api_error("JSStreamPurgeFailedF", err="stream purge not permitted")

    def _may_delete(self) -> None:
        if self.config.sealed:
            raise api_error("JSStreamSealedErr")
        if self.config.deny_delete:
            raise api_error("JSStreamMsgDeleteFailedF", err="message delete not permitted")

    def delete_msg(self, seq: int) -> None:
        self._may_delete()

        def choose(snap: Snapshot, index: MessageIndex) -> np.ndarray:
            self._may_delete()  # again on the config a re-plan read: an update that replied decides
            if not index.has(seq):
                # the file store's answers: past the end of the stream, below its first message,
                # or already deleted inside it (``removeMsgFromBlock`` finds it in the delete map)
                if seq > snap.last_seq:
                    raise api_error("JSStreamMsgDeleteFailedF", err="stream store EOF")
                first = int(index.seq_array()[0]) if index.msgs else snap.last_seq + 1
                if seq < first:
                    raise api_error("JSStreamMsgDeleteFailedF", err="no message found")
                raise api_error("JSSequenceNotFoundErrF", seq=seq)
            subject[:] = [index.rows["subject"][int(np.searchsorted(index.seq_array(), seq))].as_py()]
            return np.array([seq])

        subject: list[str] = []
        if self.remove_seqs(choose) and self.on_removed is not None:
            self.on_removed(np.array([seq]), pa.array(subject, pa.string()))

    def enforce_limits(self, now_ns: int | None = None) -> int:
        """Apply ``max_age``, message TTLs (and any limit lowered by a config update) now, placing
        subject delete markers where the stream asks for them; returns the removed count."""
        cfg = self.config
        now = now_ns or time.time_ns()
        marker_ttl = int(cfg.subject_delete_marker_ttl or 0)
        marked: list[str] = []  # subjects whose last message expired, in the order it was stored
        gone: list[pa.Table] = []  # seq, subject of what the commit removed

        def choose(snap: Snapshot, index: MessageIndex) -> np.ndarray:
            rows = index.rows
            ttls = self._ttl_expiries(snap, index)
            expires = ttls.over(index.seq_array()) if ttls is not None else None
            drop = removal_mask(
                rows,
                max_msgs=int(cfg.max_msgs),
                max_bytes=int(cfg.max_bytes),
                max_per_subject=int(cfg.max_msgs_per_subject),
                max_age_ns=0 if marker_ttl > 0 else int(cfg.max_age or 0),
                now_ns=now,
                discard_old=_v(cfg.discard) != "new",  # the file store trims totals only then
                expires=None if marker_ttl > 0 else expires,
            )
            if marker_ttl > 0:
                aged = expired(rows["ts_ns"].to_numpy(), int(cfg.max_age or 0), now, expires) & ~drop
                last = self._last_to_expire(snap, index, aged, drop)
                marked[:] = [subj for subj, _ in last]
                aged[np.searchsorted(index.seq_array(), [seq for _, seq in last])] = False  # the marker's rollup
                drop |= aged
            gone[:] = [rows.select(["seq", "subject"]).filter(pa.array(drop))]
            return rows["seq"].to_numpy()[drop]

        removed = self.remove_seqs(choose)
        if removed and self.on_removed is not None:
            self.on_removed(gone[0]["seq"].to_numpy(), gone[0]["subject"])
        for subject in marked:  # each through the publish path, whose rollup removes what it replaces
            try:
                self.publish_batch(Incoming.one(subject, b"", marker_headers(marker_ttl)), now_ns=now, internal=True)
                removed += 1
            except APIError:  # a full discard-new stream refuses the marker: the message stays, as there
                continue
        return removed

    def _last_to_expire(
        self, snap: Snapshot, index: MessageIndex, aged: np.ndarray, drop: np.ndarray
    ) -> list[tuple[str, int]]:
        """The subjects an expiry empties and the seq of each one's newest expiring message,
        unless that is itself a marker: the server replaces it with a marker, whose rollup
        removes it (``handleRemovalOrSdm``)."""
        if not aged.any():
            return []
        rows = index.rows
        gone = rows.filter(pa.array(aged | drop)).group_by("subject").aggregate([("seq", "count")])
        emptied = gone.join(index.subject_stats(), "subject").filter(
            pc.equal(pc.field("seq_count"), pc.field("msgs"))
        )["subject"]
        newest = rows.filter(pa.array(aged)).group_by("subject").aggregate([("seq", "max")])
        newest = newest.filter(pc.is_in(newest["subject"], value_set=emptied.combine_chunks())).sort_by("seq_max")
        if not newest.num_rows:
            return []
        seqs = newest["seq_max"].to_pylist()
        found = self.table.read(snap, filter=ds.field("seq").isin(seqs), columns=["seq", "headers"])
        markers = {r["seq"] for r in found.to_pylist() if is_marker(H.from_arrow(r["headers"]))}
        return [(subj, seq) for subj, seq in zip(newest["subject"].to_pylist(), seqs, strict=True) if seq not in markers]

    def landing(self, index: MessageIndex, rows: pa.Table) -> tuple[pa.Table, list[Rollup]]:
        """Mirrored or sourced ``rows`` about to be stored, as the server's ``processJetStreamMsg``
        takes them: on an interest stream those nobody wants are not stored (their seqs are
        still used), yet their rollups purge (returned, for ``settle_landed``); a discard-new
        limit refuses the landing (the server retries the origin until there is room: nothing
        is skipped)."""
        skipped: list[Rollup] = []
        if _v(self.config.retention) == "interest" and rows.num_rows:
            wanted = self._wanted(rows["subject"])
            if not wanted.all():
                skipped = self._landed_rollups(rows.filter(pa.array(~wanted)))
                rows = rows.filter(pa.array(wanted))
        self._check_discard_new(index, rows, self._landed_rollups(rows, kinds_only=True))
        return rows, skipped

    def settle_landed(self, rows: pa.Table, now_ns: int | None = None, skipped: Sequence[Rollup] = ()) -> int:
        """After landing ``rows``: the limits, expiries and the rollups those messages carry
        (honoured, unchecked, where the stream allows rollups), and those of the landed
        messages ``skipped`` (not stored: nobody on the interest stream wanted them), message
        by message as the server stores them one at a time; returns the removed count."""
        stored = self._landed_rollups(rows)
        rollups = sorted([*stored, *skipped], key=lambda r: r.seq)
        unstored = {r.seq for r in skipped}
        kept = [r.seq not in unstored for r in rollups]
        if not rollups and not self._has_limits() and not self.config.allow_msg_ttl:
            return 0
        now = now_ns or time.time_ns()
        limited: list[pa.Table] = []
        told: list[RolledUp] = []
        track = bool(rollups) and self.on_rolled_up is not None

        def choose(snap: Snapshot, index: MessageIndex) -> np.ndarray:
            nothing = index.rows.slice(0, 0)
            removals = self._removals(index, nothing, SubjectGroups.of(nothing["subject"], np.zeros(0, np.int64)),
                                      rollups, now, self._ttl_expiries(snap, index), track)
            told.clear()
            if removals is None:
                return np.zeros(0, np.int64)
            gone, rolled, moments_of = removals
            limited[:] = [index.rows.select(["seq", "subject"]).filter(pa.array(gone & ~rolled))]
            if moments_of is not None:  # the landed rows are in the index already
                told.append(RolledUp(rollups, kept, index.rows.select(["seq", "subject"]), moments_of))
            return index.seq_array()[gone]

        removed = self.remove_seqs(choose)
        if removed or told:
            self._tell_consumers(told[0] if told else None, limited[0] if limited else None)
        if int(self.config.subject_delete_marker_ttl or 0) > 0:
            removed += self.enforce_limits(now)  # expiries there place subject delete markers
        return removed

    def _landed_rollups(self, rows: pa.Table, kinds_only: bool = False) -> Any:
        """The ``Nats-Rollup`` of landed rows where the stream honours them: as ``Rollup``s, or
        (``kinds_only``) each row's kind or None. Only the rows that roll up are taken out of
        the columns (a landing of 200,000 rows without any spent a third of its time otherwise)."""
        cfg = self.config
        kinds = np.full(rows.num_rows, None, dtype=object)
        rolls = np.zeros(rows.num_rows, dtype=bool)
        if cfg.allow_rollup_hdrs and not cfg.deny_purge and rows.num_rows:
            values = H.column_lookup(rows["headers"], H.ROLLUP)
            if values.null_count < len(values):
                lower = pc.utf8_lower(values)
                for kind in (ROLLUP_SUBJECT, ROLLUP_ALL):
                    is_kind = pc.fill_null(pc.equal(lower, kind), False).to_numpy(zero_copy_only=False)
                    kinds[is_kind] = kind
                    rolls |= is_kind
        if kinds_only:
            return kinds
        at = np.flatnonzero(rolls)
        if not len(at):
            return []
        picked = rows.select(["seq", "subject"]).take(pa.array(at))
        return [Rollup(int(seq), subject, kinds[i]) for seq, subject, i in
                zip(picked["seq"].to_pylist(), picked["subject"].to_pylist(), at.tolist(), strict=True)]

    def compact(self, target_size: int | None = None) -> dict[str, Any]:
        """Bound the file count: merge small files (publish batches make one per partition)."""

        def attempt(snap: Snapshot, index: MessageIndex) -> dict[str, Any]:
            metrics = self.table.compact(snap, self._state_of(index, snap), target_size)
            if metrics.get("numFilesAdded", 0) or metrics.get("numFilesRemoved", 0):
                self._relaid(index, snap.table.version())
                now = self.table.snapshot()  # every file changed
                if self._expiries is not None and self._expiries.version == now.version:
                    self._store.save_expiries_if_large(self._expiries, now, index.msgs)
                self._store.save_if_large(index, now)
            return metrics

        return self._optimistic("compacting files", attempt)

    # -- reads ---------------------------------------------------------------------------------
    def replication(self) -> tuple[SourceInfo | None, list[SourceInfo] | None]:
        """The mirror's and sources' progress from the marks landing commits store with the
        messages (``engine.sourcing``): no scan, so ``stream_info`` stays instant."""
        from jsspark.engine.sourcing import Origin

        cfg = self.config
        if cfg.mirror is None and not cfg.sources:
            return None, None
        snap = self.table.snapshot()
        now_ms = time.time_ns() // 1_000_000

        def info(source: Any) -> SourceInfo:
            o = Origin.of(source)
            seen = snap.txn_version(o.seen_app)
            stored = snap.txn_version(o.stored_app)  # set once it is not the mark
            ext = source.external
            return SourceInfo(
                name=o.name,
                lag=int(snap.txn_version(o.lag_app) or 0),
                active_ns=-1 if seen is None else max(now_ms - int(seen), 0) * 1_000_000,
                seq=int((snap.txn_version(o.seq_app) if stored is None else stored) or 0),
                filter_subject=o.filter_subject,
                subject_transforms=[{"src": s, "dest": d} for s, d in o.transforms],
                external=None if ext is None else {"api": ext.api, "deliver": ext.deliver},
            )

        if cfg.mirror is not None:
            return info(cfg.mirror), None
        return None, [info(s) for s in cfg.sources]

    def read(self, filter: ds.Expression | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        snap = self.table.snapshot()
        return self.table.read(snap, filter=filter, columns=list(columns) if columns else None)

    def index(self) -> MessageIndex:
        return self._load()[1]

    def index_at(self, version: int, table_id: str) -> MessageIndex | None:
        """The index as of ``version`` of table ``table_id`` if that is the newest version, else
        None: a reader's planner pins a version and falls back to reading the table's files (also
        when its table is not this engine's: the stream deleted and created again in between)."""
        if self._index is not None and (self._index.version, self._index_table) == (version, table_id):
            return self._index
        index = self._load()[1]
        return index if (index.version, self._index_table) == (version, table_id) else None


def check_purge_request(seq: int | None, keep: int | None) -> None:
    """``jsStreamPurgeRequest``'s own check, before it looks the stream up: a ``seq`` and a
    ``keep`` together are a bad request."""
    if seq and keep:
        raise api_error("JSBadRequestErr")


def _per_distinct(
    names: pa.Array, known: KnownPositions | None, kind: str, key: object, fn: Callable[[pa.Array], np.ndarray]
) -> np.ndarray:
    """``fn(names)``, taken for the known ones from what the subject stats keep per subject
    (``SubjectStats.derived``) and computed only for subjects new to the stream."""
    if known is None:
        return np.asarray(fn(names))
    stats, generation, positions = known
    if generation != stats._generation or not stats.keeps(kind, key, len(names)):
        return np.asarray(fn(names))
    mine = positions >= 0
    kept = stats.derived(kind, key, fn)
    if mine.all():
        return kept[positions]
    out = np.empty(len(names), dtype=kept.dtype)
    out[mine] = kept[positions[mine]]
    out[~mine] = fn(names.filter(pa.array(~mine)))
    return out


TIME_TYPE = MESSAGE_SCHEMA.field("time").type


def _constant(n: int, value: int, type_: pa.DataType) -> pa.Array:
    """``n`` times ``value`` as a column of the 64-bit ``type_`` (one fill, no copy after)."""
    values = arrow_backed(n)
    values.fill(value)
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(values)])


class _BatchTail:
    """What an expected last subject sequence reads in the middle of a lake batch, as the server
    reads it between its one-by-one stores: each subject's last stored message, the batch's own
    included; for ``>``, the message at the last seq if stored (``LoadLastMsg``); none that a
    rollup of all in the batch or a discard-old ``max_msgs``/``max_bytes`` took since. (A
    rollup of one subject in the batch is not counted against those totals here.)"""

    def __init__(self, stream: LakeStream, index: MessageIndex, last_seq: int, size_of: Callable[[int], int]) -> None:
        cfg = self.cfg = stream.config
        self.index: MessageIndex | None = index  # None: a rollup of all in the batch took it
        self.size_of = size_of
        self.last: dict[str, int] = {}  # subject -> its last message stored by this batch
        self.tail_stored = index.has(last_seq)
        self.totals = _v(cfg.discard) != "new" and (int(cfg.max_msgs) >= 0 or int(cfg.max_bytes) >= 0)
        self.rows: list[tuple[int, str, int]] = []  # (seq, subject, size) stored by this batch, for the totals

    def took(self, i: int, seq: int, subject: str, stored: bool, rollup: str | None = None) -> None:
        """Row ``i`` took ``seq``; ``stored`` False: an interest message nobody wants."""
        self.tail_stored = stored
        if not stored:
            return
        if rollup == ROLLUP_ALL:
            self.index = None
            self.last.clear()
            self.rows.clear()
        self.last[subject] = seq
        if self.totals:
            self.rows.append((seq, subject, self.size_of(i)))

    def last_seq_on(self, subject: str, last_seq: int) -> int:
        if subject == ">":
            return last_seq if self.tail_stored else 0
        found = self._last_stored(subject)
        if found and self.rows and found < self._first_kept(last_seq):
            return 0  # pushed out by the totals (the newest of its subject, so all of them are)
        return found

    def _last_stored(self, subject: str) -> int:
        index, mine = self.index, self.last
        if "*" in subject.split(".") or ">" in subject.split("."):
            base = 0
            if index is not None:
                stats = index.subject_stats()
                hit = stats.filter(match_filter(stats["subject"], subject))
                base = int(pc.max(hit["last_seq"]).as_py() or 0) if hit.num_rows else 0
            return max([base, *(s for subj, s in mine.items() if subject_matches(subject, subj))])
        return mine.get(subject) or (index.last_seq_of(subject) if index is not None else 0)

    def _first_kept(self, last_seq: int) -> int:
        """The oldest message the limits keep with this batch's stored rows so far."""
        cfg, k = self.cfg, len(self.rows)
        held = self.index.rows if self.index is not None else None
        count = k + (held.num_rows if held is not None else 0)
        size = sum(r[2] for r in self.rows) + (int(pc.sum(held["size"]).as_py() or 0) if held is not None else 0)
        if (int(cfg.max_msgs) < 0 or count <= int(cfg.max_msgs)) and (int(cfg.max_bytes) < 0 or size <= int(cfg.max_bytes)):
            return 0  # within the totals: nothing pushed out
        new = pa.table({"seq": [r[0] for r in self.rows], "ts_ns": [0] * k, "subject": [r[1] for r in self.rows],
                        "msg_id": [None] * k, "size": [r[2] for r in self.rows]}).cast(INDEX_SCHEMA)
        rows = new if held is None else pa.concat_tables([held, new.cast(held.schema)])
        drop = removal_mask(rows, max_msgs=int(cfg.max_msgs), max_bytes=int(cfg.max_bytes),
                            max_per_subject=int(cfg.max_msgs_per_subject), max_age_ns=0, now_ns=0, discard_old=True)
        kept = rows["seq"].to_numpy()[~drop]
        return int(kept[0]) if len(kept) else last_seq + 1


__all__ = ["APIError", "Incoming", "LakeStream", "NoRespondersError"]
