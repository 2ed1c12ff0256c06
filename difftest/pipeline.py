"""The analysis behind `compare`, `check`, `probe` and `export`: arms -> trace -> align ->
compare/audit -> verdict. Nothing here writes a report: `difftest.api` does, after.

Raw captures and meta.json are written by `execute` before anything here reads them; analysis
results are added afterwards, so a crash in analysis loses nothing that was captured.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from difftest.audit import AuditThresholds, TraceAudit, audit_trace
from difftest.compare import Comparison, compare
from difftest.config import ArmSpec, ComparisonSpec, Config, InvalidValue
from difftest.errors import ArmFailure, ExitCode, InterruptedRun, UsageError
from difftest.execute import ArmResult, JobLimits, load_run, new_run_dir, run_arms, signal_of
from difftest.kinds import Expect
from difftest.model import ArmTrace
from difftest.trace import NoTraceLines, parse_trace, require_trace_lines
from difftest.verdict import Verdict, arm_failed, judge

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

    @property
    def exit_code(self) -> ExitCode:
        return self.verdict.exit_code


def thresholds_of(config: Config | None) -> AuditThresholds:
    return AuditThresholds() if config is None else config.audit


def with_overrides(spec: ComparisonSpec, *, expect: Expect | None = None,
                   near_tie: float | None = None, atol: float | None = None,
                   min_differing: int | None = None,
                   where: str = "the command line") -> ComparisonSpec:
    """The spec with overrides applied (None leaves a value alone), checked by the same rules
    as a config file's."""
    try:
        return replace(
            spec, expect=spec.expect if expect is None else expect,
            near_tie=spec.near_tie if near_tie is None else near_tie,
            atol=spec.atol if atol is None else atol,
            min_differing=spec.min_differing if min_differing is None else min_differing)
    except InvalidValue as exc:
        raise UsageError(f"{where}: comparison {exc.key}: {exc.why}") from None


def _spec_from(raw: dict[str, object], where: str) -> ComparisonSpec:
    try:
        return ComparisonSpec(**raw)  # type: ignore[arg-type]  # checked by __post_init__
    except InvalidValue as exc:
        raise UsageError(f"{where}: comparison {exc.key}: {exc.why}") from None
    except TypeError as exc:
        raise UsageError(f"{where}: comparison is not readable: {exc}") from None


def _thresholds_from(saved: object, where: str) -> AuditThresholds:
    if not isinstance(saved, dict):
        return AuditThresholds()
    try:
        return AuditThresholds.from_mapping(saved)
    except InvalidValue as exc:
        raise UsageError(f"{where}: audit threshold {exc.key}: {exc.why}") from None


def _outcome(name: str, trace_path: Path, result: ArmResult | None,
             thresholds: AuditThresholds) -> ArmOutcome:
    if result is not None:
        error = result.failure()
        if error is not None:
            return ArmOutcome(name, trace_path, result, failure=error.failure)
    # a captured trace given by the user must hold trace lines (bad input otherwise); an arm
    # that printed none failed, with the same hint
    trace = parse_trace(trace_path, require_lines=result is None)
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
             thresholds: AuditThresholds, run_dir: Path | None = None) -> ComparisonReport:
    """Judge two arms whose traces are parsed (or whose failures are known)."""
    failures = [o.failure for o in (a, b) if o.failure is not None]
    if failures:
        return ComparisonReport(spec.name, spec, a, b, None, arm_failed(failures, spec.expect),
                                thresholds, run_dir)
    assert a.trace is not None and b.trace is not None and a.audit and b.audit
    cmp = compare(a.trace, b.trace, near_tie=spec.near_tie, atol=spec.atol)
    verdict = judge(cmp, a.audit, b.audit, names=(a.name, b.name), expect=spec.expect,
                    min_differing=spec.min_differing, thresholds=thresholds)
    verdict = verdict.with_reasons([f"{o.name}: {n.text}" for o, t in ((a, a.trace), (b, b.trace))
                                    for n in t.notices])
    return ComparisonReport(spec.name, spec, a, b, cmp, verdict, thresholds, run_dir)


def judge_traces(trace_a: Path, trace_b: Path, spec: ComparisonSpec,
                 thresholds: AuditThresholds | None = None) -> ComparisonReport:
    """Compare two captured traces; nothing is run."""
    th = thresholds or AuditThresholds()
    a = _outcome(spec.arm_a, Path(trace_a), None, th)
    b = _outcome(spec.arm_b, Path(trace_b), None, th)
    return evaluate(spec, a, b, th)


