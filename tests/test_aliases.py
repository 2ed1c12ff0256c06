"""Old spellings kept for one release: `python -m difftest.reference` (and `.hf`, `.mlx`) still
run the runner now under `difftest.runners`, and say once on stderr that the name is going; a
module imported by its name before the stage folders (`difftest.errors`, ...) still imports,
with a DeprecationWarning naming the new name."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.core.moved import MOVED

PACKAGE = Path(__file__).resolve().parents[1] / "difftest"


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("name", ["reference", "hf", "mlx"])
def test_the_old_runner_name_warns_and_runs_the_same_program(name: str) -> None:
    old, new = _run(f"difftest.{name}", "--help"), _run(f"difftest.runners.{name}", "--help")
    assert (old.returncode, new.returncode) == (0, 0), (old.stderr, new.stderr)
    assert old.stdout == new.stdout and f"python -m difftest.runners.{name}" in new.stdout
    assert old.stderr.splitlines() == [
        f"difftest: `python -m difftest.{name}` is deprecated and goes in difftest 0.3; "
        f"use `python -m difftest.runners.{name}`"]
    assert new.stderr == ""


def test_the_old_name_keeps_the_runner_s_exit_code_for_a_bad_option() -> None:
    old = _run("difftest.reference", "--requests", "0")
    new = _run("difftest.runners.reference", "--requests", "0")
    assert old.returncode == new.returncode == 2
    assert old.stderr.splitlines()[1:] == new.stderr.splitlines()


def test_every_old_module_name_is_gone_and_its_new_name_is_there() -> None:
    """An alias is reached only when no file answers to the old name; the new one must exist."""
    for old, new in MOVED.items():
        assert not (PACKAGE.parent / (old.replace(".", "/") + ".py")).exists(), old
        assert (PACKAGE.parent / (new.replace(".", "/") + ".py")).exists(), new


def test_an_old_module_name_is_the_module_itself_and_warns_at_the_import(tmp_path: Path) -> None:
    """Python shows a DeprecationWarning by default only when it is attributed to __main__: the
    warning must point at the user's import line, and the old name must be the module itself
    (patching it patches what runs)."""
    script = tmp_path / "user.py"
    script.write_text("import difftest.errors as e\n"
                      "import difftest.core.errors as c\n"
                      "from difftest.reference import RunnerOptions as R\n"
                      "from difftest.runners.reference import RunnerOptions\n"
                      "from difftest.rules import Overrides\n"
                      "from difftest.flow.overrides import Overrides as O\n"
                      "print(e is c, R is RunnerOptions, Overrides is O)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.splitlines() == ["True True True"]
    for line, old, new in ((1, "difftest.errors", "difftest.core.errors"),
                           (3, "difftest.reference.RunnerOptions",
                            "difftest.runners.reference.RunnerOptions"),
                           (5, "difftest.rules", "difftest.flow.overrides")):
        assert (f"{script}:{line}: DeprecatedSpelling: `{old}` is deprecated and goes in "
                f"difftest 0.3; use `{new}`") in out.stderr, out.stderr


def test_a_name_that_never_existed_is_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("difftest.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("difftest.reference.no_such_module")
