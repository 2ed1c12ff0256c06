"""Verdict paths the other tests never run: `passed` on the uninformative `differ` path, an atol
between 0 and the logit spread, a near_tie small in value that still blinds the tokens, and the
exact sentences of each. What users read is asserted whole."""

from __future__ import annotations

from pathlib import Path

from difftest.analysis.audit import audit_trace
from difftest.analysis.compare import compare
from difftest.core.rules import Rules
from difftest.core.errors import ExitCode
from difftest.core.kinds import Expect, VerdictKind
from difftest.core.model import ArmTrace
from difftest.trace import parse_lines, parse_trace
from difftest.analysis.verdict import Verdict, judge

DATA = Path(__file__).parents[1] / "data" / "compare"


def _judge(a: ArmTrace, b: ArmTrace, **kw: float) -> Verdict:
    expect = Expect.DIFFER if kw.pop("differ", 0) else Expect.SAME
    cmp = compare(a, b, Rules(near_tie=kw.get("near_tie", 0.0), atol=kw.get("atol", 0.0),
                              expect=expect))
    return judge(cmp, audit_trace(a), audit_trace(b), names=("x", "y"))


AGREE_A = parse_trace(DATA / "agree_a.log")
AGREE_B = parse_trace(DATA / "agree_b.log")
COMPARED = ("7 block(s) compared, 0 differ; 21 logit row(s) compared, 0 block(s) with logit "
            "differences")


def test_uninformative_under_differ_does_not_pass_and_exits_3() -> None:
    v = _judge(parse_trace(DATA / "degenerate_a.log"), parse_trace(DATA / "degenerate_b.log"),
               differ=1)
    assert (v.kind, v.expect, v.passed, v.exit_code, v.label) == (
        VerdictKind.UNINFORMATIVE, Expect.DIFFER, False, ExitCode.UNINFORMATIVE, "UNINFORMATIVE")
    assert v.instruments == ()
    assert v.reasons == (
        "6 block(s) compared, 0 differ",
        "expected at least 1 differing block(s), found 0: the toggle may not reach the runner",
        "but the compared drafts could not have differed: 1 distinct drafted id(s), every block "
        "is [19, 19, 19], drafted-id entropy 0.000 bits, no block logits traced",
    )


def test_an_atol_inside_the_logit_spread_keeps_the_logit_instrument() -> None:
    assert audit_trace(AGREE_A).logit_spread == 10.0
    v = _judge(AGREE_A, AGREE_B, atol=0.5)
    assert (v.kind, v.passed, v.instruments) == (VerdictKind.AGREE, True, ("tokens", "logits"))
    assert v.reasons == (COMPARED,
                         "blind radius: tokens 0.01 (smallest compared margin / 2), logits 0.5 "
                         "(its tolerance): a wrong change smaller than these goes unseen by that "
                         "instrument",
                         "the comparison could have failed through: tokens, logits")


def test_an_atol_equal_to_the_logit_spread_retires_the_logit_instrument() -> None:
    v = _judge(AGREE_A, AGREE_B, atol=10.0)
    assert v.instruments == ("tokens",)
    assert v.reasons == (
        "the tolerance (atol 10) reaches 10, at least the whole spread of the traced logits (10): "
        "the logit comparison cannot fail",
        COMPARED,
        "blind radius: tokens 0.01 (smallest compared margin / 2), logits 10 (its tolerance): a "
        "wrong change smaller than these goes unseen by that instrument",
        "the comparison could have failed through: tokens")


def test_a_near_tie_below_some_margins_keeps_the_token_instrument() -> None:
    v = _judge(AGREE_A, AGREE_B, near_tie=0.3)
    assert v.instruments == ("tokens", "logits")


def _small_lines(first: int) -> list[str]:
    """Varied drafts whose every row has a top-1/top-2 margin of 0.25."""
    lines = []
    for step, pos in enumerate(range(1, 9, 2)):
        ids = [first + 3 * step, first + 3 * step + 1]
        for row, i in enumerate(ids, start=1):
            lines.append(f"[spec-logits] req=r pos={pos} row={row} top=[ {i}:{2.0 + step} "
                         f"{i + 100}:{1.75 + step} ]")
        lines.append(f"[SPECTRACE] req=r pos={pos} k=2 ns=2 acc=1 draft=[ {ids[0]} {ids[1]} ] "
                     f"emit=[ {ids[0]} 0 ]")
    return lines


