"""The command line's option groups: the override options are declared once and build one
`Overrides`, offered by `compare` and `export` alike; run options build one `RunOptions`; each
record is built from the command's parameters by its own fields (`options.record`)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import typer

from difftest import cli
from difftest.cli.options import record
from difftest.flow.overrides import Overrides, RunOptions


def _params(name: str) -> dict[str, Any]:
    """The click parameters typer made of a command (typer may vendor its own click)."""
    command: Any = typer.main.get_command(cli.app)
    return {p.name: p for p in command.commands[name].params if p.name is not None}


def test_compare_offers_every_override_and_export_those_a_past_run_can_take() -> None:
    every = {f.name for f in fields(Overrides)}
    assert every <= set(_params("compare"))
    assert every - {"noise_runs", "teacher_force"} <= set(_params("export"))
    assert not {"noise_runs", "teacher_force"} & set(_params("export"))
    # the option objects are one declaration, not two copies that could drift apart
    for name in every - {"noise_runs", "teacher_force"}:
        assert _params("compare")[name].opts == _params("export")[name].opts
        assert _params("compare")[name].help == _params("export")[name].help


def test_a_group_is_one_record_built_from_the_commands_parameters() -> None:
    params = {"arm_a": "a", "atol": 0.5, "near_tie": None, "teacher_force": True, "jobs": 2,
              "run_root": None, "progress": None, "format": "table"}
    assert record(Overrides, params) == Overrides(atol=0.5, teacher_force=True)
    assert record(RunOptions, params) == RunOptions(jobs=2)
    # a flag left off is no override (the configured value stands), not `False`
    assert record(Overrides, {"teacher_force": False}) == Overrides()


def test_only_compare_offers_until_decided() -> None:
    """Sequential stopping runs for one comparison (`compare`); a command that would take the
    option and ignore it would print a fixed-sample verdict under a sequential promise."""
    assert "until_decided" in _params("compare")
    for name in ("check", "probe", "noise", "export", "bisect"):
        assert "until_decided" not in _params(name), name


def test_the_command_line_stays_thin() -> None:
    """difftest/cli/: no file over 200 lines, nothing typed `Any`, and every command registered
    as written (no wrapper around it): what a command raises is said once, by the command
    group (`errors.Group.main`)."""
    import ast
    from pathlib import Path

    folder = Path(cli.__file__).parent
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 200, f"{path.name}: over 200 lines"
        names = {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
        assert "Any" not in names, f"{path.name}: something typed Any"
    groups = [cli.app, *(g.typer_instance for g in cli.app.registered_groups)]
    for group in groups:
        assert group is not None
        for command in group.registered_commands:
            assert command.callback is not None
            assert not hasattr(command.callback, "__wrapped__"), command.callback
            assert command.callback.__module__.startswith("difftest.cli."), command.callback
