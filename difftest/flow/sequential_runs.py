"""`--until-decided`: after a comparison's first run, run both arms again, round after round,
until the sequential test of `difftest.analysis.sequential` decides or the maximum is reached. Every
round's runs go into the comparison's run directory (`ARM#seqN`), so the captures stay beside
the report that counted them.

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

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from difftest.analysis.acceptance import AcceptanceCounts, counts_of
from difftest.config import ArmSpec, ComparisonSpec, Config
from difftest.core.errors import UsageError
from difftest.core.limits import MAX_SEQUENTIAL_RUNS
from difftest.core.model import ArmTrace
from difftest.flow.evaluate import ComparisonReport, outcomes_from_run, thresholds_of
from difftest.flow.plan import arm_pair
from difftest.flow.run import run_more
from difftest.analysis.sequential import MIN_RUNS, Design, Look, SequentialResult, Tally, fold, look
from difftest.analysis.verdict import arm_failed

OPTION = "--until-decided"


def design_of(spec: ComparisonSpec, max_runs: int) -> Design:
    """The test's design from the comparison's acceptance gate (its margin and alpha)."""
    if spec.teacher_force:
        raise UsageError(f"{OPTION} reruns both arms on their own: it does not combine with "
                         "teacher forcing")
    if spec.acceptance is None:
        raise UsageError(f"{OPTION} tests B's acceptance against A's at a stated margin: give "
                         f"comparison {spec.name} an acceptance gate, e.g. acceptance = "
                         "{ max_drop = 0.05, alpha = 0.01 }")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or not (
            MIN_RUNS <= max_runs <= MAX_SEQUENTIAL_RUNS):
        raise UsageError(f"{OPTION} must be an integer from {MIN_RUNS} to "
                         f"{MAX_SEQUENTIAL_RUNS} (the most runs of each arm), got {max_runs!r}")
    return Design(spec.acceptance.max_drop, spec.acceptance.alpha, max_runs)


def round_inputs(spec: ComparisonSpec, arms: tuple[ArmSpec, ArmSpec], rounds: int
                 ) -> list[str] | None:
    """The input of each round (None: the arms take none, every round reruns the same)."""
    if not any(a.takes_input for a in arms):
        return None
    start = spec.gate_input
    try:
        first = int(start) if start is not None else None
    except ValueError:
        first = None
    if first is None:
        raise UsageError(f"comparison {spec.name}: {OPTION} runs each round on the next input "
                         f"after gate_input, which must then be an integer seed (got {start!r})")
    held = set(spec.calibration_inputs)
    out: list[str] = []
    n = first
    while len(out) < rounds:
        if str(n) not in held:
            out.append(str(n))
        n += 1
    return out


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


def continue_until_decided(config: Config, spec: ComparisonSpec, first: ComparisonReport,
                           max_runs: int, *, progress: bool | None = None,
                           cache_dir: Path | None = None) -> ComparisonReport:
    """The first run's report, with rounds 2.. run and the sequential decision folded into its
    verdict (and recorded in `sequential`). An arm that fails in a later round fails the
    comparison."""
    design = design_of(spec, max_runs)
    a0, b0 = first.arm_a, first.arm_b
    if a0.trace is None or b0.trace is None or first.run_dir is None:
        return first  # an arm failed: reported as such
    base_a, base_b = arm_pair(config, spec)
    raw = (config.arm(spec.arm_a), config.arm(spec.arm_b))
    inputs = round_inputs(spec, raw, max_runs)
    tally = Tally()
    seen = Seen()
    seen.fresh(a0.trace, b0.trace)
    repeated = 0  # request reruns not counted: their streams repeated an earlier round's
    tally.add(_labelled(counts_of(a0.trace), 1), _labelled(counts_of(b0.trace), 1))
    looks: list[Look] = [look(tally, design)]
    th = thresholds_of(config)
    cache = cache_dir or config.defaults.cache
    while looks[-1].decision is None:
        r = tally.runs + 1
        pair = []
        for base, arm in ((base_a, raw[0]), (base_b, raw[1])):
            run = arm.with_input(inputs[r - 1]) if inputs and arm.takes_input else base
            pair.append(run.with_changes(name=f"{base.name}#seq{r}"))
        results = run_more(first.run_dir, pair, progress=progress, cache_dir=cache)
        a, b = outcomes_from_run(results, (pair[0].name, pair[1].name), th)
        failures = [o.failure for o in (a, b) if o.failure is not None]
        if failures:
            return replace(first, verdict=arm_failed(failures, spec.expect))
        assert a.trace is not None and b.trace is not None
        new = seen.fresh(a.trace, b.trace)
        ca, cb = counts_of(a.trace), counts_of(b.trace)
        repeated += len((set(ca.label.astype(str)) | set(cb.label.astype(str))) - new)
        if not new:  # the same draws again: nothing to add, and no later rerun would
            looks.append(replace(look(tally, design, repeated=True), runs=r))
            break
        tally.add(_labelled(_only(ca, new), r), _labelled(_only(cb, new), r))
        looks.append(replace(look(tally, design), runs=r))
    ran = looks[-1].runs
    result = SequentialResult(design, tuple(looks), tuple(inputs[:ran]) if inputs else (),
                              repeated=repeated,
                              deterministic=looks[-1].runs > tally.runs)
    return replace(first, verdict=fold(first.verdict, result), sequential=result)
