"""The pre-merge gate end to end: real git repositories, replay arms of captured reference-runner
traces (tests/data/gate/), and a few real reference-runner runs."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from difftest.cli import app
from difftest.config import load_config, parse_config
from difftest.core.errors import ExitCode
from difftest.flow.judge import worst
from planned import run_check, run_probe
from conftest import git, replay_arm

CONFIGS = Path(__file__).resolve().parents[2] / "difftest" / "configs"
runner = CliRunner()


def test_worst_orders_by_severity() -> None:
    E = ExitCode
    assert worst([E.OK, E.UNINFORMATIVE]) == E.UNINFORMATIVE
    assert worst([E.UNINFORMATIVE, E.DIFFER]) == E.DIFFER
    assert worst([E.DIFFER, E.ARM_FAILED, E.OK]) == E.ARM_FAILED
    assert worst([]) == E.OK


def test_check_default_config_writes_junit_and_markdown(tmp_path: Path) -> None:
    junit, md = tmp_path / "junit.xml", tmp_path / "check.md"
    r = runner.invoke(app, ["check", "--run-root", str(tmp_path / "runs"), "--junit", str(junit),
                            "--markdown", str(md), "--no-progress"])
    assert r.exit_code == 0, r.output
    root = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    probed = ("lanes", "split", "nondet")
    assert set(cases) == {"lanes", "scalars", "split", "nondet", "sampled", "sampled-t1",
                          "sampled-t1/probe/noise-reuse"} | {
        f"{c}/probe/{m}" for c in probed
        for m in ("causal-mask", "skip-kv-write", "stale-seq-lens")} | {
        "scalars/probe/arm-b-as-a"} | {  # the built-in probe of a `differ` comparison
        f"sampled/probe/{m}"  # the sampler mutations the sampled comparison kills
        for m in ("temperature-draft-only", "top-p-draft-only", "residual-unnormalised")}
    assert root.get("failures") == "0" and all(c.find("failure") is None for c in cases.values())
    text = md.read_text()
    assert "## difftest check: passed (exit 0)" in text
    assert "| PASS | `lanes` | `paged` vs `materialized` | **AGREE** (expect same): passed, exit 0 | - |" in text
    for probed in ("lanes", "split", "nondet"):  # the numerics lanes agree and are probed too
        assert f"| `{probed}` | score | **1.00** | |" in text
    assert "| PASS | `nondet` | `paged-nondet` vs `materialized` | **AGREE** (expect same): passed, exit 0 |" in text
    run_dir = next((tmp_path / "runs").iterdir())
    # six shared arms, three mutated ones and two reruns for the noise floor, the sampled
    # comparison's two arms and its three mutated ones, the temperature-1 comparison's two and
    # its mutated one, each run once
    meta = json.loads((run_dir / "meta.json").read_text())
    assert sorted(meta["arms"]) == sorted(["paged", "materialized", "scalars-on", "scalars-off",
                                           "paged-split", "paged-nondet", "paged-nondet#run2",
                                           "paged-nondet#run3",
                                           "materialized+causal-mask",
                                           "materialized+skip-kv-write",
                                           "materialized+stale-seq-lens",
                                           "sampled-target", "sampled-spec",
                                           "sampled-spec+temperature-draft-only",
                                           "sampled-spec+top-p-draft-only",
                                           "sampled-spec+residual-unnormalised",
                                           "sampled-target-t1", "sampled-spec-t1",
                                           "sampled-spec-t1+noise-reuse"])
    assert (run_dir / "junit.xml").exists() and (run_dir / "diff-lanes.csv").exists()


GATE = Path(__file__).resolve().parents[1] / "data" / "gate"


def replays(prefix: str, *arms: str) -> str:
    """[arms.*] tables that replay reference-runner captures (scripts/capture_gate_traces.py)."""
    return "".join(replay_arm(arm, GATE / f"{prefix}-{arm}.log") for arm in arms)


def replayed_mutations(prefix: str, arm: str, *mutations: str) -> str:
    """Mutations whose replay arm prints the capture of the mutated arm (argv[-1] wins)."""
    return "".join(f"[mutations.{m}]\nargs = [{json.dumps(str(GATE / f'{prefix}-{arm}+{m}.log'))}]\n"
                   for m in mutations)


FAILING = replays("level1", "paged", "broken", "deg-paged", "deg-materialized") + """
[arms.crasher]
command = ["{python}", "-c", "import sys; sys.stderr.write('vt: out of memory\\\\n'); sys.exit(7)"]
[comparisons.bad]
arm_a = "paged"
arm_b = "broken"
[comparisons.blind]
arm_a = "deg-paged"
arm_b = "deg-materialized"
[comparisons.crash]
arm_a = "paged"
arm_b = "crasher"
"""


def test_check_fails_with_the_right_exit_codes(tmp_path: Path) -> None:
    cfg_path = tmp_path / "difftest.toml"
    cfg_path.write_text(FAILING)
    cfg = load_config(cfg_path)
    result = run_check(cfg, run_root=tmp_path / "runs", progress=False)
    codes = {r.name: r.verdict.exit_code for r in result.reports}
    assert codes == {"bad": ExitCode.DIFFER, "blind": ExitCode.UNINFORMATIVE,
                     "crash": ExitCode.ARM_FAILED}
    assert result.exit_code == ExitCode.ARM_FAILED
    crash = next(r for r in result.reports if r.name == "crash")
    assert "arm 'crasher'" in crash.verdict.reasons[0] and "exit code 7" in crash.verdict.reasons[0]
    assert "vt: out of memory" in crash.verdict.reasons[0]

    from difftest.report.gate_report import junit_xml

    root = ET.fromstring(junit_xml(result))
    failures = {c.get("name"): c.find("failure") for c in root.iter("testcase")}
    assert failures["bad"].get("type") == "differ"
    assert failures["blind"].get("type") == "uninformative"
    assert failures["blind"].get("message").startswith("UNINFORMATIVE (expect same): FAILED, exit 3")
    # a crash is an error, not a failure: CI views tell a broken arm from a difference
    assert failures["crash"] is None
    error = next(c for c in root.iter("testcase") if c.get("name") == "crash").find("error")
    assert error is not None and error.get("type") == "arm-failed"
    assert "exit code 7" in error.get("message")
    assert (root.get("failures"), root.get("errors")) == ("2", "1")

    # the CLI picks the worst, and --only narrows to one comparison
    r = runner.invoke(app, ["check", "--config", str(cfg_path), "--only", "blind",
                            "--run-root", str(tmp_path / "runs"), "--no-progress"])
    assert r.exit_code == 3, r.output
    assert r.output.startswith("UNINFORMATIVE")


MUTATIONS = ("causal-mask", "skip-kv-write", "stale-seq-lens")
LANES = """
[comparisons.lanes]
arm_a = "paged"
arm_b = "materialized"
mutations = ["causal-mask", "skip-kv-write", "stale-seq-lens"]
"""


def test_probe_on_the_degenerate_fixture_is_blind(tmp_path: Path) -> None:
    """The motivating case: constant drafts at level 1 hide all three wrong attentions."""
    config = tmp_path / "degenerate.toml"
    config.write_text(replays("degenerate", "paged", "materialized") + LANES
                      + replayed_mutations("degenerate", "materialized", *MUTATIONS))
    r = runner.invoke(app, ["probe", "--config", str(config), "-c", "lanes",
                            "--format", "json", "--run-root", str(tmp_path), "--no-progress"])
    assert r.exit_code == 3, r.output
    data = json.loads(r.output)
    assert data["mutation_score"] == 0.0
    assert data["survivors"] == ["causal-mask", "skip-kv-write", "stale-seq-lens"]
    assert all(m["verdict"] == "uninformative" and m["killed_by"] is None
               for m in data["mutations"])


def test_probe_kills_every_mutation_of_the_captured_default_lanes(tmp_path: Path) -> None:
    cfg = parse_config(replays("default", "paged", "materialized") + LANES
                       + replayed_mutations("default", "materialized", *MUTATIONS),
                       tmp_path / "replay.toml")
    p = run_probe(cfg, cfg.comparisons["lanes"], run_root=tmp_path, progress=False)
    assert p.baseline.verdict.kind == "agree"
    assert [m.name for m in p.mutations] == list(MUTATIONS)
    assert all(m.killed and m.killed_by == "tokens" and m.blocks_differing > 0
               for m in p.mutations)
    assert p.mutation_score == 1.0 and p.exit_code == ExitCode.OK


def test_probe_on_the_degenerate_fixture_at_level_3_kills_through_logits(tmp_path: Path) -> None:
    cfg = parse_config(replays("degenerate3", "paged", "materialized") + LANES
                       + replayed_mutations("degenerate3", "materialized", *MUTATIONS),
                       tmp_path / "degenerate3.toml")
    p = run_probe(cfg, cfg.comparisons["lanes"], run_root=tmp_path, progress=False)
    assert p.baseline.verdict.kind == "agree"
    assert "the token comparison alone would have been blind" in " ".join(
        p.baseline.verdict.reasons)
    for m in p.mutations:
        assert m.killed and m.killed_by == "logits", m.name
        assert m.blocks_differing == 0 and m.blocks_logit_differing > 0
    assert p.exit_code == ExitCode.OK


# -- main vs branch ------------------------------------------------------------------------------

RUNNER = """\
import os, sys
# A tiny runner: it drafts the blocks below and refuses to run unbuilt.
DRAFTS = {3: [5, 6, 7], 6: [8, 9, 10], 9: [11, 12, 13], 12: [14, 15, 16]}
if not os.path.exists("built.flag"):
    sys.exit("not built")
