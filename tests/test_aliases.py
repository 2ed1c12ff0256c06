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


def test_an_old_module_name_imports_the_same_objects_and_warns() -> None:
    code = ("import warnings; warnings.simplefilter('error')\n"
            "try:\n    import difftest.errors\nexcept DeprecationWarning as w:\n    print(w)\n"
            "warnings.simplefilter('ignore')\n"
            "import difftest.errors, difftest.core.errors as e\n"
            "from difftest.rules import Overrides\nfrom difftest.flow.overrides import Overrides as O\n"
            "from difftest.reference.options import RunnerOptions as R\n"
            "from difftest.runners.reference.options import RunnerOptions\n"
            "print(difftest.errors.UsageError is e.UsageError, Overrides is O, R is RunnerOptions)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True).stdout.splitlines()
    assert out == ["`difftest.errors` is deprecated and goes in difftest 0.3; use "
                   "`difftest.core.errors`", "True True True"]


def test_a_name_that_never_existed_is_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("difftest.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("difftest.reference.no_such_module")
