"""The `difftest` command line: options declared here, one `difftest.api` call per command,
then printing and the exit code. Nothing here decides what a comparison means.

Nothing heavy is imported at module level, so `difftest --help` starts without numpy, pandas or
torch. Every command runs through `_guarded`, the one place where errors become exit codes.
"""

from __future__ import annotations

import errno
import functools
import inspect
import io
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from typer.core import TyperGroup

from difftest.core.deprecation import one_line_on_stderr
from difftest.core.errors import DifftestError, ExitCode, UsageError

if TYPE_CHECKING:
    from difftest.flow.evaluate import ComparisonReport
    from difftest.flow.plan import RunOptions
    from difftest.flow.overrides import Overrides

class _Group(TyperGroup):
    """The command group with difftest's one error style: every usage error, bad parameter and
    unwritable standard output is `difftest: error: ...` on stderr and exit 2 (exit 1 is for
    "differ" only), without click's usage banner or a traceback."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode,
                                windows_expand_args, **extra)
        cx = _click_exceptions()
        exits: tuple[type[BaseException], ...] = (typer.Exit, *_optional(cx, "Exit"))
        aborts: tuple[type[BaseException], ...] = (typer.Abort, KeyboardInterrupt,
                                                   *_optional(cx, "Abort"))
        try:
            try:
                code = super().main(args, prog_name or "difftest", complete_var, False,
                                    windows_expand_args, **extra)
                sys.stdout.flush()  # a full device or a closed pipe shows here, not at exit
            except exits as exc:
                sys.stdout.flush()
                code = getattr(exc, "exit_code", 0)
        except aborts:
            _die(*_said(KeyboardInterrupt()))
        except Exception as exc:
            if isinstance(exc, cx.NoArgsIsHelpError):
                typer.echo(exc.format_message())  # the help text itself
                sys.exit(int(ExitCode.USAGE))
            if isinstance(exc, cx.UsageError):
                ctx = getattr(exc, "ctx", None)
                where = ctx.command_path if ctx is not None else "difftest"
                _die(f"difftest: error: {exc.format_message()} (see '{where} --help')",
                     ExitCode.USAGE)
            if isinstance(exc, cx.ClickException):
                _die(f"difftest: error: {exc.format_message()}", ExitCode.USAGE)
            if not isinstance(exc, OSError):
                raise
            # standard output: a full disk, a closed pipe
            _quiet_stdout()
            _die(*_said(exc, stdout=True))
        sys.exit(code if isinstance(code, int) else 0)


def _click_exceptions() -> Any:
    """The click exceptions typer raises: its own copy of click where it vendors one (typer
    0.2x no longer depends on click), else click's."""
    import importlib

    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


def _optional(module: Any, name: str) -> tuple[type[BaseException], ...]:
    found = getattr(module, name, None)
    return (found,) if isinstance(found, type) and issubclass(found, BaseException) else ()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


def _die(line: str, code: ExitCode) -> NoReturn:
    try:
        typer.echo(line, err=True)
    except OSError:
        pass
    sys.exit(int(code))


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
    probe: Callable[[], bool] | None = getattr(trace, "fast_path_available", None)
    scanner = ("not built in this version" if probe is None else
               "compiled fast path" if probe() else
               "pure-Python reader (the compiled fast path is absent)")
    typer.echo(f"difftest {number}\ntrace scanner: {scanner}\npython {sys.version.split()[0]}")
    raise typer.Exit(0)


app = typer.Typer(
    name="difftest",
    cls=_Group,
    help="Compare what two arms of a speculative-decoding runner drafted, and prove the "
         "comparison could have failed.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # option help is plain text: `[audit]` stays `[audit]`
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version (and whether the compiled trace scanner is present), then "
             "exit.")] = False,
) -> None:
    """Compare what two arms of a speculative-decoding runner drafted, and prove the
    comparison could have failed."""

