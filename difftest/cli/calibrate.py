"""`difftest calibrate`: a comparison's thresholds measured on its held-out inputs."""

from __future__ import annotations

from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done


def calibrate(
    comparison: Annotated[str, typer.Option(
        "--comparison", "-c", help="A configured comparison, by name.")],
    config: o.ConfigOpt = None,
    run_root: o.RunRoot = None,
    progress: o.Progress = None,
    jobs: o.Jobs = None,
) -> None:
    """Measure a comparison's thresholds on its held-out calibration_inputs and check that its
    probes still stand out: exit 0 and write the thresholds file, or 3 when benign and wrong
    differences overlap, the separation's lower bound is below 1 (it says how many inputs
    would reach it; one input never does), the gate at the new thresholds fails the benign
    pair on one of its own inputs (it names the input and why), or no probe ran."""
    from difftest import api

    cal = api.calibrate(comparison, config=config, run_root=run_root, progress=progress,
                        jobs=jobs)
    typer.echo("\n".join(cal.summary()))
    done(cal.exit_code)
