"""Delivered origin messages as Arrow: the row form, the local spill files, and their reader.

Why spill files: Spark runs ``read()`` on executors from a pickled reader, so messages a
driver-side push subscription received must reach executors some other way. The driver's
stream reader appends them, in delivery order, to Arrow IPC files named by their origin
sequence range; a partition names a file and an origin-sequence range, so a retried task
re-reads exactly the same rows. Files live until Spark's checkpoint shows a later batch
committed. The directory must be visible to executors (local mode: any local path; a cluster:
a shared mount via the ``spillDir`` option), except for rows by reference (``spillReferences``,
what jobs use): their executors only count rows, and the driver-side landing commit reads the
files on the host that wrote them. A process owns one sub-directory named after its
pid; directories of dead processes are removed at start (a SIGKILLed driver leaves one).

The rows have the ``jetstream`` source schema (``datasource.schema.ARROW_SCHEMA``), so a
streaming query over a live stream looks exactly like one over a lake stream.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from jsspark.datasource.schema import ARROW_SCHEMA, HEADERS_ARROW
from jsspark.engine.headers import decode

Row = tuple[str, int, int, list[tuple[str, str]] | None, bytes, int, int]  # subject, sseq, ts_ns, hdrs, data, dseq, pending


class Pending:
    """Delivered rows not spilled yet, as columns (a delivery run appends to each at once).

    ``subjects`` and ``data`` are the wire bytes, ``headers`` the raw header blocks (``None``
    without headers): nothing is decoded per message until the rows become a record batch.
    Rows read some other way (a ``Row``) may give ``str`` subjects and header pairs."""

    __slots__ = ("data", "dseqs", "headers", "pending", "seqs", "subjects", "ts")

    def __init__(self) -> None:
        self.subjects: list[bytes | str] = []
        self.seqs: list[int] = []
        self.ts: list[int] = []
        self.headers: list[bytes | list[tuple[str, str]] | None] = []
        self.data: list[bytes] = []
        self.dseqs: list[int | None] = []
        self.pending: list[int | None] = []

    def __len__(self) -> int:
        return len(self.seqs)

    def append(self, subject: bytes | str, seq: int, ts: int, headers: bytes | list[tuple[str, str]] | None,
               data: bytes, dseq: int | None, pending: int | None) -> None:
        self.subjects.append(subject)
        self.seqs.append(seq)
        self.ts.append(ts)
        self.headers.append(headers)
        self.data.append(data)
        self.dseqs.append(dseq)
        self.pending.append(pending)

    def to_batch(self, stream: str, consumer: str | None) -> pa.RecordBatch:
        """The rows as one record batch of the source schema (``time`` is ``ts_ns`` truncated to µs)."""
        n = len(self.seqs)
        ts_arr = pa.array(self.ts, pa.int64())
        if any(h is not None for h in self.headers):
            headers = pa.array([_header_cells(h) for h in self.headers], type=HEADERS_ARROW)
        else:
            headers = pa.nulls(n, HEADERS_ARROW)
        cols = [
            pa.array([stream] * n, pa.string()),
            pa.array(self.subjects, pa.binary()).cast(pa.string()),
            pa.array(self.seqs, pa.int64()),
            pc.divide(ts_arr, 1000).cast(pa.timestamp("us", tz="UTC")),
            ts_arr,
            headers,
            pa.array(self.data, pa.binary()),
            pa.array([consumer] * n, pa.string()),
            pa.array(self.dseqs, pa.int64()),
            pa.array(self.pending, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)


def _header_cells(block: bytes | list[tuple[str, str]] | None) -> list[dict[str, str]] | None:
    """A raw header block (or its pairs) as the ``headers`` column's cell (every pair, repeats
    and order kept)."""
    if not block:
        return None
    pairs = decode(block)[0] if isinstance(block, bytes | bytearray) else block
    return [{"name": k, "value": v} for k, v in pairs] or None


def rows_to_batch(stream: str, consumer: str | None, rows: list[Row]) -> pa.RecordBatch:
    """Rows as one record batch of the source schema (``time`` is ``ts_ns`` truncated to µs)."""
    pending = Pending()
    for row in rows:
        pending.append(*row)
    return pending.to_batch(stream, consumer)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Chunk:
    """One spill file: origin sequences ``first..last`` (inclusive), ``count`` rows."""

    path: str
    first: int
    last: int
    count: int


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_spill_dir(base: str | None) -> Path:
    """This process's own spill directory under ``base``; dead processes' ones are removed."""
    root = Path(base) if base else Path(tempfile.gettempdir()) / "jsspark-live-spill"
    root.mkdir(parents=True, exist_ok=True)
    for child in root.iterdir():
        pid_text = child.name.split("-", 1)[0]
        if child.is_dir() and pid_text.isdigit() and int(pid_text) != os.getpid() and not _pid_alive(int(pid_text)):
            shutil.rmtree(child, ignore_errors=True)
    mine = root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    mine.mkdir()
    return mine


def write_chunk(directory: Path, batch: pa.RecordBatch) -> Chunk:
    """Write ``batch`` (non-empty, ascending ``seq``) as an Arrow IPC file; atomic rename so a
    reader never sees a partial file."""
    seqs = batch.column("seq")
    first, last = seqs[0].as_py(), seqs[-1].as_py()
    final = directory / f"{first:020d}-{last:020d}-{uuid.uuid4().hex[:6]}.arrow"
    tmp = final.with_suffix(".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    os.replace(tmp, final)
    return Chunk(str(final), first, last, batch.num_rows)


@dataclass(frozen=True)
class SpillPartition:
    """What one task reads: rows of ``paths`` with ``lo < seq <= hi`` (picklable, small).

    ``seqs`` (by-reference reads only): the origin sequences of those rows, so a task can emit
    one reference row per message without seeing the files."""

    paths: tuple[str, ...]
    lo: int
    hi: int
    seqs: tuple[int, ...] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        return json.dumps({"paths": list(self.paths), "lo": self.lo, "hi": self.hi, "rows": len(self.seqs or ())})

    @classmethod
    def from_json(cls, text: str) -> SpillPartition:
        d = json.loads(text)
        return cls(tuple(d["paths"]), int(d["lo"]), int(d["hi"]))


def referenced_rows(text: str) -> int:
    """How many messages a reference row's ``spill`` value stands for."""
    return int(json.loads(text)["rows"])


