"""The A/A floor and the one-sided exact test of flip rates, against exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.numerics.noise import (ALPHA, FlipRule, NoiseFloor, RerunPair, excess_test,
                            fewest_significant, fisher_greater, flip_test, noise_floor,
                            request_flips, top_k_p_value)
from difftest.numerics.stats import PairedRows, logit_stats, wilson


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


def flipping_floor() -> NoiseFloor:
    return noise_floor("nd", 3, [pair(0, 1, flips=3, max_abs=1e-5, identical=False),
                                 pair(0, 2, flips=2, max_abs=2.5e-5, identical=False),
                                 pair(1, 2, flips=4, max_abs=None, identical=False)], None)


def test_floor_json_and_summary_name_every_field() -> None:
    floor = flipping_floor()
    rate = wilson(9, 360)
    assert floor.to_json() == {
        "arm": "nd", "runs": 3, "bit_identical": False, "floor": 2.5e-05, "zero_floor": False,
        "rows": 360, "flips": 9, "flip_rate": 0.025, "flip_rate_ci95": [rate.low, rate.high],
        "pairs": [
            {"run_a": 0, "run_b": 1, "rows": 120, "flips": 3, "logit_rows": 120, "max_abs": 1e-05,
             "identical": False},
            {"run_a": 0, "run_b": 2, "rows": 120, "flips": 2, "logit_rows": 120,
             "max_abs": 2.5e-05, "identical": False},
            {"run_a": 1, "run_b": 2, "rows": 120, "flips": 4, "logit_rows": 120, "max_abs": None,
             "identical": False}],
        "logit_stats": None}
    assert floor.summary() == ("A/A floor of nd: 2.5e-05 over 3 runs, token flips 9/360 "
                               "(rate 0.0250, 95% [0.0132, 0.0468])")


def test_floor_json_carries_the_pooled_logit_stats() -> None:
    stats = logit_stats(PairedRows(np.zeros((2, 2), np.int32), np.zeros((2, 2)),
                                   np.zeros((2, 2), np.int32), np.zeros((2, 2))))
    floor = noise_floor("nd", 2, [pair(0, 1, rows=2)], stats)
    assert floor.to_json()["logit_stats"] == stats.to_json()


def test_a_floor_without_rows_has_no_rate() -> None:
    floor = noise_floor("x", 2, [], None)
    assert floor.floor == 0.0 and floor.flip_rate is None
    assert floor.to_json() == {
        "arm": "x", "runs": 2, "bit_identical": True, "floor": 0.0, "zero_floor": True,
        "rows": 0, "flips": 0, "flip_rate": None, "flip_rate_ci95": None, "pairs": [],
        "logit_stats": None}
    assert floor.summary() == "A/A floor of x: zero (2 runs bit-identical)"
    # no finite difference in any pair: the floor stays zero
    inf = noise_floor("x", 2, [pair(0, 1, max_abs=float("inf"), identical=False)], None)
    assert inf.floor == 0.0


def test_a_zero_floor_whose_runs_differ_in_alignment_says_so() -> None:
    floor = noise_floor("det", 2, [pair(0, 1, identical=False)], None)
    assert floor.zero and not floor.bit_identical
    assert floor.summary() == (
        "A/A floor of det: zero over 2 runs (no token or logit moved; the runs differ only in "
        "what was aligned), token flips 0/120 (rate 0.0000, 95% [0.0000, 0.0310])")


def test_flip_test_sentences_and_json() -> None:
    floor = flipping_floor()
    noise_like = flip_test(4, 120, floor)
    assert noise_like.reason() == (
        "token flips: B flipped 4/120, not significantly more often than A against itself "
        "(9/360); one-sided Fisher exact test p = 0.416 at alpha 0.01")
    assert noise_like.to_json() == {
        "flips_b": 4, "rows_b": 120, "flips_a": 9, "rows_a": 360, "alpha": 0.01,
        "p_value": noise_like.p_value, "counts": False, "rule": "exact-test",
        "clustered_lower_bound": None, "clustered_requests": 0}
    assert noise_like.p_value == pytest.approx(float(exact_fisher(4, 120, 9, 360)), rel=1e-9)
    assert flip_test(20, 120, floor).reason() == (
        "token flips: B flipped 20/120, more often than A against itself (9/360); one-sided "
        "Fisher exact test p = 3.11e-07 at alpha 0.01")
    strict = flip_test(2, 50, noise_floor("det", 2, [pair(0, 1)], None))
    assert strict.reason() == ("token flips judged strictly: the A/A floor is zero, so each of "
                               "B's 2 flip(s) counts")
    assert strict.to_json() == {
        "flips_b": 2, "rows_b": 50, "flips_a": 0, "rows_a": 120, "alpha": 0.01,
        "p_value": None, "counts": True, "rule": "strict",
        "clustered_lower_bound": None, "clustered_requests": 0}
    assert flip_test(2, 50, floor, alpha=0.05).alpha == 0.05
    assert flip_test(2, 50, noise_floor("det", 2, [pair(0, 1)], None), alpha=0.05).alpha == 0.05


def test_a_p_value_at_alpha_counts() -> None:
    floor = flipping_floor()
    p = fisher_greater(20, 120, 9, 360)
    assert flip_test(20, 120, floor, alpha=p).counts
    stats = logit_stats(PairedRows(np.zeros((360, 8), np.int32), np.zeros((360, 8)),
                                   np.zeros((360, 8), np.int32), np.zeros((360, 8))))
    nd = noise_floor("nd", 3, [pair(0, 1, max_abs=7e-6, identical=False)], stats)
    q = top_k_p_value(2, 960, 2880)
    assert excess_test(2, 960, nd, alpha=q).counts
    # the fewest that would count at that alpha is then 2, not 3
    assert fewest_significant(960, 2880, alpha=q) == 2
    assert excess_test(2, 960, nd, alpha=q).needed == 2


def test_excess_test_sentences_and_json() -> None:
    floor = flipping_floor()  # no logit stats: A's values are unknown, so none is counted
    none_known = excess_test(3, 960, floor)
    assert none_known.to_json() == {
        "exceed": 3, "values_b": 960, "values_a": 0, "alpha": 0.01, "p_value": 1.0,
        "counts": False, "rule": "exact-test", "needed": 961}
    assert none_known.reason() == (
        "logit differences: 3 of B's 960 value(s) exceed the A/A floor, which none of A's 0 did; "
        "if B were one more rerun of A, its 3 largest would all be B's with probability p = 1 "
        "(exact permutation test, alpha 0.01): they do not count")
    stats = logit_stats(PairedRows(np.zeros((360, 8), np.int32), np.zeros((360, 8)),
                                   np.zeros((360, 8), np.int32), np.zeros((360, 8))))
    nd = noise_floor("nd", 3, [pair(0, 1, max_abs=7e-6, identical=False)], stats)
    four = excess_test(4, 960, nd, alpha=0.02)
    assert four.to_json() == {
        "exceed": 4, "values_b": 960, "values_a": 2880, "alpha": 0.02,
        "p_value": four.p_value, "counts": True, "rule": "exact-test", "needed": 3}
    assert four.reason() == (
        "logit differences: 4 of B's 960 value(s) exceed the A/A floor, which none of A's 2880 "
        "did; if B were one more rerun of A, its 4 largest would all be B's with probability "
        "p = 0.00389 (exact permutation test, alpha 0.02): they count")
    zero = noise_floor("det", 3, [pair(0, 1)], stats)
    strict = excess_test(3, 960, zero, alpha=0.05)
    assert strict.reason() == ("logit differences judged strictly: the A/A floor is zero, so "
                               "each of B's 3 value(s) above the tolerance counts")
    assert strict.to_json() == {
        "exceed": 3, "values_b": 960, "values_a": 2880, "alpha": 0.05, "p_value": None,
        "counts": True, "rule": "strict", "needed": 1}
    assert not excess_test(0, 960, zero).counts


def test_fewest_significant_edges() -> None:
    assert fewest_significant(10, 1000) == 1  # one of B's 10 above 1000 of A's: p = 10/1010
    assert fewest_significant(3, 3) == 4  # none of B's 3 values could count: more than it has


def test_probabilities_at_their_edges() -> None:
    assert top_k_p_value(0, 10, 10) == 1.0
    assert top_k_p_value(5, 3, 10) == 0.0  # more values than B has cannot all be B's
    # no flip in B: exactly 1, not the sum of the whole distribution (0.9999999999999962)
    assert fisher_greater(0, 7, 3, 9) == 1.0
    assert fisher_greater(0, 0, 0, 0) == 1.0
    # a p-value near 1 whose terms sum above it is capped at 1
    assert fisher_greater(1, 120, 900, 1000) == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=60),
       st.lists(st.text(min_size=1, max_size=4), min_size=6, max_size=6, unique=True))
def test_request_flips_count_each_named_request_in_name_order(
        rows: list[tuple[int, bool]], names: list[str]) -> None:
    """By each row's request index, not a per-row array of names (a long name is held once):
    the rows and flips per name, in name order, and only the requests with a row."""
    req = np.array([r for r, _ in rows], dtype=np.int64)
    flipped = np.array([f for _, f in rows], dtype=bool)
    want: dict[str, list[int]] = {}
    for r, f in rows:
        counts = want.setdefault(names[r], [0, 0])
        counts[0] += 1
        counts[1] += int(f)
    got = request_flips(req, names, flipped)
    assert [(x.req, x.rows, x.flips) for x in got] == [(n, *want[n]) for n in sorted(want)]
