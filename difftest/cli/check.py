"""`difftest check`: every configured comparison and the probes they require (the gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept


def check(
    ctx: typer.Context, config: o.ConfigOpt = None,
    only: Annotated[list[str] | None, typer.Option(
        "--only", help="Only this comparison (repeatable).")] = None,
    junit: Annotated[Path | None, o.output("--junit", "Write JUnit XML here.")] = None,
    markdown: Annotated[Path | None, o.output(
        "--markdown", "Write a markdown summary here (for a pull-request comment).")] = None,
    html: Annotated[Path | None, o.output(
        "--html", "Write the HTML report here too (the run directory gets check.html).")
    ] = None,
    format: o.ReportFormatOpt = o.ReportFormat.table,
    no_probes: Annotated[bool, typer.Option(
        "--no-probes", help="Skip the probes comparisons require.")] = False,
    run_root: o.RunRoot = None, progress: o.Progress = None, jobs: o.Jobs = None,
) -> None:
    """Run every configured comparison (and the probes they require): the pre-merge gate.

    With `sweep = true` in the config's [check] table, each comparison whose toggle is about
    some state is also swept (as `difftest sweep` does) within `sweep_budget_s` seconds.

    Exit code: the worst of the comparisons', probes' and sweeps', by severity arm-failed (4) >
    usage (2: a probe whose mutation never reached the runner, NOT-APPLIED) > differ (1) >
    uninformative (3) > agree (0).
    """
    from difftest import api
    from difftest.flow.plan import RunOptions
    from difftest.report import gate_report

    result, missing = kept(lambda: api.check(
        config, only=only, probes=not no_probes, junit=junit, markdown=markdown, html=html,
        options=o.record(RunOptions, ctx.params)))
    typer.echo(gate_report.render_check_json(result) if format is o.ReportFormat.json
               else gate_report.check_lines(result))
    done(result.exit_code, missing)
