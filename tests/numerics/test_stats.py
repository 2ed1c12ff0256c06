"""Logit statistics against values computed here independently, in plain Python, on pairs with
known perturbations."""

from __future__ import annotations

import math
from fractions import Fraction
import random
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from difftest.numerics.exact import exact_sum
from difftest.numerics.stats import (MIN_ROWS, Z95, PairedRows, _Acc, _accumulate_matched,
                                     _Diffs, _match_pairwise, _match_sorted, _rows_of,
                                     logit_stats, match_ids, wilson)
from tests.swap import swapped


def make_rows(n: int, k: int = 8, vocab: int = 64, seed: int = 0
              ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(vocab, size=k, replace=False) for _ in range(n)]).astype(np.int32)
    vals = -np.sort(-rng.normal(5.0, 2.0, size=(n, k)), axis=1)
    return ids, vals


def pct_linear(xs: list[float], q: float) -> float:
    """numpy's default ('linear') percentile, written out."""
    s = sorted(xs)
    h = (len(s) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def kl_shared(a: dict[int, float], b: dict[int, float]) -> float:
    """KL(P_b || P_a) over the shared ids, each arm's softmax renormalised over them."""
    ids = [i for i in a if i in b]
    za = sum(math.exp(a[i]) for i in ids)
    zb = sum(math.exp(b[i]) for i in ids)
    return sum((math.exp(b[i]) / zb) * math.log((math.exp(b[i]) / zb) / (math.exp(a[i]) / za))
               for i in ids)


def test_identical_rows_are_all_zero() -> None:
    ids, vals = make_rows(150)
    s = logit_stats(PairedRows(ids, vals, ids.copy(), vals.copy()))
    assert s.rows == 150 and s.values == 150 * 8
    assert s.max_abs == s.p99_abs == s.mean_abs == s.max_rel == 0.0
    assert s.top1_same == 150 and s.top1_agreement is not None
    assert s.top1_agreement.value == 1.0 and s.top1_agreement.high == 1.0
    assert s.top1_agreement.low < 1.0  # an interval, not a point, at n/n
    assert s.topk_overlap == 1.0
    assert s.kl_mean == 0.0 and s.kl_mean_se == 0.0
    assert s.significant and s.rows_disjoint == 0


def test_known_perturbations_against_independent_values() -> None:
    n, k = 200, 8
    ids, vals = make_rows(n, k)
    rnd = random.Random(3)
    vals_b = vals.copy()
    ids_b = ids.copy()
    noise = [[rnd.uniform(-1e-3, 1e-3) for _ in range(k)] for _ in range(n)]
    vals_b += np.array(noise)
    vals_b[17, 2] += 0.5  # one large perturbation: the max
    # top-1 flips in 9 rows: swap the first two entries of B
    flipped = [3, 20, 40, 41, 77, 101, 150, 160, 199]
    for r in flipped:
        ids_b[r, [0, 1]] = ids_b[r, [1, 0]]
        vals_b[r, [0, 1]] = vals_b[r, [1, 0]]
    # 4 rows whose B list shares only 5 of 8 ids
    replaced = [5, 6, 7, 8]
    for r in replaced:
        ids_b[r, 5:] = 1000 + np.arange(3)
    s = logit_stats(PairedRows(ids, vals, ids_b, vals_b))

    # independent: per row dicts
    diffs: list[float] = []
    rels: list[float] = []
    kls: list[float] = []
    same_top = 0
    overlap = 0.0
    for r in range(n):
        a = dict(zip(ids[r].tolist(), vals[r].tolist(), strict=False))
        b = dict(zip(ids_b[r].tolist(), vals_b[r].tolist(), strict=False))
        shared = [i for i in a if i in b]
        diffs += [abs(a[i] - b[i]) for i in shared]
        rels += [abs(a[i] - b[i]) / abs(b[i]) for i in shared if b[i] != 0]
        kls.append(kl_shared(a, b))
        same_top += int(ids[r, 0] == ids_b[r, 0])
        overlap += len(shared) / k
    assert same_top == n - len(flipped)
    assert s.rows == n and s.values == len(diffs) == n * k - 3 * len(replaced)
    assert s.max_abs == pytest.approx(max(diffs), rel=1e-12)
    assert s.max_abs == pytest.approx(abs(noise[17][2] + 0.5), rel=1e-9)
    assert s.p99_abs == pytest.approx(pct_linear(diffs, 99), rel=1e-12)
    assert s.mean_abs == pytest.approx(sum(diffs) / len(diffs), rel=1e-12)
    assert s.max_rel == pytest.approx(max(rels), rel=1e-12)
    assert s.top1_same == same_top
    assert s.top1_agreement is not None
    assert s.top1_agreement.value == pytest.approx(same_top / n)
    assert s.topk_overlap == pytest.approx(overlap / n)
    mean = sum(kls) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in kls) / (n - 1)) / math.sqrt(n)
    assert s.kl_rows == n
    assert s.kl_mean == pytest.approx(mean, rel=1e-9, abs=1e-15)
    assert s.kl_mean_se == pytest.approx(se, rel=1e-9, abs=1e-15)
    assert s.kl_max == pytest.approx(max(kls), rel=1e-9)


