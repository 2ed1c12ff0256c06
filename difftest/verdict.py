"""One verdict per comparison, from what differed, what each arm's trace could show, and what
was expected. The one rule this module exists for: arms that agree on inputs that could not have
disagreed are `uninformative`, never `agree`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from difftest.audit import TraceAudit
from difftest.compare import Comparison
from difftest.errors import ArmFailedError, ExitCode

Expect = Literal["same", "differ"]


@dataclass
class Verdict:
    verdict: str  # agree | differ | uninformative | arm-failed
    exit_code: ExitCode
    expect: str
    passed: bool
    reasons: list[str] = field(default_factory=list)
    instruments: list[str] = field(default_factory=list)  # what could have failed: tokens, logits


def _where(d: dict[str, object]) -> str:
    return f"req {d['req']} pos {d['pos']} row {d['row']}"


def _margin(x: object) -> str:
    return "-" if x is None else f"{float(x):.4g}"  # type: ignore[arg-type]


def arm_failed(failures: Sequence[ArmFailedError], expect: str = "same") -> Verdict:
    return Verdict("arm-failed", ExitCode.ARM_FAILED, expect, False,
                   reasons=[str(f) for f in failures])


def judge(cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit, *, names: tuple[str, str],
          expect: Expect = "same", min_differing: int = 1) -> Verdict:
    """The verdict of one comparison whose arms both ran."""
    na, nb = names
    for name, au in ((na, audit_a), (nb, audit_b)):
        if au.blocks == 0:
            return arm_failed([ArmFailedError(
                name, "printed no drafted blocks (is VT_SPEC_TRACE set in its environment, and "
                      "does it speculate?)")], expect)

    reasons: list[str] = list(cmp.notes)
    token_flips = cmp.blocks_differing + cmp.blocks_near_tie
    logit_diff = cmp.blocks_logit_differing
    emitted_diff = bool(cmp.divergences)

    # -- could this comparison have failed at all? --------------------------------------------
    instruments: list[str] = []
    if audit_a.tokens_informative and audit_b.tokens_informative:
        instruments.append("tokens")
    logits_traced = cmp.logit_rows_compared > 0
    if logits_traced and audit_a.logits_informative and audit_b.logits_informative:
        spread = cmp.rows.logit_a[np.isfinite(cmp.rows.logit_a)]
        if spread.size and cmp.atol >= float(spread.max() - spread.min()):
            reasons.append(f"atol={cmp.atol:g} is at least the whole spread of the traced logits: "
                           "the logit comparison cannot fail")
        else:
            instruments.append("logits")

    # the arm whose audit made the comparison blind (A's when both are), to name its measures
    blind = audit_b if audit_a.tokens_informative and not audit_b.tokens_informative else audit_a

    if cmp.blocks_compared == 0:
        reasons.append("no block could be compared: every step was unmatched or context-diverged")

    reasons.append(f"{cmp.blocks_compared} block(s) compared, {cmp.blocks_differing} differ"
                   + (f", {cmp.blocks_near_tie} differ only by near-ties" if cmp.blocks_near_tie
                      else "")
                   + (f"; {cmp.logit_rows_compared} logit row(s) compared, "
                      f"{logit_diff} block(s) with logit differences" if logits_traced else ""))
    if cmp.unmatched_a or cmp.unmatched_b:
        reasons.append(f"{cmp.unmatched_a} step(s) only in {na}, {cmp.unmatched_b} only in {nb} "
                       "(different acceptance visits different positions; not a difference)")
    for d in cmp.divergences:
        reasons.append(f"the emitted streams of request {d['req']} differ at position "
                       f"{d['position']} ({na}={d['token_a']}, {nb}={d['token_b']}): later steps "
                       "ran on different contexts and are not compared")
    if cmp.context_diverged:
        reasons.append(f"{cmp.context_diverged} step(s) left out as context-diverged")
    if cmp.first_difference:
        f = cmp.first_difference
        reasons.append(f"first difference at {_where(f)}: {na} drafted {f['token_a']}, {nb} "
                       f"drafted {f['token_b']} (margins {_margin(f['margin_a'])} / "
                       f"{_margin(f['margin_b'])})")
    if cmp.first_logit_difference and logit_diff:
        f = cmp.first_logit_difference
        reasons.append(f"first logit difference at {_where(f)}: |diff| "
                       f"{_margin(f['abs_logit_diff'])} (atol {cmp.atol:g}); max |diff| "
                       f"{_margin(cmp.max_abs_logit_diff)}")

    if expect == "differ":
        if token_flips >= min_differing:
            reasons.append(f"expected at least {min_differing} differing block(s): found "
                           f"{token_flips}")
            return Verdict("differ", ExitCode.OK, expect, True, reasons, instruments)
        reasons.append(f"expected at least {min_differing} differing block(s), found "
                       f"{token_flips}: the toggle may not reach the runner")
        if not instruments:
            reasons.append("and the arms' drafts could not have differed: "
                           + _blind_reason(blind, logits_traced))
        return Verdict("agree" if instruments else "uninformative", ExitCode.DIFFER, expect,
                       False, reasons, instruments)

    if cmp.blocks_differing or logit_diff or emitted_diff:
        return Verdict("differ", ExitCode.DIFFER, expect, False, reasons, instruments)
    if cmp.blocks_compared and instruments:
        if instruments == ["logits"]:
            reasons.append("the token comparison alone would have been blind ("
                           + (", ".join(blind.token_blind_reasons) or "below the audit "
                              "thresholds") + "); the exact logit comparison "
                           "could have failed and did not")
        else:
            reasons.append("the comparison could have failed through: " + ", ".join(instruments))
        return Verdict("agree", ExitCode.OK, expect, True, reasons, instruments)
    reasons.append("the arms agree, but the comparison could not have failed: "
                   + _blind_reason(blind, logits_traced))
    return Verdict("uninformative", ExitCode.UNINFORMATIVE, expect, False, reasons, instruments)


def _blind_reason(audit: TraceAudit, logits_traced: bool) -> str:
    """Which measures decided that the comparison was blind, in the audit's words."""
    parts = list(audit.token_blind_reasons)
    if logits_traced or audit.logit_rows:
        parts += audit.logit_blind_reasons or (
            [] if logits_traced else ["no logit rows could be paired between the arms"])
    else:
        parts += audit.logit_blind_reasons
    return ", ".join(parts) if parts else "below the audit thresholds"