for pos, d in sorted(DRAFTS.items()):
    sys.stderr.write(f"[SPECTRACE] req=r pos={pos} k=3 ns=3 acc=2 "
                     f"draft=[ {d[0]} {d[1]} {d[2]} ] emit=[ {d[0]} {d[1]} 99 ]\\n")
"""


def _make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "runner.py").write_text(RUNNER)
    git(path, "add", "runner.py")
    git(path, "commit", "-q", "-m", "runner")
    git(path, "checkout", "-q", "-b", "comment-only")
    (path / "runner.py").write_text(RUNNER.replace("# A tiny runner", "# A very small runner"))
    git(path, "commit", "-q", "-am", "reword a comment")
    git(path, "checkout", "-q", "-b", "one-token", "main")
    (path / "runner.py").write_text(RUNNER.replace("6: [8, 9, 10]", "6: [8, 9, 42]"))
    git(path, "commit", "-q", "-am", "change one drafted token")
    git(path, "checkout", "-q", "main")
    return path


def _state(repo: Path) -> tuple[str, ...]:
    return (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"),
            git(repo, "branch", "--list"), (repo / ".git" / "index").read_bytes().hex())


def test_main_vs_branch_from_git_worktrees(tmp_path: Path) -> None:
    repo = _make_repo(tmp_path / "repo")
    (repo / "scratch.txt").write_text("uncommitted work of the user\n")  # a dirty tree
    builds = tmp_path / "builds.log"
    build = ('["{python}", "-c", "import os; open(os.environ[\'BUILD_LOG\'], \'a\')'
             '.write(os.getcwd() + \'\\\\n\'); open(\'built.flag\', \'w\').write(\'ok\')"]')
    arms = "\n".join(
        f'[arms.{name}]\ncommand = ["{{python}}", "runner.py"]\ngit_ref = "{ref}"\n'
        f'build = {build}\nrepo = "{repo}"\nenv = {{ BUILD_LOG = "{builds}" }}\n'
        for name, ref in (("main", "main"), ("comment", "comment-only"), ("token", "one-token")))
    cfg_path = tmp_path / "difftest.toml"
    cfg_path.write_text(arms + """
