"""The `difftest` command line: option parsing and printing over the library API.

Nothing heavy is imported at module level, so `difftest --help` starts without numpy, pandas or
torch. Every command runs through `_guarded`, the one place where errors become exit codes.
"""

from __future__ import annotations

import functools
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer

from difftest.errors import DifftestError, ExitCode

app = typer.Typer(
    name="difftest",
    help="Compare what two arms of a speculative-decoding runner drafted, and prove the "
         "comparison could have failed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])


def _guarded(fn: F) -> F:
    """Turn difftest errors into a one-line message and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DifftestError as exc:
            typer.echo(f"difftest: error: {exc}", err=True)
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt:
            typer.echo("difftest: interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


class ParseFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class ReportFormat(str, Enum):
    table = "table"
    json = "json"


def _thresholds(config: Optional[Path], min_distinct_ids: Optional[int],
                min_entropy_bits: Optional[float], max_blind_radius: Optional[float]):  # noqa: ANN202
    """Audit thresholds: defaults, then the config's [audit] table, then flags."""
    from dataclasses import replace

    from difftest.audit import AuditThresholds

    th = AuditThresholds()
    if config is not None:
        from difftest.config import load_config

        th = load_config(config).audit
    overrides = {k: v for k, v in (("min_distinct_ids", min_distinct_ids),
                                   ("min_entropy_bits", min_entropy_bits),
                                   ("max_blind_radius", max_blind_radius)) if v is not None}
    return replace(th, **overrides)


@app.command()
@_guarded
def parse(
    file: Path = typer.Argument(..., help="A captured trace (the runner's stderr)."),
    format: ParseFormat = typer.Option(ParseFormat.table, "--format", "-f"),
) -> None:
    """Print the parsed events of one trace, and the findings on its lines."""
    from difftest.report import events
    from difftest.trace import parse_trace

    trace = parse_trace(file)
    if format is ParseFormat.json:
        typer.echo(events.render_json(trace))
    elif format is ParseFormat.csv:
        for chunk in events.iter_csv(trace):
            sys.stdout.write(chunk)
    else:
        typer.echo(events.render_table(trace))


@app.command()
@_guarded
def audit(
    file: Path = typer.Argument(..., help="A captured trace (the runner's stderr)."),
    format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f"),
    config: Optional[Path] = typer.Option(None, "--config", help="Take thresholds from [audit]."),
    min_distinct_ids: Optional[int] = typer.Option(None, min=1),
    min_entropy_bits: Optional[float] = typer.Option(None, min=0.0),
    max_blind_radius: Optional[float] = typer.Option(None, min=0.0),
) -> None:
    """Say whether a trace could ever fail a comparison: exit 0 informative, 3 uninformative."""
    from difftest.audit import audit_trace
    from difftest.report import audit_report
    from difftest.trace import parse_trace

    th = _thresholds(config, min_distinct_ids, min_entropy_bits, max_blind_radius)
    trace = parse_trace(file)
    result = audit_trace(trace, th)
    if format is ReportFormat.json:
        typer.echo(audit_report.render_json(result, trace))
    else:
        typer.echo(audit_report.render_table(result, trace))
    raise typer.Exit(int(ExitCode.OK if result.informative else ExitCode.UNINFORMATIVE))


def main() -> None:
    app()
