"""`difftest localize RUN_DIR` against a background: a bf16 draft with a planted fault, compared
with the float32 draft, is localised against the fault-free bf16 draft (`localize_baseline` on
the comparison, or `baseline=`): the planted module is named, never an earlier one; without the
baseline the whole model differs and no module is named. A run whose comparison was DIFFER is
never left at "every module agrees" without the reason. The planted faults are localised on real
reference-runner arms; the baselines localize refuses or accepts, on arms replaying the runner's
captured runs of them."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from difftest import api
from difftest.config import ComparisonSpec, Config
from difftest.core.activations import (Localization, LocalizeOutcome, ModuleDiff,
                                       read_dumps)
from difftest.core.errors import ConfigError, ExitCode, UsageError
from difftest.core.rules import InvalidValue
from difftest.core.kinds import VerdictKind
from difftest.execute import load_run
from difftest.flow.localize import (LocalizeReport, RunLocalization, baseline_arm,
                                    foreign_settings, localize_dumps, localize_run)
from conftest import TESTS, cli_in, replay_localize_command
from tests.flow.test_pipeline import config

REF = [sys.executable, "-m", "difftest.runners.reference", "--requests", "1", "--steps", "3"]
LEVEL3 = {"VT_SPEC_TRACE": "3"}
BF16 = [*REF, "--draft-dtype", "bfloat16"]


def arms(*faults: str) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {"f32": {"command": REF, "env": LEVEL3},
                                         "bf16": {"command": BF16, "env": LEVEL3}}
    for i, fault in enumerate(faults):
        out[f"faulty{i}"] = {"command": [*BF16, "--fault", fault], "env": LEVEL3}
    return out


def test_the_baseline_is_a_checked_key_of_the_comparison(tmp_path: Path) -> None:
    cfg = config(tmp_path, arms(), {"pair": {"arm_a": "f32", "arm_b": "bf16"}})
    assert cfg.comparisons["pair"].localize_baseline is None
    with pytest.raises(ConfigError, match="key 'localize_baseline': no arm named 'nope'"):
        config(tmp_path, arms(), {"pair": {"arm_a": "f32", "arm_b": "bf16",
                                           "localize_baseline": "nope"}})
    with pytest.raises(ConfigError, match="localize_baseline.*names arm 'bf16' of the comparison"):
        config(tmp_path, arms(), {"pair": {"arm_a": "f32", "arm_b": "bf16",
                                           "localize_baseline": "bf16"}})
    with pytest.raises(InvalidValue, match="localize_baseline"):
        ComparisonSpec("p", "a", "b", localize_baseline=3)  # type: ignore[arg-type]
    spec = config(tmp_path, arms("head:scale"),
                  {"pair": {"arm_a": "f32", "arm_b": "faulty0",
                            "localize_baseline": "bf16"}}).comparisons["pair"]
    assert ComparisonSpec.of(spec.echo()).localize_baseline == "bf16"  # meta.json's record
    assert "localize_baseline" not in ComparisonSpec("p", "a", "b").echo()


def replayed_arms(fault: str) -> dict[str, dict[str, object]]:
    """`arms(fault)` replaying the reference runner's captured runs of them
    (tests/data/localize/FAULT/, scripts/capture_replay_traces.py localize)."""
    folder = TESTS / "data" / "localize" / fault.replace(":", "-")
    return {name: {"command": replay_localize_command(folder / name, *arm["command"][3:]),
                   "env": arm["env"]} for name, arm in arms(fault).items()}


def judged_pair(tmp_path: Path, fault: str, replay: bool = False
                ) -> tuple[Config, api.ComparisonReport]:
    cfg = config(tmp_path, (replayed_arms if replay else arms)(fault),
                 {"pair": {"arm_a": "f32", "arm_b": "faulty0", "teacher_force": True,
                           "localize_baseline": "bf16"}})
    rep = api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                             progress=False)
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.run_dir is not None
    return cfg, rep


@pytest.mark.parametrize("fault, named, replay", [
    ("layers.0.o_proj:scale", "layers.0.o_proj", False),
    ("layers.1.attn:mask", "layers.1.attn", True),
    # noise of 0.001 x RMS at a residual stream bf16 rounds to its own quantum: it does not
    # move its own module beyond the background (ratio 0.994); a later module shows it
    ("layers.0.o_proj:noise", "layers.1.q", True)])
def test_localize_run_names_the_planted_module_against_the_background(tmp_path: Path,
                                                                      fault: str, named: str,
                                                                      replay: bool) -> None:
    """The baseline arm did not run in the compare run: it comes from the config, rerun forced
    on A's stream with capture at the same step as A and B. The first fault on the reference
    runner itself, the others on arms replaying its captured runs (`replayed_arms`)."""
    cfg, rep = judged_pair(tmp_path, fault, replay)
    assert rep.run_dir is not None
    result = localize_run(rep.run_dir, config=cfg)
    loc = result.report.localization
    assert result.baseline == "bf16" and loc.outcome is LocalizeOutcome.FIRST
    assert loc.first is not None and loc.first.module == named, loc.describe()
    planted = [m.module for m in loc.modules].index(fault.split(":")[0])
    assert all(m.ratio == 1.0 for m in loc.modules[:planted])  # B is B0 to the bit before it
    assert result.exit_code is ExitCode.DIFFER
    assert read_dumps(result.folder / "capture-b0")
    assert "A, B and the baseline bf16 teacher-forced" in (result.folder / "localize.md").read_text()
    # the same captures without the baseline: the whole model differs, no module is named
    plain = localize_dumps(result.folder / "capture-a", result.folder / "capture-b").localization
    assert plain.outcome is LocalizeOutcome.WHOLE_MODEL and plain.first is None
    # no config: the arm is not in the run, and localize says where to find it
    with pytest.raises(UsageError, match="--baseline bf16: no such arm in this run, nor in "
                                         ".*; give the config that defines it"):
        localize_run(rep.run_dir)  # the default config has no arm bf16
    # the config given as a path: the same baseline arm as from the loaded config, which the
    # rerun above ran (localize_run resolves it with baseline_arm before rerunning anything)
    results, _ = load_run(rep.run_dir)
    spec = cfg.comparisons["pair"]
    assert baseline_arm("bf16", spec, results, tmp_path / "difftest.toml") == baseline_arm(
        "bf16", spec, results, cfg)
    with pytest.raises(UsageError, match="--baseline faulty0: the baseline is a third arm"):
        localize_run(rep.run_dir, baseline="faulty0", config=cfg)


class MlpRun(NamedTuple):
    """A DIFFER run of f32 against the bf16 draft with layers.1.mlp scaled (teacher-forced;
    no baseline on the comparison), its config, and the config file."""

    cfg: Config
    toml: Path
    run_dir: Path


# The reference runner's runs of the mlp_run arms below (REF at level 3, the bf16 draft with
# and without the fault, of seed 0 and 7): free, forced on f32's stream, and capturing at the
# step localize picks, with their dumps (scripts/capture_replay_traces.py localize).
MLP = TESTS / "data" / "localize" / "mlp"


def replayed(stem: str, argv: list[str], **env: str) -> dict[str, object]:
    """An arm replaying the captures of the reference runner's `argv` at `MLP / stem`."""
    return {"command": replay_localize_command(MLP / stem, *argv[3:]), "env": {**LEVEL3, **env}}


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> MlpRun:
    """One compare run that the tests below localise, each in a copy of its run directory
    (`copy_of`): localize writes into the run it is given. Its arms, and the arms the tests try
    as baselines, replay the reference runner's captures of them (`MLP`), as localize's
    choices are under test here, not the runner (the tests above run it): the faulty arm under
    another name, the same with a variable the runner ignores, the fault-free bf16 draft, and
    the bf16 draft of another seed."""
    tmp = tmp_path_factory.mktemp("mlp")
    faulty = [*BF16, "--fault", "layers.1.mlp:scale"]
    cfg = config(tmp, {"f32": replayed("f32", REF), "bf16": replayed("bf16", BF16),
                       "faulty": replayed("faulty", faulty), "alias": replayed("faulty", faulty),
                       "noop": replayed("faulty", faulty, NOOP="1"),
                       "seed7": replayed("seed7", [*BF16, "--seed", "7"])},
                 {"pair": {"arm_a": "f32", "arm_b": "faulty", "teacher_force": True}})
    rep = api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp / "runs",
                             progress=False)
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.run_dir is not None
    return MlpRun(cfg, tmp / "difftest.toml", rep.run_dir)


