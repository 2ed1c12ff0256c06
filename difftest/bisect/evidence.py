"""What the runs at one commit say, and what all runs together say about where the first bad
commit is. Pure arithmetic: nothing here runs or reads anything.

One run of a comparison at a commit is a `Reading`: good (it passed), bad (it failed its
expectation) or skip (it could not say). Under the stated model every run reads wrong with
probability at most `flake_rate`, independently. A commit is decided by Wald's sequential
probability ratio test between "good" (a run reads bad with probability p) and "bad" (with
probability 1 - p): every run moves the log likelihood ratio by +-ln((1 - p) / p), so the test
stops when the bad and good readings differ by `step` runs. With the same model, the posterior
over the first bad commit (uniform prior between the confirmed ends) says how sure the named
commit is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from difftest.core.errors import UsageError


class Reading(StrEnum):
    """What one run of the comparison at a commit said."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


class Decision(StrEnum):
    """What the runs at a commit decided so far."""

    GOOD = "good"
    BAD = "bad"
    SKIPPED = "skipped"
    PENDING = "pending"


@dataclass(frozen=True)
class Tally:
    """The readings at one commit, counted."""

    good: int = 0
    bad: int = 0
    skip: int = 0
    unbuildable: bool = False  # a failed build is not retried: builds do not flake here

    @property
    def runs(self) -> int:
        return self.good + self.bad + self.skip

    def add(self, reading: Reading, unbuildable: bool = False) -> Tally:
        return Tally(self.good + (reading is Reading.GOOD), self.bad + (reading is Reading.BAD),
                     self.skip + (reading is Reading.SKIP), self.unbuildable or unbuildable)


@dataclass(frozen=True)
class Sequential:
    """The per-commit test: how many runs decide a commit, and how wrong a decision may be."""

    flake_rate: float = 0.0  # largest chance that one run reads wrong; 0: deterministic arms
    error_rate: float = 0.01  # largest chance that one decision is wrong (flaky arms only)
    max_runs: int = 15  # runs at one commit before it counts as undecided (skipped)

    def __post_init__(self) -> None:
        if not 0.0 <= self.flake_rate < 0.5 or math.isnan(self.flake_rate):
            raise UsageError(f"--flake-rate must be in [0, 0.5), got {self.flake_rate:g}: at "
                             "0.5 a run says nothing about its commit")
        if not 0.0 < self.error_rate < 0.5 or math.isnan(self.error_rate):
            raise UsageError(f"--error-rate must be in (0, 0.5), got {self.error_rate:g}")
        if isinstance(self.max_runs, bool) or self.max_runs < 1:
            raise UsageError(f"--max-runs must be at least 1, got {self.max_runs}")

    @property
    def deterministic(self) -> bool:
        return self.flake_rate == 0.0

    @property
    def step(self) -> int:
        """Bad minus good readings (or the reverse) that decide a commit: the smallest k with
        k * ln((1-p)/p) >= ln((1-e)/e), Wald's bound for equal error rates."""
        if self.deterministic:
            return 1
        per_run = math.log((1 - self.flake_rate) / self.flake_rate)
        return max(1, math.ceil(math.log((1 - self.error_rate) / self.error_rate) / per_run
                                - 1e-12))

    @property
    def decision_error(self) -> float:
        """The chance that one decision is wrong when every run reads wrong with probability
        flake_rate: a walk of +-1 steps that reaches -step before +step (gambler's ruin)."""
        if self.deterministic:
            return 0.0
        odds = ((1 - self.flake_rate) / self.flake_rate) ** self.step
        return 1.0 / (1.0 + odds)

    def decide(self, tally: Tally) -> Decision:
        if tally.unbuildable:
            return Decision.SKIPPED
        lead = tally.bad - tally.good
        if lead >= self.step:
            return Decision.BAD
        if -lead >= self.step:
            return Decision.GOOD
        if tally.skip >= self.step or tally.runs >= self.max_runs:
            return Decision.SKIPPED
        return Decision.PENDING

    def runs_to_decide(self, tally: Tally) -> int:
        """The fewest further runs that could decide the commit (all reading one way)."""
        return max(1, self.step - abs(tally.bad - tally.good))


def decision_budget(n: int) -> int:
    """How many decisions a bisect of commits 0..n is planned for: the two ends and twice the
    bisection depth (room for skips and multisection). A bisect-wide error rate is split over
    this many decisions (a union bound); the report states the bound the decisions it actually
    made reach."""
    return 2 + 2 * max(1, math.ceil(math.log2(n + 1)))


def per_decision(error_rate: float, n: int) -> float:
    """The error rate each decision gets so that the bisect as a whole stays within
    `error_rate` (while it makes at most decision_budget(n) decisions)."""
    return error_rate / decision_budget(n)


def posterior(n: int, tallies: Mapping[int, Tally], flake_rate: float) -> list[float] | None:
    """P(the first bad commit is commit b | every reading), for b = 1..n (index 0 is the
    confirmed good end, n the confirmed bad end), under a uniform prior. Returned as a list of
    n + 1 entries, entry 0 always 0. None when no b explains the readings (deterministic arms
    that read non-monotonically)."""
    # contradicting(b): readings that b makes wrong: bad below b, good at or above b
    bad_below = [0] * (n + 2)
    good_from = [0] * (n + 2)
    for i in range(n + 1):
        t = tallies.get(i, Tally())
        bad_below[i + 1] = bad_below[i] + t.bad
    for i in range(n, -1, -1):
        t = tallies.get(i, Tally())
        good_from[i] = good_from[i + 1] + t.good
    total = sum(t.good + t.bad for t in tallies.values())
    logs: list[float] = [-math.inf] * (n + 1)
    for b in range(1, n + 1):
        wrong = bad_below[b] + good_from[b]
        if flake_rate == 0.0:
            logs[b] = 0.0 if wrong == 0 else -math.inf
        else:
            logs[b] = wrong * math.log(flake_rate) + (total - wrong) * math.log1p(-flake_rate)
    top = max(logs)
    if top == -math.inf:
        return None
    weights = [math.exp(x - top) if x != -math.inf else 0.0 for x in logs]
    s = sum(weights)
    return [w / s for w in weights]


def mass(post: Sequence[float], indices: Sequence[int]) -> float:
    return float(sum(post[i] for i in indices))
