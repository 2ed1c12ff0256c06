"""Mutation scoring: a probe runs arm B broken on purpose against arm A, and a comparison that
stays green under a known-wrong arm is blind to that kind of change. Each mutation is scored
killed, survived or not applied (it never reached the runner); the probe says so instead of
letting the gate claim a coverage it does not have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from difftest.config import ComparisonSpec
from difftest.core.errors import ExitCode
from difftest.core.kinds import DecodingMode, Expect, KilledBy, ProbeResult, VerdictKind
from difftest.core.model import same_drafts
from difftest.core.names import judged_against, rerun_as
from difftest.analysis.logit_instrument import blind_radius
from difftest.flow.evaluate import ArmOutcome, ComparisonReport, Outcomes, evaluate
from difftest.flow.plan import Evidence, Judged, Plan

# The built-in probe of an `expect = "differ"` comparison: arm B replaced by arm A. A gate that
# stays green when both sides are one arm cannot tell the toggle from no toggle.
INERT_PROBE = "arm-b-as-a"

@dataclass(frozen=True)
class MutationResult:
    name: str
    killed: bool
    killed_by: KilledBy | None  # None when it survived
    measures: tuple[KilledBy, ...]
    blocks_differing: int
    blocks_logit_differing: int
    report: ComparisonReport
    applied: bool = True  # False: the mutated arm printed exactly what the baseline printed

    @property
    def result(self) -> ProbeResult:
        """The label every report shows for this mutation."""
        if not self.applied:
            return ProbeResult.NOT_APPLIED
        return ProbeResult.KILLED if self.killed else ProbeResult.SURVIVED


@dataclass(frozen=True)
class ProbeReport:
    comparison: str
    arm_a: str
    arm_b: str
    baseline: ComparisonReport
    mutations: tuple[MutationResult, ...]
    notes: tuple[str, ...] = ()

    @property
    def run_dir(self) -> Path | None:
        return self.baseline.run_dir

    @property
    def applied(self) -> list[MutationResult]:
        """The mutations that reached the runner: only these are scored."""
        return [m for m in self.mutations if m.applied]

    @property
    def not_applied(self) -> list[str]:
        return [m.name for m in self.mutations if not m.applied]

    @property
    def mutation_score(self) -> float:
        scored = self.applied
        return sum(m.killed for m in scored) / len(scored) if scored else 0.0

    @property
    def survivors(self) -> list[str]:
        return [m.name for m in self.applied if not m.killed]

    @property
    def failed_arms(self) -> list[str]:
        return [m.name for m in self.mutations
                if m.report.verdict.kind is VerdictKind.ARM_FAILED]

    @property
    def exit_code(self) -> ExitCode:
        if self.baseline.verdict.exit_code == ExitCode.ARM_FAILED or self.failed_arms:
            return ExitCode.ARM_FAILED
        if not self.baseline.verdict.passed:
            # the comparison already fails without any mutation: its sensitivity is unmeasured
            return self.baseline.verdict.exit_code
        if self.not_applied:
            return ExitCode.USAGE
        if not self.mutations or self.survivors:
            return ExitCode.UNINFORMATIVE
        return ExitCode.OK


def _measures(report: ComparisonReport) -> list[KilledBy]:
    c = report.comparison
    if report.verdict.kind is VerdictKind.ARM_FAILED:
        return [KilledBy.ARM_FAILED]
    if c is None:
        # a sampled comparison is judged on the law of the emitted stream, not token for
        # token, and on each verify's acceptance against its own traced p and q
        found = report.sampled
        if (report.spec.rules.decoding is not DecodingMode.SAMPLED or found is None
                or report.verdict.kind is not VerdictKind.DIFFER):
            return []
        accepted = any(r.flagged or r.impossible for rows in found.acceptance.values()
                       for r in rows)
        if accepted and not found.test.differ:
            return [KilledBy.ACCEPTANCE]
        return [KilledBy.EMITTED, KilledBy.ACCEPTANCE] if accepted else [KilledBy.EMITTED]
    out = []
    if c.blocks_differing:
        out.append(KilledBy.TOKENS)
    if c.blocks_logit_differing:
        out.append(KilledBy.LOGITS)
    if c.divergences:
        out.append(KilledBy.EMITTED)
    return out


def _killed(rep: ComparisonReport) -> bool:
    """Did the comparison go red because of what the mutated arm drafted?"""
    v = rep.verdict
    if v.kind is VerdictKind.ARM_FAILED:
        return False
    if rep.spec.rules.expect is Expect.SAME:
        return v.kind is VerdictKind.DIFFER
    return not v.passed  # a `differ` comparison is caught when the difference disappears


def _inert_probe(spec: ComparisonSpec, baseline: ComparisonReport, outcomes: Outcomes,
                 run_dir: Path, evidence: Evidence) -> MutationResult:
    """Arm B replaced by arm A's own capture (nothing is run): the comparison must go red."""
    a = baseline.arm_a
    b = replace(a, name=rerun_as(spec.arm_a, spec.arm_b))
    mspec = replace(spec, name=judged_against(spec.name, INERT_PROBE), arm_b=b.name)
    rep = evaluate(mspec, a, b, outcomes.thresholds, run_dir, outcomes.reruns(spec), evidence)
    killed = _killed(rep)
    c = rep.comparison
    return MutationResult(name=INERT_PROBE, killed=killed,
                          killed_by=KilledBy.EXPECTATION if killed else None,
                          measures=(KilledBy.EXPECTATION,),
                          blocks_differing=c.blocks_differing if c else 0,
                          blocks_logit_differing=c.blocks_logit_differing if c else 0, report=rep)


