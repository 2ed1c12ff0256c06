"""The stage order of the package, read from its imports: a stage imports only stages before
it, so no import cycle can form. Every import counts, deferred or type-only: a cycle through a
function-level import is still a cycle in the design."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "difftest"

# The folders (and the few top-level modules) in data-flow order: each imports only those before
# it. The foundation first, importable from anywhere.
FOUNDATION = ("core",)
# What an engine calls to print a trace (the emitter, then the hooks into engines built on it).
PRODUCERS = ("emit", "adapters")
STAGES = ("config", "trace", "numerics", "analysis", "execute", "flow", "bisect", "report",
          "api", "cli", "pytest_plugin", "__main__")
# Programs of their own that difftest runs as arms: no stage imports them, and they import
# nothing but the foundation and the producers.
OUTSIDE = ("runners",)
# What the package root (the public surface, difftest/__init__.py) re-exports, on first use.
ROOT_IMPORTS = ("difftest.api", "difftest.emit", "difftest.adapters")
ORDER = {name: i for i, name in enumerate(FOUNDATION + PRODUCERS + STAGES)}

# Inside a folder, the modules in the order they may import each other: first the module that
# imports no sibling. Every module of these folders is listed (a new one must be placed).
MODULES = {
    "core": ("deprecation", "errors", "jsonout", "kinds", "model", "atomic",
             "procgroup", "gitinfo", "evidence", "limits",
             # what a name may be, and every name difftest gives an arm it adds
             "names",
             # the bug corpus: names, coverage classes and sources the runner and the flow share
             "corpus",
             # what makes a float differ between machines: a thresholds file records it
             "machine",
             # a proportion's interval: the rate instruments and the thresholds reader share it
             "proportion",
             # the per-dtype table and thresholds files: data a config and a comparison read
             "thresholds",
             # a comparison's rules, checked once: what a config, an override and a run record
             # hold alike, and what a comparison is judged under
             "rules",
             # the teacher-forcing stream, activation dumps and planted faults: files a runner
             # and the flow both read
             "force", "activations", "faults"),
    "trace": ("grammar", "numbers", "bulk", "parser", "align",
              # the `[spec-sample]` lines of sampled decoding, read beside the main parser
              "sampled"),
    # reductions along the rows of the (rows, K) top-list arrays first: they import nothing
    "numerics": ("rows", "exact", "resolution", "clustered", "stats", "noise", "tolerance"),
    "analysis": ("findings", "coverage", "bugclass", "quantity", "audit", "compare",
                 "threshold_notes", "logit_instrument", "verdict", "acceptance", "sequential",
                 "rates", "benign", "floor",
                 # sampled decoding: the token laws of two arms, and each arm's acceptance
                 "distribution",
                 # whether a rerun draws anything new (sampled runs, --until-decided rounds)
                 "repeats"),
    "execute": ("worktree", "gitprep", "hints", "records", "rundir", "capture", "launcher",
                "progress", "supervise"),
    "flow": ("plan", "overrides", "switch", "roles", "evaluate", "sequential_runs", "run", "scoring",
             "sweep", "judge", "rejudge", "calibrate", "localize"),
    "bisect": ("evidence", "history", "trial", "journal", "search", "engine"),
    # the command line: the error translator and the shared options, then a file per kind of
    # command
    "cli": ("errors", "options", "compare", "traces", "gate", "search", "cache", "__main__"),
    "report": ("text", "cells", "headline", "evidence", "comparison", "audit_report",
               "bisect_report",
               "cache_report", "diffread", "events", "gate_report", "noise_report", "html",
               "outputs"),
    # each runner a program of its own: its options first, its loop and entry point last
    "runners.reference": ("faults", "trace", "attention", "options", "bugs", "model", "drafter",
                          # a run's parts, then the verify, then the two loops that use them:
                          # the greedy loop hands a sampled run to the sampled one
                          "setup", "verify", "sampling", "runner", "__main__"),
    "runners.hf": ("options", "wrong_verify", "attention", "corpus", "faults", "models",
                   "sampling", "runner", "__main__"),
    "runners.mlx": ("options", "models", "corpus", "faults", "runner", "__main__"),
    "runners.llamacpp": ("options", "models", "runner", "__main__"),
}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""  # "" is the package root


def _place(module: str, package: Path = PACKAGE) -> tuple[str, str]:
    """(folder, module in it) of a module: `runners.hf`, `models` for difftest.runners.hf.models;
    the module is "" for a folder's own __init__ (and for a top-level module)."""
    parts = module.split(".")[1:]
    if len(parts) <= 1 or (package.joinpath(*parts)).is_dir():
        return ".".join(parts), ""
    return ".".join(parts[:-1]), parts[-1]


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


def _inside(folder: str, here: str, there: str, where: str) -> list[str]:
    """The order of two modules of one folder."""
    order = MODULES.get(folder)
    if order is None or "" in (here, there) or here == there:
        return []
    unplaced = [m for m in (here, there) if m not in order]
    if unplaced:
        return [f"{where}: place {unplaced[0]!r} in MODULES[{folder!r}]"]
    if order.index(there) >= order.index(here):
        return [f"{where}: {folder}.{there} comes after {folder}.{here} in the folder's order"]
    return []


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
                (folder, leaf), (other, leaf_there) = _place(module, package), _place(target, package)
                if folder == other:
                    found += _inside(folder, leaf, leaf_there, where)
                elif here in OUTSIDE and folder.count(".") and other.count("."):
                    found.append(f"{where}: {folder} and {other} are programs of their own: "
                                 "what they share belongs in the foundation")
                continue
            if here == "":  # the package root: the public surface, loaded on first use
                if target not in ROOT_IMPORTS:
                    found.append(f"{where}: the package root may import only "
                                 f"{', '.join(ROOT_IMPORTS)}")
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