def test_kl_of_a_known_shift_and_a_known_tilt() -> None:
    ids = np.array([[1, 2, 3]], dtype=np.int32)
    va = np.array([[2.0, 1.0, 0.0]])
    # a common shift leaves the softmax alone
    assert logit_stats(PairedRows(ids, va, ids, va + 3.0)).kl_mean == pytest.approx(0.0, abs=1e-15)
    vb = np.array([[2.5, 1.0, 0.0]])
    pb = [math.exp(x) for x in (2.5, 1.0, 0.0)]
    pa = [math.exp(x) for x in (2.0, 1.0, 0.0)]
    pb = [x / sum(pb) for x in pb]
    pa = [x / sum(pa) for x in pa]
    want = sum(p * math.log(p / q) for p, q in zip(pb, pa, strict=False))
    s = logit_stats(PairedRows(ids, va, ids, vb))
    assert s.kl_mean == pytest.approx(want, rel=1e-12)
    assert s.kl_mean_se is None  # one row has no spread to estimate


def test_disjoint_rows_are_counted_not_infinite() -> None:
    ids, vals = make_rows(3, k=4)
    ids_b = ids.copy()
    ids_b[1] = [900, 901, 902, 903]
    s = logit_stats(PairedRows(ids, vals, ids_b, vals.copy()))
    assert s.rows_disjoint == 1
    assert s.kl_rows == 2 and s.values == 8
    assert s.max_abs == 0.0
    assert s.topk_overlap == pytest.approx(2 / 3)
    assert s.top1_same == 2


def test_non_finite_values_are_counted_and_left_out() -> None:
    ids, vals = make_rows(4, k=4)
    vb = vals.copy()
    vb[2, 1] = np.inf
    s = logit_stats(PairedRows(ids, vals, ids, vb))
    assert s.rows_nonfinite == 1 and s.values == 15 and s.kl_rows == 3
    assert s.max_abs == 0.0


def test_not_significant_under_min_rows_but_still_given() -> None:
    ids, vals = make_rows(MIN_ROWS - 1)
    s = logit_stats(PairedRows(ids, vals, ids, vals + 1e-6))
    assert not s.significant
    assert s.max_abs == pytest.approx(1e-6)
    assert "not significant: under 100 rows" in s.summary()
    assert logit_stats(PairedRows(*make_rows(MIN_ROWS), *make_rows(MIN_ROWS))).significant


def test_padded_rows_of_different_widths() -> None:
    ids = np.array([[5, 6, 7, -1]], dtype=np.int32)
    va = np.array([[3.0, 2.0, 1.0, np.nan]])
    ids_b = np.array([[5, 6, 7, 8]], dtype=np.int32)
    vb = np.array([[3.0, 2.5, 1.0, 0.0]])
    s = logit_stats(PairedRows(ids, va, ids_b, vb))
    assert s.values == 3 and s.topk_overlap == 1.0
    assert s.max_abs == 0.5 and s.rows_nonfinite == 0


def test_empty_pairs() -> None:
    z = np.zeros((0, 8))
    s = logit_stats(PairedRows(z.astype(np.int32), z, z.astype(np.int32), z))
    assert s.rows == 0 and s.max_abs is None and s.top1_agreement is None
    assert s.summary() == "logit stats: no paired rows"
    assert s.to_json()["max_abs"] is None


