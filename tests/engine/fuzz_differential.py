"""Randomized differential runs: the same random scenario on a real nats-server and on a lake,
compared after every step. A triage tool, not a test (pytest does not collect it): a
difference is printed with its seed and steps, to be read against the server's source; a
difference that is the lake's fault becomes a differential test in this folder.

    python3 -m tests.engine.fuzz_differential --mode stream --seconds 300
    python3 -m tests.engine.fuzz_differential --mode consumers --seed 4035 --one   # replay one
    python3 -m tests.engine.fuzz_differential --mode directget --seconds 300
    python3 -m tests.engine.fuzz_differential --mode sources --seconds 300   # tests/engine/fuzz_sources.py

``stream``: publishes (with ``Nats-Msg-Id``, ``Nats-Rollup``, ``Nats-TTL`` and the expected
headers), deletes and purges on streams with random limits, discard policies, first
sequences and subject transforms; the publish answers, the state and the stored messages must be equal.
``consumers``: durable pull consumers (created, updated, pulled, acked in order as a lake
reader acks, reset, deleted) on limits, interest and work-queue streams, with every deliver
policy but ``last_per_subject`` (``by_start_time`` at a moment between two steps) and some of
the rest of their config (``Scenario._options``); their infos and the stream state must be equal.
``directget``: ``allow_direct`` streams of one- to three-token subjects (``p.>`` or ``p.*``,
``p.*.*``, ...; random limits, ``first_seq``, long TTLs, or short ones that expire between
rounds) take rounds of publishes (some with headers, rollups), deletes and purges; once the state is
settled, every reply to random direct gets must be equal (status, headers such as
``Nats-Num-Pending``/``Nats-Last-Sequence``/``Nats-UpTo-Sequence``, data, the EOB): by seq,
``last_by_subj``, ``next_by_subj`` (literal and wildcard filters, with and without ``seq``),
batches (``batch``, ``max_bytes``, ``no_hdr``), ``start_time`` at moments between steps,
``multi_last`` with ``seq``, ``up_to_seq``, ``up_to_time``, and a few with conflicting fields.
``sources``: a mirror or sourcing stream of one or two origins, see ``tests/engine/fuzz_sources.py``.

Not generated, because a lake deliberately does not follow it: ``storage: memory`` (a lake keeps
the setting but stores as the file store does, ``ConfigIgnoredWarning``). The server's memory
store answers some requests its own way: a delete of a missing message is ``10043 sequence N
not found`` (the file store's ``10057 stream store EOF`` / ``no message found``), a
``multi_last`` with ``up_to_seq`` past the last sequence finds the messages up to the end (the
file store ``404 No Results``), and its ``bytes`` differ.

What a consumers run does not compare, because the server answers it in ways the lake does not
follow (each is a known divergence, see the tests named):

- how far a pull scanned past a filtered consumer's last delivery, which the server shows as
  its delivered and ack floor stream seqs (compared: the consumer seqs only);
  ``test_explicit_ack_floor_moves_below_the_next_pending_delivery``. A reset or an update
  that changes the filter keeps that position, which then shows in ``num_pending``
  (``test_a_filter_changed_after_a_pull_scanned_past_a_message_skips_it_on_the_server``;
  still reported);
- ``last_per_subject`` consumers (the server's skip lists; not generated);
- an update that removes every filter (``test_an_update_that_removes_every_filter_counts_what_comes_after``;
  not generated).

Known server answers a run still reports: ``num_pending`` counted by the server's incremental
counter where it over-counts (a start sequence beyond the last message); a purge that leaves a
consumer nothing pending, which sets its floors from where its last pull scanned (``consumer.purge``:
``o.sseq - 1``; an ack-none consumer or an AckAll one, seed 91034); acks of messages a removal took while
pending, whose order the server does not fix (``test_consumer_removals._settle_racing``); an
AckAll consumer's ``num_ack_pending`` after a purge narrower than its filter, which keeps older
deliveries pending below the floor it moved (``test_purge_moves_consumers_like_the_server``); the
file store's ``first_seq`` after a purge up to a deleted tail
(``test_a_purge_up_to_a_deleted_tail_moves_first_seq_past_the_last``).
"""

