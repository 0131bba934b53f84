"""Query progress of a live source shows its lag: ``reportLatestOffset`` gives the origin's last
sequence and the consumer's ``num_pending`` (what the server has not delivered yet)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.live.conftest import SyncNats
from tests.live.test_crashes import fast_publish

pytestmark = [pytest.mark.nats, pytest.mark.spark]


def test_progress_reports_origin_last_seq_and_num_pending(spark: Any, server: Any, nats: SyncNats,
                                                          tmp_path: Path) -> None:
    nats.add_stream(name="PROG", subjects=["prog.>"], retention="workqueue")
    fast_publish(nats, "prog", 0, 400)
    seen: list[int] = []
    q = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", "PROG")
         .option("maxMessagesPerTrigger", "100").option("maxAckPending", "150").option("reportLatestOffset", "true")
         .option("spillDir", str(tmp_path / "spill")).load()
         .writeStream.foreachBatch(lambda df, _id: seen.append(df.count()))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    assert sum(seen) == 400
    sources = [p["sources"][0] for p in q.recentProgress if p["sources"][0].get("endOffset")]
    assert sources
    for s in sources:
        latest, end = json.loads(s["latestOffset"]), json.loads(s["endOffset"])
        assert latest["seq"] == 400  # the origin's last sequence
        # the server delivers at most maxAckPending (150) past what was acked (<= the batch start)
        start = (json.loads(s.get("startOffset") or "null") or {"seq": 0})["seq"]  # null: the first batch
        assert 400 - start - 150 <= latest["num_pending"] <= 400 - end["seq"], (s, latest)
