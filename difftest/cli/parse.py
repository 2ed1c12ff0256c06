"""`difftest parse`: one trace's parsed events, and the findings on its lines."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.core.errors import UsageError


def parse(
    file: o.TraceFile,
    format: Annotated[o.ParseFormat, typer.Option(
        "--format", "-f", help="Output: a table of events, JSON, or CSV.")] = o.ParseFormat.table,
    rows: Annotated[str, typer.Option(
        "--rows", help="Events the table shows: a number, or 'all'. JSON and CSV always hold "
                       "every event.")] = "40",
    line_prefix: o.LinePrefix = None,
) -> None:
    """Print the parsed events of one trace, and the findings on its lines."""
    from difftest import api
    from difftest.report import events

    limit = None if rows == "all" else int(rows) if rows.isdigit() else -1
    if limit is not None and limit < 0:
        raise UsageError(f"--rows: expected a number or 'all', got {rows!r}")
    trace = api.parse(file, line_prefix=line_prefix)
    if format is o.ParseFormat.json:
        events.write_json(trace, sys.stdout)
    elif format is o.ParseFormat.csv:
        events.write_csv(trace, sys.stdout)
    else:
        events.write_table(trace, sys.stdout, limit)
    sys.stdout.flush()
