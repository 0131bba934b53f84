"""A publish the sink cannot get acked fails its task with an error that names the subject (nats-py's
own errors name none): no stream captures it, no PubAck within ``publishTimeout``, not a valid
subject, or no subject at all. The server's refusals stay its ``APIError`` (code, err_code,
text). Nothing published before the failure is lost: each was acked."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from jsspark.errors import APIError
from jsspark.live.client import PublishFailed
from jsspark.live.options import parse_live_write_options
from jsspark.live.publisher import _run
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats

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


def test_the_servers_refusal_stays_its_own_error(server: NatsServer, target: SyncNats) -> None:
    with pytest.raises(APIError) as info:
        publish(server, [{"subject": "errs.x", "data": b"x"}], stream="OTHER")
    assert (info.value.code, info.value.err_code, info.value.description) == (
        400, 10060, "expected stream does not match")

