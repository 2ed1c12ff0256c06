"""The row table and the block counts of a comparison, on small traces: the blocks each arm had
compared (what the token blind check measures), the column types of every kind of row, rows
one arm drafted beyond the other, diverged blocks of unequal length, near-tie margins at the
threshold, and sequential blocks with a draft-length difference. Asserted whole."""

from __future__ import annotations

import numpy as np
import pytest

from difftest.analysis.compare import STATUS_NAMES, Comparison, compare
from difftest.core.kinds import DraftingKind
from difftest.trace import parse_lines
from conftest import logits_line, verify_line


_verify, _logits = verify_line, logits_line


def _statuses(cmp: Comparison) -> list[str]:
    return [STATUS_NAMES[int(s)] for s in cmp.rows.status]


def _two_requests() -> Comparison:
    # p pos 1: same; p pos 4: row 2 flips, B drafts a third row; q pos 1: A drafts a third row
    a = [_logits("p", 1, 1, [(5, "2.0"), (7, "1.5")]), _logits("p", 1, 2, [(6, "3.0"), (8, "2.0")]),
         _logits("p", 4, 1, [(1, "4.0"), (9, "1.0")]), _logits("p", 4, 2, [(2, "5.0"), (4, "4.75")]),
         _logits("q", 1, 1, [(7, "1.0"), (3, "0.5")]),
         _verify("p", 1, [5, 6], [5, 6, 9]), _verify("p", 4, [1, 2], [1, 2, 3]),
         _verify("q", 1, [7, 8, 9], [7, 8, 9, 1])]
    b = [_logits("p", 1, 1, [(5, "2.0"), (7, "1.25")]), _logits("p", 1, 2, [(6, "3.0"), (8, "2.0")]),
         _logits("p", 4, 1, [(1, "4.0"), (9, "1.0")]), _logits("p", 4, 2, [(4, "5.0"), (2, "4.5")]),
         _verify("p", 1, [5, 6], [5, 6, 9]), _verify("p", 4, [1, 4, 5], [1, 2, 3]),
         _verify("q", 1, [7, 8], [7, 8, 9, 1])]
    return compare(parse_lines(a), parse_lines(b))


def test_the_blocks_each_arm_had_compared() -> None:
    cmp = _two_requests()
    assert _statuses(cmp) == ["same", "same", "same", "differ", "unmatched-b", "same", "same",
                              "unmatched-a"]
    assert cmp.rows.token_a.tolist() == [5, 6, 1, 2, -1, 7, 8, 9]
    assert cmp.rows.token_b.tolist() == [5, 6, 1, 4, 5, 7, 8, -1]
    assert cmp.rows.has_a.tolist() == [True] * 4 + [False] + [True] * 3
    assert cmp.rows.has_b.tolist() == [True] * 7 + [False]
    blocks, margins = cmp.compared_blocks("a")
    assert blocks.source == "compared"
    assert blocks.ids.dtype == np.int32 and blocks.offsets.dtype == np.int64
    assert blocks.ids.tolist() == [5, 6, 1, 2, 7, 8] and blocks.offsets.tolist() == [0, 2, 4, 6]
    assert margins[:5].tolist() == [0.5, 1.0, 3.0, 0.25, 0.5] and np.isnan(margins[5])
    blocks, margins = cmp.compared_blocks("b")
    assert blocks.ids.tolist() == [5, 6, 1, 4, 7, 8] and blocks.offsets.tolist() == [0, 2, 4, 6]
    assert margins[:4].tolist() == [0.75, 1.0, 3.0, 0.5] and np.isnan(margins[4:]).all()
    assert (cmp.blocks_compared, cmp.blocks_differing, cmp.draft_length_blocks) == (3, 1, 2)
    assert (cmp.draft_length_rows_a, cmp.draft_length_rows_b) == (1, 1)


