"""`--until-decided`: after a comparison's first run, both arms run again, round after round,
until the sequential test of `difftest.analysis.sequential` decides or the maximum is reached.
The plan names the rounds (`difftest.flow.plan.plan_rounds`, `ARM#seqN`), `difftest.flow.run`
runs them into the comparison's run directory, so the captures stay beside the report that
counted them, and asks `SequentialTest` after each whether to go on; `difftest.flow.judge` folds
the decision into the first run's verdict.

Arms that take an input (`{seed}` in their command or env) run each round on the next input
after the comparison's `gate_input` (an integer: the round's number added to it, skipping the
calibration inputs, which are held out); their requests are then new every round, and the
test judges the requests such inputs bring. Other arms rerun the same requests, and the test
judges B against A on those requests. Either way each run of a request is one cluster (paired
between the arms of its round): the rows of one run of a request share its context, and two
runs of it are independent draws (what a rerun is), so a rerun adds evidence as a new request
does -- where it differs. A rerun of a request whose drafted and emitted stream repeats, in
both arms, one an earlier round traced for it is the same draw again, not a new one: it is not
counted. A round in which every request repeats ends the test: UNINFORMATIVE unless what was
counted already shows a drop (the arms are deterministic on these inputs: reruns add nothing,
more requests do).

A sampled comparison (`decoding = "sampled"`) is run until decided by its own instrument
(`SampledRounds`): each round's draws join the earlier ones and the distribution test, a test
martingale, is read after every round; a round whose arm repeats an earlier run's sampler seed
adds no draws and ends the rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from difftest.analysis.acceptance import AcceptanceCounts, counts_of
from difftest.analysis.distribution import sampled_kind
from difftest.analysis.repeats import distinct, repeated, streams
from difftest.analysis.sequential import Design, Look, SequentialResult, Tally, look
from difftest.core.errors import ArmFailure
from difftest.core.kinds import VerdictKind
from difftest.core.model import ArmTrace
from difftest.flow.evaluate import ArmOutcome, sampled_evidence


def _labelled(c: AcceptanceCounts, run: int) -> AcceptanceCounts:
    """Each run of a request its own cluster: reruns are independent draws of it."""
    names, each = np.unique(c.label, return_inverse=True)  # one new string per request
    prefixed = np.array([f"run{run}/{name}" for name in names.tolist()], dtype=object)
    return AcceptanceCounts(prefixed[each], c.k, c.acc)


@dataclass
class Seen:
    """The streams each arm traced for each request in the rounds so far."""

    a: dict[str, set[bytes]] = field(default_factory=dict)
    b: dict[str, set[bytes]] = field(default_factory=dict)

    def fresh(self, a: ArmTrace, b: ArmTrace) -> set[str]:
        """The requests of this round whose stream, in one arm or the other, no earlier round
        traced; the round's streams are remembered."""
        sa, sb = streams(a), streams(b)
        out = {name for name in set(sa) | set(sb)
               if sa.get(name) not in self.a.get(name, set())
               or sb.get(name) not in self.b.get(name, set())}
        for seen, now in ((self.a, sa), (self.b, sb)):
            for name, stream in now.items():
                seen.setdefault(name, set()).add(stream)
        return out


def _only(c: AcceptanceCounts, requests: set[str]) -> AcceptanceCounts:
    keep = np.array([str(name) in requests for name in c.label.tolist()], dtype=bool)
    return AcceptanceCounts(c.label[keep], c.k[keep], c.acc[keep])


class SequentialTest:
    """The sequential test as the rounds come in: the first run counted, then each round's
    requests whose streams no earlier round traced. `next_round` says which round to run
    next, None once the test decided (or a round repeated every stream: the arms are
    deterministic on these inputs, and no later rerun would add evidence)."""

    def __init__(self, design: Design, a: ArmTrace, b: ArmTrace) -> None:
        self.design = design
        self.tally = Tally()
        self.seen = Seen()
        self.seen.fresh(a, b)
        self.repeated = 0  # request reruns not counted: their streams repeated an earlier round's
        self.tally.add(_labelled(counts_of(a), 1), _labelled(counts_of(b), 1))
        self.looks: list[Look] = [look(self.tally, design)]
        self.stopped = False

    @property
    def next_round(self) -> int | None:
        if self.stopped or self.looks[-1].decision is not None:
            return None
        return self.tally.runs + 1

    def add(self, a: ArmTrace, b: ArmTrace) -> None:
        """Round `next_round`'s traces of both arms."""
        r = self.tally.runs + 1
        new = self.seen.fresh(a, b)
        ca, cb = counts_of(a), counts_of(b)
        self.repeated += len({str(x) for x in (*ca.label.tolist(), *cb.label.tolist())} - new)
        if not new:  # the same draws again: nothing to add, and no later rerun would
            self.looks.append(replace(look(self.tally, self.design, repeated=True), runs=r))
            self.stopped = True
            return
        self.tally.add(_labelled(_only(ca, new), r), _labelled(_only(cb, new), r))
        self.looks.append(replace(look(self.tally, self.design), runs=r))

    def result(self, inputs: Sequence[str]) -> SequentialResult:
        """Every look and the decision; `inputs`: each round's input (empty: none taken)."""
        ran = self.looks[-1].runs
        return SequentialResult(self.design, tuple(self.looks),
                                tuple(inputs[:ran]) if inputs else (), repeated=self.repeated,
                                deterministic=self.looks[-1].runs > self.tally.runs)


