"""A stream table's data files through Spark's own Parquet reader, the one Spark's Delta
connector reads them with: the delta-encoded sequence and time columns read back exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import jsspark

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("vectorized", ["true", "false"])
def test_sparks_parquet_reader_reads_the_stream_files(spark: Any, tmp_path: Path, vectorized: str) -> None:
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="F", subjects=["f.>"])
    for k in range(3):  # several commits, many rows per row group, a headered message
        lake.publish_batch("F", pa.table({"subject": [f"f.{i % 5}" for i in range(20_000)],
                                          "data": [b"%d" % (k * 20_000 + i) for i in range(20_000)]}))
    lake.publish("f.h", b"h", headers={"K": "v"})
    files = DeltaTable(lake.stream_uri("F")).file_uris()
    meta = pq.ParquetFile(files[0]).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert all("DELTA_BINARY_PACKED" in encodings[c] for c in ("seq", "ts_ns", "time")), encodings
    stored = lake.stream("F").read().sort_by("seq")
    previous = spark.conf.get("spark.sql.parquet.enableVectorizedReader")
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
    try:
        rows = spark.read.parquet(*files).select("seq", "ts_ns", "time", "subject", "data").orderBy("seq").collect()
    finally:
        spark.conf.set("spark.sql.parquet.enableVectorizedReader", previous)
    assert [r.seq for r in rows] == stored.column("seq").to_pylist() == list(range(1, 60_002))
    assert [r.ts_ns for r in rows] == stored.column("ts_ns").to_pylist()
    assert [r.time for r in rows] == [t.replace(tzinfo=None) for t in stored.column("time").to_pylist()]
    assert [(r.subject, bytes(r.data)) for r in rows[-2:]] == [("f.4", b"59999"), ("f.h", b"h")]
