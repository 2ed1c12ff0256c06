"""The audit must call a constant fixture uninformative and a varied one informative, and say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.analysis.audit import AuditThresholds, audit_trace, drafted_blocks, entropy_bits
from difftest.trace import parse_lines, parse_trace

DATA = Path(__file__).parents[1] / "data"


def test_constant19_is_uninformative() -> None:
    a = audit_trace(parse_trace(DATA / "constant19_level1.log"))
    assert a.verdict == "uninformative"
    assert (a.blocks, a.distinct_ids, a.entropy_bits) == (7, 1, 0.0)
    assert a.constant_blocks and a.uniform_blocks == 7
    assert (a.acceptance_min, a.acceptance_max) == (0, 0)
    assert a.min_margin is None
    text = " ".join(a.reasons)
    assert "every block is the same block [19, 19, 19]" in text
    assert "acceptance carries no signal" in text


def test_varied_fixture_is_informative() -> None:
    a = audit_trace(parse_trace(DATA / "two_requests_level3.log"))
    assert a.verdict == "informative"
    assert a.tokens_informative and a.logits_informative
    assert a.blocks == 12 and a.distinct_ids == 31
    assert a.entropy_bits == pytest.approx(4.8712, abs=1e-3)
    assert not a.constant_blocks
    assert a.min_margin == pytest.approx(0.0446, abs=1e-9)
    assert a.blind_radius_min == pytest.approx(0.0223, abs=1e-9)
    assert (a.acceptance_min, a.acceptance_max) == (0, 3)


def test_entropy_is_shannon_in_bits() -> None:
    import numpy as np

    assert entropy_bits(np.array([1, 2, 3, 4])) == pytest.approx(2.0)
    assert entropy_bits(np.array([7, 7, 7])) == 0.0
    assert entropy_bits(np.array([1, 1, 2, 2])) == pytest.approx(1.0)


def _verify(pos: int, draft: list[int]) -> str:
    ids = " ".join(map(str, draft))
    return f"[SPECTRACE] req=r pos={pos} k={len(draft)} ns=1 acc=0 draft=[ {ids} ] emit=[ 0 ]"


def test_propose_only_traces_are_audited_from_first_rows() -> None:
    lines = [f"[spec-propose] rows=1 nqpr=3 drafts/row=2 first=[{a} {b} ]"
             for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]]
    lines.insert(2, "[spec-propose] NO proposing rows this step (num_reqs=1)")
    a = audit_trace(parse_lines(lines))
    assert a.block_source == "propose" and a.blocks == 4 and a.distinct_ids == 8
    assert a.verdict == "informative"


def test_blocks_that_repeat_but_vary_between_steps_are_not_constant() -> None:
    a = audit_trace(parse_lines([_verify(i, [i, i]) for i in range(1, 9)]))
    assert not a.constant_blocks and a.uniform_blocks == 8 and a.verdict == "informative"


def test_constant_tokens_with_live_logits_are_informative_through_logits() -> None:
    lines = []
    for pos in range(1, 6):
        lines.append(f"[spec-logits] req=r pos={pos} row=1 top=[ 19:{50 + pos}.5 3:1.25 ]")
        lines.append(_verify(pos, [19]))
    a = audit_trace(parse_lines(lines))
    assert not a.tokens_informative and a.logits_informative
    assert a.verdict == "informative"
    assert any("token comparison alone would have been blind" in r for r in a.reasons)


def test_huge_margins_make_the_token_comparison_blind() -> None:
    lines = []
    for pos in range(1, 6):
        lines.append(f"[spec-logits] req=r pos={pos} row=1 top=[ {pos}:100 3:1 ]")
        lines.append(f"[spec-logits] req=r pos={pos} row=2 top=[ {pos + 7}:100 3:1 ]")
        lines.append(_verify(pos, [pos, pos + 7]))
    a = audit_trace(parse_lines(lines))
    assert a.blind_radius_min == pytest.approx(49.5)
    assert not a.tokens_informative
    loose = audit_trace(parse_lines(lines), AuditThresholds(max_blind_radius=60))
    assert loose.tokens_informative


def test_identical_logit_rows_carry_no_signal() -> None:
    lines = []
    for pos in range(1, 4):
        lines.append(f"[spec-logits] req=r pos={pos} row=1 top=[ 19:9 3:1 ]")
        lines.append(_verify(pos, [19]))
    a = audit_trace(parse_lines(lines))
    assert not a.logits_informative and a.verdict == "uninformative"


def test_thresholds_decide() -> None:
    lines = [_verify(i, [i % 2, 5]) for i in range(1, 9)]  # ids {0,1,5}: about 1.3 bits
    assert audit_trace(parse_lines(lines)).verdict == "informative"
    strict = AuditThresholds(min_entropy_bits=2.0)
    assert audit_trace(parse_lines(lines), strict).verdict == "uninformative"
    assert audit_trace(parse_lines(lines), AuditThresholds(min_distinct_ids=4)).verdict \
        == "uninformative"


def test_no_drafts_is_uninformative() -> None:
    a = audit_trace(parse_lines(["[spec-propose] NO proposing rows this step (num_reqs=1)"]))
    assert a.blocks == 0 and a.verdict == "uninformative"
    assert "no drafted blocks" in a.reasons[0]
    assert len(drafted_blocks(parse_lines([]))) == 0
