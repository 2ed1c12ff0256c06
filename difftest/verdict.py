"""One verdict per comparison, from what differed, what each arm's trace could show, and what
was expected. The one rule this module exists for: arms that agree on inputs that could not have
disagreed are `uninformative`, never `agree`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from difftest.audit import AuditThresholds, TraceAudit, measure_tokens
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
    if d["req"] == "":  # ordinal alignment: no request ids, `pos` is the proposing step
        return f"proposing step {d['pos']} row {d['row']}"
    return f"req {d['req']} pos {d['pos']} row {d['row']}"


def _margin(x: object) -> str:
    return "-" if x is None else f"{float(x):.4g}"  # type: ignore[arg-type]


def arm_failed(failures: Sequence[ArmFailedError], expect: str = "same") -> Verdict:
    return Verdict("arm-failed", ExitCode.ARM_FAILED, expect, False,
                   reasons=[str(f) for f in failures])


def _instruments(cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit,
                 th: AuditThresholds, expect: str) -> tuple[list[str], list[str], list[str]]:
    """What could have failed: measured on the blocks actually compared, not the whole traces.

    Returns (instruments, why the tokens were blind, other sentences)."""
    instruments: list[str] = []
    blind: list[str] = []
    notes: list[str] = []
    # -- tokens: both arms vary, the compared blocks vary, and a flip there could count
    for au in (audit_a, audit_b):
        blind += [r for r in au.token_blind_reasons if r not in blind]
    if not blind:
        for side in ("a", "b"):
            blocks, margins = cmp.compared_blocks(side)
            logged = margins if np.isfinite(margins).any() else None
            measured = measure_tokens(blocks, logged, th, what="compared")
            blind += [r for r in measured.blind_reasons if r not in blind]
    if not blind and cmp.near_tie > 0 and expect == "same":  # `differ` counts near-ties too
        r = cmp.rows
        rows = r.compared
        with np.errstate(invalid="ignore"):
            hard_possible = np.fmax(r.margin_a[rows], r.margin_b[rows]) >= cmp.near_tie
        known = np.isfinite(r.margin_a[rows]) | np.isfinite(r.margin_b[rows])
        if known.any() and not hard_possible[known].any():
            blind.append(f"near_tie={cmp.near_tie:g} is above every compared row's margin, so "
                         "every flip would count as a near-tie")
    if not blind:
        instruments.append("tokens")
    # -- logits: traced and varying in both arms, paired, and not swallowed by atol
    r = cmp.rows
    compared = r.compared & np.isfinite(r.logit_a)
    seen = np.column_stack([r.logit_a[compared], r.margin_a[compared]])
    compared_vary = seen.shape[0] >= 2 and bool(np.any(seen != seen[0]))
    if cmp.logit_rows_compared and not compared_vary:
        notes.append("the compared logit rows are all alike: the logit comparison cannot fail")
    if (cmp.logit_rows_compared and compared_vary and audit_a.logits_informative
            and audit_b.logits_informative):
        spreads = [au.logit_spread for au in (audit_a, audit_b) if au.logit_spread is not None]
        if cmp.atol > 0 and spreads and cmp.atol >= min(spreads):
            notes.append(f"atol={cmp.atol:g} is at least the whole spread of the traced logits "
                         f"({min(spreads):.4g}): the logit comparison cannot fail")
        else:
            instruments.append("logits")
    return instruments, blind, notes


def judge(cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit, *, names: tuple[str, str],
          expect: Expect = "same", min_differing: int = 1,
          thresholds: AuditThresholds | None = None) -> Verdict:
    """The verdict of one comparison whose arms both ran."""
    th = thresholds or AuditThresholds()
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
    coverage_diff = bool(cmp.coverage_gaps)
    logits_traced = cmp.logit_rows_compared > 0
    instruments, token_blind, notes = _instruments(cmp, audit_a, audit_b, th, expect)
    reasons += notes

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
    for gap in cmp.coverage_gaps:
        ends = [f"{name} never traced it" if end is None else
                f"{name} emitted up to position {end} in {steps} step(s)"
                for name, end, steps in ((na, gap["end_a"], gap["steps_a"]),
                                         (nb, gap["end_b"], gap["steps_b"]))]
        reasons.append(f"request {gap['req']}: {ends[0]}, {ends[1]}: the steps past the shorter "
                       "stream were never run by the other arm")
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
        if "tokens" not in instruments:
            # Drafts that could not have differed say nothing about the toggle: blind, not a
            # measured failure.
            reasons.append("but the compared drafts could not have differed: "
                           + _blind_reason(token_blind, audit_a, audit_b))
            return Verdict("uninformative", ExitCode.UNINFORMATIVE, expect, False, reasons,
                           instruments)
        return Verdict("agree", ExitCode.DIFFER, expect, False, reasons, instruments)

    if cmp.blocks_differing or logit_diff or emitted_diff or coverage_diff:
        return Verdict("differ", ExitCode.DIFFER, expect, False, reasons, instruments)
    if cmp.blocks_compared and instruments:
        if instruments == ["logits"]:
            reasons.append("the token comparison alone would have been blind ("
                           + (", ".join(token_blind) or "below the audit thresholds")
                           + "); the exact logit comparison could have failed and did not")
        else:
            reasons.append("the comparison could have failed through: " + ", ".join(instruments))
        return Verdict("agree", ExitCode.OK, expect, True, reasons, instruments)
    reasons.append("the arms agree, but the comparison could not have failed: "
                   + _blind_reason(token_blind, audit_a, audit_b))
    return Verdict("uninformative", ExitCode.UNINFORMATIVE, expect, False, reasons, instruments)


def _blind_reason(token_blind: list[str], audit_a: TraceAudit, audit_b: TraceAudit) -> str:
    """Which measures decided that the comparison was blind, in the audit's words."""
    parts = list(token_blind)
    for au in (audit_a, audit_b):
        parts += [r for r in au.logit_blind_reasons if r not in parts]
    return ", ".join(parts) if parts else "below the audit thresholds"
