"""Delivered origin messages as Arrow: the row form, the spill files, and their reader.

Why spill files: Spark runs ``read()`` on executors from a pickled reader, so messages a
driver-side push subscription received must reach executors some other way. The driver's
stream reader appends them, in delivery order, to Arrow IPC files named by their origin
sequence range; a partition names a file and an origin-sequence range, so a retried task
re-reads exactly the same rows. Files live until Spark's checkpoint shows a later batch
committed (and the directory until the reader stops).

Where (option ``spillDir``, default a ``jsspark-live-spill`` folder in the driver's temp dir):
a local path or ``file://`` URI, or an object-store URI (``s3://``, ``s3a://``, ``gs://``,
``az://``, ``abfss://``, ...; ``OBJECT_STORE_SCHEMES``) read and written through delta-rs's own
object store (``deltalake.fs.DeltaStorageHandler``) with the reader's ``storage.<key>`` options,
the lake source's. Executors must see the place under the same name: any local path in local
mode; on a cluster a shared mount or an object store. Rows by reference (``spillReferences``,
what jobs use) are read by the driver-side landing commit instead, with the sink's storage
options. Locally a file is written aside and renamed; on an object store the final name is put
once (a put is atomic), so no reader ever sees a partial file. A ``SpillPartition`` carries the
storage options to the executors (pickled, never in its ``repr`` or JSON).

Each reading process owns one sub-directory ``<host>-<pid>-<random>``, unique across the hosts
sharing a ``spillDir``, removed when the reader stops. A SIGKILLed driver leaves its directory
behind: at start a reader removes those of dead processes *of its own host* (other hosts' pids
mean nothing here). On an object store that is one listing of the ``spillDir`` prefix; a
directory orphaned by a driver that never comes back to the same host (a terminated cluster
node) stays until removed by hand or by a bucket lifecycle rule on the prefix (the files are
only needed until their batch commits, so an expiry of a day is safe).

The rows have the ``jetstream`` source schema (``datasource.schema.ARROW_SCHEMA``), so a
streaming query over a live stream looks exactly like one over a lake stream.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from jsspark.datasource.redaction import redact_storage
from jsspark.datasource.schema import ARROW_SCHEMA, HEADERS_ARROW
from jsspark.engine.files import local_root, place
from jsspark.engine.headers import NotVectorized, decode, decode_column
from jsspark.errors import LocationError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

Row = tuple[str, int, int, list[tuple[str, str]] | None, bytes, int, int]  # subject, sseq, ts_ns, hdrs, data, dseq, pending


class Pending:
    """Delivered rows not spilled yet, in delivery order: parts already in columns (a run of
    deliveries cut out of the wire as Arrow arrays, ``add_part``), and rows appended one at a
    time (``append``), sealed into a part whenever a part follows them.

    Appended ``subjects`` and ``data`` are the wire bytes, ``headers`` the raw header blocks
    (``None`` without headers): nothing is decoded per message until the rows become a part.
    Rows read some other way (a ``Row``) may give ``str`` subjects and header pairs.
    ``nbytes``: the payloads and headers held, what a buffer of large messages is bounded by."""

    __slots__ = ("_parts", "_sealed", "data", "dseqs", "headers", "nbytes", "pending", "seqs", "subjects", "ts")

    def __init__(self) -> None:
        self._parts: list[list[pa.Array]] = []  # per part: subject, seq, ts_ns, headers, data, dseq, pending
        self._sealed = 0  # rows in _parts
        self.nbytes = 0
        self.subjects: list[bytes | str] = []
        self.seqs: list[int] = []
        self.ts: list[int] = []
        self.headers: list[bytes | list[tuple[str, str]] | None] = []
        self.data: list[bytes] = []
        self.dseqs: list[int | None] = []
        self.pending: list[int | None] = []

    def __len__(self) -> int:
        return self._sealed + len(self.seqs)

    def append(self, subject: bytes | str, seq: int, ts: int, headers: bytes | list[tuple[str, str]] | None,
               data: bytes, dseq: int | None, pending: int | None) -> None:
        self.subjects.append(subject)
        self.seqs.append(seq)
        self.ts.append(ts)
        self.headers.append(headers)
        self.data.append(data)
        self.dseqs.append(dseq)
        self.pending.append(pending)
        self.nbytes += len(data) + (len(headers) if isinstance(headers, bytes | bytearray) else 0)

    def add_part(self, subjects: pa.Array, seqs: np.ndarray, ts: np.ndarray, headers: pa.Array,
                 data: pa.Array, dseqs: np.ndarray, pending: np.ndarray) -> None:
        """Rows already in columns, after those held: ``subjects`` as strings, ``headers`` as
        the column's cells (``header_cells``), ``data`` as binary, the numbers as int64 arrays."""
        self._seal()
        self._parts.append([subjects, pa.array(seqs, pa.int64()), pa.array(ts, pa.int64()), headers, data,
                            pa.array(dseqs, pa.int64()), pa.array(pending, pa.int64())])
        self._sealed += len(seqs)
        self.nbytes += data.nbytes + headers.nbytes

    def _seal(self) -> None:
        """The appended rows as a part."""
        n = len(self.seqs)
        if not n:
            return
        headers = header_cells(self.headers)
        self._parts.append([pa.array(self.subjects, pa.binary()).cast(pa.string()), pa.array(self.seqs, pa.int64()),
                            pa.array(self.ts, pa.int64()), headers, pa.array(self.data, pa.binary()),
                            pa.array(self.dseqs, pa.int64()), pa.array(self.pending, pa.int64())])
        self._sealed += n
        for column in (self.subjects, self.seqs, self.ts, self.headers, self.data, self.dseqs, self.pending):
            column.clear()

    def to_batch(self, stream: str, consumer: str | None) -> pa.RecordBatch:
        """The rows as one record batch of the source schema (``time`` is ``ts_ns`` truncated to µs)."""
        self._seal()
        n = self._sealed
        if len(self._parts) == 1:
            subjects, seqs, ts_arr, headers, data, dseqs, pending = self._parts[0]
        else:
            subjects, seqs, ts_arr, headers, data, dseqs, pending = (
                pa.concat_arrays([part[i] for part in self._parts]) if self._parts else pa.array([], t)
                for i, t in enumerate((pa.string(), pa.int64(), pa.int64(), HEADERS_ARROW, pa.binary(), pa.int64(),
                                       pa.int64())))
        cols = [
            pa.repeat(pa.scalar(stream, pa.string()), n),
            subjects,
            seqs,
            pc.divide(ts_arr, 1000).cast(pa.timestamp("us", tz="UTC")),
            ts_arr,
            headers,
            data,
            pa.repeat(pa.scalar(consumer, pa.string()), n),
            dseqs,
            pending,
        ]
        return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)


