"""The command line's option groups: the override options are declared once and build one
`Overrides`, offered by `compare` and `export` alike; run options build one `RunOptions`."""

from __future__ import annotations

import inspect
from dataclasses import fields

from typing import Any

import typer

from difftest import cli
from difftest.flow.plan import RunOptions
from difftest.flow.overrides import Overrides


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


def test_a_group_hands_the_command_one_record() -> None:
    seen: list[object] = []

    @cli._grouped(cli.OVERRIDES, cli.RUN_OPTIONS)
    def command(name: str = "", overrides: object = None, options: object = None) -> None:
        seen.extend([name, overrides, options])

    params = inspect.signature(command).parameters
    assert "overrides" not in params and {"atol", "near_tie", "run_root", "jobs"} <= set(params)
    command(name="x", **{p: v.default for p, v in params.items() if p != "name"} | {
        "atol": 0.5, "teacher_force": True, "jobs": 2})
    assert seen == ["x", Overrides(atol=0.5, teacher_force=True), RunOptions(jobs=2)]


def test_only_compare_offers_until_decided() -> None:
    """Sequential stopping runs for one comparison (`compare`); a command that would take the
    option and ignore it would print a fixed-sample verdict under a sequential promise."""
    assert "until_decided" in _params("compare")
    for name in ("check", "probe", "noise", "export", "bisect"):
        assert "until_decided" not in _params(name), name
