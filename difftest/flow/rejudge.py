"""Judging a past run again (`difftest export`), possibly under other rules: nothing is re-run.
Whatever kind of run it was (compare, check, probe, noise), its meta.json record names the
comparison; that comparison becomes a plan of one, judged by `difftest.flow.judge` like any.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Unpack

from difftest.analysis.audit import AuditThresholds
from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.core.errors import ArmFailure, UsageError
from difftest.core.limits import MAX_SEQUENTIAL_RUNS
from difftest.core.kinds import DecodingMode, VerdictKind
from difftest.config import ComparisonSpec
from difftest.execute import load_run
from difftest.flow.evaluate import ComparisonReport, Outcomes, one_capture
from difftest.flow.judge import judged
from difftest.core.names import ROUND, round_name
from difftest.flow.plan import Judged, Plan, PlanKind, read_run
from difftest.flow.overrides import OverrideKeywords, Overrides
from difftest.flow.run import RunResults
from difftest.flow.sequential_runs import SampledRounds, SampledRun


def rejudge_run(run_dir: Path, *, comparison: str | None = None,
                overrides: Overrides | None = None, thresholds: AuditThresholds | None = None,
                **keywords: Unpack[OverrideKeywords]) -> ComparisonReport:
    """Judge a past run again, possibly with other thresholds; nothing is re-run. A run of
    several comparisons (`check`, `probe`, `noise`) needs `comparison`: one of its names, or
    `NAME/MUTATION` for a probed mutation."""
    results, meta = load_run(run_dir)
    recorded = read_run(Path(run_dir), meta, list(results))
    where = recorded.where
    spec, evidence = recorded.pick(comparison)
    spec = Overrides.of(keywords, overrides).on(spec)
    if thresholds is None:
        thresholds = recorded.audit
    for name in (spec.arm_a, spec.arm_b):
        if name not in results:
            raise UsageError(f"{run_dir}: no arm {name!r} in meta.json")
    # two runs of one arm are two captures (a determinism check runs the arm twice under two
    # names); one run named twice is one capture compared with itself
    same = ("the comparison names it as both arms" if spec.arm_a == spec.arm_b else
            one_capture(results[spec.arm_a].stderr_path, results[spec.arm_b].stderr_path,
                        by_content=False))
    if same is not None:
        raise UsageError(f"{where}: arm {spec.arm_a!r} and arm {spec.arm_b!r} are one capture "
                         f"compared with itself ({same}); it would agree whatever the engine "
                         "did")
    plan = Plan(PlanKind.COMPARE, Path(run_dir).name, (), (recorded.judged(spec, evidence),),
                thresholds)
    rounds = sequential_rounds(results, spec)
    if rounds is not None and spec.rules.decoding is DecodingMode.SAMPLED:
        replayed = replay_sampled(Outcomes(results, thresholds), plan.judged[0], rounds)
        report = judged(plan, RunResults(Path(run_dir), results, sequential=replayed),
                        ComparisonReport)
        stopped = _stopped(meta)
        if stopped is None or replayed is None:
            return report
        return replace(report, verdict=report.verdict.with_reasons([
            f"this run was sequential (--until-decided) and was {stopped} in round {rounds}: "
            "judged on the rounds it completed (the distribution test is valid at any "
            "stopping time)"]))
    report = judged(plan, RunResults(Path(run_dir), results), ComparisonReport)
    return report if rounds is None else _unjudged_sequential(
        report, rounds, stopped=_stopped(meta))


def replay_sampled(outcomes: Outcomes, j: Judged, rounds: int) -> SampledRun | None:
    """A sampled `--until-decided` run's rounds taken again in order, as the run took them
    (`SampledRounds`: the distribution test is valid at any stopping time, so a run stopped
    early is judged on the rounds it completed); None where an arm of the first run failed."""
    spec = j.spec
    a, b = outcomes.pair(spec)
    reruns = outcomes.reruns(spec)
    if any(o.trace is None for o in (a, b, *reruns)):
        return None
    test = SampledRounds(rounds, [a, *reruns], b)
    failures: tuple[ArmFailure, ...] = ()
    while (r := test.next_round) is not None:
        names = (round_name(spec.arm_a, r), round_name(spec.arm_b, r))
        if any(n not in outcomes.results or outcomes.results[n].interrupted for n in names):
            break  # a round the run did not complete: judged on the rounds before it
        more = [outcomes.of(n) for n in names]
        if any(o.trace is None for o in more):
            failures = tuple(o.failure for o in more if o.failure is not None)
            break
        test.add(*more)
    result = replace(test.result(), max_runs=None, failures=failures)
    _no_round_past(outcomes, spec, len(result.rounds) + 2)
    return result


def _no_round_past(outcomes: Outcomes, spec: ComparisonSpec, last: int) -> None:
    """Refuse a record holding rounds after `last`, the round the replay ended at: a run takes
    its rounds one after another and stops where the replay stops, so a later round is a
    record edited or damaged, and judging around it could agree where the run did not."""
    later = sorted(k for k in range(last + 1, MAX_SEQUENTIAL_RUNS + 1)
                   if any(round_name(arm, k) in outcomes.results
                          for arm in (spec.arm_a, spec.arm_b)))
    if later:
        raise UsageError(f"meta.json records round(s) {', '.join(map(str, later))} of "
                         f"--until-decided after round {last}, where taking the rounds again "
                         "ends: a run never runs past that, so the record was edited or "
                         "damaged; it is not judged")


def _stopped(meta: Mapping[str, object]) -> str | None:
    """How a run that did not end `done` ended (interrupted, terminated, ...), in words."""
    status = meta.get("status", "done")
    return None if status == "done" else str(status)


def sequential_rounds(names: Mapping[str, object], spec: ComparisonSpec) -> int | None:
    """How many rounds an `--until-decided` run of `spec` holds (its `ARM#seqN` arms), or None
    where it was not such a run."""
    rounds = [int(n.rsplit(ROUND, 1)[1]) for n in names
              if ROUND in n and n.rsplit(ROUND, 1)[0] in (spec.arm_a, spec.arm_b)
              and n.rsplit(ROUND, 1)[1].isdigit()]
    return max(rounds) if rounds else None


def _unjudged_sequential(report: ComparisonReport, rounds: int, *,
                         stopped: str | None = None) -> ComparisonReport:
    """A re-judged `--until-decided` run: what was judged is its first round alone, without
    the sequential test that gated it, so an agreement is not this judgement's to give (nor,
    from a run stopped before the test decided, any decision of the test's)."""
    verdict = report.verdict
    if verdict.kind is VerdictKind.ARM_FAILED:
        return report
    if stopped is not None:
        why = (f"this run was sequential (--until-decided) and was {stopped} in round {rounds}, "
               "before the sequential test decided: re-judging takes its first round alone "
               "and gives no agreement; the run has no decision of its own")
    else:
        why = (f"this run was sequential (--until-decided, {rounds} round(s) of each arm): "
               "re-judging takes its first round alone and does not re-run the sequential test "
               "that gated it, so it gives no agreement; the run's own decision is the "
               "`sequential` entry of its report.json")
    found = VerdictFinding(Origin.REJUDGE, Demand.NO_AGREEMENT, (why,))
    return replace(report, verdict=verdict.joined(found, last=found.reasons))
