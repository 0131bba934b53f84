"""Arrow array helpers the engine's column code shares."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


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


def data_column(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """A batch's ``data`` column as binary (string data as its UTF-8); empty data where there is none."""
    if "data" not in table.schema.names:
        return pa.array([b""] * table.num_rows, pa.binary())
    return cast_column(table, "data", pa.binary(), "binary or string")


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
