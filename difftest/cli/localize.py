"""`difftest localize`: the first draft-forward module whose output differs between the arms."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept


def localize(
    run_dir: Annotated[Path | None, typer.Argument(
        help="A judged run directory: rerun both arms with capture at one step.")] = None,
    at: Annotated[str | None, typer.Option(
        "--at", help="REQ:POS to localise (default: the run's first differing step).")] = None,
    dumps: Annotated[tuple[Path, Path] | None, typer.Option(
        "--dumps", metavar="DIR_A DIR_B",
        help="Two capture folders (DIFFTEST_CAPTURE_DIR) of one step, arm A's then arm B's: "
             "no rerun.")] = None,
    atol: Annotated[float | None, typer.Option(
        "--atol", help="A module differs when some |A - B| exceeds this (default: the run's "
                       "comparison atol; 0 with --dumps).")] = None,
    comparison: Annotated[str | None, typer.Option(
        "--comparison", "-c", help="Which comparison of a run of several (check, probe): "
                                   "NAME, or NAME/MUTATION for a probed mutation.")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", metavar="ARM",
        help="A known-good arm that differs from A only in the harmless change: rerun it too "
             "and name the first module beyond its own background |A - B0| (default: the "
             "comparison's localize_baseline). With --dumps: its capture folder.")] = None,
    config: o.ConfigOpt = None,
) -> None:
    """Name the first draft-forward module whose output differs between the arms, or that
    differs beyond a baseline's (exit 1 when one differs, 0 when all agree; 3 when none does
    on a run whose comparison differed, or the baseline's capture is B's)."""
    from difftest import api
    from difftest.flow.localize import LocalizeReport

    result, missing = kept(lambda: api.localize(run_dir, at=at, dumps=dumps, atol=atol,
                                                comparison=comparison, baseline=baseline,
                                                config=config))
    typer.echo(result.render())
    if not isinstance(result, LocalizeReport):
        typer.echo(f"figure: {result.figure}" + (
            "; the run's report.md and report.html have the section" if result.in_report
            else ""))
    done(result.exit_code, missing)
