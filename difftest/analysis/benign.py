"""Rates judged against the benign rate: each near-tie is excusable, their number is not.

A comparison with tolerances excuses a flip whose margin is below near_tie and a logit row
whose difference is within atol, one row at a time. A wrong arm whose every row stays inside
those rules passes, however many rows it moves. Two rates catch it: the **near-tie flip rate**
(compared rows whose tokens flipped by less than near_tie) and, under a calibrated file, the
**rate of logit rows above the benign level** (the per-row difference nine benign rows in ten
stayed within at calibration). Each is judged against the rate the benign pair showed:

- calibrated: the benign pairs' rates at the written thresholds, which `difftest calibrate`
  records in the thresholds file's `[benign]` table (events, rows, request clusters and the
  effective number of independent rows);
- measured: the A/A reruns (`noise_runs`) of a comparison whose floor is zero. Under a
  nonzero floor the flip test of `difftest.numerics.noise` already counts near-ties against
  the A/A flip rate, so nothing is added here.

The test, at alpha = 0.01 (`ALPHA`, the flip test's level): B's rate exceeds the benign rate
when the lower end of B's two-sided 1 - alpha Wilson interval at its request-clustered
effective size is above the upper end of the benign rate's (`difftest.numerics.clustered`).
Under equal rates, rejecting needs B's lower end above the true rate or the benign upper end
below it, each of probability at most alpha / 2: the level is at most alpha whatever the
clustering, and the interval stays honest at zero events, where a difference of proportions
has no spread to scale. It is conservative (two intervals' overlap): what it gives up is power
for small excesses, not false alarms.

When near_tie covers most compared rows' margins (a flip there would be excused), the token
comparison is nearly blind: the report says which share of rows it can no longer see, and the
verdict cannot be AGREE on the tokens alone (UNINFORMATIVE unless the logits or an armed rate
test could still fail).

`rate_effect` returns the verdict kind these demand and their reasons; the caller applies it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftest.analysis.compare import NEAR_TIE, Comparison, near_tie_rows
from difftest.core.kinds import AlignMode, Expect, Instrument, VerdictKind
from difftest.core.proportion import RATE_ALPHA, wilson_bounds, z_quantile
from difftest.core.thresholds import BenignRate, Calibrated
from difftest.numerics.clustered import ClusteredRate, clustered_rate

ALPHA = RATE_ALPHA
BLIND_SHARE = 0.5  # near_tie covering more than this share of compared rows: nearly blind


@dataclass(frozen=True)
class RateTest:
    """One of B's rates against the benign rate."""

    name: str
    rate: ClusteredRate
    benign: BenignRate
    source: str  # where the benign rate came from
    low: float  # B's lower bound (two-sided 1 - alpha Wilson at its effective size)
    high: float
    benign_low: float
    benign_high: float
    alpha: float

    @property
    def exceeds(self) -> bool:
        return self.low > self.benign_high

    @property
    def armed(self) -> bool:
        """Whether this test could reject at all: B at rate 1 would exceed the benign bound."""
        z = z_quantile(1.0 - self.alpha / 2)
        return wilson_bounds(1.0, self.rate.effective_rows, z)[0] > self.benign_high

    def sentence(self) -> str:
        conf = f"{1 - self.alpha:.0%}"
        said = (f"{self.name} {self.rate.value:.4g} ({conf} [{self.low:.4g}, {self.high:.4g}], "
                f"{self.rate.rows} rows, {self.rate.clusters} requests, clustered) against the "
                f"benign rate {self.benign.value:.4g} ({conf} [{self.benign_low:.4g}, "
                f"{self.benign_high:.4g}], {self.benign.rows} rows, {self.benign.requests} "
                f"requests; {self.source})")
        if self.exceeds:
            return (said + f": above the benign rate (lower bound {self.low:.4g} > "
                    f"{self.benign_high:.4g}): each row was excused, their number is not")
        if not self.armed:
            if self.benign_high >= 1.0:
                return said + (": the benign rate's upper bound is 1: no rate can exceed it, so "
                               "this test could not have failed")
            return said + (": too few independent rows of this comparison "
                           f"({self.rate.effective_rows:.3g}) for any rate to exceed the benign "
                           "rate's upper bound, so this test could not have failed")
        return said + ": within the benign rate"

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "rate": self.rate.to_json(), "ci": [self.low, self.high],
                "benign": self.benign.to_json(), "benign_ci": [self.benign_low, self.benign_high],
                "source": self.source, "alpha": self.alpha, "exceeds": self.exceeds,
                "armed": self.armed}


@dataclass(frozen=True)
class RateEffect:
    """What the rates demand of the verdict (None: nothing) and why."""

    kind: VerdictKind | None
    reasons: tuple[str, ...]
    tests: tuple[RateTest, ...] = ()
    blind_share: float | None = None  # share of compared rows near_tie hides (None: not set)

    def to_json(self) -> dict[str, object]:
        return {"kind": None if self.kind is None else self.kind.value,
                "tests": [t.to_json() for t in self.tests], "near_tie_hides": self.blind_share}


def _groups(cmp: Comparison, rows: np.ndarray) -> np.ndarray:
    r = cmp.rows
    out: np.ndarray = r.req[rows] if cmp.mode is AlignMode.POSITION else r.pos[rows]
    return out


