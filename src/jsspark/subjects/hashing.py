"""FNV-1a 32-bit, the hash behind ``{{partition(n, ...)}}``, scalar and over Arrow columns.

The Arrow version loops over byte *positions* (a few dozen for subjects), never over rows,
so it costs a handful of compute kernels per byte of the longest key.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

FNV32_OFFSET = 2166136261
FNV32_PRIME = 16777619
_MASK32 = 0xFFFFFFFF


def fnv1a_32(data: bytes) -> int:
    """Go's ``hash/fnv`` ``New32a`` sum of ``data``."""
    h = FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & _MASK32
    return h


def _fnv1a_32_chunk(arr: pa.Array) -> pa.Array:
    """Hash one binary/string chunk; nulls hash as empty and are re-nulled by the caller."""
    n = len(arr)
    if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        arr, offset_type = arr.view(pa.large_binary()), pa.int64()
    else:
        arr, offset_type = arr.view(pa.binary()), pa.int32()
    h = pa.nulls(n, pa.uint32()).fill_null(FNV32_OFFSET)
    lengths = pc.fill_null(pc.binary_length(arr), 0).cast(pa.int64())
    max_len = pc.max(lengths).as_py() or 0
    if max_len == 0:
        return h
    min_len = pc.min(lengths).as_py()
    _validity, offsets_buf, data_buf = arr.buffers()
    data = pa.Array.from_buffers(pa.uint8(), data_buf.size, [None, data_buf])
    offsets = pa.Array.from_buffers(offset_type, n + 1, [None, offsets_buf], offset=arr.offset)
    starts = offsets.slice(0, n).cast(pa.int64())
    prime = pa.scalar(FNV32_PRIME, pa.uint32())
    for k in range(max_len):
        if k < min_len:
            byte = pc.take(data, pc.add(starts, k)).cast(pa.uint32())
            h = pc.multiply(pc.bit_wise_xor(h, byte), prime)
            continue
        active = pc.greater(lengths, k)
        index = pc.if_else(active, pc.add(starts, k), 0)
        byte = pc.take(data, index).cast(pa.uint32())
        h = pc.if_else(active, pc.multiply(pc.bit_wise_xor(h, byte), prime), h)
    return h


def fnv1a_32_array(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``fnv1a_32`` of every (UTF-8 or binary) value, as ``uint32``; null stays null."""
    if isinstance(values, pa.ChunkedArray):
        chunks = [fnv1a_32_array(c) for c in values.chunks]
        return pa.chunked_array(chunks, pa.uint32())
    h = _fnv1a_32_chunk(values)
    return pc.if_else(pc.is_valid(values), h, pa.scalar(None, pa.uint32()))
