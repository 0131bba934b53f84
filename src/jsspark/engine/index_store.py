"""The message index persisted next to the stream table, so a new process need not rebuild it.

Building the index (``index.py``) reads the narrow columns of every data file and sorts them by
sequence: seconds at ten million messages, paid by every job that starts. A snapshot of it, as
of one table version, is kept in the table directory under ``_jsspark_index/`` (Delta readers
and VACUUM leave ``_``-prefixed paths alone) as an Arrow IPC file that lists the data files it
was read from. A new process loads the newest snapshot at or below the version it needs (memory
mapped for a local table) and replays only the difference in data files since:

- files gone since the snapshot (removed by a limit, purge, delete or compaction): their
  sequences leave the index. They are read from the files themselves, which stay until VACUUM;
  if one is gone, the snapshot is not used;
- files added since: their rows join the index (a row in both was moved by a rewrite of its
  file and stays).

The per-subject stats are kept in a second file and changed by the same difference. A stream
with TTLs keeps its messages' expiries (``expiry.py``, read from every message's headers
otherwise) in a third, with its own version and files: the headers of the files added since
are all that a new process reads.

The result is exactly what a full read of that version gives. Snapshots are written after a
load that had to read much (a full build, or a long replay) and after compaction, never on the
publish path; writing is best effort (another writer's snapshot of the same version is the same
file), and a snapshot that cannot be read is ignored.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from jsspark.engine.expiry import Expiries
from jsspark.engine.files import local_root, put_bytes
from jsspark.engine.index import INDEX_SCHEMA, MessageIndex
from jsspark.engine.schema import INDEX_COLUMNS
from jsspark.engine.subject_stats import SubjectGroups, SubjectStats

if TYPE_CHECKING:
    from jsspark.engine.table import MessageTable, Snapshot

INDEX_DIR = "_jsspark_index"
META_KEY = b"jsspark.index"
KEEP = 2  # snapshots kept per stream
SAVE_MIN_ROWS = 100_000  # smaller streams rebuild in well under a second
REPLAY_SAVE_FRACTION = 0.2  # a replay that read this share of the rows writes a new snapshot
EXPIRY_COLUMNS = ["seq", "ts_ns", "headers"]  # what a message's TTL expiry is read from


def _name(version: int, kind: str = "index") -> str:
    return f"{INDEX_DIR}/{kind}-{version:020d}.arrow"


def _version_of(name: str, kind: str = "index") -> int | None:
    base = name.rsplit("/", 1)[-1]
    if not (base.startswith(f"{kind}-") and base.endswith(".arrow")):
        return None
    try:
        return int(base[len(kind) + 1 : -len(".arrow")])
    except ValueError:
        return None


def data_files(snap: Snapshot) -> list[str]:
    """The data files (paths relative to the table) of a version."""
    return pa.table(snap.table.get_add_actions(flatten=True))["path"].to_pylist()


def _read_files(dataset: ds.Dataset, paths: list[str], columns: list[str] = INDEX_COLUMNS) -> pa.Table:
    """``columns`` of the given data files of a table (present or removed), those of
    INDEX_COLUMNS in the index's types."""
    phys = pa.schema([dataset.schema.field(c) for c in columns])
    schema = pa.schema([INDEX_SCHEMA.field(c) if c in INDEX_SCHEMA.names else phys.field(c) for c in columns])
    if not paths:
        return schema.empty_table()
    frag = next(iter(dataset.get_fragments()), None)
    if frag is None:
        raise FileNotFoundError("no data file to take the file system from")
    fragments = [frag.format.make_fragment(p, filesystem=frag.filesystem) for p in paths]
    table = ds.FileSystemDataset(fragments, phys, frag.format, frag.filesystem).to_table(columns=columns)
    return table.cast(schema)


