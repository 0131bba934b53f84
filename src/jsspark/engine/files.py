"""Where a table's files are read from: a pyarrow filesystem for a lake place (a table, or a
spill, staging or checkpoint folder on the lake's store).

Apart from ``engine.table`` so that a Spark task, which must not import the table code (its
Delta writes, commits and planning), opens files the same way the driver does.
"""

from __future__ import annotations

import os

import pyarrow.fs as pa_fs


def local_root(uri: str) -> str | None:
    """The directory of a table (or any lake place) on the local disk: a path or a ``file://``
    URI; ``None`` for an object store."""
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return uri if "://" not in uri else None


def local_filesystem(uri: str) -> pa_fs.FileSystem | None:
    """pyarrow's own filesystem rooted at a local lake place (``table_filesystem`` says why);
    ``None`` for an object store, where ``DeltaTable.to_pyarrow_dataset`` builds delta-rs's store
    with the table's file sizes."""
    root = local_root(uri)
    return None if root is None else pa_fs.SubTreeFileSystem(os.path.abspath(root), pa_fs.LocalFileSystem())


def table_filesystem(uri: str, storage_options: dict[str, str] | None = None,
                     sizes: dict[str, int] | None = None) -> pa_fs.FileSystem:
    """A pyarrow filesystem rooted at a table (or another lake place), paths relative to it
    (``sizes``: known file sizes, which spare an object store its HEAD requests). An object
    store is delta-rs's own, with the same storage options as ``DeltaTable``. A local place is
    pyarrow's native one. Why not delta-rs's there too: its store is a Python filesystem to
    Arrow, and a file handle a scan's read-ahead still holds when the interpreter exits is
    released by an Arrow thread that needs the GIL, which aborts the process (SIGABRT, exit 134,
    "terminate called without an active exception": apache/arrow#34314) after a script that
    succeeded."""
    local = local_filesystem(uri)
    if local is not None:
        return local
    from deltalake.fs import DeltaStorageHandler

    return pa_fs.PyFileSystem(DeltaStorageHandler(uri, storage_options, sizes))


def put_bytes(filesystem: pa_fs.FileSystem, path: str, data: bytes) -> None:
    """``data`` as the file at ``path`` of a ``table_filesystem`` on an object store, in one put.
    delta-rs's file system hands pyarrow's writes to its Rust stream as Buffers, which that
    stream refuses; its Rust stream itself takes bytes (if it is not there, nothing is saved)."""
    raw = filesystem.handler._handler.open_output_stream(path, None)  # type: ignore[attr-defined]
    try:
        raw.write(data)
    finally:
        raw.close()
