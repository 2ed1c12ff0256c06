"""Wilson's score interval of a proportion: one formula for the rate instruments (which judge
a gate's rate against the benign one, `difftest.numerics.clustered`) and for the thresholds file
reader (which refuses a benign rate no gate's rate could exceed, `difftest.core.thresholds`)."""

from __future__ import annotations

import math
from statistics import NormalDist

# The rate tests' level (difftest.analysis.benign.ALPHA): the benign rate's bound is the upper
# end of its two-sided 1 - alpha interval.
RATE_ALPHA = 0.01


def wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion p seen over n (possibly fractional) rows."""
    if n <= 0:
        return 0.0, 1.0
    # the usual form multiplied through by n: the same interval, and no n * n to underflow
    # (an effective size of 1e-300 rows is a width of nearly [0, 1], not a division by zero)
    denom = n + z * z
    centre = (p * n + z * z / 2) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) * n + z * z / 4) / denom
    low = 0.0 if p <= 0.0 else max(0.0, centre - half)
    high = 1.0 if p >= 1.0 else min(1.0, centre + half)
    return low, high


def rate_upper_bound(events: int, rows: int, effective_rows: float,
                     alpha: float = RATE_ALPHA) -> float:
    """The upper end of a rate's two-sided 1 - alpha Wilson interval at its effective size: the
    benign bound a gate's rate must exceed (difftest.analysis.benign)."""
    z = NormalDist().inv_cdf(1.0 - alpha / 2)
    return wilson_bounds(events / rows if rows else 0.0, effective_rows, z)[1]
