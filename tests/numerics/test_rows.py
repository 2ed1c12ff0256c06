"""The column-at-a-time row reductions are numpy's own reductions along axis 1, and the sums
by cluster label in bins of their own are the sums by sorted label."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from difftest.numerics.clustered import ClusterSums
from difftest.numerics.rows import row_all, row_any, row_count, row_max

shapes = st.tuples(st.integers(0, 40), st.integers(0, 9))
nonempty = st.tuples(st.integers(0, 40), st.integers(1, 9))
floats = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, 1e300, -1e300, np.inf, -np.inf, np.nan])


@settings(max_examples=200, deadline=None)
@given(arrays(bool, shapes))
def test_any_all_and_counts_are_numpys(x: np.ndarray) -> None:
    assert row_any(x).tolist() == x.any(axis=1).tolist()
    assert row_all(x).tolist() == x.all(axis=1).tolist()
    count = row_count(x)
    assert count.dtype == x.sum(axis=1).dtype and count.tolist() == x.sum(axis=1).tolist()


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, nonempty, elements=floats), st.sampled_from([None, 0.0, -np.inf]))
def test_max_is_numpys_nan_included(x: np.ndarray, initial: float | None) -> None:
    want = x.max(axis=1) if initial is None else np.max(x, axis=1, initial=initial)
    # equal values, nan where numpy's is nan (the sign of a zero is left to the CPU's kernel)
    assert np.array_equal(row_max(x, initial), want, equal_nan=True)


def test_max_of_no_column() -> None:
    x = np.zeros((3, 0))
    assert row_max(x, 0.0).tolist() == [0.0, 0.0, 0.0]
    try:
        row_max(x)
    except ValueError:
        pass
    else:
        raise AssertionError("a row with no entry has no maximum")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 70_000), st.floats(-1e6, 1e6)), max_size=60),
       st.sampled_from([np.int64, np.int32, np.uint16]))
def test_cluster_sums_are_the_sums_by_sorted_label(rows: list[tuple[int, float]],
                                                   dtype: type) -> None:
    """ClusterSums.of sums small labels in bins of their own: the same sums, added in the same
    row order, as by the rank of each label among the sorted distinct labels."""
    labels = np.array([label for label, _ in rows], dtype=np.int64)
    if dtype is np.uint16:
        labels = np.abs(labels) % 65536
    labels = labels.astype(dtype)
    values = np.array([value for _, value in rows], dtype=np.float64)
    got = ClusterSums.of(values, labels)
    distinct, inverse = np.unique(labels, return_inverse=True)
    assert got.y.tolist() == np.bincount(inverse, weights=values, minlength=distinct.size).tolist()
    assert got.n.tolist() == np.bincount(inverse, minlength=distinct.size).astype(float).tolist()
