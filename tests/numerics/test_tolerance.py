"""isclose tolerances, the noise floor, disjoint top lists and the printed resolution."""

from __future__ import annotations

import math
import warnings
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.numerics.stats import PairedRows, match_ids
from difftest.numerics import tolerance
from difftest.numerics.tolerance import (RowDiffs, Tolerance, exact_values, finite_max,
                                         judge_matched, judge_rows, match_rows)


def rows(a: list[list[tuple[int, float]]], b: list[list[tuple[int, float]]]) -> PairedRows:
    def arr(rs: list[list[tuple[int, float]]]) -> tuple[np.ndarray, np.ndarray]:
        k = max(len(r) for r in rs)
        ids = np.full((len(rs), k), -1, dtype=np.int32)
        vals = np.full((len(rs), k), np.nan)
        for i, r in enumerate(rs):
            for j, (t, v) in enumerate(r):
                ids[i, j], vals[i, j] = t, v
        return ids, vals
    return PairedRows(*arr(a), *arr(b))


def test_isclose_meaning_of_atol_and_rtol() -> None:
    a = [[(1, 10.0), (2, 5.0)], [(1, 100.0), (2, 1.0)]]
    b = [[(1, 10.001), (2, 5.0)], [(1, 100.02), (2, 1.0)]]
    p = rows(a, b)
    # numpy's isclose, for the record: |a - b| <= atol + rtol * |b|
    va, vb = p.vals_a[:, 0], p.vals_b[:, 0]
    for atol, rtol in [(0.0, 0.0), (1e-3, 0.0), (0.0, 1e-4), (1e-3, 1e-4), (0.0, 2e-4),
                       (0.02, 0.0)]:
        got = judge_rows(p, Tolerance(atol, rtol), None, None).differs
        want = ~np.isclose(va, vb, rtol=rtol, atol=atol)
        assert got.tolist() == want.tolist(), (atol, rtol)


def test_floor_raises_the_bound_only_above_the_tolerance() -> None:
    p = rows([[(1, 10.0)]], [[(1, 10.00002)]])
    assert judge_rows(p, Tolerance(1e-5, 0.0), None, None).differs.tolist() == [True]
    assert judge_rows(p, Tolerance(1e-5, 0.0, floor=3e-5), None, None).differs.tolist() == [False]
    assert judge_rows(p, Tolerance(1e-4, 0.0, floor=1e-6), None, None).differs.tolist() == [False]


def test_bitwise_counts_a_reordered_list_and_tolerance_does_not() -> None:
    p = rows([[(1, 5.0), (2, 5.0)]], [[(2, 5.0), (1, 5.0)]])
    assert judge_rows(p, Tolerance(), None, None).differs.tolist() == [True]
    assert judge_rows(p, Tolerance(atol=1e-9), None, None).differs.tolist() == [False]


def test_disjoint_lists_are_their_own_kind_never_infinite() -> None:
    p = rows([[(1, 5.0), (2, 4.0)], [(1, 5.0), (2, 4.0)]],
             [[(7, 5.0), (8, 4.0)], [(1, 5.5), (9, 4.0)]])
    for tol in (Tolerance(), Tolerance(atol=10.0)):
        r = judge_rows(p, tol, None, None)
        assert r.disjoint.tolist() == [True, False]
        assert r.differs.tolist()[0] is True
        assert np.isnan(r.diff[0]) and r.diff[1] == 0.5
        assert finite_max(r.diff) == 0.5


def test_nan_in_one_arm_counts_and_stays_out_of_the_max() -> None:
    p = rows([[(1, float("nan")), (2, 1.0)], [(1, float("inf")), (2, 1.0)]],
             [[(1, 3.0), (2, 1.0)], [(1, float("inf")), (2, 1.0)]])
    r = judge_rows(p, Tolerance(atol=1.0), None, None)
    assert r.differs.tolist() == [True, False]
    assert finite_max(r.diff) == 0.0


