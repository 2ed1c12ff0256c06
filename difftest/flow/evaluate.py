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
from typing import TYPE_CHECKING

from difftest.analysis.acceptance import AcceptanceReport, combine
from difftest.analysis.acceptance import measure as measure_acceptance
from difftest.analysis.audit import AuditThresholds, TraceAudit, audit_trace
from difftest.analysis.compare import Comparison, DraftingSource, compare
from difftest.config import ArmSpec, ComparisonSpec, Config
from difftest.core.corpus import MUTATION_ENV
from difftest.core.errors import ArmFailure, ExitCode, UsageError
from difftest.core.kinds import DecodingMode, DraftingKind, VerdictKind
from difftest.core.model import ArmTrace, same_reading
from difftest.core.rules import Rules
from difftest.analysis.rates import RateInstruments, rate_instruments
from difftest.analysis.benign import RateEffect, rate_effect
from difftest.trace import NoTraceLines, parse_trace, require_trace_lines
from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.analysis.verdict import Verdict, arm_failed, judge
from difftest.analysis import coverage, quantity
from difftest.analysis.bugclass import verify_finding
from difftest.flow.switch import Side, check_switch
from difftest.flow.roles import Roles, check_roles
from difftest.trace.align import align
from difftest.analysis.threshold_notes import threshold_notes
from difftest.core.names import is_round, rerun_name
from difftest.flow.overrides import OVERRIDES
from difftest.core.thresholds import (ArmDtype, Source, ThresholdError, ToleranceMode, arm_dtype,
                                      credited, dtype_tolerance, resolve_tolerance)

if TYPE_CHECKING:
    # what only a sampled, teacher-forced, rerun or calibrated comparison uses is imported
    # where it is used: a plain greedy comparison of two traces needs none of it
    from difftest.analysis.distribution import SampledEvidence
    from difftest.analysis.sequential import SequentialResult
    from difftest.core.force import ForceCheck
    from difftest.execute.records import ArmResult
    from difftest.flow.plan import Evidence
    from difftest.trace.sampled import VerifiedRows


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
    # a capture's arm as the config defines it (None: difftest ran it, or no config arm)
    defined: ArmSpec | None = None


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
    # near-tie flips and in-tolerance logit rows against the benign rate (None: an arm failed)
    benign_rates: RateEffect | None = None
    # decoding = "sampled": the token laws' test and each arm's acceptance check
    sampled: SampledEvidence | None = None

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
             evidence: Evidence = ((), ()), mutated: bool = False) -> ComparisonReport:
    """Judge two arms whose traces are parsed (or whose failures are known). With reruns of
    arm A, B is judged against A's A/A noise floor. The traces must show the same quantity and
    the switch engaged (`toggle`, each arm's `evidence`), or the verdict says they do not.
    `mutated`: B is a probe's mutated arm (a mutation is its role)."""
    failures = [o.failure for o in (a, b, *reruns_of_a) if o.failure is not None]
    if failures:
        return ComparisonReport(spec.name, spec, a, b, None, arm_failed(failures, spec.rules.expect),
                                thresholds, run_dir)
    assert a.trace is not None and b.trace is not None and a.audit and b.audit
    if spec.rules.decoding is DecodingMode.SAMPLED:
        return evaluate_sampled(spec, (a, *reruns_of_a), (b,), thresholds, run_dir, evidence,
                                mutated)
    drafting, source = drafting_of(spec, a, b, *reruns_of_a)
    floor = None
    if reruns_of_a:
        from difftest.analysis.floor import measure_floor

        traces = [a.trace, *(o.trace for o in reruns_of_a if o.trace is not None)]
        floor = measure_floor(a.name, traces, drafting)
    forcing: ForceCheck | None = None
    if spec.rules.teacher_force:
        from difftest.core.force import check_forced, explain_forced

        forcing = check_forced((a.name, b.name), a.trace, b.trace, b.trace_path)
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
    if any(s.startswith(MACHINE_FLOOR) for s in said) and not spec.rules.set_by_override(
            "near_tie"):
        applied = replace(applied, near_tie=None)  # derived from the floor, as the table's is
    cmp = compare(a.trace, b.trace, applied, floor=floor, drafting=drafting,
                  drafting_source=source, alignment=alignment)
    verdict = judge(cmp, a.audit, b.audit, names=(a.name, b.name), thresholds=thresholds)
    effect = rate_effect(cmp, spec.calibrated, verdict.instruments)
    verdict = with_rate_effect(verdict, effect)
    verdict = verdict.with_reasons([*said, *threshold_notes(cmp, floor)])
    verdict = verdict.with_reasons([f"{o.name}: {n.text}" for o, t in ((a, a.trace), (b, b.trace))
                                    for n in t.notices])
    acc = measure_acceptance(a.trace, b.trace, (a.name, b.name), spec.rules.acceptance)
    verdict = combine(verdict, acc, spec.rules.acceptance)
    rates = rate_instruments(cmp)
    verdict = verdict.with_reasons(rates.clustering_reasons())
    if forcing is None:  # under teacher forcing B commits A's stream, not its own
        moved = verify_finding(a.trace, b.trace, (a.name, b.name))
        if moved is not None:
            verdict = verdict.joined(moved, last=moved.reasons)
    verdict = _same_quantity_and_switch(verdict, spec, a, b, evidence)
    verdict = _arms_in_role(verdict, spec, (a, b, *reruns_of_a), mutated)
    if forcing is not None:
        verdict = _teacher_forced(verdict, forcing, (a.name, b.name))
    mde = rates.mde_sentence(verdict.instruments)
    if mde is not None and verdict.kind is VerdictKind.AGREE:
        verdict = verdict.with_reasons([mde])
    return ComparisonReport(spec.name, spec, a, b, cmp, verdict, thresholds, run_dir, forcing,
                            acc, rates, benign_rates=effect)


