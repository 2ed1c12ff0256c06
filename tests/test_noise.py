"""The A/A floor and the one-sided exact test of flip rates, against exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from difftest.noise import (ALPHA, FlipRule, RerunPair, excess_test, fewest_significant,
                            fisher_greater, flip_test, noise_floor, top_k_p_value)
from difftest.stats import PairedRows, logit_stats


def exact_fisher(xb: int, nb: int, xa: int, na: int) -> Fraction:
    total, flips = na + nb, xa + xb
    return sum((Fraction(comb(flips, x) * comb(total - flips, nb - x), comb(total, nb))
                for x in range(xb, min(flips, nb) + 1)), Fraction(0))


@pytest.mark.parametrize("xb, nb, xa, na", [
    (1, 120, 0, 360), (4, 120, 0, 360), (5, 100, 1, 300), (0, 50, 3, 150), (10, 10, 0, 10),
    (3, 40, 3, 40), (18, 92, 0, 360), (2, 5, 7, 9)])
def test_fisher_matches_exact_rationals(xb: int, nb: int, xa: int, na: int) -> None:
    assert fisher_greater(xb, nb, xa, na) == pytest.approx(float(exact_fisher(xb, nb, xa, na)),
                                                           rel=1e-9)


def test_fisher_known_value() -> None:
    # one flip in B, none in A's 360 rows: the flip lands in B's 120 of 480 rows by chance 1/4
    assert fisher_greater(1, 120, 0, 360) == pytest.approx(0.25)


def pair(i: int, j: int, rows: int = 120, flips: int = 0, max_abs: float | None = 0.0,
         identical: bool = True) -> RerunPair:
    return RerunPair(i, j, rows, flips, rows, max_abs, identical)


def test_zero_floor_is_strict() -> None:
    floor = noise_floor("a", 3, [pair(0, 1), pair(0, 2), pair(1, 2)], None)
    assert floor.zero and floor.bit_identical and floor.floor == 0.0
    assert "zero (3 runs bit-identical)" in floor.summary()
    one = flip_test(1, 120, floor)
    assert one.rule is FlipRule.STRICT and one.counts and one.p_value is None
    assert not flip_test(0, 120, floor).counts


def test_floor_is_the_largest_rerun_difference_and_flips_need_the_test() -> None:
    pairs = [pair(0, 1, max_abs=2e-6, identical=False), pair(0, 2, max_abs=7e-6, identical=False),
             pair(1, 2, max_abs=float("inf"), identical=False)]
    floor = noise_floor("nd", 3, pairs, None)
    assert floor.floor == 7e-6 and not floor.zero and not floor.bit_identical
    assert floor.rows == 360 and floor.flips == 0
    assert floor.to_json()["floor"] == 7e-6
    noise_like = flip_test(1, 120, floor)
    assert noise_like.rule is FlipRule.EXACT_TEST and not noise_like.counts
    assert noise_like.p_value == pytest.approx(0.25)
    assert "not significantly more often" in noise_like.reason()
    real = flip_test(18, 92, floor)
    assert real.counts and real.p_value is not None and real.p_value <= ALPHA
    # 3 of 120 against 0 of 360: p = C(120,3)/C(480,3) ~ 0.0154, above alpha
    assert not flip_test(3, 120, floor).counts
    assert flip_test(4, 120, floor).counts


def test_flipping_reruns_raise_the_bar() -> None:
    floor = noise_floor("nd", 3, [pair(0, 1, flips=3, max_abs=1e-5, identical=False),
                                  pair(0, 2, flips=2, max_abs=1e-5, identical=False),
                                  pair(1, 2, flips=4, max_abs=1e-5, identical=False)], None)
    assert floor.flips == 9 and floor.flip_rate is not None
    assert floor.flip_rate.value == pytest.approx(9 / 360)
    assert not flip_test(4, 120, floor).counts  # 4/120 is A's own rate
    assert flip_test(20, 120, floor).counts


def exact_top_k(k: int, m: int, n: int) -> Fraction:
    return Fraction(comb(m, k), comb(n + m, k))


@pytest.mark.parametrize("k, m, n", [(1, 960, 2880), (2, 960, 2880), (4, 960, 2880),
                                     (3, 10, 30), (5, 5, 5), (0, 10, 10)])
def test_top_k_p_value_is_the_exact_permutation_probability(k: int, m: int, n: int) -> None:
    assert top_k_p_value(k, m, n) == pytest.approx(float(exact_top_k(k, m, n)), rel=1e-9)


def test_values_above_the_floor_count_only_in_numbers_a_rerun_would_not_show() -> None:
    stats = logit_stats(PairedRows(np.zeros((360, 8), np.int32), np.zeros((360, 8)),
                                   np.zeros((360, 8), np.int32), np.zeros((360, 8))))
    floor = noise_floor("nd", 3, [pair(0, 1, max_abs=7e-6, identical=False)], stats)
    assert floor.logit_stats is not None and floor.logit_stats.values == 2880
    two = excess_test(2, 960, floor)
    assert not two.counts and two.p_value == pytest.approx(float(exact_top_k(2, 960, 2880)))
    assert two.needed == 4 and "they do not count" in two.reason()
    assert not excess_test(3, 960, floor).counts
    four = excess_test(4, 960, floor)
    assert four.counts and four.rule is FlipRule.EXACT_TEST
    assert fewest_significant(960, 2880) == 4
    zero = noise_floor("det", 3, [pair(0, 1)], stats)
    strict = excess_test(1, 960, zero)
    assert strict.counts and strict.rule is FlipRule.STRICT and strict.p_value is None
