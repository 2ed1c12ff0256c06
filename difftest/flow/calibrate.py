"""`difftest calibrate`: thresholds measured on held-out inputs, and proof that they still tell a
known-wrong arm from a harmless one.

The pair is run on each of the comparison's `calibration_inputs` (never its `gate_input`) and
compared bitwise. Per input i, D_i is the largest logit difference and F_i the largest margin of
a row whose token flipped (0 without a flip), the margin the near-tie rule judges: the larger
arm's gap between the two flipped tokens. atol is an upper tolerance bound on D (coverage
0.99 of the inputs' population at confidence 0.95), rtol is 0, and near_tie is the larger of
2 * atol (the derived rule) and the same bound on F.

The bound: with n samples, the sample maximum covers a fraction p of the population with
confidence 1 - p**n, distribution-free; for p = 0.99 that reaches 0.95 only from n = 299 on.
Below that, D is modelled as exponential with unknown scale (a heavier tail than the half-normal
that sums of rounding errors give, so the bound errs on the loose side): the sum S of n samples
is Gamma(n, theta), 2S/theta is chi-square with 2n degrees of freedom, a one-sided 95% upper
confidence bound on theta is 2S / chi2_{2n}(0.05), and the 0.99 quantile theta * ln(100) is
bounded by 2 * ln(100) * S / chi2_{2n}(0.05). For n = 3 that is 16.9 times the mean; the
multiplier reported is the bound over the largest D.

Then each of the comparison's probes (mutations of arm B) runs on the same inputs. A gate
catches a probe by a logit difference above atol or by a flip whose margin reaches near_tie, and
it judges a printed difference by what the print makes certain, the difference minus the arms'
half quanta (`difftest.numerics.tolerance.resolved_difference`, the same function). So a probe's strength
on one input is the larger of (its largest certain logit difference / atol) and (its largest
flip margin / near_tie).

The separation is a bound, not the smallest strength the inputs happened to show: log strength
is modelled as normal across inputs, and the separation is the 95% lower prediction bound for
an unseen input, `exp(mean - t_{0.95, n-1} * sd * sqrt(1 + 1/n))` over the inputs' log
strengths, of the weakest probe (`strength_bound`). It needs two inputs (`MIN_INPUTS`), even
where every difference is a certain catch: one input shows no spread, nor whether the probe
moves the next one (without the model, one catch in one bounds the catch rate only from 0.05
up, n in n from 0.05**(1/n): `catch_rate_bound`, stated beside an infinite separation); a probe
that missed an input (strength 0) has none; inputs where a probe's difference has no finite
size are certain catches and left out of the spread. Then the benign pair on each input is
judged by the gate itself (`evaluate`) at the thresholds file calibrate arrived at
(`gate_benign`): D_i covers only the rows compared before the arms' committed streams parted,
and a pair the gate calls wrong on one of its own inputs cannot be certified by it. The file
is written only when the gate catches every probe on every input, the separation reaches
`MARGIN` (1) and the gate agrees with the benign pair on every input; otherwise nothing is
written, the exit code is 3, and calibrate says how many inputs would bring the bound to the
margin if the strengths kept the mean and spread it saw (`inputs_needed`: more inputs shrink
atol, by the bound's multiplier, and the t quantile), or names the input the gate fails the
benign pair on and why.

Calibrate also records the benign pair's rates at the thresholds it writes, which a gate judges
its own against (`difftest.analysis.benign`): the near-tie flip rate (compared rows whose flip
the written near_tie excuses) and the rate of logit rows above the benign level (the 0.9
quantile of the benign rows' differences, pooled), each with its rows, request clusters (input
and request) and effective number of independent rows. And it records the machine
(`difftest.core.machine`): a file whose every benign sample was zero is bitwise there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from difftest.core.atomic import check_writable, write_text_atomic
from difftest.analysis.compare import (DIFFER, NEAR_TIE, NOISE_FLIP, SAME, Comparison, compare,
                                       near_tie_rows)
from difftest.config import INPUT_TOKEN, ArmSpec, ComparisonSpec, Config
from difftest.core.names import on_input
from difftest.core.machine import this_machine
from difftest.core.proportion import RATE_ALPHA
from difftest.core.thresholds import DISARMING_BOUND, LEVEL_QUANTILE, BenignRate, read_thresholds
from difftest.numerics.clustered import clustered_rate, t_quantile
from difftest.core.rules import BARE
from difftest.core.errors import ArmFailure, ExitCode, UsageError
from difftest.core.gitinfo import git_head
from difftest.core.kinds import AlignMode, DecodingMode, Expect, VerdictKind
from difftest.analysis.audit import AuditThresholds
from difftest.flow.evaluate import (ArmOutcome, drafting_of, evaluate, outcomes_from_run,
                                    thresholds_of)
from difftest.flow.overrides import RunOptions
from difftest.flow.plan import Evidence, Plan, PlanKind, evidence_of
from difftest.flow.run import job_limits, run

COVERAGE = 0.99
CONFIDENCE = 0.95
MARGIN = 1.0  # the separation bound a file needs: each probe above the thresholds
SEPARATION_CONFIDENCE = 0.95  # of the lower prediction bound on a probe's strength
MAX_INPUTS = 200  # the most inputs `inputs_needed` looks for
MIN_INPUTS = 2  # the fewest a bound needs: one input shows no spread


@dataclass(frozen=True)
class Bound:
    """An upper tolerance bound on a sample and how it was had."""

    value: float
    multiplier: float  # value / max(sample); 1.0 for a zero sample
    method: str


def chi2_even_quantile(dof: int, prob: float) -> float:
    """The `prob` quantile of chi-square with an even number of degrees of freedom, by bisection
    on its closed form: P(X <= x) = 1 - exp(-x/2) * sum_{k < dof/2} (x/2)**k / k!."""
    if dof <= 0 or dof % 2:
        raise ValueError(f"dof must be even and positive, got {dof}")
    m = dof // 2

    def cdf(x: float) -> float:
        h = x / 2
        term, total = 1.0, 1.0
        for k in range(1, m):
            term *= h / k
            total += term
        return 1.0 - math.exp(-h) * total

    lo, hi = 0.0, max(1.0, 4.0 * dof)
    while cdf(hi) < prob:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) < prob:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def nonparametric_confidence(n: int, coverage: float = COVERAGE) -> float:
    """Confidence that the largest of n samples covers `coverage` of the population."""
    return 1.0 - coverage ** n


def upper_bound(sample: Sequence[float], coverage: float = COVERAGE,
                confidence: float = CONFIDENCE) -> Bound:
    """An upper bound covering `coverage` of the population at `confidence` (module docstring)."""
    n = len(sample)
    if n == 0:
        raise ValueError("no sample")
    top = max(sample)
    if top == 0.0:
        return Bound(0.0, 1.0, "every sample is zero: bitwise")
    if nonparametric_confidence(n, coverage) >= confidence:
        return Bound(top, 1.0, f"nonparametric: the largest of {n} covers {coverage} at "
                               f"{nonparametric_confidence(n, coverage):.3f}")
    chi2 = chi2_even_quantile(2 * n, 1.0 - confidence)
    value = 2.0 * math.log(1.0 / (1.0 - coverage)) * math.fsum(sample) / chi2
    return Bound(value, value / top,
                 f"exponential model: 2*ln(1/(1-{coverage}))*sum/chi2_{2 * n}({1 - confidence:.2f}) "
                 f"(n = {n} < {_nonparametric_n(coverage, confidence)}, too few for the "
                 f"distribution-free bound: confidence {nonparametric_confidence(n, coverage):.3f})")


def _nonparametric_n(coverage: float, confidence: float) -> int:
    return math.ceil(math.log(1 - confidence) / math.log(coverage))


def model_multiplier(n: int, coverage: float = COVERAGE, confidence: float = CONFIDENCE) -> float:
    """The exponential model's bound over the sample mean with n samples:
    2 n ln(1/(1-coverage)) / chi2_{2n}(1-confidence) (16.9 at n = 3, 8.5 at 10)."""
    return 2.0 * n * math.log(1.0 / (1.0 - coverage)) / chi2_even_quantile(2 * n, 1.0 - confidence)


def _log_spread(strengths: Sequence[float]) -> tuple[float, float, int] | None:
    """Mean and sample standard deviation of the finite log strengths and their count (None:
    fewer than two)."""
    logs = [math.log(s) for s in strengths if math.isfinite(s)]
    n = len(logs)
    if n < 2:
        return None
    mean = math.fsum(logs) / n
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (n - 1)), n


def prediction_bound(mean: float, sd: float, n: int,
                     confidence: float = SEPARATION_CONFIDENCE) -> float:
    """The lower 1-sided prediction bound, in log space, for one more draw of a normal sample
    of n with this mean and standard deviation."""
    return mean - t_quantile(confidence, n - 1) * sd * math.sqrt(1.0 + 1.0 / n)


def strength_bound(strengths: Sequence[float],
                   confidence: float = SEPARATION_CONFIDENCE) -> float:
    """A lower confidence bound on a probe's strength on an unseen input (module docstring):
    0 when it missed an input, when there are fewer than MIN_INPUTS inputs (one input, even a
    certain catch, says nothing of the next) or fewer than two give a finite strength; inf when
    every one of MIN_INPUTS or more inputs is a certain catch."""
    if len(strengths) < MIN_INPUTS or any(s <= 0.0 for s in strengths):
        return 0.0
    if all(math.isinf(s) for s in strengths):
        return math.inf
    spread = _log_spread(strengths)
    if spread is None:
        return 0.0
    return math.exp(prediction_bound(*spread, confidence))


def inputs_needed(strengths: Sequence[float], n_inputs: int, margin: float = MARGIN,
                  confidence: float = SEPARATION_CONFIDENCE) -> int | None:
    """How many calibration inputs would bring `strength_bound` to `margin`, if the log
    strengths kept the mean and spread seen on `n_inputs` and atol shrank with n as the
    exponential model's multiplier does (near_tie with it): the smallest such n up to
    MAX_INPUTS, `n_inputs` when the bound already reaches it, None when none does (a probe
    that missed an input, or too few finite strengths to see a spread). Certain catches on
    every input need MIN_INPUTS of them."""
    if any(s <= 0.0 for s in strengths):
        return None
    spread = _log_spread(strengths)
    if spread is None:
        return max(n_inputs, MIN_INPUTS) if all(math.isinf(s) for s in strengths) \
            and strengths else None
    mean, sd, _ = spread
    here = model_multiplier(n_inputs)

    def reaches(n: int) -> bool:
        grown = mean + math.log(here / model_multiplier(n))
        return prediction_bound(grown, sd, n, confidence) >= math.log(margin)

    if reaches(n_inputs):
        return n_inputs
    if not reaches(MAX_INPUTS):
        return None
    lo, hi = n_inputs, MAX_INPUTS  # reaches(lo) is false, reaches(hi) true: the bound grows
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return hi


def catch_rate_bound(n: int, confidence: float = SEPARATION_CONFIDENCE) -> float:
    """The lower confidence bound on a probe's catch rate after n catches in n inputs, with no
    model of its strength: (1 - confidence) ** (1/n) (0.05 at n = 1, 0.22 at 2, 0.74 at 10)."""
    return float((1.0 - confidence) ** (1.0 / n))


@dataclass(frozen=True)
class ProbeSeparation:
    """One probe on each input: its largest printed logit difference, the largest difference
    that print makes certain (what a tolerance is judged by, `difftest.numerics.tolerance`; inf: a
    compared row shared no id), and the largest margin of a row it flipped (0: none flipped)."""

    mutation: str
    differences: tuple[float, ...]
    flip_margins: tuple[float, ...]
    resolved: tuple[float, ...]

    @property
    def weakest(self) -> float:
        return min(self.differences)

    def _per_input(self, atol: float, near_tie: float) -> list[tuple[float, bool]]:
        """Per input: how far past the thresholds the probe is, and whether the gate catches it
        there. By the gate's rules: a logit difference counts when what the print makes certain
        is above atol (bitwise, any printed difference counts), and a flip is no near-tie when
        its margin reaches near_tie."""
        out = []
        for d, r, f in zip(self.differences, self.resolved, self.flip_margins, strict=True):
            if atol > 0:
                logit, by_logit = r / atol, r > atol
            else:
                logit, by_logit = (math.inf, True) if d > 0 else (0.0, False)
            flip = math.inf if near_tie == 0.0 and f > 0 else (f / near_tie if near_tie else 0.0)
            out.append((max(logit, flip), by_logit or flip >= 1.0))
        return out

    def strength(self, atol: float, near_tie: float) -> float:
        """How far past the thresholds the probe is on its weakest input."""
        return min(s for s, _ in self._per_input(atol, near_tie))

    def strengths(self, atol: float, near_tie: float) -> list[float]:
        """How far past the thresholds the probe is, per input."""
        return [s for s, _ in self._per_input(atol, near_tie)]

    def bound(self, atol: float, near_tie: float) -> float:
        """The lower confidence bound on its strength on an unseen input (`strength_bound`)."""
        return strength_bound(self.strengths(atol, near_tie))

    def caught(self, atol: float, near_tie: float) -> bool:
        """Whether the gate, at these thresholds, catches the probe on every input (a certain
        difference exactly at atol is no difference: the gate counts only those above it)."""
        return all(c for _, c in self._per_input(atol, near_tie))


@dataclass(frozen=True)
class BenignVerdict:
    """The benign pair on one calibration input as the gate judges it at the thresholds
    calibrate arrived at: its verdict kind, and the reasons that decided it."""

    input: str
    kind: VerdictKind
    reasons: tuple[str, ...]

    def sentence(self) -> str:
        return f"input {self.input}: {self.kind.value}: " + "; ".join(self.reasons)


@dataclass(frozen=True)
class Calibration:
    """What `calibrate` measured and decided."""

    comparison: str
    inputs: tuple[str, ...]
    benign: tuple[float, ...]  # D_i
    flip_margins: tuple[float, ...]  # F_i
    atol: Bound
    near_tie: float
    probes: tuple[ProbeSeparation, ...]
    run_dir: Path
    written: Path | None
    failures: tuple[ArmFailure, ...] = ()
    # the benign pair's rates at the thresholds, and the level of the second
    near_tie_flips: BenignRate | None = None
    logit_level: float | None = None
    above_level: BenignRate | None = None
    # the benign pair judged by the gate at these thresholds on each input (None: not judged,
    # as for a teacher-forced comparison, whose gate forces what calibrate ran free)
    gated: tuple[BenignVerdict, ...] | None = None

    @property
    def benign_failing(self) -> tuple[BenignVerdict, ...]:
        """The calibration inputs on which the gate, at these thresholds, fails the benign pair
        (a difference D_i does not see: the rows after a committed stream parted are not
        compared, nor is what the arms do not trace)."""
        return tuple(g for g in self.gated or () if g.kind is not VerdictKind.AGREE)

    @property
    def separation(self) -> float | None:
        """The weakest probe's lower confidence bound on its strength over the thresholds on an
        unseen input (None: no probe ran)."""
        if not self.probes:
            return None
        return min(p.bound(self.atol.value, self.near_tie) for p in self.probes)

    @property
    def weakest_probe(self) -> str:
        return min(self.probes, key=lambda p: p.bound(self.atol.value, self.near_tie)).mutation

    @property
    def needed(self) -> int | None:
        """The inputs that would bring every probe's bound to MARGIN (None: no count does)."""
        counts = [inputs_needed(p.strengths(self.atol.value, self.near_tie), len(self.inputs))
                  for p in self.probes]
        return None if not counts or None in counts else max(c for c in counts if c is not None)

    @property
    def caught(self) -> bool:
        """Every probe fails the gate at these thresholds, on every input."""
        return bool(self.probes) and all(p.caught(self.atol.value, self.near_tie)
                                         for p in self.probes)

    @property
    def bounded(self) -> bool:
        """The separation bound reaches MARGIN."""
        s = self.separation
        return s is not None and s >= MARGIN

    @property
    def exit_code(self) -> ExitCode:
        if self.failures:
            return ExitCode.ARM_FAILED
        return (ExitCode.OK if self.caught and self.bounded and not self.benign_failing
                and not self.flips_unjudged else ExitCode.UNINFORMATIVE)

    @property
    def flips_unjudged(self) -> bool:
        """near_tie excuses flips, and the benign flip rate seen is too wide to judge a gate's
        against (its bound reaches DISARMING_BOUND): a file without it would let a gate excuse
        any number of near-tie flips."""
        rate = self.near_tie_flips
        return self.near_tie > 0 and rate is not None and rate.disarms

    def _refusal(self) -> str:
        """Why the thresholds are refused, and how many inputs would do."""
        n = len(self.inputs)
        weakest = self.weakest_probe
        if not self.caught:
            why = (f"on some input probe {weakest} stays within atol {self.atol.value:.3g} and "
                   f"near_tie {self.near_tie:.3g} (a difference counts only when its printed "
                   "value minus the arms' half quanta is above atol): these thresholds cannot "
                   "tell benign from wrong")
        elif n < MIN_INPUTS:
            why = (f"every probe was caught on the one input, but one input shows no spread: "
                   f"the {SEPARATION_CONFIDENCE:.0%} lower bound of a probe's strength on an "
                   f"unseen input needs {MIN_INPUTS} inputs or more (one catch bounds the catch "
                   f"rate on an unseen input only from {catch_rate_bound(n):.2g} up)")
        else:
            why = (f"every probe was caught on the {n} input(s), but the "
                   f"{SEPARATION_CONFIDENCE:.0%} lower bound of probe {weakest}'s strength on an "
                   "unseen input is below the margin")
        need = self.needed
        if need is not None:
            return why + (f"; about {need} inputs would reach it if the probes kept the strength "
                          "and spread seen here")
        if any(s <= 0.0 for p in self.probes
               for s in p.strengths(self.atol.value, self.near_tie)):
            return why  # a probe with no difference at all on an input: no count helps
        if n < MIN_INPUTS:
            return why + (f"; use {MIN_INPUTS} inputs or more (how many more depends on the "
                          "spread they show)")
        lone = self._lone_finite()
        if lone is not None:
            return why + (f"; probe {lone} was a certain catch on {n - 1} of the {n} inputs and "
                          "finite on one: one finite strength shows no spread, so no count can "
                          f"be read from it; about {2 * n} inputs would show two (if finite "
                          "strengths keep their share)")
        return why + (f"; no count up to {MAX_INPUTS} inputs would reach it at the spread seen "
                      "here")

    def _lone_finite(self) -> str | None:
        """A probe whose strength was finite on exactly one input, every other input a certain
        catch (inf): its bound is 0 for want of a spread, not for a weak probe."""
        for p in self.probes:
            finite = [s for s in p.strengths(self.atol.value, self.near_tie) if math.isfinite(s)]
            if len(finite) == 1:
                return p.mutation
        return None

    def summary(self) -> list[str]:
        lines = [f"calibrate {self.comparison}: inputs {', '.join(self.inputs)} (n = "
                 f"{len(self.inputs)})"]
        if self.failures:
            return lines + [f"  - ARM-FAILED: {f}" for f in self.failures]
        lines.append("  - largest benign logit difference per input: "
                     + ", ".join(f"{d:.3g}" for d in self.benign))
        lines.append(f"  - atol {self.atol.value:.3g} (x{self.atol.multiplier:.3g} the largest; "
                     f"{self.atol.method}), rtol 0, near_tie {self.near_tie:.3g}")
        for p in self.probes:
            lines.append(f"  - probe {p.mutation}: logit differences "
                         + ", ".join(f"{d:.3g}" for d in p.differences) + " (certain "
                         + ", ".join(f"{r:.3g}" for r in p.resolved) + "); flip margins "
                         + ", ".join(f"{f:.3g}" for f in p.flip_margins)
                         + f" (x{p.strength(self.atol.value, self.near_tie):.3g} the thresholds"
                         + f" on its weakest input; bound x{p.bound(self.atol.value, self.near_tie):.3g})")
        for name, rate in (("near-tie flip rate", self.near_tie_flips),
                           ("rate of logit rows above the benign level", self.above_level)):
            if rate is not None:
                level = (f" {self.logit_level:.3g}" if rate is self.above_level
                         and self.logit_level is not None else "")
                said = ("what a gate's rate is judged against" if not rate.disarms else
                        f"its {1 - RATE_ALPHA:.0%} upper bound {rate.upper_bound:.3g} reaches "
                        f"{DISARMING_BOUND:g}, which no gate's rate could be shown to exceed "
                        "(more inputs narrow it); not written to a file")
                lines.append(f"  - benign {name}{level}: {rate.events}/{rate.rows} rows "
                             f"({rate.requests} requests, {rate.effective_rows:.3g} effective "
                             f"rows): {said}")
        s = self.separation
        if s is None:
            lines.append("  - no probe configured: the separation of benign and wrong cannot be "
                         "measured; nothing written (exit 3). Name mutations in `mutations`.")
        elif not (self.caught and self.bounded):
            lines.append(f"  - separation {s:.3g} < {MARGIN:g}: {self._refusal()}; nothing "
                         "written (exit 3)")
        elif self.benign_failing:
            lines.append(f"  - separation {s:.3g}, but the gate at these thresholds fails the "
                         "benign pair on its own calibration input(s): thresholds that call "
                         "the pair wrong cannot certify it; nothing written (exit 3)")
        elif self.flips_unjudged:
            lines.append(f"  - separation {s:.3g}, but near_tie {self.near_tie:.3g} excuses "
                         "flips one at a time and the benign near-tie flip rate seen is too "
                         "wide to judge a gate's rate against: add calibration inputs; nothing "
                         "written (exit 3)")
        else:
            lines.append(f"  - separation {s:.3g} (the {SEPARATION_CONFIDENCE:.0%} lower bound of "
                         "the weakest probe's strength over the thresholds on an unseen input, "
                         f"from the spread of {len(self.inputs)} inputs)")
            if math.isinf(s):
                n = len(self.inputs)
                lines.append(f"  - every probe was caught on all {n} inputs by a difference of "
                             "no finite size (any difference under a bitwise benign pair, top "
                             "lists sharing no id, a flip whose margin is not traced): the "
                             "model, as for finite strengths, takes a probe that moved "
                             "every input to move an unseen one; without it, "
                             f"{n} catches of {n} bound the catch rate on an unseen input only "
                             f"from {catch_rate_bound(n):.2g} up ({CONFIDENCE:.0%})")
        lines += [f"  - benign pair at these thresholds, {g.sentence()}"
                  for g in self.benign_failing]
        if self.gated is None and self.probes:
            lines.append("  - the benign pair was not judged at the gate: the comparison is "
                         "teacher-forced, and calibrate runs its arms free (a parted stream "
                         "cannot part where B replays A's)")
        if self.written is not None:
            lines.append(f"  - thresholds written to {self.written}")
        return lines + [f"run directory: {self.run_dir}"]


