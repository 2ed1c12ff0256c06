"""scripts/mutation_check.py breaks guarded code on purpose; its anchors must still be in the
code, or a refactor has silently retired a mutation. Every drifted entry is named at once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "mutation_check.py"


def test_every_mutation_anchor_matches_its_code_once() -> None:
    spec = importlib.util.spec_from_file_location("mutation_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = module.drifted()
    assert not stale, "mutation_check.py anchors that drifted:\n" + "\n".join(stale)
