"""One verdict per comparison, from what differed, what each arm's trace could show, and what
was expected. The one rule this module exists for: arms that agree on inputs that could not have
disagreed are `uninformative`, never `agree`.

`measure_drafts` is what the drafts show (the finding of the token and logit instruments, and
which of them could have failed); `explain` turns it into the sentences a report shows; `judge`
is both. The verdict's kind is `findings.decide`'s, from every finding an instrument adds
(`Verdict.joined`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from difftest.analysis.audit import AuditThresholds, TraceAudit, measure_tokens
from difftest.analysis.compare import Comparison, DraftingSource, near_tie_rows
from difftest.core.errors import ArmFailure, ExitCode
from difftest.core.kinds import ArmSide, Expect, Instrument, Outcome, VerdictKind, outcome
from difftest.analysis.findings import Demand, Origin, VerdictFinding, decide, instruments_of
from difftest.analysis.logit_instrument import blind_radius, logit_reasons

TOKENS = Instrument.TOKENS
LOGITS = Instrument.LOGITS


@dataclass(frozen=True)
class Verdict:
    """A verdict kind under an expectation; exit code, `passed` and label derive from both.
    `findings` are what decided the kind (`findings.decide`); a verdict made from a kind alone
    holds one finding demanding it, so that a finding joined later is weighed against it."""

    kind: VerdictKind
    expect: Expect
    reasons: tuple[str, ...] = ()
    instruments: tuple[Instrument, ...] = ()  # what could have failed
    findings: tuple[VerdictFinding, ...] = ()

    def __post_init__(self) -> None:
        if not self.findings:
            object.__setattr__(self, "findings", (VerdictFinding(
                Origin.DRAFTS, Demand.of_kind(self.kind), could_fail=self.instruments),))

    @classmethod
    def of(cls, findings: Sequence[VerdictFinding], expect: Expect,
           reasons: Sequence[str]) -> Verdict:
        """The verdict the findings decide."""
        return cls(decide(findings), expect, tuple(reasons), instruments_of(findings),
                   tuple(findings))

    def joined(self, *found: VerdictFinding, first: Sequence[str] = (),
               last: Sequence[str] = ()) -> Verdict:
        """This verdict with more findings, its kind decided again from all of them, and
        reasons before and after its own."""
        findings = (*self.findings, *found)
        return replace(self, kind=decide(findings), findings=findings,
                       instruments=instruments_of(findings),
                       reasons=(*first, *self.reasons, *last))

    @property
    def outcome(self) -> Outcome:
        return outcome(self.kind, self.expect)

    @property
    def exit_code(self) -> ExitCode:
        return self.outcome.exit_code

    @property
    def passed(self) -> bool:
        return self.outcome.passed

    @property
    def label(self) -> str:
        return self.outcome.label

    def with_reasons(self, more: Sequence[str]) -> Verdict:
        """A copy with more reasons at the end (the verdict itself is never edited)."""
        return replace(self, reasons=(*self.reasons, *more))


def _margin(x: float | None) -> str:
    return "-" if x is None else f"{float(x):.4g}"


def arm_failed(failures: Sequence[ArmFailure], expect: Expect = Expect.SAME) -> Verdict:
    reasons = tuple(str(f) for f in failures)
    return Verdict.of([VerdictFinding(Origin.ARMS, Demand.ARM_FAILED, reasons)], expect, reasons)


@dataclass(frozen=True)
class Instruments:
    """What could have failed, measured on the blocks actually compared."""

    names: tuple[Instrument, ...]
    token_blind: tuple[str, ...]  # why the tokens could not have failed
    notes: tuple[str, ...]  # why the logits could not have failed


def _token_blind(cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit,
                 th: AuditThresholds, expect: Expect) -> list[str]:
    """Why the token comparison could not have failed; empty when it could."""
    counted = cmp.blocks_differing + cmp.draft_length_blocks + (
        cmp.blocks_near_tie if expect is Expect.DIFFER else 0)
    if counted:
        return []  # it counted differences: it evidently could fail
    blind: list[str] = []
    for au in (audit_a, audit_b):
        blind += [r for r in au.token_blind_reasons if r not in blind]
    if not blind:
        for side in ArmSide:
            blocks, margins = cmp.compared_blocks(side)
            logged = margins if np.isfinite(margins).any() else None
            measured = measure_tokens(blocks, logged, th, what="compared")
            blind += [r for r in measured.blind_reasons if r not in blind]
    ties = cmp.row_near_tie()
    if not blind and expect is Expect.SAME and bool(np.any(ties[cmp.rows.compared] > 0)):
        # `differ` counts near-ties too
        r = cmp.rows
        rows = r.compared
        known = np.isfinite(r.margin_a[rows]) | np.isfinite(r.margin_b[rows])
        if known.any() and near_tie_rows(r.margin_a[rows], r.margin_b[rows], ties[rows]).all():
            said = (f"near_tie={cmp.rules.near_tie:g}" if cmp.rules.near_tie is not None else
                    "the derived near_tie (2 x each row's tolerance)")
            blind.append(f"{said} is above every compared row's margin, so every flip would "
                         "count as a near-tie")
    return blind


def _logit_notes(cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit
                 ) -> tuple[bool, list[str]]:
    """Whether the logit comparison could have failed, and if not, why."""
    if cmp.blocks_logit_differing:
        return True, []  # it counted differences: it evidently could fail
    r = cmp.rows
    compared = r.compared & np.isfinite(r.logit_a)
    seen = np.column_stack([r.logit_a[compared], r.margin_a[compared]])
    compared_vary = seen.shape[0] >= 2 and bool(np.any(seen != seen[0]))
    if not cmp.logit_rows_compared:
        return False, []  # one arm traced no logits: `numerics` says so
    if not compared_vary:
        return False, ["the compared logit rows are all alike: the logit comparison cannot fail"]
    if not (audit_a.logits_informative and audit_b.logits_informative):
        return False, []
    spreads = [au.logit_spread for au in (audit_a, audit_b) if au.logit_spread is not None]
    reach = blind_radius(cmp).logits
    if not cmp.tolerance.bitwise and reach is not None and spreads and reach >= min(spreads):
        return False, [f"the tolerance ({cmp.tolerance.describe()}) reaches {reach:.4g}, at "
                       f"least the whole spread of the traced logits ({min(spreads):.4g}): the "
                       "logit comparison cannot fail"]
    return True, []


def instruments(cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit,
                th: AuditThresholds, expect: Expect) -> Instruments:
    """What could have failed. An instrument that counted a difference could fail, whatever a
    prediction from the audits says."""
    blind = _token_blind(cmp, audit_a, audit_b, th, expect)
    logits, notes = _logit_notes(cmp, audit_a, audit_b)
    names = ((TOKENS,) if not blind else ()) + ((LOGITS,) if logits else ())
    return Instruments(names, tuple(blind), tuple(notes))


@dataclass(frozen=True)
class Decision:
    """What the drafts show: the demand of the token and logit instruments (agree, differ, or
    no agreement where they were blind or a stream is broken)."""

    demand: Demand
    instruments: Instruments
    token_flips: int  # blocks with hard flips, near-ties or a different draft length

    @property
    def kind(self) -> VerdictKind:
        return self.demand.kind

    def finding(self, reasons: Sequence[str]) -> VerdictFinding:
        return VerdictFinding(Origin.DRAFTS, self.demand, tuple(reasons), self.instruments.names)


def measure_drafts(cmp: Comparison, inst: Instruments, *, expect: Expect,
                   min_differing: int) -> Decision:
    """What the drafts of a comparison whose arms both drafted show: no sentence is built
    here."""
    # a different draft length is a different draft: it counts like a flip
    token_flips = cmp.blocks_differing + cmp.blocks_near_tie + cmp.draft_length_blocks
    if expect is Expect.DIFFER:
        if token_flips >= min_differing:
            demand = Demand.DIFFER
        elif TOKENS not in inst.names:
            # Drafts that could not have differed say nothing about the toggle: blind, not a
            # measured failure.
            demand = Demand.NO_AGREEMENT
        else:
            demand = Demand.AGREE
    elif (cmp.blocks_differing or cmp.blocks_logit_differing or cmp.divergences
          or cmp.coverage_gaps or cmp.draft_length_blocks or cmp.steps_lost_a
          or cmp.steps_lost_b):
        demand = Demand.DIFFER
    elif cmp.blocks_compared and inst.names:
        demand = Demand.AGREE
    else:
        demand = Demand.NO_AGREEMENT
    if any(cmp.stream_breaks):
        # a trace with a hole or a self-contradiction is no record of what its engine did: what
        # was compared may be the hole, so neither agreement nor a difference stands
        demand = Demand.NO_AGREEMENT
    return Decision(demand, inst, token_flips)


T = TypeVar("T")


def _per_arm(names: tuple[str, str], pair: tuple[T, T]) -> tuple[tuple[str, T], tuple[str, T]]:
    """Each arm's name with its item (two arms, always)."""
    return (names[0], pair[0]), (names[1], pair[1])


