"""Stream create: our check_stream_config against the real server, case by case."""

from __future__ import annotations

from typing import Any

import pytest

from jsspark.config import StreamConfig
from tests.config.conftest import RawJS, assert_same_stream, unique

MS = 1_000_000
S = 1000 * MS

INVALID: dict[str, dict[str, Any]] = {
    "mirror-with-subjects-10034": {"mirror": {"name": "ORIGIN"}, "subjects": ["m.a"]},
    "mirror-with-sources-10031": {"mirror": {"name": "ORIGIN"}, "sources": [{"name": "X"}]},
    "mirror-first-seq-10143": {"mirror": {"name": "ORIGIN"}, "first_seq": 10},
    "mirror-bad-name-10142": {"mirror": {"name": "a.b"}},
    "mirror-filter-and-transforms-10150": {
        "mirror": {"name": "O", "filter_subject": "a", "subject_transforms": [{"src": "b", "dest": "c"}]}
    },
    "mirror-transform-bad-src-10151": {
        "mirror": {"name": "O", "subject_transforms": [{"src": "a..b", "dest": ""}]}
    },
    "mirror-transforms-overlap-10152": {
        "mirror": {
            "name": "O",
            "subject_transforms": [{"src": "a.*", "dest": ""}, {"src": "a.b", "dest": ""}],
        }
    },
    "mirror-transform-bad-dest-10154": {
        "mirror": {"name": "O", "subject_transforms": [{"src": "a.*", "dest": "b.{{wildcard(2)}}"}]}
    },
    "mirror-transform-unknown-function-10154": {
        "mirror": {"name": "O", "subject_transforms": [{"src": "a.*", "dest": "b.{{nope(1)}}"}]}
    },
    "mirror-bad-filter-10049": {"mirror": {"name": "O", "filter_subject": "a..b"}},
    "mirror-delete-markers": {"mirror": {"name": "O"}, "subject_delete_marker_ttl": 2 * S},
    "mirror-consumer-no-deliver-10213": {"mirror": {"name": "O", "consumer": {"name": "dc"}}},
    "mirror-consumer-with-start-10213": {
        "mirror": {"name": "O", "opt_start_seq": 3, "consumer": {"name": "dc", "deliver_subject": "dl.x"}}
    },
    "mirror-consumer-bad-name-10213": {
        "mirror": {"name": "O", "consumer": {"name": "d.c", "deliver_subject": "x"}}
    },
    "mirror-consumer-wild-deliver-10213": {
        "mirror": {"name": "O", "consumer": {"name": "dc", "deliver_subject": "dl.*"}}
    },
    "source-consumer-filter-10215": {
        "sources": [{"name": "O", "filter_subject": "a", "consumer": {"name": "dc", "deliver_subject": "dl"}}]
    },
    "source-consumer-start-time-10215": {
        "sources": [
            {
                "name": "O",
                "opt_start_time": "2024-01-01T00:00:00Z",
                "consumer": {"name": "dc", "deliver_subject": "d"},
            }
        ]
    },
    "source-consumer-duplicate-10216": {
        "sources": [
            {"name": "O", "filter_subject": "", "consumer": {"name": "dc", "deliver_subject": "d1"}},
            {
                "name": "O",
                "subject_transforms": [{"src": "a", "dest": ""}],
                "consumer": {"name": "dc", "deliver_subject": "d2"},
            },
        ]
    },
    "server-managed-unknown-field-10025": {
        "sources": [{"name": "O", "consumer": {"name": "c", "server_managed": True}}]
    },
    "misspelt-field-10025": {"max_msg": 5, "max_msgs": 5},
    "misspelt-source-field-10025": {"sources": [{"name": "O", "filter_subjects": "o.a"}]},
    "unknown-fields-first-in-document-order-10025": {"sources": [{"name": "O", "inner": 1}], "outer": 2},
    "unknown-fields-outer-first-10025": {"outer": 2, "mirror": {"name": "O", "inner": 1}},
    "source-bad-name-10141": {"sources": [{"name": "a*"}]},
    "source-duplicate-10140": {"sources": [{"name": "O"}, {"name": "O"}]},
    "source-filter-and-transforms-10144": {
        "sources": [{"name": "O", "filter_subject": "a", "subject_transforms": [{"src": "b", "dest": "c"}]}]
    },
    "source-transform-bad-src-10145": {
        "sources": [{"name": "O", "subject_transforms": [{"src": "a.>.b", "dest": ""}]}]
    },
    "source-transform-bad-dest-10146": {
        "sources": [{"name": "O", "subject_transforms": [{"src": "a.*", "dest": "b.$2"}]}]
    },
    "source-transform-dest-space-10146": {
        "sources": [{"name": "O", "subject_transforms": [{"src": "a", "dest": "b c"}]}]
    },
    "source-transforms-overlap-10147": {
        "sources": [
            {"name": "O", "subject_transforms": [{"src": "a.>", "dest": ""}, {"src": "a.b", "dest": ""}]}
        ]
    },
    "source-bad-filter-10049": {"sources": [{"name": "O", "filter_subject": "a.>.c"}]},
    "external-deliver-wildcard-10024": {
        "sources": [{"name": "O", "external": {"api": "$JS.hub.API", "deliver": "d.*"}}]
    },
    "external-api-wildcard": {"sources": [{"name": "O", "external": {"api": "$JS.*.API", "deliver": ""}}]},
    "external-api-overlap-10021": {"sources": [{"name": "O", "external": {"api": "$JS.API", "deliver": ""}}]},
    "max-age-too-small": {"max_age": 50 * MS},
    "max-age-negative": {"max_age": -1},
    "duplicates-larger-than-max-age": {"max_age": S, "duplicate_window": 2 * S},
    "duplicates-too-small": {"duplicate_window": 10 * MS},
    "duplicates-negative": {"duplicate_window": -5},
    "subjects-overlap": {"subjects": ["ov.*", "ov.a"]},
    "subjects-overlap-fwc": {"subjects": ["ov.a.b", "ov.>"]},
    "subject-invalid": {"subjects": ["a..b"]},
    "subject-duplicate": {"subjects": ["d.a", "d.a"]},
    "capture-all-needs-no-ack": {"subjects": [">"]},
    "jetstream-api-overlap": {"subjects": ["$JS.API.>"]},
    "system-api-overlap": {"subjects": ["$SYS.REQ.x"]},
    "stream-transform-bad-src-10155": {
        "subjects": ["st.>"],
        "subject_transform": {"src": "st..x", "dest": "y"},
    },
    "stream-transform-bad-dest-10156": {
        "subjects": ["st.>"],
        "subject_transform": {"src": "st.*", "dest": "y.$3"},
    },
    "republish-cycle": {"subjects": ["rp.>"], "republish": {"src": ">", "dest": "rp.x"}},
    "republish-bad-transform": {"subjects": ["rp.>"], "republish": {"src": "rp.*", "dest": "out.$2"}},
    "discard-new-per-subject-needs-discard-new": {"discard_new_per_subject": True, "max_msgs_per_subject": 1},
    "discard-new-per-subject-needs-max-per-subject": {"discard": "new", "discard_new_per_subject": True},
    "rollup-needs-purge": {"deny_purge": True, "allow_rollup_hdrs": True},
    "counter-discard-new": {"allow_msg_counter": True, "discard": "new"},
    "counter-interest": {"allow_msg_counter": True, "retention": "interest"},
    "delete-marker-ttl-too-small": {"subject_delete_marker_ttl": 500 * MS},
    "delete-marker-ttl-negative": {"subject_delete_marker_ttl": -1},
    "schedules-discard-new": {"allow_msg_schedules": True, "discard": "new"},
    "source-with-schedules-10187": {"sources": [{"name": "O"}], "allow_msg_schedules": True},
    "mirror-with-counter": {"mirror": {"name": "O"}, "allow_msg_counter": True},
    "sealed-on-create": {"sealed": True},
    "mirror-direct-without-mirror": {"mirror_direct": True},
    "replicas-over-5": {"num_replicas": 6},
    "replicas-negative": {"num_replicas": -1},
    "async-persist-memory": {"persist_mode": "async", "storage": "memory"},
    "async-persist-atomic": {"persist_mode": "async", "allow_atomic": True},
    "preferred-placement": {"placement": {"preferred": "srv"}},
    # the enums' own decoders refuse null (the rest take it as unset, VALID)
    "null-discard-10025": {"discard": None},
    "null-retention-10025": {"retention": None},
    "null-persist-mode-10025": {"persist_mode": None},
    "capitalised-retention-10025": {"retention": "Limits"},
    # a duration is a Go time.Duration (int64 ns): the decoder refuses what does not fit, naming
    # the field's path; the first such field (or unknown field) in the document is reported
    "max-age-beyond-int64-10025": {"max_age": 2**63},
    "max-age-below-int64-10025": {"max_age": -(2**63) - 1},
    "max-age-far-beyond-int64-10025": {"max_age": 10**22},
    "max-age-fraction-10025": {"max_age": 1.5},
    "max-age-bool-10025": {"max_age": True},
    "duplicate-window-beyond-int64-10025": {"duplicate_window": 2**63},
    "delete-marker-ttl-beyond-int64-10025": {"subject_delete_marker_ttl": 2**63},
    "consumer-limits-inactive-beyond-int64-10025": {"consumer_limits": {"inactive_threshold": 2**63}},
    "first-undecodable-duration-in-document-10025": {"duplicate_window": 2**63, "max_age": 2**63},
    "unknown-field-before-bad-duration-10025": {"nope": 1, "max_age": 2**63},
    "bad-duration-before-unknown-field-10025": {"max_age": 2**63, "nope": 1},
    "unknown-field-before-bad-enum-10025": {"nope": 1, "discard": "x"},
    # times as Go's time.Parse(RFC3339) refuses them, with its texts
    **{f"time-{k}-10025": {"sources": [{"name": "O", "opt_start_time": t}]} for k, t in {
        "lower-z": "2024-01-02T03:04:05z", "lower-t": "2024-01-02t03:04:05Z", "space": "2024-01-02 03:04:05Z",
        "no-zone": "2024-01-02T03:04:05", "word": "yesterday", "month": "2024-13-02T03:04:05Z",
        "day": "2024-02-30T00:00:00Z", "hour": "2024-01-02T24:00:00Z", "minute": "2024-01-02T03:60:00Z",
        "extra": "2024-01-02T03:04:05Zx", "offset-minute": "2024-01-02T03:04:05+01:61",
        "short-offset": "2024-01-02T03:04:05+01", "non-ascii": "é2024-01-02T03:04:05Z",
        "one-digit-month": "2024-1-02T03:04:05Z"}.items()},
    # integers decode into their Go type: max_msgs/max_bytes/max_msgs_per_subject int64, max_msg_size
    # int32, max_consumers/num_replicas/consumer_limits.max_ack_pending int, first_seq and the
    # origins' opt_start_seq uint64
    "max-msgs-beyond-int64-10025": {"max_msgs": 2**63},
    "max-bytes-below-int64-10025": {"max_bytes": -(2**63) - 1},
    "max-msgs-per-subject-beyond-int64-10025": {"max_msgs_per_subject": 2**63},
    "max-msgs-string-10025": {"max_msgs": "10"},
    "max-msgs-fraction-10025": {"max_msgs": 2.5},
    "max-msg-size-beyond-int32-10025": {"max_msg_size": 2**31},
    "max-msg-size-below-int32-10025": {"max_msg_size": -(2**31) - 1},
    "max-consumers-beyond-int-10025": {"max_consumers": 2**63},
    "num-replicas-beyond-int-10025": {"num_replicas": 2**63},
    "first-seq-negative-10025": {"first_seq": -1},
    "first-seq-beyond-uint64-10025": {"first_seq": 2**64},
    "consumer-limits-max-ack-pending-beyond-int-10025": {"consumer_limits": {"max_ack_pending": 2**63}},
    "source-opt-start-seq-negative-10025": {"sources": [{"name": "X", "opt_start_seq": -1}]},
    "mirror-opt-start-seq-beyond-uint64-10025": {"mirror": {"name": "X", "opt_start_seq": 2**64}},
    "first-bad-integer-in-document-10025": {"max_msg_size": 2**31, "max_age": 2**63, "max_msgs": 2**63},
}


