"""Run a job: the target stream made ready, then one Structured Streaming query per origin
(the mirror, or each source) and one for republish.

Each origin query is ``readStream.format("jetstream")`` on the origin (a lake stream, or a
server through the live source) into ``writeStream.format("jetstream").option("form", ...)`` on
the target, so every guarantee is the sink's and the engine's: the landing commit carries the
micro-batch's ``txn`` and the origin's mark, a replayed batch stores nothing twice, and a
durable origin is acked only after the commit.

Where a query starts, the first time (no checkpoint yet), is what the server would resume
from: a mirror at its last sequence + 1 (else the mirror's ``opt_start_seq`` /
``opt_start_time``), a source after its mark (``engine.ingest.sourced_seq``, the
``Nats-Stream-Source`` resume of ``startingSequenceForSources``), or without one where the
server's ``trySetupSourceConsumer`` starts it on that target (``_first_start_time``). Later the
checkpoint's offsets decide, and the marks make any overlap harmless. An origin deleted and created again
(another identity) is sourced from its start, under a checkpoint of its own. Several sources are several queries
committing into one stream: each origin's order is kept, interleaved with the others and with
local publishes through Delta's optimistic concurrency.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsspark.config import StreamSource
from jsspark.datasource.options import parse_bool, prefixed_storage_options
from jsspark.engine.ingest import sourced_seq
from jsspark.engine.sourcing import Origin, server_hash
from jsspark.errors import APIError
from jsspark.jobs.origins import (
    DURABLE_PREFIX,
    OriginFacts,
    choose_durable,
    consumer_name,
    delete_durables,
    lake_facts,
    origin_connection,
    owned_durables,
    seq_from_time,
    server_facts,
)
from jsspark.jobs.spec import Endpoint, JobError, JobSpec, load_job
from jsspark.live.options import LiveReadOptions
from jsspark.live.spill import is_remote

log = logging.getLogger("jsspark.jobs")


@dataclass
class OriginPlan:
    """One origin query: what it reads, from where, and how it lands."""

    kind: str  # "mirror" | "source"
    source: StreamSource
    endpoint: Endpoint
    facts: OriginFacts
    start_seq: int | None  # resume position when there is no checkpoint yet
    reader_options: dict[str, str] = field(default_factory=dict)
    start_time: str | None = None  # a source's first start by time, where the target decides it

    @property
    def origin(self) -> Origin:
        return Origin.of(self.source)

    @property
    def query_name(self) -> str:
        return f"{self.kind}-{self.source.name}-{server_hash(self.origin.iname)}"

    def checkpoint(self, root: str) -> str:
        """The query's checkpoint under the job's root. A source's is per origin identity: the
        offsets of an origin deleted and created again under the same name mean nothing for the
        new one, which (as on the server) is sourced from its start."""
        if self.kind == "source" and self.facts.identity:
            return f"{root}/{self.query_name}@{self.facts.identity}"
        return f"{root}/{self.query_name}"


class Job:
    """A running (or runnable) job; ``start`` returns the queries, ``stop`` stops them."""

    def __init__(self, spec: JobSpec, spark: Any = None) -> None:
        self.spec = spec
        self._spark = spark
        self.queries: list[Any] = []
        self.plans: list[OriginPlan] = []
        self._origin_facts: dict[str, OriginFacts] = {}

    @property
    def spark(self) -> Any:
        """The session the queries run on: the active one, the cluster's (a driver launched by
        spark-submit or a platform), else a new local one (``jobs.submit.session``)."""
        if self._spark is None:
            from jsspark.jobs.submit import session

            self._spark = session(f"jsspark-{self.spec.job_name}")
        return self._spark

    @property
    def lake(self) -> Any:
        import jsspark

        return jsspark.connect(str(self.spec.target.location), self.spec.target.storage_options)

    # -- preparing ---------------------------------------------------------------------------------
    def prepare(self) -> list[StreamSource]:
        """Create the target stream, or update it to the job's config (the server's update
        rules apply: a mirror cannot become a source, and so on). A store that cannot be read or
        written (delta-rs's ``OSError``: credentials, network, a bad URI) fails naming the lake.
        Returns the sources the stored config had and the job's has not."""
        try:
            return self._prepare()
        except OSError as e:
            raise JobError(f"cannot open the target lake {self.spec.target.location}: {e}") from e

    def _prepare(self) -> list[StreamSource]:
        lake, cfg = self.lake, self.spec.stream
        try:
            current = lake.stream_info(cfg.name).config
        except APIError as e:
            if e.err_code != 10059:  # stream not found
                raise
            lake.add_stream(cfg)
            return []
        names = {s.name for s in cfg.sources or ()}
        removed = [s for s in current.sources or () if s.name not in names]
        from jsspark.config import check_stream_config
        from jsspark.engine.lake import stream_lookup

        # as stored: defaults applied, and what comes from other streams (a mirror's mirror_direct),
        # looked up as ``add_stream`` looks them up
        if current.to_json() != check_stream_config(cfg, lookup=stream_lookup(lake.catalog.records())).to_json():
            lake.update_stream(cfg)
        return removed

    def probe(self) -> None:
        """Ask each origin about itself (a server's STREAM.INFO, an ``external`` origin's through
        its API prefix; a lake's stream info) before anything else, so an origin that cannot be
        reached or does not exist fails the job before its target is created or Spark starts.
        ``plan`` uses the answers."""
        for source in self.spec.origin_sources():
            self._facts(source)

    def _facts(self, source: StreamSource) -> OriginFacts:
        key = json.dumps(source.to_json(), sort_keys=True)
        if key not in self._origin_facts:
            endpoint = self.spec.origin(source.name)
            target, sources = self.spec.stream.name, self.spec.origin_sources()

            def choose(names: list[str]) -> tuple[str, tuple[str, ...]]:
                return choose_durable(target, source, sources, names)

            self._origin_facts[key] = (lake_facts(endpoint, source.name, choose) if endpoint.is_lake
                                       else server_facts(endpoint, source.name, choose,
                                                         origin_connection(endpoint, source)))
        return self._origin_facts[key]

    def retire(self, removed: list[StreamSource]) -> None:
        """Delete the job's durables no source reads any more, before any query binds one (a
        WorkQueue origin refuses a second durable whose filter overlaps), as the server's
        stream update deletes the sourcing consumers of sources it no longer has
        (``tryDeleteSourceConsumer``): those left on an origin the config reads (``stale``,
        found by ``probe``), and every one on the origin of a ``removed`` source (a source the
        target's stored config had and the job's has not), which would retain its messages
        for ever on an Interest or WorkQueue origin."""
        target = self.spec.stream.name
        for source in self.spec.origin_sources():
            facts = self._facts(source)
            if facts.stale:
                endpoint = self.spec.origin(source.name)
                log.info("job %s: deleting durables %s on %s (no source reads them)", self.spec.job_name,
                         ", ".join(facts.stale), source.name)
                delete_durables(endpoint, source.name, facts.stale, origin_connection(endpoint, source))
        kept = {s.name for s in self.spec.origin_sources()}
        for source in removed:
            if source.name in kept:
                continue
            if source.name not in self.spec.origins and "*" not in self.spec.origins:
                log.warning("job %s: source %s was removed; its durables on that origin (named %s%s_...) "
                            "are left: 'origins' no longer says where it lives", self.spec.job_name,
                            source.name, DURABLE_PREFIX, target)
                continue
            endpoint = self.spec.origin(source.name)
            try:
                if endpoint.is_lake:
                    facts = lake_facts(endpoint, source.name, lambda names: ("", tuple(owned_durables(target, names))))
                else:
                    facts = server_facts(endpoint, source.name, lambda names: ("", tuple(owned_durables(target, names))),
                                         origin_connection(endpoint, source))
                delete_durables(endpoint, source.name, facts.stale, origin_connection(endpoint, source))
            except (APIError, ConnectionError) as e:  # the origin may be gone with the source
                log.warning("job %s: cannot delete the durables of removed source %s: %s",
                            self.spec.job_name, source.name, e)

    def plan(self) -> list[OriginPlan]:
        """The origin queries, with where each resumes (read from the target, once)."""
        cfg = self.lake.stream_info(self.spec.stream.name).config
        plans = []
        if cfg.mirror is not None:
            plans.append(self._plan("mirror", cfg.mirror))
        for src in cfg.sources or ():
            plans.append(self._plan("source", src))
        self.plans = plans
        return plans

    def _plan(self, kind: str, source: StreamSource) -> OriginPlan:
        endpoint = self.spec.origin(source.name)
        facts = self._facts(source)
        durable = facts.durable_name or consumer_name(self.spec.stream.name, source, self.spec.origin_sources())
        since = None
        if kind == "mirror":
            state = self.lake.stream_info(self.spec.stream.name).state
            last = state.last_seq
            beyond = self._start_beyond(source, facts, state, endpoint)
            if not state.messages and beyond is not None and beyond - 1 > last:
                self.lake.purge(self.spec.stream.name, seq=beyond)
                last = beyond - 1
            resume = last + 1 if last else None
        else:
            mark = sourced_seq(self.lake, self.spec.stream.name, source, facts.identity)
            resume = mark + 1 if mark else None
            if not mark and not source.opt_start_seq:
                recreated = bool(facts.identity) and sourced_seq(self.lake, self.spec.stream.name, source) > 0
                since = self._first_start_time(source, recreated)
        plan = OriginPlan(kind, source, endpoint, facts, resume, start_time=since)
        plan.reader_options = (self._lake_reader(plan, durable) if endpoint.is_lake
                               else self._server_reader(plan, durable))
        return plan

    def _first_start_time(self, source: StreamSource, recreated: bool) -> str | None:
        """Where a source starts by time the first time (nothing of it in the target), as
        ``trySetupSourceConsumer`` decides from the target's state: an ``opt_start_time`` before
        the target's last message is raised to that message's time; without a start, a target
        whose ``first_seq`` is past 1 (what it held was purged) starts at that time too, unless
        the origin was deleted and created again. ``None``: the configured start, or all."""
        from jsspark.engine.api import rfc3339nano
        from jsspark.live.snapshot import rfc3339_ns

        state = self.lake.stream_info(self.spec.stream.name).state
        last = state.last_ts_ns
        if source.opt_start_time is not None:
            configured = source.opt_start_time.to_rfc3339nano()
            return rfc3339nano(last) if last and rfc3339_ns(configured) < last else None
        if state.first_seq > 1 and last and not recreated:
            return rfc3339nano(last)
        return None

    @staticmethod
    def _start_beyond(source: StreamSource, facts: OriginFacts, state: Any, endpoint: Endpoint) -> int | None:
        """Where the mirror's consumer starts when that can be past the origin messages its
        filter takes (``None`` otherwise: the first one landed gives the mirror its numbering).
        A mirror that never held anything starts at its ``opt_start_seq``, after the origin's
        last sequence when the origin holds nothing (purged, expired), or at its first message
        at or after ``opt_start_time`` (``seq_from_time``); one that did, after its own last
        sequence; and never below the origin's first message (``selectStartingSeqNo`` starts
        deliver-all there and moves an earlier start up to it). An empty mirror is then purged up to there
        (``setupMirrorConsumer``: ``state.Msgs == 0 && Delivered.Stream > state.LastSeq`` ->
        ``PurgeEx("", Delivered.Stream+1)``), so it shows the origin's numbering before any
        message comes, also when its filter takes none of the origin's messages."""
        if state.messages or state.first_seq:
            start = state.last_seq + 1
        else:
            start = int(source.opt_start_seq or 0)
            if not facts.messages:
                start = max(start, facts.last_seq + 1)
            elif source.opt_start_time is not None and not start:
                from jsspark.live.snapshot import rfc3339_ns

                at = source.opt_start_time.to_rfc3339nano()
                if rfc3339_ns(at) > facts.last_ts_ns:
                    start = facts.last_seq + 1
                else:  # within the origin's messages (GetSeqFromTime)
                    start = seq_from_time(endpoint, source.name, at, origin_connection(endpoint, source)) or 0
        start = max(start, facts.first_seq)
        return start if start > 1 else None

    @staticmethod
    def _start(plan: OriginPlan, names: tuple[str, str, str]) -> dict[str, str]:
        """Start options (policy, seq, time) under the reader's spelling ``names``."""
        policy, seq, at = names
        src = plan.source
        if plan.start_seq is not None:
            return {policy: "by_start_sequence", seq: str(plan.start_seq)}
        if src.opt_start_seq:
            return {policy: "by_start_sequence", seq: str(src.opt_start_seq)}
        if plan.start_time is not None:
            return {policy: "by_start_time", at: plan.start_time}
        if src.opt_start_time is not None:
            return {policy: "by_start_time", at: src.opt_start_time.to_rfc3339nano()}
        return {policy: "all"}

    def _lake_reader(self, plan: OriginPlan, durable: str) -> dict[str, str]:
        opts = {"stream": plan.source.name, "path": str(plan.endpoint.location)}
        opts.update(self._start(plan, ("deliver_policy", "opt_start_seq", "opt_start_time")))
        filters = plan.origin.filters()
        if filters:
            opts["filter_subjects"] = json.dumps(filters)
        if plan.facts.needs_acks:  # acked after each landing commit: the origin removes what landed
            # batches are bounded by the trigger options, not by the server's default of 1000 unacked
            opts.update({"durable_name": durable, "ack_policy": "explicit", "max_ack_pending": "-1"})
            existing = self._lake_durable(plan, durable)
            if existing is not None:
                opts.update(existing)
        opts.update(prefixed_storage_options(plan.endpoint.storage_options))
        opts.update(plan.endpoint.options)
        return opts

    @staticmethod
    def _lake_durable(plan: OriginPlan, durable: str) -> dict[str, str] | None:
        """A durable that exists already keeps its own start: ask for the same (a consumer's
        start cannot be updated), its position decides where delivery resumes."""
        import jsspark

        lake = jsspark.connect(str(plan.endpoint.location), plan.endpoint.storage_options)
        try:
            cfg = lake.consumer_info(plan.source.name, durable).config
        except APIError as e:
            if e.err_code != 10014:  # consumer not found: created on first start
                raise
            return None
        out = {"deliver_policy": getattr(cfg.deliver_policy, "value", str(cfg.deliver_policy))}
        if cfg.opt_start_seq:
            out["opt_start_seq"] = str(cfg.opt_start_seq)
        if cfg.opt_start_time is not None:
            out["opt_start_time"] = cfg.opt_start_time.to_rfc3339nano()
        return out

    def _server_reader(self, plan: OriginPlan, durable: str) -> dict[str, str]:
        src = plan.source
        opts = {**origin_connection(plan.endpoint, src), "stream": src.name}  # an external origin's prefixes
        if src.consumer is not None and src.consumer.name:  # bring-your-own durable (2.14)
            opts.update({"consumerMode": "user", "consumer": src.consumer.name,
                         "deliverSubject": src.consumer.deliver_subject})
        else:
            if plan.facts.needs_acks:
                opts.update({"consumerMode": "server", "consumer": durable})
            else:
                opts["consumerMode"] = "ordered"  # an ephemeral consumer: no name to give it
            existing = plan.facts.durable if plan.facts.needs_acks else None
            if existing is not None:
                opts["deliverPolicy"] = existing.get("deliver_policy", "all")
                if existing.get("opt_start_seq"):
                    opts["optStartSeq"] = str(existing["opt_start_seq"])
                if existing.get("opt_start_time"):
                    opts["optStartTime"] = str(existing["opt_start_time"])
            else:
                opts.update(self._start(plan, ("deliverPolicy", "optStartSeq", "optStartTime")))
            filters = plan.origin.filters()
            if len(filters) == 1:
                opts["filterSubject"] = filters[0]
            elif filters:
                opts["filterSubjects"] = ",".join(filters)
        # The landing commit reads the messages from the spill files on this host: the payloads
        # do not go through Spark's rows (an endpoint option spillReferences=false makes them).
        opts["spillReferences"] = "true"
        opts.update(plan.endpoint.options)
        given = {k.lower(): v for k, v in opts.items()}  # option names are case-insensitive
        if self._paced(plan):
            # a full batch (the durable's max_ack_pending: the server delivers no more until it is
            # acked; or maxBytesPerTrigger) goes at once; a partial one once per trigger interval (Kafka's
            # minOffsetsPerTrigger / maxTriggerDelay), so a slow trickle still makes few commits
            if "minmessagespertrigger" not in given:
                opts["minMessagesPerTrigger"] = given.get("maxackpending", str(LiveReadOptions.max_ack_pending))
            if "maxtriggerdelay" not in given:
                opts["maxTriggerDelay"] = self.spec.trigger
        spill = given.get("spilldir")
        if spill and is_remote(spill):
            # a spill on an object store is the target's store: the landing commit reads it
            # with the target's storage options, and so the reader writes it
            opts.update(prefixed_storage_options(self.spec.target.storage_options))
        return opts

    def _paced(self, plan: OriginPlan) -> bool:
        """A server origin under an interval trigger: its query triggers continuously and the
        live source paces the batches (``_server_reader``). With Spark's interval alone, a
        durable stalled at ``max_ack_pending`` would sit out the rest of every interval."""
        return not plan.endpoint.is_lake and bool(self.spec.interval())

    # -- running -----------------------------------------------------------------------------------
    def start(self) -> list[Any]:
        """Prepare the target and start every query; returns them (``StreamingQuery``)."""
        from jsspark.sink.lake_sink import landing_frame

        self.probe()
        self.retire(self.prepare())
        plans = self.plan()
        spark = self.spark
        trigger = self.spec.trigger_kwargs()
        root = self.spec.checkpoint_root
        for plan in plans:
            opts = dict(plan.reader_options)
            location = opts.pop("path", None)
            reader = spark.readStream.format("jetstream").options(**opts)
            df = reader.load(location) if location is not None else reader.load()
            if parse_bool("spillReferences", str(opts.get("spillReferences", "false"))):
                # numInputRows has counted every message; the sink needs only the references
                frame = df.where(df["spill"].isNotNull())
            else:
                frame = landing_frame(df)
            writer = (
                frame.writeStream.format("jetstream")
                .option("stream", self.spec.stream.name)
                .option("form", plan.kind)
                .option("origin", json.dumps(plan.source.to_json()))
                .options(**prefixed_storage_options(self.spec.target.storage_options))
                .option("checkpointLocation", plan.checkpoint(root))
                .queryName(f"{self.spec.job_name}:{plan.query_name}")
                .trigger(**({"processingTime": "0 seconds"} if self._paced(plan) else trigger))
            )
            if plan.facts.identity:
                writer = writer.option("originIdentity", plan.facts.identity)
            self.queries.append(writer.start(str(self.spec.target.location)))
            log.info("job %s: started %s from %s", self.spec.job_name, plan.query_name, _where(plan.endpoint))
        if self.spec.stream.republish is not None and self.spec.republish_to is not None:
            if "processingTime" not in trigger:
                # catch up and stop: republish what the origin queries landed, so wait for them
                for q in self.queries:
                    q.awaitTermination()
            self.queries.append(self._start_republish(trigger, root))
        return self.queries

    def _start_republish(self, trigger: dict[str, Any], root: str) -> Any:
        from jsspark.jobs.republish import start_republish

        dest = self.spec.republish_to
        assert dest is not None
        destination: dict[str, Any] = (
            {"location": dest.location, **({"stream": dest.stream} if dest.stream else {}),
             **({"storage_options": dest.storage_options} if dest.storage_options else {})}
            if dest.is_lake else {**dest.connection_options(), **dest.options}
        )
        return start_republish(
            self.spark,
            location=str(self.spec.target.location),
            stream=self.spec.stream.name,
            republish=None,
            destination=destination,
            checkpoint=f"{root}/republish",
            mode=dest.mode,
            trigger=trigger,
            storage_options=self.spec.target.storage_options,
            query_name=f"{self.spec.job_name}:republish",
        )

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for every query (``available_now``/``once`` jobs end by themselves); raise the
        first query's error. ``False`` if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for q in self.queries:
            # pyspark refuses a timeout <= 0 (Spark < 1 ms): at the deadline, ask for 1 ms
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            if left is None:
                q.awaitTermination()
            elif not q.awaitTermination(left):
                return False
        return True

    def stop(self) -> None:
        for q in self.queries:
            q.stop()

    def progress(self) -> list[dict[str, Any]]:
        """Each query's name, whether it runs, its last progress (rows/s, batch) and error."""
        out = []
        for q in self.queries:
            last = q.lastProgress or {}
            err = q.exception()
            out.append({
                "name": q.name,
                "active": q.isActive,
                "batch": last.get("batchId"),
                "rows": last.get("numInputRows", 0),
                "rate": last.get("processedRowsPerSecond", 0.0),
                "error": None if err is None else str(err),
            })
        return out


def _where(endpoint: Endpoint) -> str:
    """An endpoint for a log line: a server's URLs without their credentials."""
    from jsspark.datasource.redaction import redact_urls

    return f"lake {endpoint.location}" if endpoint.is_lake else f"server {redact_urls(endpoint.server_urls)}"


def run_job(job: str | Path | dict[str, Any] | JobSpec, spark: Any = None, *, trigger: str | None = None) -> Job:
    """Load a job (a file, a dict or a ``JobSpec``) and start it: the Python API notebooks use.
    ``trigger`` overrides the file's (e.g. ``"available_now"`` to catch up and stop)."""
    spec = job if isinstance(job, JobSpec) else load_job(job)
    if trigger is not None:
        try:
            spec = JobSpec.model_validate({**spec.model_dump(), "stream": spec.stream, "trigger": trigger})
        except ValueError as e:
            raise JobError(str(e)) from None
    running = Job(spec, spark)
    running.start()
    return running
