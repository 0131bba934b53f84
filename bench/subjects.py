"""Benchmark: vectorised (Arrow) subject filtering and transforms vs a per-row Python loop.

    python bench/subjects.py [rows]

Builds ``orders.<region>.<id>`` subjects (16 regions, ids mostly distinct), times each
operation both ways on the same column, asserts identical output and prints rows/s.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from jsspark.subjects import SubjectTransform, match_filter, subject_matches

REGIONS = ["us-east", "us-west", "eu-west", "eu-central", "ap-south", "ap-northeast", "sa-east", "af-south",
           "me-central", "ca-central", "us-gov-east", "eu-north", "ap-southeast", "il-central", "mx-central", "cn-north"]


def make_subjects(rows: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"orders.{rng.choice(REGIONS)}.{rng.randrange(10**9)}" for _ in range(rows)]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main(rows: int) -> None:
    subjects = make_subjects(rows)
    column = pa.array(subjects, pa.string())
    wildcard = "orders.eu-west.*"
    multi = ["orders.eu-west.*", "orders.ap-south.>", "orders.*.123456789", "audit.>", "orders.us-east.42"]
    reorder = SubjectTransform("orders.*.*", "by-id.$2.$1")
    partition = SubjectTransform("orders.*.*", "orders.{{partition(16,2)}}.$1.$2")
    split_slice = SubjectTransform("orders.*.*", "o.{{split(1,-)}}.{{sliceFromRight(2,3)}}.{{left(2,2)}}")

    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (f"filter {wildcard}", lambda: match_filter(column, wildcard),
         lambda: [subject_matches(wildcard, s) for s in subjects]),
        (f"filter x{len(multi)} (multi)", lambda: match_filter(column, multi),
         lambda: [any(subject_matches(f, s) for f in multi) for s in subjects]),
        ("transform reorder $2.$1", lambda: reorder.apply_array(column),
         lambda: [reorder.apply_or_keep(s) for s in subjects]),
        ("transform partition(16,2)", lambda: partition.apply_array(column),
         lambda: [partition.apply_or_keep(s) for s in subjects]),
        ("transform split/sliceFromRight/left", lambda: split_slice.apply_array(column),
         lambda: [split_slice.apply_or_keep(s) for s in subjects]),
    ]
    print(f"{rows:,} subjects, e.g. {subjects[0]!r}; Arrow times are the compute only (column built once)")
    header = f"{'operation':<38}{'arrow s':>9}{'arrow rows/s':>15}{'python s':>10}{'python rows/s':>15}{'speedup':>9}"
    print(header)
    print("-" * len(header))
    for name, vectorised, scalar in cases:
        t_vec, out_vec = timed(vectorised)
        t_py, out_py = timed(scalar)
        assert out_vec.to_pylist() == out_py, f"{name}: vectorised and scalar results differ"
        print(f"{name:<38}{t_vec:>9.3f}{rows / t_vec:>15,.0f}{t_py:>10.3f}{rows / t_py:>15,.0f}{t_py / t_vec:>8.1f}x")
    matched = sum(match_filter(column, multi).to_pylist())
    print(f"(multi-filter matched {matched:,} rows; every vectorised output equalled the per-row loop)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