def test_six_digit_quantum_is_not_a_difference_of_that_size() -> None:
    # the case: 2.87758 vs 2.87757 printed with %.6g; 1.0000000000065e-05 in float64
    p = rows([[(1, 2.87758), (2, 1.5)]], [[(1, 2.87757), (2, 1.5)]])
    assert 2.87758 - 2.87757 > 1e-5
    # atol of one quantum: the snapped difference is exactly one quantum, not above it
    one = judge_rows(p, Tolerance(atol=1e-5), 6, 6)
    assert one.diff[0] == 1e-5  # the size reported is the printed one, not the float64 artefact
    # one quantum printed: the true difference lies in (0, 2e-5), so atol 1e-5 cannot decide
    assert one.differs.tolist() == [False] and one.unresolved.tolist() == [True]
    two = judge_rows(p, Tolerance(atol=2e-5), 6, 6)
    assert two.differs.tolist() == [False] and two.unresolved.tolist() == [False]
    # without knowing the digits, the float64 artefact would count
    assert judge_rows(p, Tolerance(atol=1e-5), None, None).differs.tolist() == [True]
    # atol finer than the quantum: cannot be decided, never counted, never silently equal
    fine = judge_rows(p, Tolerance(atol=2e-6), 6, 6)
    assert fine.differs.tolist() == [False] and fine.unresolved.tolist() == [True]
    # bitwise: a printed difference is real, and flagged as one quantum
    bit = judge_rows(p, Tolerance(), 6, 6)
    assert bit.differs.tolist() == [True] and bit.one_quantum.tolist() == [True]
    # three quanta apart are certainly above an atol of one quantum
    far = rows([[(1, 2.87760)]], [[(1, 2.87757)]])
    assert judge_rows(far, Tolerance(atol=1e-5), 6, 6).differs.tolist() == [True]
    assert judge_rows(far, Tolerance(), 6, 6).one_quantum.tolist() == [False]


def test_tolerance_finer_than_resolution() -> None:
    assert Tolerance(atol=1e-5).finer_than(1e-4, 6)
    assert not Tolerance(atol=1e-4).finer_than(1e-4, 6)
    assert not Tolerance(rtol=1e-5).finer_than(1e-4, 6)  # rtol at the relative quantum
    assert Tolerance(rtol=1e-6).finer_than(1e-4, 6)
    assert not Tolerance().finer_than(1e-4, 6)  # bitwise is never finer: any difference counts
    assert not Tolerance(atol=1e-5, rtol=1e-5).finer_than(1e-7, 9)


def test_widths_differ() -> None:
    p = rows([[(1, 2.0), (2, 1.0)]], [[(1, 2.0), (2, 1.0), (3, 0.5)]])
    r = judge_rows(p, Tolerance(), None, None)
    assert r.differs.tolist() == [True]  # bitwise: the lists differ
    assert judge_rows(p, Tolerance(atol=1e-9), None, None).differs.tolist() == [False]


@pytest.mark.parametrize("tol", [Tolerance(), Tolerance(1e-5, 1e-5)])
def test_empty(tol: Tolerance) -> None:
    z = np.zeros((0, 8))
    r = judge_rows(PairedRows(z.astype(np.int32), z, z.astype(np.int32), z), tol, 9, 9)
    assert r.diff.size == 0 and finite_max(r.diff) is None


def test_nine_digits_are_exact_float32_values() -> None:
    a32 = np.float32(13.8412075)
    b32 = np.nextafter(a32, np.float32(20))  # one float32 ulp above
    p = rows([[(1, float(f"{float(a32):.9g}"))]], [[(1, float(f"{float(b32):.9g}"))]])
    ulp = float(b32) - float(a32)
    r = judge_rows(p, Tolerance(atol=ulp), 9, 9)
    assert r.diff[0] == ulp  # the exact float32 difference, not the decimal one
    assert not r.differs[0] and not r.unresolved[0]
    assert judge_rows(p, Tolerance(atol=ulp / 2), 9, 9).differs.tolist() == [True]


def test_describe_names_each_tolerance_set() -> None:
    assert Tolerance().describe() == "atol 0"
    assert Tolerance(atol=1e-5).describe() == "atol 1e-05"
    assert Tolerance(1e-5, 2e-4, floor=3.14159e-5).describe() == "atol 1e-05, rtol 0.0002, floor 3.14e-05"


def test_rtol_finer_than_the_relative_quantum() -> None:
    # 6 digits: the relative quantum is 1e-5; 8e-6 is below it
    assert Tolerance(rtol=8e-6).finer_than(1e-4, 6)
    assert not Tolerance(rtol=8e-6).finer_than(1e-4, 7)  # relative quantum 1e-6


