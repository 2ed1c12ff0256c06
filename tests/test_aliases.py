"""Old spellings kept for one release: `python -m difftest.reference` (and `.hf`, `.mlx`) still
run the runner now under `difftest.runners`, and say once on stderr that the name is going."""

from __future__ import annotations

import subprocess
import sys

import pytest


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
        f"run `python -m difftest.runners.{name}`"]
    assert new.stderr == ""


def test_the_old_name_keeps_the_runner_s_exit_code_for_a_bad_option() -> None:
    old = _run("difftest.reference", "--requests", "0")
    new = _run("difftest.runners.reference", "--requests", "0")
    assert old.returncode == new.returncode == 2
    assert old.stderr.splitlines()[1:] == new.stderr.splitlines()