@pytest.mark.parametrize("x, n", [(0, 10), (10, 10), (7, 20), (95, 100), (1, 1)])
def test_wilson_interval(x: int, n: int) -> None:
    z = 1.959963984540054
    p = x / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    iv = wilson(x, n)
    assert iv.value == p
    assert iv.low == pytest.approx(max(0.0, centre - half), abs=1e-15)
    assert iv.high == pytest.approx(min(1.0, centre + half), abs=1e-15)
    assert 0.0 <= iv.low <= p <= iv.high <= 1.0
    # the textbook check: 0 of 10 has upper bound 0.2775
    if (x, n) == (0, 10):
        assert iv.high == pytest.approx(0.2775, abs=1e-4)


def test_relative_difference_leaves_out_zero_references() -> None:
    ids = np.array([[1, 2]], dtype=np.int32)
    s = logit_stats(PairedRows(ids, np.array([[4.0, 0.5]]), ids, np.array([[2.0, 0.0]])))
    assert s.max_rel == 1.0  # |4 - 2| / 2; the pair with b == 0 has no relative difference
    assert s.max_abs == 2.0


def mixed_rows() -> PairedRows:
    """Rows of every kind: partly shared, narrower in A, one entry, disjoint, empty in both."""
    ids_a = np.array([[1, 2, 3], [4, 5, -1], [7, -1, -1], [9, 10, 11], [-1, -1, -1]], np.int32)
    va = np.array([[3.0, 2.0, 1.0], [5.0, 4.0, np.nan], [2.0, np.nan, np.nan], [1.0, 0.5, 0.25],
                   [np.nan] * 3])
    ids_b = np.array([[1, 3, 8], [4, 5, 6], [7, 8, -1], [20, 21, 22], [-1, -1, -1]], np.int32)
    vb = np.array([[3.5, 1.0, 0.5], [5.0, 4.25, 1.0], [2.0, 1.0, np.nan], [1.0, 0.5, 0.25],
                   [np.nan] * 3])
    return PairedRows(ids_a, va, ids_b, vb)


def test_every_figure_of_mixed_rows() -> None:
    s = logit_stats(mixed_rows(), min_rows=3)
    kls = [kl_shared({1: 3.0, 3: 1.0}, {1: 3.5, 3: 1.0}), kl_shared({4: 5.0, 5: 4.0}, {4: 5.0, 5: 4.25}),
           kl_shared({7: 2.0}, {7: 2.0})]
    mean = sum(kls) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in kls) / 2) / math.sqrt(3)
    top1 = wilson(3, 5)
    overlaps = [2 / 3, 1.0, 1.0, 0.0]
    ov_mean = sum(overlaps) / 4
    ov_se = math.sqrt(sum((x - ov_mean) ** 2 for x in overlaps) / 3) / 2
    got = s.to_json()
    assert got == {
        "rows": 5, "values": 5, "rows_disjoint": 2, "rows_nonfinite": 0, "max_abs": 0.5,
        "p99_abs": pytest.approx(pct_linear([0.5, 0.0, 0.0, 0.25, 0.0], 99)),
        "mean_abs": pytest.approx(0.15), "max_rel": 0.5 / 3.5,
        "top1_agreement": 0.6, "top1_agreement_ci95": [top1.low, top1.high],
        "top1_agreement_method": "wilson",
        # |shared| / min(widths): 2/3, 2/2, 1/1, 0/3; the row with no entries has no width
        "topk_overlap": pytest.approx((2 / 3 + 1 + 1 + 0) / 4),
        "kl_rows": 3, "kl_mean": pytest.approx(mean, rel=1e-12),
        "kl_mean_se": pytest.approx(se, rel=1e-9), "kl_max": pytest.approx(max(kls), rel=1e-12),
        "significant": True, "min_rows": 3,
        # no requests given: every error is the independent-rows one, normal 95% intervals
        "topk_overlap_se": pytest.approx(ov_se, rel=1e-9),
        "topk_overlap_se_independent_rows": pytest.approx(ov_se, rel=1e-9),
        "topk_overlap_ci95": [pytest.approx(ov_mean - Z95 * ov_se, rel=1e-9),
                              pytest.approx(min(1.0, ov_mean + Z95 * ov_se), rel=1e-9)],
        "kl_mean_se_independent_rows": pytest.approx(se, rel=1e-9),
        "kl_mean_ci95": [0.0, pytest.approx(mean + Z95 * se, rel=1e-9)],
        "se_requests": 0,
        "se_method": "sample standard deviation over sqrt(rows) (independent rows)"}
    assert s.top1_same == 3
    assert s.summary() == (
        "logit stats: 5 row(s), max |d| 0.5, p99 0.49, mean 0.15, max rel 0.143, "
        "top-1 same 0.6000 [0.2307, 0.8824], top-k overlap 0.6667 ± 0.236, "
        "KL 0.00557 ± 0.00296, 2 disjoint")
    # two rows with a divergence already have a standard error
    two = logit_stats(PairedRows(*(x[:2] for x in (mixed_rows().ids_a, mixed_rows().vals_a,
                                                   mixed_rows().ids_b, mixed_rows().vals_b))))
    assert two.kl_rows == 2 and two.kl_mean_se is not None


