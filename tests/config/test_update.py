"""Stream update: our check_stream_update against the real server's $JS.API.STREAM.UPDATE.

Each case creates a stream on the server, sends one or more updates, and after every update
compares the server's answer (error object, or stored config) with ours, computed from the
config the server had stored before that update.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsspark.config import StreamConfig, check_stream_update
from jsspark.errors import APIError
from tests.config.conftest import RawJS, server_answer, stored, unique

MS = 1_000_000
S = 1000 * MS


def ours_update(
    old: dict[str, Any], new: dict[str, Any], pedantic: bool = False, lookup: Any = None
) -> dict[str, Any]:
    """Our answer in the server's response shape: ``{"error": ...}`` or ``{"config": ...}``."""
    try:
        got = check_stream_update(
            StreamConfig.from_json(old), StreamConfig.from_json(new), pedantic=pedantic, lookup=lookup
        )
    except APIError as err:
        return {"error": err.to_dict()}
    return {"config": got.to_json()}


def update_stream(js: RawJS, name: str, cfg: dict[str, Any], pedantic: bool = False) -> dict[str, Any]:
    body = {**cfg, "pedantic": True} if pedantic else cfg
    return js.request(f"$JS.API.STREAM.UPDATE.{name}", body)


def assert_same_updates(
    js: RawJS,
    create: dict[str, Any],
    *updates: dict[str, Any],
    pedantic: bool = False,
    lookup: Any = None,
) -> list[dict[str, Any]]:
    """Create ``create`` under a fresh name, then apply each update (named like the stream
    unless it names itself) on the server and with ``check_stream_update``: same answers."""
    name = unique("U")
    created = js.create_stream({"storage": "memory", **create, "name": name})
    assert "error" not in created, created
    current = stored(created["config"])
    answers = []
    try:
        for upd in updates:
            body = {"storage": "memory", **upd}
            body.setdefault("name", name)
            want = server_answer(update_stream(js, name, body, pedantic))
            assert ours_update(current, body, pedantic, lookup) == want, body
            if "config" in want:
                current = want["config"]
            answers.append(want)
    finally:
        js.delete_stream(name)
    return answers


def assert_refused(js: RawJS, create: dict[str, Any], update: dict[str, Any], code: int) -> str:
    """One update the server refuses with ``code``, and we refuse alike; returns the text."""
    (want,) = assert_same_updates(js, create, update)
    assert want.get("error", {}).get("err_code") == code, want
    return str(want["error"]["description"])


def assert_accepted(js: RawJS, create: dict[str, Any], *updates: dict[str, Any]) -> dict[str, Any]:
    """Updates the server takes, stored as we store them; returns the last stored config."""
    answers = assert_same_updates(js, create, *updates)
    assert all("config" in a for a in answers), answers
    return dict(answers[-1]["config"])


# --- configUpdateCheck's own rules ------------------------------------------------------

REFUSED: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "storage-change": ({}, {"storage": "file"}, "can not change storage type"),
    "to-workqueue": ({}, {"retention": "workqueue"}, "retention policy to/from workqueue"),
    "from-workqueue": ({"retention": "workqueue"}, {"retention": "interest"}, "to/from workqueue"),
    "sealed-to-workqueue": ({}, {"sealed": True, "retention": "workqueue"}, "to/from workqueue"),
    "cancel-deny-delete": ({"deny_delete": True}, {}, "can not cancel deny message deletes"),
    "cancel-deny-purge": ({"deny_purge": True}, {}, "can not cancel deny purge"),
    "disable-ttl": ({"allow_msg_ttl": True}, {}, "message TTL status can not be disabled"),
    "disable-ttl-set-by-markers": (
        {"subject_delete_marker_ttl": 2 * S},
        {},
        "message TTL status can not be disabled",
    ),
    "enable-counter": ({}, {"allow_msg_counter": True}, "can not change message counter setting"),
    "disable-counter": ({"allow_msg_counter": True}, {}, "can not change message counter setting"),
    "disable-schedules": ({"allow_msg_schedules": True}, {}, "message schedules can not be disabled"),
    "persist-mode-on": ({"storage": "file"}, {"storage": "file", "persist_mode": "async"}, "persist mode"),
    "persist-mode-off": ({"storage": "file", "persist_mode": "async"}, {"storage": "file"}, "persist mode"),
}


