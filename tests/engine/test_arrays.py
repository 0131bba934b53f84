"""Row picking by slices (``take_rows``/``drop_rows``) gives what Arrow's take/filter give."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow as pa
import pytest

from jsspark.engine.arrays import FEW_ROWS, drop_rows, take_rows


def _chunked(n: int, rng: random.Random) -> pa.Table:
    """``n`` rows in chunks of random sizes (an index after many appends)."""
    t = pa.table({"seq": np.arange(n, dtype=np.int64), "subject": [f"s.{i % 7}" for i in range(n)]})
    cuts = sorted({0, n, *(rng.randrange(n) for _ in range(9))})
    return pa.concat_tables([t.slice(a, b - a) for a, b in itertools.pairwise(cuts)])


@pytest.mark.parametrize("k", [0, 1, 2, 5, FEW_ROWS, FEW_ROWS + 1, 200])
def test_take_and_drop_rows_agree_with_arrow(k: int) -> None:
    rng = random.Random(k)
    for _ in range(20):
        t = _chunked(rng.randrange(max(k, 1), 400), rng)
        pos = np.array(sorted(rng.sample(range(t.num_rows), k)), dtype=np.int64)
        if k and rng.random() < 0.5:  # the edges and neighbours
            pos = np.unique(np.concatenate([pos[: max(k - 2, 0)], [0, t.num_rows - 1]]))[:k]
        keep = np.ones(t.num_rows, dtype=bool)
        keep[pos] = False
        assert take_rows(t, pos).to_pydict() == t.take(pa.array(pos, pa.int64())).to_pydict()
        assert drop_rows(t, pos).to_pydict() == t.filter(pa.array(keep)).to_pydict()
