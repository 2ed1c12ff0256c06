"""`difftest compare`, `export` and `explain`: one comparison judged (arms run, two traces read,
or a past run judged again), its report on stdout and in files, or why its verdict is what it is."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept

if TYPE_CHECKING:
    from difftest.flow.evaluate import ComparisonReport


def _print(report: "ComparisonReport", format: o.CompareFormat, csv: Path | None,
           missing: bool) -> NoReturn:
    """The report on stdout, then the verdict's exit code (2 when a file was not written)."""
    from difftest.report.comparison import render

    if csv is not None and report.comparison is None:
        typer.echo(f"difftest: no CSV written to {csv}: an arm failed, nothing was compared",
                   err=True)
    typer.echo(render(report, format))
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
    _print(report, format, csv, missing)


def export(
    ctx: typer.Context, run_dir: o.RunDir,
    format: o.CompareFormatOpt = o.CompareFormat.table, csv: o.Csv = None, html: o.Html = None,
    expect: o.Expect = None, near_tie: o.NearTie = None, atol: o.Atol = None,
    min_differing: o.MinDiffering = None, drafting: o.Drafting = None, rtol: o.Rtol = None,
    comparison: o.RunComparison = None,
) -> None:
    """Re-judge and re-export a past run (other thresholds welcome); nothing is re-run."""
    from difftest import api
    from difftest.flow.overrides import Overrides

    report, missing = kept(lambda: api.rejudge(
        run_dir, comparison=comparison, overrides=o.record(Overrides, ctx.params),
        outputs=api.Outputs(csv, html)))
    _print(report, format, csv, missing)


def explain(run_dir: o.RunDir, comparison: o.RunComparison = None) -> None:
    """Print why a past run's verdict is what it is: each instrument's finding, the one that
    decides, and its reasons (judged again as `export` does; nothing is re-run)."""
    from difftest import api
    from difftest.report.headline import verdict_tree

    report = api.rejudge(run_dir, comparison=comparison)
    typer.echo("\n".join(verdict_tree(report.name, report.verdict)))
    done(report.exit_code)
