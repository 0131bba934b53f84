"""Large messages (up to the server's max_payload) through the live reader: what it holds in
memory, and what one micro-batch takes (``maxBytesPerTrigger``), are bounded by bytes, not only
by ``chunkRows`` rows and ``maxAckPending`` messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jsspark.live import ingestor as I
from jsspark.live.ingestor import Ingestor
from jsspark.live.options import parse_live_read_options
from jsspark.live.spill import read_spill
from jsspark.nats_server import NatsServer
from tests.live.conftest import SyncNats
from tests.live.test_durable_source import wait_for

pytestmark = [pytest.mark.nats]

MB = 1_000_000
SIZE = 900_000  # under the server's default max_payload (1 MiB) with the header
BOUND = 4 << 20  # CHUNK_BYTES for the test, so that a few dozen messages cross it


@pytest.mark.parametrize("mode", ["ordered", "server"])
def test_the_receive_buffer_spills_by_bytes(
    server: NatsServer, nats: SyncNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Before any batch is planned (a trigger interval), the messages received are on disk but
    for at most ``CHUNK_BYTES`` of them: 5,000 rows (``chunkRows``) of 1 MiB held in memory
    would be 5 GiB (and over 2 GiB, the spill failed to build its Arrow column)."""
    monkeypatch.setattr(I, "CHUNK_BYTES", BOUND, raising=False)
    stream, n = f"LARGE_{mode.upper()}", 30
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    sent = [bytes([i]) * SIZE for i in range(n)]
    nats.publish_many([(f"{stream.lower()}.{i % 3}", d, {"I": str(i)}) for i, d in enumerate(sent)], window=5)
    spill = tmp_path / mode
    ing = Ingestor(parse_live_read_options({"servers": server.url, "stream": stream, "spillDir": str(spill),
                                            "consumerMode": mode}))
    ing.start(None)
    try:
        wait_for(lambda: len(ing._seqs) == n, 60, f"{n} messages received")
        files = list(spill.rglob("*.arrow"))
        on_disk = sum(f.stat().st_size for f in files)
        assert on_disk >= n * SIZE - BOUND - SIZE, f"{len(files)} spill files, {on_disk} bytes"
        assert ing._rows.nbytes < BOUND + SIZE
        assert max(f.stat().st_size for f in files) < BOUND + 2 * SIZE
        end = ing.latest(0, None, None)
        assert end == n
        table = pa.Table.from_batches([b for p in ing.plan(0, end) for b in read_spill(p)])
        assert table.column("seq").to_pylist() == list(range(1, n + 1))
        assert table.column("data").to_pylist() == sent
        assert [h[0]["value"] for h in table.column("headers").to_pylist()] == [str(i) for i in range(n)]
    finally:
        ing.stop()


def _filled(server: NatsServer, nats: SyncNats, stream: str, sizes: list[int]) -> list[bytes]:
    """A WorkQueue ``stream`` holding one message of each size (no headers), its payloads."""
    nats.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], retention="workqueue")
    sent = [bytes([i % 256]) * size for i, size in enumerate(sizes)]
    nats.publish_many([(f"{stream.lower()}.{i % 3}", d, None) for i, d in enumerate(sent)], window=5)
    return sent


def test_a_paced_batch_full_by_bytes_goes_at_once(server: NatsServer, nats: SyncNats, tmp_path: Path) -> None:
    """A job under an interval trigger paces its server origin (minMessagesPerTrigger =
    maxAckPending): a batch full by ``maxBytesPerTrigger`` goes at once, as one full by messages
    does, and so does the tail right after it; it must not wait out ``maxTriggerDelay`` for
    messages it will never take. Each batch holds about 4 MiB: four messages of 1 MB."""
    n, bound = 12, 4 << 20
    _filled(server, nats, "PACEDBYTES", [MB] * n)
    ing = Ingestor(parse_live_read_options({"servers": server.url, "stream": "PACEDBYTES",
                                            "spillDir": str(tmp_path / "spill"), "minMessagesPerTrigger": "100",
                                            "maxTriggerDelay": "1 hour", "maxBytesPerTrigger": str(bound)}))
    ing.start(None)
    try:
        wait_for(lambda: len(ing._seqs) == n, 60, f"{n} messages received")
        ends, start = [], 0
        for _ in range(3):
            start = ing.latest(start, None, None, bound)
            ends.append(start)
        assert ends == [4, 8, 12]
        table = pa.Table.from_batches([b for p in ing.plan(4, 8) for b in read_spill(p)])
        assert table.column("seq").to_pylist() == [5, 6, 7, 8]
    finally:
        ing.stop()