P = ParamSpec("P")
R = TypeVar("R")


def _guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn what a command raises into its one line and exit code (`_said`)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        one_line_on_stderr()  # an old config key a command meets says so in one line
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except (Exception, KeyboardInterrupt) as exc:
            if isinstance(exc, OSError) and exc.filename is None and \
                    exc.errno in (errno.EPIPE, errno.ENOSPC, errno.EDQUOT):
                raise  # standard output itself: the command group says so
            line, code = _said(exc)
            typer.echo(line, err=True)
            raise typer.Exit(int(code)) from None

    return wrapper


def _said(exc: BaseException, *, stdout: bool = False) -> tuple[str, ExitCode]:
    """The one translation of an error into its line on stderr and its exit code. Exit 1
    means "differ" and nothing else, so not even a bug in difftest may exit 1. `stdout`: an
    OSError writing standard output (a full disk, a closed pipe)."""
    if isinstance(exc, DifftestError):
        from difftest.report.text import strip_ansi

        return f"difftest: error: {strip_ansi(str(exc))}", exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", 2)  # SIGTERM and SIGHUP outside a run's stages
        code = 128 + signum if isinstance(signum, int) else 130
        what = {1: "hangup (SIGHUP)", 15: "terminated (SIGTERM)"}.get(code - 128, "interrupted")
        return f"difftest: {what}", ExitCode(code) if code in set(ExitCode) else \
            ExitCode.INTERRUPTED
    if isinstance(exc, OSError):
        if stdout:
            where = exc.filename or "standard output"
            return f"difftest: error: cannot write to {where}: {exc.strerror or exc}", \
                ExitCode.USAGE
        return f"difftest: error: {_os_error(exc)}", ExitCode.USAGE
    if isinstance(exc, RecursionError):
        return "difftest: error: input nested too deep", ExitCode.USAGE
    if os.environ.get("DIFFTEST_TRACEBACK"):
        # the traceback is shown, the exit code stays the one for errors
        return "".join(traceback.format_exception(exc)).rstrip(), ExitCode.USAGE
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return (f"difftest: error: internal error {type(exc).__name__}: {exc} (at "
            f"{Path(frame.filename).name}:{frame.lineno}); a bug in difftest, please report it "
            "with the input that caused it (DIFFTEST_TRACEBACK=1 shows the traceback)",
            ExitCode.USAGE)


def _os_error(exc: OSError) -> str:
    """A filesystem failure in words: which file, and why (a full disk is named as such)."""
    where = f"{exc.filename}: " if exc.filename is not None else ""
    if exc.errno == errno.ENOSPC:
        return f"{where}the disk is full (no space left on device)"
    return f"{where}{exc.strerror or exc}"


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


TraceFile = Annotated[Path, typer.Argument(help="A captured trace (the runner's stderr).")]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="Config file (default: ./difftest.toml, else the packaged default).")]
RunRoot = Annotated[Path | None, typer.Option(
    "--run-root", help="Where run directories go (traces/runs).")]
Progress = Annotated[bool | None, typer.Option(
    "--progress/--no-progress", help="Show each arm's progress (default: when stderr is a "
                                     "terminal).")]
# Override values are checked by the rules a config file's values meet (difftest.config), in
# the API the command calls: the command line and the API refuse a bad value in one message.
ExpectOpt = Annotated[str | None, typer.Option(
    "--expect", metavar="[same|differ]",
    help="What the arms must do: draft the same, or differ (overrides the config).")]
NearTie = Annotated[float | None, typer.Option(
    "--near-tie", help="Logit margin under which a flip is a near-tie (overrides the "
                                "config).")]
Atol = Annotated[float | None, typer.Option(
    "--atol", help="Logit tolerance; 0 compares bitwise (overrides the config).")]
Rtol = Annotated[float | None, typer.Option(
    "--rtol", help="Relative logit tolerance: |a - b| <= atol + rtol * |b|.")]
