"""Jobs whose mirror/source is ``external`` (an origin in another account, reached through
imports), against a nats-server with two accounts: SRC holds the origins and exports its
JetStream API, its flow control and the deliver subjects; APP, which the job connects as,
imports the API under ``$JS.src.API`` and receives deliveries only under ``deliver.src``.
The probe must ask SRC's JetStream (APP's own has no such stream), and every consumer the
reader creates must deliver under the deliver prefix, as the server's own sourcing consumer
does (``setupSourceConsumer``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.config import StreamSource
from jsspark.errors import APIError
from jsspark.jobs.origins import consumer_name, origin_connection
from jsspark.jobs.runner import Job, run_job
from jsspark.jobs.spec import Endpoint, load_job
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats]

EXTERNAL = {"api": "$JS.src.API", "deliver": "deliver.src"}
CONFIG = """
accounts {
  SRC: { jetstream: enabled, users: [{user: src, password: srcpw}],
         exports: [{service: "$JS.API.>"}, {service: "$JS.FC.>"}, {stream: "deliver.src.>"}] }
  APP: { jetstream: enabled, users: [{user: app, password: apppw}],
         imports: [{service: {account: SRC, subject: "$JS.API.>"}, to: "$JS.src.API.>"},
                   {service: {account: SRC, subject: "$JS.FC.>"}},
                   {stream: {account: SRC, subject: "deliver.src.>"}}] }
}
"""
BOUND = 60.0
JOB_BOUND = 300.0


@pytest.fixture(scope="module")
def two_accounts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    root = tmp_path_factory.mktemp("nats-accounts")
    conf = root / "accounts.conf"
    conf.write_text(CONFIG)
    with NatsServer(store_dir=root / "store", extra_args=["-c", str(conf)]) as srv:
        yield srv


@pytest.fixture(scope="module")
def src(two_accounts: NatsServer) -> Iterator[SyncNats]:
    """A client of the exporting account, which holds the origins."""
    c = SyncNats(two_accounts.url.replace("nats://", "nats://src:srcpw@"))
    try:
        yield c
    finally:
        c.close()


def app_endpoint(srv: NatsServer) -> dict[str, str]:
    return {"servers": srv.url, "user": "app", "password": "apppw"}


def publish(src: SyncNats, prefix: str, n: int) -> list[bytes]:
    data = [f"{prefix}-{i}".encode() for i in range(n)]
    src.publish_many([(f"{prefix}.{i}", d, None) for i, d in enumerate(data)])
    return data


def test_what_the_endpoint_sets_wins_over_the_external_prefixes() -> None:
    """An endpoint that names its own API or inbox keeps it (a ``domain`` next to the external
    API prefix would make the reader's options contradict each other)."""
    ext = StreamSource.model_validate({"name": "O", "external": EXTERNAL})
    url = "nats://127.0.0.1:4222"
    assert origin_connection(Endpoint(servers=url), ext) == {
        "servers": url, "apiPrefix": "$JS.src.API", "inboxPrefix": "deliver.src"}
    assert origin_connection(Endpoint(servers=url, domain="hub"), ext) == {
        "servers": url, "domain": "hub", "inboxPrefix": "deliver.src"}
    assert origin_connection(Endpoint(servers=url, options={"APIPREFIX": "$JS.x.API", "inboxprefix": "i"}), ext) == {
        "servers": url}
    assert origin_connection(Endpoint(servers=url), StreamSource(name="O")) == {"servers": url}


def test_the_probe_asks_the_origins_account_through_the_external_api(two_accounts: NatsServer,
                                                                     src: SyncNats, tmp_path: Path) -> None:
    src.add_stream(name="PQ", subjects=["pq.>"], retention="workqueue")
    publish(src, "pq", 2)
    source = {"name": "PQ", "external": EXTERNAL}
    job = {"stream": {"name": "PT", "sources": [source]}, "target": {"location": str(tmp_path / "lake")},
           "origins": {"PQ": app_endpoint(two_accounts)}, "trigger": "available_now"}

    probed = Job(load_job(job))
    probed.probe()  # no Spark: the facts come from SRC's JetStream through $JS.src.API
    (facts,) = probed._origin_facts.values()
    assert (facts.retention, facts.messages, facts.last_seq, facts.durable) == ("workqueue", 2, 2, None)
    created = src.api("STREAM.INFO.PQ")["created"]
    assert facts.identity == jsspark.engine.sourcing.identity_of(created)

    # a durable the job made before is found there too (a restart asks for its start position)
    durable = consumer_name("PT", source, [source])
    made = src.api(f"CONSUMER.CREATE.PQ.{durable}", {"stream_name": "PQ", "config": {
        "durable_name": durable, "deliver_subject": "deliver.src.x", "ack_policy": "flow_control",
        "flow_control": True, "idle_heartbeat": 1_000_000_000, "max_ack_pending": 7}})
    assert "error" not in made, made
    again = Job(load_job(job))
    again.probe()
    (facts,) = again._origin_facts.values()
    assert facts.durable is not None
    assert (facts.durable["deliver_subject"], facts.durable["max_ack_pending"]) == ("deliver.src.x", 7)

    # without external the same check asks APP's own JetStream, which has no such stream
    plain = Job(load_job({**job, "stream": {"name": "PT", "sources": [{"name": "PQ"}]}}))
    with pytest.raises(APIError) as e:
        plain.probe()
    assert e.value.err_code == 10059


@pytest.mark.spark
def test_external_sources_land_every_message_once(spark: Any, two_accounts: NatsServer, src: SyncNats,
                                                  tmp_path: Path) -> None:
    """A WorkQueue origin (read through a durable, acked after the landing commit) and a Limits
    one (an ordered consumer), both in SRC, sourced by a job connected as APP."""
    src.add_stream(name="WQ", subjects=["wq.>"], retention="workqueue")
    src.add_stream(name="LIM", subjects=["lim.>"])
    want = publish(src, "wq", 5) + publish(src, "lim", 4)
    wait_for(lambda: src.state("WQ")["messages"] == 5 and src.state("LIM")["messages"] == 4, BOUND,
             "the origins to store the publishes")
    loc = str(tmp_path / "lake")
    sources = [{"name": "WQ", "external": EXTERNAL}, {"name": "LIM", "external": EXTERNAL}]
    job = run_job({"stream": {"name": "INTO", "sources": sources}, "target": {"location": loc},
                   "origins": {"*": app_endpoint(two_accounts)}, "trigger": "available_now"}, spark)
    assert job.await_termination(JOB_BOUND), job.progress()
    assert all(p["error"] is None for p in job.progress()), job.progress()

    got = [r["data"] for r in jsspark.connect(loc).stream("INTO").read().to_pylist()]
    assert sorted(got) == sorted(want)  # each once: the deliveries reached APP under deliver.src
    wait_for(lambda: src.state("WQ")["messages"] == 0, BOUND, "the work queue to be drained",
             lambda: str(src.state("WQ")))  # the acks (flow-control replies) reached SRC
    (durable,) = src.api("CONSUMER.LIST.WQ")["consumers"]
    assert durable["name"] == consumer_name("INTO", sources[0], sources)
    assert durable["config"]["deliver_subject"].startswith("deliver.src.")


def test_acks_that_never_reach_the_origin_stop_the_reader_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``$JS.FC.>`` imported, the reader's acks (flow-control replies) never reach the
    origin's account: every message lands, the WorkQueue keeps them all, and each reset the
    reader made for acks not taken changed nothing (it reset every 10 s for good, its warning
    blaming a reset by another process). After a few resets with the ack floor unmoved it
    stops, saying why."""
    from jsspark.live import ingestor as live
    from jsspark.live.ingestor import Ingestor, LiveSourceError
    from jsspark.live.options import parse_live_read_options

    monkeypatch.setattr(live, "STALL_SECONDS", 2.0)  # checks while no delivery comes (heartbeats: 1 s)
    monkeypatch.setattr(live, "ACKS_LOST_RESETS", 1)
    conf = tmp_path / "no-fc.conf"
    conf.write_text(CONFIG.replace(', {service: "$JS.FC.>"}', "").replace('{service: {account: SRC, subject: "$JS.FC.>"}},', ""))
    assert "$JS.FC" not in conf.read_text()
    with NatsServer(store_dir=tmp_path / "store", extra_args=["-c", str(conf)]) as srv:
        src = SyncNats(srv.url.replace("nats://", "nats://src:srcpw@"))
        try:
            src.add_stream(name="NOFC", subjects=["nofc.>"], retention="workqueue")
            publish(src, "nofc", 5)
            ing = Ingestor(parse_live_read_options({
                "servers": srv.url, "user": "app", "password": "apppw", "stream": "NOFC", "consumer": "lake",
                "apiPrefix": EXTERNAL["api"], "inboxPrefix": EXTERNAL["deliver"], "spillDir": str(tmp_path / "spill")}))
            ing.start(None)
            try:
                wait_for(lambda: ing.latest(0, None, None) == 5, BOUND, "the five messages buffered")
                ing.commit(5)  # landed: the reader acks them, and the acks go nowhere

                def stopped() -> bool:
                    try:
                        ing.latest(5, None, None)
                    except LiveSourceError as e:
                        stopped.error = str(e)  # type: ignore[attr-defined]
                        return True
                    return False

                wait_for(stopped, BOUND, "the reader to give up on acks that never arrive")
                assert "takes none of our acks" in stopped.error and "$JS.FC.>" in stopped.error  # type: ignore[attr-defined]
                assert ing.ack_repairs == 1  # one reset tried, then it stopped
                assert src.state("NOFC")["messages"] == 5  # nothing lost: the origin kept them
            finally:
                ing.stop()
        finally:
            src.close()
