"""The mutation run's configuration stays valid: every module it mutates and every test file it
runs exists, and mutmut's table is the one the script extends. Fast: nothing is mutated here
(`python scripts/mutation_score.py` does that)."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_score",
                                                  ROOT / "scripts" / "mutation_score.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_module_and_test_file_the_mutation_run_names_exists() -> None:
    script = _script()
    assert script.problems(ROOT) == []
    modules, deselect = script.load(ROOT)
    assert {m.name for m in modules} >= {"align", "compare", "audit", "verdict", "parser", "gate"}
    assert all(m.tests for m in modules)
    # the slow real-run test left out has a replay counterpart in the same file
    assert deselect == ["tests/flow/test_gate.py::test_check_default_config_writes_junit_and_markdown"]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    text = (ROOT / "pyproject.toml").read_text().replace('"tests/trace/test_trace.py"',
                                                          '"tests/test_gone.py"')
    (tmp_path / "pyproject.toml").write_text(text)
    for name in ("difftest", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    assert _script().problems(tmp_path) == ["parser: tests/test_gone.py does not exist"]


def test_mutmut_reads_the_table_the_script_extends() -> None:
    mutmut = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert mutmut["source_paths"] == ["difftest"]
    # the script adds these per module; a fixed value here would be a duplicate TOML key
    assert "only_mutate" not in mutmut and "pytest_add_cli_args_test_selection" not in mutmut
    assert (ROOT / "pyproject.toml").read_text().count("[tool.mutmut]\n") == 1
