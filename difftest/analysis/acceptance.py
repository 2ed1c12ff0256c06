"""Acceptance as an instrument: per arm and per draft position j, the fraction of verifies that
accepted at least j drafts, the mean accepted length, and B minus A, each with an interval
clustered by request; and, where a comparison declares `acceptance = { max_drop, alpha }`, a
gate on it.

Acceptance decays by position (the first draft survives far more often than the last), so a
single mean hides where it fell: the gate judges every position. A verify's accepted count is
all a level-1 trace needs (`acc=` of each `[SPECTRACE]` line); verifies that drafted nothing
(`k=0`) are not drafted blocks and are left out. A verify's depth is bounded by the drafts its
line lists (`counts_of`), never by its header's `k=` alone.

The gate, at each position j with the one-sided level alpha / J (Bonferroni over the J
positions, so the whole gate keeps alpha):

- DIFFER when even the upper bound of B - A is below -max_drop: B accepts less by more than the
  margin, with that confidence;
- AGREE when the lower bound is above -max_drop (any drop is within the margin) and the sample
  could have seen a drop of the margin's size (the minimum detectable effect is at most
  max_drop);
- UNINFORMATIVE otherwise, with the reason: the interval straddles the margin, or the sample is
  too small for it.

The comparison's verdict takes the gate's DIFFER; a gate that cannot decide turns an AGREE into
UNINFORMATIVE (see `combine`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from difftest.numerics.clustered import (ClusteredRate, ClusterSums,
                                paired_difference, rate_of, t_quantile)
from difftest.config import AcceptanceGate
from difftest.core.kinds import ArmSide, Instrument, VerdictKind
from difftest.core.model import ArmTrace
from difftest.analysis.findings import Demand, Origin, VerdictFinding, of_decision
from difftest.analysis.verdict import Verdict

DISPLAY_ALPHA = 0.025  # each side of the 95% intervals shown without a gate


@dataclass(frozen=True)
class AcceptanceCounts:
    """One arm's drafted verifies: request label, drafted count and accepted count of each.
    The labels are the request names as Python strings (an object array): a fixed-width string
    array pads every verify's label to the longest name, which for one hostile 1 MiB name over
    15k verifies is 60 GB."""

    label: np.ndarray
    k: np.ndarray
    acc: np.ndarray


def counts_of(trace: ArmTrace) -> AcceptanceCounts:
    """The drafted verifies of a trace, as the instrument counts them.

    A verify's depth is the drafts its line lists, capped by its `k=`: `k` is one number in a
    header the parser reports (not refuses) when it disagrees with the list, and the
    per-position loops run to the deepest depth, so a hostile `k=1000000000` beside four ids
    must cost four positions, not a billion."""
    v = trace.verifies
    listed = np.diff(v.draft_off).astype(np.int64)
    depth = np.minimum(v.k.astype(np.int64), listed)
    drafted = depth > 0
    names = np.asarray(trace.requests, dtype=object)
    label = (names[v.req[drafted]] if len(trace.requests) else np.zeros(0, dtype=object))
    return AcceptanceCounts(label, depth[drafted],
                            np.minimum(v.acc[drafted].astype(np.int64), depth[drafted]))


@dataclass(frozen=True)
class ArmAcceptance:
    """One arm: acc@j for j = 1..J and the mean accepted length, clustered by request."""

    name: str
    verifies: int
    requests: int
    positions: tuple[ClusteredRate | None, ...]  # j = 1..J
    mean_length: float | None
    mean_length_ci: tuple[float, float] | None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "verifies": self.verifies, "requests": self.requests,
                "accepted_at_least": [None if r is None else r.to_json()
                                      for r in self.positions],
                "mean_accepted_length": self.mean_length,
                "mean_accepted_length_ci95": (None if self.mean_length_ci is None
                                              else list(self.mean_length_ci))}


@dataclass(frozen=True)
class PositionDelta:
    """B - A of acc@j, its bounds at the level used, the smallest drop the sample could detect,
    and (under a gate) what it decided."""

    j: int
    a: float
    b: float
    low: float | None  # None: under two requests, no interval
    high: float | None
    mde: float | None
    decision: VerdictKind | None = None  # None: no gate

    @property
    def diff(self) -> float:
        return self.b - self.a

    def to_json(self) -> dict[str, object]:
        return {"j": self.j, ArmSide.A: self.a, ArmSide.B: self.b, "b_minus_a": self.diff,
                "bounds": None if self.low is None else [self.low, self.high],
                "mde": self.mde, "decision": None if self.decision is None else
                self.decision.value}


@dataclass(frozen=True)
class AcceptanceReport:
    """Both arms' acceptance, B - A per position and of the mean length, and the gate."""

    arm_a: ArmAcceptance
    arm_b: ArmAcceptance
    deltas: tuple[PositionDelta, ...]
    one_sided_alpha: float  # of each bound in `deltas` (alpha / J under a gate)
    mean_delta: tuple[float, float, float] | None  # B - A of the mean length, 95% bounds
    gate: AcceptanceGate | None = None
    verdict: VerdictKind | None = None
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "arms": [self.arm_a.to_json(), self.arm_b.to_json()],
            "b_minus_a": [d.to_json() for d in self.deltas],
            "bounds_one_sided_alpha": self.one_sided_alpha,
            "mean_accepted_length_b_minus_a": None if self.mean_delta is None else
            {"value": self.mean_delta[0], "ci95": list(self.mean_delta[1:])},
            "gate": None if self.gate is None else {"max_drop": self.gate.max_drop,
                                                   "alpha": self.gate.alpha},
            "verdict": None if self.verdict is None else self.verdict.value,
            "reasons": list(self.reasons),
            "method": "delete-one-request jackknife (CR3) variance of a ratio, paired by "
                      "request for B - A, Student t at the effective number of requests - 1",
        }

    def summary(self) -> str:
        """One line: acc@j of both arms and the mean lengths."""
        parts = []
        for d in self.deltas:
            parts.append(f"acc@{d.j} {d.a:.3f} -> {d.b:.3f}")
        la, lb = self.arm_a.mean_length, self.arm_b.mean_length
        mean = ("" if la is None or lb is None else
                f"; mean accepted length {la:.3f} -> {lb:.3f}")
        return (f"acceptance ({self.arm_a.name} -> {self.arm_b.name}, "
                f"{self.arm_a.verifies}/{self.arm_b.verifies} verifies): "
                + ", ".join(parts) + mean)


