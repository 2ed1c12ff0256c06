"""What each command leaves in its run directory, written the same way for the CLI and for a
Python caller: every file atomically, after the raw captures and meta.json."""

from __future__ import annotations

from pathlib import Path

from difftest.errors import UsageError
from difftest.execute import write_json_atomic, write_text_atomic
from difftest.gate import CheckResult, ProbeReport
from difftest.pipeline import ComparisonReport
from difftest.report import comparison as render
from difftest.report import gate_report

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
DIFF_CSV = "diff.csv"
CHECK_JSON = "check.json"
CHECK_MD = "check.md"
JUNIT_XML = "junit.xml"
PROBE_JSON = "probe.json"


def write_text(path: Path, text: str) -> None:
    """A report file the user asked for: a path that cannot be written is a usage error."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None


def write_comparison(report: ComparisonReport) -> None:
    """report.json, report.md and diff.csv (when something was compared) into the run dir."""
    if report.run_dir is None:
        return
    write_json_atomic(report.run_dir / REPORT_JSON, render.to_dict(report))
    write_text_atomic(report.run_dir / REPORT_MD, render.render_markdown(report))
    if report.comparison is not None:
        render.write_csv(report, report.run_dir / DIFF_CSV)


def write_check(result: CheckResult, *, junit: Path | None = None,
                markdown: Path | None = None) -> None:
    """check.json, junit.xml, check.md and one diff-<comparison>.csv each into the run dir, and
    the JUnit and markdown also wherever the caller asked."""
    xml = gate_report.junit_xml(result)
    md = gate_report.check_markdown(result)
    if result.run_dir is not None:
        write_json_atomic(result.run_dir / CHECK_JSON, gate_report.check_dict(result))
        write_text(result.run_dir / JUNIT_XML, xml)
        write_text(result.run_dir / CHECK_MD, md)
        for rep in result.reports:
            if rep.comparison is not None:
                render.write_csv(rep, result.run_dir / f"diff-{rep.name}.csv")
    if junit is not None:
        write_text(junit, xml)
    if markdown is not None:
        write_text(markdown, md)


def write_probe(result: ProbeReport) -> None:
    """The baseline comparison's reports and probe.json into the run dir."""
    write_comparison(result.baseline)
    if result.run_dir is not None:
        write_json_atomic(result.run_dir / PROBE_JSON, gate_report.probe_dict(result))