from __future__ import annotations

import argparse
import itertools
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jsspark.engine.api import rfc3339nano
from jsspark.engine.lake import connect
from jsspark.nats_server import NatsServer
from tests.engine.test_differential import Pair
from tests.engine.test_direct_get_differential import assert_same_replies
from tests.engine.test_update_stream import UpdatingLake, UpdatingServer

LETTERS = "abcde"
_names = itertools.count()


def _compared(info: dict[str, Any]) -> dict[str, Any]:
    """A consumer info as a run compares it: a filtered consumer's stream seqs left out."""
    cfg = info.get("config") or {}
    if not (cfg.get("filter_subject") or cfg.get("filter_subjects")):
        return info
    info = dict(info)
    for key in ("delivered", "ack_floor"):
        if key in info:
            info[key] = {"consumer_seq": info[key]["consumer_seq"]}
    info.pop("reset_seq", None)
    return info


class _Compared:
    """A backend whose consumer answers are compared as ``_compared`` says (mixed in first)."""

    def consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        return _compared(super().consumer_info(stream, name))  # type: ignore[misc]

    def consumer_create(self, stream: str, cfg: dict[str, Any], action: str | None = None) -> dict[str, Any]:
        return _compared(super().consumer_create(stream, cfg, action))  # type: ignore[misc]

    def consumer_reset(self, stream: str, name: str, seq: int | None = None) -> dict[str, Any]:
        return _compared(super().consumer_reset(stream, name, seq))  # type: ignore[misc]


class Server(_Compared, UpdatingServer):
    """The server side; a pull it never answers is reported as such, not raised."""

    def fetch(self, stream: str, name: str, batch: int, expires: float | None = None) -> Any:
        try:
            return super().fetch(stream, name, batch, expires)
        except TimeoutError:
            return "no answer to the pull"


class Lake(_Compared, UpdatingLake):
    """The lake side, its consumer answers compared as the server's are."""