[comparisons.comment]
arm_a = "main"
arm_b = "comment"
[comparisons.token]
arm_a = "main"
arm_b = "token"
""")
    before = _state(repo)
    cfg = load_config(cfg_path)
    cache = tmp_path / "cache"
    result = run_check(cfg, run_root=tmp_path / "runs", progress=False, cache_dir=cache)
    by_name = {r.name: r for r in result.reports}
    assert by_name["comment"].verdict.kind == "agree", by_name["comment"].verdict.reasons
    token = by_name["token"]
    assert token.verdict.kind == "differ"
    assert token.comparison.first_difference.req == "r"
    assert (token.comparison.first_difference.pos, token.comparison.first_difference.row) \
        == (6, 3)
    assert token.comparison.blocks_differing == 1
    assert len(builds.read_text().splitlines()) == 3  # one build per sha
    assert all(str(cache) in line for line in builds.read_text().splitlines())
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["arms"]["token"]["git_sha"] == git(repo, "rev-parse", "one-token").strip()
    assert meta["arms"]["main"]["git_sha"] == git(repo, "rev-parse", "main").strip()

    again = run_check(cfg, run_root=tmp_path / "runs", progress=False, cache_dir=cache)
    assert [r.verdict.kind for r in again.reports] == ["agree", "differ"]
    assert len(builds.read_text().splitlines()) == 3  # the cached builds were reused
    assert _state(repo) == before  # the user's tree, index, HEAD and branches are untouched


def test_probe_cli_subprocess_reports_json(tmp_path: Path) -> None:
    config = tmp_path / "replay.toml"
    config.write_text(replays("default", "paged", "materialized") + LANES
                      + replayed_mutations("default", "materialized", *MUTATIONS))
    r = subprocess.run([sys.executable, "-m", "difftest", "probe", "--config", str(config),
                        "--arm-a", "paged", "--arm-b", "materialized", "-m", "causal-mask",
                        "--format", "json", "--run-root", str(tmp_path), "--no-progress"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["mutations"][0]["name"] == "causal-mask" and data["mutations"][0]["killed"]
    assert data["mutation_score"] == 1.0
    assert (Path(data["run_dir"]) / "probe.json").exists()


@pytest.mark.parametrize("args, message", [
    (["probe", "--arm-a", "paged"], "name both arms"),
    (["probe", "-c", "nope"], "unknown comparison 'nope'"),
    (["check", "--only", "nope"], "unknown comparison 'nope'"),
    (["probe", "--arm-a", "paged", "--arm-b", "materialized", "-m", "bogus"],
     "unknown mutation 'bogus'"),
])
def test_gate_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    r = runner.invoke(app, args + ["--run-root", str(tmp_path)])
    assert r.exit_code == 2 and message in r.output, r.output


PROBES = replays("default", "paged", "materialized", "scalars-on", "scalars-off") + LANES + f"""
[comparisons.scalars]
arm_a = "scalars-on"
arm_b = "scalars-off"
expect = "differ"
[mutations.noop]
env = {{ SOME_UNUSED_VARIABLE = "1" }}
[mutations.undo]
args = [{json.dumps(str(GATE / "default-scalars-on.log"))}]
[mutations.typo]
args = ["--mutatoin", "causal-mask"]
"""


def test_probes_of_a_differ_comparison_are_judged_by_its_expectation(tmp_path: Path) -> None:
    cfg = parse_config(PROBES, tmp_path / "probes.toml")
    p = run_probe(cfg, cfg.comparisons["scalars"], ["noop", "undo"], run_root=tmp_path,
                  progress=False)
    result = {m.name: (m.killed, m.killed_by) for m in p.mutations}
    # a mutation that changes nothing never reached the runner: not scored, a set-up error
    assert result["noop"] == (False, None) and p.not_applied == ["noop"]
    # switching the scalars back on removes the difference the comparison expects: caught
    assert result["undo"] == (True, "expectation")
    assert p.mutation_score == 1.0 and p.exit_code == ExitCode.USAGE


def test_a_mutation_that_crashes_its_arm_is_an_arm_failure_not_a_kill(tmp_path: Path) -> None:
    cfg = parse_config(PROBES, tmp_path / "probes.toml")
    p = run_probe(cfg, cfg.comparisons["lanes"], ["typo"], run_root=tmp_path, progress=False)
    assert not p.mutations[0].killed and p.failed_arms == ["typo"]
    assert p.exit_code == ExitCode.ARM_FAILED


NONDETERMINISTIC = """
[arms.nondet]
command = ["{python}", "-c", "import random, sys\\nfor pos in range(3, 9):\\n    d = [random.randrange(1000) for _ in range(3)]\\n    sys.stderr.write(f'[SPECTRACE] req=r pos={pos} k=3 ns=1 acc=0 draft=[ {d[0]} {d[1]} {d[2]} ] emit=[ 7 ]\\\\n')"]
[comparisons.determinism]
arm_a = "nondet"
arm_b = "nondet"
"""


def test_check_runs_an_arm_compared_with_itself_twice(tmp_path: Path) -> None:
    cfg = parse_config(NONDETERMINISTIC, tmp_path / "nondet.toml")
    result = run_check(cfg, run_root=tmp_path, progress=False)
    rep = result.reports[0]
    assert (rep.arm_a.name, rep.arm_b.name) == ("nondet", "nondet#2")
    assert rep.verdict.kind == "differ" and result.exit_code == ExitCode.DIFFER
