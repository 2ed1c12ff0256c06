"""Audit paths the other audit tests never run: a constant block that is not `19 19 19`, blocks of
varying k, the acceptance sentences, nan rows and a blind radius above the threshold. The reason
sentences are what users read, so they are asserted whole."""

from __future__ import annotations

import numpy as np
import pytest

from difftest.analysis.audit import (
    AuditThresholds, DraftedBlocks, audit_trace, drafted_blocks, measure_tokens,
)
from difftest.trace import parse_lines


def _verify(pos: int, draft: list[int], acc: int, req: str = "r") -> str:
    ids = " ".join(map(str, draft))
    emit = " ".join(map(str, [*draft[:acc], 0]))
    return (f"[SPECTRACE] req={req} pos={pos} k={len(draft)} ns={acc + 1} acc={acc} "
            f"draft=[ {ids} ] emit=[ {emit} ]")


def _logits(pos: int, row: int, top: list[tuple[int, str]], req: str = "r") -> str:
    cells = " ".join(f"{i}:{x}" for i, x in top)
    return f"[spec-logits] req={req} pos={pos} row={row} top=[ {cells} ]"


def test_a_constant_block_other_than_19_is_named_with_its_ids() -> None:
    a = audit_trace(parse_lines([_verify(p, [5, 7, 9], 3) for p in (1, 5, 9)]))
    assert a.verdict == "uninformative"
    assert a.constant_blocks and a.uniform_blocks == 0
    assert a.row_entropy_bits == [0.0, 0.0, 0.0]
    assert (a.acceptance_min, a.acceptance_max, a.acceptance_mean) == (3, 3, 3.0)
    assert a.reasons == [
        "3 drafted blocks read from verify lines",
        "every block is the same block [5, 7, 9]: drafts do not depend on the context",
        "every verify accepted every draft: acceptance carries no signal",
        "no block logits traced (level < 3): only tokens can be compared",
    ]
    assert a.token_blind_reasons == ["every block is [5, 7, 9]"]
    assert a.logit_blind_reasons == ["no block logits traced"]


def test_one_block_is_not_blamed_for_being_the_same_block() -> None:
    a = audit_trace(parse_lines([_verify(1, [5, 7, 9], 1)]))
    assert a.constant_blocks and a.tokens_informative
    assert a.reasons[:2] == ["1 drafted blocks read from verify lines",
                             "drafts vary: 3 distinct ids, entropy 1.58 bits"]
    assert "acceptance carries no signal" not in " ".join(a.reasons)


def test_blocks_of_varying_k_are_measured_block_by_block() -> None:
    blocks = DraftedBlocks("verify", np.array([4, 4, 4, 4, 4, 5, 6], dtype=np.int32),
                           np.array([0, 2, 5, 7], dtype=np.int64))
    m = measure_tokens(blocks, None, AuditThresholds())
    assert blocks.matrix() is None
    assert (m.blocks, m.distinct_ids, m.constant_blocks, m.uniform_blocks) == (3, 3, False, 2)
    assert m.row_entropy_bits == []
    assert m.entropy_bits == pytest.approx(1.1488, abs=1e-4)
    assert m.informative and m.blind_reasons == []
    assert m.reasons == ["drafts vary: 3 distinct ids, entropy 1.15 bits"]


def test_equal_blocks_of_varying_k_are_not_constant_but_are_uniform() -> None:
    blocks = DraftedBlocks("verify", np.array([4, 4, 4, 4, 4], dtype=np.int32),
                           np.array([0, 2, 5], dtype=np.int64))
    m = measure_tokens(blocks, None, AuditThresholds(), what="compared")
    assert (m.constant_blocks, m.uniform_blocks, m.informative) == (False, 2, False)
    assert m.reasons == [
        "only 1 distinct compared id(s) (need 2): a token comparison compares a constant "
        "with a constant",
        "compared-id entropy 0.000 bits is below 1 bits",
    ]
    assert m.blind_reasons == ["1 distinct compared id(s)", "compared-id entropy 0.000 bits"]


def test_no_blocks_is_blind_with_its_own_sentence() -> None:
    blocks = DraftedBlocks("verify", np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64))
    m = measure_tokens(blocks, None, AuditThresholds(), what="compared")
    assert m.reasons == ["no compared blocks: nothing could be compared"]
    assert m.blind_reasons == ["no compared blocks"]


