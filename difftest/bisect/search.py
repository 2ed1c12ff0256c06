"""Where to look next: the bounds the decisions so far leave, and the commits to test in the
next round (several at once with -j N: multisection, the bounds split into N + 1 parts).
Pure: decisions in, indices out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from difftest.bisect.evidence import Decision, Sequential, Tally


@dataclass(frozen=True)
class Bounds:
    """The last commit decided good below the first decided bad: the first bad commit is in
    (lo, hi]."""

    lo: int
    hi: int
    notes: tuple[str, ...] = ()

    @property
    def open(self) -> list[int]:
        return list(range(self.lo + 1, self.hi))


def bounds(n: int, decisions: Mapping[int, Decision]) -> Bounds:
    """hi: the first commit decided bad (n, the confirmed bad end, at most); lo: the last commit
    decided good below it. A good decision above hi (non-monotone readings) is noted."""
    hi = min([i for i, d in decisions.items() if d is Decision.BAD] + [n])
    lo = max([i for i, d in decisions.items() if d is Decision.GOOD and i < hi] + [0])
    above = sorted(i for i, d in decisions.items() if d is Decision.GOOD and i > hi)
    notes = tuple(f"commit #{i} was decided good after the bad commit #{hi}: the comparison is "
                  "not monotone over this history (or a decision was wrong)" for i in above)
    return Bounds(lo, hi, notes)


def untested(b: Bounds, decisions: Mapping[int, Decision]) -> list[int]:
    """Commits inside the bounds that no decision settled yet."""
    return [i for i in b.open if decisions.get(i, Decision.PENDING) is Decision.PENDING]


def next_tests(b: Bounds, decisions: Mapping[int, Decision], tallies: Mapping[int, Tally],
               test: Sequential, slots: int) -> list[int]:
    """The commits the next round runs (an index repeats when it gets several runs): commits
    half-way through their sequential test first, then fresh points that split the bounds."""
    out: list[int] = []
    open_ = untested(b, decisions)
    started = [i for i in open_ if tallies.get(i, Tally()).runs > 0]
    for i in started:
        want = test.runs_to_decide(tallies[i])
        take = min(want, slots - len(out))
        out += [i] * take
    fresh = [i for i in open_ if i not in started]
    room = slots - len(out)
    if room <= 0 or not fresh:
        return out
    if len(fresh) <= room:
        return out + fresh
    span = b.hi - b.lo
    chosen: list[int] = []
    for j in range(1, room + 1):
        target = b.lo + span * j / (room + 1)
        pick = min((i for i in fresh if i not in chosen),
                   key=lambda i: (abs(i - target), i))
        chosen.append(pick)
    return out + sorted(chosen)
