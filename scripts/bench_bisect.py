"""How often `difftest bisect` names a planted bad commit when the arm lies at random, and what
that costs in arm runs, beside a bisect that trusts every run (one run per commit).

Each trial makes a synthetic history (tests/bisect_history.py): `--commits` commits, one planted
bad commit drawn from the trial's seed, `--unbuildable` commits whose build fails (never the
planted commit or the one before it: a failed build next to the boundary leaves a range, which
no bisect can narrow), and a runner whose arm B reads the other way with probability `--flake`
per run. Three bisects per trial, over the same history:
  sequential     --flake-rate FLAKE (the per-commit sequential test), arm flaky
  trusting       flake rate 0 (one run per commit), arm flaky
  deterministic  flake rate 0, arm not flaky: the cost baseline
Success = the bisect names exactly the planted commit.

    python scripts/bench_bisect.py --trials 40 --json bench_bisect.json
    python scripts/bench_bisect.py --trials 40 --only sequential --error-rate 0.05
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from bisect_history import make_history, write_config  # noqa: E402
from difftest import api  # noqa: E402
from difftest.bisect import Status  # noqa: E402


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for k successes in n trials."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


KINDS = ("sequential", "trusting", "deterministic")


def trial(seed: int, commits: int, unbuildable: int, flake: float, error_rate: float,
          jobs: int, work: Path, kinds: tuple[str, ...] = KINDS) -> dict[str, object]:
    rng = random.Random(seed)
    planted = rng.randint(commits // 8, commits - 2)
    pool = [i for i in range(1, commits - 1) if i not in (planted - 1, planted)]
    broken = sorted(rng.sample(pool, unbuildable))
    h = make_history(work / "repo", commits, planted, unbuildable=set(broken))
    config = write_config(work / "difftest.toml", h.repo)
    os.environ["DIFFTEST_CACHE"] = str(work / "cache")
    os.environ["BISECT_SEED"] = str(seed)
    row: dict[str, object] = {"seed": seed, "planted": planted, "unbuildable": broken}
    for name, arm_flake, stated in (("sequential", flake, flake), ("trusting", flake, 0.0),
                                    ("deterministic", 0.0, 0.0)):
        if name not in kinds:
            continue
        os.environ["BISECT_FLAKE_RATE"] = str(arm_flake)
        os.environ["BISECT_LEDGER"] = str(work / f"ledger-{name}")
        clock = time.monotonic()
        r = api.bisect("lanes", good=h.shas[0], bad="main", config=config, repo=h.repo,
                       flake_rate=stated, error_rate=error_rate, jobs=jobs,
                       run_root=work / "runs", progress=False)
        named = r.first_bad.index if r.first_bad is not None else None
        row[name] = {"status": r.status.value, "named": named,
                     "candidates": [c.index for c in r.candidates],
                     "ok": r.status is Status.FOUND and named == planted,
                     "arm_runs": r.arm_runs, "comparisons": r.comparisons,
                     "confidence": r.confidence, "error_bound": r.error_bound,
                     "seconds": round(time.monotonic() - clock, 2)}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--commits", type=int, default=64)
    ap.add_argument("--unbuildable", type=int, default=3)
    ap.add_argument("--flake", type=float, default=0.10)
    ap.add_argument("--error-rate", type=float, default=0.01)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write every trial here")
    ap.add_argument("--only", choices=KINDS, action="append", default=None,
                    help="run only these bisects (repeatable; default: all three)")
    args = ap.parse_args()
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.trials):
        work = Path(tempfile.mkdtemp(prefix="bench-bisect-"))
        try:
            row = trial(seed, args.commits, args.unbuildable, args.flake, args.error_rate,
                        args.jobs, work, tuple(args.only or KINDS))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows.append(row)
        summary = "  ".join(f"{k}={'ok' if v['ok'] else 'MISS'}/{v['arm_runs']}"  # type: ignore[index]
                            for k, v in row.items() if isinstance(v, dict))
        print(f"seed {seed:3d} planted #{row['planted']:2d}  {summary}", flush=True)
    n = len(rows)
    print(f"\n{n} trials, {args.commits} commits, {args.unbuildable} unbuildable, arm flake rate "
          f"{args.flake:g}, -j {args.jobs}")
    out = {"args": {k: str(v) for k, v in vars(args).items()}, "trials": rows, "summary": {}}
    for name in args.only or KINDS:
        ok = sum(bool(r[name]["ok"]) for r in rows)  # type: ignore[index]
        runs = [int(r[name]["arm_runs"]) for r in rows]  # type: ignore[index]
        lo, hi = wilson(ok, n)
        conf = [r[name]["confidence"] for r in rows  # type: ignore[index]
                if r[name]["confidence"] is not None]  # type: ignore[index]
        mean_conf = statistics.mean(conf) if conf else float("nan")
        sd = statistics.stdev(runs) if n > 1 else 0.0
        bounds = [float(r[name]["error_bound"]) for r in rows]  # type: ignore[index]
        print(f"{name:13s} named the planted commit in {ok}/{n} ({ok / n:.0%}; 95% CI "
              f"{lo:.0%}-{hi:.0%}); arm runs per bisect mean {statistics.mean(runs):.1f} "
              f"(sd {sd:.1f}); mean stated confidence {mean_conf:.3f}; mean error bound "
              f"{statistics.mean(bounds):.4f}")
        out["summary"][name] = {"ok": ok, "trials": n, "wilson95": [lo, hi],  # type: ignore[index]
                                "mean_arm_runs": statistics.mean(runs), "sd_arm_runs": sd,
                                "mean_confidence": mean_conf}
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