NoiseRuns = Annotated[int | None, typer.Option(
    "--noise-runs", help="Run arm A this many times and judge B against its A/A floor.")]
MinDiffering = Annotated[int | None, typer.Option(
    "--min-differing", help="Differing blocks an `expect = differ` comparison needs "
                                   "(overrides the config).")]
DraftingOpt = Annotated[str | None, typer.Option(
    "--drafting", metavar="[block|sequential]",
    help="How the engine drafts a block: block (rows independent) or sequential "
         "(row j+1 from row j's token). Default: the comparison's, else the "
         "traces' [spec-drafting] header, else block.")]
TeacherForce = Annotated[bool, typer.Option(
    "--teacher-force", help="Run arm B on arm A's committed stream (DIFFTEST_FORCE), so every "
                            "position is compared.")]
Jobs = Annotated[int | None, typer.Option(
    "--jobs", "-j", min=1, help="Arms run at once (default: the CPU count for local arms, "
    "[defaults] launched_jobs for arms run through a launcher).")]
UntilDecided = Annotated[int | None, typer.Option(
    "--until-decided", metavar="MAX",
    help="Nondeterministic arms: run both again until a sequential test of B's acceptance "
         "against A's decides at the acceptance gate's max_drop and alpha (beta 0.2), at "
         "most MAX runs each.")]
CompareFormatOpt = Annotated[CompareFormat, typer.Option(
    "--format", "-f", help="Output on stdout: a table, JSON, or markdown.")]
def _output_file(text: str) -> Path:
    """A report file option's value (difftest.core.atomic.output_file): a name that ends in a
    separator is refused, not written as a file named like the folder."""
    from difftest.core.atomic import output_file
    from difftest.core.errors import RefusedOutput

    try:
        return output_file(text)
    except RefusedOutput as exc:
        raise typer.BadParameter(str(exc)) from None


def _output_option(name: str, help: str) -> Any:
    return typer.Option(name, help=help, parser=_output_file, metavar="FILE")


CsvOpt = Annotated[Path | None, _output_option("--csv", "Write the per-row diff here.")]
HtmlOpt = Annotated[Path | None, _output_option(
    "--html", "Write the HTML report here too (every run directory gets report.html).")]
ReportFormatOpt = Annotated[ReportFormat, typer.Option(
    "--format", "-f", help="Output on stdout: a table, or JSON.")]
LinePrefixOpt = Annotated[str | None, typer.Option(
    "--line-prefix", metavar="REGEX",
    help="A prefix the trace's lines carry besides the known ones (srun -l, [rankN]:, "
         "timestamps, LEVEL name:), as a regular expression matched at each line's start.")]
ComparisonOpt = Annotated[str | None, typer.Option(
    "--comparison", "-c", help="A configured comparison, by name.")]



@dataclass(frozen=True)
class _OptionGroup:
    """Options that build one record (as argument groups build one object): declared once,
    offered by every command that takes the record, and handed to it whole."""

    param: str  # the command's parameter that receives the record
    options: tuple[inspect.Parameter, ...]
    build: Callable[..., Any]

    def only(self, *names: str) -> _OptionGroup:
        """The group with these of its options (the rest left at their defaults)."""
        return replace(self, options=tuple(o for o in self.options if o.name in names))