SHOWN_FINDINGS = 3  # findings quoted per arm in the reasons; the JSON report lists all


def stream_break_reasons(cmp: Comparison, names: tuple[str, str]) -> list[str]:
    """Per arm, the parser findings that break its stream, quoted with file and line (the
    JSON report lists every finding, as `audit` does)."""
    out: list[str] = []
    for name, breaks in _per_arm(names, cmp.stream_breaks):
        if breaks:
            more = (f" (and {len(breaks) - SHOWN_FINDINGS} more)"
                    if len(breaks) > SHOWN_FINDINGS else "")
            out.append(f"{name}: {len(breaks)} trace finding(s) break the stream (a line not "
                       "read, a step out of place, or a step traced twice differently): "
                       + "; ".join(str(f) for f in breaks[:SHOWN_FINDINGS]) + more)
    return out


def other_finding_reasons(cmp: Comparison, names: tuple[str, str]) -> list[str]:
    """Per arm, a count of the parser findings that leave the stream whole."""
    out: list[str] = []
    for name, found in _per_arm(names, (cmp.findings_a, cmp.findings_b)):
        rest = [f for f in found if not f.kind.breaks_stream]
        if rest:
            kinds = sorted({f.kind.value for f in rest})
            out.append(f"{name}: {len(rest)} other trace finding(s) ({', '.join(kinds)}), none "
                       "of which breaks the stream (listed in the JSON report)")
    return out