def _small_margins(first: int) -> ArmTrace:
    return parse_lines(_small_lines(first))


def test_a_small_near_tie_above_every_margin_blinds_the_tokens() -> None:
    a = _small_margins(10)
    assert audit_trace(a).min_margin == 0.25
    v = _judge(a, _small_margins(10), near_tie=0.5)
    assert (v.kind, v.instruments) == (VerdictKind.AGREE, ("logits",))
    assert v.reasons == (
        "4 block(s) compared, 0 differ; 8 logit row(s) compared, 0 block(s) with logit "
        "differences",
        "bitwise at 6 significant digits: agreement means equal to within the printed resolution "
        "1e-05, not bit-identical (print logits with %.9g for bit-identity)",
        "blind radius: tokens 0.5 (near_tie), logits 1e-05 (its resolution): "
        "a wrong change smaller than these goes unseen by that instrument",
        "the token comparison alone would have been blind (near_tie=0.5 is above every compared "
        "row's margin, so every flip would count as a near-tie); the exact logit comparison "
        "could have failed and did not")
    kept = _judge(a, _small_margins(10), near_tie=0.2)
    assert kept.instruments == ("tokens", "logits")


def test_a_near_tie_under_differ_never_blinds_the_tokens() -> None:
    a = _small_margins(10)
    v = _judge(a, _small_margins(10), near_tie=0.5, differ=1)
    assert (v.kind, v.instruments, v.exit_code) == (VerdictKind.AGREE, ("tokens", "logits"),
                                                       ExitCode.DIFFER)
    assert v.reasons[-1] == ("expected at least 1 differing block(s), found 0: the toggle may "
                             "not reach the runner")


def test_a_found_difference_under_differ_passes_with_its_count() -> None:
    flipped = parse_lines([line.replace("draft=[ 13 14 ]", "draft=[ 13 15 ]")
                           for line in _small_lines(10)])
    v = _judge(_small_margins(10), flipped, differ=1)
    assert (v.kind, v.passed, v.exit_code, v.label) == (VerdictKind.DIFFER, True, ExitCode.OK,
                                                           "PASS")
    assert v.reasons[-1] == "expected at least 1 differing block(s): found 1"



def test_with_reasons_returns_a_copy_with_the_reasons_appended() -> None:
    v = Verdict(VerdictKind.AGREE, Expect.SAME, ("one",), ("tokens",))
    more = v.with_reasons(["two", "three"])
    assert more.reasons == ("one", "two", "three") and v.reasons == ("one",)
    assert (more.kind, more.expect, more.instruments) == (v.kind, v.expect, v.instruments)


def _constant(last: list[int]) -> ArmTrace:
    """Level-1 blocks that are all `19 19 19` but the last."""
    blocks = [[19, 19, 19]] * 4 + [last]
    return parse_lines([f"[SPECTRACE] req=r pos={1 + 2 * i} k=3 ns=2 acc=1 "
                        f"draft=[ {' '.join(map(str, b))} ] emit=[ {b[0]} 0 ]"
                        for i, b in enumerate(blocks)])


def test_a_counted_difference_makes_tokens_an_instrument_whatever_the_audit_says() -> None:
    a, b = _constant([19, 19, 19]), _constant([19, 19, 20])
    assert not audit_trace(a).tokens_informative
    v = _judge(a, b)
    assert (v.kind, v.instruments) == (VerdictKind.DIFFER, ("tokens",))
    assert v.reasons == ("5 block(s) compared, 1 differ",
                         "first difference at req r pos 9 row 3: x drafted 19, y drafted 20 "
                         "(margins - / -)")


