"""Alignment and comparison paths the other tests never run: several requests diverging, a
divergence in a request after the first, coverage-gap details, drafts of unequal length, top
lists of different widths, moved nan/inf in top lists and logits that end early. The row table,
the records and the reason sentences are what users read, so they are asserted whole."""

from __future__ import annotations

import math

import numpy as np
import pytest

from difftest.trace.align import CoverageGap, EmitDivergence, align, step_keys
from difftest.analysis.audit import audit_trace
from difftest.analysis.compare import STATUS_NAMES, Comparison, FirstLogitDifference, compare
from difftest.core.kinds import VerdictKind
from difftest.core.rules import Rules
from difftest.trace import parse_lines
from difftest.analysis.verdict import Verdict, judge
from conftest import logits_line, verify_line

Row = tuple[str, int, int, int, int, str, float, bool]


_verify, _logits = verify_line, logits_line


def _run(a: list[str], b: list[str], **kw: float) -> tuple[Comparison, Verdict]:
    ta, tb = parse_lines(a), parse_lines(b)
    cmp = compare(ta, tb, Rules(near_tie=0.0, **kw))  # type: ignore[arg-type]
    return cmp, judge(cmp, audit_trace(ta), audit_trace(tb), names=("x", "y"))


def _rows(cmp: Comparison) -> list[Row]:
    r = cmp.rows
    return [(cmp.requests[int(r.req[i])], int(r.pos[i]), int(r.row[i]), int(r.token_a[i]),
             int(r.token_b[i]), STATUS_NAMES[int(r.status[i])], float(r.abs_logit_diff[i]),
             bool(r.logit_differs[i])) for i in range(len(r))]


def _same(rows: list[Row], expected: list[Row]) -> bool:
    """Row tables are equal, nan matching nan."""
    def norm(row: Row) -> tuple[object, ...]:
        return tuple("nan" if isinstance(x, float) and math.isnan(x) else x for x in row)
    return [norm(r) for r in rows] == [norm(r) for r in expected]


NAN = math.nan
INF = math.inf


def test_several_requests_diverging_each_leave_their_later_steps_out() -> None:
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("q", 1, [8, 9], [8, 1]),
         _verify("p", 4, [3, 4], [3, 9]), _verify("q", 3, [2, 2], [2, 3]),
         _verify("p", 6, [1, 2], [4])]
    b = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("q", 1, [8, 9], [8, 2]),
         _verify("p", 4, [3, 4], [3, 8]), _verify("q", 3, [2, 2], [2, 3]),
         _verify("p", 6, [1, 2], [4])]
    cmp, v = _run(a, b)
    assert cmp.divergences == (EmitDivergence("p", 5, 9, 8), EmitDivergence("q", 2, 1, 2))
    assert (cmp.blocks_compared, cmp.blocks_differing, cmp.context_diverged) == (3, 0, 2)
    assert _same(_rows(cmp), [
        ("p", 1, 1, 5, 5, "same", NAN, False), ("p", 1, 2, 6, 6, "same", NAN, False),
        ("p", 4, 1, 3, 3, "same", NAN, False), ("p", 4, 2, 4, 4, "same", NAN, False),
        ("p", 6, 1, 1, 1, "context-diverged", NAN, False),
        ("p", 6, 2, 2, 2, "context-diverged", NAN, False),
        ("q", 1, 1, 8, 8, "same", NAN, False), ("q", 1, 2, 9, 9, "same", NAN, False),
        ("q", 3, 1, 2, 2, "context-diverged", NAN, False),
        ("q", 3, 2, 2, 2, "context-diverged", NAN, False)])
    assert v.kind is VerdictKind.DIFFER and not v.passed
    assert v.reasons == (
        "3 block(s) compared, 0 differ",
        "the emitted streams of request p differ at position 5 (x=9, y=8): later steps ran on "
        "different contexts and are not compared",
        "the emitted streams of request q differ at position 2 (x=1, y=2): later steps ran on "
        "different contexts and are not compared",
        "2 step(s) left out as context-diverged",
    )


