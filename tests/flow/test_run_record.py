"""Every kind of run records its plan, and every comparison it judged is judged again from that
record alone: `difftest export RUN --comparison NAME` on real runs for compare, check, probe and
noise, whose arms replay the reference runner's captured default lanes (tests/data/gate/, level
3: tokens and logits; the mutated arm replays the runner's causal-mask capture)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from difftest import api
from difftest.cli import app
from difftest.flow.plan import PLAN_FORMAT
from tests.flow.test_gate import replayed_mutations, replays

# the mutation is made by the arm's arguments alone (a replay of the runner's causal-mask
# capture): its trace shows the mutation, which the run judged in its role and so must export
CONFIG = (replays("default", "paged", "materialized")
          + '[comparisons.lanes]\narm_a = "paged"\narm_b = "materialized"\n'
          'mutations = ["causal-mask"]\nnoise_runs = 2\n'
          + replayed_mutations("default", "materialized", "causal-mask"))
runner = CliRunner()


@dataclass(frozen=True)
class Runs:
    compare: Path
    check: Path
    probe: Path
    noise: Path
    verdicts: dict[tuple[str, str], str]  # (kind, comparison) -> verdict as the run judged it


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    tmp = tmp_path_factory.mktemp("record")
    config = tmp / "difftest.toml"
    config.write_text(CONFIG)
    root = tmp / "runs"
    rep = api.compare_arms(comparison="lanes", config=config, run_root=root, progress=False)
    chk = api.check(config, run_root=root, progress=False)
    prb = api.probe(comparison="lanes", mutations=["causal-mask"], config=config,
                    run_root=root, progress=False)
    noi = api.noise("paged", noise_runs=2, config=config, run_root=root, progress=False)
    assert None not in (rep.run_dir, chk.run_dir, prb.run_dir)
    verdicts = {("compare", "lanes"): rep.verdict.kind.value,
                ("check", "lanes"): chk.reports[0].verdict.kind.value,
                ("check", "lanes/causal-mask"):
                    chk.probes["lanes"].mutations[0].report.verdict.kind.value,
                ("probe", "lanes"): prb.baseline.verdict.kind.value,
                ("probe", "lanes/causal-mask"): prb.mutations[0].report.verdict.kind.value}
    return Runs(rep.run_dir, chk.run_dir, prb.run_dir, noi.run_dir,  # type: ignore[arg-type]
                verdicts)


def _export(run_dir: Path, comparison: str | None) -> dict[str, object]:
    args = ["export", str(run_dir), "--format", "json"]
    out = runner.invoke(app, args + (["--comparison", comparison] if comparison else []))
    assert out.exit_code in (0, 1, 3), out.output
    return json.loads(out.output)  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind, comparison", [
    ("compare", "lanes"), ("compare", None), ("check", "lanes"), ("check", "lanes/causal-mask"),
    ("probe", "lanes"), ("probe", "lanes/causal-mask")])
def test_export_judges_each_comparison_as_the_run_did(runs: Runs, kind: str,
                                                      comparison: str | None) -> None:
    again = _export(getattr(runs, kind), comparison)
    assert again["verdict"] == runs.verdicts[(kind, comparison or "lanes")]


def test_a_probe_run_names_its_comparisons_as_a_check_run_does(runs: Runs) -> None:
    """A probe judged its baseline and each mutation: which one to export is the user's to
    say, not the baseline by default."""
    for run in (runs.probe, runs.check):
        out = runner.invoke(app, ["export", str(run)])
        assert out.exit_code == 2, out.output
        assert ("a run of 2 comparisons; name one with --comparison (lanes, lanes/causal-mask)"
                in out.output)


@pytest.mark.parametrize("key, value, message", [
    ("format", 9, "key 'format': 9 is not a run record format this difftest reads (1 to 1)"),
    ("format", "1", "key 'format': '1' is not a run record format"),
    ("plan", {"roles": {"lanes": {"paged": "a", "x": "a"}}},
     "key 'plan.roles.lanes': a comparison has one arm A and one arm B"),
    ("plan", {"roles": {"lanes": {"materialized": "a", "paged": "b"}}},
     "key 'plan.roles.lanes' does not match the comparison it records"),
])
def test_a_run_record_that_contradicts_itself_is_refused_naming_the_key(
        runs: Runs, tmp_path: Path, key: str, value: object, message: str) -> None:
    import shutil

    copy = tmp_path / runs.compare.name
    shutil.copytree(runs.compare, copy)
    meta = json.loads((copy / "meta.json").read_text())
    if key == "plan":  # the plan record's roles, the rest of the record kept
        meta["plan"].update(value)
    else:
        meta[key] = value
    (copy / "meta.json").write_text(json.dumps(meta))
    out = runner.invoke(app, ["export", str(copy)])
    assert out.exit_code == 2, out.output
    assert f"{copy / 'meta.json'}: {message}" in " ".join(out.output.split())


@pytest.mark.parametrize("key, value, message", [
    ("comparison", None, "key 'plan.comparison' must be a comparison table with a name"),
    ("comparison", "lanes", "key 'plan.comparison' must be a comparison table with a name"),
    ("comparison", [], "key 'plan.comparison' must be a comparison table with a name"),
    ("comparisons", "lanes", "key 'plan.comparisons' must be a table of comparisons"),
    ("audit", "strict", "key 'plan.audit' must be a table of audit thresholds"),
])
def test_an_unreadable_comparison_record_is_refused_not_replaced_by_a_default(
        runs: Runs, tmp_path: Path, key: str, value: object, message: str) -> None:
    """A damaged record must not be judged under a comparison made up in its place (that
    turned an INERT run into AGREE: no toggle, no evidence, no rules of its own)."""
    import shutil

    copy = tmp_path / runs.compare.name
    shutil.copytree(runs.compare, copy)
    meta = json.loads((copy / "meta.json").read_text())
    meta["plan"][key] = value
    (copy / "meta.json").write_text(json.dumps(meta))
    out = runner.invoke(app, ["export", str(copy)])
    assert out.exit_code == 2, out.output
    assert f"{copy / 'meta.json'}: {message}" in " ".join(out.output.split())


def test_the_mutated_arm_is_caught_again(runs: Runs) -> None:
    assert runs.verdicts[("check", "lanes/causal-mask")] == "differ"
    assert _export(runs.probe, "lanes/causal-mask")["verdict"] == "differ"


def test_a_noise_run_exports_each_rerun_against_the_first(runs: Runs) -> None:
    """The reference runner is deterministic: its second run drafts what the first did (the
    replay arm prints the one capture again)."""
    for name in ("paged-vs-paged#run2", None):
        again = _export(runs.noise, name)
        assert (again["verdict"], again["comparison"]) == ("agree", "paged-vs-paged#run2")
        assert [a["name"] for a in again["arms"]] == ["paged", "paged#run2"]  # type: ignore[attr-defined]
    # other thresholds apply as on any run
    out = runner.invoke(app, ["export", str(runs.noise), "--expect", "differ"])
    assert out.exit_code == 1, out.output


@pytest.mark.parametrize("kind, roles", [
    ("compare", {"lanes": {"paged": "a", "materialized": "b", "paged#run2": "rerun-of-a"}}),
    ("check", {"lanes": {"paged": "a", "materialized": "b", "paged#run2": "rerun-of-a"},
               "lanes/causal-mask": {"paged": "a", "materialized+causal-mask": "mutated-b",
                                     "paged#run2": "rerun-of-a"}}),
    ("noise", {"paged-vs-paged#run2": {"paged": "a", "paged#run2": "b"}}),
])
def test_meta_json_records_the_plan_with_its_format(runs: Runs, kind: str,
                                                    roles: dict[str, object]) -> None:
    meta = json.loads((getattr(runs, kind) / "meta.json").read_text())
    assert {k: meta["plan"][k] for k in ("format", "kind", "roles")} == {
        "format": PLAN_FORMAT, "kind": kind, "roles": roles}
    assert "extra" not in meta  # one record: what the run judged is in the plan record too
    # every arm a role names ran, and every arm that ran has a role
    named = {arm for r in roles.values() for arm in r}  # type: ignore[attr-defined]
    assert named == set(meta["arms"])


def test_a_noise_run_recorded_before_the_plan_is_still_exported(runs: Runs,
                                                                 tmp_path: Path) -> None:
    """A run written by an older difftest: no `plan`, `extra` only names the arm and runs."""
    import shutil

    old = tmp_path / runs.noise.name
    shutil.copytree(runs.noise, old)
    meta = json.loads((old / "meta.json").read_text())
    meta["extra"] = {"noise": meta.pop("plan")["noise"]}
    (old / "meta.json").write_text(json.dumps(meta))
    assert _export(old, None)["verdict"] == "agree"


@pytest.mark.parametrize("kind", ["compare", "check"])
def test_a_run_recorded_in_two_records_is_still_exported(runs: Runs, tmp_path: Path,
                                                         kind: str) -> None:
    """A run written by the last version: the plan record (format 1: kind and roles) beside
    what it judged under `extra`. It is judged again as it was."""
    import shutil

    old = tmp_path / getattr(runs, kind).name
    shutil.copytree(getattr(runs, kind), old)
    meta = json.loads((old / "meta.json").read_text())
    plan = meta.pop("plan")
    meta["plan"] = {"format": 1, "kind": plan.pop("kind"), "roles": plan.pop("roles")}
    del plan["format"]
    meta["extra"] = plan
    (old / "meta.json").write_text(json.dumps(meta))
    again, now = _export(old, "lanes"), _export(getattr(runs, kind), "lanes")
    where = ("run_dir", "arms")  # the paths of the copy
    assert {k: v for k, v in again.items() if k not in where} == \
        {k: v for k, v in now.items() if k not in where}
    assert again["verdict"] == "agree"


def test_a_sequential_round_keeps_the_plan_record(tmp_path: Path) -> None:
    """`--until-decided` runs more rounds into the run directory: meta.json keeps the plan."""
    from conftest import TESTS, replay_arm
    from difftest.config import parse_config
    from difftest.flow.run import run, run_more
    from difftest.flow.overrides import RunOptions
    from difftest.flow.plan import plan_compare

    data = TESTS / "data" / "compare"
    cfg = parse_config(replay_arm("a", data / "agree_a.log") + replay_arm("b", data / "agree_b.log")
                       + '[comparisons.ab]\narm_a = "a"\narm_b = "b"\n', tmp_path / "d.toml")
    plan = plan_compare(cfg, cfg.comparison("ab"))
    run_dir = run(plan, RunOptions(run_root=tmp_path / "runs", progress=False)).run_dir
    run_more(run_dir, [cfg.arm("a").with_changes(name="a#seq2")], progress=False,
             cache_dir=None)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert set(meta["arms"]) == {"a", "b", "a#seq2"}
    assert meta["plan"] == plan.record()
