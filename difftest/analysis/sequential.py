"""Sequential stopping for arms that are not deterministic: judge B's acceptance against A's
after every round of runs, and stop as soon as the evidence decides, at stated error rates.

One run of a nondeterministic pair is one draw: a fixed-sample gate on it is either too small
to resolve the margin or wastes runs where the answer was plain after two. The test here looks
after each round (a run of A and a run of B, on the same inputs, or on the round's own inputs
where the arms take one) at the pooled acceptance of every draft position, paired by request
and clustered by request (`difftest.numerics.clustered`), and decides:

- DIFFER as soon as, at some position j, the upper bound of B - A is below 0: B accepts less.
  Each position's bound is at one-sided level alpha / J (Bonferroni over the J positions), so
  calling a difference where B accepts as often as A happens with probability at most alpha;
- AGREE as soon as, at every position, the lower bound of B - A is above -max_drop (or A
  accepts there at most max_drop, so no larger drop fits): a drop of the margin or more is
  then excluded, and calling AGREE where B dropped by the margin happens with probability at
  most beta (one position must escape its bound, each at level beta);
- UNINFORMATIVE when the maximum number of runs is reached first, or when a round's reruns
  repeat, in both arms, every request's stream an earlier round traced (deterministic arms:
  the same draw again is no new evidence; `difftest.flow.sequential_runs`), unless the evidence
  counted already shows a drop (DIFFER).

A drop between 0 and max_drop is the indifference zone of any such test (Wald's): it may end
either way. Where both ends are reached at one look, DIFFER is reported.

The bounds are confidence sequences, valid however often one looks: Robbins' normal mixture
(the mixture sequential probability ratio test of Johari et al., Howard et al.'s "normal
mixture" boundary). With V the variance of B - A at the look (the request-clustered paired
variance, at least that of one verify's change in each arm, the rate's resolution, and widened
by (t / z)^2 at the level for the effective number of requests it was estimated from, as
`difftest.numerics.clustered` widens a fixed-sample interval) and rho the mixing variance, the
two-sided level-a half-width is

    h(V) = sqrt( 2 V (V + rho) / rho * log( sqrt((V + rho) / V) / a ) ),

taken at a = 2 x the one-sided level (one side of the symmetric boundary; `scripts/
calibrate_stats.py` measures the error rates that result); rho = max_drop^2, so the boundary is
tightest where the margin is about to be resolved. Chosen over a group-sequential design with an
alpha-spending function because it needs no planned number of looks or information fraction
(the variance of acceptance under a rerun is not known in advance), is closed form, and stays
valid if a user stops early or raises the maximum. The price is width: at a fixed look it is
wider than a fixed-sample interval (a factor of about 1.5 to 2 at these levels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from difftest.analysis.acceptance import AcceptanceCounts, decision_finding
from difftest.analysis.findings import Origin
from difftest.analysis.verdict import Verdict
from difftest.core.kinds import ArmSide, VerdictKind
from difftest.core.limits import MAX_SEQUENTIAL_RUNS
from difftest.core.proportion import z_quantile
from difftest.numerics.clustered import POWER, ClusterSums, paired_difference, t_quantile

BETA = round(1.0 - POWER, 10)  # the stated miss rate at the margin (80% power)
MIN_RUNS = 2  # no decision before the pair has been seen to vary between runs


@dataclass(frozen=True)
class Design:
    """What the sequential test guarantees: alpha (false DIFFER under no drop), beta (false
    AGREE under a drop of `margin`), and the most runs of each arm it may take."""

    margin: float
    alpha: float
    max_runs: int
    beta: float = BETA

    def __post_init__(self) -> None:
        if isinstance(self.max_runs, bool) or not isinstance(self.max_runs, int) or not (
                MIN_RUNS <= self.max_runs <= MAX_SEQUENTIAL_RUNS):
            raise ValueError(f"the maximum number of runs must be an integer from {MIN_RUNS} "
                             f"to {MAX_SEQUENTIAL_RUNS}, got {self.max_runs!r}")
        for name, x, hi in (("margin", self.margin, 1.0), ("alpha", self.alpha, 0.5),
                            ("beta", self.beta, 0.5)):
            if not (isinstance(x, float | int) and 0.0 < x < hi):
                raise ValueError(f"{name} must be in (0, {hi:g}), got {x!r}")

    def to_json(self) -> dict[str, object]:
        return {"max_drop": self.margin, "alpha": self.alpha, "beta": self.beta,
                "max_runs": self.max_runs, "min_runs": MIN_RUNS,
                "method": "normal-mixture confidence sequences (mixture SPRT) on B - A of "
                          "acc@j, request-clustered paired variance, Bonferroni over positions "
                          "for DIFFER"}


def half_width(variance: float, one_sided: float, rho: float) -> float:
    """The normal-mixture boundary's half-width at one-sided level `one_sided` (module doc)."""
    if variance <= 0.0:
        return 0.0
    a = min(2.0 * one_sided, 1.0)
    return math.sqrt(2.0 * variance * (variance + rho) / rho
                     * math.log(math.sqrt((variance + rho) / variance) / a))


