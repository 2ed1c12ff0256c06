"""The A/A noise floor: how far one arm differs from itself over reruns, and whether another arm
differs from it by more than that.

An engine whose reductions change order from run to run (GPU atomics, split-K kernels chosen by
load) never reproduces its own logits bit for bit, so a bitwise comparison against it is flaky
and a hand-picked tolerance is either loose or flaky. Running arm A N times measures the floor
instead: the largest logit difference between any two of its reruns, and how often its reruns
draft a different token. B vs A then counts a logit difference only above `max(atol + rtol*|b|,
floor)`, and token flips only when B flips significantly more often than A flips against itself
(a one-sided exact test). A floor of exactly zero (reruns bit-identical) changes nothing: the
comparison is as strict as without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from difftest.numerics.clustered import ClusterSums, paired_difference
from difftest.numerics.stats import Interval, LogitStats, wilson

ALPHA = 0.01  # significance level of the flip-rate test
# No count test may dismiss a difference larger than the floor times this: the floor is the
# largest of a few A/A samples, and one more rerun of A exceeds it now and then, but not by this
# factor. Measured on the reference runner's nondeterministic lane against a 3-run floor
# (`python scripts/noise_false_alarms.py --runs 24 --trials 400 --band`): a rerun's max |diff| is
# 0.875 x the floor at the median, 1.55 x at p99 and 2 x at most over 400 draws, the
# deterministic lane's 1.33 x at most; 4 is twice the largest. Values and flips inside the band
# are left to the count tests below.
NOISE_BAND = 4.0


@dataclass(frozen=True)
class RequestFlips:
    """One request's compared token rows and flips: what the request-clustered flip test
    groups by."""

    req: str
    rows: int
    flips: int


def request_names(requests: Sequence[str], req: np.ndarray) -> Sequence[str]:
    """The names rows index with `req`: a trace's request names, else (a trace with none) each
    index spelled as a number."""
    return requests if requests else [str(i) for i in range(int(req.max()) + 1 if req.size else 0)]


def request_flips(req: np.ndarray, names: Sequence[str], flipped: np.ndarray
                  ) -> tuple[RequestFlips, ...]:
    """Per request (`req`: each row's index into `names`), its rows and flips, sorted by name:
    counted by index, so a long request name costs its own bytes once, not once per row."""
    rows = np.bincount(req, minlength=len(names))
    flips = np.bincount(req, weights=flipped.astype(np.float64), minlength=len(names))
    present = np.flatnonzero(rows).tolist()
    return tuple(sorted((RequestFlips(str(names[i]), int(rows[i]), int(flips[i]))
                         for i in present), key=lambda r: r.req))


@dataclass(frozen=True)
class RerunPair:
    """Two reruns of one arm, compared: `run_a` and `run_b` index the reruns from 0."""

    run_a: int
    run_b: int
    rows: int  # token rows compared
    flips: int  # compared token rows that drafted different ids
    logit_rows: int  # rows with logits in both reruns
    max_abs: float | None  # largest |a - b| over the shared top-k ids (None: no logits)
    identical: bool  # every compared token and traced logit equal, nothing unmatched
    by_request: tuple[RequestFlips, ...] = ()


@dataclass(frozen=True)
class NoiseFloor:
    """What N reruns of one arm show about its own run-to-run differences."""

    arm: str
    runs: int
    pairs: tuple[RerunPair, ...]
    floor: float  # the largest A/A logit difference (0.0: none seen)
    rows: int
    flips: int
    flip_rate: Interval | None
    bit_identical: bool
    logit_stats: LogitStats | None  # pooled over every pair of reruns
    by_request: tuple[RequestFlips, ...] = ()  # pooled over every pair of reruns

    @property
    def zero(self) -> bool:
        """Reruns are deterministic: no logit moved and no token flipped."""
        return self.floor == 0.0 and self.flips == 0

    def to_json(self) -> dict[str, object]:
        fr = self.flip_rate
        return {
            "arm": self.arm, "runs": self.runs, "bit_identical": self.bit_identical,
            "floor": self.floor, "zero_floor": self.zero, "rows": self.rows, "flips": self.flips,
            "flip_rate": None if fr is None else fr.value,
            "flip_rate_ci95": None if fr is None else [fr.low, fr.high],
            "pairs": [{"run_a": p.run_a, "run_b": p.run_b, "rows": p.rows, "flips": p.flips,
                       "logit_rows": p.logit_rows, "max_abs": p.max_abs,
                       "identical": p.identical} for p in self.pairs],
            "logit_stats": None if self.logit_stats is None else self.logit_stats.to_json(),
        }

    def summary(self) -> str:
        """One line: the floor as a user reads it."""
        if self.zero and self.bit_identical:
            head = f"A/A floor of {self.arm}: zero ({self.runs} runs bit-identical)"
        elif self.zero:
            head = (f"A/A floor of {self.arm}: zero over {self.runs} runs (no token or logit "
                    "moved; the runs differ only in what was aligned)")
        else:
            head = f"A/A floor of {self.arm}: {self.floor:.3g} over {self.runs} runs"
        fr = self.flip_rate
        if fr is not None:
            head += (f", token flips {self.flips}/{self.rows} "
                     f"(rate {fr.value:.4f}, 95% [{fr.low:.4f}, {fr.high:.4f}])")
        return head


def noise_floor(arm: str, runs: int, pairs: list[RerunPair],
                stats: LogitStats | None) -> NoiseFloor:
    """Pool the pairwise comparisons of `runs` reruns into one floor."""
    rows = sum(p.rows for p in pairs)
    flips = sum(p.flips for p in pairs)
    seen = [p.max_abs for p in pairs if p.max_abs is not None and math.isfinite(p.max_abs)]
    pooled: dict[str, tuple[int, int]] = {}
    for p in pairs:
        for r in p.by_request:
            had = pooled.get(r.req, (0, 0))
            pooled[r.req] = (had[0] + r.rows, had[1] + r.flips)
    by_request = tuple(RequestFlips(n, r, f) for n, (r, f) in sorted(pooled.items()))
    return NoiseFloor(arm=arm, runs=runs, pairs=tuple(pairs), floor=max(seen, default=0.0),
                      rows=rows, flips=flips, flip_rate=wilson(flips, rows) if rows else None,
                      bit_identical=all(p.identical for p in pairs), logit_stats=stats,
                      by_request=by_request)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_greater(flips_b: int, rows_b: int, flips_a: int, rows_a: int) -> float:
    """One-sided Fisher exact p-value that B's flip rate exceeds A's.

    Under the null (one flip rate for both), B's flip count given the total is hypergeometric:
    p = P(X >= flips_b), X ~ Hypergeometric(rows_a + rows_b, flips_a + flips_b, rows_b).
    """
    total, flips = rows_a + rows_b, flips_a + flips_b
    if flips_b == 0:  # also every comparison of no rows; the sum below would only round to 1
        return 1.0
    denom = _log_comb(total, rows_b)
    logs = [_log_comb(flips, x) + _log_comb(total - flips, rows_b - x) - denom
            for x in range(flips_b, min(flips, rows_b) + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


class FlipRule(Enum):
    """Which rule decided whether B's token flips count."""

    STRICT = "strict"  # zero floor: every flip counts, as without a floor
    EXACT_TEST = "exact-test"  # B's flip rate against A's, one-sided Fisher exact test


@dataclass(frozen=True)
class FlipTest:
    """Whether B's token flips exceed what A's reruns show, and by which rule."""

    flips_b: int
    rows_b: int
    flips_a: int
    rows_a: int
    alpha: float
    p_value: float | None
    counts: bool  # B's flips count as differences
    rule: FlipRule
    # the request-clustered test, where both sides' flips are known per request (>= 2): the
    # one-sided lower bound of B's flip rate minus A's A/A rate, and the requests it rests on
    clustered_low: float | None = None
    requests: int = 0

    def reason(self) -> str:
        if self.rule is FlipRule.STRICT:
            return (f"token flips judged strictly: the A/A floor is zero, so each of B's "
                    f"{self.flips_b} flip(s) counts")
        verdict = "more often than" if self.counts else "not significantly more often than"
        head = (f"token flips: B flipped {self.flips_b}/{self.rows_b}, {verdict} A against "
                f"itself ({self.flips_a}/{self.rows_a}); ")
        exact = f"one-sided Fisher exact test p = {self.p_value:.3g} at alpha {self.alpha:g}"
        if self.clustered_low is None:
            return head + exact
        return (head + f"clustered by request ({self.requests} requests, paired), the "
                f"one-sided lower bound of B's rate minus A's is {self.clustered_low:+.3g} at "
                f"alpha {self.alpha:g} (the {exact}, counts rows as independent)")

    def to_json(self) -> dict[str, object]:
        return {"flips_b": self.flips_b, "rows_b": self.rows_b, "flips_a": self.flips_a,
                "rows_a": self.rows_a, "alpha": self.alpha, "p_value": self.p_value,
                "counts": self.counts, "rule": self.rule.value,
                "clustered_lower_bound": self.clustered_low,
                "clustered_requests": self.requests}


def top_k_p_value(k: int, m: int, n: int) -> float:
    """Probability that the k largest of n + m exchangeable values all fall among a given m:
    C(m, k) / C(n + m, k). The exact permutation p-value of "B's k differences above the A/A
    floor are larger than anything A showed against itself" when B is just another rerun.
    k = 0 gives exactly 1."""
    if k > m:
        return 0.0
    return math.exp(_log_comb(m, k) - _log_comb(n + m, k))


@dataclass(frozen=True)
class ExcessTest:
    """Whether B's logit differences above the floor count, and by which rule."""

    exceed: int  # B-vs-A values above max(atol + rtol*|b|, floor)
    values_b: int  # B-vs-A values compared
    values_a: int  # A/A values the floor was measured on
    alpha: float
    p_value: float | None
    counts: bool
    rule: FlipRule
    needed: int = 1  # the fewest values above the floor that would count

    def reason(self) -> str:
        if self.rule is FlipRule.STRICT:
            return (f"logit differences judged strictly: the A/A floor is zero, so each of B's "
                    f"{self.exceed} value(s) above the tolerance counts")
        verdict = "count" if self.counts else "do not count"
        return (f"logit differences: {self.exceed} of B's {self.values_b} value(s) exceed the A/A "
                f"floor, which none of A's {self.values_a} did; if B were one more rerun of A, "
                f"its {self.exceed} largest would all be B's with probability "
                f"p = {self.p_value:.3g} (exact permutation test, alpha {self.alpha:g}): they "
                f"{verdict}")

    def to_json(self) -> dict[str, object]:
        return {"exceed": self.exceed, "values_b": self.values_b, "values_a": self.values_a,
                "alpha": self.alpha, "p_value": self.p_value, "counts": self.counts,
                "rule": self.rule.value, "needed": self.needed}


def fewest_significant(m: int, n: int, alpha: float = ALPHA) -> int:
    """The fewest of m values above the floor whose top-k p-value reaches alpha."""
    k = 1
    while k <= m and top_k_p_value(k, m, n) > alpha:
        k += 1
    return k


def excess_test(exceed: int, values_b: int, floor: NoiseFloor,
                alpha: float = ALPHA) -> ExcessTest:
    """Do B's logit values above the floor count? Strictly when the floor is zero; else only
    when so many exceed it that B is unlikely to be just another rerun of A.

    The floor is the largest of the A/A values, so a rerun of A exceeds it with probability
    about m / (n + m) per value however many runs were made: counting every exceedance would
    fail about one comparison in four with three runs. The permutation p-value keeps that
    false-alarm rate at alpha."""
    values_a = floor.logit_stats.values if floor.logit_stats is not None else 0
    if floor.zero:
        return ExcessTest(exceed, values_b, values_a, alpha, None, exceed > 0, FlipRule.STRICT)
    p = top_k_p_value(exceed, values_b, values_a)
    return ExcessTest(exceed, values_b, values_a, alpha, p, p <= alpha, FlipRule.EXACT_TEST,
                      fewest_significant(values_b, values_a, alpha))


def _sums(flips: Sequence[RequestFlips]) -> tuple[np.ndarray, ClusterSums]:
    ordered = sorted(flips, key=lambda r: r.req)
    # the names as Python strings: a fixed-width array pads each to the longest name
    return (np.array([r.req for r in ordered], dtype=object),
            ClusterSums(np.array([float(r.flips) for r in ordered]),
                        np.array([float(r.rows) for r in ordered])))


def flip_test(flips_b: int, rows_b: int, floor: NoiseFloor, alpha: float = ALPHA, *,
              near_ties: int = 0, by_request_b: Sequence[RequestFlips] = ()) -> FlipTest:
    """Do B's flips count? Strictly when the floor is zero (each of the `flips_b` hard flips
    counts, near-ties never do). Else on every flip, near-ties included (A's reruns count theirs
    alike): where both sides' flips are known per request (two or more), by the
    request-clustered paired test (the rows of one request flip together, and the exact test,
    which counts them as independent, then calls noise a difference several times more often
    than alpha: docs/statistics.md); else by the exact test at alpha. Flips larger than the
    noise band are the caller's: no test here may dismiss them."""
    if floor.zero:
        return FlipTest(flips_b, rows_b, floor.flips, floor.rows, alpha, None, flips_b > 0,
                        FlipRule.STRICT)
    flips = flips_b + near_ties
    p = fisher_greater(flips, rows_b, floor.flips, floor.rows)
    pd = None
    if floor.by_request and by_request_b:
        la, sa = _sums(floor.by_request)
        lb, sb = _sums(by_request_b)
        pd = paired_difference(sa, la, sb, lb)
    if pd is None:
        return FlipTest(flips, rows_b, floor.flips, floor.rows, alpha, p, p <= alpha,
                        FlipRule.EXACT_TEST)
    low = pd.bounds(alpha)[0]
    return FlipTest(flips, rows_b, floor.flips, floor.rows, alpha, p, low > 0,
                    FlipRule.EXACT_TEST, low, pd.clusters)
