"""The analysis of one comparison: two arms' traces -> align -> compare/audit -> verdict
(`evaluate`), and each arm's outcome read from its capture (`outcome`). `difftest.flow.judge`
calls it for every comparison a plan names; nothing here runs an arm or writes a report.

Raw captures and meta.json are written by `execute` before anything here reads them; analysis
results are added afterwards, so a crash in analysis loses nothing that was captured.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from difftest.analysis.acceptance import AcceptanceReport, combine
from difftest.analysis.acceptance import measure as measure_acceptance
from difftest.analysis.audit import AuditThresholds, TraceAudit, audit_trace
from difftest.analysis.compare import Comparison, DraftingSource, compare
from difftest.config import ComparisonSpec, Config
from difftest.core.errors import ArmFailure, ExitCode, UsageError
from difftest.execute.records import ArmResult
from difftest.analysis.floor import measure_floor, rerun_name
from difftest.core.kinds import DraftingKind, Expect, VerdictKind
from difftest.core.model import ArmTrace
from difftest.core.rules import Rules
from difftest.analysis.rates import RateInstruments, rate_instruments
from difftest.analysis.sequential import SequentialResult
from difftest.trace import NoTraceLines, parse_trace, require_trace_lines
from difftest.analysis.verdict import Verdict, arm_failed, judge
from difftest.analysis import quantity
from difftest.flow.switch import Side, check_switch
from difftest.trace.align import align
from difftest.core.force import ForceCheck, check_forced, explain_forced
from difftest.analysis.threshold_notes import threshold_notes
from difftest.flow.plan import Evidence
from difftest.flow.overrides import OVERRIDES
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

    @property
    def rules(self) -> Rules:
        """The rules this comparison was judged under (the spec's when nothing was compared)."""
        return self.comparison.rules if self.comparison is not None else self.spec.rules


def thresholds_of(config: Config | None) -> AuditThresholds:
    return AuditThresholds() if config is None else config.audit


def outcome(name: str, trace_path: Path, result: ArmResult | None,
            thresholds: AuditThresholds, line_prefix: str | None = None) -> ArmOutcome:
    """An arm as judged: its failure when it ran and failed, else its parsed trace and audit
    (and a failure its own trace shows). `result` None: a capture given by the user."""
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
        return ComparisonReport(spec.name, spec, a, b, None, arm_failed(failures, spec.rules.expect),
                                thresholds, run_dir)
    assert a.trace is not None and b.trace is not None and a.audit and b.audit
    drafting, source = drafting_of(spec, a, b, *reruns_of_a)
    floor = None
    if reruns_of_a:
        traces = [a.trace, *(o.trace for o in reruns_of_a if o.trace is not None)]
        floor = measure_floor(a.name, traces, drafting)
    forcing = (check_forced((a.name, b.name), a.trace, b.trace, b.trace_path)
               if spec.rules.teacher_force else None)
    if forcing is not None and forcing.honoured:
        b = replace(b, trace=explain_forced(b.trace, forcing.forced))
        if b.trace is not None and b.trace.config.values.get("forced_drafts") == "1":
            # B drafted along A's drafted tokens: each row of either arm ran on A's tokens
            # before it, so rows after an in-block flip are compared like a block's
            drafting, source = DraftingKind.BLOCK, DraftingSource.FORCED_ALONG
    assert b.trace is not None and b.audit is not None
    alignment = align(a.trace, b.trace, forced=forcing is not None and forcing.honoured)
    atol, rtol, said = tolerance_of(spec, a, b)
    # the rules as applied: atol/rtol from a dtype table or a thresholds file are given now
    applied = replace(spec.rules, atol=atol, rtol=rtol, tolerance=ToleranceMode.GIVEN)
    cmp = compare(a.trace, b.trace, applied, floor=floor, drafting=drafting,
                  drafting_source=source, alignment=alignment)
    verdict = judge(cmp, a.audit, b.audit, names=(a.name, b.name), thresholds=thresholds)
    verdict = verdict.with_reasons([*said, *threshold_notes(cmp, floor)])
    verdict = verdict.with_reasons([f"{o.name}: {n.text}" for o, t in ((a, a.trace), (b, b.trace))
                                    for n in t.notices])
    acc = measure_acceptance(a.trace, b.trace, (a.name, b.name), spec.rules.acceptance)
    verdict = combine(verdict, acc, spec.rules.acceptance)
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
    switch = check_switch(spec.rules.toggle,
                          Side(a.name, a.trace, a.trace_path, a.result, evidence[0]),
                          Side(b.name, b.trace, b.trace_path, b.result, evidence[1]))
    if switch.kind is VerdictKind.INERT:
        kind = switch.kind
    elif switch.kind is not None and not (kind is VerdictKind.DIFFER
                                          and spec.rules.expect is Expect.SAME):
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
    rules = spec.rules
    over = set(rules.overridden)
    try:
        source = (None if {"atol", "rtol"} <= over else
                  resolve_tolerance(rules.tolerance, rules.atol, rules.rtol, (arms[0], arms[1]),
                                    (a.name, b.name)))
    except ThresholdError as exc:
        raise UsageError(f"comparison {spec.name}: {exc}") from None
    if spec.thresholds and not spec.threshold_origin:
        raise UsageError(f"comparison {spec.name}: its thresholds file {spec.thresholds} does "
                         f"not exist yet; run `difftest calibrate -c {spec.name}` first")
    if spec.threshold_origin:
        base = Source(rules.atol, rules.rtol, spec.threshold_origin)
    elif source is not None:
        base = source
    else:
        base = Source(rules.atol, rules.rtol, "the comparison's atol/rtol")
    atol = rules.atol if "atol" in over else base.atol
    rtol = rules.rtol if "rtol" in over else base.rtol
    near = (("near_tie", rules.near_tie),) if spec.threshold_origin or "near_tie" in over else ()
    values = [("atol", atol), ("rtol", rtol), *near]
    if (rules.tolerance is ToleranceMode.GIVEN and not spec.threshold_origin
            and not (atol or rtol)):
        return atol, rtol, []  # bitwise, the default: nothing to say
    return atol, rtol, [credited([(k, v, OVERRIDES if k in over else base.origin)
                                  for k, v in values if v is not None])]


def drafting_of(spec: ComparisonSpec, a: ArmOutcome, b: ArmOutcome,
                *reruns: ArmOutcome) -> tuple[DraftingKind, DraftingSource]:
    """How the arms draft, and who said so: the comparison's rules (its config table, or an
    override, --drafting, over it: the rules record which) over the traces' `[spec-drafting]`
    headers (of the arms and of A's reruns, which the floor is measured on), over the default
    (block)."""
    rules = spec.rules
    if rules.drafting is not None:
        return rules.drafting, (DraftingSource.FLAG if rules.set_by_override("drafting")
                                else DraftingSource.CONFIG)
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
    a = outcome(spec.arm_a, Path(trace_a), None, th, line_prefix)
    b = outcome(spec.arm_b, Path(trace_b), None, th, line_prefix)
    report = evaluate(spec, a, b, th, evidence=evidence)
    if spec.rules.noise_runs:
        note = (f"noise_runs = {spec.rules.noise_runs} not applied: a noise floor needs runs of "
                f"{spec.arm_a}, and two traces were given (judged without a floor)")
        report = replace(report, verdict=report.verdict.with_reasons([note]))
    return report


def outcomes_from_run(results: Mapping[str, ArmResult], names: tuple[str, str],
                      thresholds: AuditThresholds) -> tuple[ArmOutcome, ArmOutcome]:
    a, b = (results[n] for n in names)
    return (outcome(names[0], a.stderr_path, a, thresholds),
            outcome(names[1], b.stderr_path, b, thresholds))


def rerun_outcomes(results: Mapping[str, ArmResult], spec: ComparisonSpec,
                   thresholds: AuditThresholds) -> list[ArmOutcome]:
    """Runs 2..N of arm A, where the comparison measures a noise floor and they were run."""
    names = [rerun_name(spec.arm_a, i) for i in range(2, spec.rules.noise_runs + 1)]
    return [outcome(n, results[n].stderr_path, results[n], thresholds)
            for n in names if n in results]


@dataclass
class Outcomes:
    """A run's arms as judged, each read from its capture once however many comparisons name
    it (the arms a check's comparisons share, a probe's baseline arm A)."""

    results: Mapping[str, ArmResult]
    thresholds: AuditThresholds
    _read: dict[str, ArmOutcome] = field(default_factory=dict)

    def of(self, name: str) -> ArmOutcome:
        if name not in self._read:
            r = self.results[name]
            self._read[name] = outcome(name, r.stderr_path, r, self.thresholds)
        return self._read[name]

    def pair(self, spec: ComparisonSpec) -> tuple[ArmOutcome, ArmOutcome]:
        return self.of(spec.arm_a), self.of(spec.arm_b)

    def reruns(self, spec: ComparisonSpec) -> list[ArmOutcome]:
        """Runs 2..N of arm A, where the comparison measures a noise floor and they were run."""
        names = [rerun_name(spec.arm_a, i) for i in range(2, spec.rules.noise_runs + 1)]
        return [self.of(n) for n in names if n in self.results]
