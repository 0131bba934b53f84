"""``jsspark.connect(location)``: a JetStream context and manager over lake streams.

Method names, arguments and return shapes follow nats-py's ``JetStreamContext`` and
``JetStreamManager`` so one script can run a scenario against a server and against a lake.
Layout under ``location`` (a local path or any URI delta-rs supports):

    <location>/_catalog/          Delta table: stream and consumer configs (catalog.py)
    <location>/streams/<NAME>/    Delta table: the stream's messages (table.py, schema.py); NAME as
                                  ``table_dir`` escapes what a path cannot carry
    <location>/streams/<NAME>/_jsspark_index/   the persisted message index (index_store.py)
"""

from __future__ import annotations

import functools
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from deltalake.exceptions import DeltaError

from jsspark.config import (
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    check_stream_config,
    check_stream_update,
    refuse_unsupported,
    report_ignored_fields,
)
from jsspark.config.defaults import StreamLookup
from jsspark.config.timestamps import to_utc_time
from jsspark.config.validation import check_shared_stream_config
from jsspark.engine import headers as H
from jsspark.engine.api import BatchAck, ConsumerInfo, PubAck, RawStreamMsg, StreamInfo, StreamState
from jsspark.engine.catalog import Catalog, Change, Key, Record
from jsspark.engine.consumer_state import Consumer, StreamView
from jsspark.engine.consumers import Consumers, purge_signal
from jsspark.engine.directget import DirectGet, DirectReply
from jsspark.engine.files import check_commit_options, local_root, store_uri, table_filesystem
from jsspark.engine.partitioning import DEFAULT_PARTITION_KEY
from jsspark.engine.stream import LAST_MSG_ID, Incoming, LakeStream, NoRespondersError, check_purge_request
from jsspark.engine.table import MessageTable
from jsspark.errors import APIError, JSSparkError, StreamNotFoundError, api_error, check_uint64
from jsspark.subjects import match_filter, subject_matches, subjects_collide, validate_asset_name

STREAM = "stream"
T = TypeVar("T")
CONSUMER = "consumer"
# A creation clearing the table at a name's path that no stream record names (``_claim``): one
# whose claim is older than this died before finishing, and another may clear that table.
CLEARING = "clearing"
CLEARING_STALE_NS = 30_000_000_000
MAX_CREATE_ATTEMPTS = 20


class _TableNeeded(Exception):
    """A creation's plan found no stream of the name: make its table, then plan again."""


class _TableLost(Exception):
    """The table a creation made was replaced by another's before its catalog commit."""


def _deleted_is_not_found(method: Callable[..., T]) -> Callable[..., T]:
    """A stream deleted (its table removed) while an operation on it was under way answers
    10059, as the server's does, not the storage error its vanished files raised."""

    @functools.wraps(method)
    def run(self: Lake, name: str, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, name, *args, **kwargs)
        except (FileNotFoundError, DeltaError) as e:
            rec = self.catalog.get(STREAM, name)
            cached = self._streams.get(name)
            table = None if rec is None else self._table_of(rec)
            if table is None or (cached is not None and cached[1].table.table_id_or_none() != table.table_id()):
                raise api_error("JSStreamNotFoundErr") from e
            raise

    return run


def _fresh(claim: Record) -> bool:
    """Whether a ``CLEARING`` claim may still be its creation's (see ``CLEARING_STALE_NS``)."""
    return time.time_ns() - int(claim.body["ts_ns"]) < CLEARING_STALE_NS


def _as_created(table: MessageTable, start: dict[str, Any]) -> bool:
    """Whether ``table`` holds exactly what a creation starting at ``start`` writes (version 0,
    that recorded state): a creation killed before its catalog commit, or a concurrent one's.
    One that cannot be read (half written, being removed) is not."""
    try:
        snap = table.snapshot()
        return snap.version == 0 and table.recorded_state(snap) == start
    except (FileNotFoundError, OSError, DeltaError):
        return False


REPUBLISH_AFTER = "republish_after"  # catalog body: the last seq when republish was last set or changed


def connect(location: str | Path, storage_options: dict[str, str] | None = None) -> Lake:
    """Open (creating on first write) the lake streams under ``location``."""
    return Lake(str(location), storage_options)


