"""The row side of `compare`, asserted row by row: drafts of unequal length in either arm,
sequential drafting (rows after a flip are context-diverged), the margins' near-tie boundary,
the rows of unmatched and diverged steps, the compared blocks each arm drafted, the record's
counts and the (request, pos, row) keys that pair logit rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import difftest.analysis.compare as compare_module
from difftest.analysis.compare import (DIFFER, NEAR_TIE, SAME, STATUS_NAMES, Comparison, _RowKeys,
                                       compare)
from difftest.core.rules import Rules
from difftest.core.errors import UsageError
from difftest.core.kinds import DraftingKind
from difftest.numerics.stats import logit_stats
from difftest.numerics.tolerance import Tolerance
from difftest.trace import parse_lines, parse_trace
from difftest.trace.align import align
from tests.analysis.test_compare_logits import arm, block, cells

SEQ = DraftingKind.SEQUENTIAL


def statuses(c: Comparison) -> list[str]:
    return [STATUS_NAMES[s] for s in c.rows.status]


def test_row_table_columns_keep_their_dtypes_in_every_kind_of_row() -> None:
    # compared, unmatched-a (draft length), unmatched-b (a step only B verified) and diverged
    a = arm(block("r", 5, [1, 2, 3], [1, 2, 3, 4], ["1:5 9:1", "2:5 9:1", "3:5 9:1"]),
            block("r", 9, [6, 7], [8]), block("r", 10, [1], [2]))
    b = arm(block("r", 5, [1, 2], [1, 2, 3, 4], ["1:5 9:1", "2:5 9:1"]),
            block("r", 9, [6, 7], [9]), block("r", 10, [1], [2]), block("q", 1, [4], [4, 5]))
    c = compare(a, b)
    r = c.rows
    assert set(statuses(c)) == {"same", "unmatched-a", "unmatched-b", "context-diverged"}
    for name in ("req", "pos", "row", "token_a", "token_b"):
        assert getattr(r, name).dtype == np.int64, name
    for name in ("has_a", "has_b", "logit_differs"):
        assert getattr(r, name).dtype == np.bool_, name
    assert r.status.dtype == np.int8
    for name in ("margin_a", "margin_b", "logit_a", "logit_b", "abs_logit_diff"):
        assert getattr(r, name).dtype == np.float64, name


@pytest.mark.parametrize("shorter", ["a", "b"])
def test_the_rows_only_the_longer_draft_has_are_unmatched_on_its_side(shorter: str) -> None:
    short, long = arm(block("r", 5, [1, 2], [1, 2])), arm(block("r", 5, [1, 2, 3, 4], [1, 2]))
    a, b = (short, long) if shorter == "a" else (long, short)
    c = compare(a, b)
    side = "unmatched-b" if shorter == "a" else "unmatched-a"
    assert statuses(c) == ["same", "same", side, side]
    assert cells(c, "token_a") == ([1, 2, -1, -1] if shorter == "a" else [1, 2, 3, 4])
    assert cells(c, "token_b") == ([1, 2, 3, 4] if shorter == "a" else [1, 2, -1, -1])
    assert cells(c, "has_a") == [True, True, shorter == "b", shorter == "b"]
    assert (c.draft_length_blocks, c.blocks_compared, c.blocks_differing) == (1, 1, 0)
    assert (c.draft_length_rows_a, c.draft_length_rows_b) == \
        ((0, 2) if shorter == "a" else (2, 0))


def test_a_logit_row_of_an_unmatched_row_is_no_logit_difference() -> None:
    a = arm(block("r", 5, [1, 2, 3], [1, 2], ["1:5 9:1", "2:5 9:1", "3:5 9:1"]))
    b = arm(block("r", 5, [1, 2], [1, 2], ["1:5 9:1", "2:5 9:1"]))
    c = compare(a, b)
    assert statuses(c) == ["same", "same", "unmatched-a"]
    assert cells(c, "logit_differs") == [False, False, False]
    assert c.blocks_logit_differing == 0 and c.first_logit_difference is None


# --- sequential drafting ------------------------------------------------------------------

def test_sequential_rows_after_the_first_flip_of_each_block_are_context_diverged() -> None:
    a = arm(block("r", 5, [1, 2, 3, 4], [1, 2]), block("r", 6, [5, 6, 7], [9]),
            block("q", 1, [1, 2, 3], [1, 2]))
    b = arm(block("r", 5, [1, 8, 3, 4], [1, 2]), block("r", 6, [5, 6, 7], [9]),
            block("q", 1, [7, 2, 3], [1, 2]))
    c = compare(a, b, drafting=SEQ, drafting_source="flag")
    table = {(c.requests[q], p, w): s for q, p, w, s in
             zip(c.rows.req.tolist(), c.rows.pos.tolist(), c.rows.row.tolist(), statuses(c),
                 strict=True)}
    assert table == {
        ("r", 5, 1): "same", ("r", 5, 2): "differ", ("r", 5, 3): "context-diverged",
        ("r", 5, 4): "context-diverged",
        ("r", 6, 1): "same", ("r", 6, 2): "same", ("r", 6, 3): "same",
        ("q", 1, 1): "differ", ("q", 1, 2): "context-diverged", ("q", 1, 3): "context-diverged"}
    assert c.rows_context_diverged == 4
    assert (c.drafting, c.drafting_source) == (SEQ, "flag")
    assert (c.blocks_differing, c.blocks_compared) == (2, 3)
    block_kind = compare(a, b)
    assert block_kind.rows_context_diverged == 0 and block_kind.drafting is DraftingKind.BLOCK
    assert block_kind.drafting_source == "default"
    assert statuses(block_kind).count("same") == 8


def test_a_sequential_draft_longer_in_one_arm_keeps_its_extra_rows_unmatched() -> None:
    a = arm(block("r", 5, [1, 2, 3, 4], [1, 2]))
    b = arm(block("r", 5, [1, 2], [1, 2]))
    c = compare(a, b, drafting=SEQ)
    assert statuses(c) == ["same", "same", "unmatched-a", "unmatched-a"]
    assert (c.rows_context_diverged, c.draft_length_rows_a) == (0, 2)


def test_sequential_drafting_of_one_row_and_of_no_row() -> None:
    one = compare(arm(block("r", 5, [1], [1, 2])), arm(block("r", 5, [3], [1, 2])), drafting=SEQ)
    assert statuses(one) == ["differ"] and one.rows_context_diverged == 0
    empty = arm(block("r", 5, [], [1]))
    none = compare(empty, empty, drafting=SEQ)
    assert len(none.rows) == 0 and none.blocks_compared == 0
    blocks, margins = none.compared_blocks("a")
    assert (len(blocks), blocks.offsets.tolist(), margins.size) == (0, [0], 0)


def test_a_block_with_a_hard_flip_and_a_near_tie_is_a_differing_block_only() -> None:
    a = arm(block("r", 5, [1, 2], [1, 2], ["1:5 9:1", "2:5 7:4.75"]),
            block("r", 6, [3], [3, 4], ["3:5 8:4.75"]))
    b = arm(block("r", 5, [9, 7], [1, 2], ["9:5 1:1", "7:5 2:4.75"]),
            block("r", 6, [8], [3, 4], ["8:5 3:4.75"]))
    c = compare(a, b, Rules(near_tie=0.5, rtol=0.01))
    assert statuses(c) == ["differ", "near-tie", "near-tie"]
    assert (c.blocks_differing, c.blocks_near_tie) == (1, 1)
    assert (c.rules.rtol, c.rules.atol, c.rules.near_tie) == (0.01, 0.0, 0.5)


def test_block_rows_past_every_traced_logit_row_find_no_logits() -> None:
    # rows 2 and 3 of r@5 have no logit line; with rows spanned too short, row 3 of r@5
    # would key as row 1 of r@6
    a = arm(block("r", 5, [1, 2, 3], [1], ["1:5 9:1"]), block("r", 6, [4], [4, 5], ["4:7 9:1"]))
    c = compare(a, a)
    assert cells(c, "margin_a") == [4.0, None, None, 6.0]
    assert cells(c, "logit_b") == [5.0, None, None, 7.0]


def test_ordinal_rows_keep_integer_requests_and_positions() -> None:
    a = parse_lines(["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]"])
    b = parse_lines(["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]",
                     "[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[6 9 ]"])
    c = compare(a, b)
    assert c.mode == "ordinal" and statuses(c) == ["same", "same", "unmatched-b", "unmatched-b"]
    assert c.rows.req.dtype == np.int64 and c.rows.pos.dtype == np.int64
    assert cells(c, "pos") == [0, 0, 1, 1]


def test_a_near_tie_first_flip_also_ends_what_a_sequential_block_compares() -> None:
    a = arm(block("r", 5, [1, 2, 3], [1, 2], ["1:5 9:1", "2:5 7:4.75", "3:5 9:1"]))
    b = arm(block("r", 5, [1, 7, 4], [1, 2], ["1:5 9:1", "7:5 2:4.75", "4:5 9:1"]))
    c = compare(a, b, Rules(near_tie=0.5), drafting=SEQ)
    assert statuses(c) == ["same", "near-tie", "context-diverged"]
    assert (c.blocks_near_tie, c.blocks_differing) == (1, 0)


# --- the near-tie boundary -------------------------------------------------------------------

@pytest.mark.parametrize("margin_a, margin_b, status", [
    ("4.5", "4.75", "differ"),  # A's margin 0.5 is not below near_tie 0.5
    ("4.75", "4.5", "differ"),  # nor is B's
    ("4.75", "4.75", "near-tie"),
])
def test_a_margin_equal_to_near_tie_is_not_a_near_tie(margin_a: str, margin_b: str,
                                                      status: str) -> None:
    a = arm(block("r", 5, [1], [1, 2], [f"1:5 9:{margin_a}"]))
    b = arm(block("r", 5, [7], [1, 2], [f"7:5 1:{margin_b}"]))
    assert statuses(compare(a, b, Rules(near_tie=0.5))) == [status]


def test_a_flip_to_a_token_the_other_arm_ranks_far_below_is_no_near_tie() -> None:
    # each arm's own top-1/top-2 margin is 1e-5, under the derived near-tie 2e-5, but A lists
    # B's token 21 nowhere: A's logit for it is at most 2, B's is 10. The flip crossed 8.
    a = arm(block("r", 5, [22], [22, 1], ["22:9.99999 26:9.99998 23:3 24:2"]))
    b = arm(block("r", 5, [21], [21, 1], ["21:10 22:9.99999 23:3 24:2"]))
    c = compare(a, b, Rules(near_tie=None, atol=1e-5))
    assert statuses(c) == ["differ"]
    # the second choice being the other token keeps the near-tie
    a = arm(block("r", 5, [22], [22, 1], ["22:9.99999 21:9.99998 23:3 24:2"]))
    assert statuses(compare(a, b, Rules(near_tie=None, atol=1e-5))) == ["near-tie"]


def test_an_id_one_top_list_drops_far_below_the_other_is_a_logit_difference() -> None:
    # B lists 12 at 9.5; A does not list it, so A's value is at most its last, 1.9
    a = arm(block("r", 5, [11], [11, 1], ["11:10 13:3 14:2 15:1.9"]))
    b = arm(block("r", 5, [11], [11, 1], ["11:10 12:9.5 13:3 14:2"]))
    assert cells(compare(a, b, Rules(near_tie=0.0, atol=1e-5)), "logit_differs") == [True]
    # 9.5 - 1.9 is within 8
    assert cells(compare(a, b, Rules(near_tie=0.0, atol=8)), "logit_differs") == [False]
    assert cells(compare(b, a, Rules(near_tie=0.0, atol=1e-5)), "logit_differs") == [True]  # either side


# --- rows of steps that were not compared ----------------------------------------------------

def test_diverged_steps_of_unequal_count_keep_each_arms_rows_apart() -> None:
    # r diverges at position 6 (emit 8 against 9): A verified two later steps, B one
    a = arm(block("r", 5, [6, 7], [6, 8]), block("r", 7, [1, 2], [1]), block("r", 8, [3], [3]))
    b = arm(block("r", 5, [6, 7], [6, 9]), block("r", 7, [4, 5, 6], [4]))
    c = compare(a, b)
    rows = list(zip(cells(c, "pos"), cells(c, "row"), cells(c, "token_a"), cells(c, "token_b"),
                    statuses(c), strict=True))
    assert rows == [
        (5, 1, 6, 6, "same"), (5, 2, 7, 7, "same"),
        (7, 1, 1, -1, "context-diverged"), (7, 1, -1, 4, "context-diverged"),
        (7, 2, 2, -1, "context-diverged"), (7, 2, -1, 5, "context-diverged"),
        (7, 3, -1, 6, "context-diverged"),
        (8, 1, 3, -1, "unmatched-a")]
    assert cells(c, "has_a") == [True, True, True, False, True, False, False, True]


def test_steps_only_a_verified_are_a_rows_with_no_b_token() -> None:
    a = arm(block("r", 5, [6, 7], [6, 8]), block("r", 7, [1, 2], [1]))
    b = arm(block("r", 5, [6, 7], [6, 9]))
    c = compare(a, b)
    assert list(zip(cells(c, "pos"), cells(c, "token_a"), cells(c, "token_b"), statuses(c),
                    strict=True)) == [(5, 6, 6, "same"), (5, 7, 7, "same"),
                                      (7, 1, -1, "unmatched-a"),
                                      (7, 2, -1, "unmatched-a")]
    assert cells(c, "has_b") == [True, True, False, False]


def test_diverged_steps_paired_one_to_one_show_both_tokens_on_one_row() -> None:
    a = arm(block("r", 5, [6, 7], [6, 8]), block("r", 7, [1, 2], [1]))
    b = arm(block("r", 5, [6, 7], [6, 9]), block("r", 7, [4, 5], [4]))
    c = compare(a, b)
    assert list(zip(cells(c, "pos"), cells(c, "token_a"), cells(c, "token_b"), statuses(c),
                    strict=True)) == [(5, 6, 6, "same"), (5, 7, 7, "same"),
                                      (7, 1, 4, "context-diverged"),
                                      (7, 2, 5, "context-diverged")]
    assert cells(c, "has_a")[2:] == [True, True] and cells(c, "has_b")[2:] == [True, True]


def test_steps_only_b_verified_are_b_rows_with_no_a_token() -> None:
    a = arm(block("r", 5, [1], [1, 2]))
    b = arm(block("r", 5, [1], [1, 2]), block("r", 7, [3, 4], [3]))
    c = compare(a, b)
    assert statuses(c) == ["same", "unmatched-b", "unmatched-b"]
    assert cells(c, "token_a") == [1, -1, -1] and cells(c, "token_b") == [1, 3, 4]
    assert cells(c, "has_a") == [True, False, False] and cells(c, "has_b") == [True] * 3
    assert (c.unmatched_a, c.unmatched_b) == (0, 1)


# --- the compared blocks of each arm --------------------------------------------------------

def test_compared_blocks_are_each_arms_own_tokens_and_margins_block_by_block() -> None:
    # blocks r@5 (flip at row 2), q@5 (same position, another request) and r@6
    a = arm(block("r", 5, [1, 2], [1, 2], ["1:5 9:4", "2:5 9:3"]),
            block("q", 5, [3], [3, 4], ["3:5 9:2"]),
            block("r", 6, [4, 5, 6], [4], ["4:5 9:1", "5:5 9:0.5", "6:5 9:0.25"]))
    b = arm(block("r", 5, [1, 8], [1, 2], ["1:5 9:3.5", "8:5 9:2.5"]),
            block("q", 5, [3], [3, 4], ["3:5 9:1.5"]),
            block("r", 6, [4, 5], [4], ["4:5 9:0.75", "5:5 9:0.125"]))
    c = compare(a, b, Rules(near_tie=0.0, atol=10.0))
    blocks_a, margins_a = c.compared_blocks("a")
    blocks_b, margins_b = c.compared_blocks("b")
    assert blocks_a.source == blocks_b.source == "compared"
    # rows are in (request, pos, row) order: r is request 0, q request 1
    assert blocks_a.ids.tolist() == [1, 2, 4, 5, 3] and blocks_a.ids.dtype == np.int32
    assert blocks_b.ids.tolist() == [1, 8, 4, 5, 3]
    assert blocks_a.offsets.tolist() == [0, 2, 4, 5] == blocks_b.offsets.tolist()
    assert margins_a.tolist() == [1.0, 2.0, 4.0, 4.5, 3.0]
    assert margins_b.tolist() == [1.5, 2.5, 4.25, 4.875, 3.5]


def test_compared_blocks_start_where_only_the_request_changes() -> None:
    a = arm(block("r", 5, [1], [1, 2]), block("q", 5, [2, 5], [2, 3]), block("q", 6, [3], [3]))
    c = compare(a, a)
    blocks, margins = c.compared_blocks("b")
    assert blocks.offsets.tolist() == [0, 1, 3, 4] and blocks.ids.tolist() == [1, 2, 5, 3]
    assert np.isnan(margins).all() and margins.size == 4
    one = compare(arm(block("r", 5, [1], [1, 2])), arm(block("r", 5, [1], [1, 2])))
    assert one.compared_blocks("a")[0].offsets.tolist() == [0, 1]


# --- the (request, pos, row) keys -------------------------------------------------------------

NO_LOGITS = arm(block("r", 1, [1], [1, 2]))


def test_row_keys_span_the_largest_position_and_row_of_the_rows_and_both_arms() -> None:
    empty = np.zeros(0, np.int64)
    assert _RowKeys.covering(1, NO_LOGITS, pos=empty, row=empty) == _RowKeys(1, 1)
    keys = _RowKeys.covering(3, NO_LOGITS, pos=np.array([4, 9]), row=np.array([1, 3]))
    assert keys == _RowKeys(10, 4)
    got = keys(np.array([0, 1, 2]), np.array([4, 9, 0]), np.array([1, 3, 2]))
    assert got.tolist() == [17, 79, 82] and got.dtype == np.int64
    a = parse_lines(["[spec-logits] req=r pos=30 row=7 top=[ 1:2 ]"])
    b = parse_lines(["[spec-logits] req=r pos=2 row=9 top=[ 1:2 ]"])
    assert _RowKeys.covering(1, a, b, pos=np.array([4]), row=np.array([1])) == _RowKeys(31, 10)


def test_row_keys_switch_to_ranks_exactly_at_63_bits() -> None:
    rows = np.array([1])
    # one request x 2**62 positions x 2 rows is 2**63: ranks; half of it fits
    at = _RowKeys.covering(1, NO_LOGITS, pos=np.array([2**62 - 1]), row=rows)
    assert at.ranks is not None and (at.pos_span, at.row_span) == (1, 1)
    below = _RowKeys.covering(1, NO_LOGITS, pos=np.array([2**61 - 1]), row=rows)
    assert below == _RowKeys(2**61, 2) and below.ranks is None
    two = _RowKeys.covering(2, NO_LOGITS, pos=np.array([2**61 - 1]), row=rows)
    assert two.ranks is not None and (two.pos_span, two.row_span) == (1, 1)


def test_rank_keys_are_exact_and_refuse_what_64_bits_cannot_hold() -> None:
    pos = np.array([2**60 + 1, 2**60, 3])
    row = np.array([2, 1, 2])
    keys = _RowKeys.covering(4, NO_LOGITS, pos=pos, row=row)
    assert keys.ranks is not None
    assert keys.ranks[0].tolist() == [3, 2**60, 2**60 + 1] and keys.ranks[1].tolist() == [1, 2]
    assert keys.ranks[0].dtype == np.int64
    got = keys(np.array([0, 0, 1]), pos, row)
    assert got.tolist() == [2 * 2 + 1, 1 * 2 + 0, (3 + 0) * 2 + 1]
    with pytest.raises(UsageError) as err:
        _RowKeys.covering(2**61, NO_LOGITS, pos=np.array([0, 2**62]), row=np.array([0, 1]))
    assert str(err.value) == \
        "2305843009213693952 requests x 2 positions x 2 rows cannot be keyed in 64 bits"
    ok = _RowKeys.covering(2**61 - 1, NO_LOGITS, pos=np.array([0, 2**62]), row=np.array([0, 1]))
    assert ok.ranks is not None


@pytest.mark.parametrize("extra_in", ["a", "b"])
def test_a_logit_line_outside_every_block_never_pairs_with_another_requests_row(
        extra_in: str) -> None:
    # with positions spanned by the blocks alone (0..5), r@11 row 1 would key as q@5 row 1
    extra = ["[spec-logits] req=r pos=11 row=1 top=[ 4:1 9:0 ]"]
    base = (block("r", 5, [2], [2, 3], ["2:5 9:1"]) +
            block("q", 5, [4], [4, 5], ["4:5 9:1"]))
    plain = parse_lines(base)
    with_extra = parse_lines(extra + base)
    a, b = (with_extra, plain) if extra_in == "a" else (plain, with_extra)
    c = compare(a, b)
    assert c.blocks_logit_differing == 0 and cells(c, "logit_a") == [5.0, 5.0]
    assert cells(c, "logit_b") == [5.0, 5.0]


def test_logit_rows_are_judged_in_blocks_and_their_counts_add_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare_module, "_LOGIT_BLOCK_ROWS", 2)
    a = arm(block("r", 5, [1, 2, 3, 4, 5], [1, 2],
                  ["1:5.12345 9:1.5", "2:5.12345 9:1.5", "3:5.12345 9:1.5", "4:5 9:1",
                   "5:5.12345 9:1.5"]))
    b = arm(block("r", 5, [1, 2, 3, 4, 5], [1, 2],
                  ["1:5.12346 9:1.5", "2:5.12346 9:1.5", "3:5.12346 9:1.5", "4:6 9:1",
                   "5:5.12346 9:1.5"]))
    loose = compare(a, b, Rules(near_tie=0.0, atol=5e-6))
    assert loose.logits is not None and loose.logits.rows_unresolved == 4
    assert cells(loose, "abs_logit_diff")[3] == 1.0
    assert cells(loose, "logit_differs") == [False, False, False, True, False]
    exact = compare(a, b)
    assert exact.logits is not None and exact.logits.rows_one_quantum == 4


@pytest.mark.parametrize("drafting", list(DraftingKind))
@pytest.mark.parametrize("other", ["agree_b.log", "differ_b.log", "diverge_b.log", "ties_b.log",
                                   "shift_b.log", "tie_stepend_b.log"])
def test_the_rows_compared_are_known_before_the_logits_are_looked_at(
        other: str, drafting: DraftingKind) -> None:
    """`compared_rows` (which the statistics are taken over, in the judging pass) is what
    `row_status` finds same, differ or near-tie."""
    data = Path(__file__).parents[1] / "data" / "compare"
    a, b = parse_trace(data / "agree_a.log"), parse_trace(data / other)
    al = align(a, b)
    rows = compare_module._compared_rows(al, *compare_module._blocks(a, b, al.mode))
    compared = compare_module.compared_rows(rows, drafting)
    lg = compare_module._row_logits(a, b, al, rows, Tolerance(0.0, 0.0), None, compared)
    for near_tie in (0.0, 0.5, 100.0):
        status = compare_module.row_status(rows, lg, near_tie, drafting)
        assert np.array_equal(compared, np.isin(status, (SAME, DIFFER, NEAR_TIE)))


@pytest.mark.parametrize("drafting", list(DraftingKind))
def test_the_statistics_taken_in_the_judging_pass_are_those_of_the_compared_pairs(
        monkeypatch: pytest.MonkeyPatch, drafting: DraftingKind) -> None:
    """Blocks of 2 pairs, top lists of unequal width (A's 7 wide, widened to B's 8 for the
    tolerance), rows left out after a sequential flip: the statistics taken beside the
    tolerance equal `logit_stats` over the compared pairs."""
    monkeypatch.setattr(compare_module, "_LOGIT_BLOCK_ROWS", 2)
    a = arm(block("r", 5, [1, 2, 3, 4, 5], [1, 2],
                  ["1:5.12345 9:1.5 7:0.25", "2:5.12345 9:1.5 7:0.5", "3:5.12345 9:1.5 7:1",
                   "4:5 9:1 7:0.75", "5:5.12345 9:1.5 7:0.125"]),
            block("q", 1, [1, 2, 3], [1, 2], ["1:3 2:2.5 7:1", "2:3 1:1 7:0.5", "3:2 9:1 7:0"]),
            block("s", 1, [1], [1], ["1:3.1 2:2.7 3:2.3 4:1.9 5:1.3 6:0.7 7:0.1"]))
    b = arm(block("r", 5, [1, 2, 8, 4, 5], [1, 2],
                  ["1:5.12346 9:1.5", "2:5.12346 9:1.5", "8:5.12346 3:5.1", "4:6 9:1",
                   "5:5.12346 9:1.5"]),
            block("q", 1, [1, 2, 3], [1, 2], ["1:3.5 2:2", "2:3 7:1", "3:2 9:1.25"]),
            block("s", 1, [1], [1], ["1:3.3 2:2.1 3:1.7 4:1.1 5:0.9 6:0.3 7:0.2 8:0.15"]))
    c = compare(a, b, drafting=drafting)
    lg = c.logits
    assert lg is not None and lg.stats is not None and lg.pairs is not None
    digits = (lg.resolution_a.digits, lg.resolution_b.digits)
    assert repr(lg.stats) == repr(logit_stats(lg.pairs, digits=digits, cluster=lg.pair_req))
    assert lg.stats.rows == (9 if drafting is DraftingKind.BLOCK else 7)
