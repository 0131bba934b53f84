"""Configs read back from the server (``stream info`` / ``consumer info``) survive parse →
``to_json()`` unchanged, and hand-written forms (Go durations, YAML, nats-py kwargs) parse."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from nats.js.api import StreamSource as NatsPyStreamSource

from jsspark.config import (
    ConsumerConfig,
    StreamConfig,
    UTCTime,
    check_consumer_config,
    check_stream_config,
    format_go_duration,
    load_consumer_config,
    load_stream_config,
    parse_go_duration,
    report_ignored_fields,
)
from jsspark.errors import APIError, ConfigIgnoredWarning
from tests.config.conftest import RawJS, unique

S = 1_000_000_000


def test_stream_info_config_round_trips(js: RawJS) -> None:
    name = unique()
    js.create_stream(
        {
            "name": name,
            "subjects": [f"{name}.>"],
            "max_age": 3600 * S,
            "republish": {"dest": "rp.>", "headers_only": True},
            "subject_transform": {"src": f"{name}.*", "dest": "t.$1"},
            "allow_msg_ttl": True,
            "subject_delete_marker_ttl": 5 * S,
            "metadata": {"owner": "lake"},
            "consumer_limits": {"max_ack_pending": 7},
        }
    )
    src = unique()
    js.create_stream(
        {
            "name": src,
            "sources": [
                {
                    "name": name,
                    "opt_start_time": "2024-01-02T03:04:05.123456789Z",
                    "filter_subject": f"{name}.a",
                },
                {"name": "REMOTE", "external": {"api": "$JS.hub.API", "deliver": "dlv"}},
                {"name": "DUR", "consumer": {"name": "dc", "deliver_subject": "dc.dlv"}},
            ],
        }
    )
    try:
        for stream in (name, src):
            raw = js.stream_info(stream)["config"]
            parsed = StreamConfig.from_json(json.dumps(raw))
            assert parsed.to_json() == raw
            assert StreamConfig.from_json(parsed.to_json_str()) == parsed
    finally:
        js.delete_stream(src)
        js.delete_stream(name)


def test_consumer_info_config_round_trips(js: RawJS) -> None:
    name = unique()
    js.create_stream({"name": name, "subjects": ["rt.>"]})
    try:
        for cfg in (
            {
                "durable_name": "d1",
                "ack_policy": "explicit",
                "backoff": [S, 2 * S],
                "filter_subjects": ["rt.a", "rt.b"],
            },
            {"durable_name": "d2", "ack_policy": "flow_control", "deliver_subject": "d2.in"},
            {
                "name": "p1",
                "priority_policy": "pinned_client",
                "priority_groups": ["g"],
                "pause_until": "2099-01-01T00:00:00.5Z",
            },
        ):
            resp = js.create_consumer(name, cfg)
            cname = resp["name"]
            raw = js.request(f"$JS.API.CONSUMER.INFO.{name}.{cname}")["config"]
            assert ConsumerConfig.from_json(raw).to_json() == raw
    finally:
        js.delete_stream(name)


def test_unknown_fields_are_kept_and_written_back() -> None:
    raw = {
        "name": "F",
        "subjects": ["f"],
        "retention": "limits",
        "future_flag": {"nested": [1, 2]},
        "mirror": None,
        "sources": [{"name": "x", "some_new_source_field": True}],
    }
    cfg = StreamConfig.from_json(raw)
    out = cfg.to_json()
    assert out["future_flag"] == {"nested": [1, 2]}
    assert out["sources"] == [{"name": "x", "some_new_source_field": True}]
    assert "mirror" not in out


def test_go_durations() -> None:
    cases = {
        "2m": 120 * S,
        "1h30m": 5400 * S,
        "500ms": S // 2,
        "1.5s": 3 * S // 2,
        "0": 0,
        "-3s": -3 * S,
        "7ns": 7,
    }
    for text, ns in cases.items():
        assert parse_go_duration(text) == ns
    for bad in ("", "5", "1d", "s", "1.2.3s", "--1s"):
        with pytest.raises(ValueError):
            parse_go_duration(bad)
    assert [format_go_duration(n) for n in (120 * S, 5400 * S, S // 2, 0, 1500)] == [
        "2m0s",
        "1h30m0s",
        "500ms",
        "0s",
        "1.5µs",
    ]
    cfg = StreamConfig.from_json(
        {
            "name": "D",
            "max_age": "1h",
            "duplicate_window": "90s",
            "consumer_limits": {"inactive_threshold": "1m"},
        }
    )
    assert (cfg.max_age, cfg.duplicate_window, cfg.consumer_limits.inactive_threshold) == (
        3600 * S,
        90 * S,
        60 * S,
    )
    assert cfg.to_json()["max_age"] == 3600 * S
    assert ConsumerConfig.from_json({"backoff": ["1s", 2 * S]}).backoff == [S, 2 * S]


def test_times_are_utc_with_nanoseconds_and_keep_their_offset() -> None:
    """The instant is UTC with nanoseconds; the text goes back out with the offset it came in
    with, as Go's ``time.Time`` keeps its zone through JSON."""
    src = StreamConfig.from_json(
        {"name": "T", "sources": [{"name": "o", "opt_start_time": "2024-01-02T05:04:05.000000001+02:00"}]}
    )
    t = src.sources[0].opt_start_time
    assert isinstance(t, UTCTime) and t.utcoffset() is not None and t.utcoffset().total_seconds() == 0
    assert t.nanosecond == 1 and t.hour == 3 and t.offset_seconds == 7200
    assert src.to_json()["sources"][0]["opt_start_time"] == "2024-01-02T05:04:05.000000001+02:00"
    assert StreamConfig.from_json(src.to_json()).sources[0].opt_start_time.offset_seconds == 7200