@dataclass(frozen=True)
class SequentialRun:
    """What the rounds after a comparison's first run left: the test's record, or the failures
    of the arms that failed in a later round (which fail the comparison)."""

    result: SequentialResult | None
    failures: tuple[ArmFailure, ...] = ()


@dataclass(frozen=True)
class SampledRun:
    """What `--until-decided` left of a sampled comparison: the rounds counted (both arms'
    names, round 2 first), the run at which the distribution instrument decided (None: it
    did not), the round not counted because an arm repeated its draws, and the failures of
    a round's arms (which fail the comparison)."""

    max_runs: int | None  # None: not known (a run judged again records no maximum)
    rounds: tuple[tuple[str, str], ...] = ()
    decided_at: int | None = None
    repeated: str | None = None
    failures: tuple[ArmFailure, ...] = ()

    def reasons(self) -> list[str]:
        """What the rounds did, for the verdict's reasons."""
        runs = len(self.rounds) + 1
        most = "" if self.max_runs is None else f" (at most {self.max_runs})"
        if self.decided_at is not None:
            out = [f"--until-decided: decided at run {self.decided_at} of each arm{most}; the "
                   "distribution test is valid at any stopping time"]
        else:
            out = [f"--until-decided: not decided after {runs} run(s) of each arm{most}"]
        if self.repeated is not None:
            out.append(f"--until-decided stopped after {runs} run(s): round {runs + 1} was not "
                       f"counted, {self.repeated} (reruns of arms with fixed sampler seeds draw "
                       "nothing new: give them fresh seeds, e.g. drop --sample-seed)")
        return out


class SampledRounds:
    """`--until-decided` for a sampled comparison: each round's draws join the earlier ones
    (the distribution test's wealth carries on over the new pairs, so looking after every
    round needs no correction), until the instrument says DIFFER, an arm repeats its draws,
    or the most runs are reached. Same interface as `SequentialTest`."""

    def __init__(self, max_runs: int, runs_a: Sequence[ArmOutcome], b: ArmOutcome) -> None:
        """`runs_a`: arm A's first run and its noise reruns; `b`: B's first run."""
        self.max_runs = max_runs
        kept, _ = distinct([o.trace for o in runs_a if o.trace is not None])
        self.runs_a, self.runs_b = [runs_a[i] for i in kept], [b]
        self.names: list[tuple[str, str]] = []
        self.repeated: str | None = None
        self.decided_at = 1 if self._differ() else None

    def _differ(self) -> bool:
        kind, _ = sampled_kind(sampled_evidence(self.runs_a, self.runs_b))
        return kind is VerdictKind.DIFFER

    @property
    def next_round(self) -> int | None:
        if (self.repeated is not None or self.decided_at is not None
                or len(self.runs_b) >= self.max_runs):
            return None
        return len(self.runs_b) + 1

    def add(self, a: ArmOutcome, b: ArmOutcome) -> None:
        """Round `next_round`'s outcomes of both arms (their traces parsed)."""
        for runs, new in ((self.runs_a, a), (self.runs_b, b)):
            assert new.trace is not None
            why = repeated([o.trace for o in runs if o.trace is not None], new.trace)
            if why is not None:
                self.repeated = f"{new.name}: {why}"
                return
        self.runs_a.append(a)
        self.runs_b.append(b)
        self.names.append((a.name, b.name))
        if self._differ():
            self.decided_at = len(self.runs_b)

    def result(self) -> SampledRun:
        return SampledRun(self.max_runs, tuple(self.names), self.decided_at, self.repeated)