def test_bound_of_an_infinite_reference_raises_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = Tolerance(atol=1e-3).bound(np.array([np.inf, 2.0]))
    assert np.isnan(b[0]) and b[1] == 1e-3


def test_huge_tolerances_reach_infinity_without_a_warning() -> None:
    """atol + rtol * |b| past float64's range is an infinite bound (nothing can differ, which
    the verdict then says), not an overflow warning on the user's terminal."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tol = Tolerance(atol=1e308, rtol=1e308)
        assert tol.bound(np.array([10.0, 0.0])).tolist() == [np.inf, 1e308]
        floored = Tolerance(atol=1e308, floor=1e-3)
        assert floored.band(np.array([1.0])).tolist() == [np.inf]
        r = judge_rows(rows([[(1, 1.0)]], [[(1, 5.0)]]), tol, 6, 6)
    assert r.differs.tolist() == [False]


def test_equal_infinities_and_one_sided_nan_raise_no_warning() -> None:
    p = rows([[(1, float("inf")), (2, float("nan"))]], [[(1, float("inf")), (2, 1.0)]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for tol in (Tolerance(), Tolerance(atol=0.5)):
            r = judge_rows(p, tol, 6, 6)
            assert r.differs.tolist() == [True] and r.exceed.tolist() == [1]


def test_a_nine_digit_print_beyond_float32_is_its_infinity_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = exact_values(np.array([1e39, -1e39, 13.8412075]), 9)
    assert got[0] == np.inf and got[1] == -np.inf
    assert got[2] == float(np.float32(13.8412075)) and got[2] != 13.8412075
    # fewer digits, or unknown digits: the values as printed
    assert exact_values(np.array([13.8412075]), 6).tolist() == [13.8412075]
    assert exact_values(np.array([13.8412075]), None).tolist() == [13.8412075]


def test_token_id_zero_is_an_id() -> None:
    p = rows([[(0, 5.0), (3, 4.0)]], [[(0, 5.25), (4, 4.0)]])
    r = judge_rows(p, Tolerance(atol=0.1), None, None)
    assert r.disjoint.tolist() == [False] and r.diff.tolist() == [0.25]
    assert r.values.tolist() == [1] and r.exceed.tolist() == [1]


def test_counts_and_flags_are_per_row() -> None:
    # row 0: one quantum; row 1: three and two quanta; row 2: equal
    a = [[(1, 2.87758), (2, 1.5)], [(1, 2.87760), (2, 1.50002)], [(1, 2.87758), (2, 1.5)]]
    b = [[(1, 2.87757), (2, 1.5)], [(1, 2.87757), (2, 1.5)], [(1, 2.87758), (2, 1.5)]]
    p = rows(a, b)
    bit = judge_rows(p, Tolerance(), 6, 6)
    assert bit.differs.tolist() == [True, True, False]
    assert bit.one_quantum.tolist() == [True, False, False]
    assert bit.exceed.tolist() == [1, 2, 0] and bit.values.tolist() == [2, 2, 2]
    assert bit.diff.tolist() == [1e-5, 3e-5, 0.0]  # snapped: not 3.0000000000000004e-05
    assert bit.unresolved.tolist() == [False] * 3
    # atol of half a quantum: row 0 (one quantum) cannot be decided, both values of row 1 are
    # certainly above it, row 2 (equal prints) is equal
    tol = judge_rows(p, Tolerance(atol=5e-6), 6, 6)
    assert tol.differs.tolist() == [False, True, False]
    assert tol.unresolved.tolist() == [True, False, False]
    assert tol.exceed.tolist() == [0, 2, 0] and tol.values.tolist() == [2, 2, 2]
    assert tol.one_quantum.tolist() == [False] * 3
    # two quanta apart are more than one quantum
    two = rows([[(1, 2.87759)]], [[(1, 2.87757)]])
    assert judge_rows(two, Tolerance(), 6, 6).one_quantum.tolist() == [False]


def test_equal_prints_are_never_unresolved() -> None:
    p = rows([[(1, 2.87757)]], [[(1, 2.87757)]])
    r = judge_rows(p, Tolerance(atol=1e-6), 6, 6)  # finer than the quantum
    assert r.differs.tolist() == [False] and r.unresolved.tolist() == [False]


@pytest.mark.parametrize("digits", [(6, 6), (5, 6), (6, 5)])
def test_quanta_of_one_and_above_snap_on_their_own_grid(digits: tuple[int, int]) -> None:
    # 6 digits: 1234560 has a quantum of 10, 123457 of 1; 5 digits: 1234600 of 100
    p = rows([[(1, 1234580.0), (2, 123458.0)]], [[(1, 1234560.0), (2, 123456.0)]])
    r = judge_rows(p, Tolerance(), *digits)
    assert r.diff.tolist() == [20.0] and r.exceed.tolist() == [2]


def test_two_quanta_are_one_grid_only_when_both_are_printed() -> None:
    # 10.0001 (quantum 1e-4) against 9.99995 (quantum 1e-5): the finer grid, 1.5e-4
    p = rows([[(1, 10.0001)]], [[(1, 9.99995)]])
    assert judge_rows(p, Tolerance(), 6, 6).diff.tolist() == [1.5e-4]
    assert judge_rows(p, Tolerance(atol=1e-4), 6, 6).unresolved.tolist() == [True]


@pytest.mark.parametrize("exact_side", ["a", "b"])
def test_an_exact_value_against_a_printed_one_is_not_snapped_to_the_printed_grid(
        exact_side: str) -> None:
    # 2.877574 known exactly (unknown digits) against 2.87757 printed to 6 digits: the true
    # difference lies in [0, 9e-6]. Snapped onto the printed grid (1e-5) its 4e-6 would be 0 and
    # pass atol 5e-6; unsnapped it is 4e-6 +- 5e-6: unresolved, and so is 6e-6 +- 5e-6.
    exact, printed = [[(1, 2.877574)], [(1, 2.877576)]], [[(1, 2.87757)], [(1, 2.87757)]]
    p = rows(exact, printed) if exact_side == "a" else rows(printed, exact)
    digits = (None, 6) if exact_side == "a" else (6, None)
    r = judge_rows(p, Tolerance(atol=5e-6), *digits)
    assert r.diff.tolist() == [abs(2.877574 - 2.87757), abs(2.877576 - 2.87757)]
    assert r.unresolved.tolist() == [True, True] and r.differs.tolist() == [False, False]


@pytest.mark.parametrize("zero_side", ["a", "b"])
def test_zero_is_printed_exactly(zero_side: str) -> None:
    # 0 has no rounding: against 0.5 (quantum 1e-6) the difference is 0.5 give or take 5e-7
    z, v = [[(1, 0.0)]], [[(1, 0.5)]]
    p = rows(z, v) if zero_side == "a" else rows(v, z)
    r = judge_rows(p, Tolerance(atol=0.4999), 6, 6)
    assert r.differs.tolist() == [True] and r.unresolved.tolist() == [False]


def test_rows_without_top_lists() -> None:
    empty = np.zeros((2, 0))
    p = PairedRows(empty.astype(np.int32), empty, empty.astype(np.int32), empty)
    for tol in (Tolerance(), Tolerance(atol=1.0)):
        r = judge_rows(p, tol, 6, 6)
        assert np.isnan(r.diff).all() and r.diff.shape == (2,)
        for flags in (r.differs, r.disjoint, r.unresolved, r.one_quantum):
            assert flags.dtype == bool and flags.tolist() == [False, False]
        for counts in (r.exceed, r.values):
            assert counts.dtype == np.int64 and counts.tolist() == [0, 0]


@pytest.mark.parametrize("tol", [Tolerance(), Tolerance(atol=1e-3)])
def test_flags_are_boolean_and_counts_integers(tol: Tolerance) -> None:
    r = judge_rows(rows([[(1, 1.0)]], [[(1, 1.5)]]), tol, 6, 6)
    for flags in (r.differs, r.disjoint, r.unresolved, r.one_quantum):
        assert flags.dtype == bool
    assert r.exceed.dtype.kind == "i" and r.values.dtype.kind == "i"


def test_a_dropped_id_makes_its_row_differ_and_counts_stay_over_the_shared_values() -> None:
    # B lists 12 at 9.5, A does not (A's value is at most its last, 1.9): the row differs, and
    # the exceed count (what the excess test weighs) stays out of the shared values it counts
    p = rows([[(11, 10.0), (13, 3.0), (14, 2.0), (15, 1.9)]],
             [[(11, 10.0), (12, 9.5), (13, 3.0), (14, 2.0)]])
    r = judge_rows(p, Tolerance(atol=1e-3), None, None)
    assert r.differs.tolist() == [True] and r.disjoint.tolist() == [False]
    assert r.values.tolist() == [3] and r.exceed.tolist() == [0]
    assert (r.exceed <= r.values).all() and (r.beyond <= r.values).all()


def _random_pairs(seed: int) -> PairedRows:
    """Paired top lists, sorted and padded, half of B's rows A's own list (its values moved
    or not), the rest drawn apart; ids from a small pool, so lists overlap, reorder and drop."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 30)), int(rng.integers(1, 6))
    pool = np.array([0.0, 1.0, 1.5, 2.0, 3.25, 10.0, np.nan, np.inf, -np.inf])

    def lists() -> tuple[np.ndarray, np.ndarray]:
        ids = np.full((n, k), -1, dtype=np.int32)
        vals = np.full((n, k), np.nan)
        for i in range(n):
            width = int(rng.integers(1, k + 1))
            ids[i, :width] = rng.choice(8, size=width, replace=bool(rng.integers(0, 4) == 0))
            vals[i, :width] = -np.sort(-rng.choice(pool, size=width))
        return ids, vals

    ids_a, vals_a = lists()
    ids_b, vals_b = lists()
    same = rng.integers(0, 2, size=n).astype(bool)
    ids_b[same] = ids_a[same]
    moved = np.where(rng.integers(0, 3, size=(n, k)) == 0, 0.5, 0.0)
    vals_b[same] = (vals_a + moved)[same]
    return PairedRows(ids_a, vals_a, ids_b, vals_b)


