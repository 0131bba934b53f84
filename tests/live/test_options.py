"""The live options refuse at ``load()`` what would otherwise fail at the first request with an
error about something else: a stream or consumer name that cannot be a token of the JetStream
API's subjects (nats-py's "invalid subject", or the server's 10056/10017 "... in subject does
not match ..." when a dot splits the token), and a timeout that is not a positive number. The
name rule is the server's own: it refuses the same names when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jsspark.datasource.options import OptionError
from jsspark.live.options import parse_live_read_options, parse_live_write_options
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats

URL = "nats://127.0.0.1:4222"  # parsing connects nowhere
BAD_NAMES = ["A.B", "A B", "A\tB", "A*", "A>", "A/B", "A\\B"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_stream_name_that_cannot_be_a_subject_token_fails_naming_it(name: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_live_read_options({"servers": URL, "stream": name})
    want = ("Stream name can not contain path separators" if "/" in name or "\\" in name
            else "stream name is required and can not contain '.', '*', '>', '\\', '/'")
    assert str(info.value) == f"jetstream (live): option stream {name!r}: {want}"


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_consumer_name_that_cannot_be_a_subject_token_fails_naming_it(name: str) -> None:
    for mode in ("server", "user"):
        with pytest.raises(OptionError) as info:
            parse_live_read_options({"servers": URL, "stream": "ORDERS", "consumer": name, "consumerMode": mode,
                                     "deliverSubject": "lake.deliver"})
        want = ("Consumer name can not contain path separators" if "/" in name or "\\" in name
                else "consumer name can not contain '.', '*', '>', '\\', '/'")
        assert str(info.value) == f"jetstream (live): option consumer {name!r}: {want}"


def test_names_over_the_servers_length_limit_fail() -> None:
    with pytest.raises(OptionError) as info:
        parse_live_read_options({"servers": URL, "stream": "S" * 256})
    assert str(info.value) == (f"jetstream (live): option stream '{'S' * 40}...': stream name is too long, "
                               f"maximum allowed is 255")
    with pytest.raises(OptionError) as info:  # bytes count, as the server's len() does
        parse_live_read_options({"servers": URL, "stream": "ORDERS", "consumer": "ü" * 128})
    assert str(info.value).endswith("...': consumer name is too long, maximum allowed is 255")
    with pytest.raises(OptionError) as info:  # no consumer given: jsspark_<stream> is the durable's name
        parse_live_read_options({"servers": URL, "stream": "S" * 250})
    assert str(info.value) == ("jetstream (live): option consumer: the default durable name jsspark_<stream> would be "
                               "over 255 bytes for this stream; set option consumer")
    assert parse_live_read_options({"servers": URL, "stream": "S" * 247}).consumer == "jsspark_" + "S" * 247
    assert parse_live_read_options({"servers": URL, "stream": "S" * 250, "consumerMode": "ordered"}).stream
    good = "c-_=ü" * 42 + "abc"  # 255 bytes
    opts = parse_live_read_options({"servers": URL, "stream": "S" * 255, "consumer": good})
    assert (opts.stream, opts.consumer) == ("S" * 255, good)


@pytest.mark.parametrize("value", ["soon", "nan", "inf", "0", "0s", "-1", ""])
def test_timeouts_must_be_positive_seconds(value: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_live_read_options({"servers": URL, "stream": "ORDERS", "waitTimeout": value})
    assert str(info.value) == f"jetstream (live): waitTimeout must be seconds or an interval above 0 ('30', '30s', '2 minutes'), got {value!r}"
    with pytest.raises(OptionError) as info:
        parse_live_write_options({"servers": URL, "publishTimeout": value})
    assert str(info.value) == f"jetstream (live): publishTimeout must be seconds or an interval above 0 ('30', '30s', '2 minutes'), got {value!r}"
    assert parse_live_read_options({"servers": URL, "stream": "ORDERS", "waitTimeout": "0.5"}).wait_timeout == 0.5
    assert parse_live_read_options({"servers": URL, "stream": "ORDERS", "waitTimeout": "2 minutes"}).wait_timeout == 120
    assert parse_live_write_options({"servers": URL, "publishTimeout": "500ms"}).publish_timeout == 0.5
    assert parse_live_write_options({"servers": URL, "publishTimeout": "2.5"}).publish_timeout == 2.5


@pytest.mark.parametrize("name", ["A*", "A>", "A/B", "A\\B"])
def test_the_server_refuses_the_same_names_in_the_same_words(server: NatsServer, nats: SyncNats, name: str) -> None:
    """Names a subject can carry as one token, sent to the server as the reader would send them
    (``STREAM.INFO``, ``CONSUMER.CREATE`` with a durable name): it refuses each, and its text is
    the option error's (a name with a dot or whitespace cannot even reach it as one)."""
    with pytest.raises(OptionError) as info:
        parse_live_read_options({"servers": server.url, "stream": name})
    resp = nats.api(f"STREAM.CREATE.{name}", {"name": name, "subjects": ["names.test"]})
    assert str(info.value) == f"jetstream (live): option stream {name!r}: {resp['error']['description']}"
    nats.add_stream(name="NAMES", subjects=["names.>"])
    with pytest.raises(OptionError) as info:
        parse_live_read_options({"servers": server.url, "stream": "NAMES", "consumer": name})
    resp = nats.api(f"CONSUMER.CREATE.NAMES.{name}", {"stream_name": "NAMES", "config": {
        "durable_name": name, "deliver_subject": "names.deliver", "ack_policy": "flow_control", "flow_control": True,
        "idle_heartbeat": 1_000_000_000}})
    assert str(info.value) == f"jetstream (live): option consumer {name!r}: {resp['error']['description']}"


