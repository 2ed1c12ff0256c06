"""A synthetic git history for `difftest bisect`: one tiny runner committed at every commit,
whose arm B prints a differing trace from the planted bad commit on, commits that do not build,
commits whose runs say nothing, and (optionally) runs that read wrong at random at a chosen rate.

Shared by tests/bisect/test_bisect.py and scripts/bench_bisect.py. Each commit holds:
    state.txt    good | bad | blind (both arms print a degenerate trace) | crash | garbled
    broken       present at a commit whose build fails
    runner.py    the arm: `runner.py ROLE`; ROLE a always prints the good trace, ROLE b the
                 differing one where state.txt says bad
    build.py     the build: fails where `broken` is present
A run appends one line to $BISECT_LEDGER (outside the repo) when it is set, so a caller counts
arm runs; with $BISECT_FLAKE_RATE > 0, a run reads the other way with that probability, drawn
from a hash of $BISECT_SEED and the number of arm-b runs before it in the ledger (the same
flips at -j 1 every time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
GOOD_TRACE = DATA / "compare" / "agree_a.log"
BAD_TRACE = DATA / "compare" / "differ_b.log"
BLIND_TRACE = DATA / "compare" / "degenerate_a.log"
GARBLED_TRACE = DATA / "malformed_pos.log"

RUNNER = f'''\
import fcntl, hashlib, os, sys
role = sys.argv[1]
state = open("state.txt").read().strip()
ledger = os.environ.get("BISECT_LEDGER")
n = 0
if ledger:
    with open(ledger, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        # the draw of this run: the count of arm-b runs before it (arm a's runs, which race
        # with arm b's, do not move it), so a bisect at -j 1 draws the same flips every time
        n = sum(line.split()[1:2] == ["b"] for line in fh.read().splitlines())
        fh.write(f"{{state}} {{role}} {{os.environ.get('SLURM_JOB_ID', '-')}}\\n")
if state == "crash":
    print("runner: cannot start the engine", file=sys.stderr)
    sys.exit(7)
traces = {{"good": {str(GOOD_TRACE)!r}, "bad": {str(BAD_TRACE)!r},
          "blind": {str(BLIND_TRACE)!r}, "garbled": {str(GARBLED_TRACE)!r}}}
kind = state if state in ("blind", "garbled") else "good"
bad = role == "b" and state == "bad"
rate = float(os.environ.get("BISECT_FLAKE_RATE", "0"))
if rate > 0 and kind == "good" and role == "b":
    seed = os.environ.get("BISECT_SEED", "0")
    draw = int(hashlib.sha256(f"{{seed}}:{{n}}".encode()).hexdigest()[:12], 16) / 16 ** 12
    if draw < rate:
        bad = not bad
if bad:
    kind = "bad"
sys.stderr.write(open(traces[kind]).read())
'''

BUILD = '''\
import os, sys
if os.environ.get("BISECT_BUILD_LEDGER"):
    with open(os.environ["BISECT_BUILD_LEDGER"], "a") as fh:
        fh.write(open("number.txt").read())
if os.path.exists("broken"):
    print("build.py: error: this commit does not compile", file=sys.stderr)
    sys.exit(2)
open("built.txt", "w").write("ok\\n")
'''


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {args} failed: {proc.stderr}")
    return proc.stdout.rstrip("\n")


@dataclass(frozen=True)
class History:
    repo: Path
    shas: tuple[str, ...]  # oldest first; shas[0] is the good end, shas[-1] the bad end
    bad_at: int  # index of the planted first bad commit

    def subject(self, i: int) -> str:
        return f"commit {i}"


def make_history(repo: Path, commits: int, bad_at: int,
                 unbuildable: Collection[int] = (),
                 states: Mapping[int, str] | None = None) -> History:
    """`commits` commits, index 0 .. commits-1; state bad from `bad_at` on, other states where
    `states` says so (for that commit only); `unbuildable` commits fail their build."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "runner.py").write_text(RUNNER)
    (repo / "build.py").write_text(BUILD)
    shas = []
    for i in range(commits):
        state = (states or {}).get(i, "bad" if i >= bad_at else "good")
        (repo / "state.txt").write_text(state + "\n")
        (repo / "number.txt").write_text(f"{i}\n")
        broken = repo / "broken"
        if i in unbuildable:
            broken.write_text("yes\n")
        elif broken.exists():
            broken.unlink()
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return History(repo, tuple(shas), bad_at)


def config_text(build: bool = True, launcher: list[str] | None = None,
                env: Mapping[str, str] | None = None) -> str:
    """A difftest.toml with arms a and b at git_ref HEAD (moved by the bisect), and the
    comparisons `lanes` (a vs b: differs where the state is bad) and `drift` (b vs b: the same
    at every commit, differs only when arm A stays at the good end)."""
    extra = ""
    if build:
        extra += 'build = ["{python}", "build.py"]\n'
    if launcher:
        extra += f"launcher = {json.dumps(launcher)}\n"
    if env:
        extra += "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\n"
    arms = ""
    for name, role in (("a", "a"), ("b", "b")):
        arms += (f"[arms.{name}]\ncommand = [\"{{python}}\", \"runner.py\", \"{role}\"]\n"
                 f"git_ref = \"HEAD\"\n{extra}")
    return arms + """
[comparisons.lanes]
arm_a = "a"
arm_b = "b"
# the runner's switch (its role argument) prints no setting: declared as having no
# trace-visible effect, else arms launched differently that report one configuration are INERT
toggle = []

[comparisons.drift]
arm_a = "b"
arm_b = "b"
"""


def write_config(path: Path, repo: Path, **kw: object) -> Path:
    text = config_text(**kw)  # type: ignore[arg-type]
    text = text.replace('git_ref = "HEAD"\n', f'git_ref = "HEAD"\nrepo = {json.dumps(str(repo))}\n')
    path.write_text(text)
    return path


PY = sys.executable