def _option(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def _grouped(*groups: _OptionGroup) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Offer each group's options in place of the command's parameter of the group's name,
    and call the command with the record the group builds from them."""

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        params: list[inspect.Parameter] = []
        for p in inspect.signature(fn, eval_str=True).parameters.values():
            group = next((g for g in groups if g.param == p.name), None)
            params += group.options if group is not None else [p]

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> R:
            for g in groups:
                given = {o.name: kwargs.pop(o.name) for o in g.options}
                kwargs[g.param] = g.build(**given)
            return fn(**kwargs)

        wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params])
        return wrapper

    return decorate


def _overrides(**given: Any) -> Overrides:
    from difftest.flow.overrides import Overrides

    return Overrides(**given)


def _run_options(**given: Any) -> RunOptions:
    from difftest.flow.plan import RunOptions

    return RunOptions(**given)


# One group, one record: the comparison values set over the config's (difftest.flow.overrides), and
# how the arms run (difftest.flow.plan.RunOptions).
OVERRIDES = _OptionGroup("overrides", (
    _option("expect", ExpectOpt), _option("near_tie", NearTie), _option("atol", Atol),
    _option("min_differing", MinDiffering), _option("drafting", DraftingOpt),
    _option("rtol", Rtol), _option("noise_runs", NoiseRuns),
    _option("teacher_force", TeacherForce, False)),
    lambda teacher_force=None, **given: _overrides(teacher_force=teacher_force or None, **given))
RUN_OPTIONS = _OptionGroup("options", (
    _option("run_root", RunRoot), _option("progress", Progress), _option("jobs", Jobs),
    _option("until_decided", UntilDecided)), _run_options)


@dataclass(frozen=True)
class _Outputs:
    """Where a comparison's report goes: stdout in one format, and files beside it."""

    format: CompareFormat = CompareFormat.table
    csv: Path | None = None
    html: Path | None = None


OUTPUTS = _OptionGroup("outputs", (
    _option("format", CompareFormatOpt, CompareFormat.table), _option("csv", CsvOpt),
    _option("html", HtmlOpt)), _Outputs)


@app.command()
@_guarded
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
    comparison: Annotated[str | None, typer.Option(
        "--comparison", "-c", help="Which comparison of a run of several (check, probe): "
                                   "NAME, or NAME/MUTATION for a probed mutation.")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", metavar="ARM",
        help="A known-good arm that differs from A only in the harmless change: rerun it too "
             "and name the first module beyond its own background |A - B0| (default: the "
             "comparison's localize_baseline). With --dumps: its capture folder.")] = None,
    config: ConfigOpt = None,
) -> None:
    """Name the first draft-forward module whose output differs between the arms, or that
    differs beyond a baseline's (exit 1 when one differs, 0 when all agree)."""
    from difftest.flow import localize as loc

    if (run_dir is None) == (dumps is None):
        raise UsageError("give a RUN_DIR or --dumps A B, not both, not neither")
    if dumps is not None:
        given = [name for name, value in (("--at", at), ("--comparison", comparison))
                 if value is not None]
        if given:
            verb, they = ("pick", "they need") if len(given) > 1 else ("picks", "it needs")
            raise UsageError(f"{' and '.join(given)} {verb} what to rerun in a run: {they} a "
                             "RUN_DIR, not --dumps")
        if config is not None:
            raise UsageError("--config names where the baseline arm is defined: it needs a "
                             "RUN_DIR, not --dumps")
        report = loc.localize_dumps(dumps[0], dumps[1], atol or 0.0,
                                    Path(baseline) if baseline is not None else None)
        typer.echo(report.render())
        raise typer.Exit(int(report.exit_code))
    assert run_dir is not None
    from difftest.report.outputs import write_localization

    result = loc.localize_run(run_dir, loc.parse_at(at) if at is not None else None, atol,
                              comparison, baseline, config)
    figure, missing = _kept(lambda: write_localization(result))
    typer.echo(result.render())
    typer.echo(f"figure: {figure}" + ("; the run's report.md and report.html have the section"
                                      if result.in_report else ""))
    _exit(result.exit_code, missing)