@dataclass(frozen=True)
class _BenignRows:
    """One input's benign compared rows: what the rates at the written thresholds count."""

    flipped: np.ndarray  # bool: the tokens flipped
    flip_a: np.ndarray  # the margins the near-tie rule judges a flip by
    flip_b: np.ndarray
    diff: np.ndarray  # |A - B| of the row's logits (nan: none)
    groups: np.ndarray  # the request cluster

    @classmethod
    def of(cls, c: Comparison, index: int) -> _BenignRows:
        r = c.rows
        keep = r.compared
        req = r.req[keep] if c.mode is AlignMode.POSITION else r.pos[keep]
        return cls((r.status == DIFFER)[keep], r.flip_margin_a[keep], r.flip_margin_b[keep],
                   r.abs_logit_diff[keep], index * (1 << 32) + req.astype(np.int64))


def _benign_rate(values: np.ndarray, groups: np.ndarray) -> BenignRate | None:
    rate = clustered_rate(values, groups)
    if rate is None:
        return None
    return BenignRate(int(values.sum()), rate.rows, rate.clusters, rate.effective_rows)


def benign_rates(rows: Sequence[_BenignRows], near_tie: float
                 ) -> tuple[BenignRate | None, float | None, BenignRate | None]:
    """The benign near-tie flip rate at `near_tie`, the benign logit level and the rate of
    rows above it, pooled over the inputs and clustered by (input, request)."""
    if not rows:
        return None, None, None
    groups = np.concatenate([b.groups for b in rows])
    with np.errstate(invalid="ignore"):
        near = np.concatenate([b.flipped & near_tie_rows(b.flip_a, b.flip_b, near_tie)
                               for b in rows])
    flips = _benign_rate(near, groups)
    diff = np.concatenate([b.diff for b in rows])
    finite = np.isfinite(diff)
    if not finite.any():
        return flips, None, None
    level = float(np.quantile(diff[finite], LEVEL_QUANTILE, method="higher"))
    return flips, level, _benign_rate(diff[finite] > level, groups[finite])


