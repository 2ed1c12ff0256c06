"""A bad override is refused by one rule, in one message, whether it came from the command line
or from an API caller; and a run record whose arms name one capture is refused by `export`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import difftest
from difftest.cli import app
from difftest.core.errors import ExitCode, UsageError
from conftest import replay_arm

DATA = Path(__file__).parent / "data" / "compare"
A, B = DATA / "agree_a.log", DATA / "agree_b.log"
runner = CliRunner()

CASES = [
    # (API keyword, value, command-line option, its text, message)
    ("expect", "maybe", "--expect", "maybe",
     "the overrides: comparison expect: must be \"same\" or \"differ\", got 'maybe'"),
    ("drafting", "rows", "--drafting", "rows",
     "the overrides: comparison drafting: must be \"block\" or \"sequential\", got 'rows'"),
    ("atol", float("nan"), "--atol", "nan",
     "the overrides: comparison atol: must be a finite number >= 0, got nan"),
    ("atol", float("inf"), "--atol", "inf",
     "the overrides: comparison atol: must be a finite number >= 0, got inf"),
    ("rtol", 1e400, "--rtol", "1e400",
     "the overrides: comparison rtol: must be a finite number >= 0, got inf"),
    ("near_tie", -0.5, "--near-tie", "-0.5",
     "the overrides: comparison near_tie: must be >= 0, got -0.5"),
    ("min_differing", 0, "--min-differing", "0",
     "the overrides: comparison min_differing: must be >= 1, got 0"),
]


@pytest.mark.parametrize(("key", "value", "option", "text", "message"), CASES,
                         ids=[f"{c[2]} {c[3]}" for c in CASES])
def test_the_api_and_the_command_line_refuse_a_bad_override_alike(
        key: str, value: object, option: str, text: str, message: str) -> None:
    with pytest.raises(UsageError) as api_error:
        difftest.compare_traces(A, B, **{key: value})  # type: ignore[arg-type]
    assert str(api_error.value) == message
    result = runner.invoke(app, ["compare", "--trace-a", str(A), "--trace-b", str(B), option,
                                 text])
    assert result.exit_code == ExitCode.USAGE
    assert result.output.strip().splitlines()[-1] == f"difftest: error: {message}"


def test_an_integer_past_floats_range_is_a_usage_error_not_an_overflow() -> None:
    with pytest.raises(UsageError) as error:
        difftest.compare_traces(A, B, atol=10**400)
    assert str(error.value) == ("the overrides: comparison atol: must be a finite number >= 0, "
                                "got an integer too large for a float")


def test_compare_arms_checks_overrides_before_running_anything(tmp_path: Path) -> None:
    cfg = tmp_path / "difftest.toml"
    cfg.write_text(replay_arm("a", A) + replay_arm("b", B))
    with pytest.raises(UsageError, match="comparison expect: must be"):
        difftest.compare_arms("a", "b", config=cfg, expect="maybe", run_root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_audit_thresholds_take_the_same_rule_on_the_command_line() -> None:
    result = runner.invoke(app, ["audit", str(A), "--max-blind-radius", "nan"])
    assert result.exit_code == ExitCode.USAGE
    assert result.output.strip().splitlines()[-1] == (
        "difftest: error: the overrides: audit threshold max_blind_radius: must be a finite "
        "number >= 0, got nan")


def test_export_refuses_a_record_whose_arms_name_one_capture(tmp_path: Path) -> None:
    cfg = tmp_path / "difftest.toml"
    cfg.write_text(replay_arm("a", A) + replay_arm("b", B))
    report = difftest.compare_arms("a", "b", config=cfg, run_root=tmp_path / "runs",
                                   progress=False)
    assert report.run_dir is not None
    meta_path = report.run_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["arms"]["b"]["stderr_path"] = meta["arms"]["a"]["stderr_path"]
    meta_path.write_text(json.dumps(meta))
    result = runner.invoke(app, ["export", str(report.run_dir)])
    assert result.exit_code == ExitCode.USAGE
    assert result.output.strip().splitlines()[-1] == (
        f"difftest: error: {meta_path}: arms.b.stderr_path names a.stderr, the capture "
        "arms.a.stderr_path names: one capture compared with itself agrees whatever the engines "
        "did; each arm's capture must be its own file")


def test_export_refuses_two_captures_that_are_one_file_through_a_link(tmp_path: Path) -> None:
    cfg = tmp_path / "difftest.toml"
    cfg.write_text(replay_arm("a", A) + replay_arm("b", B))
    report = difftest.compare_arms("a", "b", config=cfg, run_root=tmp_path / "runs",
                                   progress=False)
    assert report.run_dir is not None
    b_err = report.run_dir / json.loads((report.run_dir / "meta.json").read_text())[
        "arms"]["b"]["stderr_path"]
    b_err.unlink()
    b_err.hardlink_to(report.run_dir / "a.stderr")
    with pytest.raises(UsageError, match=r"arms\.b\.stderr_path names b\.stderr, the capture "
                                         r"arms\.a\.stderr_path names"):
        difftest.rejudge(report.run_dir)