def _findings(cmp: Comparison, names: tuple[str, str]) -> list[str]:
    """What the comparison found, whatever was expected."""
    return [*_compared(cmp, names), *_not_compared(cmp, names), *_first_differences(cmp, names)]


def _compared(cmp: Comparison, names: tuple[str, str]) -> list[str]:
    """What was compared, under which drafting, and steps that only one arm has."""
    na, nb = names
    out: list[str] = []
    if cmp.blocks_compared == 0:
        out.append("no block could be compared: every step was unmatched or context-diverged")
    out.append(f"{cmp.blocks_compared} block(s) compared, {cmp.blocks_differing} differ"
               + (f", {cmp.blocks_near_tie} differ only by near-ties" if cmp.blocks_near_tie
                  else "")
               + (f"; {cmp.logit_rows_compared} logit row(s) compared, "
                  f"{cmp.blocks_logit_differing} block(s) with logit differences"
                  if cmp.logit_rows_compared else ""))
    if cmp.drafting_source is not DraftingSource.DEFAULT:
        out.append(f"{cmp.drafting.value} drafting (from the {cmp.drafting_source})"
                   + (f": {cmp.rows_context_diverged} row(s) after a block's first flip ran on "
                      "another token and are not compared" if cmp.rows_context_diverged else ""))
    if cmp.draft_length_blocks:
        out.append(f"{cmp.draft_length_blocks} block(s) drafted a different number of rows at "
                   f"the same (request, pos): {cmp.draft_length_rows_a} row(s) only {na} "
                   f"drafted, {cmp.draft_length_rows_b} only {nb}; a different draft length is "
                   "a different draft")
    if cmp.steps_lost_a or cmp.steps_lost_b:
        out.append(f"{cmp.steps_lost_a} step(s) only in {na} at positions {nb}'s stream never "
                   f"emitted, {cmp.steps_lost_b} only in {nb} at positions {na}'s never emitted: "
                   "steps lost from one trace (or extra in the other), a difference, not "
                   f"acceptance; their {cmp.rows_lost} drafted row(s) could not be compared")
    accepted_a = cmp.unmatched_a - cmp.unmatched_lost_a
    accepted_b = cmp.unmatched_b - cmp.unmatched_lost_b
    if accepted_a or accepted_b:
        why = ("some of them may be the stream breaks above, not acceptance"
               if any(cmp.stream_breaks) else
               "different acceptance visits different positions; not a difference")
        out.append(f"{accepted_a} step(s) only in {na}, {accepted_b} only in {nb} "
                   f"({why})")
    return out


def _not_compared(cmp: Comparison, names: tuple[str, str]) -> list[str]:
    """Where the streams part: steps one arm never ran, contexts that diverged."""
    na, nb = names
    out: list[str] = []
    for gap in cmp.coverage_gaps:
        ends = [f"{name} never traced it" if end is None else
                f"{name} emitted up to position {end} in {steps} step(s)"
                for name, end, steps in ((na, gap.end_a, gap.steps_a),
                                         (nb, gap.end_b, gap.steps_b))]
        out.append(f"request {gap.req}: {ends[0]}, {ends[1]}: the steps past the shorter "
                   "stream were never run by the other arm")
    for d in cmp.divergences:
        out.append(f"the emitted streams of request {d.req} differ at position "
                   f"{d.position} ({na}={d.token_a}, {nb}={d.token_b}): later steps "
                   "ran on different contexts and are not compared")
    if cmp.context_diverged:
        out.append(f"{cmp.context_diverged} step(s) left out as context-diverged")
    return out


