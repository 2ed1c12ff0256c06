"""Mutation score of difftest's core, per module: mutmut mutates one module at a time and runs
only the tests listed for it in pyproject.toml ([tool.difftest.mutation.modules]).

A surviving mutant is a change to the code that no test notices. Every survivor counts against
the score, equivalent ones included; the ones left are listed, with why, in
scripts/mutation_survivors.md.

Usage:
  nice -n 19 python scripts/mutation_score.py                 # every module, one after another
  nice -n 19 python scripts/mutation_score.py --module align  # one module (repeatable)
  python scripts/mutation_score.py --list                     # the modules and their tests
Each module runs in its own scratch copy, .mutation/<module>/ (kept: `cd .mutation/align &&
mutmut show NAME` prints a survivor's diff). --survivors FILE writes every survivor's diff.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / ".mutation"
# what a scratch copy needs to run the tests; mutmut copies tests/ and pyproject.toml itself
COPY = ("difftest", "tests", "configs", "traces", "scripts", "pyproject.toml")
IGNORE = shutil.ignore_patterns("__pycache__", "*.obtained", "runs")
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


@dataclass(frozen=True)
class Module:
    name: str
    file: str
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Score:
    module: str
    counts: dict[str, int]
    survivors: tuple[str, ...]
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def killed(self) -> int:
        return sum(n for status, n in self.counts.items() if status in KILLED)

    @property
    def score(self) -> float:
        return 100.0 * self.killed / self.total if self.total else 0.0


def load(root: Path = REPO) -> tuple[list[Module], list[str]]:
    """The modules to mutate with their tests, and the slow tests every run leaves out."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["difftest"]["mutation"]
    modules = [Module(name, entry["file"], tuple(entry["tests"]))
               for name, entry in cfg["modules"].items()]
    return modules, list(cfg.get("deselect", []))


def problems(root: Path = REPO) -> list[str]:
    """Every module file or test file the configuration names that does not exist."""
    modules, deselect = load(root)
    out = [f"{m.name}: {path} does not exist" for m in modules
           for path in (m.file, *m.tests) if not (root / path).is_file()]
    out += [f"deselect: {d.split('::')[0]} does not exist" for d in deselect
            if not (root / d.split("::")[0]).is_file()]
    return out


def _scratch(module: Module, deselect: list[str]) -> Path:
    """A fresh copy of the working tree whose [tool.mutmut] mutates only `module`."""
    work = WORK / module.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=IGNORE)
        elif src.exists():
            shutil.copy2(src, work / name)
    args = [*module.tests, *(f"--deselect={d}" for d in deselect)]
    extra = (f"only_mutate = {json.dumps([module.file])}\n"
             f"pytest_add_cli_args_test_selection = {json.dumps(args)}\n")
    pyproject = work / "pyproject.toml"
    text = pyproject.read_text()
    assert text.count("[tool.mutmut]\n") == 1, "pyproject.toml needs one [tool.mutmut] table"
    pyproject.write_text(text.replace("[tool.mutmut]\n", "[tool.mutmut]\n" + extra))
    return work


def _statuses(work: Path, module: Module) -> dict[str, str]:
    """mutant name -> status, from the meta file mutmut leaves beside the mutated module."""
    from mutmut.stats import status_by_exit_code

    meta = json.loads((work / "mutants" / (module.file + ".meta")).read_text())
    return {name: status_by_exit_code[code] for name, code in meta["exit_code_by_key"].items()}


def run(module: Module, deselect: list[str], jobs: int, survivors_to: Path | None) -> Score:
    work = _scratch(module, deselect)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)],
                          cwd=work, capture_output=True, text=True)
    seconds = time.monotonic() - start
    (work / "mutmut.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (work / "mutants" / (module.file + ".meta")).exists():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        sys.exit(f"mutmut failed on {module.name} (exit {proc.returncode}):\n{tail}")
    statuses = _statuses(work, module)
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    survived = tuple(sorted(n for n, s in statuses.items() if s not in KILLED))
    if survivors_to is not None:
        with survivors_to.open("a") as out:
            for name in survived:
                diff = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=work,
                                      capture_output=True, text=True).stdout
                out.write(f"## {name} ({statuses[name]})\n\n```diff\n{diff.strip()}\n```\n\n")
    return Score(module.name, counts, survived, seconds)


def table(scores: list[Score]) -> str:
    rows = [[s.module, s.total, s.killed, s.counts.get("survived", 0), s.counts.get("no tests", 0),
             s.total - s.killed - s.counts.get("survived", 0) - s.counts.get("no tests", 0),
             f"{s.score:.1f}%", f"{s.seconds:.0f}"] for s in scores]
    return tabulate(rows, headers=["module", "mutants", "killed", "survived", "no tests", "other",
                                   "score", "seconds"], tablefmt="github")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", action="append", default=[], help="module name (repeatable)")
    ap.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    ap.add_argument("--survivors", type=Path, help="append every survivor's diff to this file")
    ap.add_argument("--list", action="store_true", help="print the modules and their tests")
    ap.add_argument("--bar", type=float, default=90.0, help="exit 1 below this score (percent)")
    a = ap.parse_args()
    modules, deselect = load()
    bad = problems()
    if bad:
        sys.exit("pyproject.toml [tool.difftest.mutation]:\n" + "\n".join(bad))
    if a.list:
        print(tabulate([[m.name, m.file, " ".join(m.tests)] for m in modules],
                       headers=["module", "file", "tests"], tablefmt="github"))
        return 0
    unknown = set(a.module) - {m.name for m in modules}
    if unknown:
        sys.exit(f"unknown module(s) {sorted(unknown)}; known: {[m.name for m in modules]}")
    scores = []
    for m in modules:
        if a.module and m.name not in a.module:
            continue
        scores.append(run(m, deselect, a.jobs, a.survivors))
        print(table(scores[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(scores))
    return 0 if all(s.score >= a.bar for s in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
