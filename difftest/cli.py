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

from difftest.errors import DifftestError, ExitCode, UsageError

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
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None

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


class CompareFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


class Expect(str, Enum):
    same = "same"
    differ = "differ"


def _comparison_spec(config, arm_a: str, arm_b: str, name: Optional[str]):  # noqa: ANN001, ANN202
    """The configured comparison of these arms (or of that name), else a plain `same`."""
    from difftest.config import ComparisonSpec

    if name is not None:
        return config.comparison(name)
    for spec in config.comparisons.values():
        if (spec.arm_a, spec.arm_b) == (arm_a, arm_b):
            return spec
    return ComparisonSpec(name=f"{arm_a}-vs-{arm_b}", arm_a=arm_a, arm_b=arm_b)


def _emit_report(report, format: "CompareFormat", csv: Optional[Path]) -> None:  # noqa: ANN001
    from difftest.report import comparison as render

    if csv is not None:
        if report.comparison is not None:
            render.write_csv(report, csv)
        else:
            typer.echo(f"difftest: no CSV written to {csv}: an arm failed, nothing was compared",
                       err=True)
    if format is CompareFormat.json:
        typer.echo(render.render_json(report))
    elif format is CompareFormat.markdown:
        typer.echo(render.render_markdown(report))
    else:
        typer.echo(render.render_table(report))
    raise typer.Exit(int(report.verdict.exit_code))


@app.command()
@_guarded
def compare(
    arm_a: Optional[str] = typer.Option(None, "--arm-a", help="Arm name from the config."),
    arm_b: Optional[str] = typer.Option(None, "--arm-b", help="Arm name from the config."),
    trace_a: Optional[Path] = typer.Option(None, "--trace-a", help="A captured trace: run nothing."),
    trace_b: Optional[Path] = typer.Option(None, "--trace-b"),
    comparison: Optional[str] = typer.Option(None, "--comparison", "-c",
                                             help="A configured comparison, by name."),
    config: Optional[Path] = typer.Option(None, "--config", help="Config file (default: "
                                          "./difftest.toml, else the packaged default)."),
    format: CompareFormat = typer.Option(CompareFormat.table, "--format", "-f"),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Write the per-row diff here."),
    expect: Optional[Expect] = typer.Option(None, "--expect"),
    near_tie: Optional[float] = typer.Option(None, "--near-tie", min=0.0),
    atol: Optional[float] = typer.Option(None, "--atol", min=0.0),
    min_differing: Optional[int] = typer.Option(None, "--min-differing", min=1),
    run_root: Optional[Path] = typer.Option(None, "--run-root",
                                            help="Where run directories go (traces/runs)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress"),
) -> None:
    """Run two arms (or read two traces), compare their drafts, and judge the comparison."""
    from difftest import pipeline
    from difftest.config import ComparisonSpec, load_config

    overrides = dict(expect=expect.value if expect else None, near_tie=near_tie, atol=atol,
                     min_differing=min_differing)
    if trace_a is not None or trace_b is not None:
        if trace_a is None or trace_b is None:
            raise UsageError("--trace-a and --trace-b go together")
        if arm_a or arm_b or comparison:
            raise UsageError("give either --trace-a/--trace-b or arms, not both")
        cfg = load_config(config) if config is not None or comparison is not None else None
        names = (trace_a.name, trace_b.name)
        if names[0] == names[1]:
            names = (f"A:{names[0]}", f"B:{names[1]}")
        spec = ComparisonSpec(name="traces", arm_a=names[0], arm_b=names[1])
        if cfg is not None and comparison is not None:
            spec = _comparison_spec(cfg, "", "", comparison)
        spec = pipeline.with_overrides(spec, **overrides)  # type: ignore[arg-type]
        report = pipeline.judge_traces(trace_a, trace_b, spec, pipeline.thresholds_of(cfg))
        _emit_report(report, format, csv)
    cfg = load_config(config)
    if comparison is None and (arm_a is None or arm_b is None):
        raise UsageError("name both arms (--arm-a NAME --arm-b NAME), a --comparison, or two "
                         "traces (--trace-a FILE --trace-b FILE); arms in "
                         f"{cfg.path}: {', '.join(cfg.arms)}")
    spec = _comparison_spec(cfg, arm_a or "", arm_b or "", comparison)
    if comparison is not None and (arm_a or arm_b):
        from dataclasses import replace

        spec = replace(spec, arm_a=arm_a or spec.arm_a, arm_b=arm_b or spec.arm_b)
    spec = pipeline.with_overrides(spec, **overrides)  # type: ignore[arg-type]
    report = pipeline.run_comparison(cfg, spec, run_root=run_root, progress=progress)
    _emit_report(report, format, csv)


