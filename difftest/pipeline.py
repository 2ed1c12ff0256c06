"""The library API behind `compare`, `check`, `probe` and `export`: arms -> trace -> align ->
compare/audit -> verdict, with every artefact written into the run directory.

Raw captures and meta.json are written by `execute` before anything here reads them; analysis
results are added afterwards, so a crash in analysis loses nothing that was captured.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Collection, Mapping, Sequence

from difftest.audit import AuditThresholds, TraceAudit, audit_trace
from difftest.compare import Comparison, compare
from difftest.config import ArmSpec, ComparisonSpec, Config
from difftest.errors import ArmFailedError, InterruptedRun, UsageError
from difftest.execute import (
    ArmResult, load_run, new_run_dir, run_arms, write_json_atomic, write_text_atomic,
)
from difftest.model import ArmTrace
from difftest.trace import parse_trace
from difftest.verdict import Verdict, arm_failed, judge

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
DIFF_CSV = "diff.csv"


@dataclass
class ArmOutcome:
    """One arm as the comparison saw it: its run (if difftest ran it), trace and audit."""

    name: str
    trace_path: Path
    result: ArmResult | None = None
    trace: ArmTrace | None = None
    audit: TraceAudit | None = None
    failure: ArmFailedError | None = None


@dataclass
class ComparisonReport:
    name: str
    spec: ComparisonSpec
    arm_a: ArmOutcome
    arm_b: ArmOutcome
    comparison: Comparison | None
    verdict: Verdict
    thresholds: AuditThresholds
    run_dir: Path | None = None


def thresholds_of(config: Config | None) -> AuditThresholds:
    return AuditThresholds() if config is None else config.audit


def with_overrides(spec: ComparisonSpec, *, expect: str | None = None,
                   near_tie: float | None = None, atol: float | None = None,
                   min_differing: int | None = None) -> ComparisonSpec:
    """The spec with the command line's overrides applied (None leaves a value alone)."""
    changes = {k: v for k, v in (("expect", expect), ("near_tie", near_tie), ("atol", atol),
                                 ("min_differing", min_differing)) if v is not None}
    out = replace(spec, **changes)
    check_spec(out, "the command line")
    return out


def check_spec(spec: ComparisonSpec, where: str) -> None:
    """A comparison read from elsewhere than a config file holds what the config would allow."""
    def bad(key: str, why: str) -> UsageError:
        return UsageError(f"{where}: comparison {key}: {why}, got {getattr(spec, key)!r}")

    for key in ("name", "arm_a", "arm_b"):
        if not isinstance(getattr(spec, key), str):
            raise bad(key, "expected a string")
    if spec.expect not in ("same", "differ"):
        raise bad("expect", "expected 'same' or 'differ'")
    for key in ("near_tie", "atol"):
        value = getattr(spec, key)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value < 0):
            raise bad(key, "expected a finite number >= 0")
    if (isinstance(spec.min_differing, bool) or not isinstance(spec.min_differing, int)
            or spec.min_differing < 1):
        raise bad("min_differing", "expected an integer >= 1")
    if not all(isinstance(m, str) for m in spec.probe):
        raise bad("probe", "expected mutation names")


def _thresholds_from(saved: object, where: str) -> AuditThresholds:
    if not isinstance(saved, dict):
        return AuditThresholds()
    try:
        th = AuditThresholds(**saved)
    except TypeError as exc:
        raise UsageError(f"{where}: audit thresholds: {exc}") from None
    for key, value in asdict(th).items():
        integral = key == "min_distinct_ids"
        kinds = (int,) if integral else (int, float)
        if (isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value)
                or value < 0):
            raise UsageError(f"{where}: audit threshold {key}: expected "
                             f"{'an integer' if integral else 'a finite number'} >= 0, "
                             f"got {value!r}")
    return th


def _outcome(name: str, trace_path: Path, result: ArmResult | None,
             thresholds: AuditThresholds) -> ArmOutcome:
    out = ArmOutcome(name, trace_path, result)
    if result is not None and not result.ok:
        out.failure = result.failure()
        return out
    out.trace = parse_trace(trace_path)
    out.audit = audit_trace(out.trace, thresholds)
    out.failure = _health_failure(name, out.trace)
    return out


def _health_failure(name: str, trace: ArmTrace) -> ArmFailedError | None:
    """An arm whose own trace says it failed: an engine error line, or a cut-off stream."""
    if trace.engine_errors:
        first = trace.engine_errors[0]
        more = f" (and {len(trace.engine_errors) - 1} more)" if len(trace.engine_errors) > 1 else ""
        return ArmFailedError(name, f"the engine reported an error at {first.path}:{first.line}: "
                                    f"{first.message}{more}")
    cut = next((f for f in trace.findings if f.kind == "truncated"), None)
    if cut is not None:
        return ArmFailedError(name, f"its trace is cut off mid-line at {cut.path}:{cut.line} "
                                    "(was the runner killed?)")
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
    verdict.reasons += [f"{o.name}: {n.text}" for o in (a, b) for n in o.trace.notices]
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
                cache_dir: Path | None = None) -> tuple[Path, dict[str, ArmResult]]:
    """Run arms concurrently into a fresh run directory."""
    run_dir = new_run_dir(run_root, label=label)
    try:
        results = run_arms(arms, run_dir, progress=progress, extra_meta=extra_meta,
                           cache_dir=cache_dir)
    except KeyboardInterrupt:
        raise InterruptedRun(run_dir) from None
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
    """Run both arms of a comparison and judge them; reports are written into the run dir."""
    th = thresholds_of(config)
    arm_a, arm_b = arm_pair(config, spec)
    spec = self_pair(spec, config.arms)
    run_dir, results = run_arm_set([arm_a, arm_b], run_root=run_root, label=spec.name,
                                   progress=progress, extra_meta=spec_meta(spec, th),
                                   cache_dir=cache_dir)
    a, b = outcomes_from_run(results, (arm_a.name, arm_b.name), th)
    report = evaluate(spec, a, b, th, run_dir)
    write_reports(report)
    return report


def rejudge_run(run_dir: Path, *, expect: str | None = None, near_tie: float | None = None,
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
    if not isinstance(raw.get("probe", []), list):
        raise UsageError(f"{where}: comparison probe: expected a list of mutation names, got "
                         f"{raw['probe']!r}")
    try:
        spec = ComparisonSpec(**{k: (tuple(v) if k == "probe" else v) for k, v in raw.items()})
    except TypeError as exc:
        raise UsageError(f"{where}: comparison is not readable: {exc}") from None
    check_spec(spec, where)
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


def write_reports(report: ComparisonReport) -> None:
    """report.json, report.md and diff.csv into the run directory, each written atomically."""
    if report.run_dir is None:
        return
    from difftest.report import comparison as render

    write_json_atomic(report.run_dir / REPORT_JSON, render.to_dict(report))
    write_text_atomic(report.run_dir / REPORT_MD, render.render_markdown(report))
    if report.comparison is not None:
        render.write_csv(report, report.run_dir / DIFF_CSV)
