"""`difftest sweep` through the command line: a bad comparison is a usage error, a sweep whose
arms print no `[spec-coverage]` line has nothing exercised to show (exit 3), and arms that never
receive the generated inputs judge none of them (exit 3, each input named)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import json

DATA = Path(__file__).resolve().parent / "data" / "compare"
SWEEP_DATA = Path(__file__).resolve().parent / "data" / "sweep"
# a replay arm that reads its trace from its first argument, so the arguments the sweep adds
# after it are ignored
REPLAY = ("import sys; sys.stdout.write('generated\\n'); "
          "sys.stderr.write(open(sys.argv[1]).read())")


def replay_arm(name: str, trace: Path) -> str:
    argv = ", ".join(json.dumps(a) for a in ["{python}", "-c", REPLAY, str(trace)])
    return f"[arms.{name}]\ncommand = [{argv}]\n"


def _sweep(tmp_path: Path, *args: str, a: Path = DATA / "agree_a.log",
           b: Path = DATA / "agree_b.log", toggle: str = "[]") -> subprocess.CompletedProcess[str]:
    (tmp_path / "difftest.toml").write_text(
        replay_arm("a", a) + replay_arm("b", b)
        + f'[comparisons.lanes]\narm_a = "a"\narm_b = "b"\nexpect = "same"\ntoggle = {toggle}\n')
    return subprocess.run([sys.executable, "-m", "difftest", "sweep", *args,
                           "--run-root", str(tmp_path / "runs"), "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_an_unknown_comparison_is_a_usage_error(tmp_path: Path) -> None:
    proc = _sweep(tmp_path, "-c", "nosuch")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown comparison 'nosuch'" in proc.stderr + proc.stdout


def test_arms_that_print_no_coverage_exercise_nothing(tmp_path: Path) -> None:
    # replay arms ignore the generated arguments and print no [spec-coverage] line: the sweep
    # ran every page-boundary input and none of them showed a boundary reached
    proc = _sweep(tmp_path, "-c", "lanes")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "page boundary inside a drafted block (page_cross)" in proc.stdout
    assert proc.stdout.count("NOT exercised") == 6


def test_arms_that_ignore_the_generated_inputs_judge_none_of_them(tmp_path: Path) -> None:
    # a real capture of each reference lane, replayed whatever the sweep appends: one input
    # run nine times. Both exercised page_cross and page_order and agree, and no input reached
    # them: every input is uninformative, named, and the sweep is exit 3 (it was exit 0)
    proc = _sweep(tmp_path, "-c", "lanes", a=SWEEP_DATA / "paged.log",
                  b=SWEEP_DATA / "materialized.log", toggle="[]")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.count("uninformative  UNINFORMATIVE exercised") == 6
    assert proc.stdout.count("a's trace reads the same as for the input") == 6
    assert "b's trace reads the same as for the input --prompt-len 15 --seed 0" in proc.stdout
