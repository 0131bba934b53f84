"""Durable consumers on lake streams: config and position kept in the catalog, with the server's
consumer semantics (``consumer.go``) computed from the stream's index. The state each one keeps,
and what it derives from the index, is ``consumer_state``'s.

Every change goes through ``Catalog.transact``: it is planned on the current record and
committed atomically, replanned on a concurrent change, so positions only move forward
(``record_delivered`` and ``ack`` never lower them). A reset is the one deliberate move
backwards; it bumps ``reset_generation``. A writer that read generation g before the reset
passes g to ``ack``/``record_delivered`` and its now stale position is ignored instead of
undoing the reset (an ack carrying a generation older than the record's is dropped).

Retention follows the server: on interest and work-queue streams a message is removed once
no consumer still needs it (``stream.ackMsg``, ``consumer.needAck``: its subject is one the
consumer is filtered on, or it is unfiltered, and the seq is above its ack floor; for an
explicit-ack consumer also not yet delivered, or pending). The
removal is a second commit, to the stream table, after the catalog commit; if a process dies
in between, ``check_interest`` finishes it.
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jsspark.config import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    check_consumer_config,
    check_decodable,
)
from jsspark.config.defaults import SERVER_LEVEL_KEY, SERVER_VERSION_KEY, set_static_consumer_metadata
from jsspark.config.timestamps import UTCTime
from jsspark.engine import inactive
from jsspark.engine.api import GO_ZERO_TIME, ConsumerInfo
from jsspark.engine.catalog import Change, Key, Record
from jsspark.engine.consumer_state import (
    Consumer,
    ConsumerState,
    Pending,
    Position,
    StreamView,
    filters_of,
    go_unix_nano,
    is_filtered,
    pause_left,
    pause_remaining,
    select_starting_seq,
    unix_ns,
)
from jsspark.engine.index import MessageIndex
from jsspark.engine.rollups import NEVER, RolledUp
from jsspark.engine.rollups import SUBJECT as ROLLUP_SUBJECT
from jsspark.engine.stream import LakeStream
from jsspark.engine.table import Snapshot
from jsspark.errors import APIError, api_error
from jsspark.subjects import match_filter, subject_is_subset_match, subjects_collide

if TYPE_CHECKING:
    from jsspark.engine.lake import Lake

CONSUMER = "consumer"
SERVER_VERSION = "2.15.1"  # the server whose semantics these are, reported as responses do
API_LEVEL = 5
_WQ_ERRORS = (10098, 10101)  # checked after max_consumers by the server, before it by check_consumer_config
_NAME_CHARS = string.ascii_letters + string.digits


# -- the consumer API --------------------------------------------------------------------------
class Consumers:
    """Consumer create/info/delete/reset, positions and retention for one lake."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.catalog = lake.catalog

    # -- lookups ---------------------------------------------------------------------------
    def _get(self, records: dict[Key, Record], stream: str, name: str) -> Consumer:
        rec = records.get((CONSUMER, stream, name))
        if rec is None:
            raise api_error("JSConsumerNotFoundErr")
        return Consumer.of(rec)

    def _all(self, stream: str, records: dict[Key, Record] | None = None) -> list[Consumer]:
        recs = records if records is not None else self.catalog.records()
        return sorted(
            (Consumer.of(r) for (kind, s, _), r in recs.items() if kind == CONSUMER and s == stream),
            key=lambda c: c.name,
        )

    def info_of(
        self, c: Consumer, view: StreamView, reset_seq: int | None = None, counted: int | None = None
    ) -> ConsumerInfo:
        """``infoWithSnapAndReply`` from a stored consumer and the stream's current messages;
        ``counted``: its messages on its filters after its position, when counted already
        (``StreamView.counts_from``; a consumer without a skip list)."""
        st = c.state
        nxt = st.delivered.stream_seq + 1
        pending = 0
        if nxt <= view.last:
            if counted is None:
                ahead = view.ahead(st, nxt)
                deliverable = ahead.deliverable(c.filters, st)
                counted = int((deliverable & (ahead.seqs >= nxt)).sum())
            pending = min(counted, len(view.seqs), view.last - nxt + 1)
        ack_pending = len(view.pending(c.filters, st)) if c.config.ack_policy is not AckPolicy.NONE else 0
        now = time.time_ns()
        return ConsumerInfo(
            stream_name=c.stream,
            name=c.name,
            config=_with_dynamic_metadata(c.config),
            created_ns=c.created_ns,
            delivered=st.delivered.info(),
            ack_floor=st.ack_floor.info(),
            num_ack_pending=ack_pending,
            num_pending=pending,
            ts_ns=now,
            pause_remaining_ns=pause_left(c.config, now),
            reset_generation=st.reset_generation,
            reset_seq=reset_seq,
        )

    def info(self, stream: str, name: str) -> ConsumerInfo:
        engine = self.lake.stream(stream)
        self.expire(stream)
        c = self._get(self.catalog.records(), stream, name)
        return self.info_of(c, StreamView.of(engine))

    def infos(self, stream: str) -> list[ConsumerInfo]:
        """``$JS.API.CONSUMER.LIST``: every consumer but the direct ones (``getPublicConsumers``)."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        listed = [c for c in self._all(stream) if not c.config.direct]
        view = StreamView.of(engine)  # after the records: it holds every message they delivered
        # the num_pending of consumers without a skip list, counted together (their spans overlap)
        plain = [c for c in listed if not (c.state.resume or c.state.skipped_below)]
        counts = view.counts_from([(c.filters, c.state.delivered.stream_seq + 1) for c in plain])
        counted = dict(zip([c.name for c in plain], counts, strict=True)) if counts is not None else {}
        return [self.info_of(c, view, counted=counted.get(c.name)) for c in listed]

    # -- create / update -------------------------------------------------------------------
    def add(
        self, stream: str, cfg: ConsumerConfig, action: str = "", at: ConsumerState | None = None
    ) -> ConsumerInfo:
        """``$JS.API.CONSUMER.CREATE``: ``action`` "" is create-or-update (what nats-py sends),
        "create" fails on a different existing config, "update" needs an existing consumer.

        ``at``: the position a consumer created here starts from instead of its deliver
        policy's start (a Spark query re-creating its deleted durable where its checkpoint
        stands); an existing consumer keeps its own."""
        check_decodable(cfg)  # the request is decoded before the stream is looked up
        engine = self.lake.stream(stream)
        self.expire(stream)
        scfg = engine.config
        if cfg.direct and cfg.sourcing and cfg.name:
            cfg = _named_direct_sourcing(cfg, scfg)
        deferred: APIError | None = None
        try:
            checked = check_consumer_config(cfg, scfg)
        except APIError as e:
            if e.err_code not in _WQ_ERRORS:
                raise
            deferred = e
            checked = check_consumer_config(cfg, scfg.model_copy(update={"retention": RetentionPolicy.LIMITS}))
        name = checked.durable_name or checked.name
        # a non-durable's 5 s inactive_threshold is stamped on what is stored, not on the request
        stamped = not checked.is_durable and cfg.inactive_threshold <= 0
        view = StreamView.of(engine)
        result: dict[str, Any] = {}

        def plan(records: dict[Key, Record]) -> list[Change]:
            result.clear()
            cfg_now = checked.model_copy(deep=True)
            others = self._all(stream, records)
            existing = next((c for c in others if c.name == name), None) if name else None
            if existing is not None:
                return self._update(existing, cfg_now, others, action, scfg, view, result, stamped)
            if action == "update":
                raise api_error("JSConsumerDoesNotExist")
            limitable = [c for c in others if c.limitable]
            maxc = int(scfg.max_consumers)
            # a direct or sourcing consumer is not limited, nor counted (2.15.1)
            if maxc > 0 and len(limitable) >= maxc and not (cfg_now.direct or cfg_now.sourcing):
                raise api_error("JSMaximumConsumersLimitErr")
            if deferred is not None:
                raise deferred
            if scfg.retention is RetentionPolicy.WORK_QUEUE and not (cfg_now.direct or cfg_now.sourcing) and limitable:
                mine = filters_of(cfg_now)
                if not mine:
                    raise api_error("JSConsumerWQMultipleUnfilteredErr")
                if not _partition_unique(name, mine, others):
                    raise api_error("JSConsumerWQConsumerNotUniqueErr")
            given = name
            if not given:  # the generated name is the consumer's, not its config's (as the server stores it)
                taken = {c.name for c in others}
                given = _random_name()
                while given in taken:
                    given = _random_name()
            if at is None:
                sseq, _, resume = select_starting_seq(view, cfg_now)
                at_now = ConsumerState.starting_at(sseq, resume)
            else:
                at_now = ConsumerState.from_json(at.to_json())  # a copy per replanning
            c = Consumer(stream, given, cfg_now, at_now, time.time_ns())
            result["consumer"] = c
            return [Change(CONSUMER, stream, c.name, c.body())]

        self.catalog.transact(plan)
        c = result["consumer"]
        if result.get("filters_changed") and scfg.retention is RetentionPolicy.INTEREST:
            # updateConfig: messages that lost interest go, checked from this consumer's floor
            self._remove_unneeded(engine, lambda v, _cs: v.seqs >= c.state.ack_floor.stream_seq)
        return self.info_of(c, StreamView.of(engine))

    def _update(
        self,
        existing: Consumer,
        cfg: ConsumerConfig,
        others: list[Consumer],
        action: str,
        scfg: StreamConfig,
        view: StreamView,
        result: dict[str, Any],
        stamped: bool = False,
    ) -> list[Change]:
        """The existing-consumer branch of ``addConsumerWithAssignmentAndMode``. ``create``
        compares the request with the stored config, which for a non-durable carries the 5 s
        inactive threshold the request did not (``stamped``): never the same, as on the server.
        A new filter keeps what the old one left pending (``updateConfig`` keeps ``o.pending``).
        ``pause_until`` is the existing consumer's whatever the request says
        (``jsConsumerCreateRequest``, before the static metadata and the comparison): only the
        pause API changes it. So are a durable sourcing consumer's deliver policy and start
        sequence (the request's are replaced there too)."""
        if cfg.pause_until != existing.config.pause_until:
            cfg.pause_until = existing.config.pause_until
            set_static_consumer_metadata(cfg)
        if cfg.sourcing and cfg.durable_name:  # a durable sourcing consumer keeps where it started
            cfg.deliver_policy, cfg.opt_start_seq = existing.config.deliver_policy, existing.config.opt_start_seq
        same = cfg.to_json() == existing.config.to_json()
        if action == "create" and (stamped or not same):
            raise api_error("JSConsumerAlreadyExists")
        if scfg.retention is RetentionPolicy.WORK_QUEUE and not _partition_unique(existing.name, filters_of(cfg), others):
            raise api_error("JSConsumerWQConsumerNotUniqueErr")
        result["consumer"] = existing
        if same:
            return []
        if (err := _update_error(existing.config, cfg)) is not None:
            raise err
        # ``updateConfig`` restarts the delete timer when the threshold changes: activity
        active = time.time_ns() if cfg.inactive_threshold != existing.config.inactive_threshold else None
        updated = replace(existing, config=cfg, active_ns=active or existing.active_ns)
        result["filters_changed"] = filters_of(cfg) != existing.filters
        if result["filters_changed"]:
            kept = _settled(updated, existing.state, view, view.pending(existing.filters, existing.state))
            updated = replace(updated, state=kept)
        result["consumer"] = updated
        return [Change(CONSUMER, existing.stream, existing.name, updated.body())]

    # -- pause -----------------------------------------------------------------------------
    def pause(self, stream: str, name: str, until: UTCTime | None) -> dict[str, Any]:
        """``$JS.API.CONSUMER.PAUSE`` (``jsConsumerPauseRequest``): set the consumer's
        ``pause_until`` (``None`` or Go's zero time resumes it) and the API level metadata that
        goes with it; creates and updates keep a consumer's pause, so this is how it changes.
        Answers the server's reply: ``paused``, ``pause_until`` (Go's zero time when resumed),
        ``pause_remaining`` (ns) while paused."""
        self.lake.stream(stream)  # the stream is looked up first (10059)
        self.expire(stream)
        if until is not None and until == UTCTime.parse(GO_ZERO_TIME):
            until = None

        def plan(records: dict[Key, Record]) -> list[Change]:
            c = self._get(records, stream, name)
            cfg = c.config.model_copy(deep=True)
            cfg.pause_until = until
            set_static_consumer_metadata(cfg)
            if cfg.to_json() == c.config.to_json():
                return []
            return [Change(CONSUMER, stream, name, replace(c, config=cfg).body())]

        self.catalog.transact(plan)
        out: dict[str, Any] = {"paused": False, "pause_until": GO_ZERO_TIME if until is None else until.to_rfc3339nano()}
        left = 0 if until is None else pause_remaining(unix_ns(until), time.time_ns())
        if left:
            out["paused"] = True
            out["pause_remaining"] = left
        return out

    # -- delete ----------------------------------------------------------------------------
    def delete(self, stream: str, name: str) -> bool:
        """Delete; on an interest stream messages nobody needs any more go with it, all of
        them when it was the last consumer (``cleanupNoInterestMessages``)."""
        self.expire(stream)
        return self._delete(stream, name)

    def _delete(self, stream: str, name: str, only_if: Callable[[Consumer], bool] | None = None) -> bool:
        """``delete``; with ``only_if``, only when the consumer (as the catalog holds it at the
        commit) still passes it, and a missing one is no error. Returns whether it went."""
        engine = self.lake.stream(stream)
        gone: dict[str, Consumer] = {}

        def plan(records: dict[Key, Record]) -> list[Change]:
            gone.clear()
            if only_if is not None:
                rec = records.get((CONSUMER, stream, name))
                if rec is None or not only_if(Consumer.of(rec)):
                    return []
            gone["c"] = self._get(records, stream, name)
            return [Change(CONSUMER, stream, name, None)]

        self.catalog.transact(plan)
        if not gone:
            return False
        if engine.config.retention is RetentionPolicy.INTEREST:
            floor = gone["c"].state.ack_floor.stream_seq
            self._remove_unneeded(engine, lambda v, cs: v.seqs >= floor if cs else np.ones(len(v.seqs), bool))
            if not self._all(stream):  # the server purges: a never-written stream then starts at 1
                engine.mark_purged()
        return True

    # -- inactivity ------------------------------------------------------------------------
    def expire(self, stream: str) -> list[str]:
        """Delete, as ``delete`` does, the consumers of ``stream`` whose inactive threshold has
        passed (``inactive.deadline``): what the server's delete timer did by now. Called first
        by every operation that reads or changes the stream's consumers or retention. Returns
        the names removed; reads nothing more than the catalog while none is due."""
        now = time.time_ns()
        due = [
            Consumer.of(r) for (kind, s, _), r in self.catalog.records().items()
            if kind == CONSUMER and s == stream and int(r.body["config"].get("inactive_threshold") or 0) > 0
        ]
        due = [c for c in due if (d := inactive.deadline(c, lambda: 0)) is not None and d <= now]  # at the earliest
        if not due:
            return []
        view = StreamView.of(self.lake.stream(stream))

        def expired(c: Consumer) -> bool:
            d = inactive.deadline(c, lambda: len(view.pending(c.filters, c.state)))
            return d is not None and d <= now

        return [c.name for c in due if self._delete(stream, c.name, only_if=expired)]

    def touch(self, stream: str, name: str) -> None:
        """Record activity (a pull) of a consumer with an inactive threshold; nothing for
        one without (the server tracks ``waiting.last`` only when ``dthresh > 0``)."""
        now = time.time_ns()

        def plan(records: dict[Key, Record]) -> list[Change]:
            c = self._get(records, stream, name)
            if not inactive.counts_pulls(c.config) or c.active_ns >= now:
                return []
            return [Change(CONSUMER, stream, name, c.body(active_ns=now))]

        self.catalog.transact(plan)

    # -- positions -------------------------------------------------------------------------
    def start_sequence(self, stream: str, cfg: ConsumerConfig) -> tuple[int, list[int]]:
        """Where a consumer with ``cfg`` created now would start, and its skip list."""
        sseq, skip, _ = select_starting_seq(StreamView.of(self.lake.stream(stream)), cfg)
        return sseq, skip

    def num_pending(self, stream: str, from_seq: int, filters: list[str] | str | None, last_per_subject: bool) -> int:
        flts = [filters] if isinstance(filters, str) else list(filters or [])
        return StreamView.of(self.lake.stream(stream)).num_pending(from_seq, flts, last_per_subject)

    def next_seqs(self, stream: str, name: str, limit: int) -> list[int]:
        """The next ``limit`` stream seqs the consumer delivers (skip list first, then matches).

        Fewer where ``max_ack_pending`` stops it: a consumer that acks delivers nothing more
        while that many are pending (``getNextMsg``; a pull request then waits), so at most
        ``max_ack_pending`` minus its pending acks. None while the consumer is paused
        (``pause_until`` ahead): the server's ``loopAndGatherMsgs`` delivers nothing then."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        c = self._get(self.catalog.records(), stream, name)
        if inactive.counts_pulls(c.config):  # a pull request is activity, paused or not
            self.touch(stream, name)
        if pause_left(c.config):
            return []
        view = StreamView.of(engine)
        maxp = int(c.config.max_ack_pending)
        if maxp > 0 and c.config.ack_policy is not AckPolicy.NONE:
            limit = min(limit, maxp - len(view.pending(c.filters, c.state)))
        if limit <= 0:
            return []
        after = c.state.delivered.stream_seq
        if not c.state.resume:  # no skip list: its matches after its position (and a used-up list's end)
            return view.first_matches(c.filters, max(after, c.state.skipped_below), limit)
        ahead = view.ahead(c.state, after + 1)
        mask = ahead.deliverable(c.filters, c.state) & (ahead.seqs > after)
        return [int(s) for s in ahead.seqs[mask][:limit]]

    def record_delivered(
        self, stream: str, name: str, stream_seq: int, consumer_seq: int | None = None,
        generation: int | None = None,
    ) -> bool:
        """Persist that everything up to ``stream_seq`` was delivered (only ever forward).

        ``consumer_seq`` defaults to the delivered count so far plus the deliverable messages
        up to ``stream_seq``. With ack policy none the ack floor follows, as the server acks
        on delivery, and on interest/work-queue streams those messages may go.
        """
        engine = self.lake.stream(stream)
        self.expire(stream)
        view = StreamView.of(engine)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            acked.clear()
            c = self._get(records, stream, name)
            st = c.state
            if (generation is not None and generation < st.reset_generation) or stream_seq <= st.delivered.stream_seq:
                return []
            none = c.config.ack_policy is AckPolicy.NONE
            ahead = view.ahead(st, min(st.ack_floor.stream_seq, st.delivered.stream_seq) + 1).upto(
                max(stream_seq, st.resume, st.skipped_below)
            )
            mask = ahead.delivered_or_due(c.filters, st) if consumer_seq is None or none else None
            dseq = consumer_seq
            if dseq is None:
                dseq = st.delivered.consumer_seq + ahead.count(mask, st.delivered.stream_seq, stream_seq)
            resume, skipped_to, skipped_below = st.resume, st.skipped_to, st.skipped_below
            if resume:  # hand out skip-list entries; once all are out, deliver normally
                left = view.skip_list(c.filters, st)
                handed = [x for x in left if x <= stream_seq]
                if len(handed) == len(left):
                    resume, skipped_to, skipped_below = 0, 0, resume
                elif handed:
                    skipped_to = handed[-1]
            new = replace(st, delivered=Position(dseq, stream_seq, now), resume=resume, skipped_to=skipped_to,
                          skipped_below=skipped_below)
            if none:  # acked on delivery: ``deliverMsg`` sets the floors without ``updateAcks`` (no last_active)
                new.ack_floor = Position(dseq, stream_seq, st.ack_floor.last_active_ns)
                covered = mask & (ahead.seqs > st.ack_floor.stream_seq) & (ahead.seqs <= stream_seq)
                acked.append(np.append(ahead.seqs[covered], stream_seq))
            active = now if inactive.counts_pulls(c.config) else None  # a pull consumer's delivery is activity
            return [Change(CONSUMER, stream, name, c.body(new, active_ns=active))]

        changed = bool(self.catalog.transact(plan))
        if acked:
            self._after_ack(engine, acked[0])
        return changed

    def ack(
        self, stream: str, name: str, stream_seq: int, consumer_seq: int | None = None,
        generation: int | None = None,
    ) -> bool:
        """An AckAll / flow-control ack (``processAckMsgLocked``): move the ack floor to
        ``(consumer_seq, stream_seq)``; returns whether it moved.

        Ignored: an ack at or beyond the next message to deliver unless the consumer has
        ``flow_control``; one not above both floors; one from before a reset (``generation``);
        any ack on an ack-none consumer. Explicit-ack consumers are acked cumulatively here
        (a lake reader acks in order). ``consumer_seq`` defaults to the delivery sequence of
        ``stream_seq``: its pending entry's, else counted from the delivered position.
        """
        engine = self.lake.stream(stream)
        self.expire(stream)
        view = StreamView.of(engine)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            nonlocal view
            acked.clear()
            c = self._get(records, stream, name)
            view = _covering(view, engine, [c])
            moves = floor_moves(c)
            if moves:
                return moves
            st = c.state
            if refreshes(c):  # an explicit ack of a delivered message: ``updateAcks`` stamps the floor's activity
                again = replace(st, ack_floor=replace(st.ack_floor, last_active_ns=now))
                return [Change(CONSUMER, stream, name, c.body(again, now))]
            if inactive.tracked(c.config):
                return [Change(CONSUMER, stream, name, c.body(active_ns=now))]  # any ack is activity (suppressDeletion)
            return []

        def refreshes(c: Consumer) -> bool:
            st = c.state
            return (
                c.config.ack_policy is AckPolicy.EXPLICIT
                and (generation is None or generation >= st.reset_generation)
                and (stream_seq <= st.delivered.stream_seq or c.config.flow_control)
            )

        def floor_moves(c: Consumer) -> list[Change]:
            st = c.state
            if generation is not None and generation < st.reset_generation:
                return []
            if c.config.ack_policy is AckPolicy.NONE:
                return []
            if stream_seq > st.delivered.stream_seq and not c.config.flow_control:
                return []
            pending = view.pending(c.filters, st)
            dseq = consumer_seq
            if dseq is None:
                d = st.delivered
                at = np.flatnonzero(pending.seqs == stream_seq)
                if len(at):
                    dseq = int(pending.dseqs[at[0]])
                else:  # not pending: numbered by what it delivers between it and the delivered position
                    ahead = view.ahead(st, min(stream_seq, d.stream_seq) + 1).upto(
                        max(stream_seq, d.stream_seq, st.resume, st.skipped_below)
                    )
                    mask = ahead.delivered_or_due(c.filters, st)
                    dseq = (
                        d.consumer_seq - ahead.count(mask, stream_seq, d.stream_seq)
                        if stream_seq <= d.stream_seq
                        else d.consumer_seq + ahead.count(mask, d.stream_seq, stream_seq)
                    )
            explicit = c.config.ack_policy is AckPolicy.EXPLICIT
            if stream_seq <= st.ack_floor.stream_seq:
                return []
            # an explicit ack takes a pending message whatever its delivery seq (a wider purge
            # can move the floor's delivery seq past older pending ones); an AckAll one must be
            # above the floor
            if dseq <= st.ack_floor.consumer_seq and not (explicit and stream_seq in pending.seqs):
                return []
            covered = pending.seqs <= stream_seq
            rest = pending.where(~covered)
            floor = Position(dseq, stream_seq, now)
            if explicit:
                # moveAckFloor: to just below the next delivery still pending, or to the
                # delivered position when none is
                floor = (
                    Position(int(rest.dseqs[0]) - 1, int(rest.seqs[0]) - 1, now)
                    if len(rest)
                    else Position(st.delivered.consumer_seq, st.delivered.stream_seq, now)
                )
            acked.append(np.append(pending.seqs[covered], stream_seq))
            return [
                Change(CONSUMER, stream, name, c.body(_settled(c, replace(st, ack_floor=floor), view, rest), now))
            ]

        self.catalog.transact(plan)
        changed = bool(acked)
        if acked:
            self._after_ack(engine, acked[0])
        return changed

    def reset(self, stream: str, name: str, seq: int | None = None) -> ConsumerInfo:
        """``$JS.API.CONSUMER.RESET`` (``resetStartingSeqLocked``): restart delivery at ``seq``
        (none or 0: just above the ack floor) with ``dseq=1`` and both floors at ``seq-1``."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        view = StreamView.of(engine)
        result: dict[str, Any] = {}

        def plan(records: dict[Key, Record]) -> list[Change]:
            result.clear()
            c = self._get(records, stream, name)
            cfg, st = c.config, c.state
            target = seq or 0
            if target == 0:
                target = st.ack_floor.stream_seq + 1
            elif cfg.deliver_policy is DeliverPolicy.BY_START_SEQUENCE:
                if target < cfg.opt_start_seq:
                    raise api_error("JSConsumerInvalidResetErr", err="below start seq")
            elif cfg.deliver_policy is DeliverPolicy.BY_START_TIME:
                assert cfg.opt_start_time is not None
                if target < view.seq_from_time(go_unix_nano(cfg.opt_start_time)):
                    raise api_error("JSConsumerInvalidResetErr", err="below start time")
            elif cfg.deliver_policy is not DeliverPolicy.ALL:
                raise api_error("JSConsumerInvalidResetErr", err="not allowed")
            target = max(target, 1)
            # the skip list is kept, as the server keeps ``o.lss``
            new = ConsumerState.starting_at(target, st.resume, st.skipped_to, st.reset_generation + 1)
            if st.resume:
                new.skip_gone, new.reset_handed = list(st.skip_gone), max(st.reset_handed, st.skipped_to)
            updated = replace(c, state=new)
            result.update(c=updated, seq=target)
            return [Change(CONSUMER, stream, name, updated.body())]

        self.catalog.transact(plan)
        c, target = result["c"], result["seq"]
        if engine.config.retention is RetentionPolicy.INTEREST and target - 1 <= engine.state().last_seq:
            # checkStateForInterestStream: this consumer's messages below the new start; none
            # when the new ack floor lies beyond the stream's last seq (errAckFloorHigherThanLastSeq)
            self._remove_unneeded(engine, lambda v, _cs: (v.seqs < target) & v.match(c.filters))
        return self.info_of(c, StreamView.of(engine), reset_seq=target)

    # -- retention -------------------------------------------------------------------------
    def _after_ack(self, engine: LakeStream, acked: np.ndarray) -> None:
        """``stream.ackMsg`` for each acked seq (what the consumer had pending up to the ack,
        and the acked seq itself): gone once no consumer needs it."""
        if engine.config.retention is RetentionPolicy.LIMITS or not len(acked):
            return
        self._remove_unneeded(engine, lambda v, _cs: np.isin(v.seqs, acked))

    def _remove_unneeded(
        self, engine: LakeStream, candidates: Callable[[StreamView, list[Consumer]], np.ndarray | bool],
    ) -> int:
        """Remove the candidate messages no consumer needs, deciding on the consumers as they
        are in the catalog when the removal is planned. No consumers: remove every candidate."""
        name = engine.name

        def choose(snap: Snapshot, index: MessageIndex) -> np.ndarray:
            view = StreamView(index.rows, snap.last_seq, engine.config)
            consumers = self._all(name)
            mask = np.broadcast_to(np.asarray(candidates(view, consumers), dtype=bool), view.seqs.shape)
            at = np.flatnonzero(mask)
            for c in consumers:  # each asked only about the candidates no earlier one needs
                if not len(at):
                    break
                at = at[~view.needed_by(c, at)]
            return view.seqs[at]

        return engine.remove_seqs(choose)

    def on_purge(self, stream: str, subject: str | None, before: StreamView) -> None:
        """What a stream purge does to its consumers (``stream.purge`` → ``consumer.purge``).

        A consumer whose filters lie within the purged subject (every consumer, for a full
        purge) moves its next delivery up to the first message left on the purged subject; one
        whose filters are wider starts from the stream's new first seq. If its ack floor lies
        below that point, pending (delivered, unacked) messages below it, and for a wider
        consumer the pending messages that are gone, are acked one by one as the server's
        consumer store does: the floor ends at the highest of them, or at the delivered position
        when nothing stays pending.
        ``before`` is the stream as it was before the purge.
        """
        engine = self.lake.stream(stream)
        snap, index = engine._load()
        view = StreamView(index.rows, snap.last_seq, engine.config)
        if subject:
            left = view.seqs[view.match([subject])]
            fseq = int(left[0]) if len(left) else 0
        else:
            fseq = view.first
        now = time.time_ns()

        purged_at = view  # the stream right after the purge; ``view`` may be a later one

        def alive(seqs: np.ndarray) -> np.ndarray:
            # (a few pending seqs: no pass over the stream's); one published after the purge stays
            return (index.positions_of(seqs) >= 0) | (seqs > purged_at.last)

        def plan(records: dict[Key, Record]) -> list[Change]:
            nonlocal view
            changes = []
            for c in self._all(stream, records):
                target = _purge_target(c, subject, fseq, purged_at.first)
                if target is None:
                    continue
                st = c.state
                was = before
                if _end(st) > before.last:  # it delivered what was published after the purge
                    view = _covering(view, engine, [c])
                    was = before.followed_by(view)
                moved, rest = _purged(st, was.pending(c.filters, st), *target, alive, purged_at.last, now,
                                      c.config.ack_policy is not AckPolicy.EXPLICIT)
                new = _settled(c, moved, view, rest)
                if new != st:
                    changes.append(Change(CONSUMER, stream, c.name, c.body(new)))
            return changes

        self.catalog.transact(plan)

    def on_rollups(self, stream: str, rolled: RolledUp) -> None:
        """What a publish's rollups (or a landing's) do to consumers, each at its place among
        the limits' removals of that publish, as the server makes them message by message
        (``RolledUp``): a rollup purges its subject, or the stream, down to its message
        (``on_purge``; down to nothing when an interest stream did not store it), and when it
        removed exactly one message that one is also a single removal (``on_removed``); a
        message a limit pushed out is a single removal. Called after the publish's commit."""
        engine = self.lake.stream(stream)
        if not self._all(stream):
            return
        before = StreamView(pa.table({"seq": rolled.seqs, "subject": rolled.subjects}), 0, engine.config)
        view = StreamView.of(engine)
        events = _rollup_events(rolled, memory=engine.config.storage is StorageType.MEMORY)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            acked.clear()
            changes = []
            for c in self._all(stream, records):
                st = c.state
                moved, rest = st, before.pending(c.filters, st)
                for e in events:
                    target = _purge_target(c, *e.purge) if e.purge is not None else None
                    if target is not None and _moves(moved, target[0] or e.at + 1):
                        moved, rest = _purged(moved, rest, *target,
                                              lambda seqs, at=e.at: _alive_after(rolled, seqs, at), e.at, now,
                                              c.config.ack_policy is not AckPolicy.EXPLICIT)
                    if len(e.removed):
                        moved, rest, took = _removal_acked(c, moved, rest, e.removed, e.signals, now)
                        acked.append(took)
                new = _settled(c, moved, view, rest)
                if new != st:
                    changes.append(Change(CONSUMER, stream, c.name, c.body(new)))
            return changes

        self.catalog.transact(plan)
        if acked:
            self._after_ack(engine, np.concatenate(acked))

    def on_removed(
        self,
        stream: str,
        seqs: Sequence[int] | np.ndarray,
        subjects: Sequence[str] | pa.Array,
        matched_by: str | None = None,
    ) -> None:
        """What removing single messages does to consumers: a ``delete_msg`` or a limit
        (``max_msgs``, ``max_bytes``, ``max_msgs_per_subject``, ``max_age``) pushing them out, as
        ``stream.storeUpdates`` → ``consumer.decStreamPending``; purges go to ``on_purge``.

        Call it after the removing commit with the removed seqs and their subjects. A consumer
        whose filter takes the subject (``mset.csl``; ``matched_by`` instead when given) and has
        the message pending treats it as acked (``processTerm``): an ack-all consumer's floor
        moves up to it, acking what it had pending below, which on interest/work-queue streams
        may go; an explicit one drops it from pending and moves its floor past it if it was the
        oldest (``moveAckFloor``). A consumer's skip-list entries not yet handed out that go
        are kept as ``skip_gone``. Calling it again with the same messages changes nothing."""
        seqs = np.asarray(seqs, dtype=np.int64)
        if not any(_may_hold(c, seqs) or _may_skip(c, seqs) for c in self._all(stream)):
            return  # none can have them pending: nothing to tell, and the stream's view is not read
        order = np.argsort(seqs)
        seqs, subjects = seqs[order], pa.array(subjects, pa.string()).take(pa.array(order))
        signals = subjects if matched_by is None else pa.array([matched_by] * len(seqs), pa.string())
        engine = self.lake.stream(stream)
        view = StreamView.of(engine)
        now = time.time_ns()
        acked: list[np.ndarray] = []

        def plan(records: dict[Key, Record]) -> list[Change]:
            nonlocal view
            acked.clear()
            told = [c for c in self._all(stream, records) if _may_hold(c, seqs) or _may_skip(c, seqs)]
            if not told:
                return []
            view = _covering(view, engine, told)
            # below each floor (pending) and, during a skip list, below its entries not handed out
            above = min(min(c.state.ack_floor.stream_seq, c.state.skipped_to if c.state.resume else 2**63) for c in told)
            ends = [_end(c.state) for c in told]
            before = view.before_removal(seqs, subjects, above, max(ends))
            changes = []
            for c in told:
                st = c.state
                pending = before.pending(c.filters, st)
                gone = np.isin(seqs, np.array(before.skip_list(c.filters, st), dtype=np.int64))
                if gone.any():  # the list keeps them: their subjects' older messages take no place
                    entries = zip(seqs[gone].tolist(), subjects.filter(pa.array(gone)).to_pylist(), strict=True)
                    st = replace(st, skip_gone=[*st.skip_gone, *entries])
                moved, rest, took = _removal_acked(c, st, pending, seqs, signals, now)
                if moved is c.state:
                    continue
                acked.append(took)
                changes.append(Change(CONSUMER, stream, c.name, c.body(_settled(c, moved, view, rest))))
            return changes

        self.catalog.transact(plan)
        if acked:
            self._after_ack(engine, np.concatenate(acked))

    def to_interest(self, stream: str) -> int:
        """A retention change to interest (``updateWithAdvisory``): each consumer's
        ``checkStateForInterestStream`` offers what it is done with, on its filter, up to its
        ack floor, or up to its delivered seq when it has acks pending; each goes unless some
        consumer needs it. Without consumers every message goes."""
        engine = self.lake.stream(stream)

        def candidates(v: StreamView, cs: list[Consumer]) -> np.ndarray:
            if not cs:
                return np.ones(len(v.seqs), dtype=bool)
            mask = np.zeros(len(v.seqs), dtype=bool)
            for c in cs:
                st = c.state
                upto = st.ack_floor.stream_seq
                if st.delivered.stream_seq > upto and len(v.pending(c.filters, st)):
                    upto = st.delivered.stream_seq
                mask |= v.match(c.filters) & (v.seqs <= upto)
            return mask

        return self._remove_unneeded(engine, candidates)

    def check_interest(self, stream: str) -> int:
        """Remove every message at or below some consumer's ack floor, on its filter, that no
        consumer needs (``checkInterestState``); finishes removals a crash interrupted."""
        engine = self.lake.stream(stream)
        self.expire(stream)
        if engine.config.retention is RetentionPolicy.LIMITS:
            return 0

        def candidates(v: StreamView, cs: list[Consumer]) -> np.ndarray:
            mask = np.zeros(len(v.seqs), dtype=bool)
            for c in cs:
                mask |= v.match(c.filters) & (v.seqs <= c.state.ack_floor.stream_seq)
            return mask

        return self._remove_unneeded(engine, candidates)


def _purge_target(c: Consumer, subject: str | None, subject_first: int, stream_first: int) -> tuple[int, bool] | None:
    """Where a purge moves consumer ``c`` (``purgeLocked``): ``(start, wider)``, or None when
    the purged ``subject`` is outside its filters. Within the subject (every consumer for a
    full purge) it starts at the first message left on the subject (``subject_first``; 0 for
    none, then after the stream's last); a wider one at the stream's new first seq."""
    filters = c.filters or [">"]
    if subject and not all(subject_is_subset_match(f, subject) for f in filters):
        if not any(subjects_collide(f, subject) for f in filters):
            return None
        return stream_first, True
    return (subject_first if subject else stream_first), False


def _purged(
    st: ConsumerState, pending: Pending, start: int, wider: bool, alive: Callable[[np.ndarray], np.ndarray],
    last: int, now: int, acks_all: bool,
) -> tuple[ConsumerState, Pending]:
    """``consumer.purge(start, last, wider)`` on state ``st`` with its ``pending`` acks: the
    position moves up to ``start``; if the ack floor lies below it, pending messages below it
    go, and for a wider consumer those no longer stored (``alive`` says which are). Returns
    the new state and what stays pending. Activity times move only with acks: ``ack_floor``'s
    when pending entries are dropped (``updateAcks``), ``delivered``'s never."""
    if start == 0 and not wider:
        start = last + 1
    delivered, floor = st.delivered, st.ack_floor
    if delivered.stream_seq + 1 < start:
        delivered = Position(delivered.consumer_seq, start - 1, delivered.last_active_ns)
    if not len(pending):  # nothing pending: the floor is the position
        if (delivered.consumer_seq, delivered.stream_seq) == (floor.consumer_seq, floor.stream_seq):
            return (st if delivered is st.delivered else replace(st, delivered=delivered, ack_floor=floor)), pending
        moved = Position(delivered.consumer_seq, delivered.stream_seq, floor.last_active_ns)
        return replace(st, delivered=delivered, ack_floor=moved), pending
    drop = np.zeros(len(pending), dtype=bool)
    if floor.stream_seq < start:  # pending is looked at only when the floor moves
        drop = pending.seqs < start
        if wider:  # and what the purge removed (or was already gone)
            drop |= ~alive(pending.seqs)
    dropped = pending.where(drop)
    # the in-memory floor the server reports: stream part start-1 for what lies below the new
    # start, for an ack-all consumer moved to a wider purge's highest purged pending (2.15.1;
    # not for explicit acks), the consumer part to the highest dropped delivery
    floor_sseq = max(floor.stream_seq, start - 1)
    floor_dseq = floor.consumer_seq
    if len(dropped):
        p = int(dropped.seqs[-1])
        floor_dseq = max(floor_dseq, int(dropped.dseqs.max()))
        if wider and acks_all and not alive(np.array([p], np.int64))[0]:
            floor_sseq = max(floor_sseq, p)
    if (floor_dseq, floor_sseq) != (floor.consumer_seq, floor.stream_seq):
        floor = Position(floor_dseq, floor_sseq, now if len(dropped) else floor.last_active_ns)
    if len(dropped) == len(pending):  # nothing stays pending
        floor = Position(delivered.consumer_seq, delivered.stream_seq, now)
    if (delivered, floor) == (st.delivered, st.ack_floor):
        return st, pending.where(~drop)
    return replace(st, delivered=delivered, ack_floor=floor), pending.where(~drop)


def _moves(st: ConsumerState, start: int) -> bool:
    """Whether a purge to ``start`` changes the consumer: its position or floor lie below it
    (``consumer.purge`` looks at pending only then)."""
    return st.delivered.stream_seq + 1 < start or st.ack_floor.stream_seq < start


def _removal_acked(
    c: Consumer, st: ConsumerState, pending: Pending, seqs: np.ndarray, signals: pa.Array, now: int
) -> tuple[ConsumerState, Pending, np.ndarray]:
    """``decStreamPending`` for removed ``seqs`` (each signalled on a subject of ``signals``):
    those ``c`` takes and has pending are acked (``_terminated``). Returns the state (``st``
    itself when nothing changed), what stays pending, and the seqs the acks cover (AckAll:
    what was pending below; none for explicit acks)."""
    none = np.zeros(0, np.int64)
    if c.config.ack_policy is AckPolicy.NONE or not len(pending):
        return st, pending, none
    theirs = seqs[match_filter(signals, c.filters or [">"]).to_numpy(zero_copy_only=False)]
    hit = np.isin(pending.seqs, theirs)
    if not hit.any():
        return st, pending, none
    floor, left = _terminated(c.config.ack_policy, st, pending, hit, now)
    took = pending.seqs[~left] if c.config.ack_policy is not AckPolicy.EXPLICIT else none
    return replace(st, ack_floor=floor), pending.where(left), took


@dataclass(frozen=True)
class _Removal:
    """One step of a publish's removals, as consumers see it: at message ``at``, a purge
    (``purge``: subject or None, first left on it, the stream's first seq) and/or single
    removals (``removed`` seqs, each signalled on ``signals``)."""

    at: int
    purge: tuple[str | None, int, int] | None
    removed: np.ndarray
    signals: pa.Array


_NO_SIGNALS = pa.array([], pa.string())


def purge_signal(own: str, purged: str | None, memory: bool) -> str:
    """The subject a store reports a purge of exactly one message on (``PurgeEx``), which the
    consumers' filters are matched against (``decStreamPending``): the file store the purge's
    subject (``>`` for the whole stream), the memory store the message's own."""
    return own if memory else purged or ">"


def _rollup_events(rolled: RolledUp, memory: bool) -> list[_Removal]:
    """A publish's removals in the order the server's consumers see them: for a rollup
    message ``at``, its purge (``consumer.purge``, made at once), then its one purged message
    as a single removal when the purge removed exactly one (signalled on ``purge_signal``);
    the messages a limit pushed out when message ``at`` was stored (``at`` 0: an expiry) are single removals
    too. A single removal is acked in a goroutine (``decStreamPending`` → ``processTerm``), so
    after the purge of the same message."""
    seqs, moments = rolled.seqs, rolled.moments
    reach = np.maximum.accumulate(moments) if len(moments) else moments  # first row alive after ``at``
    events: list[_Removal] = []
    limited = np.flatnonzero(~rolled.rolled & (moments != NEVER))
    for m in np.unique(moments[limited]):
        rows = limited[moments[limited] == m]
        events.append(_Removal(int(m), None, seqs[rows], rolled.subjects.take(pa.array(rows))))
    purged = np.flatnonzero(rolled.rolled)
    at, where, count = np.unique(moments[purged], return_index=True, return_counts=True)
    alone = dict(zip(at[count == 1].tolist(), purged[where[count == 1]].tolist(), strict=True))  # purges of one
    ats = np.array([r.seq for r in rolled.rollups], dtype=np.int64)
    ks = np.searchsorted(reach, ats, side="right")
    for r, kept, k in zip(rolled.rollups, rolled.kept, ks.tolist(), strict=True):
        first = int(seqs[k]) if k < len(seqs) and seqs[k] <= r.seq else r.seq + 1
        subject = r.subject if r.kind == ROLLUP_SUBJECT else None
        one, signals = alone.get(r.seq), _NO_SIGNALS
        if one is not None:
            signals = pa.array([purge_signal(rolled.subjects[one].as_py(), subject, memory)], pa.string())
        events.append(_Removal(r.seq, (subject, r.seq if kept else 0, first),
                               seqs[one : one + 1] if one is not None else seqs[:0], signals))
    events.sort(key=lambda e: (e.at, e.purge is None))
    return events


def _alive_after(rolled: RolledUp, seqs: np.ndarray, at: int) -> np.ndarray:
    """Which of ``seqs`` are stored right after the publish's message ``at`` (rolled up)."""
    pos = np.searchsorted(rolled.seqs, seqs)
    found = pos < len(rolled.seqs)
    found[found] = rolled.seqs[pos[found]] == seqs[found]
    out = np.zeros(len(seqs), dtype=bool)
    out[found] = rolled.moments[pos[found]] > at
    return out


def _covering(view: StreamView, engine: LakeStream, consumers: Sequence[Consumer]) -> StreamView:
    """``view``, or the stream as it is now when one of ``consumers`` delivered past its last
    message: a change planned (again, after a concurrent one) on records read after ``view`` was
    taken may find deliveries another process recorded of messages published meanwhile, and
    pending acks derived from a view without them would take them as acked (the floor jumping
    to the delivered position, a work queue dropping them)."""
    end = max((_end(c.state) for c in consumers), default=0)
    return view if end <= view.last else StreamView.of(engine)


def _end(st: ConsumerState) -> int:
    """The last seq a consumer's position or skip list reaches: what its pending acks span."""
    return max(st.delivered.stream_seq, st.resume, st.skipped_below)


def _settled(c: Consumer, st: ConsumerState, view: StreamView, rest: Pending) -> ConsumerState:
    """``st`` (of ``c``, with its new floor) with ``rest`` as its pending acks: derived from the
    index where that gives them back exactly, listed where it does not any more."""
    rest = rest.where(rest.seqs > st.ack_floor.stream_seq)
    still = set(rest.seqs.tolist())
    listed = [e for e in st.listed if e[0] in still]
    trial = replace(st, listed=listed, listed_to=st.listed_to if listed else 0)
    if view.pending(c.filters, trial).same(rest):
        return trial
    return replace(st, listed=rest.entries(), listed_to=st.delivered.stream_seq)


def _may_hold(c: Consumer, seqs: np.ndarray) -> bool:
    """Whether any of ``seqs`` can be among the consumer's pending acks: it acks, and one lies
    above its ack floor up to its delivered position (listed entries too lie there)."""
    st = c.state
    return c.config.ack_policy is not AckPolicy.NONE and bool(
        ((seqs > st.ack_floor.stream_seq) & (seqs <= st.delivered.stream_seq)).any()
    )


def _may_skip(c: Consumer, seqs: np.ndarray) -> bool:
    """Whether any of ``seqs`` can be an entry of the consumer's skip list not yet handed out."""
    st = c.state
    return bool(st.resume) and bool(((seqs > st.skipped_to) & (seqs <= st.resume)).any())


def _terminated(
    policy: AckPolicy, st: ConsumerState, pending: Pending, hit: np.ndarray, now: int
) -> tuple[Position, np.ndarray]:
    """A consumer's floor, and which pending entries stay, once the ``hit`` ones are acked one
    by one in stream order (``processTerm`` → ``processAckMsgLocked``). Explicit: the entry goes
    and the floor moves past it if it was the oldest (``moveAckFloor``). Ack-all: unless at or
    below the floor (then it stays pending), the floor moves to it and everything up to it goes."""
    floor = st.ack_floor
    left = np.ones(len(pending), dtype=bool)
    for i in np.flatnonzero(hit):
        sseq, dseq = int(pending.seqs[i]), int(pending.dseqs[i])
        if policy is not AckPolicy.EXPLICIT:
            if dseq > floor.consumer_seq and sseq > floor.stream_seq:
                floor = Position(dseq, sseq, now)
                left &= pending.seqs > sseq
            continue
        left[i] = False
        if not left.any():
            return Position(st.delivered.consumer_seq, st.delivered.stream_seq, now), left
        if dseq == floor.consumer_seq + 1:
            floor = Position(dseq, sseq, now)
            later = np.flatnonzero(left[i + 1 :])
            if len(later):
                j = i + 1 + int(later[0])
                floor = Position(int(pending.dseqs[j]) - 1, int(pending.seqs[j]) - 1, now)
    return floor, left


def _partition_unique(name: str, partitions: list[str], others: list[Consumer]) -> bool:
    """The server's ``partitionUnique`` over the other limitable consumers."""
    for part in partitions:
        for o in others:
            if o.name == name or not o.limitable:
                continue
            theirs = o.filters
            if not theirs or any(subjects_collide(part, f) for f in theirs):
                return False
    return True


def _update_error(old: ConsumerConfig, new: ConsumerConfig) -> APIError | None:
    """``checkNewConsumerConfig``: what an update may not change (500/10012 with the text)."""

    def fail(text: str) -> APIError:
        return api_error("JSConsumerCreateErrF", err=text)

    checks = [
        (old.deliver_policy != new.deliver_policy, "deliver policy can not be updated"),
        (old.mem_storage != new.mem_storage, "storage type can not be updated"),
        (old.direct != new.direct, "direct can not be updated"),
        (old.sourcing != new.sourcing, "sourcing can not be updated"),
        (old.opt_start_seq != new.opt_start_seq, "start sequence can not be updated"),
        (old.opt_start_time != new.opt_start_time, "start time can not be updated"),
        (old.ack_policy != new.ack_policy, "ack policy can not be updated"),
        (old.replay_policy != new.replay_policy, "replay policy can not be updated"),
        (old.idle_heartbeat != new.idle_heartbeat, "heart beats can not be updated"),
        (old.flow_control != new.flow_control, "flow control can not be updated"),
    ]
    for bad, text in checks:
        if bad:
            return fail(text)
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            return fail("can not update pull consumer to push based")
        if not new.deliver_subject:
            return fail("can not update push consumer to pull based")
    if old.max_waiting != new.max_waiting:
        return fail("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        return api_error("JSConsumerMaxDeliverBackoffErr")
    return None


def _with_dynamic_metadata(cfg: ConsumerConfig) -> ConsumerConfig:
    """``setDynamicConsumerMetadata``: responses carry the server version and API level,
    stored configs do not."""
    out = cfg.model_copy(deep=True)
    out.metadata = {**out.metadata, SERVER_VERSION_KEY: SERVER_VERSION, SERVER_LEVEL_KEY: str(API_LEVEL)}
    return out


def _named_direct_sourcing(cfg: ConsumerConfig, scfg: StreamConfig) -> ConsumerConfig:
    """``jsConsumerCreateRequest`` on a standalone server: a named direct sourcing consumer
    becomes a durable ``flow_control`` one of that name on an interest or work-queue stream
    (so it is acked, not removed on delivery), and elsewhere gets a random suffix (the
    source's name is stable)."""
    if scfg.retention is RetentionPolicy.LIMITS:
        return cfg.model_copy(update={"name": f"{cfg.name}-{_random_name()}"})
    return cfg.model_copy(update={
        "direct": False, "durable_name": cfg.name, "ack_policy": AckPolicy.FLOW_CONTROL,
        "ack_wait": 0, "max_deliver": 0, "inactive_threshold": 0,
    })


def _random_name() -> str:
    """An ephemeral's generated name (the server hashes a nuid to 8 characters)."""
    return "".join(secrets.choice(_NAME_CHARS) for _ in range(8))


__all__ = ["ConsumerState", "Consumers", "StreamView", "filters_of", "is_filtered", "pause_left", "select_starting_seq"]