def _header_cells(block: bytes | list[tuple[str, str]] | None) -> list[dict[str, str]] | None:
    """A raw header block (or its pairs) as the ``headers`` column's cell (every pair, repeats
    and order kept)."""
    if not block:
        return None
    pairs = decode(block)[0] if isinstance(block, bytes | bytearray) else block
    return [{"name": k, "value": v} for k, v in pairs] or None


def header_cells(blocks: pa.Array | Sequence[bytes | list[tuple[str, str]] | None]) -> pa.Array:
    """Header blocks as the ``headers`` column: raw blocks (binary, null without), or a list
    that may also hold (name, value) pairs."""
    if isinstance(blocks, pa.Array):
        try:
            return decode_column(blocks, HEADERS_ARROW)
        except NotVectorized:  # a block to repair or to read with replacements: one at a time
            blocks = blocks.to_pylist()
    elif all(h is None for h in blocks):
        return pa.nulls(len(blocks), HEADERS_ARROW)
    return pa.array([_header_cells(h) for h in blocks], type=HEADERS_ARROW)


def rows_to_batch(stream: str, consumer: str | None, rows: list[Row]) -> pa.RecordBatch:
    """Rows as one record batch of the source schema (``time`` is ``ts_ns`` truncated to µs)."""
    pending = Pending()
    for row in rows:
        pending.append(*row)
    return pending.to_batch(stream, consumer)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Chunk:
    """One spill file: origin sequences ``first..last`` (inclusive), ``count`` rows. ``path`` is a
    local path, or the object's URI on an object store."""

    path: str
    first: int
    last: int
    count: int


# spillDir schemes read and written through delta-rs's object store
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: ``C:\`` is a drive
_URL_CREDS = re.compile(r"(\w+://)[^/@\s]*:[^/@\s]*@")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def describe(e: BaseException) -> str:
    """An exception as one line: delta-rs's object store errors come as an indented, coloured
    cause chain over several lines."""
    lines = (ln.strip().lstrip("\u21b3").strip() for ln in _ANSI.sub("", str(e)).splitlines())
    return f"{type(e).__name__}: {': '.join(ln for ln in lines if ln)}"


