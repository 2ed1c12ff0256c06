"""Where the test suite's CPU goes: each test's CPU seconds in the pytest process and in the
processes it started and waited for (arms, `python -m difftest`, a fresh pytest, git), summed
per file, beside the whole run's CPU as `/usr/bin/time` counts it.

Wall times (tests/durations.json) follow the machine's load; CPU seconds are what a suite costs
CI whatever else runs. Processes nobody waits for (Slurm jobs run by slurmd) are in neither.

Usage: python scripts/suite_cost.py [--top 30] [--json FILE] -- [pytest arguments, e.g. -n 2]
Run from the repository root; it is also a pytest plugin (`-p suite_cost`), which the script
loads into the pytest it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

OUT_ENV = "SUITE_COST_DIR"  # where each pytest process (each xdist worker) writes its figures
_started: dict[str, tuple[float, float]] = {}
_spent: dict[str, tuple[float, float]] = {}


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def pytest_runtest_protocol(item: Any, nextitem: Any) -> None:
    _started[item.nodeid] = _cpu()


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    start = _started.pop(nodeid, None)
    if start is not None:
        now = _cpu()
        _spent[nodeid] = (now[0] - start[0], now[1] - start[1])


def pytest_sessionfinish(session: Any) -> None:
    folder = os.environ.get(OUT_ENV)
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder, f"{worker}.json").write_text(json.dumps(_spent), encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=30, help="files to list (most CPU first)")
    ap.add_argument("--json", type=Path, help="also write {nodeid: [own, children]} here")
    ap.add_argument("pytest_args", nargs="*")
    args = ap.parse_args()
    from tabulate import tabulate

    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, **{OUT_ENV: folder})
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_cost",
                               *args.pytest_args], env=env, check=False)
        whole = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent: dict[str, tuple[float, float]] = {}
        for part in Path(folder).glob("*.json"):
            spent.update(json.loads(part.read_text(encoding="utf-8")))
    if args.json:
        args.json.write_text(json.dumps(spent, indent=0, sort_keys=True), encoding="utf-8")
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for nodeid, (own, kids) in spent.items():
        row = per_file[nodeid.split("::", 1)[0]]
        row[0] += own
        row[1] += kids
        row[2] += 1
    ranked = sorted(per_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    print(tabulate([(f, int(n), f"{o:.1f}", f"{k:.1f}", f"{o + k:.1f}")
                    for f, (o, k, n) in ranked[:args.top]],
                   headers=("file", "tests", "own s", "children s", "CPU s")))
    own = sum(o for o, _ in spent.values())
    kids = sum(k for _, k in spent.values())
    print(f"\n{len(spent)} tests: {own:.1f} s in pytest, {kids:.1f} s in the processes they "
          f"started; the whole run {whole.ru_utime + whole.ru_stime:.1f} s of CPU "
          f"({whole.ru_utime:.1f} user + {whole.ru_stime:.1f} system), exit {done.returncode}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