def test_from_kwargs_takes_nats_py_seconds() -> None:
    cfg = StreamConfig.from_kwargs(
        name="K", subjects=["k.>"], max_age=1.5, duplicate_window=0.5, description=None,
        sources=[NatsPyStreamSource(name="o", filter_subject="k.a")],
    )  # fmt: skip
    assert cfg.max_age == 3 * S // 2 and cfg.duplicate_window == S // 2
    assert cfg.sources[0].to_json() == {"name": "o", "filter_subject": "k.a"}
    cc = ConsumerConfig.from_kwargs(durable_name="d", ack_wait=2.0, backoff=[1, 2.5], idle_heartbeat=None)
    assert cc.ack_wait == 2 * S and cc.backoff == [S, 5 * S // 2] and cc.idle_heartbeat == 0


def test_load_yaml_and_json(tmp_path: Path) -> None:
    text = "name: Y\nsubjects: [y.>]\nmax_age: 2m\nretention: workqueue\n"
    cfg = load_stream_config(text)
    assert (cfg.name, cfg.max_age, cfg.retention.value) == ("Y", 120 * S, "workqueue")
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"name": "J", "max_msgs": 5}))
    assert load_stream_config(path).max_msgs == 5
    assert load_stream_config(str(path)).name == "J"
    assert load_consumer_config("durable_name: c\nack_wait: 10s\n").ack_wait == 10 * S
    with pytest.raises(ValueError):
        load_stream_config("- a\n- b\n")