def _arm(name: str, c: AcceptanceCounts, depth: int
         ) -> tuple[ArmAcceptance, list[ClusterSums], np.ndarray, ClusterSums]:
    """The arm's acceptance, its sums per position and of the accepted length, and the sorted
    labels they are summed by."""
    # the labels sorted once: each sum is by a label's rank among them (ClusterSums.of's sums
    # by label, without sorting the names again for every position)
    labels, rank = np.unique(c.label, return_inverse=True)
    sums = [ClusterSums.of(c.acc >= j, rank) for j in range(1, depth + 1)]
    positions = tuple(rate_of(s) for s in sums)
    length = ClusterSums.of(c.acc, rank)
    mean = length.ratio if length.rows else None
    ci = None
    if mean is not None and length.clusters >= 2:
        var = length.variance()
        half = t_quantile(1 - DISPLAY_ALPHA, length.clusters - 1) * math.sqrt(var)
        ci = (mean - half, mean + half)
    return (ArmAcceptance(name, int(c.acc.size), int(labels.size), positions, mean, ci),
            sums, labels, length)


def _decide(a: float, low: float | None, high: float | None, mde: float | None,
            gate: AcceptanceGate) -> VerdictKind:
    if low is None or high is None:
        return VerdictKind.UNINFORMATIVE
    if high < -gate.max_drop:
        return VerdictKind.DIFFER
    # a position A accepts at no more than the margin cannot drop by more than it
    could_see = a <= gate.max_drop or (mde is not None and mde <= gate.max_drop)
    if low > -gate.max_drop and could_see:
        return VerdictKind.AGREE
    return VerdictKind.UNINFORMATIVE


def measure(a: ArmTrace, b: ArmTrace, names: tuple[str, str],
            gate: AcceptanceGate | None = None) -> AcceptanceReport | None:
    """The acceptance instrument of two arms (None: neither traced a drafted verify)."""
    return measure_counts(counts_of(a), counts_of(b), names, gate)


def measure_counts(ca: AcceptanceCounts, cb: AcceptanceCounts, names: tuple[str, str],
                   gate: AcceptanceGate | None = None) -> AcceptanceReport | None:
    """`measure` on counted verifies (what the calibration script simulates)."""
    if not ca.acc.size and not cb.acc.size:
        return None
    depth = int(max(ca.k.max(initial=0), cb.k.max(initial=0)))
    arm_a, sums_a, lab_a, length_a = _arm(names[0], ca, depth)
    arm_b, sums_b, lab_b, length_b = _arm(names[1], cb, depth)
    alpha = gate.alpha / depth if gate is not None else DISPLAY_ALPHA
    deltas = []
    for j in range(1, depth + 1):
        pd = paired_difference(sums_a[j - 1], lab_a, sums_b[j - 1], lab_b)
        ra, rb = arm_a.positions[j - 1], arm_b.positions[j - 1]
        a_value = ra.value if ra else math.nan
        low = high = mde = None
        if pd is not None:
            low, high = pd.bounds(alpha)
            mde = pd.mde(alpha)
            if mde > pd.a:
                mde = None  # no drop within the rate's range is detectable
        deltas.append(PositionDelta(j, a_value, rb.value if rb else math.nan, low, high, mde,
                                    _decide(a_value, low, high, mde, gate) if gate else None))
    mean_delta = None
    md = paired_difference(length_a, lab_a, length_b, lab_b, binomial=False)
    if md is not None:
        lo, hi = md.bounds(DISPLAY_ALPHA)
        mean_delta = (md.diff, lo, hi)
    report = AcceptanceReport(arm_a, arm_b, tuple(deltas), alpha, mean_delta, gate)
    if gate is None:
        return report
    return _judged(report, gate)