def test_a_divergence_in_the_second_request_leaves_the_first_alone() -> None:
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("q", 1, [8, 9], [8, 1]),
         _verify("p", 4, [3, 4], [3, 9]), _verify("q", 3, [2, 2], [2, 3])]
    b = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("q", 1, [8, 9], [8, 2]),
         _verify("p", 4, [3, 4], [3, 9]), _verify("q", 3, [2, 2], [2, 3])]
    cmp, v = _run(a, b)
    assert cmp.divergences == (EmitDivergence("q", 2, 1, 2),)
    assert (cmp.blocks_compared, cmp.context_diverged) == (3, 1)
    assert [r[:3] for r in _rows(cmp) if r[5] == "context-diverged"] == [("q", 3, 1), ("q", 3, 2)]
    assert v.reasons[1:] == (
        "the emitted streams of request q differ at position 2 (x=1, y=2): later steps ran on "
        "different contexts and are not compared",
        "1 step(s) left out as context-diverged",
    )


def test_coverage_gaps_give_end_positions_and_never_traced() -> None:
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("p", 4, [3, 4], [3, 9]),
         _verify("q", 1, [8, 9], [8, 1])]
    b = [_verify("p", 1, [5, 6], [5, 6, 7])]
    cmp, v = _run(a, b)
    assert cmp.coverage_gaps == (CoverageGap("p", 6, 4, 2, 1), CoverageGap("q", 3, None, 1, 0))
    assert (cmp.blocks_compared, cmp.unmatched_a, cmp.unmatched_b) == (1, 2, 0)
    assert _same(_rows(cmp), [
        ("p", 1, 1, 5, 5, "same", NAN, False), ("p", 1, 2, 6, 6, "same", NAN, False),
        ("p", 4, 1, 3, -1, "unmatched-a", NAN, False), ("p", 4, 2, 4, -1, "unmatched-a", NAN, False),
        ("q", 1, 1, 8, -1, "unmatched-a", NAN, False), ("q", 1, 2, 9, -1, "unmatched-a", NAN, False)])
    assert v.kind is VerdictKind.DIFFER
    assert v.reasons == (
        "1 block(s) compared, 0 differ",
        "2 step(s) only in x, 0 only in y (different acceptance visits different positions; "
        "not a difference)",
        "request p: x emitted up to position 6 in 2 step(s), y emitted up to position 4 in 1 "
        "step(s): the steps past the shorter stream were never run by the other arm",
        "request q: x emitted up to position 3 in 1 step(s), y never traced it: the steps past "
        "the shorter stream were never run by the other arm",
    )


def test_a_request_only_b_traced_is_never_traced_by_a() -> None:
    a = [_verify("p", 1, [5, 6], [5, 6, 7])]
    b = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("q", 1, [8, 9], [8, 1])]
    cmp, v = _run(a, b)
    assert cmp.coverage_gaps == (CoverageGap("q", None, 3, 0, 1),)
    assert (cmp.unmatched_a, cmp.unmatched_b) == (0, 1)
    assert v.reasons[2] == ("request q: x never traced it, y emitted up to position 3 in 1 "
                            "step(s): the steps past the shorter stream were never run by the "
                            "other arm")


def test_drafts_of_unequal_length_at_one_position_differ_at_the_missing_row() -> None:
    a = [_verify("p", 1, [5, 6, 7], [5, 6, 9]), _verify("p", 4, [3, 4, 1], [3, 8])]
    b = [_verify("p", 1, [5, 6], [5, 6, 9]), _verify("p", 4, [3, 4], [3, 8])]
    cmp, v = _run(a, b)
    # a row only one arm drafted is a draft-length difference, never a token shown as -1
    assert (cmp.blocks_compared, cmp.blocks_differing) == (2, 0)
    assert (cmp.draft_length_blocks, cmp.draft_length_rows_a, cmp.draft_length_rows_b) == (2, 2, 0)
    assert cmp.first_difference is None
    assert [r[5] for r in _rows(cmp)] == ["same", "same", "unmatched-a", "same", "same",
                                          "unmatched-a"]
    assert cmp.rows.has_a.tolist() == [True] * 6
    assert cmp.rows.has_b.tolist() == [True, True, False, True, True, False]
    assert v.kind is VerdictKind.DIFFER
    assert v.reasons == ("2 block(s) compared, 0 differ",
                         "2 block(s) drafted a different number of rows at the same (request, "
                         "pos): 2 row(s) only x drafted, 0 only y; a different draft length is a "
                         "different draft")


