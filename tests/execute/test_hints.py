"""An arm whose Python cannot import a module fails in one line that names what to install, once
per cause in `check`; its traceback stays in the run directory."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from conftest import replay_arm
from difftest import api
from difftest.cli import app
from difftest.core.errors import ExitCode
from difftest.execute.hints import missing_module
from difftest.report import gate_report

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "compare"

TRACEBACK = """Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/x/runner.py", line 10, in <module>
    import {module}
ModuleNotFoundError: No module named '{module}'
"""


def _no_torch_arm(name: str) -> str:
    """The reference runner under `python -S`: no site-packages, so torch is really missing
    (difftest itself comes from the repository on PYTHONPATH)."""
    argv = ["{python}", "-S", "-m", "difftest.runners.reference", "--steps", "2", "--lane", name]
    return (f"[arms.{name}]\ncommand = {json.dumps(argv)}\n"
            f"env = {{ PYTHONPATH = {json.dumps(str(REPO))}, VT_SPEC_TRACE = \"1\" }}\n")


def test_a_missing_torch_is_one_line_per_cause_in_check(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(_no_torch_arm("paged") + _no_torch_arm("materialized")
                      + replay_arm("replay", DATA / "agree_a.log")
                      + '[comparisons.one]\narm_a = "paged"\narm_b = "materialized"\n'
                      + '[comparisons.two]\narm_a = "materialized"\narm_b = "paged"\n'
                      + '[comparisons.three]\narm_a = "replay"\narm_b = "paged"\n')
    result = api.check(config, run_root=tmp_path / "runs", probes=False, progress=False)
    assert result.exit_code == ExitCode.ARM_FAILED
    text = gate_report.check_lines(result)
    hint = ("cannot import torch: install difftest's reference extra (pip install -e "
            "'.[reference]' in a checkout, else pip install 'difftest[reference]')")
    assert [line for line in text.splitlines() if "cannot import" in line] == [
        f"  {hint}: arm(s) paged, materialized"]
    assert "Traceback" not in text
    # each comparison's own report: one line per arm, no traceback
    one = result.reports[0]
    assert all("Traceback" not in r and "\n" not in r for r in one.verdict.reasons)
    assert one.arm_a.failure is not None and one.arm_a.failure.cause == hint
    # the whole stderr stays in the run directory, and the message says where
    assert result.run_dir is not None
    captured = (result.run_dir / "paged.stderr").read_text()
    assert "Traceback" in captured and "No module named 'torch'" in captured
    assert str(result.run_dir / "paged.stderr") in one.verdict.reasons[0]
    md = gate_report.check_markdown(result)
    assert "Traceback" not in md and "cannot import torch: install difftest's reference extra" in md


def test_compare_prints_the_hint_once_per_arm(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(_no_torch_arm("paged") + replay_arm("replay", DATA / "agree_a.log"))
    r = CliRunner().invoke(app, ["compare", "--config", str(config), "--arm-a", "replay",
                                 "--arm-b", "paged", "--run-root", str(tmp_path / "runs"),
                                 "--no-progress"])
    assert r.exit_code == 4, r.output
    assert r.output.count("cannot import torch") == 1 and "Traceback" not in r.output


def test_other_failures_are_listed_once_per_arm_with_their_stderr(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    crash = '["{python}", "-c", "import sys; print(\'boom\', file=sys.stderr); sys.exit(7)"]'
    config.write_text(replay_arm("replay", DATA / "agree_a.log") + replay_arm("r2", DATA / "agree_b.log")
                      + f"[arms.crash]\ncommand = {crash}\n"
                      + '[comparisons.one]\narm_a = "replay"\narm_b = "crash"\n'
                      + '[comparisons.two]\narm_a = "r2"\narm_b = "crash"\n')
    result = api.check(config, run_root=tmp_path / "runs", probes=False, progress=False)
    text = gate_report.check_lines(result)
    assert text.count("arm 'crash': exited with an error (exit code 7)") == 1
    assert text.count("boom") == 1


def test_only_an_import_failure_that_ended_the_program_is_the_cause() -> None:
    found = missing_module(TRACEBACK.format(module="torch.nn"),
                           ["python", "-m", "difftest.runners.reference"])
    assert found is not None and (found.module, found.extra) == ("torch", "reference")
    hf = missing_module(TRACEBACK.format(module="torch"), ["python", "-m", "difftest.runners.hf"])
    assert hf is not None and hf.extra == "hf"
    tf = missing_module(TRACEBACK.format(module="transformers"))
    assert tf is not None and tf.extra == "hf"
    mlx = missing_module(TRACEBACK.format(module="mlx_lm.generate"), ["python", "-m", "difftest.runners.mlx"])
    assert mlx is not None and (mlx.module, mlx.extra) == ("mlx_lm", "mlx")
    other = missing_module(TRACEBACK.format(module="jax"))
    assert other is not None and other.extra is None
    assert other.cause.startswith("cannot import jax: install the package that provides it")
    # survived: the program went on and failed later for another reason
    assert missing_module(TRACEBACK.format(module="torch") + "falling back\nKeyError: 3\n") is None
    assert missing_module("plain crash\n") is None and missing_module("") is None
