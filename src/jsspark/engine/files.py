"""Where a table's files are read from: a pyarrow filesystem for a lake place (a table, or a
spill, staging or checkpoint folder on the lake's store).

Apart from ``engine.table`` so that a Spark task, which must not import the table code (its
Delta writes, commits and planning), opens files the same way the driver does.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import time
import weakref
from typing import Any

import pyarrow as pa
import pyarrow.fs as pa_fs

from jsspark.errors import LocationError

# How long a process exiting waits for Arrow to release the object-store files it still holds
# (``_Held``); past it, the process exits as it would have.
EXIT_WAIT_SECONDS = 10.0
# Where Databricks mounts DBFS for local file APIs (FUSE), on the driver and on every worker
DBFS_MOUNT = "/dbfs"
# A URI's scheme: two characters at least, as delta-rs reads a one-letter one as a Windows drive
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def place(uri: str) -> str:
    """A lake place (a lake, a checkpoint or spill folder) as jsspark and delta-rs reach it.
    ``dbfs:/p`` (also ``dbfs:///p``), Databricks's spelling of a DBFS path, is the FUSE mount
    ``/dbfs/p`` that Databricks gives local file APIs, and ``dbfs:/Volumes/...`` the Unity
    Catalog volume's own path ``/Volumes/...``; ``file:/p`` is ``/p``; anything else is kept.
    A place that could only land somewhere no one looks is refused (``LocationError``, naming
    it): a DBFS path where ``/dbfs`` is not mounted, and any other ``scheme:`` not followed by
    ``//`` (``s3:/bucket``, a typo), which was a local directory named ``s3:`` in the working
    directory while delta-rs failed on it as a URL."""
    m = _SCHEME.match(uri)
    if m is None:
        return uri
    scheme, rest = m.group(1).lower(), uri[m.end():]
    if scheme == "dbfs" and rest.startswith("/") and (not rest.startswith("//") or rest.startswith("///")):
        path = "/" + rest.lstrip("/")
        if path == "/Volumes" or path.startswith("/Volumes/"):
            return path
        if not os.path.isdir(DBFS_MOUNT):
            raise LocationError(f"{uri!r}: DBFS is not mounted at {DBFS_MOUNT} here (Databricks mounts it for local "
                                f"file APIs); use a Unity Catalog volume (/Volumes/<catalog>/<schema>/<volume>/...) or "
                                f"the object store's URI (s3://, abfss://, gs://)")
        return DBFS_MOUNT + path
    if scheme == "dbfs":
        raise LocationError(f"{uri!r}: a DBFS path is dbfs:/<path> (no host)")
    if rest.startswith("//"):
        return uri
    if scheme == "file" and rest.startswith("/"):
        return rest
    raise LocationError(f"{uri!r}: not a local path and not a URI ({scheme}://...); a local path with a "
                        f"'{scheme}:' directory is refused as a likely typo (write ./{uri} if it is meant)")


def local_root(uri: str) -> str | None:
    """The directory of a table (or any lake place) on the local disk: a path, a ``file:`` URI
    or a DBFS path (``place``); ``None`` for an object store."""
    uri = place(uri)
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return uri if "://" not in uri else None


def store_uri(uri: str) -> str:
    """``uri`` as delta-rs must be given an object-store place: ``?`` and ``#`` escaped, which a
    URL takes for its query and fragment (the place was cut there: a lake at ``s3://b/x#1`` was
    written at ``s3://b/x``); delta-rs decodes them back into the key. A local path is left as it
    is, but one with a ``%`` and two hex digits is refused (``LocationError``): delta-rs writes
    such a path as given and reads it decoded (``a%41b`` as ``aAb``), so every call after the
    first write failed with "File not found", and no escaping is read back the same way. A DBFS
    path is its local one (``place``)."""
    root = local_root(uri)
    if root is not None:
        if re.search(r"%[0-9A-Fa-f]{2}", root):
            raise LocationError(f"lake location {uri!r}: a local path with '%' and two hex digits is read "
                                "back decoded by delta-rs (a%41b as aAb); rename that directory")
        return place(uri)
    return uri.replace("?", "%3F").replace("#", "%23")


def check_commit_options(location: str, storage_options: dict[str, str] | None) -> None:
    """``LocationError`` for a storage option asking for commits delta-rs no longer makes: its
    DynamoDB log store (``AWS_S3_LOCKING_PROVIDER``) is gone since delta-rs 1.0, which logs an
    error and commits as without it, with a conditional put of each log entry (``If-None-Match:
    *``, what keeps concurrent writers from overwriting each other's commits; AWS S3 honours it).
    A lake configured for locking because its store has no conditional writes would take
    concurrent writers unprotected."""
    for key in storage_options or {}:
        if key.upper() == "AWS_S3_LOCKING_PROVIDER":
            raise LocationError(
                f"lake location {location!r}: storage option {key} is not used by delta-rs 1.x (no DynamoDB "
                "log store): commits are a conditional put of each log entry (If-None-Match), which AWS S3 "
                "honours; remove the option. On a store that ignores conditional puts, concurrent writers "
                "would overwrite each other's commits: use one writer per lake there")


def local_filesystem(uri: str) -> pa_fs.FileSystem | None:
    """pyarrow's own filesystem rooted at a local lake place (``table_filesystem`` says why);
    ``None`` for an object store (``dataset_filesystem``)."""
    root = local_root(uri)
    return None if root is None else pa_fs.SubTreeFileSystem(os.path.abspath(root), pa_fs.LocalFileSystem())


def place_filesystem(location: str, storage_options: dict[str, str] | None = None) -> tuple[pa_fs.FileSystem, str]:
    """A filesystem for paths under ``location`` (a staging, checkpoint or marker folder) and the
    path of ``location`` on it: the local disk with its absolute path, else delta-rs's object
    store rooted at ``location`` (its path there is ""), with ``storage_options`` or else the
    environment's credentials, so executors and driver reach it as the lake does (pyarrow's own
    store knows no ``s3a://``). Paths below it: ``under``."""
    root = local_root(location)
    if root is not None:
        return pa_fs.LocalFileSystem(), os.path.abspath(root)
    return table_filesystem(location.rstrip("/"), storage_options), ""


def under(root: str, relative: str) -> str:
    """The path of ``relative`` below a ``place_filesystem`` root."""
    return f"{root.rstrip('/')}/{relative}" if root else relative


def dataset_filesystem(uri: str, table: Any) -> pa_fs.FileSystem:
    """The filesystem to read a version's files with, ``DeltaTable`` ``table`` of the table at
    ``uri``: the local one, else delta-rs's store as ``DeltaTable.to_pyarrow_dataset`` builds it
    (the version's file sizes known), whose files a process waits for at exit (``_Held``)."""
    local = local_filesystem(uri)
    if local is not None:
        return local
    handler = _store_class().from_table(
        table._table, table._storage_options, table._table.get_add_file_sizes()
    )
    return pa_fs.PyFileSystem(handler)


def table_filesystem(uri: str, storage_options: dict[str, str] | None = None,
                     sizes: dict[str, int] | None = None) -> pa_fs.FileSystem:
    """A pyarrow filesystem rooted at a table (or another lake place), paths relative to it
    (``sizes``: known file sizes, which spare an object store its HEAD requests). An object
    store is delta-rs's own, with the same storage options as ``DeltaTable``. A local place is
    pyarrow's native one. Why not delta-rs's there too: its store is a Python filesystem to
    Arrow, and a file handle a scan's read-ahead still holds when the interpreter exits is
    released by an Arrow thread that needs the GIL, which aborts the process (SIGABRT, exit 134,
    "terminate called without an active exception": apache/arrow#34314) after a script that
    succeeded. On an object store, where only delta-rs's store takes the storage options, a
    process exiting waits instead until Arrow released the files it held (``_Held``)."""
    local = local_filesystem(uri)
    if local is not None:
        return local
    return pa_fs.PyFileSystem(_store_class()(store_uri(uri), storage_options, sizes))


class _Held:
    """A delta-rs file handed to Arrow, alive as long as Arrow holds it. On an object store that
    is also a Python filesystem to Arrow, so the abort above (apache/arrow#34314) is still there:
    a read-ahead finishing after the script released its file on an Arrow thread while the
    interpreter exited. A process exiting waits for them first (``_wait_for_held``)."""

    __slots__ = ("__weakref__", "_file")

    def __init__(self, file: Any) -> None:
        self._file = file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


_HELD: weakref.WeakSet[_Held] = weakref.WeakSet()


def _wait_for_held() -> None:
    """At exit: sleep (the GIL free for Arrow's threads) until Arrow released every ``_Held``."""
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    while len(_HELD) and time.monotonic() < deadline:
        time.sleep(0.005)


@functools.cache
def _store_class() -> type:
    """delta-rs's store for Arrow, its files opened for reading held as ``_Held``."""
    from deltalake.fs import DeltaStorageHandler

    atexit.register(_wait_for_held)

    class Store(DeltaStorageHandler):  # type: ignore[misc, valid-type]
        def open_input_file(self, path: str) -> pa.PythonFile:
            held = _Held(self._handler.open_input_file(path))
            _HELD.add(held)
            return pa.PythonFile(held)

        open_input_stream = open_input_file

    return Store


def put_bytes(filesystem: pa_fs.FileSystem, path: str, data: bytes) -> None:
    """``data`` as the file at ``path`` of a ``table_filesystem`` on an object store, in one put.
    delta-rs's file system hands pyarrow's writes to its Rust stream as Buffers, which that
    stream refuses; its Rust stream itself takes bytes (if it is not there, nothing is saved)."""
    raw = filesystem.handler._handler.open_output_stream(path, None)  # type: ignore[attr-defined]
    try:
        raw.write(data)
    finally:
        raw.close()