def _first_differences(cmp: Comparison, names: tuple[str, str]) -> list[str]:
    """The first drafted difference and the first logit difference."""
    na, nb = names
    out: list[str] = []
    if cmp.first_difference:
        f = cmp.first_difference
        out.append(f"first difference at {f.where}: {na} drafted {f.token_a}, {nb} "
                   f"drafted {f.token_b} (margins {_margin(f.margin_a)} / "
                   f"{_margin(f.margin_b)})")
    if cmp.first_logit_difference and cmp.blocks_logit_differing:
        fl = cmp.first_logit_difference
        size = (f"|diff| {_margin(fl.abs_logit_diff)}" if fl.abs_logit_diff is not None else
                "no finite |diff| (nan or inf in one arm, or no id shared, or traced by one arm)")
        out.append(f"first logit difference at {fl.where}: {size} ({cmp.tolerance.describe()}); "
                   f"max |diff| {_margin(cmp.max_abs_logit_diff)}")
    return out


def _conclusion(d: Decision, expect: Expect, min_differing: int, audit_a: TraceAudit,
                audit_b: TraceAudit) -> list[str]:
    """Why the decision is what it is."""
    inst = d.instruments
    if expect is Expect.DIFFER:
        if d.kind is VerdictKind.DIFFER:
            return [f"expected at least {min_differing} differing block(s): found "
                    f"{d.token_flips}"]
        out = [f"expected at least {min_differing} differing block(s), found "
               f"{d.token_flips}: the toggle may not reach the runner"]
        if d.kind is VerdictKind.UNINFORMATIVE:
            out.append("but the compared drafts could not have differed: "
                       + _blind_reason(inst.token_blind, audit_a, audit_b))
        return out
    if d.kind is VerdictKind.AGREE:
        if inst.names == (LOGITS,):
            return ["the token comparison alone would have been blind ("
                    + (", ".join(inst.token_blind) or "below the audit thresholds")
                    + "); the exact logit comparison could have failed and did not"]
        return ["the comparison could have failed through: " + ", ".join(inst.names)]
    if d.kind is VerdictKind.UNINFORMATIVE:
        return ["the arms agree, but the comparison could not have failed: "
                + _blind_reason(inst.token_blind, audit_a, audit_b)]
    return []


def _broken(names: tuple[str, str], cmp: Comparison) -> str:
    arms = " and ".join(n for n, b in _per_arm(names, cmp.stream_breaks) if b)
    return (f"no verdict: the trace of {arms} is not a whole record of what the engine did (see "
            "the findings above), so what was compared may be the gap; fix the trace and compare "
            "again")


def explain(d: Decision, cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit, *,
            names: tuple[str, str], expect: Expect, min_differing: int) -> tuple[str, ...]:
    """The reasons a report shows for a decision, in the order a reader needs them."""
    conclusion = ([_broken(names, cmp)] if any(cmp.stream_breaks) else
                  _conclusion(d, expect, min_differing, audit_a, audit_b))
    return (*stream_break_reasons(cmp, names), *cmp.notes, *d.instruments.notes,
            *_findings(cmp, names), *logit_reasons(cmp, names), *conclusion,
            *other_finding_reasons(cmp, names))


def judge(cmp: Comparison, audit_a: TraceAudit, audit_b: TraceAudit, *, names: tuple[str, str],
          thresholds: AuditThresholds | None = None) -> Verdict:
    """The verdict of one comparison whose arms both ran, under the rules it was compared by
    (`cmp.rules`: what was expected, how many differing blocks `differ` asks for)."""
    th = thresholds or AuditThresholds()
    expect, min_differing = cmp.rules.expect, cmp.rules.min_differing
    for name, au in _per_arm(names, (audit_a, audit_b)):
        if au.blocks == 0:
            return arm_failed([ArmFailure(
                name, "printed no drafted blocks (is VT_SPEC_TRACE set in its environment, and "
                      "does it speculate?)")], expect)
    inst = instruments(cmp, audit_a, audit_b, th, expect)
    d = measure_drafts(cmp, inst, expect=expect, min_differing=min_differing)
    reasons = explain(d, cmp, audit_a, audit_b, names=names, expect=expect,
                      min_differing=min_differing)
    return Verdict.of([d.finding(reasons)], expect, reasons)


def _blind_reason(token_blind: Sequence[str], audit_a: TraceAudit, audit_b: TraceAudit) -> str:
    """Which measures decided that the comparison was blind, in the audit's words."""
    parts = list(token_blind)
    for au in (audit_a, audit_b):
        parts += [r for r in au.logit_blind_reasons if r not in parts]
    return ", ".join(parts) if parts else "below the audit thresholds"