def test_summary_of_rows_with_nothing_shared_and_of_too_few_rows() -> None:
    ids = np.array([[1, 2], [3, 4]], np.int32)
    s = logit_stats(PairedRows(ids, np.ones((2, 2)), ids + 10, np.ones((2, 2))))
    assert s.mean_abs is None and s.kl_mean is None and s.kl_rows == 0
    assert s.summary() == (
        "logit stats: 2 row(s), max |d| n/a, p99 n/a, mean n/a, max rel n/a, "
        "top-1 same 0.0000 [0.0000, 0.6576], top-k overlap 0.0000 ± 0, 2 disjoint "
        "(not significant: under 100 rows)")
    one = logit_stats(PairedRows(ids[:1], np.ones((1, 2)), ids[:1], np.ones((1, 2))))
    assert one.summary() == (
        "logit stats: 1 row(s), max |d| 0, p99 0, mean 0, max rel 0, top-1 same 1.0000 "
        "[0.2065, 1.0000], top-k overlap 1.0000, KL 0 (not significant: under 100 rows)")


def test_empty_pairs_give_no_figure() -> None:
    z = np.zeros((0, 8))
    s = logit_stats(PairedRows(z.astype(np.int32), z, z.astype(np.int32), z), min_rows=5)
    assert s.to_json() == {
        "rows": 0, "values": 0, "rows_disjoint": 0, "rows_nonfinite": 0, "max_abs": None,
        "p99_abs": None, "mean_abs": None, "max_rel": None, "top1_agreement": None,
        "top1_agreement_ci95": None, "top1_agreement_method": None, "topk_overlap": None,
        "kl_rows": 0, "kl_mean": None, "kl_mean_se": None, "kl_max": None,
        "significant": False, "min_rows": 5, "topk_overlap_se": None, "kl_mean_ci95": None,
        "topk_overlap_ci95": None, "kl_mean_se_independent_rows": None,
        "topk_overlap_se_independent_rows": None, "se_requests": 0,
        "se_method": "sample standard deviation over sqrt(rows) (independent rows)"}


def test_rows_past_one_block_add_up() -> None:
    # more rows than one accumulation block: every count is the sum over the blocks
    n = 2 * (1 << 15) + 7
    ids = np.tile(np.array([[1, 2]], np.int32), (n, 1))
    va = np.tile(np.array([[2.0, 1.0]]), (n, 1))
    ids_b, vb = ids.copy(), va.copy()
    ids_b[::1000] = [8, 9]  # disjoint
    vb[5::1000, 1] = np.inf  # a non-finite shared value
    ids_b[7::1000] = [2, 1]  # another top-1, the same values
    vb[7::1000] = [1.0, 2.0]
    vb[11::1000, 0] = 2.5
    s = logit_stats(PairedRows(ids, va, ids_b, vb))
    n_disjoint, n_inf, n_top1_off = len(range(0, n, 1000)), len(range(5, n, 1000)), len(range(7, n, 1000))
    assert s.rows == n and s.rows_disjoint == n_disjoint and s.rows_nonfinite == n_inf
    assert s.values == 2 * (n - n_disjoint) - n_inf
    assert s.top1_same == n - n_disjoint - n_top1_off
    assert s.topk_overlap == pytest.approx((n - n_disjoint) / n)
    assert s.kl_rows == n - n_disjoint - n_inf
    assert s.max_abs == 0.5 and s.mean_abs == pytest.approx(0.5 * len(range(11, n, 1000)) / s.values)


def test_divergence_of_rows_far_apart_in_scale() -> None:
    # one row near 1000, one near 0: each is normalised on its own maximum
    ids = np.array([[1, 2], [3, 4]], np.int32)
    vals = np.array([[1000.0, 999.0], [1.0, 0.0]])
    s = logit_stats(PairedRows(ids, vals, ids, vals.copy()))
    assert s.kl_rows == 2 and s.kl_mean == 0.0 and s.kl_max == 0.0


