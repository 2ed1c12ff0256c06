"""`difftest noise`: one arm run N times, and its A/A noise floor."""

from __future__ import annotations

from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept


def noise(
    arm: Annotated[str, typer.Option("--arm", help="Arm name from the config.")],
    noise_runs: Annotated[int | None, typer.Option(
        "--noise-runs", min=2, help="How many times to run it (default 3).")] = None,
    config: o.ConfigOpt = None,
    format: o.ReportFormatOpt = o.ReportFormat.table,
    run_root: o.RunRoot = None,
    progress: o.Progress = None,
) -> None:
    """Run one arm N times and measure its A/A noise floor (noise.json in the run directory)."""
    from difftest import api
    from difftest.report import noise_report

    report, missing = kept(lambda: api.noise(arm, noise_runs=noise_runs, config=config,
                                             run_root=run_root, progress=progress))
    render = noise_report.render_json if format is o.ReportFormat.json else \
        noise_report.render_table
    typer.echo(render(report))
    done(report.exit_code, missing)
