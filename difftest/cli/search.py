"""The commands that search for where a comparison starts to fail: `bisect` (the first commit)
and `localize` (the first draft-forward module whose output differs between the arms)."""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept


class BisectMode(str, Enum):  # noqa: UP042 - typer needs a str mixin it recognises
    within = "within"
    against = "against"


def bisect(
    ctx: typer.Context, comparison: o.ComparisonOpt = None,
    good: Annotated[str | None, typer.Option(
        "--good", help="A commit where the comparison passes (an ancestor of --bad).")] = None,
    bad: Annotated[str | None, typer.Option(
        "--bad", help="A commit where the comparison fails.")] = None,
    mode: Annotated[BisectMode, typer.Option(
        "--mode", help="within: both arms run at each tested commit; against: arm A stays at "
                       "--good (or --baseline) and arm B runs at each tested commit.")
    ] = BisectMode.within,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="With --mode against: this configured arm, run as configured, "
                           "replaces arm A.")] = None,
    repo: Annotated[Path | None, typer.Option(
        "--repo", help="The repository to bisect (default: the arms' repo, else the one "
                       "around the current directory).")] = None,
    flake_rate: Annotated[float, typer.Option(
        "--flake-rate", help="Largest chance that one run reads wrong; 0 (deterministic arms) "
                             "runs each commit once, above 0 each commit gets a sequential "
                             "test over repeated runs.")] = 0.0,
    error_rate: Annotated[float, typer.Option(
        "--error-rate", help="Largest chance that the bisect is misled by a wrong decision "
                             "(with --flake-rate); split over the decisions a bisect of this "
                             "length makes.")] = 0.01,
    max_runs: Annotated[int, typer.Option(
        "--max-runs", help="Runs at one commit before it counts as undecided (skipped).")
    ] = 15,
    jobs: Annotated[int | None, o.jobs("Commits tested at once (multisection), each with its "
                                       "arms, locally or through the arms' launcher.")] = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Continue the bisect in this directory; runs already logged are not "
                         "run again.")] = None,
    config: o.ConfigOpt = None, format: o.CompareFormatOpt = o.CompareFormat.table,
    run_root: o.RunRoot = None, progress: o.Progress = None,
) -> None:
    """Find the first commit at which a comparison fails: exit 0 when a commit (or a range
    bounded by unjudgeable commits) is found, 3 when the ends are not confirmed (the good end
    fails or the bad end passes), 2 on an error."""
    from difftest import api
    from difftest.flow.overrides import RunOptions
    from difftest.report import bisect_report

    result = api.bisect(comparison, good=good, bad=bad, mode=mode.value, baseline=baseline,
                        repo=repo, flake_rate=flake_rate, error_rate=error_rate,
                        max_runs=max_runs, resume=resume, config=config,
                        options=o.record(RunOptions, ctx.params))
    typer.echo(bisect_report.render(result, format))
    done(result.exit_code)


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
    comparison: o.RunComparison = None,
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

    result, missing = kept(lambda: api.localize(run_dir, at=at, dumps=dumps, atol=atol,
                                                comparison=comparison, baseline=baseline,
                                                config=config))
    typer.echo(result.console())
    done(result.exit_code, missing)
