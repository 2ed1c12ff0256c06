"""`difftest probe`: arm B broken on purpose, to check that the comparison notices."""

from __future__ import annotations

from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept


def probe(
    arm_a: o.ArmA = None,
    arm_b: Annotated[str | None, typer.Option(
        "--arm-b", help="Arm name from the config: the one broken on purpose.")] = None,
    comparison: o.ComparisonOpt = None,
    mutation: Annotated[list[str] | None, typer.Option(
        "--mutation", "-m", help="Repeatable; default: the comparison's mutations, else the "
                                 "built-ins.")] = None,
    config: o.ConfigOpt = None,
    format: o.ReportFormatOpt = o.ReportFormat.table,
    run_root: o.RunRoot = None,
    progress: o.Progress = None,
) -> None:
    """Break arm B on purpose and check that the comparison notices: exit 0 when every
    mutation was killed, 3 when any survived."""
    from difftest import api
    from difftest.core.jsonout import dumps
    from difftest.report import gate_report

    result, missing = kept(lambda: api.probe(arm_a, arm_b, comparison=comparison,
                                             mutations=mutation, config=config,
                                             run_root=run_root, progress=progress))
    typer.echo(dumps(gate_report.probe_dict(result)) if format is o.ReportFormat.json
               else gate_report.probe_table(result))
    done(result.exit_code, missing)
