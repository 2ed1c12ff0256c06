"""The public surface: `difftest.__all__` and `difftest.MODULES` are the supported import paths,
each one resolves, docs/python-api.md lists each, and nothing else keeps an old name alive
(no import hook, no forwarding package)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import difftest

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_resolves_and_is_documented() -> None:
    doc = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    section = doc[doc.index("## The supported import paths"):]
    listed = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", section))
    for name in difftest.__all__:
        assert getattr(difftest, name) is not None, name
        assert name in listed or f"difftest.{name}" in listed, f"{name} not in python-api.md"
    for module in difftest.MODULES:
        assert importlib.util.find_spec(module) is not None, module
        assert module in listed, f"{module} not in python-api.md"


def test_a_name_outside_the_surface_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'run_comparison'"):
        difftest.run_comparison  # noqa: B018 - in difftest.api, not in the public surface


def test_importing_difftest_installs_no_import_hook_and_loads_no_numpy() -> None:
    code = ("import sys; before = list(sys.meta_path); import difftest; "
            "print(sys.meta_path == before, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["True", "False"]


@pytest.mark.parametrize("old", ["difftest.errors", "difftest.compare", "difftest.rules",
                                 "difftest.pipeline", "difftest.reference", "difftest.hf",
                                 "difftest.mlx"])
def test_the_names_modules_had_before_the_folders_are_gone(old: str) -> None:
    """No module of this package answers to an old name (an editable install of another
    checkout may still find one there: only this package's own files count)."""
    spec = importlib.util.find_spec(old)
    package = Path(difftest.__file__).parent
    assert spec is None or package not in Path(spec.origin or "/").parents, spec
