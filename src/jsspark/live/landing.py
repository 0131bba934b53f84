"""Land a micro-batch of origin messages in a lake stream, once, from ``foreachBatch``.

``form="mirror"`` keeps the origin's sequence and nanosecond time (``engine.ingest.store_mirrored``);
``form="source"`` stores with new sequences and a ``Nats-Stream-Source`` header
(``engine.ingest.store_sourced``). ``txn=(app_id, batch_id)`` is recorded in the same Delta commit,
so a batch Spark replays after a crash (same batch id) is skipped: together with the source's
origin-seq offsets this makes NATS -> lake exactly once.

This is the one landing implementation: the lake sink's ``form`` option
(``writeStream.format("jetstream").option("form", ...)``) calls ``land_batch`` too.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from jsspark.engine.api import BatchAck
from jsspark.engine.ingest import LANDING_FORMS, store_mirrored, store_sourced


def land_batch(lake: Any, stream: str, rows: pa.Table, *, form: str = "mirror", txn: tuple[str, int] | None = None,
               origin: str | None = None, filter_subject: str | None = None) -> BatchAck:
    """Store ``rows`` (the live source's columns) in lake stream ``stream``."""
    if form == "mirror":
        return store_mirrored(lake, stream, rows, txn=txn)
    if form == "source":
        if origin is None:
            names = set(rows.column("stream").to_pylist()) if "stream" in rows.column_names else set()
            if len(names) != 1:
                raise ValueError("land_batch(form='source') needs origin= (or rows from one origin stream)")
            origin = names.pop()
        return store_sourced(lake, stream, rows, origin=origin, filter_subject=filter_subject, txn=txn)
    raise ValueError(f"land_batch: form must be one of {LANDING_FORMS}, got {form!r}")
