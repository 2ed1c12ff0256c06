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
    assert "b's trace reads the same as for the input --prompt-len 11 --seed 0" in proc.stdout


COVERED = "[spec-coverage] blocks=2 page_size=16 widths={widths}\n"
# a replay arm given its name and two traces: the first when run as configured, the second when
# the sweep has added its arguments, which its [spec-config] line reports as the reference
# runner does (so each input is shown to have reached it, and its trace reads as its own)
SWEPT_REPLAY = "; ".join([
    "import sys", "sys.stdout.write('generated\\n')", "side, base, swept = sys.argv[1:4]",
    "extra = sys.argv[4:]",
    "kv = ' '.join(k[2:].replace('-', '_') + '=' + v for k, v in zip(extra[::2], extra[1::2]))",
    "sys.stderr.write('[spec-config] verify_kernel=' + side + ' ' + (kv or 'input=configured')"
    " + '\\n')",
    "sys.stderr.write(open(swept if extra else base).read())"])


def _check(tmp_path: Path, widths: str, check: str, swept: str | None = None
           ) -> subprocess.CompletedProcess[str]:
    """`difftest check` of a comparison about the verify kernel, of replay arms whose traces
    say they verified at `widths` (`swept`: on the sweep's inputs); its sweep (4 generated
    inputs) asks for two widths."""
    arms = ""
    for side in ("a", "b"):
        traces = []
        for name, w in (("configured", widths), ("swept", swept or widths)):
            trace = tmp_path / f"{side}-{name}.log"
            trace.write_text((DATA / f"agree_{side}.log").read_text() + COVERED.format(widths=w))
            traces.append(str(trace))
        argv = ", ".join(json.dumps(a) for a in ["{python}", "-c", SWEPT_REPLAY, side, *traces])
        arms += f"[arms.{side}]\ncommand = [{argv}]\n"
    (tmp_path / "difftest.toml").write_text(
        arms + '[comparisons.kernels]\narm_a = "a"\narm_b = "b"\nexpect = "same"\n'
        + 'toggle = ["verify_kernel"]\n' + check)
    return subprocess.run([sys.executable, "-m", "difftest", "check", "--run-root",
                           str(tmp_path / "runs"), "--no-progress", "--format", "json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_check_runs_the_sweep_when_the_config_says_so(tmp_path: Path) -> None:
    proc = _check(tmp_path, "2:1,4:1", "[check]\nsweep = true\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (sweep,) = json.loads(proc.stdout)["sweeps"]
    assert sweep["comparison"] == "kernels" and sweep["exit_code"] == 0
    assert [(c["class"], c["inputs"], c["exercised"]) for c in sweep["classes"]] == \
        [("widths", 4, 4)]
    run = next((tmp_path / "runs").glob("*-check"))
    md = (run / "check.md").read_text()
    assert "### Sweeps" in md and "| `kernels` | verify widths (`widths`) | 4 | 4 | 0 | 0 | 0 |" in md
    assert "<h2>Sweep <code>kernels</code></h2>" in (run / "check.html").read_text()
    assert '<testcase classname="difftest.difftest" name="kernels/sweep"' in \
        (run / "junit.xml").read_text()


def test_a_state_no_swept_input_reached_makes_the_check_uninformative(tmp_path: Path) -> None:
    # the configured inputs verify at two widths (the comparison passes); on the generated
    # inputs the arms verify at one width only, whatever those ask
    proc = _check(tmp_path, "2:1,4:1", "[check]\nsweep = true\n", swept="4:2")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["comparisons"][0]["verdict"] == "agree"
    (row,) = out["sweeps"][0]["classes"]
    assert (row["inputs"], row["exercised"]) == (4, 0)
    junit = next((tmp_path / "runs").glob("*-check/junit.xml")).read_text()
    assert '<failure type="uninformative" message="4 generated input(s) run, 0 differed; no ' \
           'input passed with it exercised: widths; exit 3"' in junit


def test_inputs_left_when_the_budget_is_spent_are_reported_not_run(tmp_path: Path) -> None:
    proc = _check(tmp_path, "2:1,4:1", "[check]\nsweep = true\nsweep_budget_s = 0.001\n")
    sweep = json.loads(proc.stdout)["sweeps"][0]
    # the budget is spent before the second input can start (the first may start in time)
    assert len(sweep["inputs"]) <= 1 and len(sweep["inputs"]) + len(sweep["not_run"]) == 4
    assert proc.returncode == (0 if sweep["inputs"] else 3), proc.stdout + proc.stderr


def test_without_the_switch_check_runs_no_sweep(tmp_path: Path) -> None:
    proc = _check(tmp_path, "2:1,4:1", "")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["sweeps"] == []
