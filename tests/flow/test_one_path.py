"""Every kind of plan goes the one path: `run(plan, options)` starts each arm the plan names
exactly once (counted by the arms themselves, and in the run directory's meta.json), and
`judge(plan, results)` returns the report the plan names, from what the run left alone."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import TESTS
from difftest.config import parse_config
from difftest.flow.evaluate import ComparisonReport
from difftest.flow.judge import CheckResult, NoiseReport, judge
from difftest.flow.overrides import RunOptions
from difftest.flow.plan import ROUND, Plan, plan_check, plan_compare, plan_noise, plan_probe
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
