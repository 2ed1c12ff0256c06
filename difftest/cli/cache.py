"""`difftest cache list|prune`: the checkouts of git refs difftest keeps."""

from pathlib import Path
from typing import Annotated

import typer

from difftest.cli import options as o

Cache = Annotated[Path | None, typer.Option(
    "--cache", help="Cache folder (default: the config's [defaults] cache, else "
    "$DIFFTEST_CACHE, else ~/.cache/difftest).")]


def cache_list(cache: Cache = None, config: o.ConfigOpt = None) -> None:
    """Every checkout difftest keeps: repository, commit, build recipe, size, last use."""
    from difftest import api
    from difftest.report import cache_report

    where, entries = api.cache_list(cache, config)
    typer.echo(cache_report.render_table(entries, where))


def cache_prune(
    older_than: Annotated[float, typer.Option(
        "--older-than", min=0.0, help="Remove checkouts unused for this many days.")] = 14.0,
    all_: Annotated[bool, typer.Option(
        "--all", help="Remove every checkout not in use right now.")] = False,
    cache: Cache = None, config: o.ConfigOpt = None,
) -> None:
    """Remove broken checkouts and those unused for a while (only ones difftest made)."""
    from difftest import api
    from difftest.report import cache_report

    typer.echo(cache_report.render_pruned(
        api.cache_prune(cache, config, older_than=0.0 if all_ else older_than)))