def _test(name: str, values: np.ndarray, groups: np.ndarray, benign: BenignRate, source: str,
          alpha: float) -> RateTest | None:
    rate = clustered_rate(values, groups)
    if rate is None or benign.rows == 0:
        return None
    z = z_quantile(1.0 - alpha / 2)
    low, high = wilson_bounds(rate.value, rate.effective_rows, z)
    blow, bhigh = wilson_bounds(benign.value, benign.effective_rows, z)
    return RateTest(name, rate, benign, source, low, high, blow, bhigh, alpha)


def aa_near_tie_rate(cmp: Comparison) -> BenignRate | None:
    """The A/A reruns' flip rate, where the floor is zero (a nonzero floor's flip test counts
    near-ties itself)."""
    floor = cmp.logits.floor if cmp.logits is not None else None
    if floor is None or not floor.zero or floor.rows == 0:
        return None
    requests = len({f.req for p in floor.pairs for f in p.by_request}) or 1
    # no flip anywhere: no spread to cluster, every row counts (as `clustered_rate` does)
    return BenignRate(floor.flips, floor.rows, requests, float(floor.rows))


def blind_share(cmp: Comparison) -> float | None:
    """The share of compared rows (both margins traced) at which near_tie would excuse a flip;
    None where no near_tie excuses anything."""
    r = cmp.rows
    ties = cmp.row_near_tie()
    rows = r.compared & np.isfinite(r.margin_a) & np.isfinite(r.margin_b)
    if not rows.any() or not bool(np.nanmax(ties[rows], initial=0.0) > 0):
        return None
    return float(near_tie_rows(r.margin_a[rows], r.margin_b[rows], ties[rows]).mean())


def rate_tests(cmp: Comparison, calibrated: Calibrated | None,
               alpha: float = ALPHA) -> list[RateTest]:
    """B's near-tie flip rate and rate of logit rows above the benign level, each against the
    benign rate it has (calibrated, else A/A)."""
    r = cmp.rows
    compared = r.compared
    out: list[RateTest] = []
    benign = calibrated.near_tie_flips if calibrated is not None else None
    source = f"calibrated, {calibrated.path}" if calibrated is not None else ""
    if benign is None:
        benign, source = aa_near_tie_rate(cmp), "A/A reruns"
    if benign is not None and compared.any():
        t = _test("near-tie flip rate", (r.status == NEAR_TIE)[compared],
                  _groups(cmp, compared), benign, source, alpha)
        out += [t] if t is not None else []
    if calibrated is not None and calibrated.above_level is not None \
            and calibrated.logit_level is not None:
        rows = compared & np.isfinite(r.abs_logit_diff)
        if rows.any():
            t = _test(f"rate of logit rows above the benign level {calibrated.logit_level:.4g}",
                      r.abs_logit_diff[rows] > calibrated.logit_level, _groups(cmp, rows),
                      calibrated.above_level, f"calibrated, {calibrated.path}", alpha)
            out += [t] if t is not None else []
    return out


def rate_effect(cmp: Comparison, calibrated: Calibrated | None,
                instruments: tuple[Instrument, ...], alpha: float = ALPHA) -> RateEffect:
    """The verdict kind the rates demand (DIFFER: a rate above the benign one; UNINFORMATIVE:
    near_tie hides most rows and nothing else could fail; None: nothing) and the reasons."""
    if cmp.rules.expect is not Expect.SAME:
        return RateEffect(None, ())
    tests = rate_tests(cmp, calibrated, alpha)
    reasons = [t.sentence() for t in tests]
    unweighed = 0  # near-tie flips no benign rate can weigh
    if calibrated is not None and calibrated.near_tie_flips is None \
            and aa_near_tie_rate(cmp) is None:
        unweighed = int(np.count_nonzero(cmp.rows.status[cmp.rows.compared] == NEAR_TIE))
        reasons.append(f"near-tie flip rate not judged: {calibrated.path} records no benign rate "
                       "([benign.near_tie_flips]) and no A/A rerun measured one, so near-ties "
                       "are excused one at a time however many there are"
                       + (f"; {unweighed} near-tie flip(s) here, so the verdict cannot be AGREE"
                          if unweighed else "")
                       + "; recalibrate with `difftest calibrate -c NAME`")
    share = blind_share(cmp)
    if any(t.exceeds for t in tests):
        return RateEffect(VerdictKind.DIFFER, tuple(reasons), tuple(tests), share)
    kind = VerdictKind.UNINFORMATIVE if unweighed else None
    if share is not None and share > BLIND_SHARE:
        others = Instrument.LOGITS in instruments or any(t.armed for t in tests)
        said = (f"near_tie {cmp.rules.near_tie:g}" if cmp.rules.near_tie is not None
                else "the derived near_tie")
        reasons.append(f"the token instrument is nearly blind: {said} is above the margins of "
                       f"{share:.0%} of the compared rows, so a flip there would be excused"
                       + ("" if others else "; nothing else could fail, so the tokens alone "
                          "cannot make this AGREE"))
        if not others:
            kind = VerdictKind.UNINFORMATIVE
    return RateEffect(kind, tuple(reasons), tuple(tests), share)
