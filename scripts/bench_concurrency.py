"""Does running two arms side by side cost what the slower one costs alone?

Runs the paged and materialized arms of the reference runner (VT_SPEC_TRACE=3) through
difftest.execute.run_arms, first concurrently and then each on its own, several times, and
prints the medians and the ratio concurrent / max(single). The target from the compare issue is
concurrent <= 1.25 x slower single + 1 s.

    python scripts/bench_concurrency.py [--reps 5] [--fallback] [-- EXTRA RUNNER ARGS]

When the reference runner cannot be imported (or with --fallback) a CPU-bound Python snippet
stands in for it, and the output says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from difftest.config import ArmSpec  # noqa: E402
from difftest.execute import run_arms  # noqa: E402

CPU_SNIPPET = """
import sys
n, total = 0, 0
while n < 6_000_000:
    total += n * n % 7
    n += 1
print("[SPECTRACE] req=r0 pos=1 k=1 ns=1 acc=0 draft=[ 1 ] emit=[ 1 ]", file=sys.stderr)
print(total)
"""


def _reference_available() -> bool:
    try:
        return importlib.util.find_spec("difftest.runners.reference.__main__") is not None
    except ImportError:
        return False


def _specs(fallback: bool, extra: list[str]) -> list[ArmSpec]:
    if fallback:
        return [ArmSpec(lane, (sys.executable, "-c", CPU_SNIPPET), env={"LANE": lane})
                for lane in ("paged", "materialized")]
    return [ArmSpec(lane, (sys.executable, "-m", "difftest.runners.reference", "--lane", lane, *extra),
                    env={"VT_SPEC_TRACE": "3", "VT_DFLASH_PAGED": "0" if lane == "materialized"
                         else "1", "DIFFTEST_MUTATION": "none"})
            for lane in ("paged", "materialized")]


def _timed(specs: list[ArmSpec], root: Path) -> float:
    run_dir = Path(tempfile.mkdtemp(dir=root))
    t0 = time.perf_counter()
    results = run_arms(specs, run_dir, progress=False)
    wall = time.perf_counter() - t0
    for res in results.values():
        if not res.ok:
            raise SystemExit(f"benchmark arm failed: {res.failure()}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--fallback", action="store_true",
                        help="use the CPU-bound snippet even when the reference runner exists")
    parser.add_argument("extra", nargs="*", help="extra arguments for the reference runner")
    args = parser.parse_args()

    fallback = args.fallback or not _reference_available()
    specs = _specs(fallback, args.extra)
    what = ("CPU-bound python snippet (the reference runner is not importable)" if fallback
            and not args.fallback else "CPU-bound python snippet" if fallback
            else "reference runner, VT_SPEC_TRACE=3")
    print(f"arms: paged, materialized ({what}); {args.reps} repetitions; "
          f"{os.cpu_count()} CPUs")

    concurrent: list[float] = []
    single: dict[str, list[float]] = {s.name: [] for s in specs}
    with tempfile.TemporaryDirectory(prefix="difftest-bench-") as tmp:
        root = Path(tmp)
        _timed(specs[:1], root)  # warm the file cache (imports) before measuring
        for _ in range(args.reps):
            concurrent.append(_timed(specs, root))
            for spec in specs:
                single[spec.name].append(_timed([spec], root))

    med_conc = statistics.median(concurrent)
    med_single = {name: statistics.median(v) for name, v in single.items()}
    slower = max(med_single.values())
    sequential = sum(med_single.values())
    budget = 1.25 * slower + 1.0
    for name, value in med_single.items():
        print(f"  {name:<13} alone      median {value:6.2f} s  "
              f"(runs: {', '.join(f'{x:.2f}' for x in single[name])})")
    print(f"  both          concurrent median {med_conc:6.2f} s  "
          f"(runs: {', '.join(f'{x:.2f}' for x in concurrent)})")
    print(f"  one after the other (sum of medians) {sequential:6.2f} s")
    print(f"ratio concurrent / max(single) = {med_conc / slower:.2f}; "
          f"target <= 1.25 x {slower:.2f} + 1 = {budget:.2f} s: "
          f"{'met' if med_conc <= budget else 'NOT met'}")
    return 0 if med_conc <= budget else 1


if __name__ == "__main__":
    raise SystemExit(main())
