"""Consumer create: our check_consumer_config against the real server, case by case."""

from __future__ import annotations

from typing import Any

import pytest

from jsspark.config import ConsumerConfig, StreamConfig
from tests.config.conftest import RawJS, assert_same_consumer

MS = 1_000_000
S = 1000 * MS
LIMITS = {"subjects": ["c.>"]}
WORKQUEUE = {"subjects": ["c.>"], "retention": "workqueue"}
FC = {"ack_policy": "flow_control", "deliver_subject": "fc.d"}

INVALID: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {
    "filter-and-filters-10136": (LIMITS, {"filter_subject": "c.a", "filter_subjects": ["c.b"]}, False),
    "empty-filter-10139": (LIMITS, {"filter_subjects": ["c.a", ""]}, False),
    "overlapping-filters-10138": (LIMITS, {"filter_subjects": ["c.>", "c.a"]}, False),
    "invalid-filter": (LIMITS, {"filter_subject": "c..a"}, False),
    "all-with-start-seq-10094": (LIMITS, {"opt_start_seq": 5}, False),
    "all-with-start-time-10094": (LIMITS, {"opt_start_time": "2024-01-01T00:00:00Z"}, False),
    "last-with-seq-10094": (LIMITS, {"deliver_policy": "last", "opt_start_seq": 1}, False),
    "new-with-time-10094": (
        LIMITS,
        {"deliver_policy": "new", "opt_start_time": "2024-01-01T00:00:00Z"},
        False,
    ),
    "by-seq-without-seq-10094": (LIMITS, {"deliver_policy": "by_start_sequence"}, False),
    "by-seq-with-time-10094": (
        LIMITS,
        {"deliver_policy": "by_start_sequence", "opt_start_seq": 2, "opt_start_time": "2024-01-01T00:00:00Z"},
        False,
    ),
    "by-time-without-time-10094": (LIMITS, {"deliver_policy": "by_start_time"}, False),
    "by-time-with-seq-10094": (
        LIMITS,
        {"deliver_policy": "by_start_time", "opt_start_seq": 2, "opt_start_time": "2024-01-01T00:00:00Z"},
        False,
    ),
    "last-per-subject-without-filter-10094": (LIMITS, {"deliver_policy": "last_per_subject"}, False),
    "fc-pull-10218": (LIMITS, {"ack_policy": "flow_control"}, False),
    "fc-no-flow-control-10219": (LIMITS, FC, True),
    "fc-heartbeat-not-1s": (LIMITS, {**FC, "flow_control": True, "idle_heartbeat": 2 * S}, True),
    "fc-max-ack-pending-10220": (LIMITS, {**FC, "max_ack_pending": -1}, False),
    "fc-ack-wait-10221": (LIMITS, {**FC, "ack_wait": S}, False),
    "fc-backoff-10221": (LIMITS, {**FC, "backoff": [S]}, False),
    "fc-max-deliver-10222": (LIMITS, {**FC, "max_deliver": 5}, False),
    "backoff-over-max-deliver-10116": (
        LIMITS,
        {"durable_name": "bo", "ack_policy": "explicit", "backoff": [S, 2 * S, 3 * S], "max_deliver": 2},
        False,
    ),
    "negative-backoff": (LIMITS, {"ack_policy": "explicit", "backoff": [-1]}, False),
    "negative-ack-wait": (LIMITS, {"ack_policy": "explicit", "ack_wait": -5}, False),
    "workqueue-ack-none-push-10098": (WORKQUEUE, {"deliver_subject": "wq.d"}, False),
    "workqueue-ack-all-10098": (WORKQUEUE, {"ack_policy": "all"}, False),
    "workqueue-deliver-new-10101": (WORKQUEUE, {"ack_policy": "explicit", "deliver_policy": "new"}, False),
    "workqueue-pull-ack-none-10084": (WORKQUEUE, {}, False),
    "pull-rate-limit-10086": (LIMITS, {"rate_limit_bps": 1000}, False),
    "pull-heartbeat-10088": (LIMITS, {"idle_heartbeat": S}, False),
    "pull-flow-control-10089": (LIMITS, {"flow_control": True}, False),
    "pull-max-expires-too-small": (LIMITS, {"max_expires": 10_000}, False),
    "push-max-waiting-10080": (LIMITS, {"deliver_subject": "pd", "max_waiting": 3}, False),
    "push-wildcard-deliver-10079": (LIMITS, {"deliver_subject": "pd.*"}, False),
    "push-invalid-deliver": (LIMITS, {"deliver_subject": "pd..x"}, False),
    "push-deliver-cycle-10081": (LIMITS, {"deliver_subject": "c.x"}, False),
    "push-ack-none-max-ack-pending-10082": (LIMITS, {"deliver_subject": "pd", "max_ack_pending": 5}, False),
    "push-small-heartbeat-10083": (LIMITS, {"deliver_subject": "pd", "idle_heartbeat": 50 * MS}, False),
    "flow-control-without-heartbeat-10108": (LIMITS, {"deliver_subject": "pd", "flow_control": True}, False),
    "direct-durable": (LIMITS, {"durable_name": "dd", "deliver_subject": "pd", "direct": True}, False),
    "direct-pull": (LIMITS, {"direct": True}, False),
    "sample-freq-garbage": (LIMITS, {"sample_freq": "abc%"}, False),
    "sample-freq-negative": (LIMITS, {"sample_freq": "-5"}, False),
    "description-too-long": (LIMITS, {"description": "x" * 4097}, False),
    "priority-policy-without-groups": (LIMITS, {"priority_policy": "overflow"}, False),
    "priority-groups-without-policy": (LIMITS, {"priority_groups": ["g"]}, False),
    "priority-bad-group-name": (
        LIMITS,
        {"priority_policy": "pinned_client", "priority_groups": ["g!"]},
        False,
    ),
    "priority-push": (
        LIMITS,
        {"deliver_subject": "pd", "priority_policy": "overflow", "priority_groups": ["g"]},
        False,
    ),
    "pinned-ttl-without-policy": (LIMITS, {"priority_timeout": S}, False),
    "durable-path-separator-10127": (LIMITS, {"durable_name": "a/b"}, False),
    "durable-too-long-10102": (LIMITS, {"durable_name": "d" * 256}, False),
    "max-ack-pending-over-stream-limit": (
        {**LIMITS, "consumer_limits": {"max_ack_pending": 10}},
        {"ack_policy": "explicit", "max_ack_pending": 20},
        False,
    ),
    "inactive-threshold-over-stream-limit": (
        {**LIMITS, "consumer_limits": {"inactive_threshold": 90 * S}},
        {"inactive_threshold": 120 * S},
        False,
    ),
    "pedantic-max-deliver": (LIMITS, {"max_deliver": -3}, True),
    "misspelt-field-10025": (LIMITS, {"ack_wiat": 30 * S, "ack_policy": "explicit"}, False),
    "null-ack-policy-10025": (LIMITS, {"durable_name": "na", "ack_policy": None}, False),
    "null-deliver-policy-10025": (LIMITS, {"durable_name": "nd", "deliver_policy": None}, False),
    "capitalised-ack-policy-10025": (LIMITS, {"durable_name": "ca", "ack_policy": "EXPLICIT"}, False),
    # durations are Go time.Durations (int64 ns): what does not fit fails to decode, path named
    "ack-wait-beyond-int64-10025": (LIMITS, {"durable_name": "aw", "ack_wait": 2**63}, False),
    "ephemeral-ack-wait-beyond-int64-10025": (LIMITS, {"ack_wait": 2**63}, False),
    "inactive-threshold-beyond-int64-10025": (LIMITS, {"durable_name": "it", "inactive_threshold": 2**63}, False),
    "max-expires-beyond-int64-10025": (LIMITS, {"durable_name": "me", "max_expires": 2**63}, False),
    "idle-heartbeat-beyond-int64-10025": (LIMITS, {"durable_name": "ih", "idle_heartbeat": 2**63}, False),
    "priority-timeout-beyond-int64-10025": (LIMITS, {"durable_name": "pt", "priority_timeout": 2**63}, False),
    "ack-wait-fraction-10025": (LIMITS, {"durable_name": "af", "ack_wait": 2.5}, False),
    "backoff-entry-beyond-int64-10025": (
        LIMITS, {"durable_name": "bo", "ack_policy": "explicit", "backoff": [S, 2**63]}, False
    ),
    "first-bad-duration-in-document-10025": (
        LIMITS, {"durable_name": "fb", "inactive_threshold": 2**63, "ack_wait": -(2**63) - 1}, False
    ),
    "unknown-field-before-bad-duration-10025": (LIMITS, {"durable_name": "ub", "zz": 1, "ack_wait": 2**63}, False),
    # integers decode into their Go type (int is 64-bit, sequences and rate_limit_bps uint64): a
    # number beyond it, a fraction or exponent, a string or a bool fails to decode, path named
    "max-ack-pending-beyond-int-10025": (LIMITS, {"durable_name": "ma", "max_ack_pending": 2**63}, False),
    "max-ack-pending-far-beyond-int-10025": (LIMITS, {"durable_name": "mf", "max_ack_pending": 10**20}, False),
    "max-ack-pending-below-int-10025": (LIMITS, {"durable_name": "mb", "max_ack_pending": -(2**63) - 1}, False),
    "max-ack-pending-whole-float-10025": (LIMITS, {"durable_name": "mw", "max_ack_pending": 5.0}, False),
    "max-ack-pending-string-10025": (LIMITS, {"durable_name": "ms", "max_ack_pending": "5"}, False),
    "max-ack-pending-bool-10025": (LIMITS, {"durable_name": "mo", "max_ack_pending": True}, False),
    "max-deliver-beyond-int-10025": (LIMITS, {"durable_name": "md", "max_deliver": 2**63}, False),
    "max-waiting-beyond-int-10025": (LIMITS, {"durable_name": "mx", "max_waiting": 2**63}, False),
    "max-batch-beyond-int-10025": (LIMITS, {"durable_name": "mt", "max_batch": 2**63}, False),
    "max-bytes-beyond-int-10025": (LIMITS, {"durable_name": "my", "max_bytes": 2**63}, False),
    "num-replicas-beyond-int-10025": (LIMITS, {"durable_name": "nr", "num_replicas": 2**63}, False),
    "opt-start-seq-negative-10025": (
        LIMITS, {"durable_name": "os", "deliver_policy": "by_start_sequence", "opt_start_seq": -1}, False
    ),
    "opt-start-seq-beyond-uint64-10025": (
        LIMITS, {"durable_name": "ou", "deliver_policy": "by_start_sequence", "opt_start_seq": 2**64}, False
    ),
    "rate-limit-negative-10025": (LIMITS, {"deliver_subject": "rl", "rate_limit_bps": -1}, False),
    "first-bad-integer-in-document-10025": (
        LIMITS, {"durable_name": "fi", "max_waiting": 2**63, "ack_wait": 2**63, "max_ack_pending": 2**63}, False
    ),
    "pedantic-backoff-vs-ack-wait": (
        LIMITS,
        {"ack_policy": "explicit", "backoff": [S], "ack_wait": 2 * S},
        True,
    ),
    "start-time-lower-z-10025": (
        LIMITS, {"deliver_policy": "by_start_time", "opt_start_time": "2024-02-03T04:05:06z"}, False
    ),
    "pause-until-day-10025": (LIMITS, {"durable_name": "pd", "pause_until": "2099-02-29T00:00:00Z"}, False),
}