def _constant_tied(last: int) -> ArmTrace:
    """Level-3 blocks `19 19` with a margin of 0.125 at every row; the last block's second row
    drafts `last`."""
    lines = []
    for i in range(4):
        pos = 1 + 2 * i
        second = last if i == 3 else 19
        lines += [f"[spec-logits] req=r pos={pos} row=1 top=[ 19:2.0 {20 + i}:1.875 ]",
                  f"[spec-logits] req=r pos={pos} row=2 top=[ {second}:3.0 {30 + i}:2.875 ]",
                  f"[SPECTRACE] req=r pos={pos} k=2 ns=2 acc=1 draft=[ 19 {second} ] "
                  "emit=[ 19 0 ]"]
    return parse_lines(lines)


def test_near_ties_counted_under_differ_make_tokens_an_instrument() -> None:
    a, b = _constant_tied(19), _constant_tied(20)
    v = _judge(a, b, near_tie=0.5, atol=0.5, differ=1)
    assert (v.kind, v.passed) == (VerdictKind.DIFFER, True)
    assert v.instruments[0] == "tokens"
    assert v.reasons[0].startswith("4 block(s) compared, 0 differ, 1 differ only by near-ties")


def _verify(req: str, pos: int, draft: list[int], emit: list[int]) -> str:
    return (f"[SPECTRACE] req={req} pos={pos} k={len(draft)} ns={len(emit)} acc={len(emit) - 1} "
            f"draft=[ {' '.join(map(str, draft))} ] emit=[ {' '.join(map(str, emit))} ]")


def test_no_block_compared_says_so_first_and_a_lost_step_is_a_difference() -> None:
    # y's stream never emitted position 1, where x drafted: a step lost from y's trace (or
    # extra in x's); x emitted y's position 2 inside its step at 1: acceptance
    a = parse_lines([_verify("p", 1, [5, 6], [5, 6, 7])])
    b = parse_lines([_verify("p", 2, [6, 7], [6, 7])])
    v = _judge(a, b)
    assert (v.kind, v.instruments, v.exit_code) == (VerdictKind.DIFFER, (), ExitCode.DIFFER)
    assert v.reasons == (
        "no block could be compared: every step was unmatched or context-diverged",
        "0 block(s) compared, 0 differ",
        "1 step(s) only in x at positions y's stream never emitted, 0 only in y at positions x's "
        "never emitted: steps lost from one trace (or extra in the other), a difference, not "
        "acceptance; their 2 drafted row(s) could not be compared",
        "0 step(s) only in x, 1 only in y (different acceptance visits different positions; not "
        "a difference)")


def test_an_arm_without_blocks_failed_and_keeps_the_expectation() -> None:
    a = parse_lines([_verify("p", 1, [5, 6], [5, 6, 7])])
    v = _judge(a, parse_lines(["no trace here"]), differ=1)
    assert (v.kind, v.expect, v.exit_code) == (VerdictKind.ARM_FAILED, Expect.DIFFER,
                                                  ExitCode.ARM_FAILED)
    assert v.reasons == ("arm 'y': printed no drafted blocks (is VT_SPEC_TRACE set in its "
                         "environment, and does it speculate?)",)


def _narrow_logits() -> ArmTrace:
    """Varied drafts whose traced logits all lie within 1.0..1.5 (a spread of 0.5)."""
    lines = []
    for i in range(3):
        pos = 1 + 2 * i
        lines += [f"[spec-logits] req=r pos={pos} row=1 top=[ {10 + i}:1.5 {40 + i}:1.25 ]",
                  f"[spec-logits] req=r pos={pos} row=2 top=[ {20 + i}:1.25 {50 + i}:1.0 ]",
                  f"[SPECTRACE] req=r pos={pos} k=2 ns=2 acc=1 draft=[ {10 + i} {20 + i} ] "
                  f"emit=[ {10 + i} 0 ]"]
    return parse_lines(lines)


def test_an_atol_below_1_that_covers_the_spread_retires_the_logits() -> None:
    assert audit_trace(_narrow_logits()).logit_spread == 0.5
    v = _judge(_narrow_logits(), _narrow_logits(), atol=0.5)
    assert v.instruments == ("tokens",)
    assert v.reasons[0] == ("the tolerance (atol 0.5) reaches 0.5, at least the whole spread of "
                            "the traced logits (0.5): the logit comparison cannot fail")
    assert _judge(_narrow_logits(), _narrow_logits(), atol=0.25).instruments == ("tokens",
                                                                                 "logits")