@app.command()
@_guarded
def parse(
    file: TraceFile,
    format: Annotated[ParseFormat, typer.Option(
        "--format", "-f", help="Output: a table of events, JSON, or CSV.")] = ParseFormat.table,
    rows: Annotated[str, typer.Option(
        "--rows", help="Events the table shows: a number, or 'all'. JSON and CSV always hold "
                       "every event.")] = "40",
    line_prefix: LinePrefixOpt = None,
) -> None:
    """Print the parsed events of one trace, and the findings on its lines."""
    from difftest import api
    from difftest.report import events

    limit = None if rows == "all" else int(rows) if rows.isdigit() else -1
    if limit is not None and limit < 0:
        raise UsageError(f"--rows: expected a number or 'all', got {rows!r}")
    trace = api.parse(file, line_prefix=line_prefix)
    out = sys.stdout
    if format is ParseFormat.json:
        events.write_json(trace, out)
    elif format is ParseFormat.csv:
        events.write_csv(trace, out)
    else:
        events.write_table(trace, out, limit)
    out.flush()


@app.command()
@_guarded
def audit(
    file: TraceFile,
    format: ReportFormatOpt = ReportFormat.table,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Take thresholds from this config's [audit] table.")] = None,
    min_distinct_ids: Annotated[int | None, typer.Option(
        help="Distinct drafted ids a trace needs to be informative.")] = None,
    min_entropy_bits: Annotated[float | None, typer.Option(
        help="Drafted-id entropy (bits) a trace needs to be informative.")] = None,
    max_blind_radius: Annotated[float | None, typer.Option(
        help="Largest smallest-blind-radius (margin/2) a token comparison may have.")] = None,
    line_prefix: LinePrefixOpt = None,
) -> None:
    """Say whether a trace could ever fail a comparison: exit 0 informative, 3 uninformative."""
    from difftest import api
    from difftest.report import audit_report

    result = api.audit(file, config=config, min_distinct_ids=min_distinct_ids,
                       min_entropy_bits=min_entropy_bits, max_blind_radius=max_blind_radius,
                       line_prefix=line_prefix)
    if format is ReportFormat.json:
        typer.echo(audit_report.render_json(result.audit, result.trace))
    else:
        typer.echo(audit_report.render_table(result.audit, result.trace))
    raise typer.Exit(int(result.exit_code))


def _kept(call: Callable[[], R]) -> tuple[R, bool]:
    """What a command produced, and whether some output it was to write was not written (each
    said on stderr): its verdict is still printed, and the command then exits 2."""
    from difftest.report.outputs import NotWritten

    try:
        return call(), False
    except NotWritten as exc:
        for path, why in exc.failures:
            typer.echo(f"difftest: error: {path}: {why}", err=True)
        return exc.result, True  # type: ignore[return-value]


def _exit(code: ExitCode, missing: bool) -> NoReturn:
    """The verdict's exit code, or 2 when an output was not written: exit 1 stays "differ"."""
    raise typer.Exit(int(ExitCode.USAGE if missing else code))


def _emit_report(report: ComparisonReport, outputs: _Outputs, missing: bool = False) -> None:
    from difftest import api
    from difftest.report import comparison as render

    format, csv, html = outputs.format, outputs.csv, outputs.html
    _, unwritten = _kept(lambda: api.write_reports(report, csv=csv, html=html))
    if csv is not None and report.comparison is None:
        typer.echo(f"difftest: no CSV written to {csv}: an arm failed, nothing was "
                   "compared", err=True)
    if format is CompareFormat.json:
        typer.echo(render.render_json(report))
    elif format is CompareFormat.markdown:
        from difftest.flow.localize import saved_localizations

        typer.echo(render.render_markdown(
            report, saved_localizations(report.run_dir) if report.run_dir else ()))
    else:
        typer.echo(render.render_table(report))
    _exit(report.exit_code, missing or unwritten)


def _traces(trace_a: Path | None = None, trace_b: Path | None = None,
            line_prefix: str | None = None) -> Any:
    from difftest.api import Traces

    return Traces(trace_a, trace_b, line_prefix)


