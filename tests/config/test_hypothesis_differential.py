"""Generated configs: our accept/reject decision, error object and stored config all equal
the real server's."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.config.conftest import RawJS, assert_same_consumer, assert_same_stream, unique

MS = 1_000_000
S = 1000 * MS
SUBJECTS = ["h.a", "h.*", "h.>", "h.a.b", "h..x", ">", "$JS.API.x", "k.*.z", "k.>"]
DURATIONS = [0, -1, 50 * MS, S, 90 * S, 300 * S]
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


transforms = st.fixed_dictionaries(
    {
        "src": st.sampled_from(["", "h.*", "h.>", "k.*.z", "h..x"]),
        "dest": st.sampled_from(["", "o.$1", "o.>", "o.{{wildcard(1)}}", "o.$2"]),
    }
)
stream_fields = st.fixed_dictionaries(
    {},
    optional={
        "subjects": st.lists(st.sampled_from(SUBJECTS), max_size=3),
        "retention": st.sampled_from(["limits", "interest", "workqueue"]),
        "discard": st.sampled_from(["old", "new"]),
        "discard_new_per_subject": st.booleans(),
        "max_msgs_per_subject": st.sampled_from([-2, 0, 5]),
        "max_age": st.sampled_from(DURATIONS),
        "duplicate_window": st.sampled_from(DURATIONS),
        "no_ack": st.booleans(),
        "deny_purge": st.booleans(),
        "allow_rollup_hdrs": st.booleans(),
        "allow_msg_counter": st.booleans(),
        "allow_msg_ttl": st.booleans(),
        "subject_delete_marker_ttl": st.sampled_from([0, 500 * MS, 2 * S]),
        "subject_transform": transforms,
        "republish": st.fixed_dictionaries(
            {"dest": st.sampled_from(["rp.>", "h.x", ">", "rp.$1"])},
            optional={"src": st.sampled_from(["", ">", "h.*"])},
        ),
        "mirror": st.fixed_dictionaries(
            {"name": st.sampled_from(["M1", "a.b"])},
            optional={
                "filter_subject": st.sampled_from(["h.a", "h..x"]),
                "subject_transforms": st.lists(transforms, max_size=2),
            },
        ),
        "sources": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["S1", "S2"])},
                optional={
                    "filter_subject": st.sampled_from(["h.a", "h..x", ""]),
                    "subject_transforms": st.lists(transforms, max_size=2),
                    "opt_start_seq": st.sampled_from([0, 7]),
                    "consumer": st.fixed_dictionaries(
                        {"name": st.sampled_from(["dc", "d.c"])},
                        optional={"deliver_subject": st.sampled_from(["dl", "dl.*"])},
                    ),
                },
            ),
            max_size=2,
        ),
    },
)


@SETTINGS
@given(fields=stream_fields, pedantic=st.booleans())
def test_generated_stream_configs_match_server(js: RawJS, fields: dict[str, Any], pedantic: bool) -> None:
    assert_same_stream(js, {"name": unique("H"), **fields}, pedantic=pedantic)


consumer_fields = st.fixed_dictionaries(
    {},
    optional={
        "durable_name": st.sampled_from(["hd1", "hd2"]),
        "ack_policy": st.sampled_from(["none", "all", "explicit", "flow_control"]),
        "deliver_policy": st.sampled_from(
            ["all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"]
        ),
        "opt_start_seq": st.sampled_from([0, 3]),
        "opt_start_time": st.sampled_from(["2024-01-01T00:00:00Z"]),
        "deliver_subject": st.sampled_from(["", "dq.x", "q.x", "dq.*"]),
        "filter_subject": st.sampled_from(["", "q.a", "q..a"]),
        "filter_subjects": st.lists(st.sampled_from(["q.a", "q.>", "q.b", ""]), max_size=2),
        "max_deliver": st.sampled_from([0, -1, 2, 5]),
        "backoff": st.sampled_from([[], [S, 2 * S, 3 * S]]),
        "ack_wait": st.sampled_from([0, S, -1]),
        "max_ack_pending": st.sampled_from([0, -1, 10]),
        "idle_heartbeat": st.sampled_from([0, 50 * MS, S]),
        "flow_control": st.booleans(),
        "rate_limit_bps": st.sampled_from([0, 100]),
        "max_waiting": st.sampled_from([0, -1, 5]),
        "max_expires": st.sampled_from([0, 10_000, S]),
        "priority_policy": st.sampled_from(["none", "overflow", "pinned_client"]),
        "priority_groups": st.lists(st.sampled_from(["g", "", "bad name"]), max_size=1),
    },
)


@SETTINGS
@given(
    fields=consumer_fields,
    retention=st.sampled_from(["limits", "interest", "workqueue"]),
    pedantic=st.booleans(),
)
def test_generated_consumer_configs_match_server(
    js: RawJS, fields: dict[str, Any], retention: str, pedantic: bool
) -> None:
    assert_same_consumer(js, {"subjects": ["q.>"], "retention": retention}, fields, pedantic)