def spec_meta(spec: ComparisonSpec, thresholds: AuditThresholds) -> dict[str, object]:
    data = asdict(spec)
    data["probe"] = list(spec.probe)
    return {"comparison": data, "audit": asdict(thresholds)}


def run_arm_set(arms: Sequence[ArmSpec], *, run_root: Path | None = None, label: str = "",
                progress: bool | None = None, extra_meta: Mapping[str, object] | None = None,
                cache_dir: Path | None = None,
                limits: JobLimits | None = None) -> tuple[Path, dict[str, ArmResult]]:
    """Run arms concurrently (up to `limits`) into a fresh run directory."""
    run_dir = new_run_dir(run_root, label=label)
    try:
        results = run_arms(arms, run_dir, progress=progress, extra_meta=extra_meta,
                           cache_dir=cache_dir, limits=limits)
    except KeyboardInterrupt as exc:
        raise InterruptedRun(run_dir, signal_of(exc)) from None
    return run_dir, results


def outcomes_from_run(results: Mapping[str, ArmResult], names: tuple[str, str],
                      thresholds: AuditThresholds) -> tuple[ArmOutcome, ArmOutcome]:
    a, b = (results[n] for n in names)
    return (_outcome(names[0], a.stderr_path, a, thresholds),
            _outcome(names[1], b.stderr_path, b, thresholds))


def self_pair(spec: ComparisonSpec, taken: Collection[str] = ()) -> ComparisonSpec:
    """A comparison of an arm with itself (a determinism check) runs the arm twice, the second
    time under a name no configured arm has."""
    if spec.arm_a != spec.arm_b:
        return spec
    name, n = f"{spec.arm_b}#2", 2
    while name in taken:
        n += 1
        name = f"{spec.arm_b}#{n}"
    return replace(spec, arm_b=name)


def arm_pair(config: Config, spec: ComparisonSpec) -> tuple[ArmSpec, ArmSpec]:
    """The two arms a comparison runs, distinct even when it names one arm twice."""
    arm_a, arm_b = config.arm(spec.arm_a), config.arm(spec.arm_b)
    return arm_a, arm_b.with_changes(name=self_pair(spec, config.arms).arm_b)


def run_comparison(config: Config, spec: ComparisonSpec, *, run_root: Path | None = None,
                   progress: bool | None = None,
                   cache_dir: Path | None = None) -> ComparisonReport:
    """Run both arms of a comparison and judge them (`difftest.api` also writes the reports)."""
    th = thresholds_of(config)
    arm_a, arm_b = arm_pair(config, spec)
    spec = self_pair(spec, config.arms)
    run_dir, results = run_arm_set([arm_a, arm_b], run_root=run_root, label=spec.name,
                                   progress=progress, extra_meta=spec_meta(spec, th),
                                   cache_dir=cache_dir or config.defaults.cache)
    a, b = outcomes_from_run(results, (arm_a.name, arm_b.name), th)
    return evaluate(spec, a, b, th, run_dir)


def rejudge_run(run_dir: Path, *, expect: Expect | None = None, near_tie: float | None = None,
                atol: float | None = None, min_differing: int | None = None,
                thresholds: AuditThresholds | None = None) -> ComparisonReport:
    """Judge a past run again, possibly with other thresholds; nothing is re-run."""
    results, meta = load_run(run_dir)
    extra = meta.get("extra", meta)
    raw = extra.get("comparison") if isinstance(extra, dict) else None
    if not isinstance(raw, dict):
        names = list(results)
        if len(names) != 2:
            raise UsageError(f"{run_dir}: meta.json names no comparison and holds "
                             f"{len(names)} arm(s), not 2")
        raw = {"name": Path(run_dir).name, "arm_a": names[0], "arm_b": names[1]}
    where = str(Path(run_dir) / "meta.json")
    spec = _spec_from(raw, where)
    spec = with_overrides(spec, expect=expect, near_tie=near_tie, atol=atol,
                          min_differing=min_differing)
    if thresholds is None:
        thresholds = _thresholds_from(extra.get("audit") if isinstance(extra, dict) else None,
                                      where)
    for name in (spec.arm_a, spec.arm_b):
        if name not in results:
            raise UsageError(f"{run_dir}: no arm {name!r} in meta.json")
    a, b = outcomes_from_run(results, (spec.arm_a, spec.arm_b), thresholds)
    return evaluate(spec, a, b, thresholds, Path(run_dir))
