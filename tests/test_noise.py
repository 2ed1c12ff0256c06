"""The A/A floor and the one-sided exact test of flip rates, against exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from difftest.noise import (ALPHA, FlipRule, RerunPair, fisher_greater, flip_test,
                            noise_floor)


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
