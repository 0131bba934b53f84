"""Arrow array helpers the engine's column code shares."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def one_chunk(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``col`` as one Array, copied only when it has several chunks: pyarrow's
    ``ChunkedArray.combine_chunks`` copies a single chunk too (a whole payload column)."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def column(table: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    """A table's column as one Array (``one_chunk``)."""
    return one_chunk(table.column(name))


def cast_column(table: pa.Table | pa.RecordBatch, name: str, to: pa.DataType, accepted: str) -> pa.Array:
    """A table's column as ``to`` (``one_chunk``). A type that does not cast fails naming the
    column, its type and ``accepted``: Arrow's own error names neither the column nor the fix."""
    col = column(table, name)
    if col.type == to:
        return col
    try:
        return col.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise ValueError(f"column {name!r} has type {col.type}, which is not {accepted} ({e})") from None


def subject_column(table: pa.Table | pa.RecordBatch, who: str) -> pa.Array:
    """A batch's ``subject`` column as strings; a null one fails naming the column (``who``:
    the caller, first in the message), where a publish would fail on it deep in the engine."""
    subject = cast_column(table, "subject", pa.string(), "a string")
    if subject.null_count:
        raise ValueError(f"{who}: a row has no subject (column 'subject' is null in {subject.null_count} of "
                         f"{len(subject)} rows)")
    return subject


_INT32_MAX = 2**31 - 1


def data_column(table: pa.Table | pa.RecordBatch) -> pa.Array | pa.ChunkedArray:
    """A batch's ``data`` column as binary (string data as its UTF-8); empty data where there is
    none, a missing column or a null cell: a NATS message has no null payload, so a null stored
    would read back as null in Spark but as ``b''`` from the engine."""
    if "data" not in table.schema.names:
        return pa.array([b""] * table.num_rows, pa.binary())
    col = table.column("data")
    if isinstance(col, pa.ChunkedArray) and col.num_chunks > 1 and col.nbytes > _INT32_MAX:
        # one binary array holds at most 2 GiB (int32 offsets): a larger column stays in its chunks
        return pa.chunked_array([data_column(pa.table({"data": c})) for c in col.chunks], pa.binary())
    data = cast_column(table, "data", pa.binary(), "binary or string")
    return pc.fill_null(data, b"") if data.null_count else data


def value_bytes(arr: pa.Array) -> np.ndarray | None:
    """The bytes a string or binary array's values span, as ``uint8`` (no copy): a byte scan of a
    million values takes a millisecond where a regex kernel takes a hundred. ``None`` for another
    type. Null slots may span bytes too; a scan uses it to rule rows out, not in."""
    if pa.types.is_string(arr.type) or pa.types.is_binary(arr.type):
        width = np.int32
    elif pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        width = np.int64
    else:
        return None
    _, offsets, values = arr.buffers()
    if not len(arr) or values is None:
        return np.zeros(0, np.uint8)
    ends = np.frombuffer(offsets, width, len(arr) + 1, arr.offset * np.dtype(width).itemsize)
    return np.frombuffer(values, np.uint8)[int(ends[0]) : int(ends[-1])]


def value_offsets(arr: pa.Array) -> np.ndarray | None:
    """The int32 offsets of a plain string/binary array without nulls (a view), else None."""
    if isinstance(arr, pa.ChunkedArray) or arr.null_count or not (pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)):
        return None
    return np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)


def has_empty(arr: pa.Array) -> bool:
    """Does a string or binary array hold an empty (non-null) value?"""
    return bool(pc.any(pc.equal(pc.binary_length(arr), 0)).as_py())


# Up to this many rows are taken or dropped by zero-copy slices: Arrow's ``take`` on a table of
# many chunks costs milliseconds even for one row, and a ``filter`` copies every other row.
FEW_ROWS = 32


def take_rows(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """``table.take(positions)``; a few rows as slices of it (no copy)."""
    if len(positions) > FEW_ROWS:
        return table.take(pa.array(positions))
    if not len(positions):
        return table.slice(0, 0)
    return pa.concat_tables([table.slice(int(p), 1) for p in positions])


def drop_rows(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """``table`` without the rows at ``positions`` (ascending, distinct); with a few, the slices
    between them (no copy: the table gains a chunk or two, for the caller to combine in time)."""
    if len(positions) > FEW_ROWS:
        keep = np.ones(table.num_rows, dtype=bool)
        keep[positions] = False
        return table.filter(pa.array(keep))
    pieces, start = [], 0
    for p in positions.tolist():
        if p > start:
            pieces.append(table.slice(start, p - start))
        start = p + 1
    if start < table.num_rows or not pieces:
        pieces.append(table.slice(start))
    return pa.concat_tables(pieces)