def _largest_diff(c: Comparison) -> float:
    """The largest logit difference of a comparison; inf when rows share no id or only one arm
    traced logits (a difference with no finite size is no small one)."""
    if c.logits is None or c.logit_rows_compared == 0:
        raise UsageError("calibrate needs block logits in both arms (VT_SPEC_TRACE=3)")
    r = c.rows
    compared = np.isin(r.status, (SAME, DIFFER, NEAR_TIE, NOISE_FLIP))
    traced = ~np.isnan(r.margin_a) & ~np.isnan(r.margin_b)
    # rows of a sequential block after a flip ran on another token and are not compared
    if np.any(compared & traced & np.isnan(r.abs_logit_diff)):
        return math.inf
    return float(c.max_abs_logit_diff or 0.0)


def _largest_resolved(c: Comparison) -> float:
    """The largest logit difference the print makes certain, over the compared rows (inf as
    for `_largest_diff`)."""
    largest = _largest_diff(c)
    if math.isinf(largest):
        return math.inf
    r = c.rows
    compared = r.compared & ~np.isnan(r.resolved_logit_diff)
    return float(r.resolved_logit_diff[compared].max()) if compared.any() else 0.0


def _flip_margin(c: Comparison) -> float:
    r = c.rows
    flipped = r.status == DIFFER
    if not flipped.any():
        return 0.0
    # the margins the near-tie rule judges a flip on (difftest.analysis.compare.flip_margins)
    margins = np.fmax(r.flip_margin_a[flipped], r.flip_margin_b[flipped])
    return float(np.nanmax(margins)) if np.isfinite(margins).any() else math.inf