def test_ignored_fields_warn_once_per_stream_name() -> None:
    name = unique("W")
    cfg = StreamConfig.from_json(
        {"name": name, "num_replicas": 3, "placement": {"cluster": "c1"}, "storage": "memory",
         "allow_rollup_hdrs": True, "allow_msg_ttl": True}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = check_stream_config(cfg)
        check_stream_config(cfg)
        report_ignored_fields(checked)
    ours = [w for w in caught if issubclass(w.category, ConfigIgnoredWarning)]
    assert len(ours) == 1
    assert all(k in str(ours[0].message)
               for k in ("placement", "num_replicas", "storage"))
    # applied by a lake stream: nothing to warn about
    assert all(k not in str(ours[0].message) for k in ("allow_rollup_hdrs", "allow_msg_ttl"))
    assert checked.num_replicas == 3 and checked.placement is not None and checked.storage.value == "memory"


def test_consumer_replicas_against_lake_stream() -> None:
    """Rules only a replicated stream reaches (a standalone server refuses R>1 before them)."""
    stream = StreamConfig.from_json({"name": "R", "retention": "interest", "num_replicas": 3})
    with pytest.raises(APIError) as err:
        check_consumer_config(ConsumerConfig(durable_name="c", ack_policy="explicit", num_replicas=4), stream)
    assert err.value.err_code == 10126
    with pytest.raises(APIError) as err:
        check_consumer_config(ConsumerConfig(durable_name="c", ack_policy="explicit", num_replicas=2), stream)
    assert err.value.err_code == 10134


def test_rules_the_api_subject_hides() -> None:
    """Names with '.', '*', '>' never reach the server's config check through an API subject."""
    with pytest.raises(APIError) as err:
        check_stream_config(StreamConfig(name="a.b"))
    assert err.value.to_dict() == {
        "code": 500,
        "err_code": 10052,
        "description": "stream name is required and can not contain '.', '*', '>', '\\', '/'",
    }
    stream = StreamConfig(name="S")
    with pytest.raises(APIError) as err:
        check_consumer_config(ConsumerConfig(durable_name="d.x"), stream)
    # every create API names a durable after itself first, so the name check fires
    assert err.value.description == "consumer name can not contain '.', '*', '>', '\\', '/'"
    with pytest.raises(APIError) as err:
        check_consumer_config(ConsumerConfig(durable_name="a", name="b"), stream)
    assert err.value.err_code == 10132


def test_durations_are_go_int64() -> None:
    """Durations decode into Go's int64 nanoseconds: beyond it a config is the server's 10025
    (from JSON and from nats-py keywords alike), a Go duration string beyond it too; a config
    an earlier version stored beyond it is still read back from a lake (``from_stored``)."""
    assert parse_go_duration("-2562047h47m16.854775808s") == -(2**63)
    assert parse_go_duration("2562047h47m16.854775807s") == 2**63 - 1
    with pytest.raises(ValueError, match="2562048h"):
        parse_go_duration("2562048h")
    for doc in (
        {"name": "D", "max_age": 2**63},
        {"name": "D", "max_age": "2562048h"},
        {"name": "D", "consumer_limits": {"inactive_threshold": 2**63}},
    ):
        with pytest.raises(APIError) as err:
            StreamConfig.from_json(doc)
        assert err.value.err_code == 10025 and "of type time.Duration" in str(err.value.description)
    with pytest.raises(APIError, match=r"9223372036854775808 into Go struct field StreamConfigRequest\.max_age"):
        StreamConfig.from_json('{"name": "D", "max_age": 9223372036854775808}')
    with pytest.raises(APIError) as err:
        StreamConfig.from_kwargs(name="D", max_age=1e12)  # nats-py: seconds
    assert err.value.field == "max_age"
    with pytest.raises(APIError) as err:
        ConsumerConfig.from_kwargs(durable_name="d", backoff=[1.0, 1e12])
    assert err.value.field == "backoff.1" and "into CreateConsumerRequest.config.backoff.1 of" in str(err.value)
    assert StreamConfig.from_json({"name": "D", "max_age": 2**63 - 1}).max_age == 2**63 - 1
    old = StreamConfig.from_stored({"name": "D", "max_age": 9460800000000000000})
    assert old.max_age == 9460800000000000000 and old.to_json()["max_age"] == 9460800000000000000


def test_integers_are_their_go_types(tmp_path: Path) -> None:
    """Integer fields decode into the server's Go types: beyond one, a config is the server's 10025
    (``Lake.add_consumer`` and the source's options too, which stored ``max_ack_pending=2**64``);
    a config an earlier version stored beyond it is still read back from a lake (``from_stored``)."""
    import jsspark
    from jsspark.datasource.options import parse_read_options

    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="S", subjects=["s.>"])
    text = ("invalid JSON: json: cannot unmarshal number 99999999999999999999 into Go struct field "
            "CreateConsumerRequest.config.max_ack_pending of type int")  # the server's text
    with pytest.raises(APIError) as err:
        lake.add_consumer("S", durable_name="big", ack_policy="explicit", max_ack_pending=99999999999999999999)
    assert (err.value.err_code, err.value.description) == (10025, text)
    with pytest.raises(APIError) as err:
        parse_read_options({"path": str(tmp_path / "lake"), "stream": "S", "durable_name": "big",
                            "ack_policy": "explicit", "max_ack_pending": "99999999999999999999"})
    assert (err.value.err_code, err.value.description) == (10025, text)
    assert lake.streams_info()[0].state.consumer_count == 0
    with pytest.raises(APIError, match=r"number 2147483648 into Go struct field StreamConfigRequest\.max_msg_size of "
                                       r"type int32"):
        StreamConfig.from_kwargs(name="D", max_msg_size=2**31)
    assert ConsumerConfig.from_json({"max_ack_pending": None}).max_ack_pending == 0  # Go: null leaves the zero
    old = StreamConfig.from_stored({"name": "D", "max_msgs": 2**64, "sources": [{"name": "X", "opt_start_seq": -1}]})
    assert (old.max_msgs, old.sources[0].opt_start_seq) == (2**64, -1)
