"""Measure the sampled comparison's error rates: how often spec vs no-spec (the lossless claim)
is called DIFFER, and how often each known-wrong sampler is.

    python scripts/sampled_rates.py record DIR [--runs 12 --samples 50]   # the reference runner
    python scripts/sampled_rates.py rates DIR [--trials 200 --draws 60 --alpha 0.01]

`record` runs the reference runner in-process (the same code as `python -m
difftest.runners.reference`) for the target alone and for speculative sampling, correct and
with each known-wrong sampler, each run with a fresh sampler seed, and keeps every run's trace
in DIR/ARM/run-NNN.log. `rates` judges trials on those traces: each trial takes, per prompt,
`--draws` draws of the no-spec arm and as many of the other arm, chosen without replacement
from the recorded pool (so a trial's draws are independent draws of each arm, as fresh runs
would give; trials share draws with each other, so the spread of a rate across trials is wider
than a binomial's), and applies the instrument of a `mode = "sampled"` comparison
(difftest.analysis.distribution) at `--alpha`. It prints each arm's DIFFER rate.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The runner settings of the measurement: the sampled comparison of difftest/configs/default.toml.
SETTINGS = dict(requests=3, steps=6, vocab=32, temperature=0.6, top_p=0.8)
ARMS = {"no-spec": dict(no_spec=True), "spec": {}, "noise-reuse": dict(mutation="noise-reuse"),
        "residual-unnormalised": dict(mutation="residual-unnormalised"),
        "top-p-draft-only": dict(mutation="top-p-draft-only"),
        "temperature-draft-only": dict(mutation="temperature-draft-only")}


def record(folder: Path, runs: int, samples: int, arms: list[str]) -> None:
    from difftest.runners.reference.options import RunnerOptions
    from difftest.runners.reference.runner import run

    for arm in arms:
        out = folder / arm
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        for i in range(runs):
            if (out / f"run-{i:03d}.log").exists():  # kept from an earlier, interrupted record
                continue
            options = RunnerOptions(samples=samples, **SETTINGS, **ARMS[arm])  # type: ignore[arg-type]
            result = run(options, 1)
            (out / f"run-{i:03d}.log").write_text("".join(line + "\n" for line in result.lines))
        print(f"{arm}: {runs} runs of {samples} draws per prompt in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


def rates(folder: Path, trials: int, draws: int, alpha: float, seed: int) -> None:
    from difftest.analysis.distribution import (Draws, acceptance_check, distribution_test,
                                                draws_of, aligned)
    from difftest.core.kinds import VerdictKind
    from difftest.analysis.distribution import SampledEvidence, sampled_kind
    from difftest.trace.parser import parse_trace
    from difftest.trace.sampled import VerifiedRows, parse_samples

    def load(arm: str) -> tuple[dict[str, list[tuple[int, list[int]]]], list[VerifiedRows]]:
        logs = sorted((folder / arm).glob("run-*.log"))
        return (draws_of([parse_trace(p) for p in logs]),
                [parse_samples(p).rows() for p in logs])

    base, _ = load("no-spec")
    rng = random.Random(seed)
    print(f"alpha {alpha}, {trials} trials, {draws} draws per prompt and arm per trial, "
          f"{len(base)} prompts")
    for arm in ARMS:
        if arm == "no-spec" or not (folder / arm).is_dir():
            continue
        other, rows = load(arm)
        pool_rows = [r for r in rows]
        differ = by_accept = 0
        t0 = time.perf_counter()
        for _ in range(trials):
            a = {p: rng.sample(base[p], draws) for p in base}
            b = {p: rng.sample(other[p], draws) for p in other}
            da, db = aligned(a, b)
            test = distribution_test(da, db, alpha)
            # the acceptance rows of as many runs as the trial's draws came from, chosen at random
            share = max(1, round(len(pool_rows) * draws / max(len(v) for v in other.values())))
            picked = rng.sample(pool_rows, min(share, len(pool_rows)))
            joined = VerifiedRows.joined(picked)
            acc = acceptance_check(joined, alpha) if len(joined) else ()
            kind, _ = sampled_kind(SampledEvidence(test, {arm: acc}))
            differ += kind is VerdictKind.DIFFER
            by_accept += any(r.flagged for r in acc)
        print(f"{arm}: DIFFER in {differ}/{trials} trials ({100 * differ / trials:.1f}%), "
              f"{by_accept} of them by the acceptance check; {draws * len(base)} draw pairs per "
              f"trial; {time.perf_counter() - t0:.0f} s", flush=True)
    del Draws


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record")
    r.add_argument("folder", type=Path)
    r.add_argument("--runs", type=int, default=12)
    r.add_argument("--samples", type=int, default=50)
    r.add_argument("--arms", default=",".join(ARMS))
    t = sub.add_parser("rates")
    t.add_argument("folder", type=Path)
    t.add_argument("--trials", type=int, default=200)
    t.add_argument("--draws", type=int, default=60)
    t.add_argument("--alpha", type=float, default=0.01)
    t.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.command == "record":
        record(args.folder, args.runs, args.samples, args.arms.split(","))
    else:
        rates(args.folder, args.trials, args.draws, args.alpha, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
