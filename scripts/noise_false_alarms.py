"""How often the noise-floor rule fails a healthy comparison: runs the reference runner's
nondeterministic lane many times (in process), then judges random draws of "a 3-run floor of
arm A, and B = one more rerun of A (or the deterministic materialized lane)". Prints the false
alarms of the shipped rule beside those of "every value above the floor counts".

With --band it also prints how far a healthy B's largest difference from A reaches past the
floor (B's max |diff| / floor over the draws): the noise band NOISE_BAND must lie above it.

Usage: python scripts/noise_false_alarms.py [--runs 24] [--trials 400] [--floor-runs 3] [--band]
"""

from __future__ import annotations

import argparse
import random
import time

from difftest.analysis.compare import compare
from difftest.analysis.floor import measure_floor
from difftest.runners.reference.options import RunnerOptions
from difftest.runners.reference.runner import run
from difftest.trace.parser import parse_lines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=24)
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--floor-runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--band", action="store_true", help="print B's max |diff| / floor")
    args = p.parse_args()
    t0 = time.perf_counter()
    mat = parse_lines(run(RunnerOptions(lane="materialized"), 3).lines)
    runs = [parse_lines(run(RunnerOptions(lane="paged", nondeterministic=True), 3).lines)
            for _ in range(args.runs)]
    print(f"{args.runs} runs of paged-nondet in {time.perf_counter() - t0:.0f} s")
    rnd = random.Random(args.seed)
    counts = {"rerun": [0, 0], "materialized": [0, 0]}  # [shipped rule, any value above floor]
    ratios: dict[str, list[float]] = {"rerun": [], "materialized": []}
    for _ in range(args.trials):
        pick = rnd.sample(range(args.runs), args.floor_runs + 1)
        a = [runs[i] for i in pick[:-1]]
        floor = measure_floor("paged-nondet", a)
        for name, b in (("rerun", runs[pick[-1]]), ("materialized", mat)):
            c = compare(a[0], b, floor=floor)
            lg = c.logits
            counts[name][0] += bool(c.blocks_logit_differing or c.blocks_differing)
            counts[name][1] += bool(lg is not None and lg.excess is not None and lg.excess.exceed)
            if c.max_abs_logit_diff is not None and floor.floor > 0:
                ratios[name].append(c.max_abs_logit_diff / floor.floor)
    for name, (shipped, naive) in counts.items():
        print(f"B = {name:<12} false alarms: shipped rule {shipped}/{args.trials}, "
              f"every value above the floor counts {naive}/{args.trials}")
    if args.band:
        for name, r in ratios.items():
            r.sort()
            if r:
                print(f"B = {name:<12} max |diff| / floor over {len(r)} draws: median "
                      f"{r[len(r) // 2]:.3g}, p99 {r[min(len(r) - 1, len(r) * 99 // 100)]:.3g}, "
                      f"max {r[-1]:.3g}")


if __name__ == "__main__":
    main()