def _two_rows(top_a: list[list[tuple[int, str]]], top_b: list[list[tuple[int, str]]]
              ) -> tuple[list[str], list[str]]:
    a = [_logits("p", 1, i + 1, t) for i, t in enumerate(top_a)]
    b = [_logits("p", 1, i + 1, t) for i, t in enumerate(top_b)]
    draft = [5, 6, 7][:max(len(top_a), len(top_b))]
    return ([*a, _verify("p", 1, draft, [*draft, 8])], [*b, _verify("p", 1, draft, [*draft, 8])])


def test_top_lists_of_different_widths_compare_the_shared_ids() -> None:
    a, b = _two_rows([[(5, "2.0"), (3, "1.0"), (4, "0.5")], [(6, "3.0"), (1, "1.5"), (2, "0.25")]],
                     [[(5, "2.0"), (3, "1.0")], [(6, "3.0"), (1, "1.25")]])
    exact, v = _run(a, b)
    # bitwise (atol 0): a top list that changed counts, even where the shared values agree
    assert [r[6:] for r in _rows(exact)] == [(0.0, True), (0.25, True)]
    assert (exact.logit_rows_compared, exact.blocks_logit_differing) == (2, 1)
    assert exact.max_abs_logit_diff == 0.25
    assert exact.first_logit_difference == FirstLogitDifference("p", 1, 1, 0.0)
    assert v.kind is VerdictKind.DIFFER
    assert v.reasons == ("1 block(s) compared, 0 differ; 2 logit row(s) compared, 1 block(s) "
                         "with logit differences",
                         "first logit difference at req p pos 1 row 1: |diff| 0 (atol 0); max "
                         "|diff| 0.25",
                         "bitwise at 6 significant digits: agreement means equal to within the "
                         "printed resolution 1e-05, not bit-identical (print logits with %.9g for "
                         "bit-identity)",
                         "blind radius: tokens 0.5 (smallest compared margin / 2), logits 1e-05 "
                         "(its resolution): a wrong change smaller than these goes unseen by that "
                         "instrument")
    loose, v = _run(a, b, atol=0.5)
    assert [r[6:] for r in _rows(loose)] == [(0.0, False), (0.25, False)]
    assert loose.blocks_logit_differing == 0 and loose.first_logit_difference is None
    assert v.kind is VerdictKind.AGREE and v.instruments == ("tokens", "logits")
    assert v.reasons == ("1 block(s) compared, 0 differ; 2 logit row(s) compared, 0 block(s) "
                         "with logit differences",
                         "blind radius: tokens 0.5 (smallest compared margin / 2), logits 0.5 (its "
                         "tolerance): a wrong change smaller than these goes unseen by that "
                         "instrument",
                         "the comparison could have failed through: tokens, logits")
    tight, _ = _run(a, b, atol=0.1)  # above atol by more than the printed quantum (0.1)
    assert [r[6:] for r in _rows(tight)] == [(0.0, False), (0.25, True)]
    assert tight.first_logit_difference == FirstLogitDifference("p", 1, 2, 0.25)