def _t_scale(one_sided: float, df: float) -> float:
    """How much a variance estimated from `df` effective requests is widened: the squared ratio
    of Student's to the normal quantile at the level, as a fixed-sample t interval widens."""
    q = 1.0 - one_sided
    return (t_quantile(q, df) / z_quantile(q)) ** 2


@dataclass(frozen=True)
class PositionLook:
    """B - A of acc@j at one look and its two bounds: `upper` (DIFFER below 0) and `lower`
    (AGREE above -margin); None where there is no interval (under two requests)."""

    j: int
    a: float
    b: float
    upper: float | None
    lower: float | None

    @property
    def diff(self) -> float:
        return self.b - self.a

    def to_json(self) -> dict[str, object]:
        return {"j": self.j, ArmSide.A: self.a, ArmSide.B: self.b, "b_minus_a": self.diff,
                "differ_bound": self.upper, "agree_bound": self.lower}


@dataclass(frozen=True)
class Look:
    """The state after `runs` runs of each arm."""

    runs: int
    verifies: tuple[int, int]
    requests: int
    positions: tuple[PositionLook, ...]
    decision: VerdictKind | None  # None: go on

    def to_json(self) -> dict[str, object]:
        return {"runs": self.runs, "verifies": list(self.verifies), "requests": self.requests,
                "decision": None if self.decision is None else self.decision.value,
                "positions": [p.to_json() for p in self.positions]}


@dataclass
class Tally:
    """Both arms' drafted verifies of every round so far (labels name the request, and the
    round's input where rounds run on different inputs)."""

    a: list[AcceptanceCounts] = field(default_factory=list)
    b: list[AcceptanceCounts] = field(default_factory=list)

    def add(self, a: AcceptanceCounts, b: AcceptanceCounts) -> None:
        self.a.append(a)
        self.b.append(b)

    @property
    def runs(self) -> int:
        return len(self.a)


def _joined(parts: list[AcceptanceCounts]) -> AcceptanceCounts:
    return AcceptanceCounts(np.concatenate([p.label for p in parts]),
                            np.concatenate([p.k for p in parts]),
                            np.concatenate([p.acc for p in parts]))


def look(tally: Tally, design: Design, *, repeated: bool = False) -> Look:
    """Judge what the tally holds: DIFFER, AGREE, or None to run another round (the module
    docstring gives the rule; no decision under MIN_RUNS runs, UNINFORMATIVE at the maximum).
    `repeated`: the last round added nothing (its reruns repeated earlier streams), so no
    later one will: the tally's evidence is final, a drop it shows at this look is DIFFER
    (the bounds hold at any look), anything else UNINFORMATIVE, never an AGREE resting on
    one draw counted as several."""
    ca, cb = _joined(tally.a), _joined(tally.b)
    depth = int(max(ca.k.max(initial=0), cb.k.max(initial=0)))
    rho = design.margin ** 2
    floor = (1.0 / ca.acc.size ** 2 if ca.acc.size else math.inf) + \
        (1.0 / cb.acc.size ** 2 if cb.acc.size else math.inf)
    positions = []
    differ, agree = False, depth > 0
    requests = int(np.union1d(ca.label, cb.label).size)
    for j in range(1, depth + 1):
        la, sa = ClusterSums.labelled(ca.acc >= j, ca.label)
        lb, sb = ClusterSums.labelled(cb.acc >= j, cb.label)
        pd = paired_difference(sa, la, sb, lb)
        a_rate, b_rate = sa.ratio, sb.ratio
        if pd is None:
            positions.append(PositionLook(j, a_rate, b_rate, None, None))
            agree = agree and a_rate <= design.margin
            continue
        var = max(pd.se ** 2, floor)
        upper = pd.diff + half_width(var * _t_scale(design.alpha / depth, pd.df), design.alpha / depth,
                                     rho)
        lower = pd.diff - half_width(var * _t_scale(design.beta, pd.df), design.beta, rho)
        positions.append(PositionLook(j, pd.a, pd.b, upper, lower))
        differ = differ or upper < 0.0
        agree = agree and (lower > -design.margin or pd.a <= design.margin)
    decision: VerdictKind | None = None
    if repeated:
        decision = VerdictKind.DIFFER if differ else VerdictKind.UNINFORMATIVE
    elif tally.runs >= MIN_RUNS:
        if differ:
            decision = VerdictKind.DIFFER
        elif agree:
            decision = VerdictKind.AGREE
    if decision is None and (tally.runs >= design.max_runs or depth == 0):
        decision = VerdictKind.UNINFORMATIVE  # the maximum, or no drafted verify to judge
    return Look(tally.runs, (int(ca.acc.size), int(cb.acc.size)), requests, tuple(positions),
                decision)


