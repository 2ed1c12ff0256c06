"""Every kind of plan goes the one path: `run(plan, options)` starts each arm the plan names
exactly once (counted by the arms themselves, and in the run directory's meta.json), and
`judge(plan, results)` returns the report the plan names, from what the run left alone."""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import TESTS
from difftest.config import parse_config
from difftest.flow.evaluate import ComparisonReport
from difftest.flow.judge import CheckResult, NoiseReport, judge
from difftest.core.names import ROUND
from difftest.flow.overrides import RunOptions
from difftest.flow.plan import (PLAN_FORMAT, Plan, PlanKind, plan_check, plan_compare,
                                plan_noise, plan_probe)
from difftest.flow.run import RunResults, run
from difftest.flow.scoring import ProbeReport

DATA = TESTS / "data" / "compare"
# A replay arm that first notes its start (the trace it replays, argv[-1], one line per start)
COUNTING = ("import sys; open(sys.argv[1], 'a').write(sys.argv[-1] + '\\n'); "
            "sys.stdout.write('generated 7 blocks\\n'); sys.stderr.write(open(sys.argv[-1]).read())")


def _config(tmp_path: Path, comparisons: str) -> str:
    log = tmp_path / "starts.log"

    def arm(name: str, trace: str) -> str:
        argv = ["{python}", "-c", COUNTING, str(log), str(DATA / trace)]
        return f"[arms.{name}]\ncommand = {json.dumps(argv)}\n"
    return (arm("a", "agree_a.log") + arm("b", "agree_b.log") + arm("c", "differ_b.log")
            + f"[mutations.swap]\nargs = [{json.dumps(str(DATA / 'shift_b.log'))}]\n"
            + comparisons)


COMPARISONS = """
[comparisons.ab]
arm_a = "a"
arm_b = "b"
noise_runs = 2
mutations = ["swap"]
[comparisons.ac]
arm_a = "a"
arm_b = "c"
mutations = ["swap"]
[comparisons.aa]
arm_a = "a"
arm_b = "a"
[comparisons.gated]
arm_a = "a"
arm_b = "b"
acceptance = { max_drop = 0.05, alpha = 0.01 }
[comparisons.forced]
arm_a = "a"
arm_b = "b"
teacher_force = true
"""


def _plans(tmp_path: Path) -> dict[str, tuple[Plan, type]]:
    cfg = parse_config(_config(tmp_path, COMPARISONS), tmp_path / "difftest.toml")
    return {"compare": (plan_compare(cfg, cfg.comparison("ab")), ComparisonReport),
            "forced": (plan_compare(cfg, cfg.comparison("forced")), ComparisonReport),
            "until-decided": (plan_compare(cfg, cfg.comparison("gated"), 3), ComparisonReport),
            "check": (plan_check(cfg), CheckResult),
            "probe": (plan_probe(cfg, cfg.comparison("ab")), ProbeReport),
            "noise": (plan_noise(cfg, "a", 3), NoiseReport)}


@pytest.mark.parametrize("kind", ["compare", "forced", "until-decided", "check", "probe",
                                  "noise"])
def test_run_starts_each_planned_arm_once_and_judge_names_the_report(tmp_path: Path,
                                                                    kind: str) -> None:
    plan, report_type = _plans(tmp_path)[kind]
    results = run(plan, RunOptions(run_root=tmp_path / "runs", progress=False))
    meta = json.loads((results.run_dir / "meta.json").read_text())
    planned = [a.name for a in plan.arms]
    rounds = [a for pair in plan.rounds.arms for a in pair] if plan.rounds else []
    ran_rounds = [a for a in rounds if a.name in meta["arms"]]
    assert sorted(meta["arms"]) == sorted(results.arms) == sorted(
        planned + [a.name for a in ran_rounds])
    assert all(ROUND in n for n in set(meta["arms"]) - set(planned))
    # each arm's own count of its starts: every arm (a rerun, a self-pair's second run, a
    # mutated arm, a forced arm B, a round) started exactly once
    starts = Counter((tmp_path / "starts.log").read_text().splitlines())
    assert starts == Counter(a.command[-1] for a in [*plan.arms, *ran_rounds])
    report = judge(plan, results)
    assert type(report) is report_type
    assert report.run_dir == results.run_dir
    # judged again from the same results, the report is the same: judging starts nothing
    again = judge(plan, RunResults(results.run_dir, dict(results.arms), results.started_at,
                                   results.started, results.sequential))
    assert Counter((tmp_path / "starts.log").read_text().splitlines()) == starts
    assert type(again) is report_type


def test_the_rounds_of_until_decided_are_named_in_the_plan(tmp_path: Path) -> None:
    plan, _ = _plans(tmp_path)["until-decided"]
    assert plan.rounds is not None and plan.judged[0].spec.rules.acceptance is None
    assert [(a.name, b.name) for a, b in plan.rounds.arms] == [("a#seq2", "b#seq2"),
                                                               ("a#seq3", "b#seq3")]


