"""Time the reference runner's default run as a user starts it, and measure the motivating table.

    python scripts/bench_reference.py [--reps 5] [--no-mutations]

Part 1 starts `python -m difftest.runners.reference` (VT_SPEC_TRACE=3, default options) as a fresh process
per repetition, so `import torch` is inside the figure, for both lanes and both fixtures, and
prints median/min/max wall seconds. Part 2 runs each mutation against its baseline in-process
and counts, at equal (request, position), the blocks whose drafts differ and the largest absolute
difference of the raw block logits.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tabulate import tabulate  # noqa: E402

LANES = ("paged", "materialized")
FIXTURES = ("informative", "degenerate")


def time_process(argv: list[str], reps: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k not in ("VT_DFLASH_PAGED", "DIFFTEST_MUTATION")}
    env.update(VT_SPEC_TRACE="3", PYTHONPATH=str(ROOT))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return times


def time_in_process(lane: str, fixture: str, reps: int) -> list[float]:
    from difftest.runners.reference.options import RunnerOptions
    from difftest.runners.reference.runner import run

    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run(RunnerOptions(lane=lane, fixture=fixture), 3)
        times.append(time.perf_counter() - t0)
    return times


def mutation_table() -> list[list[object]]:
    from difftest.runners.reference.options import RunnerOptions
    from difftest.runners.reference.runner import run

    rows = []
    for fixture in FIXTURES:
        base = RunnerOptions(fixture=fixture)
        good = run(base, 3)
        cases = [("scalars off", base.with_(scalars=False))]
        cases += [(m, base.with_(mutation=m)) for m in ("causal-mask", "skip-kv-write",
                                                        "stale-seq-lens")]
        for name, opts in cases:
            bad = run(opts, 3)
            by_key = {(r.req, r.pos): r for r in bad.records}
            pairs = [(r, by_key[(r.req, r.pos)]) for r in good.records if (r.req, r.pos) in by_key]
            moved = sum(a.draft != b.draft for a, b in pairs)
            diff = max(float((a.logits - b.logits).abs().max()) for a, b in pairs)
            rows.append([name, fixture, f"{moved}/{len(pairs)}", "yes" if moved else "no",
                         f"{diff:.4g}", "yes" if diff > 0 else "no"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-mutations", action="store_true")
    args = ap.parse_args()
    rows = []
    cases = [("(import torch only)", "", [sys.executable, "-c", "import torch"])]
    cases += [(lane, fixture, [sys.executable, "-m", "difftest.runners.reference", "--lane", lane,
                               "--fixture", fixture])
              for fixture in FIXTURES for lane in LANES]
    for lane, fixture, argv in cases:
        t = time_process(argv, args.reps)
        inner = f"{statistics.median(time_in_process(lane, fixture, args.reps)):.3f}" \
            if fixture else ""
        rows.append([lane, fixture, args.reps, f"{statistics.median(t):.2f}", f"{min(t):.2f}",
                     f"{max(t):.2f}", inner])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"default run, fresh process each time ({os.cpu_count()} CPUs, load {load:.1f}), "
          "wall seconds:")
    print(tabulate(rows, headers=["lane", "fixture", "reps", "median", "min", "max",
                                  "in-process median"]))
    if not args.no_mutations:
        print("\nagainst the same options without it, at equal (req, pos):")
        print(tabulate(mutation_table(), headers=["change", "fixture", "blocks differing",
                                                  "drafts move", "max |logit diff|",
                                                  "logits move"]))


if __name__ == "__main__":
    main()