# By-reference rows (option ``spillReferences``, set by the job runner for server origins):
# one row per message with its origin ``seq``; the partition's ``SpillPartition`` as JSON in
# ``spill`` (with its row count) on its first row, null on the others. A lake sink with a
# landing ``form`` reads the messages from the spill files in its driver-side commit, on the
# host that wrote them, so the payloads never cross into the JVM and back. Spark still counts
# every message (``numInputRows``) and checkpoints its offsets; the job keeps only the rows
# with a reference before the sink (a JVM filter), and the commit checks it found exactly the
# referenced number of messages.
REFERENCE_DDL = "seq bigint, spill string"
REFERENCE_SCHEMA = pa.schema([pa.field("seq", pa.int64()), pa.field("spill", pa.string())])


def reference_batch(part: SpillPartition) -> pa.RecordBatch:
    """The partition's reference rows (``REFERENCE_SCHEMA``)."""
    seqs = pa.array(part.seqs or (), pa.int64())
    n = len(seqs)
    spill = pa.concat_arrays([pa.array([part.to_json()], pa.string()), pa.nulls(n - 1, pa.string())]) if n else pa.nulls(0, pa.string())
    return pa.RecordBatch.from_arrays([seqs, spill], schema=REFERENCE_SCHEMA)


def is_reference(schema: pa.Schema) -> bool:
    return schema.names == REFERENCE_SCHEMA.names


def read_references(refs: list[str], rows: int) -> Iterator[pa.RecordBatch]:
    """The messages of reference rows' ``spill`` values (``rows`` of them in all), in the source
    schema; fails, naming the files, when the spill no longer holds exactly those rows."""
    found = 0
    for text in refs:
        for batch in read_spill(SpillPartition.from_json(text)):
            found += batch.num_rows
            yield batch
    if found != rows:
        raise RuntimeError(
            f"jetstream (live): the spill files {[SpillPartition.from_json(t).paths for t in refs]} hold {found} "
            f"of the {rows} messages the batch references; nothing was stored (a restart re-reads them from "
            "the origin, where they are not acked)"
        )


def read_spill(part: SpillPartition) -> Iterator[pa.RecordBatch]:
    """The partition's rows, in origin sequence order, in the exact source schema."""
    for path in part.paths:
        with pa.memory_map(path) as source:
            table = pa.ipc.open_file(source).read_all()
        seq = table.column("seq")
        mask = pc.and_(pc.greater(seq, part.lo), pc.less_equal(seq, part.hi))
        table = table.filter(mask)
        for batch in table.to_batches():
            if batch.num_rows:
                yield batch
