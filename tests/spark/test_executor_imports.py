"""What a Spark Python worker imports to run a task: the reader and partitions (or the writer
and rows) pickled as Spark ships them (cloudpickle), then run in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

import jsspark
from jsspark.datasource.source import JetStreamDataSource
from jsspark.live.spill import Pending, SpillPartition, write_chunk

# What planning needs and a task must not pay for: the config models, option parsing,
# the planner and the engine's table code.
DRIVER_ONLY = ("pydantic", "jsspark.config", "jsspark.datasource.options", "jsspark.datasource.planning",
               "jsspark.engine.table", "jsspark.engine.lake")

# What neither a live read task nor a sink's write task may import: the above but option
# parsing (its plain dataclasses ``LiveReadOptions``/``WriteOptions`` ride with the reader and
# writer), and the engine's storing, the ingestor and the NATS client.
DRIVER_ONLY_LIVE = (*(m for m in DRIVER_ONLY if m != "jsspark.datasource.options"),
                    "jsspark.engine.ingest", "jsspark.live.ingestor", "nats")

TASK = """
import json, sys
from pyspark import cloudpickle
kind, fn, inputs = cloudpickle.loads(open(sys.argv[1], "rb").read())
if kind == "read":
    rows = sum(b.num_rows for p in inputs for b in fn(p))
else:
    rows = fn(iter(inputs)).rows
print(json.dumps({"rows": rows, "modules": sorted(sys.modules)}))
"""


def _run_task(pickled: Path) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", TASK, str(pickled)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _task(tmp_path: Path, kind: str, fn: object, inputs: list[object]) -> dict[str, object]:
    pickled = tmp_path / f"{kind}.pickle"
    pickled.write_bytes(cloudpickle.dumps((kind, fn, inputs)))
    return _run_task(pickled)


def test_a_read_task_imports_no_driver_side_code(tmp_path: Path) -> None:
    loc = str(tmp_path / "lake")
    lake = jsspark.connect(loc)
    lake.add_stream(name="ORDERS", subjects=["orders.>"])
    lake.publish_batch("ORDERS", pa.table({"subject": [f"orders.{i % 3}" for i in range(50)],
                                           "data": [b"x"] * 50}))
    source = JetStreamDataSource({"path": loc, "stream": "ORDERS", "filter_subject": "orders.1"})
    for reader in (source.reader(source.schema()), source.streamReader(source.schema())):
        if hasattr(reader, "initialOffset"):
            start = reader.initialOffset()
            parts = reader.partitions(start, reader.latestOffset(start, None))
        else:
            parts = reader.partitions()
        task = _task(tmp_path, "read", reader.read, list(parts))

        assert task["rows"] == 17  # orders.1: i = 1, 4, ..., 49
        loaded = [m for m in task["modules"] if m.startswith(DRIVER_ONLY)]
        assert loaded == [], f"{type(reader).__name__}: a read task imported {loaded}"


def test_a_live_read_task_imports_no_driver_side_code(tmp_path: Path) -> None:
    rows = Pending()
    for seq in range(1, 11):
        rows.append(f"orders.{seq}".encode(), seq, 1_000 + seq, None, b"x", seq, 10 - seq)
    chunk = write_chunk(tmp_path, rows.to_batch("ORDERS", "c"))
    source = JetStreamDataSource({"servers": "nats://127.0.0.1:4222", "stream": "ORDERS", "spillDir": str(tmp_path)})
    reader = source.streamReader(source.schema())  # parses only: no connection before a planning call

    task = _task(tmp_path, "read", reader.read, [InputPartition(SpillPartition((chunk.path,), 3, 10))])

    assert task["rows"] == 7
    loaded = [m for m in task["modules"] if m.startswith(DRIVER_ONLY_LIVE)]
    assert loaded == [], f"a live read task imported {loaded}"


def test_a_sink_write_task_imports_no_driver_side_code(tmp_path: Path) -> None:
    loc = str(tmp_path / "lake")
    jsspark.connect(loc).add_stream(name="ORDERS", subjects=["orders.>"])
    source = JetStreamDataSource({"path": loc, "stream": "ORDERS", "checkpointLocation": str(tmp_path / "ck")})
    writer = source.streamWriter(StructType([StructField("subject", StringType()), StructField("data", BinaryType())]), False)
    batch = pa.record_batch({"subject": [f"orders.{i}" for i in range(12)], "data": [b"x"] * 12})

    task = _task(tmp_path, "write", writer.write, [batch])

    assert task["rows"] == 12
    loaded = [m for m in task["modules"] if m.startswith(DRIVER_ONLY_LIVE)]
    assert loaded == [], f"a sink write task imported {loaded}"