TRACES = _OptionGroup("traces", (
    _option("trace_a", Annotated[Path | None, typer.Option(
        "--trace-a", help="A captured trace: run nothing.")]),
    _option("trace_b", Annotated[Path | None, typer.Option(
        "--trace-b", help="The other captured trace (with --trace-a).")]),
    _option("line_prefix", LinePrefixOpt)), _traces)


@app.command()
@_guarded
@_grouped(TRACES, OUTPUTS, OVERRIDES, RUN_OPTIONS.only("run_root", "progress", "until_decided"))
def compare(
    arm_a: Annotated[str | None, typer.Option("--arm-a", help="Arm name from the config.")] = None,
    arm_b: Annotated[str | None, typer.Option("--arm-b", help="Arm name from the config.")] = None,
    traces: Any = None,
    comparison: ComparisonOpt = None,
    config: ConfigOpt = None,
    outputs: Any = None,
    overrides: Any = None,
    options: Any = None,
) -> None:
    """Run two arms (or read two traces), compare their drafts, and judge the comparison."""
    from difftest import api

    api.check_outputs(outputs.csv, outputs.html,
                      reads=[traces.a, traces.b, config or Path("difftest.toml")])
    report, missing = _kept(lambda: api.compare(
        arm_a, arm_b, traces=traces, comparison=comparison, config=config, overrides=overrides,
        options=options))
    _emit_report(report, outputs, missing)


@app.command()
@_guarded
@_grouped(OUTPUTS, OVERRIDES.only("expect", "near_tie", "atol", "min_differing", "rtol",
                                  "drafting"))
def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (traces/runs/<run-id>).")],
    outputs: Any = None,
    overrides: Any = None,
    comparison: Annotated[str | None, typer.Option(
        "--comparison", "-c", help="Which comparison of a run of several (check, probe, "
                                   "noise): NAME, or NAME/MUTATION for a probed mutation.")
    ] = None,
) -> None:
    """Re-judge and re-export a past run (other thresholds welcome); nothing is re-run."""
    from difftest import api

    api.check_outputs(outputs.csv, outputs.html, run_dir=run_dir)
    report = api.rejudge(run_dir, comparison=comparison, overrides=overrides)
    _emit_report(report, outputs)


@app.command()
@_guarded
def noise(
    arm: Annotated[str, typer.Option("--arm", help="Arm name from the config.")],
    noise_runs: Annotated[int | None, typer.Option(
        "--noise-runs", min=2, help="How many times to run it (default 3).")] = None,
    config: ConfigOpt = None,
    format: ReportFormatOpt = ReportFormat.table,
    run_root: RunRoot = None,
    progress: Progress = None,
) -> None:
    """Run one arm N times and measure its A/A noise floor (noise.json in the run directory)."""
    from difftest import api
    from difftest.report import noise_report

    report, missing = _kept(lambda: api.noise(arm, noise_runs=noise_runs, config=config,
                                              run_root=run_root, progress=progress))
    if format is ReportFormat.json:
        typer.echo(noise_report.render_json(report))
    else:
        typer.echo(noise_report.render_table(report))
    _exit(report.exit_code, missing)


@app.command()
@_guarded
def calibrate(
    comparison: Annotated[str, typer.Option(
        "--comparison", "-c", help="A configured comparison, by name.")],
    config: ConfigOpt = None,
    run_root: RunRoot = None,
    progress: Progress = None,
    jobs: Jobs = None,
) -> None:
    """Measure a comparison's thresholds on its held-out calibration_inputs and check that its
    probes still stand out: exit 0 and write the thresholds file, or 3 when benign and wrong
    differences overlap, the separation's lower bound is below 1 (it says how many inputs
    would reach it), or no probe ran."""
    from difftest.flow.calibrate import calibrate as run
    from difftest.config import load_config

    cfg = load_config(config, unread_thresholds=comparison)  # the file it is about to replace
    cal = run(cfg, cfg.comparison(comparison), run_root=run_root, progress=progress, jobs=jobs)
    typer.echo("\n".join(cal.summary()))
    raise typer.Exit(int(cal.exit_code))