def evaluate_sampled(spec: ComparisonSpec, runs_a: Sequence[ArmOutcome],
                     runs_b: Sequence[ArmOutcome], thresholds: AuditThresholds,
                     run_dir: Path | None = None, evidence: Evidence = ((), ()),
                     mutated: bool = False) -> ComparisonReport:
    """A sampled comparison judged on every run of each arm (the first run of each first: A's
    noise reruns, `--until-decided`'s rounds), the switch and roles checked on the first
    runs and A's reruns."""
    from difftest.analysis.distribution import sampled_finding
    from difftest.analysis.repeats import distinct

    a, b = runs_a[0], runs_b[0]
    counted: list[list[ArmOutcome]] = []
    left: list[str] = []
    for runs in (runs_a, runs_b):
        kept, why = distinct([o.trace for o in runs if o.trace is not None])
        counted.append([runs[i] for i in kept])
        left += [f"{runs[i].name} not counted: {w} (a rerun that draws the same tokens adds no "
                 "evidence; give it a sampler seed of its own)" for i, w in why.items()]
    found = sampled_evidence(*counted)
    finding = sampled_finding(found)
    verdict = Verdict.of([finding], spec.rules.expect, [*finding.reasons, *left])
    verdict = _same_quantity_and_switch(verdict, spec, a, b, evidence)
    roles = [o for o in runs_a if not is_round(o.name)]
    verdict = _arms_in_role(verdict, spec, (a, b, *roles[1:]), mutated)
    return ComparisonReport(spec.name, spec, a, b, None, verdict, thresholds, run_dir,
                            sampled=found)


def sampled_evidence(runs_a: Sequence[ArmOutcome], runs_b: Sequence[ArmOutcome]
                     ) -> SampledEvidence:
    """A sampled comparison's evidence: the arms' token laws (every run of A against every run
    of B, each arm's runs in order) and each arm's acceptance against its traced p and q. The
    distribution instrument alone decides (tokens differ from draw to draw in correct arms)."""
    from difftest.analysis.distribution import DEFAULT_ALPHA, judge_sampled
    from difftest.trace.sampled import checked, parse_samples

    a, b = runs_a[0], runs_b[0]
    rows: dict[str, list[VerifiedRows]] = {a.name: [], b.name: []}
    for first, runs in ((a, runs_a), (b, runs_b)):
        for o in runs:
            samples = parse_samples(o.trace_path)
            rows[first.name].append(checked(samples, o.trace).rows() if o.trace is not None
                                    else samples.rows())
    return judge_sampled([o.trace for o in runs_a if o.trace is not None],
                         [o.trace for o in runs_b if o.trace is not None], rows, DEFAULT_ALPHA,
                         (a.name, b.name))