@pytest.mark.parametrize(("stream", "cfg", "pedantic"), INVALID.values(), ids=INVALID.keys())
def test_invalid_consumer_configs_match_server(
    js: RawJS, stream: dict[str, Any], cfg: dict[str, Any], pedantic: bool
) -> None:
    want = assert_same_consumer(js, stream, cfg, pedantic)
    assert "error" in want


VALID: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "ephemeral-pull": (LIMITS, {}),
    "named-ephemeral-pull": (LIMITS, {"name": "np"}),
    "durable-explicit": (LIMITS, {"durable_name": "de", "ack_policy": "explicit", "filter_subject": "c.a"}),
    "push-ack-none": (LIMITS, {"deliver_subject": "pd", "idle_heartbeat": 5 * S, "flow_control": True}),
    "flow-control-ack-defaults": (LIMITS, {"durable_name": "fc", **FC}),
    "backoff-sets-ack-wait": (
        LIMITS,
        {"durable_name": "bo", "ack_policy": "all", "backoff": [S, 5 * S], "max_deliver": 4},
    ),
    "stream-limits-inherited": (
        {**LIMITS, "consumer_limits": {"max_ack_pending": 10, "inactive_threshold": 90 * S}},
        {"durable_name": "sl", "ack_policy": "explicit"},
    ),
    "pinned-client": (
        LIMITS,
        {"durable_name": "pc", "priority_policy": "pinned_client", "priority_groups": ["g1"]},
    ),
    "by-start-time": (
        LIMITS,
        {
            "durable_name": "bt",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2024-02-03T04:05:06.000000007Z",
        },
    ),
    "filters": (
        LIMITS,
        {"durable_name": "fs", "filter_subjects": ["c.a", "c.b.>"], "deliver_policy": "last_per_subject"},
    ),
    "workqueue-flow-control": (WORKQUEUE, {"durable_name": "wq", **FC}),
    "integers-at-their-go-bounds": (
        LIMITS,
        {"durable_name": "ib", "max_ack_pending": 2**63 - 1, "max_deliver": 2**63 - 1, "max_waiting": -(2**63),
         "deliver_policy": "by_start_sequence", "opt_start_seq": 2**64 - 1},
    ),
    "clamped-negatives": (
        LIMITS,
        {"max_waiting": -4, "max_ack_pending": -9, "max_batch": -1, "inactive_threshold": -1},
    ),
    "pause-until": (LIMITS, {"durable_name": "pu", "pause_until": "2099-01-01T00:00:00Z"}),
    "times-keep-their-offset": (LIMITS, {"durable_name": "to", "deliver_policy": "by_start_time",
                                         "opt_start_time": "2024-02-03T04:05:06.7+05:30",
                                         "pause_until": "2099-01-01T00:00:00-08:00"}),
    "sample-freq": (LIMITS, {"durable_name": "sf", "ack_policy": "explicit", "sample_freq": "50%"}),
    "nulls-are-unset": (LIMITS, {"durable_name": "nu", "ack_policy": "explicit", "backoff": None, "max_deliver": None,
                                 "filter_subject": None, "filter_subjects": None, "metadata": None,
                                 "opt_start_time": None}),
    "undefined-deliver-policy-is-all": (LIMITS, {"durable_name": "ud", "deliver_policy": "undefined"}),
}


@pytest.mark.parametrize(("stream", "cfg"), VALID.values(), ids=VALID.keys())
def test_valid_consumer_configs_stored_like_server(
    js: RawJS, stream: dict[str, Any], cfg: dict[str, Any]
) -> None:
    want = assert_same_consumer(js, stream, cfg)
    assert "config" in want
    stream_cfg = StreamConfig.from_json({"name": "S", **stream})
    got = ConsumerConfig.from_json(cfg).with_server_defaults(stream_cfg).to_json()
    assert got == want["config"]