def calibrate(config: Config, spec: ComparisonSpec, *, run_root: Path | None = None,
              progress: bool | None = None, write: bool = True,
              jobs: int | None = None) -> Calibration:
    """Run the pair and its probes on the held-out inputs and set thresholds from them, at
    most `jobs` arms at once (-j; by default as `check` runs them)."""
    job_limits(config, jobs)  # -j checked before anything else
    if spec.rules.expect is not Expect.SAME:
        raise UsageError(f"comparison {spec.name}: calibrate sets thresholds for expect = "
                         "\"same\" comparisons")
    if spec.rules.decoding is DecodingMode.SAMPLED:
        raise UsageError(f"comparison {spec.name}: decoding = \"sampled\" is judged in "
                         "distribution, with no atol, rtol or near_tie to calibrate (its level "
                         "is alpha; docs/statistics.md)")
    if not spec.calibration_inputs:
        raise UsageError(f"comparison {spec.name}: set calibration_inputs (held-out inputs, "
                         f"e.g. [1, 2, 3]) to calibrate")
    if not spec.thresholds:
        raise UsageError(f"comparison {spec.name}: set thresholds = \"FILE.toml\" (where "
                         "calibrate writes them)")
    if write:  # before the runs: a file that cannot be written would waste every one of them
        check_writable(Path(spec.thresholds))
    arm_a, arm_b = config.arm(spec.arm_a), config.arm(spec.arm_b)
    if not (arm_a.takes_input or arm_b.takes_input):
        raise UsageError(f"comparison {spec.name}: neither arm takes {INPUT_TOKEN} in its "
                         "command or env, so every input would run the same thing")
    runs: list[ArmSpec] = []
    for i, value in enumerate(spec.calibration_inputs):
        a = arm_a.with_input(value).with_changes(name=on_input("A", arm_a.name, value, i))
        b = arm_b.with_input(value).with_changes(name=on_input("B", arm_b.name, value, i))
        runs += [a, b, *(config.mutation(m).apply(b) for m in spec.rules.mutations)]
    th = thresholds_of(config)
    plan = Plan(PlanKind.CALIBRATE, f"calibrate-{spec.name}", tuple(runs), (), config.audit,
                config.path, launched_jobs=config.defaults.launched_jobs,
                extra={"calibrate": spec.name})
    ran = run(plan, RunOptions(run_root=run_root, progress=progress, jobs=jobs))
    run_dir, results = ran.run_dir, ran.arms
    rows: list[_BenignRows] = []
    benign: list[float] = []
    margins: list[float] = []
    probe_diffs: dict[str, list[float]] = {m: [] for m in spec.rules.mutations}
    probe_flips: dict[str, list[float]] = {m: [] for m in spec.rules.mutations}
    probe_resolved: dict[str, list[float]] = {m: [] for m in spec.rules.mutations}
    failures: list[ArmFailure] = []
    pairs_of_benign: list[tuple[str, ArmOutcome, ArmOutcome]] = []
    for i, value in enumerate(spec.calibration_inputs):
        na, nb = on_input("A", arm_a.name, value, i), on_input("B", arm_b.name, value, i)
        a_out, b_out = outcomes_from_run(results, (na, nb), th)
        pairs: list[tuple[str | None, ArmOutcome]] = [(None, b_out)]
        for m in spec.rules.mutations:
            _, m_out = outcomes_from_run(results, (na, config.mutation(m).arm_name(nb)), th)
            pairs.append((m, m_out))
        for mutation, other in pairs:
            bad = [o.failure for o in (a_out, other) if o.failure is not None]
            if bad:
                failures += [f for f in bad if f not in failures]
                continue
            assert a_out.trace is not None and other.trace is not None
            drafting, source = drafting_of(spec, a_out, other)
            c = compare(a_out.trace, other.trace, BARE, drafting=drafting,
                        drafting_source=source)
            if mutation is None:
                pairs_of_benign.append((value, a_out, other))
                benign.append(_largest_diff(c))
                margins.append(_flip_margin(c))
                rows.append(_BenignRows.of(c, i))
            else:
                probe_diffs[mutation].append(_largest_diff(c))
                probe_flips[mutation].append(_flip_margin(c))
                probe_resolved[mutation].append(_largest_resolved(c))
    if failures:
        none = Bound(0.0, 1.0, "")
        return Calibration(spec.name, spec.calibration_inputs, (), (), none, 0.0, (), run_dir,
                           None, tuple(failures))
    if not all(math.isfinite(d) for d in benign):
        raise UsageError(f"comparison {spec.name}: on some calibration input the two arms' top "
                         "lists share no id at a compared row: no logit difference to bound "
                         "(a wider top-k, or arms that are not a benign pair)")
    atol = upper_bound(benign)
    flips = upper_bound(margins).value
    near_tie = max(2.0 * atol.value, flips)
    probes = tuple(ProbeSeparation(m, tuple(d), tuple(probe_flips[m]), tuple(probe_resolved[m]))
                   for m, d in probe_diffs.items())
    flips_rate, level, above = benign_rates(rows, near_tie)
    cal = Calibration(spec.name, spec.calibration_inputs, tuple(benign), tuple(margins), atol,
                      near_tie, probes, run_dir, None, (), flips_rate, level, above)
    if not probes:
        return cal  # no probe: nothing can be certified, nor a file written (exit 3)
    text = thresholds_toml(cal, git_head(config.path.resolve().parent))
    if not spec.rules.teacher_force:
        cal = replace(cal, gated=gate_benign(spec, text, run_dir, pairs_of_benign,
                                             evidence_of(config, spec), th))
    if write and cal.exit_code is ExitCode.OK:
        path = Path(spec.thresholds)
        write_text_atomic(path, text)
        cal = replace(cal, written=path)
    return cal


