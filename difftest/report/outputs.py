"""What each command leaves in its run directory, written the same way for the CLI and for a
Python caller: every file atomically, after the raw captures and meta.json."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.core.atomic import check_target, write_bytes_atomic, write_json_atomic, write_text_atomic
from difftest.core.errors import DifftestError, RefusedOutput, UsageError
from difftest.report import comparison as render

# the HTML page, the gate's reports and the saved localisations are loaded by the writers that
# need them: a compare that prints its table to the terminal never imports them
if TYPE_CHECKING:
    from difftest.flow.evaluate import ComparisonReport
    from difftest.flow.judge import CheckResult, NoiseReport
    from difftest.flow.localize import RunLocalization
    from difftest.flow.scoring import ProbeReport

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
# what each command writes into its run directory, named when a signal ends the analysis first
COMPARISON_REPORTS = (REPORT_JSON, REPORT_MD, REPORT_HTML, DIFF_CSV)
CHECK_REPORTS = (CHECK_JSON, JUNIT_XML, CHECK_MD, CHECK_HTML)
PROBE_REPORTS = (*COMPARISON_REPORTS, PROBE_JSON)
NOISE_REPORTS = (NOISE_JSON,)


CAPTURE_SUFFIXES = (".stdout", ".stderr")


def run_reads(run_dir: Path | None) -> list[Path]:
    """The files of a run directory that its analysis reads: meta.json and every capture (reruns
    and mutated arms included). No output may be written over them."""
    if run_dir is None:
        return []
    from difftest.execute.records import META_NAME

    found = [Path(run_dir) / META_NAME]
    try:
        found += [p for p in Path(run_dir).iterdir() if p.suffix in CAPTURE_SUFFIXES]
    except OSError:
        pass
    return found


# What a run directory holds of its own: the records and reports its command wrote. A report
# a user asks for may not replace them (report.json holds what only the run knew: a sequential
# test's decision, for one).
RUN_RECORDS = (REPORT_JSON, REPORT_MD, REPORT_HTML, DIFF_CSV, CHECK_HTML, CHECK_JSON, CHECK_MD,
               JUNIT_XML, PROBE_JSON, NOISE_JSON, "localize.json", "localize.md", "modules.svg")


def run_records(run_dir: Path | None) -> list[Path]:
    """The records and reports a run directory already holds (see RUN_RECORDS)."""
    if run_dir is None:
        return []
    return [Path(run_dir) / name for name in RUN_RECORDS if (Path(run_dir) / name).is_file()]


def reads_of(*reports: ComparisonReport, config: Path | None = None) -> list[Path]:
    """Every file these reports were made from: traces, captures, meta.json, the config."""
    found: list[Path] = [config] if config is not None else []
    for rep in reports:
        for arm in (rep.arm_a, rep.arm_b):
            found.append(arm.trace_path)
            if arm.result is not None:
                found += [arm.result.stdout_path, arm.result.stderr_path]
        found += run_reads(rep.run_dir)
    return found


def check_outputs(paths: list[Path | None], reads: list[Path], keeps: list[Path]) -> None:
    """Refuse, before any work, an output path the writer would refuse afterwards, or one that
    would replace a record of the run (`keeps`, see `run_records`)."""
    for path in paths:
        if path is not None:
            check_target(Path(path), reads=reads, keeps=keeps)


def write_text(path: Path, text: str, reads: list[Path] | None = None) -> None:
    """A report file the user asked for: a path that cannot be written is a usage error."""
    try:
        write_text_atomic(path, text, reads=reads or ())
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None


class NotWritten(UsageError):
    """Outputs a command was to write and could not (each with why); every other one was
    written. A missing artifact is an error (exit 2), whatever the verdict: a CI step must not
    pass without the report it publishes. `result`: what the command produced, whose verdict
    is still said beside the error."""

    def __init__(self, failures: list[tuple[Path, str]], result: object) -> None:
        self.failures = tuple(failures)
        self.result = result
        super().__init__("; ".join(f"{path}: {why}" for path, why in failures))


Writer = tuple[Path, Callable[[Path], None]]


def _each(writers: list[Writer], result: object) -> None:
    """Write every output; one that cannot be written costs only itself, and when any could
    not, NotWritten is raised after the others were written (`result` rides with it)."""
    failures: list[tuple[Path, str]] = []
    for path, write in writers:
        try:
            write(path)
        except (OSError, DifftestError) as exc:
            why = (f"cannot write: {exc.strerror or exc}" if isinstance(exc, OSError)
                   else str(exc).removeprefix(f"{path}: "))
            failures.append((path, why))
    if failures:
        raise NotWritten(failures, result)


def write_comparison(report: ComparisonReport) -> None:
    """report.json, report.md, report.html and diff.csv (when something was compared) into
    the run dir."""
    _each(_comparison_writers(report), report)


def _comparison_writers(report: ComparisonReport) -> list[Writer]:
    if report.run_dir is None:
        return []
    d = report.run_dir
    r = reads_of(report)
    from difftest.flow.localize import saved_localizations
    from difftest.report import html

    found = saved_localizations(d)  # `difftest localize` results: a section each
    writers: list[Writer] = [
        (d / REPORT_JSON, lambda p: write_json_atomic(p, render.to_dict(report), reads=r,
                                                      inside=d)),
        (d / REPORT_MD, lambda p: write_text_atomic(p, render.render_markdown(report, found),
                                                    reads=r, inside=d)),
        (d / REPORT_HTML, lambda p: write_text_atomic(p, html.render_comparison(report, found),
                                                      reads=r, inside=d))]
    if report.comparison is not None:
        writers.append((d / DIFF_CSV, lambda p: render.write_csv(report, p, reads=r, inside=d)))
    return writers


def write_requested(report: ComparisonReport, *, csv: Path | None = None,
                    html_path: Path | None = None) -> None:
    """`--csv FILE` (when something was compared) and `--html FILE`: both tried, NotWritten
    for any that could not be written."""
    writers: list[Writer] = []
    if html_path is not None:
        writers.append((html_path, lambda p: write_comparison_html(report, p)))
    if csv is not None and report.comparison is not None:
        writers.append((csv, lambda p: render.write_csv(report, p, reads=reads_of(report))))
    _each(writers, report)


def write_localization(result: RunLocalization) -> Path:
    """After `difftest localize RUN_DIR`: the per-module figure beside its captures, and, when
    the run's report.md and report.html are of the comparison localised, both written again
    with a localisation section. Returns the figure's path."""
    from difftest.flow.rejudge import rejudge_run
    from difftest.report import html

    figure = result.figure
    svg = html.localization_svg(result.report.localization)
    writers: list[Writer] = [
        (figure, lambda p: write_bytes_atomic(p, svg, inside=result.run_dir))]
    if result.in_report:
        writers += _comparison_writers(rejudge_run(result.run_dir, comparison=result.comparison))
    _each(writers, figure)
    return figure