def with_rate_effect(verdict: Verdict, effect: RateEffect) -> Verdict:
    """The verdict with what the rates demand: a rate above the benign one is a difference; a
    nearly blind token instrument leaves no agreement standing. Their reasons are added
    either way."""
    if effect.kind is None:
        return verdict.with_reasons(effect.reasons)
    demand = Demand.DIFFER if effect.kind is VerdictKind.DIFFER else Demand.NO_AGREEMENT
    joined = verdict.joined(VerdictFinding(Origin.RATES, demand, effect.reasons),
                            last=effect.reasons)
    if joined.kind is verdict.kind:
        return joined
    return joined.with_reasons([
        f"verdict {joined.kind.value}, not {verdict.kind.value}: every row was within the "
        "rules one at a time, and the rates above say what their number shows"])


def _teacher_forced(verdict: Verdict, forcing: ForceCheck, names: tuple[str, str]) -> Verdict:
    """A B that did not replay A's stream ran on its own contexts: its drafts are not the
    teacher-forced comparison asked for, so nothing is judged (not what was asked: reasons
    first)."""
    if forcing.honoured:
        def acc(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"
        return verdict.with_reasons([
            f"teacher-forced: {names[1]} committed {names[0]}'s stream at all {forcing.steps} "
            f"steps; mean accepted drafts per step {names[0]} {acc(forcing.acceptance_a)}, "
            f"{names[1]} (would have) {acc(forcing.acceptance_b)}"])
    if verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    found = VerdictFinding(Origin.TEACHER_FORCING, Demand.NOT_WHAT_WAS_ASKED, forcing.reasons)
    joined = verdict.joined(found, first=found.reasons)
    return joined.with_reasons([
        f"verdict {joined.kind.value}, not {verdict.kind.value}: teacher forcing was asked for "
        f"and {names[1]} did not follow it (see the first reasons)"])


def _same_quantity_and_switch(verdict: Verdict, spec: ComparisonSpec, a: ArmOutcome,
                              b: ArmOutcome, evidence: Evidence) -> Verdict:
    """The checks that come before any judging of what was compared: both arms traced the same
    quantity, and the switch the comparison is about engaged. Their reasons go first."""
    if verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    assert a.trace is not None and b.trace is not None
    mismatched = quantity.finding(a.trace, b.trace, (a.name, b.name))
    switch = check_switch(spec.rules.toggle,
                          Side(a.name, a.trace, a.trace_path, a.result, evidence[0]),
                          Side(b.name, b.trace, b.trace_path, b.result, evidence[1]))
    engaged = switch.finding(spec.rules.expect)
    gaps = coverage_finding(spec, a, b)
    found = [f for f in (mismatched, engaged, gaps) if f is not None]
    first = [*(mismatched.reasons if mismatched else ()), *switch.reasons,
             *(gaps.reasons if gaps else ())]
    joined = verdict.joined(*found, first=first)
    if joined.kind is verdict.kind:
        return joined
    return joined.with_reasons([
        f"verdict {joined.kind.value}, not {verdict.kind.value}: what the drafts show does not "
        "bear on this comparison's claim (see the first reasons)"])


def _arms_in_role(verdict: Verdict, spec: ComparisonSpec, arms: Sequence[ArmOutcome],
                  mutated: bool) -> Verdict:
    """An arm that ran forced, faulted or mutated outside its role makes the comparison INERT
    (difftest.flow.roles); a variable kept from an arm's environment is a warning."""
    if verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    roles = check_roles([Side(o.name, o.trace, o.trace_path, o.result) for o in arms
                         if o.trace is not None],
                        Roles(forced=spec.arm_b if spec.rules.teacher_force else None,
                              mutated=spec.arm_b if mutated else None),
                        {o.name: o.defined for o in arms if o.defined is not None})
    if roles.kind is None:
        return verdict.with_reasons(roles.reasons)
    demand = Demand.INERT if roles.kind is VerdictKind.INERT else Demand.of_kind(roles.kind)
    joined = verdict.joined(VerdictFinding(Origin.ROLES, demand, roles.reasons),
                            first=roles.reasons)
    if joined.kind is verdict.kind:
        return joined
    return joined.with_reasons([
        f"verdict {joined.kind.value}, not {verdict.kind.value}: an arm did not run in its "
        "role (see the first reasons)"])


def coverage_finding(spec: ComparisonSpec, a: ArmOutcome, b: ArmOutcome
                     ) -> VerdictFinding | None:
    """What the arms' coverage demands (difftest.analysis.coverage): no agreement on a toggle
    whose state neither arm exercised, nor on a corpus mutation planted in either arm (its
    `[spec-config]` names it) whose state was not exercised or that never acted."""
    assert a.trace is not None and b.trace is not None
    return coverage.finding(spec.rules.toggle or (), a.trace.coverage, b.trace.coverage,
                            (a.name, b.name), b.trace.config.values.get("mutation"),
                            a.trace.config.values.get("mutation"),
                            forced=bool(spec.rules.teacher_force))


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
    machine_said: list[str] = []
    if spec.threshold_origin:
        base = Source(rules.atol, rules.rtol, spec.threshold_origin)
        # variables both arms set themselves: difftest's own value of them reaches neither
        pinned = (frozenset(a.result.env_overrides) & frozenset(b.result.env_overrides)
                  if a.result is not None and b.result is not None else frozenset[str]())
        floor, machine_said = machine_floor(spec, (arms[0], arms[1]), pinned)
        if floor is not None:
            base = floor
    elif source is not None:
        base = source
    else:
        base = Source(rules.atol, rules.rtol, "the comparison's atol/rtol")
    atol = rules.atol if "atol" in over else base.atol
    rtol = rules.rtol if "rtol" in over else base.rtol
    floored = bool(machine_said) and machine_said[0].startswith(MACHINE_FLOOR)
    # a floor's near_tie is derived per row (said in machine_said), as the table's is
    near = (("near_tie", rules.near_tie),) if "near_tie" in over or (
        spec.threshold_origin and not floored) else ()
    values = [("atol", atol), ("rtol", rtol), *near]
    if (rules.tolerance is ToleranceMode.GIVEN and not spec.threshold_origin
            and not (atol or rtol)):
        return atol, rtol, []  # bitwise, the default: nothing to say
    return atol, rtol, [*machine_said, credited([(k, v, OVERRIDES if k in over else base.origin)
                                                 for k, v in values if v is not None])]


MACHINE_FLOOR = "bitwise on another machine"


def machine_floor(spec: ComparisonSpec, arms: tuple[ArmDtype | None, ArmDtype | None],
                  pinned: frozenset[str] = frozenset()) -> tuple[Source | None, list[str]]:
    """Whether the thresholds file was measured on this machine, and what to judge by when
    not: a bitwise file holds only where it was measured (another CPU's kernels or another
    library version reorder floats), so elsewhere the engine's dtype floor replaces it (the
    table's entry for the less precise arm; refused, naming the command, when no arm states
    a dtype). A file with tolerances is kept, with a word that it came from elsewhere."""
    cal = spec.calibrated
    if cal is None:
        return None, []
    from difftest.core.machine import differences as machine_differences
    from difftest.core.machine import this_machine

    recorded = dict(cal.machine)
    diffs = machine_differences(recorded, this_machine(), pinned) if recorded else []
    if (recorded and not diffs) or not (recorded or cal.bitwise):
        return None, []  # its machine, or a file with tolerances that does not say
    where = (f"calibrated on another machine ({'; '.join(diffs)})" if recorded else
             "its file does not record the machine it was calibrated on")
    recalibrate = f"`difftest calibrate -c {spec.name}`"
    if not cal.bitwise:
        return None, [f"thresholds of comparison {spec.name}: {where}; they may not hold here "
                      f"(recalibrate here with {recalibrate})"]
    if arms[0] is None or arms[1] is None:
        raise UsageError(f"comparison {spec.name}: {spec.thresholds} is bitwise, {where}: a "
                         "bitwise gate does not carry over to another machine, and no arm "
                         "states a dtype for the floor to judge by; recalibrate here with "
                         f"{recalibrate} (or set dtype on the arms)")
    table = dtype_tolerance(arms[0], arms[1])
    return table, [f"{MACHINE_FLOOR}: {spec.thresholds} is bitwise where it was measured, "
                   f"{where}; judged with the engine's dtype floor instead (atol "
                   f"{table.atol:g}, rtol {table.rtol:g}, near_tie derived); recalibrate here "
                   f"with {recalibrate} for a bitwise gate"]


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


def identical_captures(verdict: Verdict, trace_a: Path, trace_b: Path,
                       read_only: bool = False) -> Verdict:
    """Two byte-identical captures, or (`read_only`) two that differ only in lines difftest does
    not read (other output, timings, line numbers): what two runs of a deterministic engine
    print, and what one capture copied is. Nothing in them shows the arms ran different
    configurations, so the comparison could not have failed: INERT, saying so (an arm that
    failed stays failed). A comparison whose `evidence` rules read the other output is judged
    by those rules instead (difftest.flow.switch)."""
    if verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    what = ("say the same in every line difftest reads (drafts, logits, [spec-config], "
            "[dflash-route], [spec-coverage]; they differ only in other output, timings or line "
            "numbers)" if read_only else "are byte-identical")
    why = (f"{trace_a} and {trace_b} {what}: nothing in them shows the arms ran "
           "different configurations (two runs of a deterministic engine print exactly this, "
           "and so does one capture copied), so this comparison could not have failed")
    joined = verdict.joined(VerdictFinding(Origin.SWITCH, Demand.INERT, (why,)), first=(why,))
    if joined.kind is verdict.kind:
        return joined
    return joined.with_reasons([f"verdict {joined.kind.value}, not {verdict.kind.value}: the "
                                "two captures are one text (see the first reason)"])


def judge_traces(trace_a: Path, trace_b: Path, spec: ComparisonSpec,
                 thresholds: AuditThresholds | None = None,
                 evidence: Evidence = ((), ()),
                 line_prefix: str | None = None,
                 arms: Mapping[str, ArmSpec] | None = None) -> ComparisonReport:
    """Compare two captured traces; nothing is run. Refused when both name one capture.
    `line_prefix`: a prefix pattern both traces' lines carry besides the known ones; `arms`:
    the config's arms, which say what each capture's launch asked for (difftest.flow.roles)."""
    same = one_capture(Path(trace_a), Path(trace_b), by_content=False)
    if same is not None:
        raise UsageError(f"{trace_a} and {trace_b}: one capture compared with itself ({same}); "
                         "it would agree whatever the engine did. Compare two runs")
    th = thresholds or AuditThresholds()
    a = outcome(spec.arm_a, Path(trace_a), None, th, line_prefix)
    b = outcome(spec.arm_b, Path(trace_b), None, th, line_prefix)
    a, b = (replace(o, defined=(arms or {}).get(o.name)) for o in (a, b))
    report = evaluate(spec, a, b, th, evidence=evidence)
    if one_capture(Path(trace_a), Path(trace_b), by_content=True) is not None:
        report = replace(report, verdict=identical_captures(report.verdict, trace_a, trace_b))
    elif (not any(evidence) and a.trace is not None and b.trace is not None
          and same_reading(a.trace, b.trace)):
        report = replace(report, verdict=identical_captures(report.verdict, trace_a, trace_b,
                                                            read_only=True))
    if spec.rules.noise_runs:
        note = (f"noise_runs = {spec.rules.noise_runs} not applied: a noise floor needs runs of "
                f"{spec.arm_a}, and two traces were given (judged without a floor)")
        report = replace(report, verdict=report.verdict.with_reasons([note]))
    return report


def judge_planted(trace_a: Path, trace_b: Path, spec: ComparisonSpec, config: Config,
                  mutations: tuple[str | None, str | None],
                  tolerance_of: str | None = None) -> ComparisonReport:
    """Two captures of `spec`'s arms, each run with the corpus mutation named (None: none)
    through DIFFTEST_MUTATION, judged as if the config's arms had asked for it (so the roles
    check sees it planted on purpose; the coverage checks each arm's). A comparison of an arm
    with itself (`rerun`) names B `ARM-again`, so that each capture has its own definition.
    `tolerance_of`: the config comparison whose tolerance (thresholds file included) judges
    the logits instead of `spec`'s, its toggle left out (a control that rounds otherwise)."""
    arm_b = spec.arm_b if spec.arm_b != spec.arm_a else f"{spec.arm_b}-again"
    judged = replace(spec, arm_b=arm_b)
    if tolerance_of is not None:
        own = config.comparison(tolerance_of)
        judged = replace(own, name=spec.name, arm_a=spec.arm_a, arm_b=arm_b,
                         rules=replace(own.rules, toggle=None))
    defined = {}
    for name, arm, mutation in ((spec.arm_a, spec.arm_a, mutations[0]),
                                (arm_b, spec.arm_b, mutations[1])):
        base = config.arm(arm)
        defined[name] = (base.with_changes(env={**base.env, MUTATION_ENV: mutation})
                         if mutation else base)
    return judge_traces(trace_a, trace_b, judged, arms=defined)


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