def test_a_plan_judged_by_its_command_runs_into_the_folder_it_made(tmp_path: Path) -> None:
    """Localize's step and a bisect's round: the plan's arms run into the folder the command
    made, once each; meta.json's one record, the plan's, holds the command's own `extra`."""
    cfg = parse_config(_config(tmp_path, COMPARISONS), tmp_path / "difftest.toml")
    folder = tmp_path / "round001"
    folder.mkdir()
    plan = Plan(PlanKind.BISECT, "round001", (cfg.arm("a"), cfg.arm("b")), (), cfg.audit,
                jobs=1, extra={"bisect_round": "round001", "tests": []})
    results = run(plan, RunOptions(run_root=tmp_path / "runs", progress=False, into=folder))
    assert results.run_dir == folder and not (tmp_path / "runs").exists()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["plan"] == {"format": PLAN_FORMAT, "kind": "bisect", "roles": {},
                            "bisect_round": "round001", "tests": []}
    assert "extra" not in meta
    assert sorted(meta["arms"]) == ["a", "b"]
    assert len((tmp_path / "starts.log").read_text().splitlines()) == 2


# -- the rule: one caller of the arm runner, one module that names arms ------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "difftest"
ONE_PATH = PACKAGE / "flow" / "run.py"
NAMES = PACKAGE / "core" / "names.py"
# what starts arms without a plan: the arm runner, and flow.run's own helpers around it
STARTERS = ("run_arms", "run_arm_set", "run_more")
# the keywords whose value is an arm's name (an ArmSpec's, or its copy's) or a comparison's
# name (a ComparisonSpec's, or its copy's), and a comparison's arms
ARM_NAME_KEYWORDS = {"with_changes": ("name",), "ArmSpec": ("name",),
                     "ComparisonSpec": ("name",), "replace": ("name",)}
ARM_KEYWORDS = ("arm_a", "arm_b")


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else "")


def _composed(value: ast.expr) -> bool:
    """A name built from pieces where it stands: an f-string, `+`, `%` or `.format`."""
    return (isinstance(value, ast.JoinedStr)
            or (isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Mod)))
            or (isinstance(value, ast.Call) and _called(value) == "format"))


def starters_used(package: Path) -> list[str]:
    """Every place the package names a starter of arms, outside the modules that define them
    (`execute`) and the one path (`flow/run.py`); and every call of the arm runner."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if package / "execute" in path.parents:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            named = (node.id if isinstance(node, ast.Name) else node.attr
                     if isinstance(node, ast.Attribute) else None)
            if isinstance(node, ast.ImportFrom):
                named = next((a.name for a in node.names if a.name in STARTERS), None)
            if named in STARTERS:
                where = f"{path.relative_to(package)}:{node.lineno}"
                if path != ONE_PATH:
                    out.append(f"{where}: {named} outside the one path")
                elif isinstance(node, ast.Name) and named == "run_arms":
                    out.append(f"{where}: run_arms")
    return out


def arm_names_composed(package: Path) -> list[str]:
    """Every arm or comparison name the package composes outside `core/names.py`."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if path == NAMES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            keys = ARM_NAME_KEYWORDS.get(_called(node), ()) + ARM_KEYWORDS
            out += [f"{path.relative_to(package)}:{node.lineno}: {k.arg}=" for k in node.keywords
                    if k.arg in keys and _composed(k.value)]
    return sorted(out)


def test_the_arm_runner_has_one_caller_the_one_path() -> None:
    """`run_arms` is called once in the package, in `flow/run.py` (`_start`), and nothing
    outside that module starts arms but through `run(plan, options)`: calibrate, localize and a
    bisect's rounds are plans too."""
    assert starters_used(PACKAGE) == [f"flow/run.py:{_start_line()}: run_arms"]


def _start_line() -> int:
    tree = ast.parse(ONE_PATH.read_text())
    start = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_start")
    return next(n.lineno for n in ast.walk(start)
                if isinstance(n, ast.Name) and n.id == "run_arms")


def test_arm_names_are_composed_in_one_module() -> None:
    assert arm_names_composed(PACKAGE) == []


def test_the_rules_see_a_second_caller_and_a_name_composed_elsewhere(tmp_path: Path) -> None:
    fake = tmp_path / "difftest"
    (fake / "flow").mkdir(parents=True)
    (fake / "flow" / "localize.py").write_text(
        "from difftest.execute import run_arms\n"
        "def f(arm, key, folder):\n"
        "    run_arms([arm.with_changes(name=f'{key}-{arm.name}')], folder)\n"
        "    return ArmSpec(name=arm.name + '#2'), dict(arm_b='x'.format())\n"
        "def g(spec, m):\n"
        "    return replace(spec, name=f'{spec.name}/{m}'), ComparisonSpec(name=m + '-vs-')\n")
    assert starters_used(fake) == ["flow/localize.py:1: run_arms outside the one path",
                                   "flow/localize.py:3: run_arms outside the one path"]
    assert arm_names_composed(fake) == ["flow/localize.py:3: name=", "flow/localize.py:4: arm_b=",
                                        "flow/localize.py:4: name=", "flow/localize.py:6: name=",
                                        "flow/localize.py:6: name="]
