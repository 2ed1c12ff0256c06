"""Every option the commands share, declared once (an `Annotated` type each, or `output` and
`jobs` where only the help differs), and `record`, which builds the record a group of them
stands for (`Overrides`, `RunOptions`) from the command's parameters by the record's own
fields."""

from collections.abc import Mapping
from dataclasses import MISSING, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from typer.models import OptionInfo

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class ParseFormat(str, Enum):  # noqa: UP042 - typer needs a str mixin it recognises
    table = "table"
    json = "json"
    csv = "csv"


class ReportFormat(str, Enum):  # noqa: UP042
    table = "table"
    json = "json"


class CompareFormat(str, Enum):  # noqa: UP042
    table = "table"
    json = "json"
    markdown = "markdown"


def _output_file(text: str) -> Path:
    """A report file option's value (difftest.core.atomic.output_file): a name that ends in a
    separator is refused, not written as a file named like the folder."""
    from difftest.core.atomic import output_file
    from difftest.core.errors import RefusedOutput

    try:
        return output_file(text)
    except RefusedOutput as exc:
        raise typer.BadParameter(str(exc)) from None


def row_limit(value: str | int) -> int | None:
    """`--rows N|all`: how many events a table shows (None: every one); the default comes in
    as the number it is."""
    if isinstance(value, int) or (value.isascii() and value.isdigit()):
        return int(value)
    if value == "all":
        return None
    raise typer.BadParameter(f"expected a number or 'all', got {value!r}")


def output(name: str, help: str) -> OptionInfo:
    """A report file option: its value a path a report may be written to (`_output_file`)."""
    option: OptionInfo = typer.Option(name, help=help, parser=_output_file, metavar="FILE")
    return option


def jobs(help: str) -> OptionInfo:
    """`--jobs/-j N`: how many at once (a run's arms, a bisect's commits), at least 1."""
    option: OptionInfo = typer.Option("--jobs", "-j", min=1, help=help)
    return option


TraceFile = Annotated[Path, typer.Argument(help="A captured trace (the runner's stderr).")]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="Config file (default: ./difftest.toml, else the packaged default).")]
ArmA = Annotated[str | None, typer.Option("--arm-a", help="Arm name from the config.")]
ArmB = Annotated[str | None, typer.Option("--arm-b", help="Arm name from the config.")]
_COMPARISON = typer.Option("--comparison", "-c", help="A configured comparison, by name.")
ComparisonOpt = Annotated[str | None, _COMPARISON]
Comparison = Annotated[str, _COMPARISON]  # a command of one named comparison
RunComparison = Annotated[str | None, typer.Option(
    "--comparison", "-c", help="Which comparison of a run of several (check, probe, noise): "
                               "NAME, or NAME/MUTATION for a probed mutation.")]
RunDir = Annotated[Path, typer.Argument(help="A run directory (traces/runs/<run-id>).")]
LinePrefix = Annotated[str | None, typer.Option(
    "--line-prefix", metavar="REGEX",
    help="A prefix the trace's lines carry besides the known ones (srun -l, [rankN]:, "
         "timestamps, LEVEL name:), as a regular expression matched at each line's start.")]
# how arms run (RunOptions)
RunRoot = Annotated[Path | None, typer.Option(
    "--run-root", help="Where run directories go (traces/runs).")]
Progress = Annotated[bool | None, typer.Option(
    "--progress/--no-progress", help="Show each arm's progress (default: when stderr is a "
                                     "terminal).")]
Jobs = Annotated[int | None, jobs("Arms run at once (default: the CPU count for local arms, "
                                  "[defaults] launched_jobs for arms run through a launcher).")]
UntilDecided = Annotated[int | None, typer.Option(
    "--until-decided", metavar="MAX",
    help="Nondeterministic arms: run both again until a sequential test of B's acceptance "
         "against A's decides at the acceptance gate's max_drop and alpha (beta 0.2), or, "
         "for a sampled comparison, its distribution test decides; at most MAX runs each.")]
# the comparison's rules set over the config's (Overrides): values are checked by the rules a
# config file's values meet, so the command line and the API refuse a bad value in one message
Expect = Annotated[str | None, typer.Option(
    "--expect", metavar="[same|differ]",
    help="What the arms must do: draft the same, or differ (overrides the config).")]
NearTie = Annotated[float | None, typer.Option(
    "--near-tie", help="Logit margin under which a flip is a near-tie (overrides the "
                                "config).")]
Atol = Annotated[float | None, typer.Option(
    "--atol", help="Absolute logit tolerance: |a - b| <= atol + rtol * |b| (overrides the "
                   "config); bitwise only with rtol 0 too: a configured rtol still applies "
                   "unless --rtol 0.")]
Rtol = Annotated[float | None, typer.Option(
    "--rtol", help="Relative logit tolerance: |a - b| <= atol + rtol * |b|.")]
NoiseRuns = Annotated[int | None, typer.Option(
    "--noise-runs", help="Run arm A this many times and judge B against its A/A floor.")]
MinDiffering = Annotated[int | None, typer.Option(
    "--min-differing", help="Differing blocks an `expect = differ` comparison needs "
                                   "(overrides the config).")]
Drafting = Annotated[str | None, typer.Option(
    "--drafting", metavar="[block|sequential]",
    help="How the engine drafts a block: block (rows independent) or sequential "
         "(row j+1 from row j's token). Default: the comparison's, else the "
         "traces' [spec-drafting] header, else block.")]
TeacherForce = Annotated[bool, typer.Option(
    "--teacher-force", help="Run arm B on arm A's committed stream (DIFFTEST_FORCE), so every "
                            "position is compared.")]
# where a comparison's report goes
CompareFormatOpt = Annotated[CompareFormat, typer.Option(
    "--format", "-f", help="Output on stdout: a table, JSON, or markdown.")]
ReportFormatOpt = Annotated[ReportFormat, typer.Option(
    "--format", "-f", help="Output on stdout: a table, or JSON.")]
Csv = Annotated[Path | None, output("--csv", "Write the per-row diff here.")]
Html = Annotated[Path | None, output(
    "--html", "Write the HTML report here too (every run directory gets report.html).")]

T = TypeVar("T", bound="DataclassInstance")


def record(cls: type[T], params: Mapping[str, object]) -> T:
    """The record of `cls` (a dataclass) from the command's parameters of its fields' names;
    a flag not given (False) leaves a field whose default is None unset."""
    given = {f.name: params[f.name] for f in fields(cls) if f.name in params}
    unset = {f.name for f in fields(cls) if f.default is None or f.default is MISSING}
    return cls(**{k: None if v is False and k in unset else v for k, v in given.items()})