class Lake:
    def __init__(self, location: str, storage_options: dict[str, str] | None = None) -> None:
        check_commit_options(location, storage_options)
        self.location = store_uri(location.rstrip("/"))
        self.storage_options = storage_options
        self.catalog = Catalog(f"{self.location}/_catalog", storage_options)
        self._streams: dict[str, tuple[int, LakeStream]] = {}
        self._claimant = uuid.uuid4().hex  # names this process's claims (``_claim``)

    # -- streams -------------------------------------------------------------------------------
    def stream_uri(self, name: str) -> str:
        local = local_root(self.location) is not None
        return f"{self.location}/streams/{table_dir(validate_asset_name(name, 'stream'), local)}"

    def _coerce_config(self, config: StreamConfig | dict[str, Any] | str | None, params: dict[str, Any]) -> StreamConfig:
        if config is None:
            cfg = StreamConfig.from_kwargs(**params)
        elif isinstance(config, StreamConfig):
            cfg = config.model_copy(update=StreamConfig.from_kwargs(**params).model_dump(exclude_unset=True)) if params else config
        else:
            cfg = StreamConfig.from_json(config)
            if params:
                cfg = cfg.model_copy(update=StreamConfig.from_kwargs(**params).model_dump(exclude_unset=True))
        return cfg

    def add_stream(self, config: StreamConfig | dict[str, Any] | str | None = None, **params: Any) -> StreamInfo:
        """Create a stream (nats-py ``add_stream``); the same config again is a no-op, as on the server.

        The config is checked inside the catalog transaction, against the other streams as
        it reads them (``stream_lookup``): cycles through sources and mirrors, origins' message
        sizes, external prefixes over their subjects, a mirror's ``mirror_direct``.

        Atomic as the server's create is: the table is made first, its first commit already at
        the stream's ``first_seq``, and the catalog record naming that table (``table_id``) is
        the one commit that makes the stream exist. A table without a record is an unfinished
        creation (or a deleted stream's leftover): never served, taken over or cleared by the
        next creation of the name."""
        new = self._coerce_config(config, params)
        made: list[StreamConfig] = []
        table: list[str] = []  # the table_id of the table this attempt made or took over

        def plan(records: dict[Key, Record]) -> list[Change]:
            cfg = check_stream_config(new, lookup=stream_lookup(records))
            refuse_unsupported(cfg)
            name = cfg.name
            made[:] = [cfg]
            existing = records.get((STREAM, name, ""))
            if existing is not None and self._table_of(existing) is not None:
                if existing.body["config"] == cfg.to_json():
                    return []
                raise api_error("JSStreamNameExistErr")
            self._check_overlap(records, cfg)
            check_store_name(cfg)  # the server makes the store after its checks of the account
            if not table:
                raise _TableNeeded
            if MessageTable(self.stream_uri(name), self.storage_options).table_id_or_none() != table[0]:
                raise _TableLost  # another creation replaced the table this one made
            claim = records.get((CLEARING, name, ""))
            if claim is not None and claim.body["table_id"] == table[0] and _fresh(claim):
                # a creation of another first_seq, which found this table unlike its own, clears it
                raise api_error("JSStreamNameExistErr")
            body = {"config": cfg.to_json(), "created_ns": time.time_ns(),
                    "partition_key": DEFAULT_PARTITION_KEY, "table_id": table[0]}
            done = [Change(CLEARING, name, "", None)] if claim is not None else []
            return [Change(STREAM, name, "", body), *done]  # replaces a record whose table is gone

        for _ in range(MAX_CREATE_ATTEMPTS):
            table.clear()
            try:
                changes = self.catalog.transact(plan)
            except _TableNeeded:
                prepared = self._prepare_table(made[0])
                if prepared is None:
                    continue
                table[:] = [prepared]
                try:
                    changes = self.catalog.transact(plan)
                except _TableLost:
                    continue
            cfg = made[0]
            if not changes:
                try:
                    return self.stream_info(cfg.name)
                except StreamNotFoundError:  # deleted since the plan found it: create it again
                    continue
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                report_ignored_fields(cfg)
            try:
                return self.stream_info(cfg.name)
            except StreamNotFoundError:  # deleted again already: the create itself succeeded
                body = changes[0].body or {}
                return StreamInfo(cfg, StreamState(consumer_count=0, **_stored_state(LakeStream.initial_state(cfg.first_seq))),
                                  body.get("created_ns", 0))
        raise JSSparkError(f"stream {new.name}: gave up after {MAX_CREATE_ATTEMPTS} concurrent creations")

    def _prepare_table(self, cfg: StreamConfig) -> str | None:
        """The unfinished table a creation of ``cfg`` commits: one already at its path in the
        state a creation of the same ``first_seq`` leaves (a creation killed before its catalog
        commit, or a concurrent one: the same bytes either way) is taken over; anything else
        there (a deleted stream's leftover, another ``first_seq``'s creation) is cleared first,
        once claimed (``_claim``). Returns its ``table_id``, or None when another creation got in
        the way (plan again)."""
        uri = self.stream_uri(cfg.name)
        start = LakeStream.initial_state(cfg.first_seq)
        table = MessageTable(uri, self.storage_options)
        if table.exists():
            if _as_created(table, start):
                return table.table_id()
            found = table.table_id_or_none()
            if not self._claim(cfg.name, found):
                return None  # a stream of the name owns it now, or another creation clears it
            if table.table_id_or_none() == found:  # not already another's since
                _remove_tree(uri, self.storage_options)
        try:
            return MessageTable.create(uri, self.storage_options, name=cfg.name, state=start).table_id()
        except (FileNotFoundError, OSError, DeltaError):
            return None  # another creation made one first, or cleared it under this one

    def _claim(self, name: str, table_id: str | None) -> bool:
        """Claim in the catalog the clearing of ``table_id``, the table at the name's path that
        no stream record names, unless a stream of the name owns a table now or another
        creation's fresh claim names it (False; then give it a moment). A creation commits its
        table only while no fresh claim names it, and claims and commits serialise in the
        catalog: a table a stream record names is never cleared (as a server's second create of
        a name answers 10058 and leaves the first one's stream alone)."""
        blocked: list[bool] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            rec = records.get((STREAM, name, ""))
            if rec is not None and self._table_of(rec) is not None:
                raise _TableLost
            claim = records.get((CLEARING, name, ""))
            if (claim is not None and claim.body["table_id"] == table_id and _fresh(claim)
                    and claim.body["by"] != self._claimant):
                blocked[:] = [True]
                raise _TableLost
            return [Change(CLEARING, name, "", {"table_id": table_id, "ts_ns": time.time_ns(), "by": self._claimant})]

        try:
            self.catalog.transact(plan)
        except _TableLost:
            if blocked:
                time.sleep(0.05)
            return False
        return True

    def _table_of(self, rec: Record) -> MessageTable | None:
        """The table of stream record ``rec``, or None when it is gone (a delete or a creation
        replaced it): the stream is deleted, whatever a crash left in the catalog."""
        table = MessageTable(self.stream_uri(rec.stream), self.storage_options)
        found = table.table_id_or_none()
        if found is None or rec.body.get("table_id", found) != found:
            return None
        return table

    def _check_overlap(self, records: dict[Key, Record], cfg: StreamConfig) -> None:
        mine = cfg.subjects or []
        for (kind, other, _), rec in records.items():
            if kind != STREAM or other == cfg.name:
                continue
            theirs = rec.body["config"].get("subjects") or []
            if any(subjects_collide(a, b) for a in mine for b in theirs):
                raise api_error("JSStreamSubjectOverlapErr")

    def update_stream(self, config: StreamConfig | dict[str, Any] | str | None = None, **params: Any) -> StreamInfo:
        """nats-py ``update_stream``: checked against the stored config and the other streams
        in the same catalog transaction (``check_stream_update``), so a concurrent update
        cannot slip past a rule."""
        new = self._coerce_config(config, params)
        name = new.name
        if self.catalog.get(STREAM, name) is not None:
            self.consumers.expire(name)  # the consumer limits and the retention change see the live ones
        retention: list[tuple[RetentionPolicy, RetentionPolicy]] = []
        try:
            stored = self.stream(name).state().last_seq if new.republish is not None else 0
        except APIError:
            stored = 0  # not found: the plan says so, after validating as the server does

        def plan(records: dict[Key, Record]) -> list[Change]:
            existing = records.get((STREAM, name, ""))
            if existing is None:
                # the server validates before it looks the stream up
                check_shared_stream_config(new, lookup=stream_lookup(records))
                raise api_error("JSStreamNotFoundErr")
            old = StreamConfig.from_stored(existing.body["config"])
            cfg = check_stream_update(old, new, lookup=stream_lookup(records))
            retention[:] = [(old.retention, cfg.retention)]
            _check_consumer_limits(old, cfg, self.consumers._all(name, records))
            refuse_unsupported(cfg)
            self._check_overlap(records, cfg)
            body = {**existing.body, "config": cfg.to_json()}
            if cfg.to_json().get("republish") != old.to_json().get("republish"):
                # a server republishes at store time (processJetStreamMsg): a republish set or
                # changed now covers only what is stored from now on
                body.pop(REPUBLISH_AFTER, None)
                if cfg.republish is not None and stored:
                    body[REPUBLISH_AFTER] = stored
            return [Change(STREAM, name, "", body)]

        self.catalog.transact(plan)
        # The new config (the update applies it below, not _recover); no publish planned on the
        # old config commits after this.
        self._stream(name, recover=False).record_config()
        if retention[0][0] is not retention[0][1] and retention[0][1] is RetentionPolicy.INTEREST:
            self.consumers.to_interest(name)  # before the store's limits, as on the server
        self.enforce_limits(name)  # lowered limits apply at once, as on the server
        return self.stream_info(name)

    def republish_after(self, name: str) -> int:
        """The stream's last sequence when its current ``republish`` was set by an update (0:
        set at creation, or none): a server republishes only what it stores after that."""
        rec = self.catalog.get(STREAM, validate_asset_name(name, "stream"))
        if rec is None:
            raise api_error("JSStreamNotFoundErr")
        return int(rec.body.get(REPUBLISH_AFTER, 0))

    def delete_stream(self, name: str) -> bool:
        """The catalog commit deletes the stream; its table is removed after, unless a new
        creation of the name already made another there."""
        uri = self.stream_uri(name)
        gone: list[str | None] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            rec = records.get((STREAM, name, ""))
            if rec is None:
                raise api_error("JSStreamNotFoundErr")
            gone[:] = [rec.body.get("table_id")]
            return [Change(kind, s, n, None) for (kind, s, n) in records if s == name]

        self.catalog.transact(plan)
        self._streams.pop(name, None)
        found = MessageTable(uri, self.storage_options).table_id_or_none()
        if found is not None and gone[0] in (None, found) and self.catalog.get(STREAM, name) is None:
            _remove_tree(uri, self.storage_options)
        return True

    def stream(self, name: str) -> LakeStream:
        """The engine of one stream, its config refreshed from the catalog."""
        return self._stream(name, recover=True)

    def _stream(self, name: str, *, recover: bool) -> LakeStream:
        """``stream``; ``recover=False`` loads a new config without ``_recover`` (the update
        that made it applies it itself, in the server's order)."""
        rec = self.catalog.get(STREAM, validate_asset_name(name, "stream"))
        if rec is None:
            raise api_error("JSStreamNotFoundErr")
        cached = self._streams.get(name)
        if cached and cached[0] == rec.rev:
            return cached[1]
        cfg = StreamConfig.from_stored(rec.body["config"])
        if cached and cached[1].created_ns == rec.body["created_ns"]:  # not deleted and created again since
            engine = cached[1]
            engine.config, engine.config_rev = cfg, rec.rev
        else:
            table = self._table_of(rec)
            if table is None:
                raise api_error("JSStreamNotFoundErr")
            engine = LakeStream(
                cfg,
                table,
                partition_key=rec.body.get("partition_key", DEFAULT_PARTITION_KEY),
                interest_filters=lambda: self._interest_filters(name),
                created_ns=rec.body["created_ns"],
                config_rev=rec.rev,
            )
            engine.reread_config = lambda: self._reread(name, engine)
            # a delete, a limit or an expiry: consumers take what they had pending as acked
            engine.on_removed = lambda seqs, subjects: self.consumers.on_removed(name, seqs, subjects)
            engine.on_rolled_up = lambda rolled: self.consumers.on_rollups(name, rolled)  # a rollup purges
        self._streams[name] = (rec.rev, engine)
        if recover:
            self._recover(name, engine)
        return engine

    def _recover(self, name: str, engine: LakeStream) -> None:
        """What the server does when it opens a stream's store after a crash, run whenever this
        process (re)loads the stream's config: a limit an update lowered before the process
        updating it died is applied (``newFileStoreWithCreatedAndMode`` enforces the config's
        limits on recovery: totals, ``expireMsgsOnRecover`` unless the stream places delete
        markers, ``enforceMsgPerSubjectLimit``), and on an interest or work-queue stream the
        messages an ack left behind go (``checkInterestState`` at startup), on an interest stream
        without consumers all of them (what ``to_interest`` or a delete died before dropping). All are decided on the
        recorded state and the consumers' ack floors, so an open with nothing to do reads no
        messages; only the per-subject limit reads the subject counts, when the state cannot rule
        out a subject over it (each subject holds one message at least)."""
        cfg = engine.config
        state = engine.state()
        if cfg.retention is not RetentionPolicy.LIMITS and state.messages:  # before the limits, as an update
            floors = [c.state.ack_floor.stream_seq for c in self.consumers._all(name)]
            if floors and state.first_seq <= max(floors) and self.consumers.check_interest(name):
                state = engine.state()
            elif not floors and cfg.retention is RetentionPolicy.INTEREST and self.consumers.to_interest(name):
                # an interest stream keeps nothing for no consumer: what it holds with none, a
                # retention change to interest (or the last consumer's delete) died before dropping
                state = engine.state()
        discard_old = cfg.discard is not DiscardPolicy.NEW  # enforceMsgLimit/enforceBytesLimit trim only then
        max_msgs, max_bytes = int(cfg.max_msgs), int(cfg.max_bytes)
        max_age, max_per = int(cfg.max_age or 0), int(cfg.max_msgs_per_subject)
        if (
            (discard_old and ((0 < max_msgs < state.messages) or (0 < max_bytes < state.bytes)))
            or (max_age > 0 and not cfg.subject_delete_marker_ttl and state.messages
                and state.first_ts_ns <= time.time_ns() - max_age)
            or (max_per > 0 and state.messages >= state.num_subjects + max_per
                and int(engine.index().subjects().counts.max()) > max_per)
        ):
            engine.enforce_limits()

    def _reread(self, name: str, engine: LakeStream) -> None:
        """``engine``'s config as the catalog holds it now; the server's stream not found when
        the stream was deleted (or deleted and created again: ``engine`` is of the old one)."""
        if self.stream(name) is not engine:
            raise api_error("JSStreamNotFoundErr")

    def _interest_filters(self, stream: str) -> list[list[str]]:
        out = []
        for rec in self.catalog.list(CONSUMER, stream):
            c = rec.body["config"]
            out.append(c.get("filter_subjects") or ([c["filter_subject"]] if c.get("filter_subject") else []))
        return out

    @_deleted_is_not_found
    def stream_info(self, name: str, subjects_filter: str | None = None) -> StreamInfo:
        engine = self.stream(name)
        self.consumers.expire(name)  # consumer_count, and what interest retention removed with them
        # a direct consumer (a mirror's or source's reader) is not counted (``getPublicConsumers``)
        public = [r for r in self.catalog.list(CONSUMER, name) if not r.body["config"].get("direct")]
        state = engine.state(consumer_count=len(public))
        if subjects_filter:
            stats = engine.index().subject_stats()
            hit = stats.filter(match_filter(stats["subject"], subjects_filter))
            state.subjects = dict(zip(hit["subject"].to_pylist(), hit["msgs"].to_pylist(), strict=True))
        mirror, sources = engine.replication()
        return StreamInfo(engine.config, state, engine.created_ns, sources=sources, mirror=mirror)

    def streams_info(self, offset: int = 0) -> list[StreamInfo]:
        out = []
        for r in self.catalog.list(STREAM):
            try:
                out.append(self.stream_info(r.stream))
            except StreamNotFoundError:  # deleted since the listing, or its table gone
                continue
        return out[max(offset, 0) :]  # the server's max(offset, 0)

    def stream_names(self) -> list[str]:
        return [r.stream for r in self.catalog.list(STREAM)]

    def find_stream_name_by_subject(self, subject: str) -> str:
        """nats-py's: ``$JS.API.STREAM.NAMES`` with a subject answers the streams, by name, with a
        subject that collides with it (``SubjectsCollide``: a wildcard finds those it overlaps)."""
        return self._first_stream(lambda f: subjects_collide(subject, f))

    def stream_listening_on(self, subject: str) -> str:
        """The stream a message published on ``subject`` goes to: the one with a subject that
        matches it as a subscription does (10059 if none)."""
        return self._first_stream(lambda f: subject_matches(f, subject))

    def _first_stream(self, takes: Callable[[str], bool]) -> str:
        for rec in self.catalog.list(STREAM):
            subjects = rec.body["config"].get("subjects") or []  # a stream with sources may have none
            if any(takes(f) for f in subjects):
                return rec.stream
        raise api_error("JSStreamNotFoundErr")

    # -- publishing ----------------------------------------------------------------------------
    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float | None = None,
        stream: str | None = None,
        headers: H.HeadersLike = None,
    ) -> PubAck:
        """nats-py's ``js.publish``: routed by subject; ``stream`` adds ``Nats-Expected-Stream``."""
        pairs = H.normalize(headers) or []
        if stream is not None:
            pairs = [*pairs, (H.EXPECTED_STREAM, stream)]
        message = Incoming.one(subject, payload, pairs or None)  # first: what no client can send
        try:
            name = self.stream_listening_on(subject)
        except APIError:
            raise NoRespondersError(f"no responders: no stream listens on subject {subject!r}") from None
        return self._publish_one(name, message)

    @_deleted_is_not_found
    def _publish_one(self, name: str, msg: Incoming) -> PubAck:
        return self._live(name).publish_batch(msg).acks()[0]

    @_deleted_is_not_found
    def publish_batch(
        self,
        stream: str,
        batch: pa.Table | pa.RecordBatch | list[pa.RecordBatch],
        *,
        txn: tuple[str, int] | list[tuple[str, int]] | None = None,
    ) -> BatchAck:
        """Store many messages (columns ``subject``, ``data``, optional ``headers``) in one commit.

        ``txn=(app_id, version)`` makes it idempotent across replays (see ``LakeStream.publish_batch``).
        """
        if isinstance(batch, list):
            batch = pa.Table.from_batches(batch)
        return self._live(stream).publish_batch(Incoming.from_table(batch), txn=txn)

    def _live(self, name: str) -> LakeStream:
        """The stream's engine, after removing the consumers whose inactive threshold passed
        (``Consumers.expire``) when its retention depends on them: an interest stream stores
        only what a live consumer is interested in."""
        engine = self.stream(name)
        if engine.config.retention is not RetentionPolicy.LIMITS:
            self.consumers.expire(name)
        return engine

    # -- maintenance ---------------------------------------------------------------------------
    def purge_stream(self, name: str, seq: int | None = None, subject: str | None = None, keep: int | None = None) -> bool:
        self.purge(name, seq=seq, subject=subject, keep=keep)
        return True

    @_deleted_is_not_found
    def purge(self, name: str, seq: int | None = None, subject: str | None = None, keep: int | None = None) -> int:
        """Like ``purge_stream`` but returns ``purged`` as the server's response carries it.

        Consumers within the purged subject move past the purged messages, as on the server.
        A purge by subject or ``keep`` that removes one message is also reported to them as a
        single removal (the stores' ``PurgeEx``): one that had it pending takes it as acked.
        """
        check_uint64("JSApiStreamPurgeRequest", seq=seq, keep=keep)
        check_purge_request(seq, keep)  # before the stream is looked up, as on the server
        engine = self.stream(name)
        self.consumers.expire(name)
        before = StreamView(engine.index().rows, engine.state().last_seq, engine.config)
        purged = engine.purge(subject=subject, seq=seq, keep=keep)
        filtered = subject if subject and subject != ">" else None
        self.consumers.on_purge(name, filtered, before)
        if purged == 1 and (filtered or keep):
            gone = np.flatnonzero(engine.index().positions_of(before.seqs) < 0)
            own = before.rows["subject"][int(gone[0])].as_py()
            reported = purge_signal(own, filtered, engine.config.storage is StorageType.MEMORY)
            self.consumers.on_removed(name, before.seqs[gone[:1]], [own], matched_by=reported)
        return purged

    @_deleted_is_not_found
    def delete_msg(self, stream_name: str, seq: int) -> bool:
        """``$JS.API.STREAM.MSG.DELETE``; a consumer that had the message pending takes it as
        acked, as on the server (``Consumers.on_removed``)."""
        check_uint64("JSApiMsgDeleteRequest", seq=seq)
        self._live(stream_name).delete_msg(seq)
        return True

    @_deleted_is_not_found
    def enforce_limits(self, name: str) -> int:
        """Apply ``max_age`` and the other limits now (jobs schedule this); returns removed count.
        Consumers take the removed messages they had pending as acked (``Consumers.on_removed``)."""
        return self._live(name).enforce_limits()

    @_deleted_is_not_found
    def compact(self, name: str, target_size: int | None = None) -> dict[str, Any]:
        """Merge all of a stream's files below ``target_size`` now (writers' upkeep merges them in tiers as
        they go: ``engine/maintenance.py``)."""
        return self.stream(name).compact(target_size)

    def vacuum(self, name: str, retention_hours: int = 168) -> list[str]:
        """Delete a stream's files that no table version within ``retention_hours`` needs, and the
        files of its lost commits older than that (``MessageTable.vacuum``). A retention shorter
        than a write takes deletes the files of commits still in flight (delta-rs #3645): on a
        stream being written, keep it at hours, as upkeep does (Delta's 7 days)."""
        return self.stream(name).table.vacuum(retention_hours)

    # -- reads ---------------------------------------------------------------------------------
    def direct(self, name: str) -> DirectGet:
        return DirectGet(self.stream(name))

    def _direct_only(self, name: str) -> LakeStream:
        """A stream that answers direct gets: the server subscribes ``$JS.API.DIRECT.GET.<name>``
        only with ``allow_direct`` (stream.go subscribeToDirect), so without it a direct get has
        no responders, as nats-py's ``get_msg(direct=True)`` then raises."""
        stream = self.stream(name)
        if not stream.config.allow_direct:
            raise NoRespondersError(f"no responders: stream {name} does not answer direct gets (allow_direct is not set)")
        return stream

    @_deleted_is_not_found
    def get_msg(
        self, stream_name: str, seq: int | None = None, subject: str | None = None, direct: bool = False,
        next: bool = False,
    ) -> RawStreamMsg:
        """nats-py's ``get_msg``: by sequence, last by subject, or next by subject from ``seq``.

        The request is the one nats-py sends: a subject without ``next`` asks for the last
        message on it, and nats-py then drops the sequence. Without ``direct`` it answers as
        ``$JS.API.STREAM.MSG.GET`` does, whose request checks come before the stream is looked
        up: neither a sequence nor a subject is a bad request (10003). With ``direct`` it is a
        direct get, which a stream without ``allow_direct`` does not answer (``NoRespondersError``)."""
        subject = subject or None  # an empty subject is no subject in nats-py's request
        if subject is not None and not next:
            seq = None
        if not direct:
            check_uint64("JSApiMsgGetRequest", seq=seq)
            if not (seq or subject is not None):
                raise api_error("JSBadRequestErr")
            return self.direct(stream_name).get_msg(seq=seq, subject=subject, next=next)
        return DirectGet(self._direct_only(stream_name)).get_msg(seq=seq, subject=subject, next=next)

    @_deleted_is_not_found
    def direct_get(
        self, name: str, request: dict[str, Any], *, as_of: int | datetime | str | None = None
    ) -> DirectReply:
        """The full direct-get request (``seq``, ``last_by_subj``, ``next_by_subj``, ``batch``,
        ``max_bytes``, ``start_time``, ``multi_last``, ``up_to_seq``, ``up_to_time``).

        ``as_of`` (a table version or a time) answers from the stream as it was then, including
        messages limits or purges have since removed. A stream without ``allow_direct`` does not
        answer (``NoRespondersError``), as on the server.
        """
        stream = self._direct_only(name)
        return DirectGet(stream.as_of(as_of) if as_of is not None else stream).request(request)

    # -- consumers -----------------------------------------------------------------------------
    @cached_property
    def consumers(self) -> Consumers:
        return Consumers(self)

    @_deleted_is_not_found
    def add_consumer(
        self, stream: str, config: ConsumerConfig | dict[str, Any] | str | None = None, **params: Any
    ) -> ConsumerInfo:
        """nats-py ``add_consumer`` (create or update); ``params`` are nats-py keywords."""
        if config is None:
            cfg = ConsumerConfig.from_kwargs(**params)
        else:
            cfg = config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_json(config)
            if params:
                cfg = cfg.model_copy(update=ConsumerConfig.from_kwargs(**params).model_dump(exclude_unset=True))
        return self.consumers.add(stream, cfg)

    @_deleted_is_not_found
    def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        return self.consumers.info(stream, consumer)

    @_deleted_is_not_found
    def consumers_info(self, stream: str, offset: int | None = None) -> list[ConsumerInfo]:
        return self.consumers.infos(stream)[max(offset or 0, 0) :]  # the server's max(offset, 0)

    @_deleted_is_not_found
    def delete_consumer(self, stream: str, consumer: str) -> bool:
        return self.consumers.delete(stream, consumer)

    @_deleted_is_not_found
    def pause_consumer(
        self, stream: str, consumer: str, pause_until: datetime | str | None = None
    ) -> dict[str, Any]:
        """``$JS.API.CONSUMER.PAUSE``: pause the consumer until ``pause_until`` (an RFC3339
        string or a ``datetime``), or resume it (``None``). Returns the server's reply
        (``paused``, ``pause_until``, ``pause_remaining`` in ns while paused)."""
        until = None if pause_until is None else to_utc_time(pause_until)
        return self.consumers.pause(stream, consumer, until)

    @_deleted_is_not_found
    def reset_consumer(self, stream: str, consumer: str, seq: int | None = None) -> ConsumerInfo:
        """``$JS.API.CONSUMER.RESET``: the answer carries ``reset_seq``."""
        check_uint64("JSApiConsumerResetRequest", seq=seq)
        return self.consumers.reset(stream, consumer, seq)

    @_deleted_is_not_found
    def start_sequence(self, stream: str, config: ConsumerConfig | dict[str, Any]) -> tuple[int, list[int]]:
        """Where a consumer with ``config`` created now starts: ``(start_seq, skip_list)``."""
        cfg = config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_json(config)
        return self.consumers.start_sequence(stream, cfg)

    @_deleted_is_not_found
    def num_pending(
        self, stream: str, from_seq: int, filters: list[str] | str | None = None, last_per_subject: bool = False
    ) -> int:
        return self.consumers.num_pending(stream, from_seq, filters, last_per_subject)

    @_deleted_is_not_found
    def next_seqs(self, stream: str, consumer: str, limit: int) -> list[int]:
        return self.consumers.next_seqs(stream, consumer, limit)

    @_deleted_is_not_found
    def ack(
        self, stream: str, consumer: str, stream_seq: int, consumer_seq: int | None = None,
        generation: int | None = None,
    ) -> bool:
        return self.consumers.ack(stream, consumer, stream_seq, consumer_seq, generation)

    @_deleted_is_not_found
    def record_delivered(
        self, stream: str, consumer: str, stream_seq: int, consumer_seq: int | None = None,
        generation: int | None = None,
    ) -> bool:
        return self.consumers.record_delivered(stream, consumer, stream_seq, consumer_seq, generation)

    @_deleted_is_not_found
    def check_interest(self, stream: str) -> int:
        return self.consumers.check_interest(stream)


