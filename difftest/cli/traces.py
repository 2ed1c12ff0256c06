"""The commands that read one captured trace: `parse` (its events, and the findings on its
lines) and `audit` (whether it could ever fail a comparison)."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from difftest.cli import options as o
from difftest.cli.errors import done


def parse(
    file: o.TraceFile,
    format: Annotated[o.ParseFormat, typer.Option(
        "--format", "-f", help="Output: a table of events, JSON, or CSV.")] = o.ParseFormat.table,
    rows: Annotated[int | None, typer.Option(
        "--rows", parser=o.row_limit, metavar="N|all",
        help="Events the table shows: a number, or 'all'. JSON and CSV always hold every "
             "event.")] = 40,
    line_prefix: o.LinePrefix = None,
) -> None:
    """Print the parsed events of one trace, and the findings on its lines."""
    from difftest import api
    from difftest.report import events

    events.write(api.parse(file, line_prefix=line_prefix), sys.stdout, format, rows)
    sys.stdout.flush()


def audit(
    file: o.TraceFile, format: o.ReportFormatOpt = o.ReportFormat.table,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Take thresholds from this config's [audit] table.")] = None,
    min_distinct_ids: Annotated[int | None, typer.Option(
        help="Distinct drafted ids a trace needs to be informative.")] = None,
    min_entropy_bits: Annotated[float | None, typer.Option(
        help="Drafted-id entropy (bits) a trace needs to be informative.")] = None,
    max_blind_radius: Annotated[float | None, typer.Option(
        help="Largest smallest-blind-radius (margin/2) a token comparison may have.")] = None,
    line_prefix: o.LinePrefix = None,
) -> None:
    """Say whether a trace could ever fail a comparison: exit 0 informative, 3 uninformative."""
    from difftest import api
    from difftest.report import audit_report

    result = api.audit(file, config=config, min_distinct_ids=min_distinct_ids,
                       min_entropy_bits=min_entropy_bits, max_blind_radius=max_blind_radius,
                       line_prefix=line_prefix)
    typer.echo(audit_report.render(result.audit, result.trace, format))
    done(result.exit_code)