def _replayed(
    stored: pa.Table, version: int, stats: SubjectStats | None, removed_seqs: np.ndarray | None, fresh: pa.Table
) -> MessageIndex:
    """The snapshot's rows without the messages of files removed since, with those of files added
    since (``fresh``, sorted by seq). A message in both was moved by a rewrite of its file (a
    removal of another message in it, a compaction): it stays. When what is new follows every
    stored message, the snapshot's subject stats are kept and changed by the difference, as
    a publish changes them (``MessageIndex.apply``); else they are rebuilt when first asked."""
    if removed_seqs is None:
        removed_seqs = np.zeros(0, np.int64)
    fresh_seqs = fresh["seq"].to_numpy()
    moved = np.isin(fresh_seqs, removed_seqs, assume_unique=True) if len(removed_seqs) else None
    if moved is not None and moved.any():
        removed_seqs = removed_seqs[~np.isin(removed_seqs, fresh_seqs[moved], assume_unique=True)]
        fresh = fresh.filter(pa.array(~moved))
    last_stored = int(stored["seq"][-1].as_py()) if stored.num_rows else 0
    if stats is not None and (not fresh.num_rows or int(fresh["seq"][0].as_py()) > last_stored):
        index = MessageIndex(stored, -1, ordered=True, subjects=stats)
        index.apply(fresh, removed_seqs, version)
        return index
    rows = stored
    if len(removed_seqs):
        seqs = rows["seq"].to_numpy()
        pos = np.searchsorted(removed_seqs, seqs)
        hit = (pos < len(removed_seqs)) & (removed_seqs[np.minimum(pos, len(removed_seqs) - 1)] == seqs)
        rows = rows.filter(pa.array(~hit))
    if fresh.num_rows:
        ordered = int(fresh["seq"][0].as_py()) > (int(rows["seq"][-1].as_py()) if rows.num_rows else 0)
        rows = pa.concat_tables([rows, fresh])
        if not ordered:
            rows = rows.sort_by("seq")
    return MessageIndex(rows, version, ordered=True)


def write_ipc_file(fs: pafs.FileSystem, path: str, table: pa.Table, *, compress: bool) -> None:
    """One Arrow IPC file, all or nothing: written aside and renamed on a local disk, one put on
    an object store. Uncompressed locally, so it can be memory mapped."""
    options = pa.ipc.IpcWriteOptions(compression="zstd" if compress else None)
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{path.rsplit('/', 1)[0]}/.tmp-{uuid.uuid4().hex}"
        with fs.open_output_stream(tmp) as out, pa.ipc.new_file(out, table.schema, options=options) as writer:
            writer.write_table(table)
        fs.move(tmp, path)
        return
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    put_bytes(fs, path, sink.getvalue().to_pybytes())


@dataclass(frozen=True)
class _Stored:
    """A snapshot as read (``IndexStore._newest``): where it is, its version and table, and the
    seqs of the data files gone since (sorted; None: none) and the files added since."""

    dataset: ds.Dataset
    fs: pafs.FileSystem
    root: str
    version: int
    stored: pa.Table
    removed_seqs: np.ndarray | None
    added: list[str]