def is_remote(path: str) -> bool:
    """An object-store URI (not a local path, not ``file://``)."""
    return local_root(path) is None


def _store(uri: str, storage_options: Mapping[str, str] | None) -> pafs.FileSystem:
    """delta-rs's object store for ``uri`` as a pyarrow filesystem rooted there (paths relative
    to it), as the lake source's executors read a table (``engine.files.table_filesystem``)."""
    from jsspark.engine.files import table_filesystem

    return table_filesystem(uri, dict(storage_options) if storage_options else None)


def spill_location(value: str | None, storage_options: Mapping[str, str] | None = None) -> str:
    """The ``spillDir`` option as a place: an absolute local path (``file://`` URIs included), or
    an object-store URI without a trailing slash. Fails naming the option and the value (its
    secrets, if any, redacted) for a scheme that is not supported or a URI that cannot be used."""
    from jsspark.datasource.options import OptionError  # driver side: a task need not import option parsing

    if not value:
        return str(Path(tempfile.gettempdir()) / "jsspark-live-spill")
    shown = redact_storage(_URL_CREDS.sub(r"\1***@", value), storage_options)

    def bad(why: str) -> OptionError:
        return OptionError(f"jetstream (live): option spillDir {shown!r}: {why}")

    try:
        value = place(value)  # a DBFS or file: place as its local path
    except LocationError as e:
        raise bad(str(e).split(": ", 1)[1]) from None
    m = _SCHEME.match(value)
    if m is None:
        return os.path.abspath(value)
    scheme = m.group(1).lower()
    parts = urlsplit(value)
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise bad("a file URI names an absolute local path: file:///path")
        return os.path.abspath(unquote(parts.path))
    if scheme not in OBJECT_STORE_SCHEMES:
        raise bad(f"scheme {scheme!r} is not supported; use a local path, file://, or one of "
                  f"{', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)}")
    if not parts.netloc or (parts.password is not None):
        raise bad("name the bucket or container (credentials go in storage.<key> options, not in the URI)"
                  if parts.netloc else "name the bucket or container")
    if parts.query or parts.fragment:
        raise bad("no query or fragment")
    uri = value.rstrip("/")
    try:
        _store(uri, storage_options)  # delta-rs checks the URI and the options (no request is made)
    except Exception as e:
        raise bad(redact_storage(describe(e), storage_options)) from None
    return uri


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def _owner(name: str) -> tuple[str | None, int] | None:
    """(host, pid) of a process directory's name; host ``None`` for an older local name
    ``<pid>-<random>``; ``None`` for a name no reader made."""
    parts = name.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[0]:
        return parts[0], int(parts[1])
    if len(parts) == 2 and parts[0].isdigit():
        return None, int(parts[0])
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphaned(name: str, host: str, local: bool) -> bool:
    """A directory of a dead process of this host (older pid-only names: local ones only)."""
    owner = _owner(name)
    if owner is None or (owner[0] is None and not local) or owner[0] not in (None, host):
        return False
    return owner[1] != os.getpid() and not _pid_alive(owner[1])


# The file in a spill directory that names the origin seq a landing sink has committed through.
LANDED = "landed"