def copy_of(run: MlpRun, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run.run_dir, tmp_path / run.run_dir.name))


def test_a_baseline_arm_that_is_b_under_another_name_excuses_nothing(mlp_run: MlpRun,
                                                                     tmp_path: Path) -> None:
    """Before, an arm defined as B (or as B plus a variable the runner ignores) as the baseline
    made B's difference its own background: 'every captured module is within its background',
    exit 0, on a run whose B carries a planted fault. The same definition is refused before
    anything is rerun (exit 2); the alias with a no-op variable captures B's bytes at every
    module, which measures no background (exit 3)."""
    cfg, run_dir = mlp_run.cfg, copy_of(mlp_run, tmp_path)
    with pytest.raises(UsageError, match=r"--baseline alias: it runs what arm B \(faulty\) runs "
                                         ".*a baseline must be a run that differs from B only"):
        localize_run(run_dir, baseline="alias", config=cfg)
    assert not (run_dir / "localize").exists()  # refused before any rerun
    result = localize_run(run_dir, baseline="noop", config=cfg)
    assert result.report.localization.outcome is LocalizeOutcome.BASELINE_IS_B
    assert result.exit_code is ExitCode.UNINFORMATIVE
    assert "byte-identical to B's at every one of the" in result.render()
    # the bf16 draft without the fault is a baseline: the planted module is named; the
    # comparison names no baseline, the command line does
    out = cli_in(tmp_path, "localize", str(run_dir), "--baseline", "bf16", "--config",
                 str(mlp_run.toml))
    assert out.returncode == ExitCode.DIFFER, out.stdout + out.stderr
    assert "first module beyond its background: layers.1.mlp (RMS" in out.stdout