def test_the_architecture_doc_lists_the_stages_in_this_order() -> None:
    """docs/ARCHITECTURE.md's table of folders is the order this test enforces, redrawn from
    it: the same folders and top-level modules, in the same order."""
    import re

    doc = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = doc.split("| folder | what it holds |", 1)[1].split("\n\n", 1)[0]
    listed = [name.removesuffix(".py").removesuffix("/")
              for row in table.splitlines()[2:]
              for name in re.findall(r"`([^`]+)`", row.split("|")[1])]
    assert listed == [*FOUNDATION, *PRODUCERS, *STAGES, *OUTSIDE]


def test_every_folder_module_is_placed() -> None:
    """A module added to an ordered folder must be given its place, imports or not."""
    missing = [f"{folder}/{m.stem}" for folder, order in MODULES.items()
               for m in sorted(PACKAGE.joinpath(*folder.split(".")).iterdir())
               if ((m.suffix == ".py" and m.stem != "__init__") or
                   (m.is_dir() and (m / "__init__.py").exists())) and m.stem not in order]
    assert not missing, f"place these in MODULES: {missing}"


def test_every_import_follows_the_stage_order() -> None:
    found = violations()
    assert not found, "imports against the stage order:\n" + "\n".join(found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A throwaway `difftest` package holding `files` (path under it -> text), every folder
    with its `__init__.py`: what the checker reads, without importing anything."""
    root = tmp_path / "difftest"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    return root


def test_the_check_sees_a_backward_import(tmp_path: Path) -> None:
    """The checker itself: a stage importing a later one (the old pipeline -> report cycle)."""
    found = violations(_package(tmp_path, {
        "report/comparison.py": "from difftest.flow.pipeline import evaluate\n",
        "flow/pipeline.py": "def f():\n    from difftest.report import comparison\n"}))
    assert len(found) == 1 and "report comes after flow" in found[0], found


def test_the_check_sees_a_backward_import_inside_a_folder(tmp_path: Path) -> None:
    """Folders group modules; the order inside one still holds (compare may not import verdict)."""
    found = violations(_package(tmp_path, {
        "analysis/verdict.py": "",
        "analysis/compare.py": "from difftest.analysis.verdict import x\n"}))
    assert len(found) == 1 and "analysis.verdict comes after analysis.compare" in found[0], found


def test_the_check_sees_a_cycle_inside_a_runner(tmp_path: Path) -> None:
    """A runner's folder is ordered too: its loop may hand a sampled run to the sampled loop,
    which then may not import the loop back (a cycle through a deferred import)."""
    found = violations(_package(tmp_path, {
        "runners/reference/runner.py": "def run():\n    from difftest.runners.reference import "
                                       "sampling\n",
        "runners/reference/sampling.py": "from difftest.runners.reference.runner import run\n"}))
    assert len(found) == 1 and "reference.runner comes after runners.reference.sampling" \
        in found[0], found


def test_the_check_sees_one_runner_importing_another(tmp_path: Path) -> None:
    found = violations(_package(tmp_path, {
        "runners/hf/models.py": "from difftest.runners.reference.model import build\n",
        "runners/reference/model.py": ""}))
    assert len(found) == 1 and "programs of their own" in found[0], found


def test_the_check_sees_a_folder_importing_a_later_folder(tmp_path: Path) -> None:
    found = violations(_package(tmp_path, {"flow/plan.py": "",
                                           "numerics/stats.py": "import difftest.flow.plan\n"}))
    assert len(found) == 1 and "flow comes after numerics" in found[0], found


def test_the_package_root_imports_only_the_public_surface(tmp_path: Path) -> None:
    found = violations(_package(tmp_path, {
        "__init__.py": "from difftest.api import check\nfrom difftest.core import moved\n",
        "api.py": "", "core/moved.py": ""}))
    assert len(found) == 1 and "the package root may import only" in found[0], found


# Top-level test files: tests of the top-level modules, and of the package as a whole.
FLAT_MODULES = ("api", "cli", "config", "emit", "pytest_plugin")
WHOLE_PACKAGE = ("architecture", "signatures", "docs", "markers", "mutation_anchors", "public_surface",
                 "review_fixes", "slurm", "numerics_cli", "override_errors")


def test_the_tests_mirror_the_package() -> None:
    """A test folder names a package folder; a top-level test is of a top-level module or of the
    whole package; no two test files share a name (pytest imports them by name)."""
    tests = PACKAGE.parent / "tests"
    folders = [d.relative_to(tests) for d in sorted(tests.rglob("*")) if d.is_dir()
               and not {"data", "golden", "__pycache__"} & set(d.relative_to(tests).parts)]
    unmirrored = [str(d) for d in folders if not (PACKAGE / d).is_dir()]
    assert not unmirrored, f"test folders with no package folder of that name: {unmirrored}"
    top = [p.stem.removeprefix("test_") for p in sorted(tests.glob("test_*.py"))]
    stray = [name for name in top if not name.startswith(FLAT_MODULES) and name not in WHOLE_PACKAGE]
    assert not stray, f"move these into the folder of the module they test: {stray}"
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