@pytest.mark.parametrize("create,update,text", REFUSED.values(), ids=REFUSED.keys())
def test_update_check_refusals_match_server(
    js: RawJS, create: dict[str, Any], update: dict[str, Any], text: str
) -> None:
    assert text in assert_refused(js, create, update, 10052)


def test_unseal_refused_and_sealing_adjusts_limits(js: RawJS) -> None:
    """Sealing stores max_age 0, discard new, deny delete and purge, no roll-ups (the update
    asked for none of that); a sealed stream stays sealed."""
    create = {"max_age": 100 * S, "duplicate_window": 10 * S, "allow_rollup_hdrs": True}
    answers = assert_same_updates(js, create, {**create, "sealed": True}, create)
    sealed = answers[0]["config"]
    assert (sealed["max_age"], sealed["discard"], sealed["allow_rollup_hdrs"]) == (0, "new", False)
    assert sealed["deny_delete"] and sealed["deny_purge"]
    assert "unseal" in answers[1]["error"]["description"]


def test_sealing_keeps_features_the_seal_overrides(js: RawJS) -> None:
    """Roll-ups go off even where schedules or delete markers turned them on; the shared
    checks still see the unsealed discard policy."""
    assert_accepted(js, {"allow_msg_schedules": True}, {"allow_msg_schedules": True, "sealed": True})
    assert_accepted(js, {}, {"subject_delete_marker_ttl": 2 * S, "sealed": True})
    assert_accepted(js, {"allow_msg_counter": True}, {"allow_msg_counter": True, "sealed": True})
    text = assert_refused(
        js, {}, {"sealed": True, "discard_new_per_subject": True, "max_msgs_per_subject": 3}, 10052
    )
    assert "discard new per subject" in text


def test_name_in_body_must_match_subject(js: RawJS) -> None:
    assert_refused(js, {}, {"name": "OTHER"}, 10056)
    # the shared checks come first
    assert_refused(js, {}, {"name": "OTHER", "duplicate_window": -1}, 10052)
    assert_refused(js, {}, {"name": "a/b"}, 10052)


def test_mirror_rules(js: RawJS) -> None:
    mirror = {"mirror": {"name": "NOPE", "opt_start_time": "2024-01-01T00:00:00Z"}}
    assert_accepted(js, mirror, mirror, {**mirror, "max_msgs": 10, "sealed": True})
    assert_refused(js, mirror, {"mirror": {"name": "OTHER"}}, 10055)
    assert_refused(js, mirror, {"mirror": {**mirror["mirror"], "filter_subject": "a.>"}}, 10055)
    assert_refused(js, {}, {"mirror": {"name": "NOPE"}, "subjects": []}, 10055)
    # an empty list is not Go's nil slice: DeepEqual sees a change
    assert_refused(js, mirror, {"mirror": {**mirror["mirror"], "subject_transforms": []}}, 10055)
    # the shared checks run first
    assert_refused(js, mirror, {"mirror": {"name": "OTHER"}, "subjects": ["x"]}, 10034)
    # dropping the mirror promotes the stream: it gets its own name as subject
    promoted = assert_accepted(js, mirror, {})
    assert promoted["subjects"] == [promoted["name"]]


def test_mirror_direct_follows_origin_or_request(js: RawJS) -> None:
    """Update does not refuse mirror_direct without a mirror (only create does); a known
    origin decides it for a mirror."""
    assert_accepted(js, {}, {"mirror_direct": True})
    assert_accepted(js, {"mirror": {"name": "NOPE"}}, {"mirror": {"name": "NOPE"}, "mirror_direct": True})
    origin = {
        "name": unique("O"),
        "subjects": [unique("o") + ".>"],
        "allow_direct": True,
        "storage": "memory",
    }
    origin_cfg = StreamConfig.from_json(js.create_stream(origin)["config"])
    try:
        answers = assert_same_updates(
            js,
            {"mirror": {"name": origin["name"]}},
            {"mirror": {"name": origin["name"]}, "mirror_direct": False},
            {"mirror": {"name": origin["name"]}, "max_msg_size": 10},
            lookup={origin["name"]: origin_cfg}.get,
        )
        assert answers[0]["config"]["mirror_direct"] is True
    finally:
        js.delete_stream(origin["name"])