def test_a_baseline_of_another_seed_is_no_background(mlp_run: MlpRun, tmp_path: Path) -> None:
    """Before, the bf16 draft of another seed (other weights, other prompts) as the baseline
    swallowed a planted fault: every module of B nearer to A than the baseline (ratios 0.001 to
    0.04 for a fault of scale 0.05), 'within its background', exit 3 saying that the difference
    is the background's (and `--dumps` on its captures: exit 0). Its [spec-config] differs from
    A's in a setting B does not carry (the seed): refused, exit 2, naming it; its captures,
    given with --dumps, are refused too (B nearer to A than the baseline is to either, from the
    embedding on)."""
    run_dir = copy_of(mlp_run, tmp_path)
    out = cli_in(tmp_path, "localize", str(run_dir), "--baseline", "seed7", "--config",
                 str(mlp_run.toml))
    assert out.returncode == ExitCode.USAGE, out.stdout + out.stderr
    assert ("--baseline seed7 is no background for B: its [spec-config] differs from A's where "
            "B's does not: seed (A: 0, B: 0, baseline: 7) (in ") in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    folder = next((run_dir / "localize").iterdir())
    assert not (folder / "localize.json").exists()
    with pytest.raises(UsageError, match="the baseline is no background for B: where B first "
                                         "departs from it, at embed "):
        localize_dumps(folder / "capture-a", folder / "capture-b",
                       baseline=folder / "capture-b0")


@pytest.mark.parametrize("a, b, b0, foreign", [
    ({"dtype": "f32", "seed": "0"}, {"dtype": "bf16", "seed": "0", "fault": "x"},
     {"dtype": "bf16", "seed": "0"}, ()),  # the harmless change, and B's own
    ({"seed": "0"}, {"seed": "0"}, {"seed": "7"}, ("seed (A: 0, B: 0, baseline: 7)",)),
    ({"seed": "0"}, {"seed": "3"}, {"seed": "7"}, ("seed (A: 0, B: 3, baseline: 7)",)),
    ({"seed": "0"}, {"seed": "7"}, {"seed": "7"}, ()),  # B carries it: the captures decide
    ({"k": "4"}, {"k": "4"}, {"k": "4", "noise": "2"}, ("noise (A: -, B: -, baseline: 2)",)),
    ({"k": "4", "noise": "2"}, {"k": "4", "noise": "2"}, {"k": "4"},
     ("noise (A: 2, B: 2, baseline: -)",))])
def test_a_setting_of_the_baseline_s_own_is_foreign(a: dict[str, str], b: dict[str, str],
                                                    b0: dict[str, str],
                                                    foreign: tuple[str, ...]) -> None:
    assert foreign_settings(a, b, b0) == foreign


