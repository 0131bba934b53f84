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

# The index the engine keeps in memory: everything but payloads and headers.
INDEX_COLUMNS = ["seq", "ts_ns", "subject", "msg_id", "size"]

# File store accounting (filestore.go: fileStoreMsgSize): 22 + subject + payload + 8 (hash),
# plus 4 + header block when the message has headers.
_FILE_STORE_OVERHEAD = 30


def stored_size(subject: str, hdr_len: int, data_len: int) -> int:
    """Bytes the server counts for one message in ``state.bytes``."""
    return _FILE_STORE_OVERHEAD + len(subject.encode()) + data_len + (4 + hdr_len if hdr_len else 0)


def _lengths(arr: pa.Array) -> np.ndarray:
    """Byte length per row of a string/binary array (0 for null), from its offsets."""
    if pa.types.is_dictionary(arr.type):
        return _lengths(arr.dictionary)[arr.indices.to_numpy(zero_copy_only=False)]
    if arr.offset or arr.null_count:
        return pc.fill_null(pc.binary_length(arr.cast(pa.binary())), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1)
    return np.diff(offsets).astype(np.int64)


def column_stored_size(subjects: pa.Array, headers: pa.Array, data: pa.Array) -> np.ndarray:
    """Vectorised ``stored_size`` over columns."""
    hlen = column_encoded_len(headers)
    return _FILE_STORE_OVERHEAD + _lengths(subjects) + _lengths(data) + np.where(hlen > 0, hlen + 4, 0)
