"""Judging a run: `judge(plan, results)` returns every report the plan names, reading only what
`difftest.flow.run` left (nothing is run here). A compare plan gives its `ComparisonReport`, a
check plan its `CheckResult` (each comparison self-checked, judged, and probed where it asks
to be), a probe plan its `ProbeReport` (the baseline and each mutation scored), a noise plan
its `NoiseReport`. Each comparison is judged by `difftest.flow.evaluate.evaluate`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from difftest.analysis.audit import AuditThresholds
from difftest.analysis.floor import measure_floor
from difftest.analysis.sequential import fold
from difftest.analysis.verdict import arm_failed
from difftest.config import ComparisonSpec
from difftest.core.errors import ArmFailure, ExitCode, InternalError, raise_pending, worst
from difftest.core.kinds import DraftingKind, Expect, VerdictKind
from difftest.core.names import judged_against
from difftest.flow.evaluate import (ArmOutcome, ComparisonReport, Outcomes, evaluate,
                                    evaluate_sampled)
from difftest.flow.plan import Judged, Plan, PlanKind
from difftest.flow.run import RunResults
from difftest.flow.sequential_runs import SampledRun, SequentialRun
from difftest.flow.scoring import ProbeReport, score_probe
from difftest.flow.sweep import SweepReport
from difftest.numerics.noise import NoiseFloor


def self_differences(rep: ComparisonReport) -> list[str]:
    """What a comparison of one capture with itself found; anything at all is a bug."""
    c = rep.comparison
    if c is None:
        return []
    found = {"differing blocks": c.blocks_differing, "near-tie blocks": c.blocks_near_tie,
             "blocks with logit differences": c.blocks_logit_differing,
             "draft-length differences": c.draft_length_blocks,
             "emitted-stream divergences": len(c.divergences),
             "coverage gaps": len(c.coverage_gaps),
             "unmatched steps": c.unmatched_a + c.unmatched_b,
             "context-diverged steps": c.context_diverged}
    out = [f"{n} {what}" for what, n in found.items() if n]
    if c.max_abs_logit_diff:
        out.append(f"max |d| {c.max_abs_logit_diff:.3g}")
    if rep.verdict.kind in (VerdictKind.DIFFER, VerdictKind.INERT):
        out.append(f"verdict {rep.verdict.kind}")
    return out


def self_check(spec: ComparisonSpec, a: ArmOutcome, thresholds: AuditThresholds) -> None:
    """Arm A judged against its own capture through the whole analysis, bitwise: anything but
    zero differences is an internal error, and no verdict of this run could be trusted."""
    if a.trace is None:
        return
    s = replace(spec, name=judged_against(spec.name, "self"), arm_b=a.name).with_rules(
        expect=Expect.SAME, atol=0.0, rtol=0.0, near_tie=0.0, noise_runs=0, mutations=(),
        toggle=())
    found = self_differences(evaluate(s, a, a, thresholds))
    if found:
        raise InternalError(f"self-check of {spec.name}: {a.name} compared with its own capture "
                            f"{a.trace_path} found " + ", ".join(found) + "; this is a bug in "
                            "difftest, and no verdict of this run can be trusted")


@dataclass(frozen=True)
class CheckResult:
    config: Path
    run_dir: Path | None
    reports: tuple[ComparisonReport, ...]
    probes: Mapping[str, ProbeReport]
    started_at: str | None = None  # ISO 8601 UTC, when the gate started
    duration_s: float | None = None  # wall time of the whole gate, arms and analysis
    sweeps: tuple[SweepReport, ...] = ()  # with [check] sweep = true (difftest.flow.sweep)

    @property
    def exit_code(self) -> ExitCode:
        codes = [r.verdict.exit_code for r in self.reports]
        codes += [p.exit_code for p in self.probes.values()]
        codes += [s.exit_code for s in self.sweeps]
        return worst(codes)


@dataclass(frozen=True)
class NoiseReport:
    """`difftest noise`: one arm run N times, and its A/A floor (None when a run failed)."""

    arm: str
    runs: int
    run_dir: Path
    floor: NoiseFloor | None
    failures: tuple[ArmFailure, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.ARM_FAILED if self.failures else ExitCode.OK

    def to_json(self) -> dict[str, object]:
        return {"arm": self.arm, "runs": self.runs, "exit_code": int(self.exit_code),
                "run_dir": str(self.run_dir), "failures": [str(f) for f in self.failures],
                "noise": None if self.floor is None else self.floor.to_json()}


Judgement = ComparisonReport | CheckResult | ProbeReport | NoiseReport
J = TypeVar("J", ComparisonReport, CheckResult, ProbeReport, NoiseReport)


def judge(plan: Plan, results: RunResults) -> Judgement:
    """Every report the plan names, judged on what its run left."""
    outcomes = Outcomes(results.arms, plan.audit)
    if plan.kind is PlanKind.CHECK:
        return _check(plan, results, outcomes)
    if plan.kind is PlanKind.NOISE:
        return _noise(plan, results, outcomes)
    base = plan.judged[0]
    baseline = _comparison(base, outcomes, results.run_dir)
    if plan.kind is PlanKind.PROBE:
        return score_probe(plan, base, outcomes, results.run_dir, baseline)
    if isinstance(results.sequential, SampledRun):
        return _sampled_rounds(base, baseline, outcomes, results.sequential)
    return baseline if results.sequential is None else folded(baseline, results.sequential)


def judged(plan: Plan, results: RunResults, kind: type[J]) -> J:
    """`judge`, typed: the report a plan of a known kind gives."""
    report = judge(plan, results)
    raise_pending()  # a signal dropped while judging ends the run before its reports
    if not isinstance(report, kind):
        raise InternalError(f"a {plan.kind.value} plan was judged as a "
                            f"{type(report).__name__}, not a {kind.__name__}")
    return report


def _comparison(j: Judged, outcomes: Outcomes, run_dir: Path) -> ComparisonReport:
    a, b = outcomes.pair(j.spec)
    return evaluate(j.spec, a, b, outcomes.thresholds, run_dir, outcomes.reruns(j.spec),
                    j.evidence, mutated=j.mutation is not None)


def _sampled_rounds(j: Judged, first: ComparisonReport, outcomes: Outcomes, rounds: SampledRun
                    ) -> ComparisonReport:
    """A sampled comparison run until decided: judged on every run of each arm, the rounds'
    record in its reasons (the first run's report when a round's arm failed: the failure is
    the verdict)."""
    if rounds.failures:
        return replace(first, verdict=arm_failed(list(rounds.failures), j.spec.rules.expect))
    a, b = outcomes.pair(j.spec)
    runs_a = [a, *outcomes.reruns(j.spec), *(outcomes.of(n) for n, _ in rounds.rounds)]
    runs_b = [b, *(outcomes.of(n) for _, n in rounds.rounds)]
    report = evaluate_sampled(j.spec, runs_a, runs_b, outcomes.thresholds, first.run_dir,
                              j.evidence)
    return replace(report, verdict=report.verdict.with_reasons(rounds.reasons()))


def folded(first: ComparisonReport, rounds: SequentialRun) -> ComparisonReport:
    """The first run's report with the sequential decision folded into its verdict (and
    recorded in `sequential`)."""
    if rounds.failures:
        return replace(first, verdict=arm_failed(list(rounds.failures), first.spec.rules.expect))
    assert rounds.result is not None
    return replace(first, verdict=fold(first.verdict, rounds.result), sequential=rounds.result)


def _check(plan: Plan, results: RunResults, outcomes: Outcomes) -> CheckResult:
    """Every comparison self-checked, judged, and probed where it asks to be (a `probe` list,
    or `expect = "differ"`, whose built-in probe replaces B by A)."""
    reports: list[ComparisonReport] = []
    probe_reports: dict[str, ProbeReport] = {}
    for base in plan.bases():
        s = base.spec
        self_check(s, outcomes.of(s.arm_a), plan.audit)
        rep = _comparison(base, outcomes, results.run_dir)
        reports.append(rep)
        if plan.probes and (s.rules.mutations or s.rules.expect is Expect.DIFFER):
            probe_reports[s.name] = score_probe(plan, base, outcomes, results.run_dir, rep)
    took = None if results.started is None else time.monotonic() - results.started
    assert plan.config is not None
    return CheckResult(plan.config, results.run_dir, tuple(reports), probe_reports,
                       results.started_at, took)


def _noise(plan: Plan, results: RunResults, outcomes: Outcomes) -> NoiseReport:
    """The arm's A/A noise floor over all its runs, under the drafting rules the traces declare
    (one kind, else block); no floor when a run failed."""
    assert plan.noise is not None
    arm, runs = plan.noise
    outs = [outcomes.of(a.name) for a in plan.arms]
    failures = tuple(o.failure for o in outs if o.failure is not None)
    if failures:
        return NoiseReport(arm, runs, results.run_dir, None, failures)
    traces = [o.trace for o in outs if o.trace is not None]
    declared = {t.drafting for t in traces if t.drafting is not None}
    drafting = declared.pop() if len(declared) == 1 else DraftingKind.BLOCK
    return NoiseReport(arm, runs, results.run_dir, measure_floor(arm, traces, drafting))
