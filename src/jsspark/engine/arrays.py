"""Arrow array helpers the engine's column code shares."""

from __future__ import annotations

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