class Scenario:
    """One random scenario on a new stream of ``pair``; ``steps`` logs what it did."""

    def __init__(self, pair: Pair, rnd: random.Random) -> None:
        self.pair, self.rnd, self.steps = pair, rnd, []  # type: list[tuple[Any, ...]]

    deep = False  # subjects of one to three tokens under the prefix (directget runs)

    def subject(self) -> str:
        if self.deep:
            return ".".join([self.prefix] + [self.rnd.choice(LETTERS[:3]) for _ in range(self.rnd.choice((1, 1, 2, 3)))])
        return f"{self.prefix}.{self.rnd.choice(LETTERS)}"

    def step(self, *what: Any) -> None:
        self.steps.append(what)

    def new_stream(self, retention: str, transform: tuple[str, str] | None = None, subjects: tuple[str, ...] = ("{p}.>",),
                   **limits: Any) -> bool:
        """Create the stream (``transform``: its subject transform's source and destination,
        ``subjects`` its subjects, with ``{p}`` for the subject prefix); False where both refuse
        the config (with the same error)."""
        self.name = f"F{next(_names)}"
        self.prefix = self.name.lower()
        cfg = {"name": self.name, "subjects": [x.format(p=self.prefix) for x in subjects], "retention": retention,
               **limits}
        if transform:
            cfg["subject_transform"] = {"src": transform[0].format(p=self.prefix),
                                        "dest": transform[1].format(p=self.prefix)}
        self.config = cfg
        self.step("stream", cfg)
        if "error" in self.pair.add_stream(cfg):
            return False
        self.pair.streams.append(self.name)
        return True

    def publish(self, headers: list[tuple[str, str]] | None = None) -> None:
        subject = self.subject()
        self.step("pub", subject, headers)
        self.pair.publish(subject, b"x" * self.rnd.randint(0, 6), headers=headers)

    def publish_run(self) -> None:
        for _ in range(self.rnd.randint(2, 8)):
            self.publish()

    def delete(self) -> None:
        seq = self.rnd.randint(1, self.pair.lake.state(self.name)["last_seq"] + 1)
        self.step("del", seq)
        self.pair.delete_msg(self.name, seq)

    def purge(self) -> None:
        r = self.rnd
        req = r.choice([{}, {"subject": self.subject()}, {"seq": r.randint(1, 20)}, {"keep": r.randint(0, 3)},
                        {"subject": self.subject(), "keep": r.randint(0, 2)},
                        {"subject": self.subject(), "seq": r.randint(1, 20)}])
        self.step("purge", req)
        self.pair.purge(self.name, **req)

    # -- stream runs ----------------------------------------------------------------------------
    def run_stream(self) -> None:
        r = self.rnd
        limits: dict[str, Any] = {}
        for key, value in (("max_msgs", lambda: r.randint(2, 10)), ("max_bytes", lambda: r.randint(150, 600)),
                           ("max_msgs_per_subject", lambda: r.randint(1, 3)),
                           ("max_msg_size", lambda: r.randint(2, 8)), ("duplicate_window", lambda: 60_000_000_000)):
            if r.random() < 0.3:
                limits[key] = value()
        if r.random() < 0.4:
            limits["allow_rollup_hdrs"] = True
        if r.random() < 0.5:
            limits["allow_direct"] = True
        if r.random() < 0.3:
            limits["discard"] = "new"
            if limits.get("max_msgs_per_subject") and r.random() < 0.5:
                limits["discard_new_per_subject"] = True
        for key in ("deny_delete", "deny_purge"):
            if r.random() < 0.1:
                limits[key] = True
        if r.random() < 0.3:
            limits["allow_msg_ttl"] = True
        if r.random() < 0.15:
            limits["first_seq"] = r.randint(1, 40)
        transform = None
        if r.random() < 0.2:  # applied on ingest, before every limit and header rule
            transform = r.choice([("{p}.a", "{p}.b"), ("{p}.*", "{p}.{{{{partition(2,1)}}}}"), ("{p}.>", "{p}.t.>")])
        if not self.new_stream("limits", transform, **limits):
            return
        ops: dict[str, tuple[float, Callable[[], None]]] = {  # name: (weight, step), in draw order
            "pub": (8, self.publish), "hdr": (4, lambda: self.publish(self._headers())), "del": (1, self.delete),
            "purge": (1, self.purge), "get": (2, self.get), "update": (0.5, lambda: self.update(limits)),
            "direct": (2 if limits.get("allow_direct") else 0, self.direct_get),
        }
        for _ in range(r.randint(20, 60)):
            ops[r.choices(list(ops), [w for w, _ in ops.values()])[0]][1]()
            self.pair.state(self.name)
        self.pair.messages(self.name)

    def get(self) -> None:
        """``STREAM.MSG.GET`` by seq, last by subject or next by subject (wildcards too)."""
        r = self.rnd
        last = self.pair.lake.state(self.name)["last_seq"]
        subject = r.choice([self.subject(), f"{self.prefix}.*", None])
        seq = r.randint(0, last + 1) if subject is None or r.random() < 0.5 else None
        nxt = subject is not None and seq is not None
        self.step("get", seq, subject, nxt)
        self.pair.msg_get(self.name, seq=seq, subject=subject, next=nxt)

    def direct_get(self) -> None:
        """``DIRECT.GET`` in its forms: by seq, last/next by subject, batches, multi last."""
        r = self.rnd
        last = self.pair.lake.state(self.name)["last_seq"]
        seq, wild = r.randint(0, last + 1), f"{self.prefix}.*"
        req = r.choice([
            {"seq": seq}, {"last_by_subj": self.subject()}, {"next_by_subj": r.choice([self.subject(), wild]), "seq": seq},
            {"batch": r.randint(1, 4), "seq": seq}, {"batch": r.randint(1, 4), "next_by_subj": wild},
            {"multi_last": [self.subject(), wild]}, {"multi_last": [wild], "up_to_seq": seq},
        ])
        if "batch" in req and r.random() < 0.3:
            req["max_bytes"] = r.randint(1, 200)
        self.step("direct get", req)
        assert_same_replies(self.pair, self.name, req)

    def update(self, limits: dict[str, Any]) -> None:
        """Lower or raise a limit (a lowered one applies at once)."""
        r = self.rnd
        key = r.choice(["max_msgs", "max_msgs_per_subject", "max_bytes"])
        limits[key] = {"max_msgs": r.randint(1, 12), "max_msgs_per_subject": r.randint(1, 4),
                       "max_bytes": r.randint(100, 800)}[key]
        cfg = {**self.config, **limits}
        self.step("update", cfg)
        self.pair.update_stream(cfg)

    def _headers(self) -> list[tuple[str, str]]:
        """One or two headers of different names (the server backend sends them as a dict)."""
        r = self.rnd
        last = self.pair.lake.state(self.name)["last_seq"]
        kinds = {
            "Nats-Msg-Id": lambda: f"id{r.randint(0, 6)}",
            "Nats-Rollup": lambda: r.choice(["sub", "all"]),
            "Nats-Expected-Last-Sequence": lambda: str(r.choice([last, last - 1, 0])),
            "Nats-Expected-Last-Subject-Sequence": lambda: str(r.randint(0, max(last, 1))),
            "Nats-Expected-Last-Msg-Id": lambda: f"id{r.randint(0, 6)}",
            "Nats-Expected-Stream": lambda: r.choice([self.name, "OTHER"]),
            # TTLs long enough that nothing expires during a run; some are not valid TTLs
            "Nats-TTL": lambda: r.choice(["1h", "90m", "7200", "never", "-1", "0", "-2", "soon", "1h30x"]),
        }
        headers = [(name, kinds[name]()) for name in r.sample(sorted(kinds), r.randint(1, 2))]
        if any(name == "Nats-Expected-Last-Subject-Sequence" for name, _ in headers) and r.random() < 0.5:
            headers.append(("Nats-Expected-Last-Subject-Sequence-Subject", r.choice([self.subject(), f"{self.prefix}.*"])))
        return headers

    # -- direct get runs ------------------------------------------------------------------------
    def run_directget(self) -> None:
        """Rounds of changes (publishes with headers and TTLs, deletes, purges), the state
        settled (short TTLs expired on both: the lake's ``enforce_limits`` after they passed),
        then random direct gets, every reply compared."""
        r = self.rnd
        self.deep = True
        limits: dict[str, Any] = {"allow_direct": True}
        self.short_ttl = r.random() < 0.3  # messages expiring during the run: no limit races them
        if self.short_ttl:
            limits["allow_msg_ttl"] = True
        else:
            for key, value in (("max_msgs", lambda: r.randint(3, 15)), ("max_bytes", lambda: r.randint(200, 900)),
                               ("max_msgs_per_subject", lambda: r.randint(1, 3))):
                if r.random() < 0.25:
                    limits[key] = value()
            if r.random() < 0.2:
                limits["discard"] = "new"
            if r.random() < 0.3:
                limits["allow_msg_ttl"] = True
        if r.random() < 0.3:  # rollups reshape each subject's last message
            limits["allow_rollup_hdrs"] = True
        if r.random() < 0.15:
            limits["first_seq"] = r.randint(1, 30)
        subjects = r.choice([("{p}.>",), ("{p}.*", "{p}.*.*", "{p}.*.*.*")])
        if not self.new_stream("limits", None, subjects, **limits):
            return
        self.moments = [rfc3339nano(time.time_ns())]
        self.expiring = 0.0  # when the last short TTL passes
        ops: dict[str, tuple[float, Callable[[], None]]] = {
            "pub": (6, self.dg_publish), "pubs": (2, lambda: [self.dg_publish() for _ in range(r.randint(2, 6))]),
            "del": (1, self.delete), "dels": (0.5, lambda: [self.delete() for _ in range(r.randint(2, 5))]),
            "purge": (0.6, self.purge),
        }
        for _ in range(r.randint(2, 5)):
            for _ in range(r.randint(2, 12)):
                ops[r.choices(list(ops), [w for w, _ in ops.values()])[0]][1]()
                self.moments.append(rfc3339nano(time.time_ns()))
            if self.expiring:
                time.sleep(max(0.0, self.expiring - time.monotonic()) + 0.3)  # let the short TTLs pass
                self.expiring = 0.0
                self.step("expire")
                self.pair.lake.lake.enforce_limits(self.name)
            self.pair.settled("state", self.name, timeout=5)
            self.moments.append(rfc3339nano(time.time_ns()))
            for _ in range(r.randint(5, 25)):
                self.dg_request()
        self.pair.settled("messages", self.name, timeout=2)

    def dg_publish(self) -> None:
        r = self.rnd
        headers = []
        if r.random() < 0.3:
            headers.append(("X-K", "v" * r.randint(0, 9)))
        if self.config.get("allow_msg_ttl") and r.random() < 0.3:
            headers.append(("Nats-TTL", "1s" if self.short_ttl else "1h"))
            if self.short_ttl:
                self.expiring = time.monotonic() + 1
        if self.config.get("allow_rollup_hdrs") and r.random() < 0.1:
            headers.append(("Nats-Rollup", r.choice(["sub", "sub", "all"])))
        subject = self.subject()
        self.step("pub", subject, headers)
        self.pair.publish(subject, b"d" * r.randint(0, 40), headers=headers or None)

    def dg_filter(self) -> str:
        p = self.prefix
        return self.rnd.choice([self.subject(), self.subject(), f"{p}.*", f"{p}.*.*", f"{p}.a.>", f"{p}.>",
                                f"{p}.*.b", f"{p}.*.>", ">", f"{p}.zz"])

    def dg_request(self) -> None:
        """One direct get in any of its forms (a few with conflicting fields), compared."""
        r = self.rnd
        last = self.pair.lake.state(self.name)["last_seq"]

        def seq() -> int:
            return r.randint(0, last + 2)

        def moment() -> str:
            return r.choice(self.moments)

        def batch() -> int:
            return r.choice([1, 2, 3, 5, 50])

        f = self.dg_filter
        req = r.choice([
            lambda: {"seq": seq()}, lambda: {"last_by_subj": f()}, lambda: {"next_by_subj": f()},
            lambda: {"next_by_subj": f(), "seq": seq()}, lambda: {"seq": seq(), "batch": batch()},
            lambda: {"next_by_subj": f(), "seq": seq(), "batch": batch()}, lambda: {"next_by_subj": f(), "batch": batch()},
            lambda: {"start_time": moment()}, lambda: {"start_time": moment(), "batch": batch()},
            lambda: {"start_time": moment(), "next_by_subj": f()},
            lambda: {"start_time": moment(), "next_by_subj": f(), "batch": batch()},
            lambda: {"multi_last": [f() for _ in range(r.randint(1, 3))]},
            lambda: {"multi_last": [f() for _ in range(r.randint(1, 3))], "up_to_seq": seq()},
            lambda: {"multi_last": [f() for _ in range(r.randint(1, 3))], "up_to_time": moment()},
            lambda: {"multi_last": [f()], "seq": seq(), "batch": batch()},
            lambda: {"multi_last": [f()], "start_time": moment()},
        ])()
        if r.random() < 0.3:
            req["max_bytes"] = r.randint(1, 200)
        if r.random() < 0.15:
            req["no_hdr"] = True
        if r.random() < 0.05:  # a field that conflicts with some forms
            extra = r.choice([{"last_by_subj": f()}, {"seq": seq()}, {"up_to_seq": seq()}, {"start_time": moment()}])
            req.update(extra)
        self.step("direct get", req)
        assert_same_replies(self.pair, self.name, req)

    # -- consumer runs --------------------------------------------------------------------------
    def run_consumers(self) -> None:
        r = self.rnd
        limits: dict[str, Any] = {}
        if r.random() < 0.3:
            limits["max_msgs"] = r.randint(3, 12)
        if r.random() < 0.3:
            limits["max_msgs_per_subject"] = r.randint(1, 4)
        if r.random() < 0.2:
            limits["discard"] = "new"
        if not self.new_stream(r.choice(["limits", "limits", "interest", "workqueue"]), **limits):
            return
        self.consumers: dict[str, dict[str, Any]] = {}
        self.delivered: dict[str, list[tuple[int, int]]] = {}
        # moments between steps, for by_start_time: both sides stamp messages with this
        # machine's clock, so a moment taken after a step divides their messages alike
        self.moments = [rfc3339nano(time.time_ns())]
        stream_ops: dict[str, Callable[[], None]] = {
            "pub": lambda: self.publish([("Nats-Msg-Id", f"id{r.randint(0, 8)}")] if r.random() < 0.15 else None),
            "pubs": self.publish_run,
            "del": self.delete, "purge": self.purge,
        }
        for _ in range(r.randint(20, 60)):
            op = r.choices(["pub", "pubs", "del", "purge", "create", "fetch", "ack", "delete", "reset"],
                           [6, 2, 1, 1, 2, 4, 4, 0.3, 0.5])[0]
            if op == "create" or (not self.consumers and op in ("fetch", "ack", "delete", "reset")):
                self.create()
            elif op in stream_ops:
                stream_ops[op]()
            else:
                name = r.choice(list(self.consumers))
                {"fetch": self.fetch, "ack": self.ack, "delete": self.delete_consumer, "reset": self.reset}[op](name)
            for name in self.consumers:
                self.pair.settled("consumer_info", self.name, name, timeout=2)
            self.pair.settled("state", self.name, timeout=2)
            self.moments.append(rfc3339nano(time.time_ns()))
        self.pair.settled("messages", self.name, timeout=2)

    def create(self) -> None:
        r = self.rnd
        name = f"c{r.randint(0, 3)}"
        cfg: dict[str, Any] = {"durable_name": name, "ack_policy": r.choice(["explicit", "explicit", "all", "none"])}
        pick = r.random()
        if pick < 0.3:
            cfg["filter_subject"] = self.subject()
        elif pick < 0.4:
            cfg["filter_subjects"] = sorted({self.subject(), self.subject()})
        elif pick < 0.5:
            cfg["filter_subject"] = f"{self.prefix}.>"
        cfg["deliver_policy"] = r.choice(["all", "all", "last", "new", "by_start_sequence", "by_start_time"])
        if cfg["deliver_policy"] == "by_start_sequence":
            cfg["opt_start_seq"] = r.randint(1, 10)
        elif cfg["deliver_policy"] == "by_start_time":
            cfg["opt_start_time"] = r.choice(self.moments)
        if r.random() < 0.3:
            cfg["max_ack_pending"] = r.randint(1, 5)
        if r.random() < 0.3:
            self._options(cfg)
        old = self.consumers.get(name)
        filtered = any(cfg.get(k) for k in ("filter_subject", "filter_subjects"))
        if old and not filtered and any(old.get(k) for k in ("filter_subject", "filter_subjects")):
            return  # an update that removes every filter: a known divergence
        self.step("create", cfg)
        if "error" not in self.pair.consumer_create(self.name, cfg):
            self.consumers[name] = cfg
            self.delivered.setdefault(name, [])

    def _options(self, cfg: dict[str, Any]) -> None:
        """Some of the rest of a consumer's config, valid or not (both must refuse alike), none
        of it timing-dependent: a run compares infos, which echo the config with its defaults.
        Left out: the limits of pull requests (``max_waiting``, ``max_batch``, ``max_expires``,
        ``max_bytes``), which the lake does not serve (its readers pull through its own API),
        and ``num_replicas`` above 1 (a standalone server refuses it, 10074, where a lake takes
        a stream's replicas as a cluster would: ``config.update``)."""
        r = self.rnd
        for key, values in (
            ("description", ["d", ""]),
            ("metadata", [{"k": "v"}, {}]),
            ("max_deliver", [-1, 1, 3, 0]),
            ("headers_only", [True, False]),
            ("sample_freq", ["50%", "100", ""]),
            ("mem_storage", [True, False]),
            ("num_replicas", [0, 1]),
            ("inactive_threshold", [3600 * 10**9, 0]),
            ("ack_wait", [30 * 10**9, 120 * 10**9]),  # long: a run ends before any redelivery
            ("backoff", [[30 * 10**9, 60 * 10**9], [30 * 10**9]]),
        ):
            if r.random() < 0.25:
                cfg[key] = r.choice(values)

    def fetch(self, name: str) -> None:
        cfg = self.consumers[name]
        batch = self.rnd.randint(1, 5)
        # a pull that max_ack_pending stops short waits on the server: let it expire
        expires = 0.3 if cfg.get("max_ack_pending") and cfg["ack_policy"] != "none" else None
        self.step("fetch", name, batch)
        got = self.pair.fetch(self.name, name, batch, expires=expires)
        self.delivered[name] += [(s, c) for s, c, _ in got]

    def ack(self, name: str) -> None:
        """As a lake reader acks: in order (explicit: every delivery up to the chosen one)."""
        if not self.delivered[name] or self.consumers[name]["ack_policy"] == "none":
            return
        i = self.rnd.randrange(len(self.delivered[name]))
        explicit = self.consumers[name]["ack_policy"] == "explicit"
        for sseq, dseq in self.delivered[name][:i + 1] if explicit else [self.delivered[name][i]]:
            self.step("ack", name, sseq, dseq)
            self.pair.ack(self.name, name, sseq, dseq)
        del self.delivered[name][:i + 1]

    def delete_consumer(self, name: str) -> None:
        self.step("delete consumer", name)
        self.pair.consumer_delete(self.name, name)
        del self.consumers[name]

    def reset(self, name: str) -> None:
        seq = None if self.rnd.random() < 0.5 else self.rnd.randint(1, 15)
        self.step("reset", name, seq)
        if "error" not in self.pair.consumer_reset(self.name, name, seq):  # a refused one moves nothing
            self.delivered[name] = []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["stream", "consumers", "directget", "sources"], default="stream")
    ap.add_argument("--seconds", type=float, default=60.0, help="run new seeds for this long")
    ap.add_argument("--seed", type=int, default=1, help="the first seed")
    ap.add_argument("--one", action="store_true", help="run only --seed, and print all its steps")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jsspark-fuzz-"))
    failed = 0
    with NatsServer(store_dir=str(work / "server")) as server:
        seed, end = args.seed, time.monotonic() + args.seconds
        while True:
            if args.mode == "sources":
                from tests.engine import fuzz_sources

                location = str(work / f"lake-{seed}")
                pair = Pair(fuzz_sources.Server(server.url), fuzz_sources.Lake(connect(location)))
                scenario: Scenario = fuzz_sources.SourcesScenario(pair, random.Random(seed), location)
            else:
                pair = Pair(Server(server.url), Lake(connect(work / f"lake-{seed}")))
                scenario = Scenario(pair, random.Random(seed))
            try:
                {"stream": scenario.run_stream, "consumers": scenario.run_consumers,
                 "directget": scenario.run_directget, "sources": getattr(scenario, "run", None)}[args.mode]()
            except Exception as e:
                failed += 1
                print(f"seed {seed}: {type(e).__name__}: {e}")
                for step in scenario.steps if args.one else scenario.steps[-25:]:
                    print("   ", step)
            finally:
                for name in pair.streams:
                    pair.server.delete_stream(name)
                pair.server.close()
            if args.one or time.monotonic() >= end:
                break
            seed += 1
    print(f"{args.mode}: seeds {args.seed}..{seed}, {failed} with a difference")


if __name__ == "__main__":
    main()
