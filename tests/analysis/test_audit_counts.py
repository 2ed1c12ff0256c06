"""The audit's counts of ids, spread of values, variation of rows and finite rows are the
definitions they replace: numpy's unique counts, the finite values' range, any row unlike the
first, and rows whose listed values are all finite."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.analysis import audit
from difftest.analysis.audit import _spread, _varies, id_counts
from difftest.core import model
from difftest.core.model import LogitRows
from tests.swap import swapped


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 200_000), max_size=50),
       st.sampled_from([np.int32, np.int64, np.uint16]))
def test_id_counts_are_numpys_unique_counts(ids: list[int], dtype: type) -> None:
    x = np.array(ids, dtype=np.int64)
    if dtype is np.uint16:
        x = np.abs(x) % 65536
    x = x.astype(dtype)
    got, want = id_counts(x), np.unique(x, return_counts=True)[1]
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_spread_is_the_range_of_the_finite_values(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = np.array([0.0, -0.0, 1.5, -2.25, 7.0, np.nan, np.inf, -np.inf])
    rows = rng.choice(pool, size=(int(rng.integers(1, 8)), int(rng.integers(1, 5))))
    values = rows[np.isfinite(rows)]
    want = float(values.max() - values.min()) if values.size else None
    assert _spread(rows) == want


@pytest.mark.parametrize("block", [1, 2, 3, 64])
@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_rows_vary_as_any_row_unlike_the_first(block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 10)), int(rng.integers(1, 4))
    rows = np.repeat(rng.choice([1.0, 2.0, np.nan], size=(1, k)), n, axis=0)
    if rng.integers(0, 2):
        rows[rng.integers(0, n), rng.integers(0, k)] = rng.choice([1.0, 2.0, np.nan])
    with swapped(audit, _VARY_ROWS=block):
        assert _varies(rows) == bool(np.any(rows != rows[0]))


@pytest.mark.parametrize("block", [1, 3, 1 << 14])
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_finite_rows_are_those_whose_listed_values_are_all_finite(block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(0, 12)), int(rng.integers(1, 5))
    values = rng.choice(np.array([1.0, -2.0, np.nan, np.inf]), size=(n, k))
    width = rng.integers(0, k + 1, size=n).astype(np.int32)
    lg = LogitRows(np.zeros(n, np.int32), np.zeros(n, np.int64), np.ones(n, np.int32),
                   np.zeros((n, k), np.int32), values, width, np.zeros(n, np.int64),
                   np.zeros(n, np.int8))
    listed = np.arange(k)[None, :] < width[:, None]
    with swapped(model, _ROW_BLOCK=block):  # rows taken a block at a time
        finite = lg.finite
    assert finite.tolist() == np.all(np.isfinite(values) | ~listed, axis=1).tolist()
