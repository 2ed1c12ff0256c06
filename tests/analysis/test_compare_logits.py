"""The logit side of `compare`, asserted value by value: one arm tracing logits alone, the A/A
noise floor deciding which rows count, the findings record (statistics, resolution, counts),
the per-row margins and top-1 logits of each arm, and the keys that pair logit rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from difftest.analysis.compare import (DIFFER, NOISE_FLIP, SAME, STATUS_NAMES, Comparison,
                              FirstLogitDifference, OneSided, compare)
from difftest.core.model import ArmTrace
from difftest.numerics.noise import ExcessTest, FlipRule, FlipTest, NoiseFloor
from difftest.numerics.resolution import Resolution
from difftest.numerics.stats import logit_stats
from difftest.trace import parse_lines

NAN = math.nan
Top = str | None  # "id:value id:value ..." of one row, None: no logit line for that row


def block(req: str, pos: int, draft: list[int], emit: list[int],
          tops: list[Top] | None = None) -> list[str]:
    """The lines of one verified block: its logit rows (when given), then the verify line."""
    lines = [f"[spec-logits] req={req} pos={pos} row={i + 1} top=[ {t} ]"
             for i, t in enumerate(tops or []) if t is not None]
    lines.append(f"[SPECTRACE] req={req} pos={pos} k={len(draft)} ns={len(emit)} "
                 f"acc={len(emit) - 1} draft=[ {' '.join(map(str, draft))} ] "
                 f"emit=[ {' '.join(map(str, emit))} ]")
    return lines


def arm(*blocks: list[str]) -> ArmTrace:
    return parse_lines([line for b in blocks for line in b])


def cells(c: Comparison, name: str) -> list[object]:
    """One RowTable column, nan as None, in row order."""
    col = getattr(c.rows, name)
    if col.dtype.kind == "f":
        return [None if math.isnan(x) else float(x) for x in col]
    return col.tolist()  # type: ignore[no-any-return]


def floor_of(value: float, flips: int = 0, rows: int = 0, values: int | None = None
             ) -> NoiseFloor:
    """An A/A floor as reruns would have measured it (`values`: A/A logit values seen)."""
    stats = None
    if values is not None:
        ids = np.arange(values, dtype=np.int64).reshape(values, 1)
        vals = np.zeros((values, 1))
        from difftest.numerics.stats import PairedRows
        stats = logit_stats(PairedRows(ids, vals, ids, vals))
    return NoiseFloor(arm="a", runs=3, pairs=(), floor=value, rows=rows, flips=flips,
                      flip_rate=None, bit_identical=False, logit_stats=stats)


# --- one arm traced logits -------------------------------------------------------------------

LOGITS_A = arm(block("r", 5, [11, 12], [11, 12, 40], ["11:9.25 30:7.5", "12:7 33:6.5"]),
               block("r", 8, [41, 42], [50], ["41:7 110:6", "42:8.5 99:5"]))
TOKENS_B = arm(block("r", 5, [11, 12], [11, 12, 40]), block("r", 8, [41, 77], [50]))


@pytest.mark.parametrize("swap", [False, True])
def test_logits_traced_by_one_arm_only_are_not_compared_and_tokens_still_are(swap: bool) -> None:
    a, b = (TOKENS_B, LOGITS_A) if swap else (LOGITS_A, TOKENS_B)
    c = compare(a, b, near_tie=10.0)
    lg = c.logits
    assert lg is not None
    none = Resolution(None, None)
    expected_side = OneSided("b", 1, 3) if swap else OneSided("a", 3, 1)
    assert lg.not_compared == expected_side
    assert (lg.stats, lg.resolution_a, lg.resolution_b) == (None, none, none)
    assert (lg.rows_disjoint, lg.rows_unresolved, lg.rows_one_quantum) == (0, 0, 0)
    assert (lg.floor, lg.flips, lg.excess, lg.pairs, lg.max_abs_value) == (None,) * 5
    assert lg.rows_within_noise == 0
    # no margin is known on either side, so the flip at r@8 row 2 is a hard one
    assert [STATUS_NAMES[s] for s in c.rows.status] == ["same", "same", "same", "differ"]
    assert c.blocks_differing == 1 and c.blocks_compared == 2
    for name in ("margin_a", "margin_b", "logit_a", "logit_b", "abs_logit_diff"):
        assert cells(c, name) == [None] * 4, name
    assert cells(c, "logit_differs") == [False] * 4
    assert (c.logit_rows_compared, c.max_abs_logit_diff, c.blocks_logit_differing) == (0, None, 0)
    assert c.first_logit_difference is None


def test_the_one_sided_sentence_names_who_traced_what() -> None:
    names = ("base", "cand")
    assert OneSided("a", 3, 1).sentence(names) == (
        "logits could not be compared: base traced block logits (level 3) and cand did not "
        "(level 1); only tokens were compared (set the same VT_SPEC_TRACE in both arms)")
    assert OneSided("b", 2, 3).sentence(names) == (
        "logits could not be compared: cand traced block logits (level 3) and base did not "
        "(level 2); only tokens were compared (set the same VT_SPEC_TRACE in both arms)")


def test_a_floor_is_kept_when_only_one_arm_traced_logits() -> None:
    floor = floor_of(0.0, flips=1, rows=50)
    c = compare(LOGITS_A, TOKENS_B, floor=floor)
    assert c.logits is not None and c.logits.floor is floor
    assert c.logits.not_compared == OneSided("a", 3, 1)
    assert c.logits.flips is not None and c.logits.flips.flips_b == 1


# --- both arms traced logits: per-row values and the findings record ------------------------

A3 = arm(block("r", 5, [11, 12, 13], [11, 12, 13, 40],
               ["11:9.25 30:7.5 31:6", "12:7.5 33:6.5 34:5", "13:6 36:4 37:3.5"]),
         block("q", 2, [7, 8], [7, 9], ["7:4 8:3.75", "8:5 9:4.5"]))
B3 = arm(block("r", 5, [11, 12, 13], [11, 12, 13, 40],
               ["11:9.25 30:7.5 31:6", "12:7.25 33:6.5 34:5", "13:6 37:3.5 36:4"]),
         block("q", 2, [7, 8], [7, 9], ["7:4 8:3.5", "8:5 9:4.5"]))


def test_each_row_carries_each_arms_margin_top1_logit_and_difference() -> None:
    c = compare(A3, B3)
    assert c.requests == ("r", "q")
    assert cells(c, "req") == [0, 0, 0, 1, 1] and cells(c, "pos") == [5, 5, 5, 2, 2]
    assert cells(c, "row") == [1, 2, 3, 1, 2]
    assert cells(c, "margin_a") == [1.75, 1.0, 2.0, 0.25, 0.5]
    assert cells(c, "margin_b") == [1.75, 0.75, 2.5, 0.5, 0.5]  # top-1 minus the next listed
    assert cells(c, "logit_a") == [9.25, 7.5, 6.0, 4.0, 5.0]
    assert cells(c, "logit_b") == [9.25, 7.25, 6.0, 4.0, 5.0]
    assert cells(c, "abs_logit_diff") == [0.0, 0.25, 0.0, 0.25, 0.0]
    # bitwise: r@5 row 3 lists the same ids in another order, which is a changed top list
    assert cells(c, "logit_differs") == [False, True, True, True, False]
    assert c.logit_rows_compared == 5 and c.max_abs_logit_diff == 0.25
    assert c.blocks_logit_differing == 2
    assert c.first_logit_difference == FirstLogitDifference(req="r", pos=5, row=2,
                                                            abs_logit_diff=0.25)
    lg = c.logits
    assert lg is not None and lg.not_compared is None
    assert lg.resolution_a == Resolution(6, 1e-05) and lg.resolution_b == Resolution(6, 1e-05)
    assert (lg.rows_disjoint, lg.rows_unresolved, lg.rows_one_quantum) == (0, 0, 0)
    assert lg.max_abs_value == 9.25 and lg.rows_within_noise == 0
    assert (lg.floor, lg.flips, lg.excess) == (None, None, None)
    assert lg.stats is not None and (lg.stats.rows, lg.stats.values) == (5, 13)
    assert lg.stats.max_abs == 0.25 and lg.stats.top1_same == 5
    assert lg.pairs is not None and len(lg.pairs) == 5
    assert lg.pairs.ids_a[1].tolist() == [12, 33, 34] and lg.pairs.ids_b[4].tolist() == [8, 9, -1]
    assert lg.pairs.vals_b[1].tolist() == [7.25, 6.5, 5.0]


def test_under_a_tolerance_the_unresolved_and_one_quantum_counts_come_from_every_row() -> None:
    # printed to 6 significant digits: a quantum of 1e-5 at 1-10; a difference of one quantum
    # cannot be told from rounding under atol 5e-6, and is one quantum when bitwise
    a = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5.12345 9:1.5", "2:5.12345 9:1.5"]),
            block("r", 8, [4], [4, 5], ["4:5.12345 9:1.5"]))
    b = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5.12346 9:1.5", "2:5.12346 9:1.5"]),
            block("r", 8, [4], [4, 5], ["4:5.12346 9:1.5"]))
    loose = compare(a, b, atol=5e-6)
    assert loose.logits is not None
    assert (loose.logits.rows_unresolved, loose.logits.rows_one_quantum) == (3, 0)
    exact = compare(a, b)
    assert exact.logits is not None
    assert (exact.logits.rows_unresolved, exact.logits.rows_one_quantum) == (0, 3)


def test_top_lists_sharing_no_id_are_counted_as_disjoint() -> None:
    a = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5 2:4", "2:5 3:4"]))
    b = arm(block("r", 5, [1, 2], [1, 2, 3], ["7:5 8:4", "2:5 3:4"]))
    c = compare(a, b, atol=1.0)
    assert c.logits is not None and c.logits.rows_disjoint == 1
    assert cells(c, "logit_differs") == [True, False]
    assert cells(c, "abs_logit_diff") == [None, 0.0]


def test_the_statistics_see_each_arms_values_at_its_own_printed_precision() -> None:
    # A prints 9 significant digits (float32-exact), B 6: A's value is read as float32
    a = arm(block("r", 5, [1], [1, 2], ["1:5.12345695 9:1.50000000"]))  # %.9g of a float32
    b = arm(block("r", 5, [1], [1, 2], ["1:5.12345 9:1.5"]))
    c = compare(a, b, atol=1.0)
    assert c.logits is not None and c.logits.pairs is not None
    assert c.logits.pairs.vals_a[0, 0] == float(np.float32(5.12345678))
    assert c.logits.pairs.vals_b[0, 0] == 5.12345
    assert c.logits.resolution_a.digits == 9 and c.logits.resolution_b.digits == 6
    swapped = compare(b, a, atol=1.0)
    assert swapped.logits is not None and swapped.logits.pairs is not None
    assert swapped.logits.pairs.vals_b[0, 0] == float(np.float32(5.12345678))


def test_the_largest_compared_value_is_read_from_b_on_rows_both_arms_traced() -> None:
    a = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:-30 9:-40", None]))
    b = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:-30 9:-41", "2:90 3:1"]))
    c = compare(a, b, atol=2.0)
    assert c.logits is not None and c.logits.max_abs_value == 41.0
    assert cells(c, "logit_a") == [-30.0, None] and cells(c, "logit_b") == [-30.0, 90.0]
    assert cells(c, "margin_b") == [11.0, 89.0]
    # a row B traced alone is a difference in what was traced, with no size
    assert cells(c, "logit_differs") == [False, True]
    assert c.logit_rows_compared == 1


def test_resolution_is_read_from_the_compared_rows_only() -> None:
    # the row only A traced prints 100.5 (a quantum of 1e-3 at 6 digits): it is not compared
    a = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5.25 9:1.5", "2:100.5 3:1"]))
    b = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5.25 9:1.5", None]))
    c = compare(a, b, atol=1.0)
    assert c.logits is not None
    assert c.logits.resolution_a == Resolution(6, 1e-05)
    assert c.logits.resolution_b == Resolution(6, 1e-05)
    swapped = compare(b, a, atol=1.0)
    assert swapped.logits is not None and swapped.logits.resolution_b == Resolution(6, 1e-05)


def test_ordinal_alignment_looks_up_no_logits() -> None:
    a = parse_lines(["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]",
                     "[spec-logits] req=r pos=0 row=1 top=[ 5:2 9:1 ]"])
    b = parse_lines(["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]",
                     "[spec-logits] req=r pos=0 row=1 top=[ 5:3 9:1 ]"])
    c = compare(a, b)
    assert c.mode == "ordinal" and c.logits is None
    assert cells(c, "margin_a") == [None, None] and cells(c, "logit_differs") == [False, False]


# --- the A/A noise floor -------------------------------------------------------------------

# r@5: row 1 moved 0.25 (below the floor), row 2 moved 1.5 in one value (above it), row 3
# lists disjoint ids; q@2 row 1 moved 1.5 in two values
FA = arm(block("r", 5, [1, 2, 3], [1, 2, 3, 4], ["1:5 9:1", "2:5 9:1", "3:5 9:1"]),
         block("q", 2, [6], [6, 7], ["6:5 9:1"]))
FB = arm(block("r", 5, [1, 2, 3], [1, 2, 3, 4], ["1:5.25 9:1", "2:6.5 9:1", "7:5 8:1"]),
         block("q", 2, [6], [6, 7], ["6:6.5 9:2.5"]))


def test_values_above_a_floor_that_a_rerun_could_show_are_within_noise() -> None:
    floor = floor_of(0.5, flips=0)  # no A/A values recorded: nothing can be significant
    c = compare(FA, FB, floor=floor)
    lg = c.logits
    assert lg is not None and lg.floor is floor
    assert lg.excess == ExcessTest(exceed=3, values_b=6, values_a=0, alpha=0.01, p_value=1.0,
                                   counts=False, rule=FlipRule.EXACT_TEST, needed=7)
    # r@5 row 2 (one value over) and q@2 row 1 (two) are within noise; disjoint ids still count
    assert lg.rows_within_noise == 2
    assert cells(c, "logit_differs") == [False, False, True, False]
    assert cells(c, "abs_logit_diff") == [0.25, 1.5, None, 1.5]
    assert c.blocks_logit_differing == 1 and lg.rows_disjoint == 1
    assert c.tolerance.floor == 0.5


def test_values_above_the_floor_count_when_a_rerun_would_rarely_show_them() -> None:
    floor = floor_of(0.5, flips=0, values=1000)
    c = compare(FA, FB, floor=floor)
    lg = c.logits
    assert lg is not None and lg.excess is not None
    assert (lg.excess.exceed, lg.excess.values_b, lg.excess.values_a) == (3, 6, 1000)
    assert lg.excess.counts is True and lg.rows_within_noise == 0
    assert cells(c, "logit_differs") == [False, True, True, True]


def test_a_changed_top_list_under_a_zero_valued_floor_is_not_noise() -> None:
    # the floor is 0 but A's reruns flipped a token, so the floor is not zero and the values
    # are judged bitwise: a changed list with no value above the floor is no noise to forgive,
    # and a value that moved where no rerun moved one is beyond any band of the floor
    a = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5 9:1 8:0.5", "2:5 9:1"]))
    b = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5 9:1 7:0.5", "2:6 9:1"]))
    c = compare(a, b, floor=floor_of(0.0, flips=1, rows=100))
    lg = c.logits
    assert lg is not None and lg.excess is not None and lg.excess.counts is False
    assert lg.rows_within_noise == 0 and lg.rows_beyond_band == 1
    assert cells(c, "logit_differs") == [True, True]


def test_the_floor_widens_the_tolerance_and_keeps_rtol() -> None:
    a = arm(block("r", 5, [1], [1, 2], ["1:100 9:1"]))
    b = arm(block("r", 5, [1], [1, 2], ["1:100.75 9:1"]))
    assert compare(a, b, rtol=0.01).blocks_logit_differing == 0
    assert compare(a, b, rtol=0.01, floor=floor_of(0.5, flips=1, rows=10)
                   ).blocks_logit_differing == 0
    assert compare(a, b, atol=0.5).blocks_logit_differing == 1
    assert compare(a, b, floor=floor_of(0.8, flips=1, rows=10, values=1000)
                   ).blocks_logit_differing == 0
    assert compare(a, b, floor=floor_of(0.7, flips=1, rows=10, values=1000)
                   ).blocks_logit_differing == 1


# --- token flips under a floor -------------------------------------------------------------

def test_flips_a_rerun_shows_as_often_are_noise_flips() -> None:
    a = arm(block("r", 5, [1, 2], [1, 2, 3]), block("r", 8, [4, 5], [9]))
    b = arm(block("r", 5, [1, 7], [1, 2, 3]), block("r", 8, [4, 5], [9]))
    floor = floor_of(0.0, flips=30, rows=100)
    c = compare(a, b, floor=floor)
    assert [STATUS_NAMES[s] for s in c.rows.status] == ["same", "noise-flip", "same", "same"]
    assert c.blocks_differing == 0 and c.first_difference is None
    lg = c.logits
    none = Resolution(None, None)
    assert lg is not None and lg.floor is floor and lg.stats is None
    assert (lg.resolution_a, lg.resolution_b, lg.not_compared) == (none, none, None)
    assert (lg.rows_disjoint, lg.rows_unresolved, lg.rows_one_quantum) == (0, 0, 0)
    assert lg.flips is not None
    assert (lg.flips.flips_b, lg.flips.rows_b, lg.flips.flips_a, lg.flips.rows_a) == \
        (1, 4, 30, 100)
    assert lg.flips.counts is False and lg.flips.rule is FlipRule.EXACT_TEST
    assert lg.flips.p_value == pytest.approx(0.76, abs=0.01)
    # a noise flip is compared: it is neither unmatched nor context-diverged
    assert c.rows.compared.tolist() == [True, True, True, True]


def test_flips_counted_against_a_floor_stay_hard_differences() -> None:
    a = arm(block("r", 5, [1, 2, 3, 4], [1, 2]), block("r", 6, [4, 5, 6, 7], [9]))
    b = arm(block("r", 5, [1, 7, 8, 9], [1, 2]), block("r", 6, [3, 5, 6, 8], [9]))
    floor = floor_of(0.0, flips=0, rows=1000)  # a zero floor: strict
    c = compare(a, b, floor=floor)
    assert c.logits is not None and c.logits.flips == FlipTest(
        flips_b=5, rows_b=8, flips_a=0, rows_a=1000, alpha=0.01, p_value=None, counts=True,
        rule=FlipRule.STRICT)
    assert (c.rows.status == DIFFER).sum() == 5 and (c.rows.status == SAME).sum() == 3
    assert c.blocks_differing == 2
    assert not (c.rows.status == NOISE_FLIP).any()


def test_near_ties_count_as_flips_and_unmatched_rows_do_not_count_as_rows() -> None:
    # r@5 row 2 is a near-tie flip; r@8 A drafted a third row B did not
    a = arm(block("r", 5, [1, 2], [1, 2, 3], ["1:5 9:1", "2:5 7:4.9"]),
            block("r", 8, [4, 5, 6], [9], ["4:5 9:1", "5:5 9:1", "6:5 9:1"]))
    b = arm(block("r", 5, [1, 7], [1, 2, 3], ["1:5 9:1", "7:5 2:4.9"]),
            block("r", 8, [4, 5], [9], ["4:5 9:1", "5:5 9:1"]))
    c = compare(a, b, near_tie=0.5, floor=floor_of(0.0, flips=10, rows=1000))
    assert [STATUS_NAMES[s] for s in c.rows.status] == \
        ["same", "near-tie", "same", "same", "unmatched-a"]
    assert c.logits is not None and c.logits.flips is not None
    assert (c.logits.flips.flips_b, c.logits.flips.rows_b) == (1, 4)


# --- what the reports read per row, and the statistics of the compared rows -----------------

def test_each_rows_logit_judgement_as_the_reports_spell_it() -> None:
    from difftest.analysis.compare import LogitJudgement as J
    a = arm(block("r", 5, [1, 2, 3, 4], [1, 2], ["1:5 9:1.5", "2:5.12345 9:1.5", "3:5 9:1", None]),
            block("r", 6, [5, 6], [5], ["5:5 9:1", "6:5 9:1"]))
    b = arm(block("r", 5, [1, 2, 3, 4], [1, 2], ["1:5 9:1.5", "2:5.12346 9:1.5", "3:6 9:1", None]),
            block("r", 6, [5], [5], ["5:5 9:1"]))
    c = compare(a, b, atol=5e-6)
    assert statuses_of(c) == ["same"] * 5 + ["unmatched-a"]
    assert c.rows.logit_judgements() == [J.SAME, J.UNRESOLVED, J.DIFFER, J.NOT_COMPARED, J.SAME,
                                         J.NOT_COMPARED]
    assert cells(c, "logit_unresolved") == [False, True, False, False, False, False]


def statuses_of(c: Comparison) -> list[str]:
    return [STATUS_NAMES[s] for s in c.rows.status]


def test_statistics_and_unresolved_counts_are_of_the_compared_rows_only() -> None:
    # sequential: the flip at row 1 leaves rows 2 and 3 context-diverged, logits and all
    a = arm(block("r", 5, [1, 2, 3], [1], ["1:5 7:4", "2:5 9:1", "3:5.12345 9:1"]))
    b = arm(block("r", 5, [7, 2, 3], [1], ["7:5 1:4", "2:9 9:1", "3:5.12346 9:1"]))
    from difftest.core.kinds import DraftingKind
    c = compare(a, b, atol=5e-6, drafting=DraftingKind.SEQUENTIAL)
    assert statuses_of(c) == ["differ", "context-diverged", "context-diverged"]
    lg = c.logits
    assert lg is not None and lg.stats is not None and lg.pairs is not None
    assert (lg.stats.rows, len(lg.pairs), lg.rows_unresolved) == (1, 1, 0)
    assert lg.stats.max_abs == 1.0 and c.max_abs_logit_diff == 1.0


def test_the_compared_rows_statistics_are_on_the_printed_grid() -> None:
    # 2.87758 - 2.87757 is 1.0000000000065e-05 in float64: the printed difference is 1e-05
    a = arm(block("r", 5, [1], [1, 2], ["1:2.87758 9:1.5"]))
    b = arm(block("r", 5, [1], [1, 2], ["1:2.87757 9:1.5"]))
    c = compare(a, b)
    assert c.logits is not None and c.logits.stats is not None
    assert c.logits.stats.max_abs == 1e-05 and c.max_abs_logit_diff == 1e-05
