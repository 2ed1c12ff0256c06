"""Figures about the package's structure, printed so that a change to the command layer can be
measured before and after: import layers and arrows between the stages, the functions with the
most parameters, the command line's size, and how far two comparison settings travel.

    python scripts/structure_report.py            # the figures, as text
    python scripts/structure_report.py --json     # the same, as JSON

Stages are the package's first-level modules and folders (difftest/<stage>.py or
difftest/<stage>/); an arrow is one stage importing another (any import: deferred and type-only
imports count, as in tests/test_architecture.py); layers are the longest chain of arrows + 1,
an import cycle (listed) counting as one node.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "difftest"
WIDE = 8  # a signature wider than this is listed


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("difftest")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.startswith("difftest"):
                found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def stage_graph() -> dict[str, set[str]]:
    """Stage -> the other stages it imports (the package root left out)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in _files():
        module = _module(path)
        here = _stage(module)
        if not here:
            continue
        graph[here]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for target in _imports(tree, module, path.name == "__init__.py"):
            there = _stage(target)
            known = (PACKAGE / f"{there}.py").exists() or (PACKAGE / there).is_dir()
            if there and there != here and known:  # not `from difftest import __version__`
                graph[here].add(there)
    return graph


def module_graph() -> dict[str, set[str]]:
    """Module -> the other difftest modules it imports: the same layering at file grain, so
    figures stay comparable when modules move into folders."""
    files = {_module(p) for p in _files()}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in _files():
        module = _module(path)
        if module == "difftest":
            continue
        graph[module]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for target in _imports(tree, module, path.name == "__init__.py"):
            while target not in files and "." in target:
                target = target.rpartition(".")[0]  # `from pkg import name` names pkg
            if target not in (module, "difftest"):
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected set of two or more nodes (Tarjan's), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for there in sorted(graph.get(node, ())):
            if there not in index:
                connect(there)
                low[node] = min(low[node], low[there])
            elif there in on_stack:
                low[node] = min(low[node], index[there])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def layers(graph: dict[str, set[str]]) -> int:
    """The longest chain of arrows + 1, each import cycle counted as one node."""
    of = {m: min(c) for c in cycles(graph) for m in c}  # a cycle's members -> one node
    condensed: dict[str, set[str]] = defaultdict(set)
    for node, targets in graph.items():
        condensed[of.get(node, node)] |= {of.get(t, t) for t in targets} - {of.get(node, node)}
    depth: dict[str, int] = {}

    def walk(node: str) -> int:
        if node not in depth:
            depth[node] = 1 + max((walk(n) for n in condensed.get(node, ())), default=0)
        return depth[node]

    return max((walk(n) for n in list(condensed)), default=0)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def signatures(limit: int = WIDE) -> list[tuple[int, str]]:
    """(parameter count, 'file:line name') of every function wider than `limit`."""
    out = []
    for path in _files():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = len(_params(node))
                if n > limit:
                    out.append((n, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(out, key=lambda x: (-x[0], x[1]))


def walk(name: str) -> dict[str, object]:
    """Where a setting travels: the files that name it (as a variable, attribute, parameter or
    keyword) and the function signatures that take it as a parameter (the hops)."""
    files: dict[str, int] = {}
    hops: list[str] = []
    for path in _files():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        uses = 0
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == name or \
                    isinstance(node, ast.Attribute) and node.attr == name or \
                    isinstance(node, ast.keyword) and node.arg == name:
                uses += 1
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and \
                    name in _params(node):
                uses += 1
                hops.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
        if uses:
            files[str(path.relative_to(ROOT))] = uses
    return {"files": len(files), "hops": len(hops), "uses": files, "signatures": hops}


def report() -> dict[str, object]:
    graph = stage_graph()
    modules = module_graph()
    # the command line: one module, or a package of them (all its files counted)
    cli = [PACKAGE / "cli.py"] if (PACKAGE / "cli.py").exists() else \
        sorted((PACKAGE / "cli").glob("*.py"))
    cli_lines = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in cli}
    return {
        "stages": len(graph),
        "modules": len(_files()),
        "arrows": sum(len(v) for v in graph.values()),
        "layers": layers(graph),
        "module_arrows": sum(len(v) for v in modules.values()),
        "module_layers": layers(modules),
        "cycles": cycles(modules),
        "flat_modules": sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"),
        "cli_lines": sum(cli_lines.values()),
        "cli_files": len(cli_lines),
        "cli_largest": max(cli_lines.values()),
        "wide_signatures": [{"params": n, "where": w} for n, w in signatures()],
        "near_tie": walk("near_tie"),
        "drafting": walk("drafting"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    r = report()
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"stages (first-level modules and folders): {r['stages']}; .py files: {r['modules']}")
    print(f"import arrows between stages: {r['arrows']}; import layers: {r['layers']}")
    print(f"import arrows between modules: {r['module_arrows']}; module layers: "
          f"{r['module_layers']}")
    found = r["cycles"]
    assert isinstance(found, list)
    print(f"import cycles between modules (each counted as one node in the layers): "
          f"{len(found)}")
    for c in found:
        print(f"  {' <-> '.join(c)}")
    flat = r["flat_modules"]
    assert isinstance(flat, list)
    print(f"modules flat in difftest/: {len(flat)} ({', '.join(flat)})")
    print(f"cli lines: {r['cli_lines']} in {r['cli_files']} file(s), the largest "
          f"{r['cli_largest']}")
    wide = r["wide_signatures"]
    assert isinstance(wide, list)
    print(f"functions with more than {WIDE} parameters: {len(wide)}")
    for w in wide:
        print(f"  {w['params']:3d}  {w['where']}")
    for key in ("near_tie", "drafting"):
        w = r[key]
        assert isinstance(w, dict)
        print(f"{key}: named in {w['files']} files; taken as a parameter by {w['hops']} "
              "signatures")
        for f, n in w["uses"].items():
            print(f"  {n:3d}  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