def _run(spark: Any, server: NatsServer, stream: str, tmp_path: Path, **opts: str) -> list[pa.Table]:
    """An AvailableNow query of ``stream``; the rows of each batch that had any."""
    batches: list[pa.Table] = []
    reader = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", stream)
              .option("spillDir", str(tmp_path / "spill")))
    for k, v in opts.items():
        reader = reader.option(k, v)
    q = (reader.load().writeStream
         .foreachBatch(lambda df, _id: batches.append(df.select("seq", "data").toArrow().sort_by("seq")))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    return [b for b in batches if b.num_rows]


@pytest.mark.spark
@pytest.mark.parametrize(("opts", "most"), [({}, 4), ({"maxMessagesPerTrigger": "3"}, 3)])
def test_a_micro_batch_holds_about_max_bytes_per_trigger(spark: Any, server: NatsServer, nats: SyncNats,
                                                         tmp_path: Path, opts: dict[str, str], most: int) -> None:
    """20 messages of 1 MB with maxBytesPerTrigger 4 MiB: AvailableNow reads them all, in
    batches of at most 4 (4 MB; 5 would be over), each once and in order, and the WorkQueue is
    drained. With maxMessagesPerTrigger too, both bound a batch. Before, a batch took every
    message delivered (up to maxAckPending, 200,000), whatever their size."""
    stream = f"BYTES{most}"
    sent = _filled(server, nats, stream, [MB] * 20)
    batches = _run(spark, server, stream, tmp_path, maxBytesPerTrigger=str(4 << 20), **opts)
    assert [b.num_rows for b in batches if b.num_rows > most] == []
    assert len(batches) >= 20 // most
    rows = pa.concat_tables(batches)
    assert rows.column("seq").to_pylist() == list(range(1, 21))
    assert rows.column("data").to_pylist() == sent
    wait_for(lambda: nats.state(stream)["messages"] == 0, 30, "the work queue to be drained")


@pytest.mark.spark
def test_a_message_larger_than_max_bytes_per_trigger_still_lands(spark: Any, server: NatsServer, nats: SyncNats,
                                                                 tmp_path: Path) -> None:
    """The bound is soft: a batch holds at least one message, so one larger than the bound goes
    alone, and the query gets past it; small ones around it share batches within the bound."""
    sizes = [SIZE, 10, SIZE, 10, 10, SIZE]
    sent = _filled(server, nats, "HUGE", sizes)
    batches = _run(spark, server, "HUGE", tmp_path, maxBytesPerTrigger="100000")
    seqs = [b.column("seq").to_pylist() for b in batches]
    assert [q for b in seqs for q in b] == list(range(1, 7))
    for b in seqs:  # the large ones alone; the others together within the bound
        assert len(b) == 1 or all(sizes[q - 1] == 10 for q in b), seqs
    assert [1] in seqs and [3] in seqs and [6] in seqs
    assert pa.concat_tables(batches).column("data").to_pylist() == sent


@pytest.mark.spark
def test_a_batch_run_again_reads_the_end_its_offset_log_holds(spark: Any, server: NatsServer, nats: SyncNats,
                                                             tmp_path: Path) -> None:
    """Exactly once: a batch that failed is run again from the end Spark's offset log holds,
    not measured again, though the query now runs with another ``maxBytesPerTrigger``; the
    batches after it take the new bound."""
    _filled(server, nats, "REDO", [MB] * 12)
    seen: list[list[int]] = []

    def batch(df: Any, batch_id: int) -> None:
        seqs = sorted(df.select("seq").toArrow().column("seq").to_pylist())
        if batch_id == 1 and not any(s == seqs for s in seen):
            seen.append(seqs)
            raise RuntimeError("the sink fails batch 1 once")
        if seqs:
            seen.append(seqs)

    def run(bound: int) -> Any:
        q = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", "REDO")
             .option("spillDir", str(tmp_path / "spill")).option("maxBytesPerTrigger", str(bound)).load()
             .writeStream.foreachBatch(batch).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(180)
        except Exception as e:  # the query failed: Spark's StreamingQueryException
            return e
        return q.exception()

    assert "fails batch 1 once" in str(run(4 << 20))
    first, failed = seen  # each as many as had come when it was planned, 4 at most
    assert len(failed) > 1 and len(first) + len(failed) <= 8, seen
    assert run(1) is None
    assert seen[2:] == [failed] + [[q] for q in range(failed[-1] + 1, 13)]
    assert first + failed == list(range(1, failed[-1] + 1))
    wait_for(lambda: nats.state("REDO")["messages"] == 0, 30, "the work queue to be drained")