@app.command()
@_guarded
@_grouped(RUN_OPTIONS.only("run_root", "progress", "jobs"))
def check(
    config: ConfigOpt = None,
    only: Annotated[list[str] | None, typer.Option(
        "--only", help="Only this comparison (repeatable).")] = None,
    junit: Annotated[Path | None, _output_option("--junit", "Write JUnit XML here.")] = None,
    markdown: Annotated[Path | None, _output_option(
        "--markdown", "Write a markdown summary here (for a pull-request comment).")] = None,
    html: Annotated[Path | None, _output_option(
        "--html", "Write the HTML report here too (the run directory gets check.html).")
    ] = None,
    format: ReportFormatOpt = ReportFormat.table,
    no_probes: Annotated[bool, typer.Option(
        "--no-probes", help="Skip the probes comparisons require.")] = False,
    options: Any = None,
) -> None:
    """Run every configured comparison (and the probes they require): the pre-merge gate.

    Exit code: the worst of the comparisons', by severity arm-failed (4) > differ (1) >
    uninformative (3) > agree (0).
    """
    from difftest import api
    from difftest.report import gate_report

    result, missing = _kept(lambda: api.check(config, only=only, probes=not no_probes,
                                              junit=junit, markdown=markdown, html=html,
                                              options=options))
    if format is ReportFormat.json:
        typer.echo(gate_report.render_check_json(result))
    else:
        typer.echo(gate_report.check_lines(result))
    _exit(result.exit_code, missing)


@app.command()
@_guarded
def probe(
    arm_a: Annotated[str | None, typer.Option("--arm-a", help="Arm name from the config.")] = None,
    arm_b: Annotated[str | None, typer.Option(
        "--arm-b", help="Arm name from the config: the one broken on purpose.")] = None,
    comparison: ComparisonOpt = None,
    mutation: Annotated[list[str] | None, typer.Option(
        "--mutation", "-m", help="Repeatable; default: the comparison's mutations, else the "
                                 "built-ins.")] = None,
    config: ConfigOpt = None,
    format: ReportFormatOpt = ReportFormat.table,
    run_root: RunRoot = None,
    progress: Progress = None,
) -> None:
    """Break arm B on purpose and check that the comparison notices: exit 0 when every
    mutation was killed, 3 when any survived."""
    from difftest import api
    from difftest.core.jsonout import dumps
    from difftest.report import gate_report

    result, missing = _kept(lambda: api.probe(arm_a, arm_b, comparison=comparison,
                                              mutations=mutation, config=config,
                                              run_root=run_root, progress=progress))
    if format is ReportFormat.json:
        typer.echo(dumps(gate_report.probe_dict(result)))
    else:
        typer.echo(gate_report.probe_table(result))
    _exit(result.exit_code, missing)


class BisectMode(str, Enum):  # noqa: UP042
    within = "within"
    against = "against"


ENDS = _OptionGroup("ends", (
    _option("good", Annotated[str | None, typer.Option(
        "--good", help="A commit where the comparison passes (an ancestor of --bad).")]),
    _option("bad", Annotated[str | None, typer.Option(
        "--bad", help="A commit where the comparison fails.")]),
    _option("mode", Annotated[BisectMode, typer.Option(
        "--mode", help="within: both arms run at each tested commit; against: arm A stays at "
                       "--good (or --baseline) and arm B runs at each tested commit.")],
            BisectMode.within),
    _option("baseline", Annotated[str | None, typer.Option(
        "--baseline", help="With --mode against: this configured arm, run as configured, "
                           "replaces arm A.")]),
    _option("repo", Annotated[Path | None, typer.Option(
        "--repo", help="The repository to bisect (default: the arms' repo, else the one "
                       "around the current directory).")])),
    lambda mode, **given: {"mode": mode.value, **given})
