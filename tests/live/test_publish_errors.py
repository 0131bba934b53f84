"""A publish the sink cannot get acked fails its task with an error that names the subject (nats-py's
own errors name none): no stream captures it, no PubAck within ``publishTimeout``, not a valid
subject, or no subject at all. The server's refusals stay its ``APIError`` (code, err_code,
text). Nothing published before the failure is lost: each was acked."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from jsspark.errors import APIError
from jsspark.live import bulk_publish
from jsspark.live.client import PublishFailed
from jsspark.live.options import parse_live_write_options
from jsspark.live.publisher import _run
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.paused_server import PausedServer

pytestmark = [pytest.mark.nats]


def publish(server: NatsServer, rows: list[dict[str, Any]], **options: str) -> Any:
    opts = parse_live_write_options({"servers": server.url, **options})
    return _run(opts, iter([pa.RecordBatch.from_pylist(rows, pa.schema([("subject", pa.string()),
                                                                         ("data", pa.binary())]))]))


@pytest.fixture
def target(nats: SyncNats) -> SyncNats:
    nats.add_stream(name="ERRS", subjects=["errs.>"])
    return nats


def test_no_stream_captures_the_subject(server: NatsServer, target: SyncNats) -> None:
    rows = [{"subject": "errs.ok", "data": b"1"}, {"subject": "elsewhere.x", "data": b"2"}]
    with pytest.raises(PublishFailed) as info:
        publish(server, rows, maxInFlight="1")
    assert str(info.value) == ("jetstream (live) sink: no JetStream stream captures subject 'elsewhere.x' on the "
                               "server (no responders)")
    assert target.state("ERRS")["messages"] == 1  # the acked one stays


def test_no_pub_ack_within_the_publish_timeout(server: NatsServer, target: SyncNats) -> None:
    async def listen_silently() -> Any:  # a core subscriber: the request has a responder, never an answer
        return await target.nc.subscribe("silent.x")

    sub = target.run(listen_silently())
    with pytest.raises(PublishFailed) as info:
        publish(server, [{"subject": "silent.x", "data": b"x"}], publishTimeout="0.3")
    assert str(info.value) == "jetstream (live) sink: no PubAck for a publish to 'silent.x' within publishTimeout (0.3 s)"
    target.run(sub.unsubscribe())


def test_an_invalid_or_missing_subject(server: NatsServer, target: SyncNats) -> None:
    with pytest.raises(PublishFailed) as info:
        publish(server, [{"subject": "errs a", "data": b"x"}])
    assert str(info.value) == "jetstream (live) sink: 'errs a' is not a valid subject to publish to"
    with pytest.raises(PublishFailed) as info:
        publish(server, [{"subject": None, "data": b"x"}])
    assert str(info.value) == "jetstream (live) sink: a row has no subject and no subject option is set"
    assert publish(server, [{"subject": None, "data": b"x"}], subject="errs.default").published == 1


def test_a_column_of_a_type_it_cannot_publish_fails_naming_it(server: NatsServer, target: SyncNats) -> None:
    """An int ``data`` went out as that many zero bytes; ``struct<k,v>`` headers failed on a key."""
    opts = parse_live_write_options({"servers": server.url})
    before = target.state("ERRS")["messages"]
    cases = {
        r"column 'data' has type int64, which is not binary or string": pa.record_batch(
            {"subject": ["errs.a"], "data": pa.array([3], pa.int64())}),
        r"column 'headers' has type list<item: struct<k: string, v: string>>, which is not message headers": (
            pa.record_batch({"subject": ["errs.a"], "headers": pa.array([[{"k": "K", "v": "v"}]])})),
    }
    for message, batch in cases.items():
        with pytest.raises(RuntimeError, match=r"^jetstream \(live\) sink: ValueError: " + message):
            _run(opts, iter([batch]))
    assert target.state("ERRS")["messages"] == before


def test_the_servers_refusal_stays_its_own_error(server: NatsServer, target: SyncNats) -> None:
    with pytest.raises(APIError) as info:
        publish(server, [{"subject": "errs.x", "data": b"x"}], stream="OTHER")
    assert (info.value.code, info.value.err_code, info.value.description) == (
        400, 10060, "expected stream does not match")



def test_a_reply_that_is_no_pub_ack_is_not_counted_as_stored(server: NatsServer, target: SyncNats) -> None:
    """A core NATS subscriber that answers requests on the subject is no stream: its reply has
    no ``stream`` and ``seq``, so the message was stored nowhere."""
    async def answer_everything() -> Any:
        async def reply(msg: Any) -> None:
            await msg.respond(b"{}")
        return await target.nc.subscribe("core.x", cb=reply)

    sub = target.run(answer_everything())
    try:
        with pytest.raises(PublishFailed) as info:
            publish(server, [{"subject": "core.x", "data": b"x"}])
    finally:
        target.run(sub.unsubscribe())
    assert str(info.value) == ("jetstream (live) sink: the reply to a publish to 'core.x' is not a JetStream PubAck "
                               "(a core NATS subscriber answered, not a stream): b'{}'")


def test_a_message_over_max_payload_with_its_headers_fails_naming_it(server: NatsServer, target: SyncNats) -> None:
    """The server counts the header block with the payload against ``max_payload`` and resets
    the connection of a client that sends more (nats-py checks the payload alone, and its
    request then just times out); the sink refuses such a row itself, saying why."""
    import nats

    limit = target.nc.max_payload
    data = b"x" * (limit - 10)  # fits alone; not with the Nats-Msg-Id header the row gets

    async def raw_request() -> bool:  # what the server does with it
        async def quiet(e: Exception) -> None:
            """The reset it gets is what this looks at."""

        nc = await nats.connect(server.url, max_reconnect_attempts=0, error_cb=quiet)
        with contextlib.suppress(Exception):
            await nc.request("errs.big", data, headers={"Nats-Msg-Id": "ERRS:1"}, timeout=2)
        closed = nc.is_closed
        await nc.close()
        return closed

    before = target.state("ERRS")["messages"]
    assert target.run(raw_request())  # the server dropped that connection
    assert target.state("ERRS")["messages"] == before  # and stored nothing
    rows = [{"subject": "errs.ok", "data": b"1", "stream": "O", "seq": 1},
            {"subject": "errs.big", "data": data, "stream": "O", "seq": 2}]
    opts = parse_live_write_options({"servers": server.url, "maxInFlight": "1"})
    schema = pa.schema([("subject", pa.string()), ("data", pa.binary()), ("stream", pa.string()), ("seq", pa.int64())])
    with pytest.raises(PublishFailed) as info:
        _run(opts, iter([pa.RecordBatch.from_pylist(rows, schema)]))
    assert str(info.value) == (
        f"jetstream (live) sink: a message to 'errs.big' of {limit + 20} bytes (header block 30, data {limit - 10}) "
        f"exceeds the server's max_payload of {limit} bytes (Maximum Payload Violation)")
    assert target.state("ERRS")["messages"] == before + 1  # the row before it was acked and stays


def test_a_msg_id_column_the_dataframe_lacks_fails_at_the_start(server: NatsServer) -> None:
    """Without it every row would go without an id, and a replayed batch would land twice."""
    from jsspark.datasource.options import OptionError
    from jsspark.live.publisher import live_writer

    with pytest.raises(OptionError) as info:
        live_writer({"servers": server.url, "msgIdColumn": "order_id"}, True, ["subject", "data", "orderid"])
    assert str(info.value) == ("jetstream (live) sink: option msgIdColumn names column 'order_id', which the "
                               "DataFrame does not have (its columns: subject, data, orderid)")
    assert live_writer({"servers": server.url, "msgIdColumn": "orderid"}, True, ["subject", "data", "orderid"])


@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "rows"])
def test_a_stalled_server_fails_the_publish_on_time_and_a_retry_lands_each_once(
        tmp_path: Any, bulk: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """nats-server paused (SIGSTOP) while a task publishes 60 MB: it reads nothing more, so
    nats-py's buffer passes its max pending size and its writes wait for a drain that never
    comes. The task still fails within publishTimeout of its first unanswered message, naming
    it, without waiting for that drain when it closes; once the server resumes, the retry Spark
    makes stores every message exactly once (the ids drop what landed before)."""
    n, timeout = 1000, 2.0
    batch = pa.RecordBatch.from_pydict({"subject": [f"stall.{i}" for i in range(n)],
                                        "data": [b"x" * 60_000] * n,
                                        "stream": ["O"] * n, "seq": list(range(1, n + 1))})
    if not bulk:
        monkeypatch.setattr(bulk_publish, "client_class", lambda base: None)
    with NatsServer(store_dir=tmp_path) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        api = SyncNats(srv.url)
        api.add_stream(name="STALL", subjects=["stall.>"], duplicate_window=120_000_000_000)
        opts = parse_live_write_options({"servers": srv.url, "publishTimeout": f"{timeout:g}"})
        with contextlib.closing(api), PausedServer(pid, timeout + 30) as stall:

            def paused_mid_way() -> Iterator[pa.RecordBatch]:
                """The task's batches: the first 100 rows, then (each batch is answered before the
                next is taken) the server paused, then the other 900 (54 MB, past nats-py's buffer)."""
                yield batch.slice(0, 100)
                stall.pause()
                yield batch.slice(100)

            with pytest.raises(PublishFailed) as info:
                _run(opts, paused_mid_way())
            took = stall.failed()
            assert str(info.value).startswith("jetstream (live) sink: no PubAck for a publish to 'stall.")
            assert str(info.value).endswith(" within publishTimeout (2 s)")
            assert took < timeout + 10
            retry = _run(opts, iter([batch]))
            assert retry.published == n
            state = api.state("STALL")
            assert (state["messages"], state["num_subjects"]) == (n, n)
