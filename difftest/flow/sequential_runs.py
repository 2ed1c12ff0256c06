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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from difftest.analysis.acceptance import AcceptanceCounts, counts_of
from difftest.analysis.sequential import Design, Look, SequentialResult, Tally, look
from difftest.core.errors import ArmFailure
from difftest.core.model import ArmTrace


def _labelled(c: AcceptanceCounts, run: int) -> AcceptanceCounts:
    """Each run of a request its own cluster: reruns are independent draws of it."""
    return AcceptanceCounts(np.char.add(f"run{run}/", c.label.astype(str)), c.k, c.acc)


def streams(trace: ArmTrace) -> dict[str, bytes]:
    """Each request's traced stream, verify by verify (position, depth, accepted, drafted and
    emitted ids), as bytes: two runs that drafted and emitted alike give equal bytes."""
    v = trace.verifies
    parts: dict[str, list[bytes]] = {}
    for i in range(len(v)):
        name = str(trace.requests[int(v.req[i])]) if len(trace.requests) else ""
        row = np.array([v.pos[i], v.k[i], v.ns[i], v.acc[i]], dtype=np.int64).tobytes()
        parts.setdefault(name, []).append(
            row + b"|" + v.draft(i).astype(np.int32).tobytes() + b"|"
            + v.emit(i).astype(np.int32).tobytes() + b";")
    return {name: b"".join(rows) for name, rows in parts.items()}


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
    keep = np.isin(c.label.astype(str), np.asarray(sorted(requests), dtype=str))
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
        self.repeated += len((set(ca.label.astype(str)) | set(cb.label.astype(str))) - new)
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