def test_infinities_and_partial_lists_raise_no_warning() -> None:
    ids = np.array([[1, 2, 3]], np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = logit_stats(PairedRows(ids, np.array([[np.inf, 2.0, 1.0]]), ids,
                                   np.array([[np.inf, 2.0, 1.0]])))
        part = logit_stats(PairedRows(ids, np.array([[3.0, 2.0, 1.0]]),
                                      np.array([[1, 2, 9]], np.int32), np.array([[3.0, 2.5, 1.0]])))
    assert s.rows_nonfinite == 1 and s.values == 2
    assert part.values == 2 and part.kl_rows == 1
    assert part.kl_mean == pytest.approx(kl_shared({1: 3.0, 2: 2.0}, {1: 3.0, 2: 2.5}), rel=1e-12)


def test_wilson_bounds_are_exact_at_the_ends() -> None:
    for n in (3, 6, 7, 12, 100):
        assert wilson(0, n).low == 0.0 and wilson(n, n).high == 1.0


def test_widened_pads_ids_with_minus_one_and_values_with_nan() -> None:
    p = PairedRows(np.array([[4, 5]], np.int32), np.array([[1.0, 0.5]]),
                   np.array([[4, 6, 7]], np.int32), np.array([[1.0, 0.5, 0.25]]))
    w = p.widened()
    assert w.ids_a.tolist() == [[4, 5, -1]] and w.ids_b.tolist() == [[4, 6, 7]]
    assert w.vals_a[0, :2].tolist() == [1.0, 0.5] and np.isnan(w.vals_a[0, 2])
    assert w.vals_b.tolist() == [[1.0, 0.5, 0.25]]
    back = PairedRows(p.ids_b, p.vals_b, p.ids_a, p.vals_a).widened()
    assert back.ids_b.tolist() == [[4, 5, -1]] and np.isnan(back.vals_b[0, 2])


def test_take_pairs_rows_of_each_arm() -> None:
    ids_a = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
    ids_b = np.array([[7, 8], [9, 10]], np.int32)
    p = PairedRows.take(ids_a, ids_a * 1.5, np.array([2, 0]), ids_b, ids_b * 0.5, np.array([1, 1]))
    assert p.ids_a.tolist() == [[5, 6], [1, 2]] and p.vals_a.tolist() == [[7.5, 9.0], [1.5, 3.0]]
    assert p.ids_b.tolist() == [[9, 10], [9, 10]] and p.vals_b.tolist() == [[4.5, 5.0], [4.5, 5.0]]


def test_overlap_is_over_the_narrower_list_of_each_row() -> None:
    ids_a = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    ids_b = np.array([[1, 2, -1], [4, 5, 6]], np.int32)
    vals = np.array([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    s = logit_stats(PairedRows(ids_a, vals, ids_b, np.where(ids_b >= 0, vals, np.nan)))
    assert s.topk_overlap == 1.0  # row 1: both of B's two ids are A's


def test_narrow_lists_matched_pairwise_as_the_sorted_search_matches_them() -> None:
    """`match_ids` compares narrow top lists entry by entry: the same answer as the sorted
    search, with padding (ids < 0) in both arms and repeated ids."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        ka, kb = (int(x) for x in rng.integers(1, 17, size=2))
        a = rng.integers(-2, 7, size=(n, ka)).astype(np.int32)
        b = rng.integers(-2, 7, size=(n, kb)).astype(np.int32)
        want = _match_sorted(a, b)
        got = _match_pairwise(a, b)
        assert (got[0] == want[0]).all() and (got[1] == want[1]).all(), (n, ka, kb)
        assert all((x == y).all() for x, y in zip(match_ids(a, b), want, strict=True))


def test_the_mean_difference_is_summed_in_the_rows_order() -> None:
    """The 99th percentile reorders the differences in place: the mean is taken before it."""
    va = np.array([[1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    pairs = PairedRows(np.arange(7, dtype=np.int32)[None, :], va,
                       np.arange(7, dtype=np.int32)[None, :], np.zeros((1, 7)))
    in_order, reordered = float(np.mean(va[0])), float(np.mean(np.sort(va[0])))
    if in_order == reordered:
        pytest.skip("this numpy sums both orders alike: nothing to tell apart")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        stats = logit_stats(pairs)
    assert stats.mean_abs == in_order and stats.max_abs == 1e16



@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.floats(allow_nan=False), max_size=6), max_size=6),
       st.integers(0, 40))
def test_differences_are_joined_as_their_blocks_concatenated(blocks: list[list[float]],
                                                             capacity: int) -> None:
    """Into one buffer while they fit the capacity announced, as blocks past it."""
    parts = [np.array(b, dtype=np.float64) for b in blocks]
    want = np.concatenate(parts) if parts else np.zeros(0)
    diffs = _Diffs(capacity)
    for part in parts:
        diffs.add(part)
    got = diffs.joined()
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def _fsum_outcome(f: object, values: np.ndarray) -> object:
    try:
        out = f(values)  # type: ignore[operator]
    except (ValueError, OverflowError) as exc:
        return type(exc)
    return "nan" if math.isnan(out) else (out, math.copysign(1.0, out))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, 0.1, -0.1, 1e308, -1e308, 3e-300, 2.5,
                                 math.nan, math.inf, -math.inf]), max_size=40),
       st.booleans())
def test_the_exact_sum_is_fsums(values: list[float], constant: bool) -> None:
    """Zeros left out, a constant array multiplied out, the rest read in blocks: the value
    (and the sign of a zero, and the error) math.fsum gives over every value."""
    x = np.array(values[:1] * len(values) if constant else values, dtype=np.float64)
    assert _fsum_outcome(exact_sum, x) == _exact_sum_wanted(x)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.floats(), st.floats(-1e-300, 1e-300), st.floats(-1e3, 1e3),
                          st.sampled_from([2.0 ** 1020, -(2.0 ** 1020), 5e-324, 0.1, 0.3])),
                max_size=60),
       st.integers(1, 7))
@example([1e308, 1e308, -1e308], 7)  # fsum overflows on the way to a sum it could hold
@example([1.7976931348623157e308, 1e292], 2)
@example([math.inf, 1e308, 1e308], 3)  # the infinity decides; fsum overflows on the rest
@example([math.nan, -1e308, -1e308], 3)
def test_the_exact_sum_of_any_doubles_is_fsums(values: list[float], block: int) -> None:
    """Any doubles, subnormal to near the overflow, in blocks of any size: the value, the sign
    of a zero and the error of math.fsum, except where fsum refuses a sum for the overflow of
    its own partial sums: there the correctly rounded sum (infinite past the largest double)."""
    import difftest.numerics.exact as exact

    x = np.array(values, dtype=np.float64)
    with swapped(exact, _INT_BLOCK=block):
        got = _fsum_outcome(exact_sum, x)
    assert got == _exact_sum_wanted(x)


def _exact_sum_wanted(x: np.ndarray) -> object:
    """fsum's outcome, but for its intermediate overflow: the correctly rounded sum there, or
    with a non-finite value, the IEEE sum of the non-finite values (nan, or an infinity: no
    finite value changes those; fsum raises a ValueError for inf + -inf, IEEE gives nan)."""
    want = _fsum_outcome(lambda v: math.fsum(v.tolist()), x)
    special = x[~np.isfinite(x)]
    if special.size:
        with np.errstate(invalid="ignore"):
            want = _fsum_outcome(lambda v: float(np.sum(v)), special)
    if want is OverflowError and np.isfinite(x).all():
        exact = sum((Fraction(v) for v in x.tolist()), Fraction(0))
        try:
            rounded = float(exact)
        except OverflowError:
            rounded = math.inf if exact > 0 else -math.inf
        want = (rounded, math.copysign(1.0, rounded))
    return want


def _accumulated_by_definition(acc: _Acc, ids_a: np.ndarray, va: np.ndarray,
                               ids_b: np.ndarray, shared: np.ndarray, vb: np.ndarray,
                               d: np.ndarray, start: int) -> None:
    """What `_accumulate_matched` adds, every row gathered by its masks."""
    valid_a, valid_b = ids_a >= 0, ids_b >= 0
    count, width = shared.sum(axis=1), np.minimum(valid_a.sum(axis=1), valid_b.sum(axis=1))
    acc.top1 += int(np.sum(valid_a[:, 0] & (ids_a[:, 0] == ids_b[:, 0])))
    has_width = width > 0
    acc.overlaps.append(count[has_width] / width[has_width])
    acc.overlap_at.append(start + np.flatnonzero(has_width))
    disjoint = count == 0
    acc.disjoint += int(disjoint.sum())
    finite = np.isfinite(va) & np.isfinite(vb)
    bad = np.any(shared & ~finite, axis=1)
    acc.nonfinite += int(bad.sum())
    use = shared & finite
    acc.diffs.add(d[use])
    nz = use & (vb != 0)
    rel = d[nz] / np.abs(vb[nz])
    if rel.size:
        acc.rel_max.append(float(rel.max()))
    rows = ~disjoint & ~bad
    if rows.any():
        m = shared[rows]
        a, b = np.where(m, va[rows], -np.inf), np.where(m, vb[rows], -np.inf)
        la = a - (a.max(axis=1, keepdims=True) + np.log(np.exp(
            a - a.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)))
        lb = b - (b.max(axis=1, keepdims=True) + np.log(np.exp(
            b - b.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)))
        with np.errstate(invalid="ignore"):
            terms = np.where(m, np.exp(lb) * (lb - la), 0.0)
        acc.kls.append(np.maximum(terms.sum(axis=1), 0.0))
        acc.kl_at.append(start + np.flatnonzero(rows))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_statistics_of_a_block_are_those_of_its_rows_gathered_by_mask(seed: int,
                                                                     plain: bool) -> None:
    """Blocks whose every row has a width, a shared id and finite values are read as they
    are, not gathered; quotients are taken where B's value is not 0: the same sums, lists
    and counts as gathering every row by its masks."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 12)), int(rng.integers(1, 5))
    ids_a = rng.integers(-1 if not plain else 0, 6, size=(n, k)).astype(np.int32)
    ids_b = rng.integers(-1 if not plain else 0, 6, size=(n, k)).astype(np.int32)
    shared = (ids_a >= 0) & (rng.integers(0, 4 if not plain else 1, size=(n, k)) == 0)
    pool = [0.0, 1.5, -2.25, 7.0] + ([] if plain else [np.nan, np.inf])
    va, vb = rng.choice(pool, size=(n, k)), rng.choice(pool, size=(n, k))
    with np.errstate(invalid="ignore"):
        d = np.abs(va - vb)
    got, want = _Acc(_Diffs(), [], [], [], [], []), _Acc(_Diffs(), [], [], [], [], [])
    start = int(rng.integers(0, 3)) * int(rng.integers(0, 100))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _accumulate_matched(got, ids_a, va, ids_b, shared, vb, d, start)
        _accumulated_by_definition(want, ids_a, va, ids_b, shared, vb, d, start)
    assert (got.top1, got.disjoint, got.nonfinite) == (want.top1, want.disjoint, want.nonfinite)
    assert got.rel_max == want.rel_max
    assert np.array_equal(got.diffs.joined(), want.diffs.joined(), equal_nan=True)
    for name in ("kls", "overlaps"):
        x, y = getattr(got, name), getattr(want, name)
        assert len(x) == len(y) and all(np.array_equal(p, q, equal_nan=True) and p.dtype == q.dtype
                                        for p, q in zip(x, y, strict=True)), name
    for name in ("kl_at", "overlap_at"):  # every row of the block: a range of them
        x, y = getattr(got, name), getattr(want, name)
        assert len(x) == len(y) and all(list(p) == q.tolist() for p, q in zip(x, y, strict=True))
        rows = _rows_of(x, n + start)
        if isinstance(rows, slice):
            assert start == 0 and all(q.tolist() == list(range(n)) for q in y)
        else:
            assert rows.dtype == np.int64 and rows.tolist() == [i for q in y for i in q.tolist()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 4)), max_size=6), st.integers(0, 3))
def test_the_rows_of_blocks_of_every_row_are_every_row(blocks: list[tuple[bool, int]],
                                                      extra: int) -> None:
    """A block whose every row has a value is kept as a range; ranges that cover 0..n-1 in
    order are every row (a slice), anything else the rows' indices."""
    parts: list[np.ndarray | range] = []
    want: list[int] = []
    start = 0
    for whole, size in blocks:
        parts.append(range(start, start + size) if whole
                     else start + np.arange(size)[::2])
        want += list(range(start, start + size)) if whole else list(range(start, start + size, 2))
        start += size
    n = start + extra
    rows = _rows_of(parts, n)
    labels = np.arange(n) * 10
    assert labels[rows].tolist() == [10 * i for i in want]
    if all(isinstance(p, range) for p in parts) and extra == 0:
        assert isinstance(rows, slice)