@app.command()
@_guarded
def export(
    run_dir: Path = typer.Argument(..., help="A run directory (traces/runs/<run-id>)."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Write the per-row diff here."),
    format: CompareFormat = typer.Option(CompareFormat.table, "--format", "-f"),
    expect: Optional[Expect] = typer.Option(None, "--expect"),
    near_tie: Optional[float] = typer.Option(None, "--near-tie", min=0.0),
    atol: Optional[float] = typer.Option(None, "--atol", min=0.0),
    min_differing: Optional[int] = typer.Option(None, "--min-differing", min=1),
) -> None:
    """Re-judge and re-export a past run (other thresholds welcome); nothing is re-run."""
    from difftest import pipeline

    report = pipeline.rejudge_run(run_dir, expect=expect.value if expect else None,
                                  near_tie=near_tie, atol=atol, min_differing=min_differing)
    _emit_report(report, format, csv)


def _write_text(path: Path, text: str) -> None:
    from difftest.execute import write_text_atomic

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None


@app.command()
@_guarded
def check(
    config: Optional[Path] = typer.Option(None, "--config", help="Config file (default: "
                                          "./difftest.toml, else the packaged default)."),
    only: Optional[list[str]] = typer.Option(None, "--only", help="Only this comparison "
                                             "(repeatable)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a markdown "
                                            "summary here (for a pull-request comment)."),
    format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f"),
    no_probes: bool = typer.Option(False, "--no-probes", help="Skip the probes comparisons "
                                   "require."),
    run_root: Optional[Path] = typer.Option(None, "--run-root"),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress"),
) -> None:
    """Run every configured comparison (and the probes they require): the pre-merge gate.

    Exit code: the worst of the comparisons', by severity arm-failed (4) > differ (1) >
    uninformative (3) > agree (0).
    """
    from difftest.config import load_config
    from difftest.gate import run_check
    from difftest.report import gate_report

    cfg = load_config(config)
    result = run_check(cfg, only, run_root=run_root, progress=progress, probes=not no_probes)
    xml = gate_report.junit_xml(result)
    md = gate_report.check_markdown(result)
    if result.run_dir is not None:
        from difftest.execute import write_json_atomic
        from difftest.report.comparison import write_csv

        write_json_atomic(result.run_dir / "check.json", gate_report.check_dict(result))
        _write_text(result.run_dir / "junit.xml", xml)
        _write_text(result.run_dir / "check.md", md)
        for rep in result.reports:
            if rep.comparison is not None:
                write_csv(rep, result.run_dir / f"diff-{rep.name}.csv")
    if junit is not None:
        _write_text(junit, xml)
    if markdown is not None:
        _write_text(markdown, md)
    if format is ReportFormat.json:
        typer.echo(gate_report.render_check_json(result))
    else:
        typer.echo(gate_report.check_lines(result))
    raise typer.Exit(int(result.exit_code))


@app.command()
@_guarded
def probe(
    arm_a: Optional[str] = typer.Option(None, "--arm-a"),
    arm_b: Optional[str] = typer.Option(None, "--arm-b"),
    comparison: Optional[str] = typer.Option(None, "--comparison", "-c"),
    mutation: Optional[list[str]] = typer.Option(None, "--mutation", "-m",
                                                 help="Repeatable; default: the comparison's "
                                                      "probe list, else the built-ins."),
    config: Optional[Path] = typer.Option(None, "--config"),
    format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f"),
    run_root: Optional[Path] = typer.Option(None, "--run-root"),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress"),
) -> None:
    """Break arm B on purpose and check that the comparison notices: exit 0 when every
    mutation was killed, 3 when any survived."""
    from difftest.config import load_config
    from difftest.gate import run_probe
    from difftest.report import gate_report

    cfg = load_config(config)
    if comparison is None and (arm_a is None or arm_b is None):
        raise UsageError("name both arms (--arm-a NAME --arm-b NAME) or a --comparison")
    spec = _comparison_spec(cfg, arm_a or "", arm_b or "", comparison)
    result = run_probe(cfg, spec, mutation or None, run_root=run_root, progress=progress)
    if result.baseline.run_dir is not None:
        from difftest.execute import write_json_atomic

        write_json_atomic(result.baseline.run_dir / "probe.json", gate_report.probe_dict(result))
    if format is ReportFormat.json:
        from difftest.jsonout import dumps

        typer.echo(dumps(gate_report.probe_dict(result)))
    else:
        typer.echo(gate_report.probe_table(result))
    raise typer.Exit(int(result.exit_code))


def main() -> None:
    app()