def test_moved_nan_and_inf_in_top_lists() -> None:
    a, b = _two_rows(
        [[(5, "inf"), (3, "nan"), (4, "0.5")], [(6, "3.0"), (1, "nan"), (2, "-inf")],
         [(7, "1.0"), (8, "0.5")]],
        [[(5, "inf"), (4, "0.5"), (3, "nan")], [(6, "3.0"), (2, "-inf"), (1, "2.0")],
         [(9, "1.0"), (10, "0.5")]])
    cmp, v = _run(a, b, atol=0.1)
    # row 1: nan and inf moved in both arms alike: equal. Row 2: nan in one arm only, as far
    # apart as values get. Row 3: no id in common, a difference with no size. Both differ
    # whatever atol allows.
    rows = _rows(cmp)
    assert [r[6:] for r in rows[:2]] == [(0.0, False), (INF, True)]
    assert math.isnan(rows[2][6]) and rows[2][7]
    assert cmp.max_abs_logit_diff == 0.0  # the largest finite difference
    assert cmp.first_logit_difference == FirstLogitDifference("p", 1, 2, None)
    assert v.reasons[:3] == (
        "1 block(s) compared, 0 differ; 2 logit row(s) compared, 1 block(s) with logit "
        "differences",
        "first logit difference at req p pos 1 row 2: no finite |diff| (nan or inf in one arm, or "
        "no id shared, or traced by one arm) (atol 0.1); max |diff| 0",
        "1 logit row(s) whose top-k lists share no id: counted as logit differences, with no "
        "size (their values cannot be paired)")


def test_equal_infinities_in_the_same_top_list_are_equal() -> None:
    a, b = _two_rows([[(5, "inf"), (3, "-inf")], [(6, "nan"), (1, "1.0")]],
                     [[(5, "inf"), (3, "-inf")], [(6, "nan"), (1, "1.0")]])
    cmp, v = _run(a, b)
    assert [r[6:] for r in _rows(cmp)] == [(0.0, False), (0.0, False)]
    assert cmp.max_abs_logit_diff == 0.0 and cmp.blocks_logit_differing == 0


def test_nan_in_one_arm_of_the_same_top_list_is_infinitely_far() -> None:
    a, b = _two_rows([[(5, "2.0"), (3, "nan")]], [[(5, "2.0"), (3, "1.0")]])
    cmp, _ = _run(a, b, atol=1.0)
    assert [r[6:] for r in _rows(cmp)] == [(INF, True)]


def test_logits_that_end_early_are_a_difference_in_what_was_traced() -> None:
    a, b = _two_rows([[(5, "2.0"), (3, "1.0")], [(6, "3.0"), (1, "1.5")]],
                     [[(5, "2.0"), (3, "1.0")]])
    cmp, v = _run(a, b)
    assert _same(_rows(cmp), [("p", 1, 1, 5, 5, "same", 0.0, False),
                              ("p", 1, 2, 6, 6, "same", NAN, True)])
    assert cmp.rows.margin_a.tolist() == [1.0, 1.5]
    assert cmp.rows.margin_b[0] == 1.0 and math.isnan(cmp.rows.margin_b[1])
    assert cmp.rows.logit_a.tolist() == [2.0, 3.0]
    assert (cmp.logit_rows_compared, cmp.blocks_logit_differing) == (1, 1)
    assert cmp.max_abs_logit_diff == 0.0
    assert cmp.first_logit_difference == FirstLogitDifference("p", 1, 2, None)
    assert v.kind is VerdictKind.DIFFER
    assert v.reasons[1] == ("first logit difference at req p pos 1 row 2: no finite |diff| (nan "
                            "or inf in one arm, or no id shared, or traced by one arm) (atol 0); "
                            "max |diff| 0")


ORDINAL_NOTE = ("no [SPECTRACE] lines in both arms: blocks are paired by the order of the proposing "
                "steps, which is only sound for a single request, and only the first proposing "
                "row of each step is known")
PROPOSE_A = ["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]",
             "[spec-propose] NO proposing rows this step (num_reqs=1)",
             "[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[7 8 ]",
             "[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[1 2 ]"]
PROPOSE_B = ["[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[5 9 ]",
             "[spec-propose] rows=1 nqpr=4 drafts/row=2 first=[7 3 ]"]


