"""`--until-decided`: after a comparison's first run, run both arms again, round after round,
until the sequential test of `difftest.sequential` decides or the maximum is reached. Every
round's runs go into the comparison's run directory (`ARM#seqN`), so the captures stay beside
the report that counted them.

Arms that take an input (`{seed}` in their command or env) run each round on the next input
after the comparison's `gate_input` (an integer: the round's number added to it, skipping the
calibration inputs, which are held out); their requests are then new every round, and the
test judges the requests such inputs bring. Other arms rerun the same requests, and the test
judges B against A on those requests. Either way each run of a request is one cluster (paired
between the arms of its round): the rows of one run of a request share its context, and two
runs of it are independent draws (what a rerun is), so a rerun adds evidence as a new request
does.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from difftest.acceptance import AcceptanceCounts, counts_of
from difftest.config import ArmSpec, ComparisonSpec, Config
from difftest.errors import InterruptedRun, UsageError
from difftest.execute import (META_NAME, ArmResult, load_run, run_arms, signal_of,
                              write_json_atomic)
from difftest.limits import MAX_SEQUENTIAL_RUNS
from difftest.pipeline import ComparisonReport, outcomes_from_run, thresholds_of
from difftest.plan import arm_pair
from difftest.sequential import MIN_RUNS, Design, Look, SequentialResult, Tally, fold, look
from difftest.verdict import arm_failed

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
        results = _run_round(first.run_dir, pair, progress, cache)
        a, b = outcomes_from_run(results, (pair[0].name, pair[1].name), th)
        failures = [o.failure for o in (a, b) if o.failure is not None]
        if failures:
            return replace(first, verdict=arm_failed(failures, spec.expect))
        assert a.trace is not None and b.trace is not None
        tally.add(_labelled(counts_of(a.trace), r), _labelled(counts_of(b.trace), r))
        looks.append(look(tally, design))
    result = SequentialResult(design, tuple(looks), tuple(inputs[:tally.runs]) if inputs else ())
    return replace(first, verdict=fold(first.verdict, result), sequential=result)


def _run_round(run_dir: Path, arms: list[ArmSpec], progress: bool | None,
               cache: Path | None) -> dict[str, ArmResult]:
    """One round's two runs into the run directory; meta.json keeps every earlier arm and the
    run's plan record."""
    _, before = load_run(run_dir)
    try:
        results = run_arms(arms, run_dir, progress=progress, extra_meta=before.get("extra"),
                           cache_dir=cache, plan=before.get("plan"))
    except KeyboardInterrupt as exc:
        raise InterruptedRun(run_dir, signal_of(exc)) from None
    _, after = load_run(run_dir)
    after["arms"] = {**before["arms"], **after["arms"]}
    after["created_at"] = before.get("created_at", after.get("created_at"))
    write_json_atomic(run_dir / META_NAME, after)
    return results
