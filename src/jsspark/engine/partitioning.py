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

import pyarrow as pa
import pyarrow.compute as pc

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
            return self.of(subjects.dictionary.cast(pa.string())).take(subjects.indices)
        if self.kind == "hash":
            buckets = pc.divide(fnv1a_32_array(subjects).cast(pa.int64()), 1)
            return pc.cast(pc.subtract(buckets, pc.multiply(pc.divide(buckets, self.n), self.n)), pa.string())
        parts = pc.split_pattern(subjects, ".", max_splits=self.n)
        return pc.binary_join(pc.list_slice(parts, 0, self.n), ".")
