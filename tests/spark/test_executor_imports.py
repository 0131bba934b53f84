"""What a Spark Python worker imports to run a read task: the reader and partition pickled as
Spark ships them (cloudpickle), then read in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from pyspark import cloudpickle

import jsspark
from jsspark.datasource.source import JetStreamDataSource

# What planning needs and a task must not pay for: the config models, option parsing,
# the planner and the engine's table code.
DRIVER_ONLY = ("pydantic", "jsspark.config", "jsspark.datasource.options", "jsspark.datasource.planning",
               "jsspark.engine.table", "jsspark.engine.lake")

TASK = """
import json, sys
from pyspark import cloudpickle
read, partitions = cloudpickle.loads(open(sys.argv[1], "rb").read())
rows = [b.num_rows for p in partitions for b in read(p)]
print(json.dumps({"rows": sum(rows), "modules": sorted(sys.modules)}))
"""


def _run_task(pickled: Path) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", TASK, str(pickled)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


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
        pickled = tmp_path / "task.pickle"
        pickled.write_bytes(cloudpickle.dumps((reader.read, parts)))

        task = _run_task(pickled)

        assert task["rows"] == 17  # orders.1: i = 1, 4, ..., 49
        loaded = [m for m in task["modules"] if m.startswith(DRIVER_ONLY)]
        assert loaded == [], f"{type(reader).__name__}: a read task imported {loaded}"
