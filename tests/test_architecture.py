"""The stage order of the package, read from its imports: a stage imports only stages before
it, so no import cycle can form. Every import counts, deferred or type-only: a cycle through a
function-level import is still a cycle in the design."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "difftest"

# Importable from anywhere (in this order among themselves).
FOUNDATION = ("errors", "kinds", "jsonout", "model", "atomic", "procgroup", "gitinfo",
              "evidence", "limits",
              # the per-dtype table and thresholds files: data a config and a comparison read
              "thresholds",
              # the teacher-forcing stream and activation dumps: files a runner and the
              # pipeline both read, built on the foundation alone
              "force", "activations", "faults")
# The data flow, first stage first. A stage may import the foundation and earlier stages.
STAGES = ("config", "trace", "align", "resolution", "clustered", "stats", "noise", "tolerance",
          "audit", "compare", "threshold_notes", "numerics", "verdict", "acceptance", "sequential",
          "rates", "floor",
          # the run plan (which arms run, each one's role) and the overrides of its rules
          "plan", "rules",
          "worktree", "execute", "quantity", "switch", "pipeline",
          "sequential_runs", "gate", "calibrate", "bisect", "localize",
          "report", "api", "cli", "pytest_plugin", "__main__")
# What an engine calls to print a trace (the emitter, then the hooks into engines built on it):
# they import the foundation and earlier producers only.
PRODUCERS = ("emit", "adapters")
# Programs of their own that difftest runs as arms: no stage imports them, and they import
# nothing but the foundation and the producers.
OUTSIDE = ("reference", "hf", "mlx")
ORDER = {name: i for i, name in enumerate(FOUNDATION + PRODUCERS + STAGES)}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""  # "" is the package root


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported difftest module) for every import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("difftest")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("difftest"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                known = (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists() or \
                    (PACKAGE.parent / sub.replace(".", "/")).is_dir()
                out.append((node.lineno, sub if known else base))
    return out


def violations(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        here = _stage(module)
        for line, target in _imports(path, module):
            there = _stage(target)
            where = f"{path.relative_to(package.parent)}:{line}: {module} imports {target}"
            if there == here:
                continue
            if here == "":  # the package root loads the API lazily, and nothing else
                if there != "api":
                    found.append(f"{where}: the package root may import only difftest.api")
                continue
            if there == "":
                continue  # `from difftest import __version__`
            if here in OUTSIDE or there in OUTSIDE:
                if there not in FOUNDATION + PRODUCERS:
                    found.append(f"{where}: {there} is outside the stages")
                continue
            if here not in ORDER or there not in ORDER:
                found.append(f"{where}: place {here if here not in ORDER else there!r} in "
                             "FOUNDATION, STAGES or OUTSIDE")
            elif ORDER[there] >= ORDER[here]:
                found.append(f"{where}: {there} comes after {here} in the stage order")
    return found


def test_every_import_follows_the_stage_order() -> None:
    found = violations()
    assert not found, "imports against the stage order:\n" + "\n".join(found)


def test_the_check_sees_a_backward_import(tmp_path: Path) -> None:
    """The checker itself: a stage importing a later one (the old pipeline -> report cycle)."""
    copy = tmp_path / "difftest"
    (copy / "report").mkdir(parents=True)
    (copy / "__init__.py").write_text("")
    (copy / "report" / "__init__.py").write_text("")
    (copy / "report" / "comparison.py").write_text("from difftest.pipeline import evaluate\n")
    (copy / "pipeline.py").write_text("def f():\n    from difftest.report import comparison\n")
    found = violations(copy)
    assert len(found) == 1 and "report comes after pipeline" in found[0], found