def report_of(diffs: list[float], *, factor: float | None = None,
              outcome: LocalizeOutcome | None = None, atol: float = 0.5,
              verdict: VerdictKind = VerdictKind.DIFFER) -> RunLocalization:
    mods = tuple(ModuleDiff(f"m{i}", (2,), d, None, rms=d, background=None if factor is None
                            else d) for i, d in enumerate(diffs))
    loc = Localization(mods, None, atol, (), outcome, factor)
    return RunLocalization(Path("run"), ("r0", 3), Path("run/localize/r0-3"),
                           LocalizeReport((Path("a"), Path("b")), loc),
                           baseline=None if factor is None else "bf16", verdict=verdict)


def test_every_module_agreeing_on_a_differ_run_says_why() -> None:
    """Before, such a run printed 'every captured module agrees within 0.5', exit 0, and
    nothing else; then the reason, still exit 0. A run known to differ in which no module
    differs has localised nothing: exit 3, with the reason."""
    below = report_of([0.0, 0.25, 0.125])
    assert below.why_not() == (
        "the run's comparison was DIFFER: the captured modules differ by at most 0.25 (at m1), "
        "below the tolerance used (0.5); rerun with a smaller --atol, or the difference is "
        "outside the captured modules: the draft forward at r0:3 is not where the "
        "comparison's difference comes from (the target's verify, another step, or what the "
        "runner does after the draft: sampling, acceptance)")
    assert "**Nothing localised (exit 3). Why:** the run's comparison was DIFFER" in below.render()
    assert below.exit_code is ExitCode.UNINFORMATIVE
    equal = report_of([0.0, 0.0])
    assert equal.why_not() is not None and equal.why_not().startswith(  # type: ignore[union-attr]
        "the run's comparison was DIFFER, but both captures are bitwise equal at r0:3: the "
        "difference is outside the captured modules")
    within = report_of([0.5, 0.25], factor=1.001, outcome=LocalizeOutcome.BACKGROUND)
    assert "no more than the baseline bf16 does" in (within.why_not() or "")
    assert within.exit_code is ExitCode.UNINFORMATIVE
    agreed = report_of([0.0, 0.25], verdict=VerdictKind.AGREE)
    assert agreed.why_not() is None and agreed.exit_code is ExitCode.OK
    whole = report_of([1.0, 2.0], outcome=LocalizeOutcome.WHOLE_MODEL)
    assert whole.why_not() is None and whole.exit_code is ExitCode.DIFFER
    # an INERT run that differed at a step: nothing found there is not a pass either
    inert = dataclasses.replace(report_of([0.0, 0.0], verdict=VerdictKind.INERT),
                                differing=("r0", 3))
    assert inert.exit_code is ExitCode.UNINFORMATIVE and (inert.why_not() or "").startswith(
        "the run's comparison differed at r0:3 (its verdict inert), but both captures are "
        "bitwise equal at r0:3")
    nothing = report_of([0.0, 0.0], verdict=VerdictKind.INERT)  # no differing step: --at
    assert nothing.exit_code is ExitCode.OK and nothing.why_not() is None
    assert report_of([0.0, 0.25]).to_json()["why"] == below.why_not()


def test_localize_run_below_the_tolerance_says_why(mlp_run: MlpRun, tmp_path: Path) -> None:
    """A real DIFFER run localised with an atol above every module's difference: the modules
    agree within it, and the section says that this is below the tolerance used."""
    run_dir = copy_of(mlp_run, tmp_path)
    out = cli_in(tmp_path, "localize", str(run_dir), "--atol", "1e6")
    assert out.returncode == ExitCode.UNINFORMATIVE, out.stdout + out.stderr
    assert "below the tolerance used (1e+06)" in out.stdout
    folder = next((run_dir / "localize").iterdir())
    written = json.loads((folder / "localize.json").read_text())
    assert written["outcome"] == LocalizeOutcome.AGREE.value
    why = written["why"]  # the run's comparison was DIFFER, and nothing localised says why
    assert why is not None and why.startswith("the run's comparison was DIFFER: ")
    assert "below the tolerance used (1e+06)" in why
    assert f"**Nothing localised (exit 3). Why:** {why}" in (folder / "localize.md").read_text()
