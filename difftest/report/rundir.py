"""What each command leaves in its run directory, written the same way for the CLI and for a
Python caller: every file atomically, after the raw captures and meta.json."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from difftest.errors import DifftestError, UsageError
from difftest.execute import write_json_atomic, write_text_atomic
from difftest.gate import CheckResult, ProbeReport
from difftest.pipeline import ComparisonReport, NoiseReport
from difftest.report import comparison as render
from difftest.report import gate_report, html

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
DIFF_CSV = "diff.csv"
CHECK_HTML = "check.html"
CHECK_JSON = "check.json"
CHECK_MD = "check.md"
JUNIT_XML = "junit.xml"
PROBE_JSON = "probe.json"
NOISE_JSON = "noise.json"


def write_text(path: Path, text: str) -> None:
    """A report file the user asked for: a path that cannot be written is a usage error."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None


def _each(writers: list[tuple[Path, Callable[[Path], None]]]) -> None:
    """Write every report; one that cannot be written costs only itself. The failures are said
    on stderr, after the others were written, so the verdict and its exit code still stand."""
    for path, write in writers:
        try:
            write(path)
        except (OSError, DifftestError) as exc:
            why = (f"cannot write: {exc.strerror or exc}" if isinstance(exc, OSError)
                   else str(exc).removeprefix(f"{path}: "))
            print(f"difftest: error: {path}: {why}", file=sys.stderr)


def write_comparison(report: ComparisonReport) -> None:
    """report.json, report.md, report.html and diff.csv (when something was compared) into
    the run dir."""
    if report.run_dir is None:
        return
    d = report.run_dir
    writers: list[tuple[Path, Callable[[Path], None]]] = [
        (d / REPORT_JSON, lambda p: write_json_atomic(p, render.to_dict(report))),
        (d / REPORT_MD, lambda p: write_text_atomic(p, render.render_markdown(report))),
        (d / REPORT_HTML, lambda p: write_text_atomic(p, html.render_comparison(report)))]
    if report.comparison is not None:
        writers.append((d / DIFF_CSV, lambda p: render.write_csv(report, p)))
    _each(writers)


def _csv_writer(rep: ComparisonReport) -> Callable[[Path], None]:
    return lambda p: render.write_csv(rep, p)


def write_comparison_html(report: ComparisonReport, path: Path) -> None:
    """report.html wherever the caller asked (`--html FILE`)."""
    write_text(path, html.render_comparison(report))


def write_check(result: CheckResult, *, junit: Path | None = None,
                markdown: Path | None = None, html_path: Path | None = None) -> None:
    """check.json, junit.xml, check.md, check.html and one diff-<comparison>.csv each into the
    run dir; the JUnit, markdown and HTML also wherever the caller asked (missing folders are
    created); the markdown appended to $GITHUB_STEP_SUMMARY when a GitHub Actions step sets it."""
    xml = gate_report.junit_xml(result)
    md = gate_report.check_markdown(result)
    page = html.render_check(result)
    writers: list[tuple[Path, Callable[[Path], None]]] = []
    if result.run_dir is not None:
        d = result.run_dir
        summary = gate_report.check_dict(result)
        writers += [(d / CHECK_JSON, lambda p: write_json_atomic(p, summary)),
                    (d / JUNIT_XML, lambda p: write_text_atomic(p, xml)),
                    (d / CHECK_MD, lambda p: write_text_atomic(p, md)),
                    (d / CHECK_HTML, lambda p: write_text_atomic(p, page))]
        for rep in result.reports:
            if rep.comparison is not None:
                writers.append((d / f"diff-{rep.name}.csv", _csv_writer(rep)))
    if junit is not None:
        writers.append((junit, lambda p: write_text_atomic(p, xml)))
    if markdown is not None:
        writers.append((markdown, lambda p: write_text_atomic(p, md)))
    if html_path is not None:
        writers.append((html_path, lambda p: write_text_atomic(p, page)))
    _each(writers)
    append_step_summary(md)


def append_step_summary(md: str) -> None:
    """GitHub Actions shows what a step appends to $GITHUB_STEP_SUMMARY on the run's page. A
    summary that cannot be written is a warning: the gate's result stands."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    try:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(md + "\n")
    except OSError as exc:
        print(f"difftest: warning: cannot append to GITHUB_STEP_SUMMARY {target}: "
              f"{exc.strerror or exc}", file=sys.stderr)


def write_probe(result: ProbeReport) -> None:
    """The baseline comparison's reports and probe.json into the run dir."""
    write_comparison(result.baseline)
    if result.run_dir is not None:
        write_json_atomic(result.run_dir / PROBE_JSON, gate_report.probe_dict(result))


def write_noise(report: NoiseReport) -> None:
    """noise.json into the run dir: the A/A floor of one arm's reruns."""
    write_json_atomic(report.run_dir / NOISE_JSON, report.to_json())