def _judged(report: AcceptanceReport, gate: AcceptanceGate) -> AcceptanceReport:
    kinds = [d.decision for d in report.deltas]
    if not report.arm_a.verifies or not report.arm_b.verifies:
        empty = report.arm_a.name if not report.arm_a.verifies else report.arm_b.name
        return replace(report, verdict=VerdictKind.UNINFORMATIVE, reasons=(
            f"acceptance gate: {empty} traced no drafted verify, so its acceptance is unknown",))
    level = (f"one-sided alpha {gate.alpha:g} / {len(report.deltas)} positions = "
             f"{report.one_sided_alpha:.3g} per bound")
    if VerdictKind.DIFFER in kinds:
        verdict = VerdictKind.DIFFER
        worst = [d for d in report.deltas if d.decision is VerdictKind.DIFFER]
        why = "; ".join(f"acc@{d.j} {d.a:.3f} -> {d.b:.3f} (B - A {d.diff:+.3f}, upper bound "
                        f"{d.high:+.3f})" for d in worst)
        text = (f"acceptance gate: B accepts less than A by more than max_drop "
                f"{gate.max_drop:g} ({level}): {why}")
    elif VerdictKind.UNINFORMATIVE in kinds:
        verdict = VerdictKind.UNINFORMATIVE
        text = "acceptance gate cannot decide at max_drop {:g} ({}): {}".format(
            gate.max_drop, level, "; ".join(_undecided(d, gate) for d in report.deltas
                                            if d.decision is VerdictKind.UNINFORMATIVE))
    else:
        verdict = VerdictKind.AGREE
        worst_mde = max((d.mde for d in report.deltas if d.mde is not None), default=0.0)
        text = (f"acceptance gate: no position's acceptance dropped by more than max_drop "
                f"{gate.max_drop:g} ({level}); the smallest drop these "
                f"{report.arm_a.requests} request(s) would have detected with 80% power is "
                f"{worst_mde:.3g} at the least sensitive position")
    return replace(report, verdict=verdict, reasons=(text,))


def _undecided(d: PositionDelta, gate: AcceptanceGate) -> str:
    if d.low is None:
        return f"acc@{d.j}: fewer than 2 requests, no request-clustered interval"
    if d.mde is None or d.mde > gate.max_drop:
        seen = ("no drop within the rate's range" if d.mde is None else
                f"a drop of {d.mde:.3g}")
        return (f"acc@{d.j}: the sample is too small for the margin (it would detect {seen} "
                f"with 80% power, not {gate.max_drop:g}: run more requests or verifies)")
    return (f"acc@{d.j}: B - A {d.diff:+.3f} in [{d.low:+.3f}, {d.high:+.3f}], which reaches past "
            f"-{gate.max_drop:g}")


def gate_finding(report: AcceptanceReport | None) -> VerdictFinding:
    """The acceptance gate's finding: a drop beyond the margin is a difference; a gate that
    cannot decide (or had no drafted verify to judge) leaves no agreement standing."""
    if report is None or report.verdict is None:
        return VerdictFinding(Origin.ACCEPTANCE, Demand.NO_AGREEMENT, (
            "acceptance gate: neither arm traced a drafted verify, so acceptance could not be "
            "judged",))
    return decision_finding(Origin.ACCEPTANCE, report.verdict, report.reasons)


def decision_finding(origin: Origin, decision: VerdictKind,
                     reasons: Sequence[str]) -> VerdictFinding:
    """An acceptance decision (the fixed-sample gate's or the sequential test's) as a finding;
    a decided one adds acceptance to the instruments that could have failed."""
    could = (Instrument.ACCEPTANCE,) if decision is not VerdictKind.UNINFORMATIVE else ()
    return of_decision(origin, decision, reasons, could)


def combine(verdict: Verdict, report: AcceptanceReport | None,
            gate: AcceptanceGate | None) -> Verdict:
    """The comparison's verdict with the acceptance gate's finding joined, its reasons last."""
    if gate is None or verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    found = gate_finding(report)
    return verdict.joined(found, last=found.reasons)