@dataclass(frozen=True)
class SequentialResult:
    """Every look of a sequential comparison and what it decided."""

    design: Design
    looks: tuple[Look, ...]
    inputs: tuple[str, ...] = ()  # the input of each round, where the arms take one
    repeated: int = 0  # request reruns not counted: both arms' streams repeated a past round's
    deterministic: bool = False  # the last round repeated every request: the test stopped

    @property
    def decision(self) -> VerdictKind:
        last = self.looks[-1].decision if self.looks else None
        return VerdictKind.UNINFORMATIVE if last is None else last

    @property
    def runs(self) -> int:
        return self.looks[-1].runs if self.looks else 0

    def boundary(self) -> str:
        """The decision boundary at the last look, for the position that decided (else the
        first): where B - A had to fall to stop."""
        last = self.looks[-1]
        judged = [p for p in last.positions if p.upper is not None and p.lower is not None]
        if not judged:
            return "no position had an interval (under two requests)"
        pick = judged[0]
        if self.decision is VerdictKind.DIFFER:
            pick = next(p for p in judged if p.upper is not None and p.upper < 0)
        assert pick.upper is not None and pick.lower is not None
        differ_at = pick.diff - pick.upper  # B - A below this is DIFFER
        agree_at = -self.design.margin + (pick.diff - pick.lower)  # above this is AGREE
        return (f"at run {last.runs}, acc@{pick.j}: B - A {pick.diff:+.4f}; DIFFER below "
                f"{differ_at:+.4f}, AGREE above {agree_at:+.4f}")

    def _agreed_by_ceiling(self) -> str:
        """Where AGREE rests on A's acceptance being at most the margin (no larger drop fits)
        rather than on a bound: the sentence that says so, else ''."""
        m = self.design.margin
        low = [p for p in self.looks[-1].positions
               if p.lower is None or p.lower <= -m]
        if not low:
            return ""
        top = max(p.a for p in low)
        if len(low) == len(self.looks[-1].positions):
            return (f"; A accepted at most {top:.4f} at every position: no drop larger than "
                    f"max_drop {m:g} is possible, so AGREE says only that, not that B "
                    "accepts as A does")
        where = ", ".join(f"acc@{p.j}" for p in low)
        return (f"; at {where} A accepted at most {top:.4f}: no drop larger than max_drop "
                f"{m:g} is possible there, so those positions agree without a bound")

    def reasons(self) -> list[str]:
        d = self.design
        head = (f"sequential test (--until-decided): {self.decision.value} after {self.runs} "
                f"run(s) of each arm (at most {d.max_runs}); alpha {d.alpha:g} (false DIFFER "
                f"where B accepts as A), beta {d.beta:g} (false AGREE where B's acceptance "
                f"dropped by max_drop {d.margin:g}); {self.boundary()}")
        if self.decision is VerdictKind.AGREE:
            head += self._agreed_by_ceiling()
        if self.repeated:
            head += (f"; {self.repeated} rerun(s) of a request not counted: both arms drafted "
                     "and emitted there exactly what an earlier round traced, the same draw "
                     "again")
        if not self.looks[-1].positions:
            head += "; neither arm traced a drafted verify, so there is no acceptance to test"
        elif self.deterministic:
            head += (f"; run {self.runs} repeated every request's drafted and emitted stream "
                     "of an earlier run in both arms: the arms are deterministic on these "
                     "inputs, so reruns add nothing; run more requests instead (more per run, "
                     "or arms taking a {seed} input with gate_input, which run each round on "
                     "new inputs)")
        elif self.decision is VerdictKind.UNINFORMATIVE:
            head += ("; the maximum was reached before the evidence decided: raise it, or "
                     "run more requests per run")
        return [head]

    def to_json(self) -> dict[str, object]:
        return {"decision": self.decision.value, "runs": self.runs,
                "design": self.design.to_json(), "boundary": self.boundary(),
                "inputs": list(self.inputs), "repeated": self.repeated,
                "deterministic": self.deterministic, "looks": [x.to_json() for x in self.looks]}


def fold(verdict: Verdict, result: SequentialResult) -> Verdict:
    """The comparison's verdict with the sequential decision in place of the fixed-sample
    acceptance gate: a drop is a difference; a test that did not decide leaves no agreement
    standing."""
    if verdict.kind is VerdictKind.ARM_FAILED:
        return verdict
    found = decision_finding(Origin.SEQUENTIAL, result.decision, result.reasons())
    return verdict.joined(found, last=found.reasons)