def test_ordered_mode_refuses_a_consumer_name_and_deliver_subject() -> None:
    """Ordered mode creates its own ephemeral consumer and inbox: a name or subject given for it
    would be ignored without a word."""
    for given in ({"consumer": "c"}, {"deliverSubject": "d.x"}, {"consumer": "c", "deliverSubject": "d.x"}):
        with pytest.raises(OptionError, match="consumerMode ordered .* do not set " + "/".join(given)):
            parse_live_read_options({"servers": URL, "stream": "S", "consumerMode": "ordered", **given})


@pytest.mark.parametrize("option", ["tlsCa", "tlsCert", "tlsKey", "creds"])
def test_a_missing_file_option_fails_naming_it(tmp_path: Any, option: str) -> None:
    """Python's own error names neither the option nor the file (``[Errno 2] No such file or
    directory``); a missing creds file showed as whatever the server said without credentials."""
    from jsspark.live.ingestor import Ingestor

    missing = str(tmp_path / "nope.pem")
    given = {option: missing}
    if option == "tlsKey":
        given["tlsCert"] = str(Path(__file__))  # a file that exists: the key is the one missing
    ing = Ingestor(parse_live_read_options({"servers": URL, "stream": "S", "spillDir": str(tmp_path), **given}))
    try:
        with pytest.raises(OptionError, match=f"option {option}: cannot read '{missing}': No such file"):
            ing.start(None)
    finally:
        ing.stop()


@pytest.mark.parametrize("where", [{"domain": "nowhere"}, {"apiPrefix": "$JS.nowhere.API"}])
def test_no_jetstream_at_the_api_prefix_is_said_so(server: NatsServer, tmp_path: Any, where: dict[str, str]) -> None:
    """Nothing answers the JetStream API at the prefix used (JetStream off, or a wrong domain or
    apiPrefix): nats.go's "jetstream not enabled", naming the prefix, not nats-py's bare "no
    responders available for request"; in a streaming bind and a batch read alike."""
    from jsspark.datasource.live_source import _bounds
    from jsspark.live.ingestor import Ingestor, LiveSourceError

    opts = parse_live_read_options({"servers": server.url, "stream": "S", "spillDir": str(tmp_path), **where})
    named = "nowhere"
    ing = Ingestor(opts)
    try:
        with pytest.raises(LiveSourceError, match=f"jetstream not enabled: no JetStream API answers at .*{named}"):
            ing.start(None)
    finally:
        ing.stop()
    with pytest.raises(Exception, match=f"jetstream not enabled: no JetStream API answers at .*{named}"):
        _bounds(opts)


@pytest.mark.parametrize(("value", "why"), [("64MiB", "must be an integer, got '64MiB'"), ("1.5", "must be an integer, got '1.5'"),
                                            ("", "must be an integer, got ''"), ("0", "must be >= 1, got 0"),
                                            ("-1", "must be >= 1, got -1")])
def test_max_bytes_per_trigger_is_a_positive_byte_count(value: str, why: str) -> None:
    """``maxBytesPerTrigger`` bounds a micro-batch's stored bytes, 64 MiB unless given; a value
    that is no positive integer fails at ``load()`` naming the option."""
    from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxRows

    from jsspark.datasource.live_source import LiveStreamReader

    with pytest.raises(OptionError) as info:
        parse_live_read_options({"servers": URL, "stream": "ORDERS", "maxBytesPerTrigger": value})
    assert str(info.value) == f"jetstream (live): option maxBytesPerTrigger {why}"
    opts = parse_live_read_options({"servers": URL, "stream": "ORDERS"})
    assert opts.max_bytes == 64 << 20
    assert LiveStreamReader(opts).getDefaultReadLimit() == ReadMaxBytes(64 << 20)
    given = parse_live_read_options({"servers": URL, "stream": "ORDERS", "maxbytespertrigger": "1000",
                                     "maxMessagesPerTrigger": "10"})
    assert given.max_bytes == 1000
    assert LiveStreamReader(given).getDefaultReadLimit() == ReadMaxRows(10)  # and the bytes apply with it
