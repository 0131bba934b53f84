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

import numpy as np
import pyarrow as pa

from jsspark.engine.api import BatchAck
from jsspark.engine.ingest import LANDING_FORMS, store_mirrored, store_sourced


def batch_lag(rows: pa.Table) -> int | None:
    """Origin messages still pending after the batch: the ``num_pending`` of its newest row."""
    if "num_pending" not in rows.column_names or not rows.num_rows:
        return None
    last = int(np.argmax(rows.column("seq").to_numpy()))
    value = rows.column("num_pending")[last].as_py()
    return None if value is None else int(value)


def land_batch(lake: Any, stream: str, rows: pa.Table, *, form: str = "mirror", txn: tuple[str, int] | None = None,
               origin: Any = None, filter_subject: str | None = None, identity: str | None = None) -> BatchAck:
    """Store ``rows`` (the live or lake source's columns) in lake stream ``stream``. ``origin``:
    the mirror's or source's ``StreamSource`` (JSON dict, model or name); by default the target
    stream's own ``mirror``, or for a source the one origin the rows came from. ``identity``:
    the origin's creation-time hash for ``Nats-Stream-Source`` (``engine.sourcing``)."""
    lag = batch_lag(rows)
    if form == "mirror":
        return store_mirrored(lake, stream, rows, txn=txn, mirror=origin, lag=lag)
    if form == "source":
        if origin is None:
            names = set(rows.column("stream").to_pylist()) if "stream" in rows.column_names else set()
            if len(names) != 1:
                raise ValueError("land_batch(form='source') needs origin= (or rows from one origin stream)")
            name = names.pop()
            configured = [s for s in lake.stream(stream).config.sources or () if s.name == name]
            origin = configured[0] if len(configured) == 1 else name
        return store_sourced(lake, stream, rows, origin=origin, filter_subject=filter_subject, identity=identity,
                             txn=txn, lag=lag)
    raise ValueError(f"land_batch: form must be one of {LANDING_FORMS}, got {form!r}")