@pytest.mark.parametrize("tol", [Tolerance(), Tolerance(atol=0.1), Tolerance(0.1, 0.01, 0.3)])
@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), digits=st.sampled_from([None, 6, 9]))
def test_drops_are_looked_for_only_where_the_two_lists_differ(
        tol: Tolerance, seed: int, digits: int | None) -> None:
    """A row whose two lists hold the same ids in the same columns drops no entry: the
    judgement looks for dropped entries in the other rows only, and judges every row as a
    search of every row does."""
    m = match_rows(_random_pairs(seed), digits, digits)
    assert m is not None
    got = judge_matched(m, tol)
    real = tolerance._drops
    try:
        tolerance._drops = lambda m, tol, rows: real(m, tol, np.ones(len(m), dtype=bool))
        want = judge_matched(m, tol)
    finally:
        tolerance._drops = real
    for field in fields(RowDiffs):
        x, y = getattr(got, field.name), getattr(want, field.name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), field


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), digits=st.sampled_from([None, 6, 9]))
def test_b_is_paired_with_a_by_the_columns_matched(seed: int, digits: int | None) -> None:
    """B's value and quantum beside each of A's entries are B's own at the matched column."""
    m = match_rows(_random_pairs(seed), digits, digits)
    assert m is not None
    rows = np.arange(len(m))[:, None]
    _, where = match_ids(m.ids_a, m.ids_b)
    assert np.array_equal(m.vb, m.vb_own[rows, where], equal_nan=True)
    assert np.array_equal(m.qb, m.qb_own[rows, where], equal_nan=True)


def test_a_certain_move_of_zero_is_positive_zero_whatever_kernel_numpy_picks() -> None:
    """A listed -0.0 that the other arm dropped moves by -0.0 - 0.0: which zero np.fmax keeps of
    +0.0 and -0.0 depends on the kernel numpy runs for the array's length (here, from 8 rows,
    -0.0), so a row's figure would depend on how many rows were judged with it."""
    n = 8
    a = rows([[(1, 0.0), (2, -0.0)]] * n, [[(1, 0.0), (3, math.nan)]] * n)
    resolved = judge_rows(a, Tolerance(), None, None).resolved
    assert resolved.tolist() == [0.0] * n and not np.signbit(resolved).any()
