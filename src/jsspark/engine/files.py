"""Where a table's files are read from: a pyarrow filesystem for a lake place.

Apart from ``engine.table`` so that a Spark read task, which must not import the table code
(its Delta writes, commits and planning), opens files the same way the driver does.
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


def table_filesystem(uri: str, storage_options: dict[str, str] | None = None,
                     sizes: dict[str, int] | None = None) -> pa_fs.FileSystem:
    """A pyarrow filesystem rooted at a table, for reading its files (``sizes``: known file
    sizes, which spare an object store its HEAD requests). An object store is delta-rs's own,
    with the same storage options as ``DeltaTable``. A local table is pyarrow's native one.
    Why not delta-rs's there too: its store is a Python filesystem to Arrow, and a file handle
    a scan's read-ahead still holds when the interpreter exits is released by an Arrow thread
    that needs the GIL, which aborts the process (SIGABRT, exit 134, "terminate called without
    an active exception": apache/arrow#34314) after a script that succeeded."""
    root = local_root(uri)
    if root is not None:
        return pa_fs.SubTreeFileSystem(os.path.abspath(root), pa_fs.LocalFileSystem())
    from deltalake.fs import DeltaStorageHandler

    return pa_fs.PyFileSystem(DeltaStorageHandler(uri, storage_options, sizes))
