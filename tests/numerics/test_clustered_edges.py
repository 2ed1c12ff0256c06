"""The request-clustered statistics over any finite values: a rate, its jackknife variance, a
paired difference and the effective number of requests are numbers (or None / nan where the
docstrings say so), never an OverflowError from a correctly rounded sum whose partial sums
pass the largest double, a ZeroDivisionError from squares that underflow, or a warning."""

from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from difftest.numerics.clustered import ClusterSums, effective_clusters, paired_difference

_EDGES = [0.0, 5e-324, 1e-200, 1e-160, 1.0, 1e150, 1e200, 1e307, 1.7976931348623157e308]
values = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                   st.sampled_from(_EDGES + [-x for x in _EDGES]))
rows = st.lists(st.tuples(st.integers(0, 5), values), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(rows)
def test_a_rate_and_its_jackknife_are_numbers_at_the_edges(drawn: list[tuple[int, float]]
                                                          ) -> None:
    labels = np.array([c for c, _ in drawn])
    x = np.array([v for _, v in drawn])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sums = ClusterSums.of(x, labels)
        ratio, variance = sums.ratio, sums.variance()
    assert isinstance(ratio, float) and isinstance(variance, float)
    assert math.isnan(variance) or variance >= 0.0


@settings(max_examples=300, deadline=None)
@given(rows, rows)
def test_a_paired_difference_is_a_number_at_the_edges(a: list[tuple[int, float]],
                                                       b: list[tuple[int, float]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels_a, sums_a = ClusterSums.labelled(np.array([v for _, v in a]),
                                                np.array([c for c, _ in a]))
        labels_b, sums_b = ClusterSums.labelled(np.array([v for _, v in b]),
                                                np.array([c for c, _ in b]))
        diff = paired_difference(sums_a, labels_a, sums_b, labels_b, binomial=False)
    assert diff is None or isinstance(diff.se, float)


@settings(max_examples=500, deadline=None)
@given(st.lists(values, min_size=1, max_size=40))
@example([3e-81, 3e-81])  # squares of subnormal precision: 2.0625 of 2 requests, unscaled
@example([1.0024e-81, 1.2088e-81, 8.798e-82, 1.5635e-81])
def test_the_effective_number_of_requests_is_between_one_and_their_count(
        terms: list[float]) -> None:
    """At least 1 and at most the number of requests, at any scale; None where the squares'
    sum is zero or past the range."""
    t = np.array(terms)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = effective_clusters(t)
    if got is not None:
        assert 1.0 - 1e-12 <= got <= t.size * (1 + 1e-12)


def test_a_mean_with_an_infinite_value_has_no_finite_error() -> None:
    """An infinite value leaves the spread unknown (nan), not the zero error of rows that are
    all alike; the interval is then the whole of the bounds."""
    from difftest.numerics.stats import mean_error

    labels = np.array([0, 1, 2])
    unknown = mean_error(np.array([math.inf, 1.0, 2.0]), labels, (0.0, math.inf))
    alike = mean_error(np.array([1.0, 1.0, 1.0]), labels, (0.0, math.inf))
    assert unknown.se is not None and math.isnan(unknown.se)
    assert unknown.ci == (0.0, math.inf)
    assert alike.se == 0.0 and alike.ci == (1.0, 1.0)