def _csv_writer(rep: ComparisonReport, reads: list[Path],
                inside: Path) -> Callable[[Path], None]:
    return lambda p: render.write_csv(rep, p, reads=reads, inside=inside)


def write_comparison_html(report: ComparisonReport, path: Path) -> None:
    """report.html wherever the caller asked (`--html FILE`), with the run's localisations."""
    from difftest.flow.localize import saved_localizations
    from difftest.report import html

    found = saved_localizations(report.run_dir) if report.run_dir is not None else []
    write_text(path, html.render_comparison(report, found), reads_of(report))


def write_check(result: CheckResult, *, junit: Path | None = None,
                markdown: Path | None = None, html_path: Path | None = None) -> None:
    """check.json, junit.xml, check.md, check.html and one diff-<comparison>.csv each into the
    run dir; the JUnit, markdown and HTML also wherever the caller asked (missing folders are
    created); the markdown appended to $GITHUB_STEP_SUMMARY when a GitHub Actions step sets it."""
    from difftest.report import gate_report, html

    xml = gate_report.junit_xml(result)
    md = gate_report.check_markdown(result)
    page = html.render_check(result)
    writers: list[Writer] = []
    r = reads_of(*result.reports, config=result.config)
    r += [p for probe in result.probes.values() for p in reads_of(probe.baseline)]
    r += run_reads(result.run_dir)
    if result.run_dir is not None:
        d = result.run_dir
        summary = gate_report.check_dict(result)
        writers += [(d / CHECK_JSON, lambda p: write_json_atomic(p, summary, reads=r, inside=d)),
                    (d / JUNIT_XML, lambda p: write_text_atomic(p, xml, reads=r, inside=d)),
                    (d / CHECK_MD, lambda p: write_text_atomic(p, md, reads=r, inside=d)),
                    (d / CHECK_HTML, lambda p: write_text_atomic(p, page, reads=r, inside=d))]
        for rep in result.reports:
            if rep.comparison is not None:
                writers.append((d / f"diff-{rep.name}.csv", _csv_writer(rep, r, d)))
    if junit is not None:
        writers.append((junit, lambda p: write_text_atomic(p, xml, reads=r)))
    if markdown is not None:
        writers.append((markdown, lambda p: write_text_atomic(p, md, reads=r)))
    if html_path is not None:
        writers.append((html_path, lambda p: write_text_atomic(p, page, reads=r)))
    try:
        _each(writers, result)
    finally:
        append_step_summary(md, r)


def append_step_summary(md: str, reads: list[Path] | None = None) -> None:
    """GitHub Actions shows what a step appends to $GITHUB_STEP_SUMMARY on the run's page. A
    summary that cannot be written is a warning: the gate's result stands. Appended, not
    replaced, and only to a regular file (or a new one): never to a device, FIFO or link, never
    to a file the run reads."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    try:
        check_target(Path(target), reads=reads or ())
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the check
                raise RefusedOutput(f"{target}: is not a regular file")
            fh.write(md + "\n")
    except (OSError, RefusedOutput) as exc:
        why = exc.strerror or exc if isinstance(exc, OSError) else str(exc).removeprefix(
            f"{target}: ")
        print(f"difftest: warning: cannot append to GITHUB_STEP_SUMMARY {target}: {why}",
              file=sys.stderr)


def write_probe(result: ProbeReport) -> None:
    """The baseline comparison's reports and probe.json into the run dir."""
    from difftest.report import gate_report

    writers = _comparison_writers(result.baseline)
    d = result.run_dir
    if d is not None:
        writers.append((d / PROBE_JSON, lambda p: write_json_atomic(
            p, gate_report.probe_dict(result), reads=reads_of(result.baseline), inside=d)))
    _each(writers, result)


def write_noise(report: NoiseReport) -> None:
    """noise.json into the run dir: the A/A floor of one arm's reruns."""
    d = report.run_dir
    _each([(d / NOISE_JSON, lambda p: write_json_atomic(p, report.to_json(),
                                                        reads=run_reads(d), inside=d))], report)
