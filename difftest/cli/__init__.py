"""The `difftest` command line: a file per kind of command, each command one call of
`difftest.api`, then printing and the exit code; shared options are declared once (`options`),
errors said once, by the command group's `main` (`errors.Group`). Nothing heavy is imported at
module level, so `difftest --help` starts without numpy, pandas or torch; and the command
line's annotations are objects, not the strings `from __future__ import annotations` makes:
typer reads every command's at each start, and evaluating strings doubled that (10 ms a start)."""

import sys
from typing import Annotated

import typer

from difftest.cli import cache, compare, gate, search, traces
from difftest.cli.errors import Group

HELP = ("Compare what two arms of a speculative-decoding runner drafted, and prove the "
        "comparison could have failed.")
app = typer.Typer(
    name="difftest", cls=Group, help=HELP, no_args_is_help=True, add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # option help is plain text: `[audit]` stays `[audit]`
    context_settings={"help_option_names": ["-h", "--help"]})
cache_app = typer.Typer(help="The cache of git-ref checkouts (list them, prune them).",
                        no_args_is_help=True)


def _version(value: bool) -> None:
    """--version: the package version, and whether the compiled trace scanner is there."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    from difftest import trace

    try:
        number = version("difftest")
    except PackageNotFoundError:
        number = "(not installed)"
    scanner = ("compiled fast path" if trace.fast_path_available() else
               "pure-Python reader (the compiled fast path is absent)")
    typer.echo(f"difftest {number}\ntrace scanner: {scanner}\npython {sys.version.split()[0]}")
    raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version (and whether the compiled trace scanner is present), then "
             "exit.")] = False,
) -> None:
    """The group's own options (its help is HELP, given to the Typer above)."""


for command in (search.localize, traces.parse, traces.audit, compare.compare, compare.export,
                compare.explain, gate.noise, gate.calibrate, gate.check, gate.probe, gate.sweep,
                search.bisect):
    app.command()(command)
app.add_typer(cache_app, name="cache")
cache_app.command("list")(cache.cache_list)
cache_app.command("prune")(cache.cache_prune)


def main() -> None:
    app()
