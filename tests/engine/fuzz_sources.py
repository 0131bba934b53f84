"""The ``sources`` mode of ``tests.engine.fuzz_differential``: a stream that mirrors or sources
one or two origins, compared with a server's once settled. A triage tool, not a test.

    python3 -m tests.engine.fuzz_differential --mode sources --seconds 300

Random origins (limits streams; rollups, TTLs, per-subject limits) take publishes (headers:
``Nats-Msg-Id``, ``Nats-Rollup``, ``Nats-TTL``, ``Nats-Expected-Stream``, others), deletes and
purges; then a target is created on both sides, a mirror (``filter_subject`` or
``subject_transforms``, ``opt_start_seq``/``opt_start_time``, its own transform and limits) or a
sourcing stream (one to three sources of one or two origins, each with a filter or transforms
and a start), and the origins go on, one step at a time. The server sources by itself; the
lake's side is what a job does on a lake origin, without Spark: ``Job.plan`` (where each query
starts: a mirror after its last sequence or at a start past the origin, a source after its mark),
the origin's messages from the start its reader's consumer would take (``Lake.start_sequence``),
then the landing commit (``land_batch``), after every step. The server's target is then asked
again, for a bounded time, until it stores what the lake does: messages (seq, subject, data,
headers, ``Nats-Stream-Source`` with the origin's identity token left out: each side's origin has
its own creation time), state, and the stream info's mirror or sources entries (but ``active``
and ``lag``).
Where several sources feed one stream, the server interleaves
them as they come: each source's messages are compared in order, and the state but for the seqs.
Now and then a sourcing stream gets another source by a config update (the job restarts; its
other queries go on from their checkpoints), or a target is mirrored or sourced again (a chain).

Not generated, because the server's answer depends on timing:

- an ``opt_start_time`` on one of several sources created together: the server raises it to the
  target's last message time (``trySetupSourceConsumer``) when another source's first messages
  landed before this source's consumer was set up; a job plans every query before any lands;
- a sourcing stream with several sources and limits, dedup or rollups (their interleaving decides;
  subject delete markers allow rollups);
- a sourcing stream with several sources and a ``first_seq`` past 1: 2.15.1 stores the messages
  of one of them only, and the ``seq`` of its source infos moves from entry to entry
  (an origin of two messages, a target with sources ``O`` and ``O`` filtered on ``o.>`` and
  ``first_seq: 2``; seeds 2002, 2027, 2090, 2107); a job sources them all;
- origin changes before the server set up its mirror consumer, which it delays (``active`` -1):
  its start follows the origin's first message then (a delete of the origin's head moves the
  empty filtered mirror's numbering); a run waits for the setup (``started``).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

import pyarrow.compute as pc

from jsspark.config import ConsumerConfig
from jsspark.engine import headers as H
from jsspark.engine.api import rfc3339nano
from jsspark.jobs.runner import Job
from jsspark.jobs.spec import load_job
from jsspark.live.landing import land_batch
from jsspark.subjects.vectorized import match_filter
from tests.engine import fuzz_differential as fuzz
from tests.engine.test_differential import Pair

ORIGIN_COLUMNS = ["seq", "ts_ns", "subject", "headers", "data"]


def sourced(backend: Any, name: str, grouped: bool) -> Any:
    """What a mirror or sourcing stream stores, as a run compares it: messages with the
    identity token of ``Nats-Stream-Source`` replaced by ``ID``, and the state; ``grouped``:
    each source's messages (subject, data, headers) in order, keyed by the header's origin,
    filters and destinations, and the state without seqs."""

    def norm(hdrs: list[tuple[str, str]] | None) -> list[tuple[str, str]] | None:
        if not hdrs:
            return hdrs
        out = []
        for k, v in hdrs:
            if k == H.STREAM_SOURCE and len(v.split(" ")) == 6:
                v = " ".join([*v.split(" ")[:5], "ID"])
            out.append((k, v))
        return out

    msgs = [(seq, subject, data, norm(hdrs)) for seq, subject, data, hdrs in backend.messages(name)]
    state = backend.state(name)
    # without lag: a job's comes from its reader's num_pending, which a run does not emulate
    # (the server's at times stays 1 after a source's or mirror's first message: timing)
    info = {k: [{f: v for f, v in e.items() if f != "lag"} for e in (es if isinstance(es, list) else [es])]
            for k, es in backend.replication(name).items()}
    if "sources" in info:  # the server lists them in its map's order
        info["sources"] = sorted(info["sources"], key=lambda e: json.dumps(e, sort_keys=True))
    if not grouped:
        return {"messages": msgs, "state": state, "info": info}
    groups: dict[str, list[Any]] = {}
    for _, subject, data, hdrs in msgs:
        value = dict(hdrs or []).get(H.STREAM_SOURCE, "")
        f = value.split(" ")
        groups.setdefault(" ".join(f[:1] + f[2:4]), []).append((subject, data, hdrs))
    return {"sources": groups, "state": {k: state[k] for k in ("messages", "bytes", "num_subjects")}, "info": info}


class SourcesScenario(fuzz.Scenario):
    """A ``sources`` run: ``run`` is the mode's entry point."""

    def __init__(self, pair: Pair, rnd: random.Random, location: str) -> None:
        super().__init__(pair, rnd)
        self.location = location
        self.origins: list[tuple[str, str, dict[str, Any]]] = []  # (name, prefix, config)
        self.queries: dict[str, list[Any]] = {}  # the lake job's, by name: [plan, filters, next origin seq]
        self.replan = True
        self.chain: SourcesScenario | None = None
        self.grouped = False

    def use(self, origin: tuple[str, str, dict[str, Any]]) -> None:
        self.name, self.prefix, self.config = origin

    def subject(self) -> str:
        return ".".join([self.prefix] + [self.rnd.choice("abc") for _ in range(self.rnd.choice((1, 1, 2)))])

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> None:
        r = self.rnd
        for _ in range(1 if r.random() < 0.6 else 2):
            limits: dict[str, Any] = {}
            for key, value in (("allow_rollup_hdrs", lambda: True), ("allow_msg_ttl", lambda: True),
                               ("max_msgs", lambda: r.randint(5, 15)), ("max_msgs_per_subject", lambda: r.randint(1, 3))):
                if r.random() < 0.25:
                    limits[key] = value()
            if not self.new_stream("limits", **limits):
                return
            self.origins.append((self.name, self.prefix, dict(self.config)))
        self.moments = [rfc3339nano(time.time_ns())]
        for _ in range(r.randint(0, 20)):
            self.origin_step()
            self.moments.append(rfc3339nano(time.time_ns()))
        self.target, cfg, self.grouped = self.target_config()
        self.step("target", cfg)
        self.target_cfg = cfg
        if "error" in self.pair.add_stream(cfg):
            return
        self.pair.streams.insert(0, self.target)
        self.started()
        self.sync()
        if not self.grouped and cfg.get("retention", "limits") == "limits" and r.random() < 0.3:
            self.chain_target()
        for _ in range(r.randint(0, 15)):
            if r.random() < 0.1 and "sources" in cfg and self.chain is None:
                self.add_source()
            else:
                self.origin_step(self.sync)
            self.sync()

    def chain_target(self) -> None:
        """A mirror or a source of the target (daisy-chained: a source stamps its own
        ``Nats-Stream-Source`` in place of the one the target's message had, a mirror keeps it),
        run as a second job after the target's at every sync."""
        chain = SourcesScenario(self.pair, self.rnd, self.location)
        chain.steps = self.steps
        chain.target = f"C{self.target}"
        origin = {"name": self.target}
        chain.target_cfg = {"name": chain.target, **({"mirror": origin} if self.rnd.random() < 0.5 else {"sources": [origin]})}
        self.step("chain", chain.target_cfg)
        if "error" in self.pair.add_stream(chain.target_cfg):
            return
        self.pair.streams.insert(0, chain.target)
        chain.started()
        self.chain = chain
        chain.sync()

    def add_source(self) -> None:
        """Another source on the target by a config update, its first start decided by what the
        target holds then (the job restarts: its other queries go on from their checkpoints)."""
        r = self.rnd
        cfg = self.target_cfg
        if len(cfg["sources"]) >= 3 or any(k in cfg for k in ("max_msgs", "max_msgs_per_subject", "max_bytes",
                                                               "duplicate_window", "allow_rollup_hdrs", "first_seq",
                                                               "subject_delete_marker_ttl")):
            return  # several feeds: no limit, dedup or rollup whose outcome their interleaving decides
        cfg = {**cfg, "sources": [*cfg["sources"], self.source(r.choice(self.origins))]}
        self.step("update", cfg)
        if "error" in self.pair.update_stream(cfg):
            return
        self.target_cfg, self.grouped, self.replan = cfg, True, True
        self.started()

    def origin_step(self, sync: Callable[[], None] = lambda: None) -> None:
        """One change on an origin, ``sync`` after each message: an origin whose limits or
        rollups remove it later would otherwise lose it before the lake's pass, where the server
        sourced it as it came."""
        r = self.rnd
        self.use(r.choice(self.origins))
        op = r.choices(["pub", "pubs", "del", "purge"], [6, 2, 1, 0.6])[0]
        if op == "pub":
            self.publish(self.src_headers())
        elif op == "pubs":
            for _ in range(r.randint(2, 6)):
                self.publish(self.src_headers() if r.random() < 0.5 else None)
                sync()
            return
        elif op == "del":
            self.delete()
        else:
            self.purge()

    def src_headers(self) -> list[tuple[str, str]] | None:
        r = self.rnd
        kinds: dict[str, Callable[[], str]] = {
            "X-K": lambda: r.choice(["v", "w w", ""]),
            "Nats-Msg-Id": lambda: f"id{r.randint(0, 5)}",
            "Nats-Expected-Stream": lambda: self.name,
        }
        if self.config.get("allow_rollup_hdrs"):
            kinds["Nats-Rollup"] = lambda: r.choice(["sub", "all"])
        if self.config.get("allow_msg_ttl"):
            kinds["Nats-TTL"] = lambda: r.choice(["1h", "never", "90m"])
        names = r.sample(sorted(kinds), r.randint(0, 2))
        return [(n, kinds[n]()) for n in names] or None

    # -- the target -----------------------------------------------------------------------------
    def source(self, origin: tuple[str, str, dict[str, Any]], start_time: bool = True) -> dict[str, Any]:
        """A mirror's or source's config on ``origin``: a filter or transforms, and a start
        (``start_time``: possibly an ``opt_start_time``)."""
        r = self.rnd
        name, p, _ = origin
        src: dict[str, Any] = {"name": name}
        pick = r.random()
        if pick < 0.3:
            src["filter_subject"] = r.choice([f"{p}.a", f"{p}.*", f"{p}.a.>", f"{p}.>", f"{p}.*.b"])
        elif pick < 0.5:
            src["subject_transforms"] = [
                r.choice([
                    {"src": f"{p}.*", "dest": "x.{{wildcard(1)}}"}, {"src": f"{p}.a.>", "dest": "y.>"},
                    {"src": f"{p}.b", "dest": ""}, {"src": f"{p}.*.*", "dest": "z.{{wildcard(2)}}.{{wildcard(1)}}"},
                    {"src": f"{p}.c", "dest": f"{p}.cc"},
                ])
                for _ in range(r.randint(1, 2))
            ]
        last = self.pair.lake.state(name)["last_seq"]
        if r.random() < 0.25:
            src["opt_start_seq"] = r.randint(1, last + 3)
        elif r.random() < 0.2 and start_time:
            src["opt_start_time"] = r.choice(self.moments)
        return src

    def target_config(self) -> tuple[str, dict[str, Any], bool]:
        r = self.rnd
        name = f"T{self.origins[0][0]}"
        cfg: dict[str, Any] = {"name": name}
        grouped = False
        if len(self.origins) == 1 and r.random() < 0.45:
            cfg["mirror"] = self.source(self.origins[0])
        else:
            n = r.randint(1, 3)
            # a source's opt_start_time is raised to the target's last message time: where another
            # source's first messages land before it starts, on the server only (a race)
            cfg["sources"] = [self.source(r.choice(self.origins), n == 1) for _ in range(n)]
            grouped = n > 1
            if r.random() < 0.3:
                cfg["subjects"] = [f"{name.lower()}.>"]
        if not grouped:  # one feed: its order decides what limits and dedup keep
            for key, value in (("max_msgs", lambda: r.randint(2, 10)), ("max_msgs_per_subject", lambda: r.randint(1, 3)),
                               ("max_bytes", lambda: r.randint(200, 700)), ("allow_rollup_hdrs", lambda: True),
                               ("duplicate_window", lambda: 60_000_000_000)):
                if r.random() < 0.2 and not (key == "duplicate_window" and "mirror" in cfg):
                    cfg[key] = value()
        if r.random() < 0.2:
            cfg["allow_msg_ttl"] = True
            if r.random() < 0.4 and "sources" in cfg and not grouped:  # sourced TTLs shorter than the markers' are raised to theirs
                cfg["subject_delete_marker_ttl"] = r.choice([60 * 10**9, 3 * 3600 * 10**9])
                cfg["max_age"] = 24 * 3600 * 10**9
        if r.random() < 0.15:  # an interest target with no consumers stores nothing (its seqs go on)
            cfg["retention"] = r.choice(["interest", "workqueue"])
        if r.random() < 0.1 and "sources" in cfg and not grouped:
            cfg["first_seq"] = r.randint(2, 20)
        if r.random() < 0.15:
            cfg["subject_transform"] = r.choice([{"src": "x.>", "dest": "xx.>"},
                                                 {"src": f"{self.origins[0][1]}.>", "dest": "o.>"}])
        return name, cfg, grouped

    # -- settling -------------------------------------------------------------------------------
    def started(self, timeout: float = 10) -> None:
        """Wait (bounded) until the server set up every mirror or source consumer (``active`` is
        -1 until then: it delays a mirror's), so the origin steps come after, as on the lake."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.pair.server._req(f"$JS.API.STREAM.INFO.{self.target}")
            entries = [info["mirror"]] if info.get("mirror") else info.get("sources") or []
            if all(e.get("active", -1) >= 0 for e in entries):
                return
            time.sleep(0.05)  # polling the server's setup, bounded by the deadline
        raise AssertionError(f"{self.target}: the server set up no consumer for every origin in {timeout}s")

    def sync(self) -> None:
        """The lake's job pass, then both targets compared once the server's caught up."""
        self.step("sync")
        self.lake_pass()
        self.pair.settled("sourced", self.target, self.grouped, timeout=5)
        if self.chain is not None:
            self.chain.sync()

    def lake_pass(self) -> None:
        """What a running job with lake origins does, without Spark: its plan at the first pass
        (where each query starts), then, at every pass, the origin messages its reader delivers
        from where the last pass ended (its checkpoint), in one landing commit per query."""
        lake = self.pair.lake.lake
        if self.replan:  # the job (re)started: a query with no checkpoint yet starts where its plan says
            self.replan = False
            job = Job(load_job({"stream": self.target_cfg, "target": {"location": self.location},
                                "origins": {"*": {"location": self.location}}, "trigger": "available_now"}))
            job.probe()
            job.retire(job.prepare())
            for plan in job.plan():
                if plan.query_name in self.queries:
                    continue
                opts = plan.reader_options
                consumer: dict[str, Any] = {"deliver_policy": opts["deliver_policy"]}
                for key in ("opt_start_seq", "opt_start_time"):
                    if key in opts:
                        consumer[key] = int(opts[key]) if key == "opt_start_seq" else opts[key]
                filters = json.loads(opts["filter_subjects"]) if "filter_subjects" in opts else []
                if filters:
                    consumer["filter_subjects"] = filters
                start, _ = lake.start_sequence(plan.source.name, ConsumerConfig.from_json(consumer))
                self.queries[plan.query_name] = [plan, filters, start]
        for query in self.queries.values():
            plan, filters, start = query
            rows = lake.stream(plan.source.name).read(columns=ORIGIN_COLUMNS).sort_by("seq")
            rows = rows.filter(pc.greater_equal(rows["seq"], start))
            if filters and rows.num_rows:
                rows = rows.filter(match_filter(rows["subject"], filters))
            if not rows.num_rows:
                continue
            query[2] = int(rows["seq"][-1].as_py()) + 1
            land_batch(lake, self.target, rows.combine_chunks(), form=plan.kind, origin=plan.source.to_json(),
                       identity=plan.facts.identity)


class _Sourced:
    def sourced(self, name: str, grouped: bool) -> Any:
        return sourced(self, name, grouped)


class Server(_Sourced, fuzz.Server):
    pass


class Lake(_Sourced, fuzz.Lake):
    pass