class SpillDir:
    """One process's spill directory: a local one, or a prefix on an object store.

    On an object store, puts (``write_later``) and deletes go to a small thread pool: a put
    takes a network round trip, which the delivery thread must not wait for, and a commit on
    the driver must not wait for deletes. ``close`` waits for both and removes the directory."""

    POOL_THREADS = 8

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri.rstrip("/") if is_remote(uri) else uri
        self.storage_options = dict(storage_options) if storage_options else None
        self.remote = is_remote(uri)
        self._fs: pafs.FileSystem = _store(self.uri, self.storage_options) if self.remote else pafs.LocalFileSystem()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"SpillDir({self.uri!r})"

    def path(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def write(self, name: str, batch: pa.RecordBatch) -> str:
        """``batch`` as the Arrow IPC file ``name``, all or nothing; returns its path."""
        from jsspark.engine.index_store import write_ipc_file  # the driver writes, tasks only read

        path = self.path(name)
        write_ipc_file(self._fs, name if self.remote else path, pa.Table.from_batches([batch]), compress=False)
        return path

    def write_later(self, name: str, batch: pa.RecordBatch) -> Future[str]:
        """``write`` on the pool; the future holds its path, or the store's error."""
        return self._executor().submit(self.write, name, batch)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.POOL_THREADS, thread_name_prefix="jsspark-spill")
        return self._pool

    def delete(self, paths: Iterable[str]) -> None:
        """Remove spill files (gone already is fine): at once locally, in the background on an
        object store (a failure is logged; the directory goes at ``close``)."""
        if not self.remote:
            for p in paths:
                Path(p).unlink(missing_ok=True)
            return
        names = [p.rsplit("/", 1)[1] for p in paths]
        if not names:
            return
        pool = self._executor()
        for n in names:
            pool.submit(self._delete_one, n)

    def _delete_one(self, name: str) -> None:
        try:
            self._fs.delete_file(name)
        except FileNotFoundError:
            return  # gone already: what a delete wants
        except Exception as e:
            log.warning("jetstream (live): could not remove spill file %s: %s", self.path(name),
                        redact_storage(describe(e), self.storage_options))

    def landed(self) -> int:
        """The origin seq through which a landing sink's Delta commit holds this directory's
        rows (``mark_landed``); 0 without a mark, and always on an object store (where polling
        for it would cost a request each time)."""
        if self.remote:
            return 0
        try:
            return int(Path(self.uri, LANDED).read_text())
        except (FileNotFoundError, ValueError):  # no mark yet, or one being replaced on a platform without atomic rename
            return 0

    def close(self) -> None:
        """Wait for the puts and deletes under way and remove the directory with what is left in it."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._closed:
            return
        self._closed = True
        try:
            if self.remote:
                folder, name = self.uri.rsplit("/", 1)
                _store(folder, self.storage_options).delete_dir(name)
            else:
                shutil.rmtree(self.uri, ignore_errors=True)
        except Exception as e:
            log.warning("jetstream (live): could not remove spill directory %s: %s", self.uri,
                        redact_storage(describe(e), self.storage_options))


def make_spill_dir(base: str | None, storage_options: Mapping[str, str] | None = None) -> SpillDir:
    """This process's own spill directory under ``base`` (``spillDir``, see ``spill_location``);
    the directories dead processes of this host left there are removed."""
    root = spill_location(base, storage_options)
    host, remote = _host(), is_remote(root)
    name = f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if remote:
        fs = _store(root, storage_options)
        for info in fs.get_file_info(pafs.FileSelector("", allow_not_found=True)):
            if info.type == pafs.FileType.Directory and _orphaned(info.base_name, host, local=False):
                try:
                    fs.delete_dir(info.base_name)
                except Exception as e:
                    log.warning("jetstream (live): could not remove the orphaned spill directory %s/%s: %s", root,
                                info.base_name, redact_storage(describe(e), storage_options))
        return SpillDir(f"{root}/{name}", storage_options)
    local = Path(root)
    local.mkdir(parents=True, exist_ok=True)
    for child in local.iterdir():
        if child.is_dir() and _orphaned(child.name, host, local=True):
            shutil.rmtree(child, ignore_errors=True)
    (local / name).mkdir()
    return SpillDir(str(local / name))


def mark_landed(refs: Iterable[str]) -> None:
    """After the Delta commit that holds the rows of the reference values ``refs``
    (``SpillPartition`` JSON): write, in each local spill directory they name, the highest
    origin seq their partitions cover (``hi``), so the reader owning the directory may ack up to
    it at once instead of a batch later (``Ingestor``). Best effort: a reader that has stopped
    (its directory gone) or an object store gets no mark, and acks when Spark commits."""
    top: dict[str, int] = {}
    for text in refs:
        part = SpillPartition.from_json(text)
        for folder in {os.path.dirname(p) for p in part.paths if not is_remote(p)}:
            top[folder] = max(top.get(folder, 0), part.hi)
    for folder, seq in top.items():
        tmp = Path(folder, f".{LANDED}-{uuid.uuid4().hex[:8]}")
        try:
            tmp.write_text(str(seq))
            os.replace(tmp, Path(folder, LANDED))
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.debug("jetstream (live): no landed mark in %s: %s", folder, describe(e))


def write_chunk(directory: SpillDir | Path | str, batch: pa.RecordBatch) -> Chunk:
    """Write ``batch`` (non-empty, ascending ``seq``) as an Arrow IPC file that no reader sees
    partially (renamed into place locally, put once on an object store)."""
    if not isinstance(directory, SpillDir):
        directory = SpillDir(str(directory))
    chunk, name = _named_chunk(directory, batch)
    directory.write(name, batch)
    return chunk


def put_chunk(directory: SpillDir, batch: pa.RecordBatch) -> tuple[Chunk, Future[str]]:
    """``write_chunk`` in the background (``SpillDir.write_later``): the chunk the file will be,
    and the put under way. Nobody may read the chunk before the future succeeded."""
    chunk, name = _named_chunk(directory, batch)
    return chunk, directory.write_later(name, batch)


def _named_chunk(directory: SpillDir, batch: pa.RecordBatch) -> tuple[Chunk, str]:
    seqs = batch.column("seq")
    first, last = seqs[0].as_py(), seqs[-1].as_py()
    name = f"{first:020d}-{last:020d}-{uuid.uuid4().hex[:6]}.arrow"
    return Chunk(directory.path(name), first, last, batch.num_rows), name


@dataclass(frozen=True)
class SpillPartition:
    """What one task reads: rows of ``paths`` with ``lo < seq <= hi`` (picklable, small).

    ``seqs`` (by-reference reads only): the origin sequences of those rows (a ``range`` when
    they have no gap), so a task can emit one reference row per message without seeing the
    files. ``storage_options``: for paths on an object store (never in the ``repr`` or the JSON)."""

    paths: tuple[str, ...]
    lo: int
    hi: int
    seqs: tuple[int, ...] | range | None = field(default=None, repr=False, compare=False)
    storage_options: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        return json.dumps({"paths": list(self.paths), "lo": self.lo, "hi": self.hi, "rows": len(self.seqs or ())})

    @classmethod
    def from_json(cls, text: str, storage_options: Mapping[str, str] | None = None) -> SpillPartition:
        d = json.loads(text)
        return cls(tuple(d["paths"]), int(d["lo"]), int(d["hi"]),
                   storage_options=dict(storage_options) if storage_options else None)


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
# referenced number of messages. A spill on an object store is read there with the sink's
# storage options (a job gives its server origins' readers the target's).
REFERENCE_DDL = "seq bigint, spill string"
REFERENCE_SCHEMA = pa.schema([pa.field("seq", pa.int64()), pa.field("spill", pa.string())])


def reference_batch(part: SpillPartition) -> pa.RecordBatch:
    """The partition's reference rows (``REFERENCE_SCHEMA``)."""
    given = part.seqs or ()
    seqs = pa.array(np.arange(given.start, given.stop, dtype=np.int64) if isinstance(given, range) else given, pa.int64())
    n = len(seqs)
    spill = pa.concat_arrays([pa.array([part.to_json()], pa.string()), pa.nulls(n - 1, pa.string())]) if n else pa.nulls(0, pa.string())
    return pa.RecordBatch.from_arrays([seqs, spill], schema=REFERENCE_SCHEMA)


