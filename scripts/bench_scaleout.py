"""Wall time of `difftest check` on the shipped config: locally with -j 1 and -j 2, and through
a Slurm launcher (`srun -Q --`) with -j 2; and the overhead srun adds to one arm.

Needs a Slurm cluster that takes jobs (scripts/slurm-up.sh start). Each figure is one run on
a machine others may share: read them as rough, and compare the ratios printed side by side.

    python scripts/bench_scaleout.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "difftest" / "configs" / "default.toml"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _check(config: Path, jobs: int, root: Path) -> float:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "difftest", "check", "-j", str(jobs),
                           "--config", str(config), "--run-root", str(root), "--no-progress"],
                          env=ENV, capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"check -j {jobs} with {config.name} exited {proc.returncode}:\n"
                         f"{proc.stdout}\n{proc.stderr}")
    return took


def _one(argv: list[str]) -> float:
    t0 = time.monotonic()
    subprocess.run(argv, env=ENV, check=True, capture_output=True)
    return time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (median shown)")
    parser.add_argument("--overhead-runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        launched = Path(tmp) / "launched.toml"
        launched.write_text('[defaults]\nlauncher = ["srun", "-Q", "--"]\n' + SHIPPED.read_text())
        rows = []
        for label, config, jobs in (("local -j 1", SHIPPED, 1), ("local -j 2", SHIPPED, 2),
                                    ("srun  -j 2", launched, 2)):
            times = [_check(config, jobs, Path(tmp) / "runs") for _ in range(args.repeat)]
            rows.append((label, statistics.median(times)))
        base = rows[0][1]
        print("check on the shipped config (7 arms: 4 shared + 3 probe arms)")
        for label, took in rows:
            print(f"  {label}: {took:6.1f} s   ({took / base:.2f} x local -j 1)")
        bare = [_one(["true"]) for _ in range(args.overhead_runs)]
        srun = [_one(["srun", "-Q", "--", "true"]) for _ in range(args.overhead_runs)]
        print(f"srun overhead per arm (median of {args.overhead_runs}, `srun -Q -- true` minus "
              f"`true`): {statistics.median(srun) - statistics.median(bare):.2f} s "
              f"(min {min(srun) - min(bare):.2f} s, max {max(srun) - min(bare):.2f} s)")


if __name__ == "__main__":
    main()