def _three_figures(x: float) -> str:
    """A ratio to three significant figures (its inputs carry no more), with thousands marked."""
    if x <= 0 or not math.isfinite(x):
        return f"{x:g}"
    digits = 2 - math.floor(math.log10(x))
    rounded = round(x, digits)
    return f"{rounded:,.{max(digits, 0)}f}"


def detection_margins(baseline: ComparisonReport, mutations: Sequence[MutationResult]) -> list[str]:
    """Per instrument, how far above its blind radius the weakest caught mutation was: how much
    room a green has before a wrong change of that size would slip through."""
    if not baseline.verdict.passed or baseline.comparison is None:
        return []
    radius = blind_radius(baseline.comparison)
    out: list[str] = []
    for instrument, r, what in (("logits", radius.logits, "logit radius"),
                                ("tokens", radius.tokens, "token radius (smallest margin / 2)")):
        caught = [(m.report.comparison.max_abs_logit_diff, m.name) for m in mutations
                  if m.applied and m.killed and instrument in m.measures
                  and m.report.comparison is not None]
        sized = [(d, n) for d, n in caught if d is not None and d == d]
        if not caught:
            continue
        if not sized or r is None:
            names = ", ".join(sorted(n for _, n in caught))
            out.append(f"detection margin, {instrument}: caught {names} (no logit size "
                       "traced to set against the radius)")
            continue
        size, name = min(sized)
        ratio = (f"{_three_figures(size / r)}x the {what} ({r:.3g})" if r > 0 else
                 f"above a {what} of 0 (any change shows)")
        out.append(f"detection margin, {instrument}: the weakest caught mutation, {name}, "
                   f"moved the logits by max |d| {size:.3g}, {ratio}")
    return out


def score_probe(plan: Plan, base: Judged, outcomes: Outcomes, run_dir: Path,
                baseline: ComparisonReport) -> ProbeReport:
    """The probe of a judged comparison: its baseline report, then each mutated arm B the plan
    ran judged against arm A and scored (and, for an `expect = "differ"` comparison, the
    built-in probe: B replaced by A)."""
    spec, thresholds, evidence = base.spec, plan.audit, base.evidence
    notes = []
    if spec.rules.expect is not Expect.SAME:
        notes.append(f"{spec.name} expects its arms to differ: a mutation is caught when the "
                     f"comparison stops seeing the difference it expects; the built-in probe "
                     f"{INERT_PROBE} judges {spec.arm_a} against itself in {spec.arm_b}'s place")
    out: list[MutationResult] = []
    if spec.rules.expect is Expect.DIFFER and baseline.comparison is not None:
        out.append(_inert_probe(spec, baseline, outcomes, run_dir, evidence))
    for m in plan.mutations_of(base):
        name, mspec = m.mutation or "", m.spec
        a, b = outcomes.pair(mspec)
        rep = evaluate(mspec, a, b, thresholds, run_dir, outcomes.reruns(spec), m.evidence,
                       mutated=True)
        if _not_applied(baseline, b):
            notes.append(_not_applied_note(name, spec.arm_b, baseline))
            out.append(MutationResult(name=name, killed=False, killed_by=None, measures=(),
                                      blocks_differing=0, blocks_logit_differing=0, report=rep,
                                      applied=False))
            continue
        measures = _measures(rep)
        killed = _killed(rep)
        if killed and spec.rules.expect is not Expect.SAME:
            measures = [KilledBy.EXPECTATION]  # caught because the expected difference went away
        c = rep.comparison
        out.append(MutationResult(
            name=name, killed=killed, killed_by=measures[0] if killed else None,
            measures=tuple(measures), blocks_differing=c.blocks_differing if c else 0,
            blocks_logit_differing=c.blocks_logit_differing if c else 0, report=rep))
    notes += detection_margins(baseline, out)
    return ProbeReport(spec.name, spec.arm_a, spec.arm_b, baseline, tuple(out), tuple(notes))


def _not_applied(baseline: ComparisonReport, mutated: ArmOutcome) -> bool:
    """A mutated arm that printed exactly what the unmutated arm printed, on a comparison that
    could have failed: the mutation never reached the runner (a runner that ignores
    DIFFTEST_MUTATION, a config without that mutation). On a blind comparison an identical trace
    is what any mutation would show, so that stays a survivor of a blind comparison."""
    base = baseline.arm_b.trace
    if base is None or mutated.trace is None or mutated.failure is not None:
        return False
    return bool(baseline.verdict.instruments) and same_drafts(base, mutated.trace)


def _not_applied_note(name: str, arm_b: str, baseline: ComparisonReport) -> str:
    logits = ", logits" if baseline.comparison and baseline.comparison.logit_rows_compared else ""
    return (f"mutation {name}: the mutated arm printed exactly what {arm_b} printed (drafts, "
            f"emitted tokens{logits}): the mutation does not reach the runner (does it read "
            "DIFFTEST_MUTATION, or the mutation's env and args?); it is not scored")