def gate_benign(spec: ComparisonSpec, text: str, run_dir: Path,
                pairs: Sequence[tuple[str, ArmOutcome, ArmOutcome]], evidence: Evidence,
                audit: AuditThresholds) -> tuple[BenignVerdict, ...]:
    """The benign pair on each calibration input, judged as the gate judges (`evaluate`) at the
    thresholds file `text`, read back as a gate reads it (kept in the run directory). D_i
    sees only the rows compared before the arms' committed streams parted; the gate sees the
    parting itself, and whatever else it judges."""
    candidate = run_dir / Path(spec.thresholds).name
    write_text_atomic(candidate, text)
    found = read_thresholds(candidate)
    gated = replace(spec, threshold_origin=found.origin, calibrated=found.calibrated).with_rules(
        atol=found.atol, rtol=found.rtol, near_tie=found.near_tie)
    out = []
    for value, a, b in pairs:
        verdict = evaluate(gated, a, b, audit, evidence=evidence).verdict
        decisive = [r for f in verdict.findings if f.kind is verdict.kind
                    for r in f.reasons] or list(verdict.reasons[:2])
        out.append(BenignVerdict(value, verdict.kind, tuple(decisive)))
    return tuple(out)


def _toml_value(v: object) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, float):
        return "inf" if math.isinf(v) else repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def thresholds_toml(cal: Calibration, sha: str | None,
                    machine: dict[str, str] | None = None) -> str:
    """The thresholds file: values a comparison reads, and where they came from."""
    prov: dict[str, object] = {
        "comparison": cal.comparison, "inputs": list(cal.inputs), "n": len(cal.inputs),
        "multiplier": cal.atol.multiplier, "method": cal.atol.method, "coverage": COVERAGE,
        "confidence": CONFIDENCE, "largest_benign": max(cal.benign),
        "largest_benign_margin": max(cal.flip_margins), "separation": cal.separation or 0.0,
        "weakest_probe": cal.weakest_probe, "git_sha": sha or "unknown",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    machine = this_machine() if machine is None else machine
    lines = ["# Written by `difftest calibrate`; see docs/thresholds.md.", "[thresholds]",
             f"atol = {cal.atol.value!r}", "rtol = 0.0", f"near_tie = {cal.near_tie!r}", "",
             "[provenance]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in prov.items()]
    lines += ["", "# the benign pair's rates at these thresholds: what a gate's rates are judged "
              "against", "[benign]"]
    if cal.logit_level is not None:
        lines.append(f"logit_level = {cal.logit_level!r}")
    for name, rate in (("near_tie_flips", cal.near_tie_flips), ("above_level", cal.above_level)):
        if rate is not None and not rate.disarms:  # the reader refuses a disarming rate
            lines += ["", f"[benign.{name}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in rate.to_json().items()]
    lines += ["", "# the machine these were measured on (a bitwise file is bitwise here)",
              "[machine]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in machine.items()]
    return "\n".join(lines) + "\n"
