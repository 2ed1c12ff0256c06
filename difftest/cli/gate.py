"""The commands that run configured comparisons as a gate and measure them: `check` (every
comparison and the probes they require), `probe` (arm B broken on purpose), `noise` (one arm's
A/A floor), `calibrate` (thresholds on held-out inputs) and `sweep` (inputs generated to reach
a toggle's state)."""

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
    some state is also swept, as `difftest sweep` does (docs/configuration.md).

    Exit code: the worst of the comparisons', probes' and sweeps', by severity arm-failed (4) >
    usage (2: a probe whose mutation never reached the runner, NOT-APPLIED) > differ (1) >
    uninformative (3) > agree (0).
    """
    from difftest import api
    from difftest.flow.overrides import RunOptions
    from difftest.report import gate_report

    result, missing = kept(lambda: api.check(
        config, only=only, probes=not no_probes, junit=junit, markdown=markdown, html=html,
        options=o.record(RunOptions, ctx.params)))
    typer.echo(gate_report.render_check(result, format))
    done(result.exit_code, missing)


def probe(
    arm_a: o.ArmA = None,
    arm_b: Annotated[str | None, typer.Option(
        "--arm-b", help="Arm name from the config: the one broken on purpose.")] = None,
    comparison: o.ComparisonOpt = None,
    mutation: Annotated[list[str] | None, typer.Option(
        "--mutation", "-m", help="Repeatable; default: the comparison's mutations, else the "
                                 "built-ins.")] = None,
    config: o.ConfigOpt = None, format: o.ReportFormatOpt = o.ReportFormat.table,
    run_root: o.RunRoot = None, progress: o.Progress = None,
) -> None:
    """Break arm B on purpose and check that the comparison notices: exit 0 when every
    mutation was killed, 3 when any survived."""
    from difftest import api
    from difftest.report import gate_report

    result, missing = kept(lambda: api.probe(arm_a, arm_b, comparison=comparison,
                                             mutations=mutation, config=config,
                                             run_root=run_root, progress=progress))
    typer.echo(gate_report.render_probe(result, format))
    done(result.exit_code, missing)


def noise(
    arm: Annotated[str, typer.Option("--arm", help="Arm name from the config.")],
    noise_runs: Annotated[int | None, typer.Option(
        "--noise-runs", min=2, help="How many times to run it (default 3).")] = None,
    config: o.ConfigOpt = None, format: o.ReportFormatOpt = o.ReportFormat.table,
    run_root: o.RunRoot = None, progress: o.Progress = None,
) -> None:
    """Run one arm N times and measure its A/A noise floor (noise.json in the run directory)."""
    from difftest import api
    from difftest.report import noise_report

    report, missing = kept(lambda: api.noise(arm, noise_runs=noise_runs, config=config,
                                             run_root=run_root, progress=progress))
    typer.echo(noise_report.render(report, format))
    done(report.exit_code, missing)


def calibrate(comparison: o.Comparison, config: o.ConfigOpt = None, run_root: o.RunRoot = None,
              progress: o.Progress = None, jobs: o.Jobs = None) -> None:
    """Measure a comparison's thresholds on its held-out calibration_inputs and check that its
    probes still stand out (docs/thresholds.md): exit 0 and write the thresholds file, or 3
    when they cannot be certified (benign and wrong differences overlap, the separation's
    lower bound is below 1, the gate at them fails the benign pair on one of its own inputs,
    or no probe ran)."""
    from difftest import api

    cal = api.calibrate(comparison, config=config, run_root=run_root, progress=progress,
                        jobs=jobs)
    typer.echo("\n".join(cal.summary()))
    done(cal.exit_code)


def sweep(
    comparison: o.Comparison,
    seeds: Annotated[int, typer.Option("--seeds", min=1,
                                       help="Runs of each generated input, seeds 0..N-1.")] = 1,
    config: o.ConfigOpt = None, run_root: o.RunRoot = None, progress: o.Progress = None,
) -> None:
    """Run a comparison over inputs generated to reach what its toggle is about (the README's
    Commands table), and report per state how many inputs exercised it, passed and differed; an
    input whose arguments did not reach an arm is uninformative, named (docs/trace-format.md).

    Exit code, each input judged under the comparison's expect, the worst as check combines
    its comparisons: 1 when an input failed it (differed under same, agreed under differ), 3
    when a state has no input that passed with it exercised (inert and uninformative inputs
    pass nothing), 4 when an arm failed.
    """
    from difftest import api

    result, missing = kept(lambda: api.sweep(comparison, config=config, seeds=seeds,
                                             run_root=run_root, progress=progress))
    typer.echo("\n".join(result.lines()))
    done(result.exit_code, missing)