SEARCH = _OptionGroup("search", (
    _option("flake_rate", Annotated[float, typer.Option(
        "--flake-rate", help="Largest chance that one run reads wrong; 0 (deterministic arms) "
                             "runs each commit once, above 0 each commit gets a sequential "
                             "test over repeated runs.")], 0.0),
    _option("error_rate", Annotated[float, typer.Option(
        "--error-rate", help="Largest chance that the bisect is misled by a wrong decision "
                             "(with --flake-rate); split over the decisions a bisect of this "
                             "length makes.")], 0.01),
    _option("max_runs", Annotated[int, typer.Option(
        "--max-runs", help="Runs at one commit before it counts as undecided (skipped).")],
            15),
    _option("jobs", Annotated[int | None, typer.Option(
        "--jobs", "-j", min=1, help="Commits tested at once (multisection), each with its "
                                    "arms, locally or through the arms' launcher.")])),
    lambda **given: given)


@app.command()
@_guarded
@_grouped(ENDS, SEARCH, RUN_OPTIONS.only("run_root", "progress"))
def bisect(
    comparison: ComparisonOpt = None,
    ends: Any = None,
    search: Any = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Continue the bisect in this directory; runs already logged are not "
                         "run again.")] = None,
    config: ConfigOpt = None,
    format: CompareFormatOpt = CompareFormat.table,
    options: Any = None,
) -> None:
    """Find the first commit at which a comparison fails: exit 0 when a commit (or a range
    bounded by unjudgeable commits) is found, 3 when the ends are not confirmed (the good end
    fails or the bad end passes), 2 on an error."""
    from difftest import api
    from difftest.report import bisect_report

    result = api.bisect(comparison, config=config, resume=resume,
                        options=replace(options, jobs=search.pop("jobs")), **ends, **search)
    if format is CompareFormat.json:
        typer.echo(bisect_report.render_json(result))
    elif format is CompareFormat.markdown:
        typer.echo(bisect_report.render_markdown(result))
    else:
        typer.echo(bisect_report.render_table(result))
    raise typer.Exit(int(result.exit_code))


cache_app = typer.Typer(help="The cache of git-ref checkouts (list them, prune them).",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")


CacheOpt = Annotated[Path | None, typer.Option(
    "--cache", help="Cache folder (default: the config's [defaults] cache, else "
    "$DIFFTEST_CACHE, else ~/.cache/difftest).")]


@cache_app.command("list")
@_guarded
def cache_list(cache: CacheOpt = None, config: ConfigOpt = None) -> None:
    """Every checkout difftest keeps: repository, commit, build recipe, size, last use."""
    from difftest.api import cache_folder
    from difftest.report import cache_report
    from difftest.execute.worktree import list_cache

    where = cache_folder(cache, config)
    typer.echo(cache_report.render_table(list_cache(where), where))


@cache_app.command("prune")
@_guarded
def cache_prune(
    older_than: Annotated[float, typer.Option(
        "--older-than", min=0.0, help="Remove checkouts unused for this many days.")] = 14.0,
    all_: Annotated[bool, typer.Option(
        "--all", help="Remove every checkout not in use right now.")] = False,
    cache: CacheOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Remove broken checkouts and those unused for a while (only ones difftest made)."""
    from difftest.api import cache_folder
    from difftest.execute.worktree import prune_cache

    done = prune_cache(cache_folder(cache, config), max_age_days=0.0 if all_ else older_than)
    for path in done.removed:
        typer.echo(f"removed {path}")
    for path, why in done.skipped:
        typer.echo(f"skipped {path}: {why}")
    typer.echo(f"{len(done.removed)} checkout(s) removed, {len(done.skipped)} skipped")


def main() -> None:
    app()


if __name__ == "__main__":  # `python -m difftest.cli` runs the command line, like `python -m difftest`
    main()
