"""`difftest sweep`: a comparison over inputs generated to reach what its toggle is about."""

from __future__ import annotations

from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done, kept


def sweep(
    comparison: Annotated[str, typer.Option("--comparison", "-c",
                                            help="The configured comparison to sweep.")],
    seeds: Annotated[int, typer.Option("--seeds", min=1,
                                       help="Runs of each generated input, seeds 0..N-1.")] = 1,
    config: o.ConfigOpt = None,
    run_root: o.RunRoot = None,
    progress: o.Progress = None,
) -> None:
    """Run a comparison over inputs generated to reach what its toggle is about (lane: prompt
    lengths at page_size*m-1, m, m+1 and several requests with shuffled page tables; widths,
    window edges, shared prefixes for the toggles about them), and report per state how many
    inputs exercised it, passed and differed. The inputs are reference-runner arguments added
    to both arms; an input whose arguments did not reach an arm (its [spec-config] does not
    report the settings they set, or reports others, or its trace reads the same as for
    another input) is uninformative, named. Each input is judged under the comparison's
    expect: exit 1 when an input failed it (differed under same, agreed under differ), 3 when
    a state has no input that passed with it exercised (inert and uninformative inputs pass
    nothing), 4 when an arm failed; the worst of these, as check combines its comparisons."""
    from difftest import api

    result, missing = kept(lambda: api.sweep(comparison, config=config, seeds=seeds,
                                             run_root=run_root, progress=progress))
    typer.echo("\n".join(result.lines()))
    done(result.exit_code, missing)
