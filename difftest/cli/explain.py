"""`difftest explain`: a judged comparison's verdict as a tree of the findings that decided it
(each instrument's demand, and its reasons)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from difftest.cli.errors import done

if TYPE_CHECKING:
    from difftest.analysis.verdict import Verdict


def tree(name: str, verdict: Verdict) -> list[str]:
    """The verdict, then each finding (the one that decides marked) with its reasons' first
    lines under it."""
    out = [f"{name}: {verdict.label} ({verdict.kind.value}, expect {verdict.expect.value})"]
    decides = max(verdict.findings, key=lambda f: f.demand.rank)
    for i, found in enumerate(verdict.findings):
        last = i == len(verdict.findings) - 1
        demand = found.demand.name.lower().replace("_", " ")
        out.append(f"{'`-' if last else '|-'} {found.origin.value}: {demand} -> "
                   f"{found.kind.value}" + (" (decides)" if found is decides else ""))
        for j, reason in enumerate(found.reasons):
            branch = "`-" if j == len(found.reasons) - 1 else "|-"
            out.append(f"{'   ' if last else '|  '}{branch} {reason.splitlines()[0]}")
    return out


def explain(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (traces/runs/<run-id>).")],
    comparison: Annotated[str | None, typer.Option(
        "--comparison", "-c", help="Which comparison of a run of several (check, probe, "
                                   "noise): NAME, or NAME/MUTATION for a probed mutation.")
    ] = None,
) -> None:
    """Print why a past run's verdict is what it is: each instrument's finding, the one that
    decides, and its reasons (judged again as `export` does; nothing is re-run)."""
    from difftest import api

    report = api.rejudge(run_dir, comparison=comparison)
    typer.echo("\n".join(tree(report.name, report.verdict)))
    done(report.exit_code)