def _check_consumer_limits(old: StreamConfig, cfg: StreamConfig, consumers: list[Consumer]) -> None:
    """``updateWithAdvisory``: when a positive ``consumer_limits`` value changed, no existing
    consumer may be above either (positive) new limit: 10069 naming those that are (the
    server lists them in map order, the lake by name)."""
    ol, nl = old.consumer_limits, cfg.consumer_limits
    threshold, pending = max(nl.inactive_threshold, 0), max(nl.max_ack_pending, 0)
    if not ((threshold and threshold != ol.inactive_threshold) or (pending and pending != ol.max_ack_pending)):
        return
    bad = [c.name for c in consumers if (threshold and c.config.inactive_threshold > threshold)
           or (pending and c.config.max_ack_pending > pending)]
    if bad:
        raise api_error("JSStreamUpdateErrF", err=f"change to limits violates consumers: {', '.join(bad)}")


def _stored_state(state: dict[str, Any]) -> dict[str, Any]:
    """A recorded state as ``StreamState`` takes it."""
    return {k: v for k, v in state.items() if k != LAST_MSG_ID}


# Characters of stream names the server takes that a table path cannot carry: delta-rs panics
# on ``[ ] ^ |`` and control characters in a table URI, reads a ``%XX`` as an escape (a local
# table is not found again; an object store's is not where its removal looks), and an object
# store's ``?`` as a query (its ``#`` is not removed either). Each is written ``.XX.`` (its code in hex): no stream name has a
# ``.``, so no other stream's directory is that, and every other name keeps its directory. A NUL
# is written ``.00.`` too, for a memory stream: a server makes no file for one, where it fails
# to make a file stream's store (``check_store_name``).
_PATH_UNSAFE_LOCAL = re.compile(r"[\[\]^|\x00-\x1f\x7f]|%(?=[0-9A-Fa-f]{2})")
_PATH_UNSAFE_STORE = re.compile(r"[\[\]^|\x00-\x1f\x7f?#]|%(?=[0-9A-Fa-f]{2})")


