"""Correctly rounded sums of float64 arrays: the figures a report prints are the same whatever
order a CPU's kernels would add in, and a sum whose partial sums pass the largest double on
the way (which `math.fsum` refuses with an OverflowError) is still the double it rounds to."""

from __future__ import annotations

import math

import numpy as np


def exact_sum(values: np.ndarray) -> float:
    """The correctly rounded sum, as `math.fsum(values.tolist())` gives it, without a Python
    float per value: zeros are left out (fsum's zero sum is +0.0 whatever the zeros' signs,
    and a zero changes no other sum); values all one finite number v, m of them, sum to the
    correctly rounded m * v, which is what float multiplication gives where it does not
    overflow; other finite values are summed as integers (`_integer_sum`), which also gives a
    sum fsum would refuse for an intermediate overflow (its own partial sums overflow on the
    way to a sum a double holds; a sum past the largest double is infinite). With a non-finite
    value the finite ones change nothing: the sum is nan where a value is nan or both
    infinities are there (fsum would raise a ValueError for inf + -inf, IEEE addition gives
    nan), else the infinity."""
    values = np.asarray(values, dtype=np.float64).ravel()
    values = values[values != 0]
    if not values.size:
        return 0.0
    first = float(values[0])
    if math.isfinite(first) and bool(np.all(values == first)):
        product = float(values.size) * first
        if math.isfinite(product):
            return product
    finite = np.isfinite(values)
    if bool(finite.all()):
        return _integer_sum(values)
    special = values[~finite]
    if bool(np.isnan(special).any()) or bool((special > 0).any() and (special < 0).any()):
        return math.nan
    return float(special[0])


_INT_BLOCK = 1 << 16  # values summed at a time by `_integer_sum` (its temporaries stay small)


def _integer_sum(values: np.ndarray) -> float:
    """The correctly rounded sum of finite doubles, as fsum gives it, with no Python float per
    value: each value is an integer of 53 bits times a power of 2 (`np.frexp`); its two halves
    of 26 and 27 bits are summed per power in float64, where every partial sum of integers
    that small is exact, and the sums per power are added as Python integers and divided once
    (an integer division is correctly rounded)."""
    parts = []  # (integer, power): the sum of a block is integer * 2**(power - 53)
    for at in range(0, values.size, _INT_BLOCK):
        mantissa, power = np.frexp(values[at:at + _INT_BLOCK])
        whole = (mantissa * 2.0 ** 53).astype(np.int64)  # exact: 53 significant bits
        high = whole >> 26
        rest = whole - (high << 26)  # 0 <= rest < 2**26
        base = int(power.min())
        shift = power - base
        high_sums = np.bincount(shift, weights=high.astype(np.float64))
        rest_sums = np.bincount(shift, weights=rest.astype(np.float64))
        block = 0
        for k in np.flatnonzero((high_sums != 0) | (rest_sums != 0)).tolist():
            block += ((int(high_sums[k]) << 26) + int(rest_sums[k])) << k
        parts.append((block, base))
    low = min(base for _, base in parts)
    total = sum(block << (base - low) for block, base in parts)
    unit = low - 53
    try:
        return float(total << unit) if unit >= 0 else total / (1 << -unit)
    except OverflowError:  # rounds past the largest double: the infinity of its sign
        return math.inf if total > 0 else -math.inf
