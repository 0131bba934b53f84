"""The bounded partition key a stream table is partitioned by, derived from the subject.

A stream with 100,000 subjects must not make 100,000 Delta partitions, yet a last-by-subject
lookup should touch few files. Two forms:

- ``hash(N)``: FNV-1a 32 of the subject (the server's ``partition`` hash) modulo N, the
  default, ``hash(8)``;
- ``tokens(K)``: the first K tokens of the subject, for streams whose leading tokens have
  few values (``orders.eu.>``), so Spark can prune on ``part`` by prefix.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.schema import arrow_backed
from jsspark.subjects import fnv1a_32_array

DEFAULT_PARTITION_KEY = "hash(8)"
_SPEC = re.compile(r"^\s*(hash|tokens)\((\d+)\)\s*$")


class PartitionKey:
    def __init__(self, spec: str = DEFAULT_PARTITION_KEY) -> None:
        m = _SPEC.match(spec)
        if not m or int(m.group(2)) < 1:
            raise ValueError(f"invalid partition key {spec!r}: use 'hash(N)' or 'tokens(K)' with N, K >= 1")
        self.spec = spec.strip()
        self.kind, self.n = m.group(1), int(m.group(2))

    def of(self, subjects: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The partition value of each subject, as strings."""
        if isinstance(subjects, pa.ChunkedArray):
            subjects = subjects.combine_chunks()
        if pa.types.is_dictionary(subjects.type):  # compute once per distinct subject
            if self.kind == "hash" and not subjects.null_count:
                return self.strings(self.buckets(subjects.dictionary), subjects.indices.to_numpy())
            return self.of(subjects.dictionary.cast(pa.string())).take(subjects.indices)
        if self.kind == "hash" and not subjects.null_count:
            return self.strings(self.buckets(subjects))
        if self.kind == "hash":
            buckets = pc.divide(fnv1a_32_array(subjects).cast(pa.int64()), 1)
            return pc.cast(pc.subtract(buckets, pc.multiply(pc.divide(buckets, self.n), self.n)), pa.string())
        parts = pc.split_pattern(subjects, ".", max_splits=self.n)
        return pc.binary_join(pc.list_slice(parts, 0, self.n), ".")

    def buckets(self, subjects: pa.Array) -> np.ndarray:
        """``hash(N)``: each (non-null) subject's bucket, ``fnv1a_32 % N`` (as small an int as fits)."""
        dtype = np.uint8 if self.n <= 256 else np.int32
        return (fnv1a_32_array(subjects.cast(pa.string())).to_numpy() % self.n).astype(dtype)

    def strings(self, buckets: np.ndarray, codes: np.ndarray | None = None) -> pa.Array:
        """Buckets as the partition values (their decimal text), built straight from the codes:
        row ``i`` gets ``buckets[codes[i]]`` (``buckets[i]`` without ``codes``)."""
        n = len(buckets) if codes is None else len(codes)
        if self.n <= 10:  # one digit each: shared offsets 0, 1, 2, ... and one byte per row
            digits = buckets.astype(np.uint8) + np.uint8(ord("0"))  # per bucket entry, then one gather
            data = digits if codes is None else np.take(digits, codes, out=arrow_backed(n, np.uint8), mode="clip")
            return pa.Array.from_buffers(pa.string(), n, [None, _unit_offsets(n), pa.py_buffer(data)])
        values = pa.array([str(i) for i in range(self.n)], pa.string())
        per_row = buckets if codes is None else buckets[codes]
        return pa.DictionaryArray.from_arrays(pa.array(per_row.astype(np.int32)), values).cast(pa.string())


_UNIT_OFFSETS: list[pa.Buffer] = []


def _unit_offsets(n: int) -> pa.Buffer:
    """int32 offsets 0..n (one byte per value), from one buffer kept and grown as needed:
    Arrow buffers are immutable, so every array of one-byte strings can share it."""
    if not _UNIT_OFFSETS or _UNIT_OFFSETS[0].size < 4 * (n + 1):
        _UNIT_OFFSETS[:] = [pa.py_buffer(np.arange(max(n + 1, 1 << 20), dtype=np.int32))]
    return _UNIT_OFFSETS[0].slice(0, 4 * (n + 1))
