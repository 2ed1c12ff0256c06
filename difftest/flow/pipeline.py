"""The analysis behind `compare`, `check`, `probe` and `export`: arms -> trace -> align ->
compare/audit -> verdict. Nothing here writes a report: `difftest.api` does, after.

Raw captures and meta.json are written by `execute` before anything here reads them; analysis
results are added afterwards, so a crash in analysis loses nothing that was captured.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Unpack

from difftest.analysis.acceptance import AcceptanceReport, combine
from difftest.analysis.acceptance import measure as measure_acceptance
from difftest.analysis.audit import AuditThresholds, TraceAudit, audit_trace
from difftest.analysis.compare import Comparison, DraftingSource, compare
from difftest.config import ArmSpec, ComparisonSpec, Config
from difftest.core.errors import ArmFailure, DifftestError, ExitCode, InterruptedRun, UsageError
from difftest.execute import (META_NAME, ArmResult, JobLimits, load_run, new_run_dir, run_arms,
                              signal_of, write_json_atomic)
from difftest.analysis.floor import measure_floor, rerun_name
from difftest.core.kinds import DraftingKind, Expect, VerdictKind
from difftest.core.model import ArmTrace
from difftest.numerics.noise import NoiseFloor
from difftest.analysis.rates import RateInstruments, rate_instruments
from difftest.analysis.sequential import SequentialResult
from difftest.trace import NoTraceLines, parse_trace, require_trace_lines
from difftest.analysis.verdict import Verdict, arm_failed, judge
from difftest.analysis import quantity
from difftest.flow.switch import Side, check_switch
from difftest.trace.align import align
from difftest.core.force import (FORCE_ENV, FORCE_NAME, ForceCheck, check_forced, committed_stream,
                            explain_forced, write_force_file)
from difftest.analysis.threshold_notes import threshold_notes
from difftest.flow.plan import Evidence as Evidence  # re-exported: the type reports name
from difftest.flow.plan import Plan, RunOptions, plan_compare, plan_noise, read_run
from difftest.flow.plan import self_pair as self_pair  # re-exported for callers of the old home
from difftest.flow.rules import OVERRIDES, OverrideKeywords, Overrides
from difftest.core.thresholds import (Source, ThresholdError, ToleranceMode, arm_dtype, credited,
                                 resolve_tolerance)


@dataclass(frozen=True)
class ArmOutcome:
    """One arm as the comparison saw it: its run (if difftest ran it), trace and audit, or why
    it produced nothing to compare."""

    name: str
    trace_path: Path
    result: ArmResult | None = None
    trace: ArmTrace | None = None
    audit: TraceAudit | None = None
    failure: ArmFailure | None = None


@dataclass(frozen=True)
class ComparisonReport:
    name: str
    spec: ComparisonSpec
    arm_a: ArmOutcome
    arm_b: ArmOutcome
    comparison: Comparison | None
    verdict: Verdict
    thresholds: AuditThresholds
    run_dir: Path | None = None
    # under teacher forcing: whether B committed A's stream, and each arm's acceptance on it
    forcing: ForceCheck | None = None
    acceptance: AcceptanceReport | None = None  # None: an arm failed, or no drafted verify
    rates: RateInstruments | None = None  # None: an arm failed
    sequential: SequentialResult | None = None  # under --until-decided: every look, the decision

    @property
    def exit_code(self) -> ExitCode:
        return self.verdict.exit_code


def thresholds_of(config: Config | None) -> AuditThresholds:
    return AuditThresholds() if config is None else config.audit



def with_overrides(spec: ComparisonSpec, *, where: str = OVERRIDES,
                   **keywords: Unpack[OverrideKeywords]) -> ComparisonSpec:
    """The spec with overrides applied (None leaves a value alone): `Overrides.apply`, the one
    check of an override, whether it came from the command line or from an API caller."""
    return Overrides.of(keywords).apply(spec, where)


def _outcome(name: str, trace_path: Path, result: ArmResult | None,
             thresholds: AuditThresholds, line_prefix: str | None = None) -> ArmOutcome:
    if result is not None:
        error = result.failure()
        if error is not None:
            return ArmOutcome(name, trace_path, result, failure=error.failure)
    # a captured trace given by the user must hold trace lines (bad input otherwise); an arm
    # that printed none failed, with the same hint
    trace = parse_trace(trace_path, require_lines=result is None,
                        line_prefix=result.line_prefix if result is not None else line_prefix)
    return ArmOutcome(name, trace_path, result, trace, audit_trace(trace, thresholds),
                      _health_failure(name, trace))


def _health_failure(name: str, trace: ArmTrace) -> ArmFailure | None:
    """An arm whose own trace says it failed: an engine error line, or a cut-off stream."""
    if trace.engine_errors:
        first = trace.engine_errors[0]
        more = f" (and {len(trace.engine_errors) - 1} more)" if len(trace.engine_errors) > 1 else ""
        return ArmFailure(name, f"the engine reported an error at {first.path}:{first.line}: "
                                    f"{first.message}{more}")
    cut = next((f for f in trace.findings if f.kind == "truncated"), None)
    if cut is not None:
        return ArmFailure(name, f"its trace is cut off mid-line at {cut.path}:{cut.line} "
                                    "(was the runner killed?)")
    try:
        require_trace_lines(trace)
    except NoTraceLines as exc:
        return ArmFailure(name, f"it printed {exc}")
    return None


def evaluate(spec: ComparisonSpec, a: ArmOutcome, b: ArmOutcome,
             thresholds: AuditThresholds, run_dir: Path | None = None,
             reruns_of_a: Sequence[ArmOutcome] = (),
             evidence: Evidence = ((), ())) -> ComparisonReport:
    """Judge two arms whose traces are parsed (or whose failures are known). With reruns of
    arm A, B is judged against A's A/A noise floor. The traces must show the same quantity and
    the switch engaged (`toggle`, each arm's `evidence`), or the verdict says they do not."""
    failures = [o.failure for o in (a, b, *reruns_of_a) if o.failure is not None]
    if failures:
        return ComparisonReport(spec.name, spec, a, b, None, arm_failed(failures, spec.expect),
                                thresholds, run_dir)
    assert a.trace is not None and b.trace is not None and a.audit and b.audit
    drafting, source = drafting_of(spec, a, b, *reruns_of_a)
    floor = None
    if reruns_of_a:
        traces = [a.trace, *(o.trace for o in reruns_of_a if o.trace is not None)]
        floor = measure_floor(a.name, traces, drafting)
    forcing = (check_forced((a.name, b.name), a.trace, b.trace, b.trace_path)
               if spec.teacher_force else None)
    if forcing is not None and forcing.honoured:
        b = replace(b, trace=explain_forced(b.trace, forcing.forced))
        if b.trace is not None and b.trace.config.values.get("forced_drafts") == "1":
            # B drafted along A's drafted tokens: each row of either arm ran on A's tokens
            # before it, so rows after an in-block flip are compared like a block's
            drafting, source = DraftingKind.BLOCK, DraftingSource.FORCED_ALONG
    assert b.trace is not None and b.audit is not None
    alignment = align(a.trace, b.trace, forced=forcing is not None and forcing.honoured)
    atol, rtol, said = tolerance_of(spec, a, b)
    cmp = compare(a.trace, b.trace, near_tie=spec.near_tie, atol=atol, rtol=rtol,
                  floor=floor, drafting=drafting, drafting_source=source, alignment=alignment)
    verdict = judge(cmp, a.audit, b.audit, names=(a.name, b.name), expect=spec.expect,
                    min_differing=spec.min_differing, thresholds=thresholds)
    verdict = verdict.with_reasons([*said, *threshold_notes(cmp, floor)])
    verdict = verdict.with_reasons([f"{o.name}: {n.text}" for o, t in ((a, a.trace), (b, b.trace))
                                    for n in t.notices])
    acc = measure_acceptance(a.trace, b.trace, (a.name, b.name), spec.acceptance)
    verdict = combine(verdict, acc, spec.acceptance)
    rates = rate_instruments(cmp)
    verdict = verdict.with_reasons(rates.clustering_reasons())
    verdict = _same_quantity_and_switch(verdict, spec, a, b, evidence)
    if forcing is not None:
        verdict = _teacher_forced(verdict, forcing, (a.name, b.name))
    mde = rates.mde_sentence(verdict.instruments)
    if mde is not None and verdict.kind is VerdictKind.AGREE:
        verdict = verdict.with_reasons([mde])
    return ComparisonReport(spec.name, spec, a, b, cmp, verdict, thresholds, run_dir, forcing,
                            acc, rates)


def _teacher_forced(verdict: Verdict, forcing: ForceCheck, names: tuple[str, str]) -> Verdict:
    """A B that did not replay A's stream ran on its own contexts: its drafts are not the
    teacher-forced comparison asked for, so nothing is judged (uninformative, reasons first)."""
    if forcing.honoured:
        def acc(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"
        return verdict.with_reasons([
            f"teacher-forced: {names[1]} committed {names[0]}'s stream at all {forcing.steps} "
            f"steps; mean accepted drafts per step {names[0]} {acc(forcing.acceptance_a)}, "
            f"{names[1]} (would have) {acc(forcing.acceptance_b)}"])
    if verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    last = (f"verdict {VerdictKind.UNINFORMATIVE.value}, not {verdict.kind.value}: teacher "
            f"forcing was asked for and {names[1]} did not follow it (see the first reasons)")
    return replace(verdict, kind=VerdictKind.UNINFORMATIVE,
                   reasons=(*forcing.reasons, *verdict.reasons, last))


def _same_quantity_and_switch(verdict: Verdict, spec: ComparisonSpec, a: ArmOutcome,
                              b: ArmOutcome, evidence: Evidence) -> Verdict:
    """The checks that come before any judging of what was compared: both arms traced the same
    quantity, and the switch the comparison is about engaged. Their reasons go first."""
    if verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    assert a.trace is not None and b.trace is not None
    kind: VerdictKind = verdict.kind
    first: list[str] = []
    mismatched = quantity.mismatches(a.trace, b.trace, (a.name, b.name))
    if mismatched:
        kind = quantity.judged(kind)
        first += mismatched
    switch = check_switch(spec.toggle,
                          Side(a.name, a.trace, a.trace_path, a.result, evidence[0]),
                          Side(b.name, b.trace, b.trace_path, b.result, evidence[1]))
    if switch.kind is VerdictKind.INERT:
        kind = switch.kind
    elif switch.kind is not None and not (kind is VerdictKind.DIFFER
                                          and spec.expect is Expect.SAME):
        # nothing shows the switch engaged: no pass may rest on it (a difference found under
        # `same` is a difference whatever the arms ran, and stands)
        kind = switch.kind
    first += switch.reasons
    last: list[str] = []
    if kind is not verdict.kind:
        last.append(f"verdict {kind.value}, not {verdict.kind.value}: what the drafts show does "
                    "not bear on this comparison's claim (see the first reasons)")
    return replace(verdict, kind=kind, reasons=(*first, *verdict.reasons, *last))


def tolerance_of(spec: ComparisonSpec, a: ArmOutcome, b: ArmOutcome
                 ) -> tuple[float, float, list[str]]:
    """atol, rtol and the sentence saying where they came from (none for bitwise as
    configured, the default)."""
    assert a.trace is not None and b.trace is not None
    arms = tuple(arm_dtype(o.name, d, dict(t.config.values), dict(t.config.lines),
                           str(o.trace_path))
                 for o, t, d in ((a, a.trace, spec.arm_dtypes[0]), (b, b.trace, spec.arm_dtypes[1])))
    over = set(spec.overridden)
    try:
        source = (None if {"atol", "rtol"} <= over else
                  resolve_tolerance(spec.tolerance, spec.atol, spec.rtol, (arms[0], arms[1]),
                                    (a.name, b.name)))
    except ThresholdError as exc:
        raise UsageError(f"comparison {spec.name}: {exc}") from None
    if spec.thresholds and not spec.threshold_origin:
        raise UsageError(f"comparison {spec.name}: its thresholds file {spec.thresholds} does "
                         f"not exist yet; run `difftest calibrate -c {spec.name}` first")
    if spec.threshold_origin:
        base = Source(spec.atol, spec.rtol, spec.threshold_origin)
    elif source is not None:
        base = source
    else:
        base = Source(spec.atol, spec.rtol, "the comparison's atol/rtol")
    atol = spec.atol if "atol" in over else base.atol
    rtol = spec.rtol if "rtol" in over else base.rtol
    near = (("near_tie", spec.near_tie),) if spec.threshold_origin or "near_tie" in over else ()
    values = [("atol", atol), ("rtol", rtol), *near]
    if (spec.tolerance is ToleranceMode.GIVEN and not spec.threshold_origin
            and not (atol or rtol)):
        return atol, rtol, []  # bitwise, the default: nothing to say
    return atol, rtol, [credited([(k, v, OVERRIDES if k in over else base.origin)
                                  for k, v in values if v is not None])]


def drafting_of(spec: ComparisonSpec, a: ArmOutcome, b: ArmOutcome,
                *reruns: ArmOutcome) -> tuple[DraftingKind, DraftingSource]:
    """How the arms draft, and who said so: the comparison (config or --drafting) over the
    traces' `[spec-drafting]` headers (of the arms and of A's reruns, which the floor is
    measured on), over the default (block)."""
    if spec.drafting is not None:
        return spec.drafting, DraftingSource.COMPARISON
    declared = {o.name: o.trace.drafting for o in (a, b, *reruns)
                if o.trace is not None and o.trace.drafting is not None}
    kinds = set(declared.values())
    if len(kinds) > 1:
        said = ", ".join(f"{name} declares {kind.value}" for name, kind in declared.items())
        raise UsageError(f"comparison {spec.name}: the traces disagree on how the engine drafts "
                         f"({said}); set drafting in the comparison or pass --drafting")
    if kinds:
        return kinds.pop(), DraftingSource.TRACES
    return DraftingKind.BLOCK, DraftingSource.DEFAULT


def _digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.digest()


def one_capture(path_a: Path, path_b: Path, *, by_content: bool) -> str | None:
    """Why two paths name one capture (the same file, through a link or not; with
    `by_content`, byte-identical files), or None. A capture compared with itself agrees
    whatever the engine did: such a comparison could not have failed."""
    try:
        if os.path.samefile(path_a, path_b):
            return "they are the same file"
        if by_content and os.path.getsize(path_a) == os.path.getsize(path_b) \
                and _digest(path_a) == _digest(path_b):
            return "the files are byte-identical (one capture, copied)"
    except OSError:
        return None  # the parser names a missing or unreadable file
    return None


def judge_traces(trace_a: Path, trace_b: Path, spec: ComparisonSpec,
                 thresholds: AuditThresholds | None = None,
                 evidence: Evidence = ((), ()),
                 line_prefix: str | None = None) -> ComparisonReport:
    """Compare two captured traces; nothing is run. Refused when both name one capture.
    `line_prefix`: a prefix pattern both traces' lines carry besides the known ones."""
    same = one_capture(Path(trace_a), Path(trace_b), by_content=True)
    if same is not None:
        raise UsageError(f"{trace_a} and {trace_b}: one capture compared with itself ({same}); "
                         "it would agree whatever the engine did. Compare two runs")
    th = thresholds or AuditThresholds()
    a = _outcome(spec.arm_a, Path(trace_a), None, th, line_prefix)
    b = _outcome(spec.arm_b, Path(trace_b), None, th, line_prefix)
    report = evaluate(spec, a, b, th, evidence=evidence)
    if spec.noise_runs:
        note = (f"noise_runs = {spec.noise_runs} not applied: a noise floor needs runs of "
                f"{spec.arm_a}, and two traces were given (judged without a floor)")
        report = replace(report, verdict=report.verdict.with_reasons([note]))
    return report


def run_arm_set(arms: Sequence[ArmSpec], *, run_root: Path | None = None, label: str = "",
                progress: bool | None = None, extra_meta: Mapping[str, object] | None = None,
                cache_dir: Path | None = None, limits: JobLimits | None = None,
                record: Mapping[str, object] | None = None) -> tuple[Path, dict[str, ArmResult]]:
    """Run arms concurrently (up to `limits`) into a fresh run directory; `record`: the
    run's plan record (difftest.flow.plan)."""
    run_dir = new_run_dir(run_root, label=label)
    try:
        results = run_arms(arms, run_dir, progress=progress, extra_meta=extra_meta,
                           cache_dir=cache_dir, limits=limits, plan=record)
    except KeyboardInterrupt as exc:
        raise InterruptedRun(run_dir, signal_of(exc)) from None
    return run_dir, results


def outcomes_from_run(results: Mapping[str, ArmResult], names: tuple[str, str],
                      thresholds: AuditThresholds) -> tuple[ArmOutcome, ArmOutcome]:
    a, b = (results[n] for n in names)
    return (_outcome(names[0], a.stderr_path, a, thresholds),
            _outcome(names[1], b.stderr_path, b, thresholds))


def run_plan(plan: Plan, options: RunOptions | None = None,
             limits: JobLimits | None = None) -> tuple[Path, dict[str, ArmResult]]:
    """Run every arm of a plan once into a fresh run directory, its record in meta.json. The
    checkout cache: the options', else the config's [defaults] cache."""
    options = options or RunOptions()
    cache = options.cache or plan.cache
    if plan.teacher_force:
        return run_forced(plan, options, cache)
    return run_arm_set(plan.arms, run_root=options.run_root, label=plan.label,
                       progress=options.progress, extra_meta=plan.meta(), cache_dir=cache,
                       limits=limits, record=plan.record())


def judge_planned(plan: Plan, name: str, results: Mapping[str, ArmResult],
                  run_dir: Path) -> ComparisonReport:
    """One comparison the plan names, judged on the results of its run."""
    j = plan.comparison(name)
    th = plan.audit
    a, b = outcomes_from_run(results, (j.spec.arm_a, j.spec.arm_b), th)
    return evaluate(j.spec, a, b, th, run_dir, rerun_outcomes(results, j.spec, th), j.evidence)


def run_comparison(config: Config, spec: ComparisonSpec, *, run_root: Path | None = None,
                   progress: bool | None = None,
                   cache_dir: Path | None = None) -> ComparisonReport:
    """Run both arms of a comparison and judge them (`difftest.api` also writes the reports)."""
    plan = plan_compare(config, spec)
    run_dir, results = run_plan(plan, RunOptions(run_root, progress, cache_dir))
    return judge_planned(plan, plan.judged[0].name, results, run_dir)


def run_forced(plan: Plan, options: RunOptions,
               cache_dir: Path | None) -> tuple[Path, dict[str, ArmResult]]:
    """Teacher forcing: arm A (and its reruns) first, then B on A's committed stream, given in
    DIFFTEST_FORCE. One run directory and one meta.json hold both phases. When A failed or
    printed nothing usable, B still runs free so the failure is reported as usual."""
    spec = plan.judged[0].spec
    first = [a for a in plan.arms if a.name != spec.arm_b]
    arm_a, arm_b = plan.arms[0], next(a for a in plan.arms if a.name == spec.arm_b)
    extra_meta, record = plan.meta(), plan.record()
    run_dir, results = run_arm_set(first, run_root=options.run_root, label=plan.label,
                                   progress=options.progress, extra_meta=extra_meta,
                                   cache_dir=cache_dir, record=record)
    env = dict(arm_b.env)
    a = results[arm_a.name]
    if a.failure() is None:
        try:
            trace = parse_trace(a.stderr_path)
        except DifftestError:  # judged (and reported) with A's outcome

            trace = None
        if trace is not None and len(trace.verifies):
            env[FORCE_ENV] = str(write_force_file(committed_stream(trace),
                                                  run_dir / FORCE_NAME).resolve())
    second = run_more(run_dir, [arm_b.with_changes(env=env)], progress=options.progress,
                      cache_dir=cache_dir)
    return run_dir, {**results, **second}


def run_more(run_dir: Path, arms: list[ArmSpec], *, progress: bool | None,
             cache_dir: Path | None) -> dict[str, ArmResult]:
    """More arms run into an existing run directory (teacher forcing's second phase, a
    sequential round): meta.json keeps every earlier arm, the run's metadata and plan record,
    and when the run was created."""
    _, before = load_run(run_dir)
    try:
        results = run_arms(arms, run_dir, progress=progress, extra_meta=before.get("extra"),
                           cache_dir=cache_dir, plan=before.get("plan"))
    except KeyboardInterrupt as exc:
        _keep_earlier_arms(run_dir, before)  # an interrupted round keeps the rounds before it
        raise InterruptedRun(run_dir, signal_of(exc)) from None
    _keep_earlier_arms(run_dir, before)
    return results


def _keep_earlier_arms(run_dir: Path, before: dict[str, object]) -> None:
    """meta.json as the arms just run left it, with the arms recorded before them."""
    _, after = load_run(run_dir)
    after["arms"] = {**before["arms"], **after["arms"]}  # type: ignore[dict-item]
    after["created_at"] = before.get("created_at", after.get("created_at"))
    write_json_atomic(run_dir / META_NAME, after)


def rerun_outcomes(results: Mapping[str, ArmResult], spec: ComparisonSpec,
                   thresholds: AuditThresholds) -> list[ArmOutcome]:
    """Runs 2..N of arm A, where the comparison measures a noise floor and they were run."""
    names = [rerun_name(spec.arm_a, i) for i in range(2, spec.noise_runs + 1)]
    return _rerun_outcomes(results, [n for n in names if n in results], thresholds)


def _rerun_outcomes(results: Mapping[str, ArmResult], names: Sequence[str],
                    thresholds: AuditThresholds) -> list[ArmOutcome]:
    return [_outcome(n, results[n].stderr_path, results[n], thresholds) for n in names]


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


def run_noise(config: Config, arm: str, runs: int = 3, *, run_root: Path | None = None,
              progress: bool | None = None, cache_dir: Path | None = None) -> NoiseReport:
    """Run one arm `runs` times side by side and measure its A/A noise floor."""
    plan = plan_noise(config, arm, runs)
    run_dir, results = run_plan(plan, RunOptions(run_root, progress, cache_dir))
    outs = _rerun_outcomes(results, [a.name for a in plan.arms], plan.audit)
    failures = tuple(o.failure for o in outs if o.failure is not None)
    if failures:
        return NoiseReport(arm, runs, run_dir, None, failures)
    traces = [o.trace for o in outs if o.trace is not None]
    # the floor under the drafting rules the traces declare (one kind, else block)
    declared = {t.drafting for t in traces if t.drafting is not None}
    drafting = declared.pop() if len(declared) == 1 else DraftingKind.BLOCK
    floor = measure_floor(arm, traces, drafting)
    return NoiseReport(arm, runs, run_dir, floor)


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
    spec = Overrides.of(keywords, overrides).apply(spec)
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
    a, b = outcomes_from_run(results, (spec.arm_a, spec.arm_b), thresholds)
    report = evaluate(spec, a, b, thresholds, Path(run_dir),
                      rerun_outcomes(results, spec, thresholds), evidence)
    rounds = sequential_rounds(results, spec)
    return report if rounds is None else _unjudged_sequential(
        report, rounds, stopped=_stopped(meta))


def _stopped(meta: Mapping[str, object]) -> str | None:
    """How a run that did not end `done` ended (interrupted, terminated, ...), in words."""
    status = meta.get("status", "done")
    return None if status == "done" else str(status)


def sequential_rounds(names: Mapping[str, object], spec: ComparisonSpec) -> int | None:
    """How many rounds an `--until-decided` run of `spec` holds (its `ARM#seqN` arms), or None
    where it was not such a run."""
    rounds = [int(n.rsplit("#seq", 1)[1]) for n in names
              if "#seq" in n and n.rsplit("#seq", 1)[0] in (spec.arm_a, spec.arm_b)
              and n.rsplit("#seq", 1)[1].isdigit()]
    return max(rounds) if rounds else None


def _unjudged_sequential(report: ComparisonReport, rounds: int, *,
                         stopped: str | None = None) -> ComparisonReport:
    """A re-judged `--until-decided` run: what was judged is its first round alone, without
    the sequential test that gated it, so an agreement is not this judgement's to give (nor,
    from a run stopped before the test decided, any decision of the test's)."""
    verdict = report.verdict
    if verdict.kind is VerdictKind.ARM_FAILED:
        return report
    kind = VerdictKind.UNINFORMATIVE if verdict.kind is VerdictKind.AGREE else verdict.kind
    if stopped is not None:
        why = (f"this run was sequential (--until-decided) and was {stopped} in round {rounds}, "
               "before the sequential test decided: re-judging takes its first round alone "
               "and gives no agreement; the run has no decision of its own")
    else:
        why = (f"this run was sequential (--until-decided, {rounds} round(s) of each arm): "
               "re-judging takes its first round alone and does not re-run the sequential test "
               "that gated it, so it gives no agreement; the run's own decision is the "
               "`sequential` entry of its report.json")
    return replace(report, verdict=replace(verdict, kind=kind,
                                           reasons=(*verdict.reasons, why)))
