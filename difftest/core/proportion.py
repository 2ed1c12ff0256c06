"""Wilson's score interval of a proportion: one formula for the rate instruments (which judge
a gate's rate against the benign one, `difftest.numerics.clustered`) and for the thresholds file
reader (which refuses a benign rate no gate's rate could exceed, `difftest.core.thresholds`)."""

from __future__ import annotations

import math

# The rate tests' level (difftest.analysis.benign.ALPHA): the benign rate's bound is the upper
# end of its two-sided 1 - alpha interval.
RATE_ALPHA = 0.01
# An effective size below this is no independent row at all: its interval is [0, 1].
TINY_N = 1e-100


def z_quantile(p: float) -> float:
    """The standard normal quantile (statistics is imported here, not at start-up: it pulls in
    decimal and fractions, which `--help`, `parse` and `audit` never need; a comparison asks
    for a quantile and imports it)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion p seen over n (possibly fractional) rows."""
    if n < TINY_N:
        # the interval is [0, 1] to float precision long before n * n underflows (below about
        # 1e-154 rows, where the formula below would divide by zero)
        return 0.0, 1.0
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if p <= 0.0 else max(0.0, centre - half)
    high = 1.0 if p >= 1.0 else min(1.0, centre + half)
    return low, high


def rate_upper_bound(events: int, rows: int, effective_rows: float,
                     alpha: float = RATE_ALPHA) -> float:
    """The upper end of a rate's two-sided 1 - alpha Wilson interval at its effective size: the
    benign bound a gate's rate must exceed (difftest.analysis.benign)."""
    z = z_quantile(1.0 - alpha / 2)
    return wilson_bounds(events / rows if rows else 0.0, effective_rows, z)[1]
