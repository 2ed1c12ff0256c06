"""The switch checks through real runs: the misspelt lane variable, the built-in probe of a
`differ` comparison, detection margins, the self-check of `check`, and arms launched differently that
report one configuration."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPLAY_MUTATED, replay_arm

from difftest import api
from difftest.config import Config, load_config
from difftest.core.rules import Rules
from difftest.core.errors import ExitCode, InternalError
from difftest.flow.judge import self_check, self_differences
from difftest.flow.scoring import INERT_PROBE
from planned import run_probe
from difftest.core.kinds import VerdictKind
from difftest.flow.evaluate import judge_traces
from difftest.config import ComparisonSpec
from difftest.trace import parse_trace
from test_switch import ROUTE_MATERIALIZED, ROUTE_PAGED, steps, trace_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "configs" / "default.toml"


def test_a_misspelt_lane_variable_is_inert_not_agree(tmp_path: Path) -> None:
    """The shipped config with the materialized arm's variable misspelt: both arms run the
    paged lane, and `compare -c lanes` must say so (exit 3), naming `lane` and both arms."""
    text = SHIPPED.read_text()
    setting = 'VT_DFLASH_PAGED = "0", DIFFTEST_MUTATION'
    assert text.count(setting) == 1
    (tmp_path / "difftest.toml").write_text(text.replace(setting,
                                                         'VT_DFLASH_PAGE = "0", DIFFTEST_MUTATION'))
    proc = subprocess.run([sys.executable, "-m", "difftest", "compare", "-c", "lanes",
                           "--run-root", str(tmp_path / "runs"), "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == ExitCode.UNINFORMATIVE, proc.stdout + proc.stderr
    head = proc.stdout.splitlines()
    assert head[0].startswith("lanes: INERT"), proc.stdout
    assert head[1] == "  nothing differed in 30 block(s)"  # what differed, then the reasons
    assert "toggle 'lane': both arms report lane=paged (paged:" in head[2]
    assert "materialized:" in head[2]
    assert any("materialized: evidence `lane = materialized` is contradicted" in line
               for line in head), proc.stdout


CAPTURES = ROOT / "tests" / "data" / "shipped"  # scripts/capture_replay_traces.py shipped


def shipped_replayed(*names: str) -> Config:
    """The shipped config, the arms `names` replaying the runner's captures of them
    (tests/data/shipped/NAME.log, or NAME+MUTATION.log mutated: conftest.REPLAY_MUTATED) under
    the environment and evidence the config gives them."""
    cfg = load_config(SHIPPED)
    arms = {**cfg.arms, **{name: cfg.arm(name).with_changes(
        command=(sys.executable, "-c", REPLAY_MUTATED, str(CAPTURES / name)))
        for name in names}}
    return dataclasses.replace(cfg, arms=arms)


def test_probe_of_a_differ_comparison_runs_the_builtin_probe(tmp_path: Path) -> None:
    cfg = shipped_replayed("scalars-on", "scalars-off")
    report = run_probe(cfg, cfg.comparison("scalars"), run_root=tmp_path, progress=False)
    assert [m.name for m in report.mutations] == [INERT_PROBE]  # no attention mutation
    inert = report.mutations[0]
    assert inert.killed and inert.applied and inert.killed_by == "expectation"
    # the toggle reads the same on both sides of B := A, so the gate is INERT there
    assert inert.report.verdict.kind is VerdictKind.INERT
    assert report.exit_code == ExitCode.OK


def test_a_green_probe_states_its_detection_margin(tmp_path: Path) -> None:
    cfg = shipped_replayed("paged", "materialized")
    report = run_probe(cfg, cfg.comparison("lanes"), ["causal-mask"], run_root=tmp_path,
                       progress=False)
    assert report.exit_code == ExitCode.OK
    margins = [n for n in report.notes if n.startswith("detection margin")]
    assert any(n.startswith("detection margin, logits: the weakest caught mutation, "
                            "causal-mask, moved the logits by max |d| ") for n in margins), margins
    assert any(n.startswith("detection margin, tokens:") for n in margins), margins


def _outcome(path: Path, name: str) -> object:
    from difftest.analysis.audit import AuditThresholds, audit_trace
    from difftest.flow.evaluate import ArmOutcome

    t = parse_trace(path)
    return ArmOutcome(name, path, trace=t, audit=audit_trace(t, AuditThresholds()))


def test_the_self_check_passes_on_one_capture_and_can_fail(tmp_path: Path) -> None:
    from difftest.analysis.audit import AuditThresholds

    a = trace_file(tmp_path, "a.log", [*steps(), ROUTE_PAGED])
    spec = ComparisonSpec(name="lanes", arm_a="a", arm_b="b", rules=Rules(toggle=("lane",)))
    self_check(spec, _outcome(a, "a"), AuditThresholds())  # type: ignore[arg-type]
    # what it looks for: a comparison of two different captures finds differences
    b = trace_file(tmp_path, "b.log", [*steps(seed=5), ROUTE_MATERIALIZED])
    found = self_differences(judge_traces(a, b, spec))
    assert found and found[0].endswith("differing blocks"), found
    assert issubclass(InternalError, Exception) and InternalError("x").exit_code == ExitCode.USAGE


@pytest.mark.parametrize(("toggle", "kind"), [("", VerdictKind.INERT),
                                              ("toggle = []\n", VerdictKind.AGREE)])
def test_same_configuration_from_different_launches_is_inert_unless_declared(
        tmp_path: Path, toggle: str, kind: VerdictKind) -> None:
    """Arms launched differently that report one effective configuration: nothing shows the
    switch reached the runner (INERT), unless the comparison declares that it has no
    trace-visible effect (`toggle = []`), which the report states."""
    head = "[spec-config] lane=paged attention=single"
    a = trace_file(tmp_path, "a.log", [head, *steps()])
    b = trace_file(tmp_path, "b.log", [head, *steps()])
    path = tmp_path / "difftest.toml"
    path.write_text(replay_arm("one", a) + replay_arm("two", b)
                    + '[comparisons.c]\narm_a = "one"\narm_b = "two"\n' + toggle)
    rep = api.compare_arms(comparison="c", config=path, run_root=tmp_path / "runs",
                           progress=False)
    assert rep.verdict.kind is kind, rep.verdict.reasons
    said = ("one and two were launched differently but report the same effective "
            "configuration (attention=single lane=paged): nothing shows the difference reached "
            "the runner" if toggle == "" else
            "toggle = []: the comparison declares that its switch has no trace-visible effect; "
            "one and two were launched differently and report the same effective "
            "configuration (attention=single lane=paged)")
    assert any(said in r for r in rep.verdict.reasons), rep.verdict.reasons
    assert rep.run_dir is not None
    assert api.rejudge(rep.run_dir).verdict.kind is kind  # the record keeps the declaration


@pytest.mark.parametrize("name", ["default", "degenerate", "hf", "vllm-cpp"])
def test_shipped_configs_declare_toggles_and_evidence(name: str) -> None:
    cfg = load_config(ROOT / "configs" / f"{name}.toml")
    for comparison in cfg.comparisons.values():
        if comparison.arm_a == comparison.arm_b:
            continue  # a rerun of one arm: nothing is toggled
        assert comparison.rules.toggle, comparison.name
    assert any(arm.evidence for arm in cfg.arms.values())


def test_a_rejudged_run_keeps_its_arms_evidence(tmp_path: Path) -> None:
    a = trace_file(tmp_path, "a.log", [*steps(), ROUTE_PAGED])
    b = trace_file(tmp_path, "b.log", [*steps(), ROUTE_PAGED])
    path = tmp_path / "difftest.toml"
    path.write_text(replay_arm("paged", a) + replay_arm("materialized", b)
                    + 'evidence = ["combined > 0"]\n'
                    + '[comparisons.lanes]\narm_a = "paged"\narm_b = "materialized"\n')
    rep = api.compare_arms(comparison="lanes", config=path, run_root=tmp_path / "runs",
                           progress=False)
    assert rep.verdict.kind is VerdictKind.INERT
    assert rep.run_dir is not None
    again = api.rejudge(rep.run_dir)
    assert again.verdict.kind is VerdictKind.INERT
    assert again.verdict.reasons[0] == ("materialized: evidence `combined > 0` is contradicted: "
                                        "it reports combined=0 (from [dflash-route] counter)")


def test_two_refs_that_resolve_to_one_commit_are_inert(tmp_path: Path) -> None:
    from conftest import git
    from planned import run_check
    from test_gate import _make_repo

    repo = _make_repo(tmp_path / "repo")
    git(repo, "branch", "same-as-main", "main")
    build = '["{python}", "-c", "open(\'built.flag\', \'w\').write(\'ok\')"]'
    arms = "".join(f'[arms.{name}]\ncommand = ["{{python}}", "runner.py"]\ngit_ref = "{ref}"\n'
                   f'repo = "{repo}"\nbuild = {build}\n'
                   for name, ref in (("main", "main"), ("same", "same-as-main"),
                                     ("token", "one-token")))
    path = tmp_path / "difftest.toml"
    path.write_text(arms + '[comparisons.same]\narm_a = "main"\narm_b = "same"\n'
                    'toggle = ["commit"]\n[comparisons.token]\narm_a = "main"\n'
                    'arm_b = "token"\ntoggle = ["commit"]\n')
    result = run_check(load_config(path), run_root=tmp_path / "runs", progress=False,
                       cache_dir=tmp_path / "cache")
    same, token = result.reports
    sha = git(repo, "rev-parse", "main")
    assert same.verdict.kind is VerdictKind.INERT
    assert same.verdict.reasons[0].startswith(f"toggle 'commit': both arms report commit={sha}")
    assert token.verdict.kind is VerdictKind.DIFFER  # judged as without the toggle