def test_blocks_of_one_request_at_consecutive_positions_stay_apart() -> None:
    # (p, 1) and (p, 2) differ in position only; (p, 2) and (q, 2) in request only
    a = [_verify("p", 1, [5], [5, 6]), _verify("p", 2, [6], [6, 7]), _verify("q", 2, [8], [8, 9])]
    cmp = compare(parse_lines(a), parse_lines(a))
    blocks, _ = cmp.compared_blocks("a")
    assert blocks.offsets.tolist() == [0, 1, 2, 3]
    empty = compare(parse_lines([_verify("p", 1, [5], [5, 6])]),
                    parse_lines([_verify("q", 1, [5], [5, 6])]))
    blocks, margins = empty.compared_blocks("b")
    assert blocks.ids.size == 0 and blocks.offsets.tolist() == [0] and margins.size == 0
    assert blocks.offsets.dtype == np.int64


COLUMN_TYPES = {"req": np.int64, "pos": np.int64, "row": np.int64, "token_a": np.int64,
                "token_b": np.int64, "has_a": np.bool_, "has_b": np.bool_, "status": np.int8,
                "margin_a": np.float64, "margin_b": np.float64, "logit_a": np.float64,
                "logit_b": np.float64, "abs_logit_diff": np.float64, "logit_differs": np.bool_}


def _column_types(cmp: Comparison) -> dict[str, type]:
    return {name: getattr(cmp.rows, name).dtype.type for name in COLUMN_TYPES}


def test_rows_of_every_kind_keep_their_column_types() -> None:
    # unmatched steps in both arms, a divergence with later steps of unequal draft lengths
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("p", 4, [1], [2]), _verify("p", 6, [3, 4], [3]),
         _verify("q", 1, [2], [2, 3])]
    b = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("p", 4, [1], [3]), _verify("p", 6, [3], [3]),
         _verify("r", 1, [2, 9], [2, 3])]
    cmp = compare(parse_lines(a), parse_lines(b))
    assert _column_types(cmp) == COLUMN_TYPES
    rows = cmp.rows
    names = [cmp.requests[int(i)] for i in rows.req]
    assert list(zip(names, rows.pos.tolist(), rows.row.tolist(), _statuses(cmp), strict=True)) == [
        ("p", 1, 1, "same"), ("p", 1, 2, "same"), ("p", 4, 1, "same"),
        ("p", 6, 1, "context-diverged"), ("p", 6, 1, "context-diverged"),
        ("p", 6, 2, "context-diverged"), ("q", 1, 1, "unmatched-a"), ("r", 1, 1, "unmatched-b"),
        ("r", 1, 2, "unmatched-b")]
    # diverged blocks of unequal length: each arm's rows on their own, the other side unknown
    assert rows.token_a.tolist() == [5, 6, 1, 3, -1, 4, 2, -1, -1]
    assert rows.token_b.tolist() == [5, 6, 1, -1, 3, -1, -1, 2, 9]
    assert not rows.logit_differs.any() and np.isnan(rows.abs_logit_diff).all()
    ordinal = compare(parse_lines(["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]",
                                   "[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[7 8 ]"]),
                      parse_lines(["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]"]))
    assert _column_types(ordinal) == COLUMN_TYPES
    assert ordinal.rows.pos.tolist() == [0, 0, 1, 1] and ordinal.rows.req.tolist() == [0] * 4
    assert _statuses(ordinal) == ["same", "same", "unmatched-a", "unmatched-a"]


def test_no_aligned_block_gives_typed_empty_rows_and_counts() -> None:
    cmp = compare(parse_lines([_verify("p", 1, [5], [5, 6])]),
                  parse_lines([_verify("q", 1, [5], [5, 6])]))
    assert _column_types(cmp) == COLUMN_TYPES
    assert _statuses(cmp) == ["unmatched-a", "unmatched-b"]
    assert (cmp.blocks_compared, cmp.blocks_differing, cmp.blocks_near_tie) == (0, 0, 0)
    assert (cmp.draft_length_blocks, cmp.rows_context_diverged) == (0, 0)


@pytest.mark.parametrize("margins, status", [(("0.5", "0.25"), "differ"), (("0.25", "0.5"), "differ"),
                                             (("0.25", "0.375"), "near-tie")])
