"""The stored form of a lake stream message, and the server's byte accounting.

One row per message. Columns a Spark or SQL user reads directly: ``seq``, ``subject``,
``time`` (UTC timestamp for SQL), ``headers``, ``data``. Columns the engine keeps for the
server's semantics without parsing headers or scanning payloads: ``ts_ns`` (the full
nanosecond time), ``msg_id`` (dedup), ``size`` (the file store's accounting of the message,
for ``max_bytes`` and stream state), and ``part``, the bounded partition key derived from the
subject.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.arrays import one_chunk, value_offsets
from jsspark.engine.headers import HEADER_TYPE, column_encoded_len

MESSAGE_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("headers", HEADER_TYPE),
        pa.field("data", pa.binary()),
        pa.field("msg_id", pa.string()),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("part", pa.string(), nullable=False),
    ]
)
PARTITION_COLUMN = "part"
# The highest seq the int64 column holds. The server's seqs are uint64: a request's bound at or
# past 2**63 is past every stored seq, compared as such (never cast to the column's type).
MAX_SEQ = 2**63 - 1  # the seq column is int64 (config.ignored.LAKE_MAX_SEQ refuses a first_seq past it)

# The index the engine keeps in memory: everything but payloads and headers.
INDEX_COLUMNS = ["seq", "ts_ns", "subject", "msg_id", "size"]

# File store accounting (filestore.go: fileStoreMsgSize): 22 + subject + payload + 8 (hash),
# plus 4 + header block when the message has headers.
_FILE_STORE_OVERHEAD = 30


def arrow_backed(n: int, dtype: np.typing.DTypeLike = np.int64) -> np.ndarray:
    """An uninitialised numpy array in Arrow's memory pool. Its allocator keeps freed pages for
    the next allocation, where numpy's hands large arrays back to the system: a per-row column
    built for every batch then costs no fresh page faults (8 MB of them per million int64)."""
    dtype = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(n * dtype.itemsize), dtype)


def sequence(first: int, n: int) -> np.ndarray:
    """``np.arange(first, first + n)`` (int64) in Arrow's memory (``arrow_backed``)."""
    if len(_IOTA[0]) < n:
        _IOTA[0] = np.arange(max(n, 1 << 20), dtype=np.int64)
    return np.add(_IOTA[0][:n], first, out=arrow_backed(n))


_IOTA: list[np.ndarray] = [np.zeros(0, np.int64)]


def stored_size(subject: str, hdr_len: int, data_len: int) -> int:
    """Bytes the server counts for one message in ``state.bytes``."""
    return _FILE_STORE_OVERHEAD + len(subject.encode()) + data_len + (4 + hdr_len if hdr_len else 0)


def value_lengths(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Byte length per row of a string/binary (or dictionary of them) array, 0 for null, as
    int64; from the offsets, without a kernel, where it can. A chunked column is measured
    chunk by chunk: combining it would copy every value (payloads) just to read lengths."""
    if isinstance(arr, pa.ChunkedArray) and arr.num_chunks > 1:
        return np.concatenate([value_lengths(c) for c in arr.chunks])
    arr = one_chunk(arr)
    if pa.types.is_dictionary(arr.type):
        if arr.null_count:
            return value_lengths(arr.cast(arr.type.value_type))
        return value_lengths(arr.dictionary)[arr.indices.to_numpy()]
    if arr.null_count or not (pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)):
        return pc.fill_null(pc.binary_length(arr.cast(pa.binary())), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = value_offsets(arr)
    return np.subtract(offsets[1:], offsets[:-1], out=arrow_backed(len(arr)), dtype=np.int64)


def add_value_lengths(out: np.ndarray, arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``out += value_lengths(arr)``, straight from the offsets where it can (no new array)."""
    offsets = value_offsets(arr)
    if offsets is None:
        out += value_lengths(arr)
    else:
        out += offsets[1:]
        out -= offsets[:-1]
    return out


def stored_sizes(
    subjects: pa.Array | np.ndarray, hdr_len: np.ndarray, data_len: np.ndarray, *, reuse: bool = False
) -> np.ndarray:
    """Vectorised ``stored_size`` from the subjects (or their byte lengths) and per-row header
    and data lengths; ``reuse`` sums into ``data_len`` (the caller's own int64 array, not needed
    afterwards) instead of a new array."""
    sizes = data_len if reuse else data_len.astype(np.int64)
    if isinstance(subjects, np.ndarray):
        sizes += subjects
    else:
        add_value_lengths(sizes, subjects)
    sizes += _FILE_STORE_OVERHEAD
    if hdr_len.any():
        sizes += np.where(hdr_len > 0, hdr_len + 4, 0)
    return sizes


def column_stored_size(subjects: pa.Array, headers: pa.Array, data: pa.Array) -> np.ndarray:
    """Vectorised ``stored_size`` over columns."""
    return stored_sizes(subjects, column_encoded_len(headers), value_lengths(data), reuse=True)