@pytest.mark.parametrize("extra", INVALID.values(), ids=INVALID.keys())
def test_invalid_stream_configs_match_server(js: RawJS, extra: dict[str, Any]) -> None:
    want = assert_same_stream(js, {"name": unique(), **extra})
    assert "error" in want


PEDANTIC: dict[str, dict[str, Any]] = {
    "max-msgs-below-minus-one": {"max_msgs": -5},
    "max-consumers-below-minus-one": {"max_consumers": -2},
    "duplicates-default-above-max-age": {"max_age": 30 * S},
    "republish-empty-src": {"subjects": ["pr.>"], "republish": {"dest": "out.>"}},
    "delete-marker-needs-ttl": {"subject_delete_marker_ttl": 2 * S, "allow_rollup_hdrs": True},
    "schedules-need-rollup": {"allow_msg_schedules": True},
}


@pytest.mark.parametrize("extra", PEDANTIC.values(), ids=PEDANTIC.keys())
def test_pedantic_refusals_match_server(js: RawJS, extra: dict[str, Any]) -> None:
    want = assert_same_stream(js, {"name": unique(), **extra}, pedantic=True)
    assert "error" in want


VALID: dict[str, dict[str, Any]] = {
    "minimal": {},
    "transform-need-not-use-every-wildcard": {
        "subjects": ["st.>"],
        "subject_transform": {"src": "st.*.*", "dest": "y.$1"},
    },
    "max-age-shortens-duplicates": {"max_age": 30 * S},
    "limits-clamped-to-minus-one": {"max_msgs": -7, "max_bytes": 0, "max_msg_size": -3, "max_consumers": -9},
    "mirror-no-duplicate-window": {
        "mirror": {"name": "NOPE", "subject_transforms": [{"src": "a.*", "dest": "b.$1"}]}
    },
    "sources-no-duplicate-window": {
        "sources": [
            {"name": "S1", "filter_subject": "x.>", "opt_start_seq": 4},
            {"name": "S2", "opt_start_time": "2024-05-06T07:08:09.123456789Z"},
            {
                "name": "S1",
                "subject_transforms": [{"src": "y.*", "dest": "z.{{wildcard(1)}}"}, {"src": "w", "dest": ""}],
            },
        ]
    },
    # Go's time.Time keeps the offset it was given in, and its parser takes these
    **{f"time-{k}": {"sources": [{"name": "O", "opt_start_time": t}]} for k, t in {
        "offset": "2024-01-02T05:04:05+02:00", "negative-offset": "2024-01-02T03:04:05.120-05:30",
        "zero-offset": "2024-01-02T03:04:05+00:00", "minus-zero": "2024-01-02T03:04:05-00:00",
        "one-digit-hour": "2024-01-02T3:04:05Z", "comma-fraction": "2024-01-02T03:04:05,25Z",
        "ten-digits": "2024-01-02T03:04:05.1234567891Z", "leap-day": "2024-02-29T00:00:00+14:00"}.items()},
    "durable-source-consumer": {
        "sources": [{"name": "O", "consumer": {"name": "dc", "deliver_subject": "dl.x"}}]
    },
    "republish-defaults-src": {"subjects": ["rp.>"], "republish": {"dest": "out.>", "headers_only": True}},
    # republish builds its transform without ValidateMapping, which would refuse the space
    "republish-space-in-dest": {"subjects": ["rp.*"], "republish": {"src": "rp.*", "dest": "out.a b"}},
    "republish-left-right": {"subjects": ["rp.*"], "republish": {"src": "rp.*", "dest": "o.{{left(1,2)}}.{{right(1,1)}}"}},
    "implicit-republish": {
        "subjects": ["in.>"],
        "subject_transform": {"src": "in.>", "dest": "tr.>"},
        "republish": {"dest": ">", "src": ">"},
    },
    "delete-markers-turn-on-ttl-and-rollup": {"subject_delete_marker_ttl": 2 * S, "deny_purge": False},
    "schedules-turn-on-rollup": {"allow_msg_schedules": True},
    "discard-new-per-subject": {"discard": "new", "discard_new_per_subject": True, "max_msgs_per_subject": 3},
    "counter": {"allow_msg_counter": True, "allow_direct": True},
    "atomic": {"allow_atomic": True},
    "empty-placement-dropped": {"placement": {}},
    "memory-storage": {"storage": "memory"},
    "max-age-int64-max": {"max_age": 2**63 - 1},
    # Go's decoder leaves a field at its zero value on null; the discard decoder lower-cases
    "nulls-are-unset": {"subjects": None, "max_msgs": None, "description": None, "metadata": None,
                        "sources": None, "duplicate_window": None, "allow_direct": None, "mirror": None},
    "discard-in-capitals": {"discard": "NEW"},
    "empty-persist-mode": {"persist_mode": ""},
    "everything": {
        "description": "all the things",
        "subjects": ["ev.*", "other.>"],
        "retention": "interest",
        "max_msgs": 100,
        "max_bytes": 1 << 20,
        "max_age": 3600 * S,
        "max_msgs_per_subject": 5,
        "max_msg_size": 1024,
        "no_ack": True,
        "duplicate_window": 10 * S,
        "compression": "s2",
        "first_seq": 42,
        "allow_direct": True,
        "deny_delete": True,
        "consumer_limits": {"inactive_threshold": 60 * S, "max_ack_pending": 50},
        "allow_msg_ttl": True,
        "allow_batched": True,
        "persist_mode": "async",
        "metadata": {"team": "lake"},
    },
}


