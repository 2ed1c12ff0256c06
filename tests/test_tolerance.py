"""isclose tolerances, the noise floor, disjoint top lists and the printed resolution."""

from __future__ import annotations

import numpy as np
import pytest

from difftest.stats import PairedRows
from difftest.tolerance import Tolerance, finite_max, judge_rows


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
