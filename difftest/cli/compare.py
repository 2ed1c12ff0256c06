"""`difftest compare` and `difftest export`: one comparison judged (arms run, two traces read,
or a past run judged again), and its report on stdout and in files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept

if TYPE_CHECKING:
    from difftest.flow.evaluate import ComparisonReport


def emit_report(report: ComparisonReport, format: o.CompareFormat, csv: Path | None,
                missing: bool) -> None:
    """The report on stdout in `format`, and the verdict's exit code (2 when a file it was to
    write was not written)."""
    from difftest.report import comparison as render

    if csv is not None and report.comparison is None:
        typer.echo(f"difftest: no CSV written to {csv}: an arm failed, nothing was "
                   "compared", err=True)
    if format is o.CompareFormat.json:
        typer.echo(render.render_json(report))
    elif format is o.CompareFormat.markdown:
        from difftest.flow.localize import saved_localizations

        typer.echo(render.render_markdown(
            report, saved_localizations(report.run_dir) if report.run_dir else ()))
    else:
        typer.echo(render.render_table(report))
    done(report.exit_code, missing)


def compare(
    ctx: typer.Context, arm_a: o.ArmA = None, arm_b: o.ArmB = None,
    trace_a: Annotated[Path | None, typer.Option(
        "--trace-a", help="A captured trace: run nothing.")] = None,
    trace_b: Annotated[Path | None, typer.Option(
        "--trace-b", help="The other captured trace (with --trace-a).")] = None,
    line_prefix: o.LinePrefix = None, comparison: o.ComparisonOpt = None,
    config: o.ConfigOpt = None, format: o.CompareFormatOpt = o.CompareFormat.table,
    csv: o.Csv = None, html: o.Html = None, expect: o.Expect = None, near_tie: o.NearTie = None,
    atol: o.Atol = None, min_differing: o.MinDiffering = None, drafting: o.Drafting = None,
    rtol: o.Rtol = None, noise_runs: o.NoiseRuns = None, teacher_force: o.TeacherForce = False,
    run_root: o.RunRoot = None, progress: o.Progress = None,
    until_decided: o.UntilDecided = None,
) -> None:
    """Run two arms (or read two traces), compare their drafts, and judge the comparison."""
    from difftest import api
    from difftest.flow.overrides import Overrides, RunOptions

    report, missing = kept(lambda: api.compare(
        arm_a, arm_b, traces=api.Traces(trace_a, trace_b, line_prefix), comparison=comparison,
        config=config, overrides=o.record(Overrides, ctx.params),
        options=o.record(RunOptions, ctx.params), outputs=api.Outputs(csv, html)))
    emit_report(report, format, csv, missing)


def export(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A run directory (traces/runs/<run-id>).")],
    format: o.CompareFormatOpt = o.CompareFormat.table, csv: o.Csv = None, html: o.Html = None,
    expect: o.Expect = None, near_tie: o.NearTie = None, atol: o.Atol = None,
    min_differing: o.MinDiffering = None, drafting: o.Drafting = None, rtol: o.Rtol = None,
    comparison: Annotated[str | None, typer.Option(
        "--comparison", "-c", help="Which comparison of a run of several (check, probe, "
                                   "noise): NAME, or NAME/MUTATION for a probed mutation.")
    ] = None,
) -> None:
    """Re-judge and re-export a past run (other thresholds welcome); nothing is re-run."""
    from difftest import api
    from difftest.flow.overrides import Overrides

    report, missing = kept(lambda: api.rejudge(
        run_dir, comparison=comparison, overrides=o.record(Overrides, ctx.params),
        outputs=api.Outputs(csv, html)))
    emit_report(report, format, csv, missing)