def check_store_name(cfg: StreamConfig) -> None:
    """A file stream named with a NUL: the server's file store cannot make its directory, so
    the creation fails there with 10049 (a memory stream is made)."""
    if "\x00" in cfg.name and cfg.storage == StorageType.FILE:
        raise api_error("JSStreamCreateErrF", err="error creating store for stream")


def table_dir(name: str, local: bool) -> str:
    """The directory under ``streams/`` of stream ``name``'s table (``local``: on a local disk)."""
    unsafe = _PATH_UNSAFE_LOCAL if local else _PATH_UNSAFE_STORE
    return unsafe.sub(lambda m: f".{ord(m.group()):02x}.", name)


def stream_lookup(records: dict[Key, Record]) -> StreamLookup:
    """The other streams by name, as the catalog records of one transaction hold them (their
    stored configs): what the server's stream config checks look up in the account."""

    def lookup(name: str) -> StreamConfig | None:
        rec = records.get((STREAM, name, ""))
        return None if rec is None else StreamConfig.from_stored(rec.body["config"])

    return lookup


def _remove_tree(uri: str, storage_options: dict[str, str] | None) -> None:
    """Delete a stream table's directory, through the object store delta-rs wrote it with (the
    same storage options, under every name delta-rs takes them)."""
    root = local_root(uri)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
        return
    table_filesystem(uri, storage_options).delete_dir("")
