"""No function in the package takes more than eight parameters: settings travel as records
(Overrides, RunOptions, Plan, Ends, Sequential), not one argument each. A `**keywords` bundle
typed by a TypedDict counts as one: it is the API's keyword spelling of a record, converted at
the door. A command of the command line (`difftest/cli/`) is the exception: its parameters are its
options, each declared as an option (`Annotated[..., typer.Option(...)]` or one of the shared
declarations in `difftest.cli.options`), and typer reads them from the signature; the command
turns them into records (`options.record`) before it calls the API."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "difftest"
LIMIT = 8


def _declared_option(arg: ast.arg) -> bool:
    """A parameter declared as a command-line option: `Annotated[...]`, a shared declaration
    `o.NAME` of difftest.cli.options, or typer's context."""
    a = arg.annotation
    if isinstance(a, ast.Subscript) and isinstance(a.value, ast.Name):
        return a.value.id == "Annotated"
    if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name):
        return a.value.id == "o" or (a.value.id == "typer" and a.attr == "Context")
    return False


def _command(path: Path, package: Path, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A command of the command line: in difftest/cli/, every parameter a declared option."""
    if path.relative_to(package).parts[0] != "cli":
        return False
    a = node.args
    return all(_declared_option(x) for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)) and (
        a.vararg is None and a.kwarg is None)


def wide(package: Path = PACKAGE, limit: int = LIMIT) -> list[str]:
    """'file:line name (n)' for every function of the package wider than `limit`."""
    out = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
            n = len([x for x in names if x not in ("self", "cls")])
            if n > limit and not _command(path, package, node):
                out.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.name} ({n})")
    return out


def test_no_function_takes_more_than_eight_parameters() -> None:
    found = wide()
    assert not found, "functions over 8 parameters (pass a record):\n" + "\n".join(found)


def test_the_count_sees_every_kind_of_parameter(tmp_path: Path) -> None:
    """The checker itself: positional-only, keyword-only and starred parameters all count;
    `self` does not."""
    (tmp_path / "m.py").write_text(
        "def f(a, /, b, *c, d, e, f, g, h, **i): pass\n"
        "class K:\n    def m(self, a, b, c, d, e, f, g, h): pass\n")
    assert wide(tmp_path) == [f"{tmp_path.name}/m.py:1 f (9)"]