def test_replicas(js: RawJS) -> None:
    """Negative and > 5 are refused as on create. The server refuses 2-5 standalone (10074);
    a lake stream keeps them, as on create, so this one rule is not ours."""
    assert_refused(js, {}, {"num_replicas": 6}, 10052)
    assert_refused(js, {}, {"num_replicas": -1}, 10133)
    name = unique("R")
    created = js.create_stream({"name": name, "storage": "memory"})
    try:
        body = {"name": name, "storage": "memory", "num_replicas": 3}
        assert server_answer(update_stream(js, name, body))["error"]["err_code"] == 10074
        got = ours_update(stored(created["config"]), body)
        assert got["config"]["num_replicas"] == 3
    finally:
        js.delete_stream(name)


# --- what an update may change ---------------------------------------------------------


def test_limits_subjects_and_flags_change(js: RawJS) -> None:
    assert_accepted(
        js,
        {"subjects": ["lim.a"], "max_msgs": 10},
        {"subjects": ["lim.a", "lim.b"], "max_msgs": 100, "max_bytes": 1 << 20, "max_consumers": 4},
        {"subjects": ["lim2.>"], "max_msgs": 5, "max_age": 30 * S, "max_msgs_per_subject": 2},
        {
            "subjects": ["lim2.>"],
            "discard": "new",
            "discard_new_per_subject": True,
            "max_msgs_per_subject": 2,
        },
        {"subjects": ["lim2.>"], "retention": "interest", "deny_delete": True, "deny_purge": True},
        {
            "subjects": ["lim2.>"],
            "retention": "limits",
            "deny_delete": True,
            "deny_purge": True,
            "first_seq": 9,
        },
    )


def test_feature_flags_turn_on(js: RawJS) -> None:
    assert_accepted(
        js,
        {},
        {"allow_msg_ttl": True},
        {"allow_msg_ttl": True, "subject_delete_marker_ttl": 2 * S},
        {"allow_msg_ttl": True, "allow_msg_schedules": True, "allow_atomic": True, "allow_batched": True},
        {
            "allow_msg_ttl": True,
            "allow_msg_schedules": True,
            "allow_direct": True,
            "consumer_limits": {"max_ack_pending": 5, "inactive_threshold": S},
            "metadata": {"team": "lake", "_nats.ver": "9.9.9"},
            "description": "now described",
        },
    )


def test_shared_checks_and_pedantic_on_update(js: RawJS) -> None:
    assert_refused(js, {}, {"storage": "memory", "persist_mode": "async"}, 10052)
    assert_refused(js, {}, {"max_age": 50 * MS}, 10052)
    assert_refused(js, {}, {"subjects": ["a.*", "a.b"]}, 10052)
    assert_refused(js, {}, {"allow_msg_counter": True, "discard": "new"}, 10052)
    for upd in ({"max_msgs": -5}, {"max_age": S}, {"republish": {"dest": "rp.>"}}):
        (want,) = assert_same_updates(js, {}, upd, pedantic=True)
        assert want["error"]["err_code"] == 10157


def test_duplicate_window(js: RawJS) -> None:
    """Default 2m (or max_age) comes back when the update leaves it out; sourcing streams
    keep none unless given."""
    answers = assert_same_updates(
        js, {"duplicate_window": 5 * S}, {}, {"max_age": 30 * S}, {"duplicate_window": -1}
    )
    assert [a.get("config", {}).get("duplicate_window") for a in answers] == [120 * S, 30 * S, None]
    assert_accepted(js, {"sources": [{"name": "A"}]}, {"sources": [{"name": "A"}], "duplicate_window": S})
    assert_refused(js, {}, {"max_age": S, "duplicate_window": 2 * S}, 10052)


def test_sources_change(js: RawJS) -> None:
    """Sources come and go; the plain filter re-check of create is not made on update."""
    assert_accepted(
        js,
        {"sources": [{"name": "A"}]},
        {"sources": [{"name": "B", "filter_subject": "x.>"}, {"name": "A"}]},
        {"sources": [{"name": "B", "subject_transforms": [{"src": "y.*", "dest": "z.$1"}]}]},
        {"sources": [{"name": "B", "filter_subject": "a..b"}]},
        {},
    )
    assert_refused(js, {"sources": [{"name": "A"}]}, {"sources": [{"name": "A"}, {"name": "A"}]}, 10140)
    assert_refused(
        js, {}, {"sources": [{"name": "A", "subject_transforms": [{"src": "a.*", "dest": "b.$2"}]}]}, 10146
    )


