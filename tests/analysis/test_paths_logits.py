"""The logit half of a comparison, on small traces: logits one arm alone traced, an A/A noise
floor with and without logits, the floor and rtol reaching the judge, the per-row logit columns,
the statistics and resolutions of the compared rows only, rows judged in several blocks, keys of
rows past every compared position, and a row traced twice. The records are what the reports
read, so they are asserted whole."""

from __future__ import annotations

import math

import numpy as np
import pytest

import difftest.analysis.compare as compare_module
from difftest.analysis.compare import STATUS_NAMES, LogitFindings, OneSided, compare
from difftest.core.kinds import DraftingKind
from difftest.numerics.noise import ExcessTest, FlipRule, NoiseFloor, RerunPair, flip_test, noise_floor
from difftest.numerics.resolution import Resolution
from difftest.numerics.stats import PairedRows, logit_stats
from difftest.numerics.tolerance import Tolerance
from difftest.trace import parse_lines
from conftest import logits_line, verify_line

NONE = Resolution(None, None)


_verify, _logits = verify_line, logits_line


def _floor(value: float, *, flips: int = 0, rows: int = 360, values_a: int = 2880) -> NoiseFloor:
    """A measured floor of arm A: `value` the largest A/A difference over `values_a` values."""
    stats = logit_stats(PairedRows(np.zeros((values_a // 8, 8), np.int32), np.zeros((values_a // 8, 8)),
                                   np.zeros((values_a // 8, 8), np.int32), np.zeros((values_a // 8, 8))))
    return noise_floor("a", 3, [RerunPair(0, 1, rows, flips, values_a // 8, value, False)], stats)


STEP = _verify("p", 1, [5, 6], [5, 6, 9])
LOGITS = [_logits("p", 1, 1, [(5, "2.5"), (3, "1.25")]), _logits("p", 1, 2, [(6, "3.5"), (1, "1.5")])]


@pytest.mark.parametrize("side", ["a", "b"])
def test_logits_one_arm_alone_traced_are_not_compared(side: str) -> None:
    traced, plain = parse_lines([*LOGITS, STEP]), parse_lines([STEP])
    a, b = (traced, plain) if side == "a" else (plain, traced)
    levels = (3, 1) if side == "a" else (1, 3)
    cmp = compare(a, b)
    assert cmp.logits == LogitFindings(None, NONE, NONE, 0, 0, 0,
                                       not_compared=OneSided(side, *levels))
    assert (cmp.logit_rows_compared, cmp.blocks_logit_differing, cmp.blocks_compared) == (0, 0, 1)
    assert cmp.first_logit_difference is None and cmp.max_abs_logit_diff is None
    r = cmp.rows
    for column in (r.margin_a, r.margin_b, r.logit_a, r.logit_b, r.abs_logit_diff):
        assert np.isnan(column).all() and column.size == 2
    assert r.logit_differs.tolist() == [False, False]
    has, lacks = ("x", "y") if side == "a" else ("y", "x")
    assert cmp.logits.not_compared is not None
    assert cmp.logits.not_compared.sentence(("x", "y")) == (
        f"logits could not be compared: {has} traced block logits (level 3) and {lacks} did not "
        "(level 1); only tokens were compared (set the same VT_SPEC_TRACE in both arms)")
    # a floor still reaches the findings, with its flip test
    floor = _floor(1e-3)
    with_floor = compare(a, b, floor=floor)
    assert with_floor.logits == LogitFindings(
        None, NONE, NONE, 0, 0, 0, not_compared=OneSided(side, *levels), floor=floor,
        flips=flip_test(0, 2, floor))


def test_a_floor_without_logits_keeps_the_floor_and_judges_the_flips() -> None:
    a = parse_lines([_verify("p", 1, [5, 6], [5, 6, 9]), _verify("p", 4, [1, 2], [1, 2, 3])])
    b = parse_lines([_verify("p", 1, [5, 7], [5, 6, 9]), _verify("p", 4, [1, 2], [1, 2, 3])])
    floor = _floor(1e-3, flips=9)  # A flips 9 times in 360 rows against itself
    cmp = compare(a, b, floor=floor)
    test = flip_test(1, 4, floor)
    assert not test.counts and test.rule is FlipRule.EXACT_TEST
    assert cmp.logits == LogitFindings(None, NONE, NONE, 0, 0, 0, floor=floor, flips=test)
    # the flip a rerun of A would show is noise, not a hard difference
    assert [STATUS_NAMES[int(s)] for s in cmp.rows.status] == ["same", "noise-flip", "same", "same"]
    assert cmp.blocks_differing == 0 and cmp.first_difference is None
    assert cmp.tolerance == Tolerance(0.0, 0.0, 1e-3)
    # a zero floor is strict: the same flip counts
    zero = noise_floor("a", 3, [RerunPair(0, 1, 360, 0, 45, 0.0, True)], None)
    strict = compare(a, b, floor=zero)
    assert [STATUS_NAMES[int(s)] for s in strict.rows.status] == ["same", "differ", "same", "same"]
    assert strict.logits is not None and strict.logits.flips == flip_test(1, 4, zero)
    assert strict.logits.flips.counts and strict.blocks_differing == 1


def _three_rows(b_values: tuple[str, str, str], *, b_third: list[tuple[int, str]] | None = None
                ) -> tuple[list[str], list[str]]:
    a = [_logits("p", 1, 1, [(5, "2.5"), (3, "1.25")]), _logits("p", 1, 2, [(6, "3.5"), (1, "1.5")]),
         _logits("p", 1, 3, [(7, "0.5"), (2, "0.25")]), _verify("p", 1, [5, 6, 7], [5, 6, 7, 9])]
    third = b_third if b_third is not None else [(7, b_values[2]), (2, "0.25")]
    b = [_logits("p", 1, 1, [(5, b_values[0]), (3, "1.25")]),
         _logits("p", 1, 2, [(6, b_values[1]), (1, "1.5")]),
         _logits("p", 1, 3, third), _verify("p", 1, [5, 6, 7], [5, 6, 7, 9])]
    return a, b


def test_values_above_the_floor_that_a_rerun_would_show_are_noise_and_disjoint_rows_are_not() -> None:
    # row 1 0.02 above A (above the floor 0.01), row 2 0.005 (within the floor), row 3 disjoint
    a, b = _three_rows(("2.52", "3.505", ""), b_third=[(8, "0.5"), (9, "0.25")])
    floor = _floor(0.01, values_a=80)  # one of B's 4 values above it: p = 4/84, not rare
    cmp = compare(parse_lines(a), parse_lines(b), floor=floor)
    lg = cmp.logits
    assert lg is not None
    assert lg.excess == ExcessTest(exceed=1, values_b=4, values_a=80, alpha=0.01,
                                   p_value=pytest.approx(4 / 84), counts=False,
                                   rule=FlipRule.EXACT_TEST, needed=2)
    assert lg.rows_within_noise == 1 and lg.rows_disjoint == 1 and lg.floor is floor
    assert cmp.rows.logit_differs.tolist() == [False, False, True]
    assert cmp.blocks_logit_differing == 1
    assert cmp.tolerance == Tolerance(0.0, 0.0, 0.01)
    # without the floor, rows 1 and 2 are above an atol of 0.001
    plain = compare(parse_lines(a), parse_lines(b), atol=0.001)
    assert plain.rows.logit_differs.tolist() == [True, True, True]
    assert plain.logits is not None and plain.logits.excess is None
    assert plain.logits.rows_within_noise == 0


def test_values_above_the_floor_count_when_a_rerun_would_not_show_so_many() -> None:
    a, _ = _three_rows(("", "", ""))
    b = [_logits("p", 1, 1, [(5, "2.6"), (3, "1.35")]), _logits("p", 1, 2, [(6, "3.6"), (1, "1.6")]),
         _logits("p", 1, 3, [(7, "0.6"), (2, "0.35")]), _verify("p", 1, [5, 6, 7], [5, 6, 7, 9])]
    floor = _floor(0.01, values_a=8)  # all six of B's values above what 8 of A's showed
    cmp = compare(parse_lines(a), parse_lines(b), floor=floor)
    lg = cmp.logits
    assert lg is not None and lg.excess is not None
    assert (lg.excess.exceed, lg.excess.values_b, lg.excess.values_a) == (6, 6, 8)
    assert lg.excess.counts and lg.rows_within_noise == 0
    assert cmp.rows.logit_differs.tolist() == [True, True, True]


def test_rtol_reaches_the_judge() -> None:
    a, b = _three_rows(("2.5025", "3.5", "0.5"))  # 0.1% of 2.5
    assert compare(parse_lines(a), parse_lines(b), rtol=2e-3).rows.logit_differs.tolist() == [
        False, False, False]
    assert compare(parse_lines(a), parse_lines(b), rtol=5e-4).rows.logit_differs.tolist() == [
        True, False, False]


def test_logit_columns_of_rows_one_arm_stopped_tracing() -> None:
    # B traced row 1 only; A's row 2 shares id 5 with B's row 1, and must not be paired with it
    a = [_logits("p", 1, 1, [(5, "2.0"), (3, "1.0")]), _logits("p", 1, 2, [(6, "3.0"), (5, "1.5")]),
         STEP]
    b = [_logits("p", 1, 1, [(5, "2.0"), (3, "1.25")]), STEP]
    cmp = compare(parse_lines(a), parse_lines(b), atol=0.5)
    r = cmp.rows
    assert r.logit_a.tolist() == [2.0, 3.0]
    assert r.logit_b[0] == 2.0 and math.isnan(r.logit_b[1])
    assert r.margin_a.tolist() == [1.0, 1.5]
    assert r.margin_b[0] == 0.75 and math.isnan(r.margin_b[1])
    assert r.abs_logit_diff[0] == 0.25 and math.isnan(r.abs_logit_diff[1])
    assert r.logit_differs.tolist() == [False, True]
    assert cmp.logit_rows_compared == 1


def test_statistics_and_resolutions_are_of_the_compared_rows_only() -> None:
    # A prints 9 digits (of a float32), B 6; A also traced a row at a position no block reached (500.0)
    a = [_logits("p", 1, 1, [(5, "2.87757015"), (3, "1.5")]), _logits("p", 1, 2, [(6, "3.25"), (1, "1.5")]),
         _logits("p", 7, 1, [(5, "500.0"), (3, "1.5")]), STEP]
    b = [_logits("p", 1, 1, [(5, "2.87757"), (3, "1.5")]), _logits("p", 1, 2, [(6, "-13.25"), (1, "1.5")]),
         _logits("p", 9, 1, [(5, "-900.0"), (3, "1.5")]), STEP]
    cmp = compare(parse_lines(a), parse_lines(b), atol=100.0)
    lg = cmp.logits
    assert lg is not None
    a32 = float(np.float32(2.87757012))
    pairs = PairedRows(np.array([[5, 3], [6, 1]], np.int32), np.array([[a32, 1.5], [3.25, 1.5]]),
                       np.array([[5, 3], [6, 1]], np.int32), np.array([[2.87757, 1.5], [-13.25, 1.5]]))
    assert lg.stats is not None and lg.stats.max_abs == 16.5
    assert (lg.stats.rows, lg.stats.values, lg.stats.rows_disjoint) == (2, 4, 0)
    assert lg.pairs is not None
    assert lg.pairs.vals_a.tolist() == pairs.vals_a.tolist()
    assert lg.pairs.vals_b.tolist() == pairs.vals_b.tolist()
    assert lg.resolution_a == Resolution(9, pytest.approx(1e-8))  # 1e-6 with the 500.0
    assert lg.resolution_b == Resolution(6, pytest.approx(1e-4))  # 1e-3 with the -900.0
    assert lg.max_abs_value == 13.25
    assert (lg.rows_disjoint, lg.rows_unresolved, lg.rows_one_quantum) == (0, 0, 0)
    assert (lg.not_compared, lg.floor, lg.flips, lg.excess, lg.rows_within_noise) == (
        None, None, None, None, 0)


def test_rows_judged_in_several_blocks_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # five rows, judged two at a time: each count is the sum over the blocks
    draft = [1, 2, 3, 4, 5]
    a = [*(_logits("p", 1, i + 1, [(i + 1, "2.00001")]) for i in range(5)),
         _verify("p", 1, draft, [*draft, 9])]
    b = [*(_logits("p", 1, i + 1, [(i + 1, "2.00002" if i % 2 == 0 else "2.00001")])
           for i in range(5)), _verify("p", 1, draft, [*draft, 9])]
    monkeypatch.setattr(compare_module, "_LOGIT_BLOCK_ROWS", 2)
    bitwise = compare(parse_lines(a), parse_lines(b))
    assert bitwise.rows.logit_differs.tolist() == [True, False, True, False, True]
    assert bitwise.rows.abs_logit_diff.tolist() == [1e-5, 0.0, 1e-5, 0.0, 1e-5]
    assert bitwise.logits is not None and bitwise.logits.rows_one_quantum == 3
    fine = compare(parse_lines(a), parse_lines(b), atol=5e-6)
    assert fine.logits is not None and fine.logits.rows_unresolved == 3
    assert fine.rows.logit_differs.tolist() == [False] * 5
    assert fine.logit_rows_compared == 5


def test_logit_rows_with_no_compared_row_give_empty_findings() -> None:
    # both arms traced logits, at a position no aligned block has
    a = parse_lines([_logits("p", 8, 1, [(5, "2.0")]), STEP])
    b = parse_lines([_logits("p", 8, 1, [(5, "2.5")]), STEP])
    cmp = compare(a, b)
    assert cmp.logits is not None and cmp.logits.stats is not None
    assert cmp.logits.stats.rows == 0 and cmp.logit_rows_compared == 0
    assert cmp.rows.logit_differs.tolist() == [False, False]  # traced by neither arm
    assert (cmp.logits.rows_disjoint, cmp.logits.rows_unresolved) == (0, 0)


@pytest.mark.parametrize("stray_in", ["a", "b"])
def test_a_logit_row_past_every_compared_position_keys_apart(stray_in: str) -> None:
    # compared rows reach pos 1 row 2 in requests p and q; a stray row at p pos 3 must not take
    # the key of q pos 1 row 1, which only the other arm traced
    steps = [_verify("p", 1, [5, 6], [5, 6, 9]), _verify("q", 1, [7, 8], [7, 8, 9])]
    with_q = [*steps, _logits("q", 1, 1, [(7, "1.0"), (2, "0.5")])]
    stray = [_logits("p", 3, 1, [(7, "4.0"), (2, "0.5")]), *steps]
    a, b = (stray, with_q) if stray_in == "a" else (with_q, stray)
    cmp = compare(parse_lines(a), parse_lines(b))
    q_row_1 = (cmp.rows.req == cmp.requests.index("q")) & (cmp.rows.row == 1)
    assert math.isnan(cmp.rows.abs_logit_diff[q_row_1][0])
    assert cmp.rows.logit_differs[q_row_1].tolist() == [True]  # traced by one arm only
    assert cmp.logit_rows_compared == 0


def test_a_row_traced_twice_is_read_from_its_first_line() -> None:
    a = parse_lines([_logits("p", 1, 1, [(5, "2.0")]), _logits("p", 1, 1, [(5, "7.0")]),
                     _verify("p", 1, [5], [5, 9])])
    b = parse_lines([_logits("p", 1, 1, [(5, "2.25")]), _verify("p", 1, [5], [5, 9])])
    assert compare(a, b).rows.abs_logit_diff.tolist() == [0.25]


def test_logits_of_rows_after_a_sequential_flip_are_not_compared() -> None:
    # row 1 flipped; row 2 of a sequential block ran on another token: its logits differ, and
    # that is no logit difference of the comparison
    a = parse_lines([_logits("p", 1, 1, [(5, "2.0"), (7, "1.5")]), _logits("p", 1, 2, [(6, "3.0")]),
                     _verify("p", 1, [5, 6], [5, 9])])
    b = parse_lines([_logits("p", 1, 1, [(7, "2.0"), (5, "1.5")]), _logits("p", 1, 2, [(6, "1.0")]),
                     _verify("p", 1, [7, 6], [5, 9])])
    seq = compare(a, b, drafting=DraftingKind.SEQUENTIAL)
    assert [STATUS_NAMES[int(s)] for s in seq.rows.status] == ["differ", "context-diverged"]
    assert seq.rows.logit_differs.tolist() == [True, False]
    assert seq.blocks_logit_differing == 1 and seq.rows_context_diverged == 1
    block = compare(a, b)
    assert [STATUS_NAMES[int(s)] for s in block.rows.status] == ["differ", "same"]
    assert block.rows.logit_differs.tolist() == [True, True]


POS_TOP = 2**40 - 8  # near the largest position a step may reach


def _far_rows(stray_row: int) -> tuple[list[str], list[str]]:
    """Requests p and q, three rows each, q at the largest position; both arms also traced a
    row `stray_row` no block reached. B is A plus a distinct amount per row."""
    a, b = [], []
    for req, pos in (("p", 1), ("q", POS_TOP)):
        for row in (1, 2, 3):
            base = 10 * row + (0 if req == "p" else 5)
            a.append(_logits(req, pos, row, [(row, f"{base}")]))
            b.append(_logits(req, pos, row, [(row, f"{base + row / 8 + (0.5 if req == 'q' else 0)}")]))
    for arm in (a, b):
        arm.append(_logits("q", POS_TOP, stray_row, [(1, "1.0")]))
    steps = [_verify("p", 1, [1, 2, 3], [1, 9]), _verify("q", POS_TOP, [1, 2, 3], [1, 9])]
    return [*a, *steps], [*b, *steps]


@pytest.mark.parametrize("stray_row", [2**13, 2**23])
def test_rows_at_the_largest_positions_are_keyed_apart(stray_row: int) -> None:
    # row 2**13 keeps keys in 63 bits, above the 53 a float would hold exactly; row 2**23 does
    # not fit, and the keys are taken by rank
    a, b = _far_rows(stray_row)
    cmp = compare(parse_lines(a), parse_lines(b), atol=10.0)
    assert cmp.rows.abs_logit_diff.tolist() == [0.125, 0.25, 0.375, 0.625, 0.75, 0.875]
    assert cmp.logit_rows_compared == 6


def test_rows_keyed_by_rank_stay_apart() -> None:
    # a stray row at the largest position and a row number past 2**23 leave no value key in
    # 63 bits; by rank, p pos 3 and q pos 0 must still be different rows
    a, b = [], []
    for req, pos in (("p", 3), ("q", 0)):
        for row in (1, 2, 3):
            base = 10 * row + (0 if req == "p" else 5)
            a.append(_logits(req, pos, row, [(row, f"{base}")]))
            b.append(_logits(req, pos, row, [(row, f"{base + row / 8 + (0.5 if req == 'q' else 0)}")]))
    for arm in (a, b):
        arm.append(_logits("q", POS_TOP, 2**23, [(1, "1.0")]))
    steps = [_verify("p", 3, [1, 2, 3], [1, 9]), _verify("q", 0, [1, 2, 3], [1, 9])]
    cmp = compare(parse_lines([*a, *steps]), parse_lines([*b, *steps]), atol=10.0)
    assert cmp.rows.abs_logit_diff.tolist() == [0.125, 0.25, 0.375, 0.625, 0.75, 0.875]