class IndexStore:
    """Snapshots of one stream's index (see the module docstring)."""

    def __init__(self, table: MessageTable) -> None:
        self.table = table

    def _fs(self, dataset: ds.Dataset) -> tuple[pafs.FileSystem, str] | None:
        """A file system and the table's root in it: the local one for a local table (memory
        mapping, atomic renames), else the one delta-rs reads the table's files with."""
        root = local_root(self.table.uri)
        if root is not None:
            return pafs.LocalFileSystem(), root.rstrip("/") + "/"
        frag = next(iter(dataset.get_fragments()), None)
        return (frag.filesystem, "") if frag is not None else None

    def _list(self, fs: pafs.FileSystem, root: str, kind: str = "index") -> list[tuple[int, str]]:
        infos = fs.get_file_info(pafs.FileSelector(root + INDEX_DIR, allow_not_found=True))
        found = [(v, f"{INDEX_DIR}/{i.base_name}") for i in infos if (v := _version_of(i.base_name, kind)) is not None]
        return sorted(found)

    @staticmethod
    def _since(dataset: ds.Dataset, snap: Snapshot, files: list[str]) -> tuple[np.ndarray | None, list[str]]:
        """What changed between a snapshot of the data ``files`` and ``snap``: the seqs (sorted)
        of the files gone since (None: none) and the files added since."""
        then = set(files)
        now = data_files(snap)
        gone = sorted(then - set(now))
        added = [p for p in now if p not in then]
        removed_seqs = np.sort(_read_files(dataset, gone, ["seq"])["seq"].to_numpy()) if gone else None
        return removed_seqs, added

    # -- loading -------------------------------------------------------------------------------
    def _newest(self, snap: Snapshot, kind: str) -> _Stored | None:
        """The newest snapshot of ``kind`` at or below ``snap``, read, and what changed in the
        table since (None: none, or a view of an older version, which is not kept up)."""
        if self.table.as_of is not None:
            return None
        dataset = self.table.dataset(snap)
        where = self._fs(dataset)
        if where is None:
            return None
        fs, root = where
        candidates = [(v, n) for v, n in self._list(fs, root, kind) if v <= snap.version]
        if not candidates:
            return None
        version, name = candidates[-1]
        stored, meta = self._read(fs, root + name)
        if meta.get("version") != version:
            return None
        removed_seqs, added = self._since(dataset, snap, meta["files"])
        return _Stored(dataset, fs, root, version, stored, removed_seqs, added)

    def load(self, snap: Snapshot) -> MessageIndex | None:
        """The index at ``snap`` from the newest usable snapshot plus the data files since, or
        None when there is none (the caller builds it from the table and may ``save`` it)."""
        try:
            got = self._newest(snap, "index")
            if got is None:
                return None
            added = got.added
            fresh = _read_files(got.dataset, added).sort_by("seq") if added else INDEX_SCHEMA.empty_table()
            replayed = fresh.num_rows + (0 if got.removed_seqs is None else len(got.removed_seqs))
            stats = self._read_subjects(got.fs, got.root + _name(got.version, "subjects"))
            index = _replayed(got.stored.cast(INDEX_SCHEMA), snap.version, stats, got.removed_seqs, fresh)
        except Exception:  # a snapshot is only a cache: an unreadable one is not used
            return None
        if replayed >= REPLAY_SAVE_FRACTION * index.msgs:
            self.save_if_large(index, snap)  # the next process replays less
        return index

    def caught_up(self, index: MessageIndex, snap: Snapshot) -> MessageIndex | None:
        """``index`` (exact at its version of the table ``snap`` is of) carried to ``snap`` by the
        data files the commits since added and removed (``MessageTable.files_since``), as a
        snapshot is replayed: what a writer that lost a race to another's commit reads, rather
        than every file again. None when the log cannot tell or a removed file is gone."""
        changed = self.table.files_since(index.version, snap.version) if index.version < snap.version else None
        if changed is None:
            return None
        added, gone = changed
        try:
            fresh = self.table.read_files(added, INDEX_SCHEMA).sort_by("seq")
            removed_seqs = np.sort(self.table.read_files(gone, pa.schema([INDEX_SCHEMA.field("seq")]))["seq"].to_numpy())
        except (OSError, pa.ArrowException):  # vacuumed, or written in another form
            return None
        return _replayed(index.rows, snap.version, index.subjects_if_known(), removed_seqs if gone else None, fresh)

    def load_expiries(self, snap: Snapshot, msgs: int) -> Expiries | None:
        """The TTL expiries (``expiry.py``) at ``snap`` from the newest usable snapshot of them
        plus the headers of the data files added since, or None when there is none (the caller
        reads every message's headers and may ``save_expiries``). ``msgs``: the stream's count,
        to tell a long replay."""
        try:
            got = self._newest(snap, "expiries")
            if got is None:
                return None
            expiries = Expiries(got.stored["seq"].to_numpy(), got.stored["expires"].to_numpy(), got.version)
            if got.removed_seqs is not None:  # a moved message is in both: it leaves and comes back
                expiries.removed(got.removed_seqs, snap.version)
            fresh = _read_files(got.dataset, got.added, EXPIRY_COLUMNS)
            expiries.added(fresh, snap.version)
        except Exception:  # a snapshot is only a cache: an unreadable one is not used
            return None
        if fresh.num_rows >= REPLAY_SAVE_FRACTION * msgs:
            self.save_expiries_if_large(expiries, snap, msgs)  # the next process replays less
        return expiries

    @staticmethod
    def _read_subjects(fs: pafs.FileSystem, path: str) -> SubjectStats | None:
        try:
            with fs.open_input_file(path) as f:
                t = pa.ipc.open_file(f).read_all()
        except Exception:
            return None
        return SubjectStats(SubjectGroups(t["subject"].combine_chunks(), t["msgs"].to_numpy(), t["last_seq"].to_numpy()))

    def _read(self, fs: pafs.FileSystem, path: str) -> tuple[pa.Table, dict[str, Any]]:
        """A snapshot file's table and the metadata it was written with."""
        if isinstance(fs, pafs.LocalFileSystem):  # memory map: pages are read when used
            reader = pa.ipc.open_file(pa.memory_map(path))
        else:
            reader = pa.ipc.open_file(fs.open_input_file(path))
        table = reader.read_all()
        meta = json.loads((table.schema.metadata or {}).get(META_KEY, b"{}"))
        return table.replace_schema_metadata(None), meta

    # -- saving --------------------------------------------------------------------------------
    def save_if_large(self, index: MessageIndex, snap: Snapshot) -> bool:
        """``save`` a stream big enough for rebuilding to be slow."""
        return index.msgs >= SAVE_MIN_ROWS and self.save(index, snap)

    def save(self, index: MessageIndex, snap: Snapshot) -> bool:
        """Write ``index`` (which must be exactly the table at ``snap``) as a snapshot; best effort."""

        def write(fs: pafs.FileSystem, root: str, meta: bytes) -> None:
            # the subject stats first: an index snapshot that is there has its stats there too
            write_ipc_file(fs, root + _name(snap.version, "subjects"), index.subjects().table(), compress=True)
            write_ipc_file(fs, root + _name(snap.version), index.rows.replace_schema_metadata({META_KEY: meta}),
                           compress=not isinstance(fs, pafs.LocalFileSystem))

        return self._saved(snap, index.version, ("index", "subjects"), write)

    def save_expiries_if_large(self, expiries: Expiries, snap: Snapshot, msgs: int) -> bool:
        """``save_expiries`` of a stream big enough for reading every header to be slow."""
        return msgs >= SAVE_MIN_ROWS and self.save_expiries(expiries, snap)

    def save_expiries(self, expiries: Expiries, snap: Snapshot) -> bool:
        """Write ``expiries`` (which must be exactly those at ``snap``) as a snapshot beside the
        index's; best effort."""
        table = pa.table({"seq": expiries.seqs, "expires": expiries.expires})

        def write(fs: pafs.FileSystem, root: str, meta: bytes) -> None:
            write_ipc_file(fs, root + _name(snap.version, "expiries"),
                           table.replace_schema_metadata({META_KEY: meta}), compress=True)

        return self._saved(snap, expiries.version, ("expiries",), write)

    def _saved(self, snap: Snapshot, version: int, kinds: tuple[str, ...],
               write: Callable[[pafs.FileSystem, str, bytes], None]) -> bool:
        """``write`` the files of a snapshot (of ``kinds``) as of ``snap``, given the metadata
        that names the version and its data files, then drop all but the newest ``KEEP``.
        Whether it was written: never for a view of an older version, or for what is not
        exactly at ``snap`` (``version``), or on any error (without a snapshot the next process
        reads the table)."""
        if self.table.as_of is not None or version != snap.version:
            return False
        dataset = self.table.dataset(snap)
        try:
            where = self._fs(dataset)
            if where is None:
                return False
            fs, root = where
            fs.create_dir(root + INDEX_DIR, recursive=True)
            write(fs, root, json.dumps({"version": snap.version, "files": data_files(snap)}).encode())
            for v, _ in self._list(fs, root, kinds[0])[:-KEEP]:
                for kind in kinds:
                    fs.delete_file(root + _name(v, kind))
        except Exception:
            return False
        return True


__all__ = ["EXPIRY_COLUMNS", "IndexStore", "data_files"]