def test_republish_and_subject_transform(js: RawJS) -> None:
    """An empty republish dest is stored as ``>`` on update (create keeps it empty), even
    where that cycles into the stream's subjects; with a partial-wildcard source it fails
    late, as a 10069 update error."""
    base = {"subjects": ["rp.>"]}
    stored_cfg = assert_accepted(js, base, {**base, "republish": {"dest": ""}})
    assert stored_cfg["republish"] == {"src": ">", "dest": ">"}
    assert_accepted(js, base, {**base, "republish": {"src": "rp.>", "dest": ""}})
    text = assert_refused(js, base, {**base, "republish": {"src": "rp.*", "dest": ""}}, 10069)
    assert text == "stream configuration for republish from 'rp.*' to '>': invalid subject"
    assert_refused(js, base, {**base, "republish": {"src": ">", "dest": "rp.x"}}, 10052)
    assert_accepted(
        js,
        {**base, "republish": {"src": "rp.*", "dest": "out.$1"}},
        {**base, "republish": {"src": "rp.>", "dest": "out.>", "headers_only": True}},
        {**base, "subject_transform": {"src": "rp.*", "dest": "t.$1"}},
        {
            "subjects": ["in.>"],
            "subject_transform": {"src": "in.>", "dest": "tr.>"},
            "republish": {"src": ">", "dest": ">"},
        },
        base,
    )
    assert_refused(js, base, {**base, "subject_transform": {"src": "rp.*", "dest": "t.$2"}}, 10156)


# --- generated pairs -------------------------------------------------------------------

SUBJECTS = ["g.a", "g.*", "g.>", "h.b", "g..x"]
DURATIONS = [0, -1, 50 * MS, S, 90 * S, 300 * S]
common = {
    "storage": st.sampled_from(["memory", "file"]),
    "retention": st.sampled_from(["limits", "interest", "workqueue"]),
    "discard": st.sampled_from(["old", "new"]),
    "subjects": st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=2),
    "max_msgs": st.sampled_from([0, 10, -3]),
    "max_msgs_per_subject": st.sampled_from([0, 2]),
    "discard_new_per_subject": st.booleans(),
    "max_age": st.sampled_from(DURATIONS),
    "duplicate_window": st.sampled_from(DURATIONS),
    "deny_delete": st.booleans(),
    "deny_purge": st.booleans(),
    "allow_rollup_hdrs": st.booleans(),
    "allow_msg_ttl": st.booleans(),
    "allow_msg_counter": st.booleans(),
    "allow_msg_schedules": st.booleans(),
    "subject_delete_marker_ttl": st.sampled_from([0, 2 * S]),
    "republish": st.fixed_dictionaries(
        {"dest": st.sampled_from(["", "rp.>", "g.a", "rp.$1"])},
        optional={"src": st.sampled_from(["g.*", ">"])},
    ),
}
create_fields = st.fixed_dictionaries(
    {},
    optional={
        **common,
        "subjects": st.sampled_from([["g.a"], ["g.>"], ["g.*", "h.b"]]),
        "mirror": st.fixed_dictionaries({"name": st.sampled_from(["HM"])}),
    },
).map(lambda c: {k: v for k, v in c.items() if k != "subjects"} if "mirror" in c else c)
update_fields = st.fixed_dictionaries(
    {},
    optional={
        **common,
        "sealed": st.booleans(),
        "persist_mode": st.sampled_from(["default", "async"]),
        "mirror": st.fixed_dictionaries({"name": st.sampled_from(["HM"])}),
        "sources": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["S1", "S2"])},
                optional={"filter_subject": st.sampled_from(["g.a", "g..x"])},
            ),
            max_size=2,
        ),
    },
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(create=create_fields, update=update_fields, pedantic=st.booleans())
def test_generated_updates_match_server(
    js: RawJS, create: dict[str, Any], update: dict[str, Any], pedantic: bool
) -> None:
    name = unique("G")
    created = js.create_stream({"storage": "memory", **create, "name": name})
    if "error" in created:
        return
    try:
        body = {"storage": "memory", **update, "name": name}
        want = server_answer(update_stream(js, name, body, pedantic))
        assert ours_update(stored(created["config"]), body, pedantic) == want
    finally:
        js.delete_stream(name)