def test_wide_margins_nan_rows_and_rejected_drafts_are_each_said() -> None:
    lines = [_logits(1, 1, [(3, "9.0"), (4, "5.0")]), _logits(1, 2, [(8, "7.5"), (2, "4.5")]),
             _verify(1, [3, 8], 0),
             _logits(2, 1, [(6, "nan"), (4, "5.0")]), _logits(2, 2, [(1, "6.0"), (2, "2.0")]),
             _verify(2, [6, 1], 0)]
    a = audit_trace(parse_lines(lines))
    d = a.to_dict()
    assert {k: d[k] for k in ("level", "requests", "blocks", "logit_rows", "nonfinite_rows",
                              "min_margin", "median_margin", "blind_radius_min",
                              "blind_radius_median", "logit_spread", "tokens_informative",
                              "logits_informative", "verdict")} == {
        "level": 3, "requests": 1, "blocks": 2, "logit_rows": 4, "nonfinite_rows": 1,
        "min_margin": 3.0, "median_margin": 4.0, "blind_radius_min": 1.5,
        "blind_radius_median": 2.0, "logit_spread": 7.0, "tokens_informative": False,
        "logits_informative": True, "verdict": "informative"}
    assert a.row_entropy_bits == [1.0, 1.0]
    assert (a.logit_digits, a.logit_resolution, a.logit_blind_radius) == (6, 1e-05, 1e-05)
    assert a.reasons == [
        "2 drafted blocks read from verify lines",
        "drafts vary: 4 distinct ids, entropy 2.00 bits",
        "every block row has a top-1/top-2 margin of at least 3: no logit perturbation below "
        "1.5 could move a token (blind radius above 1)",
        "every verify rejected all drafts (acc=0): acceptance carries no signal",
        "1 logit row(s) hold nan/inf and are left out",
        "4 block-logit rows are traced and vary: an exact logit comparison can see what tokens "
        "cannot",
        "logit blind radius 1e-05 (the printed resolution, 6 significant digits): no logit "
        "change below it can show; token blind radius 1.5",
        "informative through the logits only: a token comparison alone would have been blind",
    ]
    assert a.token_blind_reasons == ["smallest blind radius 1.5 above 1"]
    assert a.logit_blind_reasons == []


def test_a_margin_inside_the_blind_radius_says_what_could_flip_a_token() -> None:
    lines = [_logits(1, 1, [(3, "9.0"), (4, "8.5")]), _logits(1, 2, [(8, "7.5"), (2, "4.5")]),
             _verify(1, [3, 8], 1),
             _logits(2, 1, [(6, "7.0"), (4, "5.0")]), _logits(2, 2, [(1, "6.0"), (2, "2.0")]),
             _verify(2, [6, 1], 0)]
    a = audit_trace(parse_lines(lines), AuditThresholds(max_blind_radius=0.25))
    assert a.tokens_informative and a.verdict == "informative"
    assert a.reasons[2] == ("smallest margin 0.5: a perturbation of 0.25 could flip a token "
                            "(median blind radius 1.25)")
    assert a.acceptance_mean == 0.5


def test_logits_that_are_all_one_row_carry_no_signal() -> None:
    same = [(3, "9.0"), (4, "5.0")]
    lines = [_logits(1, 1, same), _verify(1, [3], 0), _logits(2, 1, same), _verify(2, [3], 0)]
    a = audit_trace(parse_lines(lines))
    assert a.logits_vary is False and a.logit_spread == 4.0
    assert "the traced block logits are all the same row: they carry no signal" in a.reasons
    assert a.logit_blind_reasons == ["the traced logits do not vary"]


PROPOSES = ["[spec-propose] rows=1 nqpr=3 drafts/row=2 first=[1 2 ]",
            "[spec-propose] NO proposing rows this step (num_reqs=1)",
            "[spec-propose] rows=1 nqpr=3 drafts/row=2 first=[3 4 ]",
            "a line that is no trace line"]


def test_a_propose_only_audit_says_where_its_blocks_come_from() -> None:
    t = parse_lines(PROPOSES, path="arm.log")
    blocks = drafted_blocks(t)
    assert blocks.ids.dtype == np.int32 and blocks.offsets.dtype == np.int64
    assert blocks.ids.tolist() == [1, 2, 3, 4] and blocks.offsets.tolist() == [0, 2, 4]
    a = audit_trace(t)
    assert (a.path, a.block_source, a.skipped_lines, a.requests) == ("arm.log", "propose", 1, 0)
    assert (a.acceptance_min, a.acceptance_max, a.acceptance_mean) == (None, None, None)
    assert a.logits_vary is False and a.logit_spread is None and a.min_margin is None
    assert a.reasons == [
        "2 drafted blocks read from propose lines (first row only)",
        "drafts vary: 4 distinct ids, entropy 2.00 bits",
        "no block logits traced (level < 3): only tokens can be compared",
    ]