@pytest.mark.parametrize("extra", VALID.values(), ids=VALID.keys())
def test_valid_stream_configs_stored_like_server(js: RawJS, extra: dict[str, Any]) -> None:
    cfg = {"name": unique(), **extra}
    want = assert_same_stream(js, cfg)
    assert "config" in want
    assert StreamConfig.from_json(cfg).with_server_defaults().to_json() == want["config"]


def test_name_rules_match_server(js: RawJS) -> None:
    assert_same_stream(js, {"name": "x" * 256})
    assert_same_stream(js, {"name": "a/b"})
    assert_same_stream(js, {"name": "a\\b"})
    assert_same_stream(js, {"name": "d" * 255})


def test_description_and_metadata_limits_match_server(js: RawJS) -> None:
    assert_same_stream(js, {"name": unique(), "description": "d" * 4097})
    # the server counts its own _nats.req.level entry towards the limit
    assert_same_stream(js, {"name": unique(), "metadata": {"k": "v" * (128 * 1024 - 17)}})
    assert_same_stream(js, {"name": unique(), "metadata": {"k": "v" * (128 * 1024 - 16)}})


def test_cycles_and_origins_match_server(js: RawJS) -> None:
    """Sourcing oneself is a cycle; with a known origin, max_msg_size and mirror_direct follow it."""
    name = unique()
    assert_same_stream(js, {"name": name, "sources": [{"name": name}]})
    assert_same_stream(js, {"name": name, "mirror": {"name": name}})
    assert_same_stream(
        js, {"name": name, "subjects": ["cy.a"], "sources": [{"name": name, "filter_subject": "cy.b"}]}
    )

    origin = {
        "name": unique("O"),
        "subjects": [unique("o") + ".>"],
        "max_msg_size": 2048,
        "allow_direct": True,
    }
    origin_cfg = js.create_stream(origin)["config"]
    known = {origin["name"]: StreamConfig.from_json(origin_cfg)}
    try:
        for cfg in (
            {"name": unique(), "mirror": {"name": origin["name"]}, "max_msg_size": 1024},
            {"name": unique(), "sources": [{"name": origin["name"]}], "max_msg_size": 1024},
            {"name": unique(), "mirror": {"name": origin["name"]}},
            {"name": unique(), "sources": [{"name": origin["name"]}], "max_msg_size": 4096},
        ):
            assert_same_stream(js, cfg, lookup=known.get)
    finally:
        js.delete_stream(origin["name"])