def test_ordinal_alignment_pairs_proposing_steps_and_leaves_the_extra_ones_unmatched() -> None:
    al = align(parse_lines(PROPOSE_A), parse_lines(PROPOSE_B))
    assert (al.mode, al.requests, al.notes) == ("ordinal", ("",), (ORDINAL_NOTE,))
    assert al.a_index.tolist() == [0, 2] and al.b_index.tolist() == [0, 1]
    assert al.pos.tolist() == [0, 1] and al.req.tolist() == [0, 0]
    assert al.unmatched_a.tolist() == [3] and al.unmatched_b.tolist() == []
    assert al.diverged_a.tolist() == [] and al.diverged_b.tolist() == []
    # index arrays, as in position mode
    assert {x.dtype for x in (al.req, al.pos, al.diverged_a, al.diverged_b)} == {np.dtype(np.int64)}
    cmp, v = _run(PROPOSE_A, PROPOSE_B)
    assert _same(_rows(cmp), [
        ("", 0, 1, 5, 5, "same", NAN, False), ("", 0, 2, 9, 9, "same", NAN, False),
        ("", 1, 1, 7, 7, "same", NAN, False), ("", 1, 2, 8, 3, "differ", NAN, False),
        ("", 2, 1, 1, -1, "unmatched-a", NAN, False), ("", 2, 2, 2, -1, "unmatched-a", NAN, False)])
    assert v.reasons == (
        ORDINAL_NOTE, "2 block(s) compared, 1 differ",
        "1 step(s) only in x, 0 only in y (different acceptance visits different positions; not "
        "a difference)",
        "first difference at proposing step 1 row 2: x drafted 8, y drafted 3 (margins - / -)")
    cmp, v = _run(PROPOSE_B, PROPOSE_A)
    assert [r[:6] for r in _rows(cmp)][4:] == [("", 2, 1, -1, 1, "unmatched-b"),
                                               ("", 2, 2, -1, 2, "unmatched-b")]
    assert (cmp.unmatched_a, cmp.unmatched_b) == (0, 1)


def test_step_keys_order_requests_then_positions_and_refuse_what_they_cannot_key() -> None:
    assert step_keys(np.array([1, 2]), np.array([3, 2**40 - 1])).tolist() == [
        (1 << 40) + 3, (2 << 40) + 2**40 - 1]
    for bad in (2**40, -1):
        with pytest.raises(ValueError, match=r"^positions outside 0\.\.2\*\*40 cannot be keyed$"):
            step_keys(np.array([0]), np.array([bad]))
    assert step_keys(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []


def test_a_pair_verified_twice_differently_pairs_the_last_and_leaves_no_verdict() -> None:
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("p", 1, [5, 8], [5, 6, 7])]
    b = [_verify("p", 1, [5, 8], [5, 6, 7])]
    cmp, v = _run(a, b)
    assert (cmp.blocks_compared, cmp.blocks_differing) == (1, 0)
    assert v.kind == "uninformative"
    _, v = _run(b, a)
    assert v.reasons[0].startswith("y: 1 trace finding(s) break the stream")


OUTGROWN = "vllm.cpp: request q has outgrown the draft speculative context (stops speculating)"


def test_an_outgrown_request_the_other_arm_never_traced_is_still_a_gap() -> None:
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("q", 1, [8, 9], [8, 1]), OUTGROWN]
    b = [_verify("p", 1, [5, 6], [5, 6, 7])]
    cmp, _ = _run(a, b)
    assert cmp.coverage_gaps == (CoverageGap("q", 3, None, 1, 0),)


def test_a_request_at_position_0_that_emitted_nothing_was_still_traced() -> None:
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), "[SPECTRACE] req=q pos=0 k=1 ns=0 acc=0 draft=[ 4 ] emit=[ ]"]
    b = [_verify("p", 1, [5, 6], [5, 6, 7])]
    cmp, _ = _run(a, b)
    assert cmp.coverage_gaps == (CoverageGap("q", 0, None, 1, 0),)


def test_gaps_are_looked_for_past_a_request_without_one() -> None:
    # p: streams end apart after the same number of steps (a step budget): no gap. q: a gap.
    a = [_verify("p", 1, [5, 6], [5, 6, 7]), _verify("q", 1, [8, 9], [8, 1])]
    b = [_verify("p", 1, [5, 6], [5, 6]), _verify("q", 1, [8, 9], [8, 1]),
         _verify("q", 3, [2, 2], [2, 3])]
    cmp, _ = _run(a, b)
    assert cmp.coverage_gaps == (CoverageGap("q", 3, 5, 1, 2),)