def test_no_proposing_step_gives_no_blocks() -> None:
    blocks = drafted_blocks(parse_lines(PROPOSES[1:2]))
    assert (len(blocks), blocks.ids.dtype, blocks.ids.size) == (0, np.dtype(np.int32), 0)
    assert blocks.offsets.tolist() == [0] and blocks.offsets.dtype == np.int64


def test_one_logit_row_has_a_spread_but_does_not_vary() -> None:
    a = audit_trace(parse_lines([_logits(1, 1, [(3, "9.0"), (4, "5.5")]), _verify(1, [3], 0)]))
    assert a.logits_vary is False and a.logit_spread == 3.5
    assert a.logit_blind_reasons == ["the traced logits do not vary"]


def test_logits_that_differ_only_in_their_ids_vary() -> None:
    a = audit_trace(parse_lines([_logits(1, 1, [(3, "9.0"), (4, "5.0")]), _verify(1, [3], 0),
                                 _logits(2, 1, [(7, "9.0"), (4, "5.0")]), _verify(2, [7], 0)]))
    assert a.logits_vary is True and a.logits_informative and a.logit_spread == 4.0


def test_empty_top_lists_have_no_spread() -> None:
    a = audit_trace(parse_lines(["[spec-logits] req=r pos=1 row=1 top=[ ]", _verify(1, [3], 0)]))
    assert (a.logit_rows, a.nonfinite_rows, a.logit_spread, a.logits_vary) == (1, 0, None, False)


def _blocks(*blocks: list[int]) -> DraftedBlocks:
    ids = np.array([i for b in blocks for i in b], dtype=np.int32)
    return DraftedBlocks("verify", ids, np.cumsum([0, *map(len, blocks)]).astype(np.int64))


def test_thresholds_are_met_at_equality() -> None:
    # 2 distinct ids (the minimum) and exactly 1 bit (the minimum) are enough
    m = measure_tokens(_blocks([1, 2], [2, 1]), None, AuditThresholds())
    assert (m.distinct_ids, m.entropy_bits, m.informative) == (2, 1.0, True)
    assert m.blind_reasons == []


def test_two_identical_blocks_are_the_same_block() -> None:
    m = measure_tokens(_blocks([1, 2], [1, 2]), None, AuditThresholds())
    assert m.constant_blocks and m.blind_reasons == ["every block is [1, 2]"]


def test_uniform_blocks_of_varying_k_are_counted_one_by_one() -> None:
    m = measure_tokens(_blocks([4, 4], [5, 6, 7], [8, 9]), None, AuditThresholds())
    assert (m.constant_blocks, m.uniform_blocks, m.blocks) == (False, 1, 3)


def test_without_margins_no_margin_figure_is_made_up() -> None:
    m = measure_tokens(_blocks([1, 2], [3, 4]), np.array([np.nan, np.inf]), AuditThresholds())
    assert (m.min_margin, m.median_margin, m.blind_radius_min, m.blind_radius_median) == (
        None, None, None, None)
    assert m.reasons == ["drafts vary: 4 distinct ids, entropy 2.00 bits"]


def test_no_ids_have_no_entropy() -> None:
    from difftest.analysis.audit import entropy_bits

    assert entropy_bits(np.zeros(0, dtype=np.int32)) == 0.0
    assert entropy_bits(np.array([9])) == 0.0


def test_the_audit_counts_the_traces_findings() -> None:
    a = audit_trace(parse_lines([_logits(1, 1, [(3, "nan"), (4, "5.0")]), _verify(1, [3], 0)]))
    assert (a.findings, a.nonfinite_rows, a.logit_rows) == (1, 1, 1)
    assert a.median_margin is None and a.blind_radius_median is None


def test_rows_without_a_margin_leave_the_token_blind_radius_unknown() -> None:
    a = audit_trace(parse_lines([_logits(1, 1, [(3, "9.25")]), _verify(1, [3], 0),
                                 _logits(2, 1, [(4, "8.5")]), _verify(2, [4], 0)]))
    assert (a.logit_digits, a.logit_resolution, a.logit_blind_radius) == (6, 1e-05, 1e-05)
    assert ("logit blind radius 1e-05 (the printed resolution, 6 significant digits): no logit "
            "change below it can show; token blind radius unknown") in a.reasons


def test_a_level_1_trace_has_no_logit_resolution() -> None:
    a = audit_trace(parse_lines([_verify(1, [3, 4], 0)]))
    assert (a.logit_digits, a.logit_resolution, a.logit_blind_radius) == (None, None, None)
