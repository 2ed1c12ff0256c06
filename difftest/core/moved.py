"""Old module names kept for one release. difftest 0.2 grouped its modules into folders by stage
(`difftest.errors` is now `difftest.core.errors`, `difftest.compare` is
`difftest.analysis.compare`, ...); an import by the old name still works, gives the module
itself (under its new name), and warns once, at the import statement, that the old name goes in
difftest 0.3.

The runners' `python -m difftest.reference` (`.hf`, `.mlx`) are packages of their own
(`difftest/reference/`), since `-m` runs a file, not an alias."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from difftest.core.deprecation import warn_python

_FOLDERS = {
    "core": ("errors", "kinds", "jsonout", "model", "atomic", "procgroup", "gitinfo", "evidence",
             "limits", "thresholds", "force", "activations", "faults"),
    "numerics": ("resolution", "clustered", "stats", "noise", "tolerance"),
    "analysis": ("audit", "compare", "threshold_notes", "verdict", "acceptance", "sequential",
                 "rates", "floor", "quantity"),
    "flow": ("plan", "switch", "sequential_runs", "calibrate", "localize"),
    "trace": ("align",),
    "execute": ("worktree",),
}
# old dotted name -> new dotted name
MOVED: dict[str, str] = {
    **{f"difftest.{m}": f"difftest.{folder}.{m}" for folder, ms in _FOLDERS.items() for m in ms},
    "difftest.report.rundir": "difftest.report.outputs",
    "difftest.rules": "difftest.flow.overrides",  # the Overrides record; Rules is core.rules
    # split since: the analysis of one comparison, and mutation scoring, kept their old names'
    # modules (running a plan is difftest.flow.run, judging it difftest.flow.judge)
    "difftest.pipeline": "difftest.flow.evaluate",
    "difftest.gate": "difftest.flow.scoring",
}
# `difftest.numerics` is now a folder; the module of that name (what the logit instrument could
# see) is difftest.analysis.logit_instrument, and the folder keeps the name, so no alias for it.


def new_name(old: str) -> str | None:
    """The module's name now, for an old name or a name inside an old package."""
    if old in MOVED:
        return MOVED[old]
    for runner in ("reference", "hf", "mlx"):
        prefix = f"difftest.{runner}."
        if old.startswith(prefix) and old != f"{prefix}__main__":
            return f"difftest.runners.{runner}.{old.removeprefix(prefix)}"
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def exec_module(self, module: ModuleType) -> None:
        # stacklevel 3: warn_python, this method, then the import statement (warnings skips
        # importlib's own frames)
        warn_python(module.__name__, self.new, stacklevel=3)
        # the old name is the module itself, not a copy: patching it patches what runs
        sys.modules[module.__name__] = importlib.import_module(self.new)


class _Finder(importlib.abc.MetaPathFinder):
    """Consulted after the real finders: only a name no file answers to reaches it."""

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None  # not an old name, or one that never had a module behind it
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
