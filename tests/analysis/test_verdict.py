"""Verdicts on golden pairs: agree only when the comparison could have failed, the measure that
decided an `uninformative`, logits as an instrument of their own, and the `differ` expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.analysis.audit import AuditThresholds, audit_trace
from difftest.analysis.compare import compare
from difftest.core.rules import Rules
from difftest.core.errors import ArmFailure, ExitCode
from difftest.core.kinds import Expect
from difftest.core.model import ArmTrace
from difftest.trace import parse_lines, parse_text, parse_trace
from difftest.analysis.verdict import Verdict, arm_failed, judge

DATA = Path(__file__).parents[1] / "data" / "compare"
NAMES = ("paged", "materialized")


def verdict_of(a: ArmTrace | str, b: ArmTrace | str, *, expect: str = "same",
               min_differing: int = 1, near_tie: float | None = 0.0, atol: float = 0.0,
               thresholds: AuditThresholds | None = None) -> Verdict:
    ta = parse_trace(DATA / a) if isinstance(a, str) else a
    tb = parse_trace(DATA / b) if isinstance(b, str) else b
    c = compare(ta, tb, Rules(near_tie=near_tie, atol=atol, expect=expect,  # type: ignore[arg-type]
                              min_differing=min_differing))
    return judge(c, audit_trace(ta, thresholds), audit_trace(tb, thresholds), names=NAMES,
                 thresholds=thresholds)


def said(v: Verdict, text: str) -> bool:
    return any(text in r for r in v.reasons)


def test_identical_informative_arms_agree_through_both_instruments() -> None:
    v = verdict_of("agree_a.log", "agree_b.log")
    assert (v.kind, v.exit_code, v.passed) == ("agree", ExitCode.OK, True)
    assert v.instruments == ("tokens", "logits")
    assert v.reasons[0] == ("7 block(s) compared, 0 differ; 21 logit row(s) compared, "
                            "0 block(s) with logit differences")
    assert said(v, "could have failed through: tokens, logits")


def test_a_hard_flip_fails_same_and_names_the_first_difference() -> None:
    v = verdict_of("agree_a.log", "differ_b.log")
    assert (v.kind, v.exit_code, v.passed) == ("differ", ExitCode.DIFFER, False)
    assert said(v, "first difference at req b pos 7 row 3: paged drafted 5, materialized "
                   "drafted 77 (margins 2.25 / 3)")
    assert said(v, "7 block(s) compared, 2 differ")


def test_an_acceptance_shift_under_tolerance_agrees_and_says_why_steps_were_unmatched() -> None:
    v = verdict_of("agree_a.log", "shift_b.log", near_tie=0.05, atol=0.02)
    assert (v.kind, v.exit_code) == ("agree", ExitCode.OK)
    assert said(v, "0 step(s) only in paged, 1 only in materialized (different acceptance "
                   "visits different positions; not a difference)")
    assert said(v, "1 differ only by near-ties")


def test_a_context_divergence_fails_same_and_names_request_position_and_tokens() -> None:
    v = verdict_of("agree_a.log", "diverge_b.log")
    assert (v.kind, v.exit_code) == ("differ", ExitCode.DIFFER)
    assert said(v, "the emitted streams of request a differ at position 8 (paged=50, "
                   "materialized=51)")
    assert said(v, "2 step(s) left out as context-diverged")
    assert not said(v, "first difference")  # no block of the compared ones differs


def test_near_ties_pass_same_while_a_hard_flip_fails_it() -> None:
    ties = verdict_of("agree_a.log", "ties_b.log", near_tie=0.6, atol=0.6)
    assert (ties.kind, ties.exit_code) == ("agree", ExitCode.OK)
    assert said(ties, "2 differ only by near-ties")
    hard = verdict_of("agree_a.log", "ties_b.log", near_tie=0.05, atol=0.6)
    assert (hard.kind, hard.exit_code) == ("differ", ExitCode.DIFFER)
    assert said(hard, "first difference at req b pos 9 row 2")


def test_logit_only_difference_fails_bitwise_and_agrees_within_atol() -> None:
    exact = verdict_of("agree_a.log", "logitonly_b.log")
    assert (exact.kind, exact.exit_code) == ("differ", ExitCode.DIFFER)
    assert said(exact, "first logit difference at req a pos 5 row 2: |diff| 0.001 (atol 0)")
    loose = verdict_of("agree_a.log", "logitonly_b.log", atol=0.01)
    assert (loose.kind, loose.exit_code) == ("agree", ExitCode.OK)


def test_an_atol_as_wide_as_the_logits_retires_the_logit_instrument() -> None:
    v = verdict_of("agree_a.log", "logitonly_b.log", atol=100.0)
    assert v.kind == "agree" and v.instruments == ("tokens",)
    assert said(v, "the tolerance (atol 100) reaches 100, at least the whole spread of the traced logits")


def test_the_degenerate_pair_is_uninformative_and_names_the_measures() -> None:
    v = verdict_of("degenerate_a.log", "degenerate_b.log")
    assert (v.kind, v.exit_code, v.passed) == ("uninformative", ExitCode.UNINFORMATIVE, False)
    assert v.instruments == ()
    blind = [r for r in v.reasons if r.startswith("the arms agree, but the comparison could not "
                                                  "have failed: ")]
    assert len(blind) == 1
    for measure in ("1 distinct drafted id(s)", "every block is [19, 19, 19]",
                    "drafted-id entropy 0.000 bits", "no block logits traced"):
        assert measure in blind[0]


def test_one_threshold_decides_it_and_the_reason_names_only_that_one() -> None:
    # agree_a varies, but demand 50 distinct ids: the token instrument goes blind on that alone
    th = AuditThresholds(min_distinct_ids=50)
    a = parse_text((DATA / "agree_a.log").read_text().replace("[spec-logits]", "[other]"))
    v = verdict_of(a, a, thresholds=th)
    assert v.kind == "uninformative"
    assert said(v, "could not have failed: 21 distinct drafted id(s), no block logits traced")


def varied_elsewhere() -> ArmTrace:
    """The degenerate arm plus three varied blocks at positions the other arm never visits."""
    extra = "".join(f"[SPECTRACE] req=req pos={p} k=3 ns=1 acc=0 draft=[ {d} ] emit=[ 1 ]\n"
                    for p, d in ((9, "3 8 21"), (10, "40 2 17"), (11, "9 33 5")))
    return parse_text((DATA / "degenerate_b.log").read_text() + extra)


@pytest.mark.parametrize("blind_side", ["a", "b"])
def test_an_arm_that_ran_further_is_a_coverage_difference_not_a_pass(blind_side: str) -> None:
    # the varied arm varies only where the other arm never ran: its extra steps are not an
    # acceptance shift but steps the other arm never executed
    blind, varied = parse_trace(DATA / "degenerate_a.log"), varied_elsewhere()
    assert audit_trace(varied).tokens_informative and not audit_trace(blind).tokens_informative
    a, b = (blind, varied) if blind_side == "a" else (varied, blind)
    v = verdict_of(a, b)
    assert (v.kind, v.exit_code) == ("differ", ExitCode.DIFFER)
    assert said(v, "the steps past the shorter stream were never run by the other arm")
    assert "tokens" not in v.instruments


def test_informative_traces_whose_compared_blocks_are_constant_are_uninformative() -> None:
    """Both traces vary, but the only block paired between them is `19 19 19`."""
    a = parse_lines([
        "[SPECTRACE] req=r pos=3 k=3 ns=1 acc=0 draft=[ 19 19 19 ] emit=[ 19 ]",
        "[SPECTRACE] req=r pos=4 k=3 ns=2 acc=1 draft=[ 5 6 7 ] emit=[ 5 30 ]"])
    b = parse_lines([
        "[SPECTRACE] req=r pos=3 k=3 ns=2 acc=1 draft=[ 19 19 19 ] emit=[ 19 5 ]",
        "[SPECTRACE] req=r pos=5 k=3 ns=1 acc=0 draft=[ 8 9 10 ] emit=[ 30 ]"])
    assert audit_trace(a).tokens_informative and audit_trace(b).tokens_informative
    v = verdict_of(a, b)
    assert (v.kind, v.exit_code) == ("uninformative", ExitCode.UNINFORMATIVE)
    assert said(v, "could not have failed: 1 distinct compared id(s)")


def test_constant_tokens_with_live_logits_are_informative_through_the_logits() -> None:
    v = verdict_of("constlogits_a.log", "constlogits_b.log")
    assert (v.kind, v.exit_code, v.passed) == ("agree", ExitCode.OK, True)
    assert v.instruments == ("logits",)
    blind = [r for r in v.reasons if r.startswith("the token comparison alone would have been "
                                                  "blind")]
    assert len(blind) == 1 and "every block is [19, 19, 19]" in blind[0]
    # logit rows were paired (12 of them): the sentence must not claim otherwise
    assert "no logit rows could be paired" not in blind[0]
    assert said(v, "12 logit row(s) compared")


def test_constant_tokens_with_live_logits_fail_when_a_logit_moves() -> None:
    text = (DATA / "constlogits_b.log").read_text()
    b = parse_text(text.replace("19:10.5 9:7", "19:10.5001 9:7"))
    v = verdict_of("constlogits_a.log", b)
    assert (v.kind, v.exit_code) == ("differ", ExitCode.DIFFER)
    assert said(v, "first logit difference at req r0 pos 4 row 3")


def test_constant_tokens_with_frozen_logits_are_uninformative() -> None:
    lines = []
    for pos in range(3, 8):
        lines += [f"[spec-logits] req=r0 pos={pos} row={r} top=[ 19:12 4:11.5 8:7 ]"
                  for r in (1, 2, 3)]
        lines.append(f"[SPECTRACE] req=r0 pos={pos} k=3 ns=1 acc=0 draft=[ 19 19 19 ] "
                     f"emit=[ {pos} ]")
    t = parse_lines(lines)
    v = verdict_of(t, t)
    assert (v.kind, v.exit_code) == ("uninformative", ExitCode.UNINFORMATIVE)
    assert said(v, "the traced logits do not vary")


def test_expect_differ_with_identical_arms_fails_and_suspects_the_toggle() -> None:
    v = verdict_of("agree_a.log", "agree_b.log", expect="differ")
    assert (v.exit_code, v.passed, v.expect) == (ExitCode.DIFFER, False, "differ")
    assert v.kind == "agree"
    assert said(v, "expected at least 1 differing block(s), found 0: the toggle may not reach "
                   "the runner")


def test_expect_differ_on_blind_inputs_says_they_could_not_have_differed() -> None:
    v = verdict_of("degenerate_a.log", "degenerate_b.log", expect="differ")
    # blind inputs say nothing about the toggle: uninformative (3), as for `same`
    assert (v.kind, v.exit_code) == ("uninformative", ExitCode.UNINFORMATIVE)
    assert said(v, "toggle may not reach the runner")
    assert said(v, "but the compared drafts could not have differed: 1 distinct drafted id(s)")


@pytest.mark.parametrize("min_differing, code", [(1, ExitCode.OK), (2, ExitCode.OK),
                                                 (3, ExitCode.DIFFER)])
def test_expect_differ_counts_differing_blocks_against_min_differing(
        min_differing: int, code: ExitCode) -> None:
    v = verdict_of("agree_a.log", "differ_b.log", expect="differ", min_differing=min_differing)
    assert v.exit_code == code and v.passed is (code == ExitCode.OK)
    assert said(v, f"expected at least {min_differing} differing block(s)")
    assert said(v, "found 2")


def test_expect_differ_counts_near_ties_as_differing() -> None:
    v = verdict_of("agree_a.log", "ties_b.log", expect="differ", min_differing=2,
                   near_tie=0.6, atol=0.6)
    assert v.passed and v.exit_code == ExitCode.OK


def test_an_arm_that_drafted_nothing_is_an_arm_failure_by_name() -> None:
    good = parse_trace(DATA / "agree_a.log")
    silent = parse_lines(["loading model", "done"])
    v = verdict_of(good, silent)
    assert (v.kind, v.exit_code) == ("arm-failed", ExitCode.ARM_FAILED)
    assert v.reasons[0].startswith("arm 'materialized': printed no drafted blocks")


def test_arm_failed_keeps_each_failure_with_its_exit_code_and_stderr_tail() -> None:
    v = arm_failed([ArmFailure("branch", "exited with an error", 3, "boom")], Expect.DIFFER)
    assert (v.kind, v.exit_code, v.expect, v.passed) == ("arm-failed", ExitCode.ARM_FAILED,
                                                            "differ", False)
    assert v.reasons == ("arm 'branch': exited with an error (exit code 3)\n"
                         "--- last lines of its stderr ---\nboom",)


# -- comparisons that could not have failed, or that ran less than they claim -------------------

def test_an_arm_that_stopped_early_fails_a_same_comparison() -> None:
    whole = (DATA / "agree_a.log").read_text().splitlines()
    early = parse_lines(whole[:11])  # B's stream ends after two of A's seven verifies
    v = verdict_of("agree_a.log", early)
    assert (v.kind, v.exit_code) == ("differ", ExitCode.DIFFER)
    assert said(v, "the steps past the shorter stream were never run by the other arm")


def test_a_near_tie_threshold_above_every_margin_leaves_tokens_blind() -> None:
    v = verdict_of("agree_a.log", "differ_b.log", near_tie=1e9, atol=1e9)
    assert "tokens" not in v.instruments
    assert said(v, "near_tie=1e+09 is above every compared row's margin")
    assert v.exit_code != ExitCode.OK


def test_a_derived_near_tie_above_every_margin_leaves_tokens_blind() -> None:
    # unset near_tie is derived: 2 x (atol + rtol |top-1|) per row, here above every margin
    v = verdict_of("agree_a.log", "differ_b.log", near_tie=None, atol=1e9)
    assert "tokens" not in v.instruments
    assert said(v, "the derived near_tie (2 x each row's tolerance) is above every compared "
                   "row's margin")
    assert v.exit_code != ExitCode.OK


def test_top_lists_with_no_id_in_common_differ_whatever_atol_allows() -> None:
    import re

    def move_ids(line: str) -> str:  # every id of a logit row, out of the other arm's reach
        if not line.startswith("[spec-logits]"):
            return line
        return re.sub(r"(-?\d+):", lambda m: f"{int(m.group(1)) + 50000}:", line)

    b = parse_lines([move_ids(line) for line in (DATA / "agree_a.log").read_text().splitlines()])
    v = verdict_of("agree_a.log", b, atol=0.01)
    assert (v.kind, v.exit_code) == ("differ", ExitCode.DIFFER)


def test_bitwise_logits_stay_an_instrument_when_top_1_values_are_constant() -> None:
    def trace(second: float) -> ArmTrace:
        return parse_lines([
            f"[spec-logits] req=r pos={p} row=1 top=[ 19:10 {p}:{second + p} ]\n"
            f"[SPECTRACE] req=r pos={p} k=1 ns=1 acc=0 draft=[ 19 ] emit=[ 1 ]"
            for p in range(1, 6)])
    same = verdict_of(trace(1.0), trace(1.0))
    assert (same.kind, same.instruments) == ("agree", ("logits",))
    moved = verdict_of(trace(1.0), trace(1.5))
    assert moved.kind == "differ"
    assert not said(moved, "cannot fail")


def test_a_near_tie_that_moves_acceptance_under_a_step_budget_is_no_coverage_gap() -> None:
    """Both arms ran the same number of verify steps; a near-tie flip at the last one ends
    their streams one token apart. That is acceptance, not a step the other arm never ran."""
    tie = (DATA / "agree_a.log").read_text().replace(
        "[spec-logits] req=a pos=13 row=2 top=[ 61:7 153:6.5 154:6 155:5.5 ]",
        "[spec-logits] req=a pos=13 row=2 top=[ 61:7 71:6.999 154:6 155:5.5 ]")
    v = verdict_of(parse_text(tie), "tie_stepend_b.log", near_tie=0.01, atol=0.01)
    assert (v.kind, v.exit_code) == ("agree", ExitCode.OK), v.reasons
    assert not said(v, "never run by the other arm")


def test_a_request_that_outgrew_the_draft_context_may_stop_anywhere() -> None:
    note = "vllm.cpp: request a has outgrown the draft speculative context (stops speculating)"
    whole = (DATA / "agree_a.log").read_text().splitlines()
    a = parse_lines(whole + [note])
    b = parse_lines([line for line in whole if "req=a pos=13" not in line] + [note])
    v = verdict_of(a, b)
    assert not said(v, "never run by the other arm"), v.reasons


def test_near_ties_count_towards_differ_whatever_near_tie_is() -> None:
    v = verdict_of("agree_a.log", "agree_a.log", expect="differ", near_tie=100)
    assert (v.kind, v.exit_code) == ("agree", ExitCode.DIFFER)
    assert said(v, "toggle may not reach the runner")


def test_ordinal_differences_are_named_by_proposing_step() -> None:
    v = verdict_of("propose_a.log", "propose_b.log")
    first = [r for r in v.reasons if r.startswith("first difference at ")]
    assert first and first[0].startswith("first difference at proposing step "), v.reasons


def test_a_flip_with_an_unknown_margin_is_hard_and_its_instruments_could_fail() -> None:
    """Arm B flips a row whose logits line has one entry (margin unknown) and traces no logits
    for another row, compared with a near-tie threshold above every margin and an atol above
    every logit. The flip is a hard difference (compare and verdict apply one near-tie rule),
    so `tokens` could fail; the one-sided logit row is a counted logit difference, so `logits`
    could fail; and no reason says either instrument cannot fail."""
    text = (DATA / "agree_a.log").read_text()
    flipped = (text.replace("[spec-logits] req=b pos=7 row=3 top=[ 5:5.5 77:3.25 106:3 107:2.5 ]",
                            "[spec-logits] req=b pos=7 row=3 top=[ 77:6 ]")
                   .replace("draft=[ -3 70000 5 ]", "draft=[ -3 70000 77 ]")
                   .replace("[spec-logits] req=a pos=5 row=1 top=[ 11:9.25 30:7.5 31:6 32:5.5 ]\n",
                            ""))
    assert flipped.count("\n") == text.count("\n") - 1
    a, b = parse_trace(DATA / "agree_a.log"), parse_text(flipped, "b.log")
    c = compare(a, b, Rules(near_tie=100, atol=1e9))
    assert (c.blocks_differing, c.blocks_near_tie, c.blocks_logit_differing) == (1, 0, 1)
    v = verdict_of(a, b, near_tie=100, atol=1e9)
    assert (v.kind, v.exit_code) == ("differ", ExitCode.DIFFER)
    assert v.instruments == ("tokens", "logits")
    assert not said(v, "cannot fail"), v.reasons
    assert said(v, "1 block(s) with logit differences")