def test_cycle_through_another_stream(js: RawJS) -> None:
    """A sources X (which does not exist yet); creating X sourcing A closes the loop."""
    a, x = unique("A"), unique("X")
    a_cfg = js.create_stream({"name": a, "subjects": [f"{a}.>"], "sources": [{"name": x}]})["config"]
    known = {a: StreamConfig.from_json(a_cfg)}
    try:
        want = assert_same_stream(js, {"name": x, "sources": [{"name": a}]}, lookup=known.get)
        assert want["error"]["description"] == "detected cycle"
        assert_same_stream(
            js,
            {
                "name": x,
                "subjects": ["xs.>"],
                "mirror": None,
                "sources": [{"name": a, "filter_subject": "nope.>"}],
            },
            lookup=known.get,
        )
    finally:
        js.delete_stream(a)


def test_external_deliver_prefix_overlapping_origin_subjects(js: RawJS) -> None:
    origin = {"name": unique("O"), "subjects": ["ext.>"]}
    js.create_stream(origin)
    known = {origin["name"]: StreamConfig.from_json(js.stream_info(origin["name"])["config"])}
    try:
        cfg = {
            "name": unique(),
            "sources": [
                {"name": origin["name"]},
                {"name": "R", "external": {"api": "$JS.x.API", "deliver": "ext"}},
            ],
        }
        assert_same_stream(js, cfg, lookup=known.get)
    finally:
        js.delete_stream(origin["name"])