def test_a_margin_at_the_near_tie_threshold_is_not_a_near_tie(margins: tuple[str, str],
                                                                status: str) -> None:
    a = parse_lines([_logits("p", 1, 1, [(5, "2.0"), (7, f"{2.0 - float(margins[0])}")]),
                     _verify("p", 1, [5], [5, 9])])
    b = parse_lines([_logits("p", 1, 1, [(7, "2.0"), (5, f"{2.0 - float(margins[1])}")]),
                     _verify("p", 1, [7], [5, 9])])
    cmp = compare(a, b, near_tie=0.5)
    assert _statuses(cmp) == [status]
    assert (cmp.blocks_differing, cmp.blocks_near_tie) == ((1, 0) if status == "differ" else (0, 1))


def test_a_block_with_both_a_near_tie_and_a_hard_flip_counts_as_differing_only() -> None:
    a = parse_lines([_logits("p", 1, 1, [(5, "2.0"), (7, "1.875")]),
                     _logits("p", 1, 2, [(6, "2.0"), (8, "0.5")]), _verify("p", 1, [5, 6], [5, 9])])
    b = parse_lines([_logits("p", 1, 1, [(7, "2.0"), (5, "1.875")]),
                     _logits("p", 1, 2, [(8, "2.0"), (6, "0.5")]), _verify("p", 1, [7, 8], [5, 9])])
    cmp = compare(a, b, near_tie=0.5)
    assert _statuses(cmp) == ["near-tie", "differ"]
    assert (cmp.blocks_differing, cmp.blocks_near_tie) == (1, 0)


def test_sequential_blocks_one_arm_drafted_longer_are_unmatched_not_diverged() -> None:
    a = parse_lines([_verify("p", 1, [5, 6, 7], [5, 9]), _verify("p", 3, [1, 2], [1, 9])])
    b = parse_lines([_verify("p", 1, [5, 6, 7, 8, 9], [5, 9]), _verify("p", 3, [1, 4], [1, 9])])
    cmp = compare(a, b, drafting=DraftingKind.SEQUENTIAL, drafting_source="flag")
    assert _statuses(cmp) == ["same", "same", "same", "unmatched-b", "unmatched-b", "same",
                              "differ"]
    assert (cmp.draft_length_rows_b, cmp.rows_context_diverged) == (2, 0)
    assert (cmp.drafting, cmp.drafting_source) == (DraftingKind.SEQUENTIAL, "flag")
    # a flip at row 1 of three: the two rows after it ran on another token
    c = parse_lines([_verify("p", 1, [4, 6, 7], [5, 9]), _verify("p", 3, [1, 2], [1, 9])])
    flip = compare(c, a, drafting=DraftingKind.SEQUENTIAL)
    assert _statuses(flip) == ["differ", "context-diverged", "context-diverged", "same", "same"]
    assert flip.rows_context_diverged == 2 and flip.blocks_differing == 1
    assert (flip.drafting, flip.drafting_source) == (DraftingKind.SEQUENTIAL, "default")
    plain = compare(c, a, rtol=0.25, atol=0.5, near_tie=0.125)
    assert (plain.drafting, plain.rtol, plain.atol, plain.near_tie) == (DraftingKind.BLOCK, 0.25, 0.5,
                                                                        0.125)
    assert _statuses(plain) == ["differ", "same", "same", "same", "same"]


def test_sequential_comparisons_of_no_row_and_of_one_row() -> None:
    none = compare(parse_lines([_verify("p", 1, [5], [5, 6])]),
                   parse_lines([_verify("q", 1, [5], [5, 6])]), drafting=DraftingKind.SEQUENTIAL)
    assert _statuses(none) == ["unmatched-a", "unmatched-b"] and none.rows_context_diverged == 0
    one = compare(parse_lines([_verify("p", 1, [5], [5, 6])]),
                  parse_lines([_verify("p", 1, [4], [5, 6])]), drafting=DraftingKind.SEQUENTIAL)
    assert _statuses(one) == ["differ"] and one.rows_context_diverged == 0
