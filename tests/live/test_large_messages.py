"""Large messages (up to the server's max_payload) through the live reader: what it holds in
memory is bounded by bytes, not only by ``chunkRows`` rows. No Spark."""

from __future__ import annotations

from pathlib import Path

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