def is_reference(schema: pa.Schema) -> bool:
    return schema.names == REFERENCE_SCHEMA.names


def read_references(refs: list[str], rows: int,
                    storage_options: Mapping[str, str] | None = None) -> Iterator[pa.RecordBatch]:
    """The messages of reference rows' ``spill`` values (``rows`` of them in all), in the source
    schema (files on an object store read with ``storage_options``); fails, naming the files,
    when the spill no longer holds exactly those rows."""
    found = 0
    for text in refs:
        for batch in read_spill(SpillPartition.from_json(text, storage_options)):
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
    stores: dict[str, Any] = {}
    for path in part.paths:
        if is_remote(path):
            folder, name = path.rsplit("/", 1)
            if folder not in stores:
                stores[folder] = _store(folder, part.storage_options)
            with stores[folder].open_input_stream(name) as source:
                table = pa.ipc.open_file(source.read_buffer()).read_all()
        else:
            with pa.memory_map(path) as source:
                table = pa.ipc.open_file(source).read_all()
        seq = table.column("seq")
        bounds = pc.min_max(seq)
        if not (part.lo < (bounds["min"].as_py() or 0) and (bounds["max"].as_py() or 0) <= part.hi):
            # a file the range cuts (a filter copies every column, payloads too: not for whole files)
            table = table.filter(pc.and_(pc.greater(seq, part.lo), pc.less_equal(seq, part.hi)))
        for batch in table.to_batches():
            if batch.num_rows:
                yield batch
