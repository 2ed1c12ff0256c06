"""The Python API: one function per command, each returning a frozen result with `.exit_code`
(and `.run_dir` where it runs arms), each writing the same run directory as the CLI.

Config precedence is the same everywhere: an explicit config, else ./difftest.toml when present,
else the packaged default; comparison values from the config, then the caller's overrides.
"""

from __future__ import annotations


import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack, cast

from difftest.core.names import MAX_NAME, pair_name
from difftest.config import ComparisonSpec, Config, InvalidValue, load_config
from difftest.core.atomic import output_file
from difftest.core.errors import ConfigError, DifftestError, ExitCode, UsageError
from difftest.core.kinds import Expect, VerdictKind
from difftest.core.rules import Rules
from difftest.flow.overrides import (OVERRIDES, OverrideKeywords, Overrides, RunKeywords, RunOptions,
                            run_options, split_keywords)

# What a command does not need is imported where it is used: comparing two traces loads the
# analysis and the table, never bisect, running arms, the HTML page or the gate's reports
# (tests/test_cli_startup.py); the records below are loaded on first use (`__getattr__`).
if TYPE_CHECKING:
    from difftest.analysis.audit import TraceAudit
    from difftest.analysis.verdict import Verdict
    from difftest.bisect import BisectResult, Mode
    from difftest.core.model import ArmTrace
    from difftest.flow.evaluate import ComparisonReport
    from difftest.flow.judge import CheckResult, NoiseReport
    from difftest.flow.plan import Evidence
    from difftest.flow.run import RunResults
    from difftest.flow.scoring import ProbeReport
    from difftest.flow.sweep import SweepReport
    from difftest.report.diffread import read_diff

ConfigLike = Config | Path | str | None

if TYPE_CHECKING:
    from difftest.execute.worktree import CacheEntry, PruneResult
    from difftest.flow.calibrate import Calibration
    from difftest.flow.localize import LocalizeReport, RunLocalization

__all__ = ["AuditReport", "Outputs", "Traces", "audit", "bisect", "check", "compare", "compare_arms",
           "compare_traces", "export_csv", "export_html", "noise", "parse", "probe", "read_diff",
           "rejudge", "resolve_spec", "run_comparison", "write_reports", "cache_folder",
           "cache_list", "cache_prune", "calibrate", "localize",
           # the records the commands take and return (difftest/__init__.py re-exports them)
           "BisectResult", "CheckResult", "ComparisonReport", "ConfigError", "DifftestError",
           "ExitCode", "Expect", "NoiseReport", "Overrides", "ProbeReport", "Rules", "RunOptions",
           "UsageError", "Verdict", "VerdictKind"]


def _config(config: ConfigLike) -> Config:
    return config if isinstance(config, Config) else load_config(
        Path(config) if config is not None else None)


def _label(file_name: str) -> str:
    """A trace's file name as an arm label that meets the rule for names (difftest.config)."""
    import re

    label = re.sub(r"[\x00-\x1f\x7f\\]", "?", file_name).replace("..", ".?")
    return label if len(label) <= MAX_NAME - 2 else label[:MAX_NAME - 3] + "~"


def resolve_spec(config: Config, arm_a: str | None, arm_b: str | None,
                 comparison: str | None) -> ComparisonSpec:
    """The configured comparison named (its arms replaced where given), else the configured
    comparison of these two arms, else a plain `same` comparison of them."""
    if comparison is not None:
        spec = config.comparison(comparison)
        return replace(spec, arm_a=arm_a or spec.arm_a, arm_b=arm_b or spec.arm_b)
    if arm_a is None or arm_b is None:
        raise UsageError("name both arms (--arm-a NAME --arm-b NAME), a --comparison, or two "
                         "traces (--trace-a FILE --trace-b FILE); arms in "
                         f"{config.path}: {', '.join(config.arms)}")
    for spec in config.comparisons.values():
        if (spec.arm_a, spec.arm_b) == (arm_a, arm_b):
            return spec
    return ComparisonSpec(name=pair_name(arm_a, arm_b), arm_a=arm_a, arm_b=arm_b)


def run_comparison(config: Config, spec: ComparisonSpec, *,
                   options: RunOptions | None = None,
                   **keywords: Unpack[RunKeywords]) -> ComparisonReport:
    """Run both arms of a comparison, judge them, and write report.json, report.md and
    diff.csv into the run directory. `until_decided` (an option): run both arms again until
    the sequential acceptance test decides, at most this many times each
    (difftest.analysis.sequential)."""
    from difftest.flow.evaluate import ComparisonReport
    from difftest.flow.judge import judged
    from difftest.flow.plan import plan_compare
    from difftest.flow.run import analysed
    from difftest.report import outputs

    opts = run_options(keywords, options)
    plan = plan_compare(config, spec, opts.until_decided)
    def analysis(results: RunResults) -> ComparisonReport:
        report = judged(plan, results, ComparisonReport)
        outputs.write_comparison(report)
        return report

    return analysed(plan, opts, outputs.COMPARISON_REPORTS, analysis)


class CompareKeywords(OverrideKeywords, RunKeywords, total=False):
    """`compare_arms`' keywords: the overrides and how the arms run."""


def compare_arms(arm_a: str | None = None, arm_b: str | None = None, *,
                 comparison: str | None = None, config: ConfigLike = None,
                 overrides: Overrides | None = None, options: RunOptions | None = None,
                 **keywords: Unpack[CompareKeywords]) -> ComparisonReport:
    """Run two configured arms (or a configured comparison) and judge what they drafted.
    `overrides` (or their keywords: expect, near_tie, atol, rtol, min_differing, drafting,
    noise_runs, teacher_force) over the configured values; `teacher_force`: run B on A's
    committed stream (difftest.core.force); `until_decided`: see `run_comparison`."""
    cfg = _config(config)
    given, opts = split_keywords(keywords, overrides, options)
    spec = given.on(resolve_spec(cfg, arm_a, arm_b, comparison))
    return run_comparison(cfg, spec, options=opts)


def compare_traces(trace_a: Path | str, trace_b: Path | str, *, comparison: str | None = None,
                   config: ConfigLike = None, overrides: Overrides | None = None,
                   line_prefix: str | None = None,
                   **keywords: Unpack[OverrideKeywords]) -> ComparisonReport:
    """Judge two captured traces; nothing is run, nothing is written. The audit thresholds come
    from the config as in arm mode; a named comparison supplies its expectations (a noise floor
    needs runs, so `noise_runs` does not apply). `line_prefix`: a prefix pattern the traces'
    lines carry besides the known ones (docs/safety.md)."""
    from difftest.flow.evaluate import judge_traces

    ta, tb = Path(trace_a), Path(trace_b)
    cfg = _config(config)
    evidence: Evidence = ((), ())
    if comparison is not None:
        from difftest.flow.plan import evidence_of

        spec = cfg.comparison(comparison)
        evidence = evidence_of(cfg, spec)
    else:
        names = (_label(ta.name), _label(tb.name))
        if names[0] == names[1]:
            names = (f"A:{names[0]}", f"B:{names[1]}")
        spec = ComparisonSpec(name="traces", arm_a=names[0], arm_b=names[1])
    spec = Overrides.of(keywords, overrides).on(spec)
    return judge_traces(ta, tb, spec, cfg.audit, evidence, line_prefix=line_prefix,
                        arms=cfg.arms if comparison is not None else None)


@dataclass(frozen=True)
class Traces:
    """Two captured traces to judge instead of running arms, and a line prefix they carry."""

    a: Path | str | None = None
    b: Path | str | None = None
    line_prefix: str | None = None

    @property
    def given(self) -> bool:
        return self.a is not None or self.b is not None


@dataclass(frozen=True)
class Outputs:
    """Files a comparison's report is written to besides its run directory: the per-row diff
    (`csv`, when something was compared) and the HTML page (`html`)."""

    csv: Path | str | None = None
    html: Path | str | None = None


def _reported(outputs: Outputs | None, judge: Callable[[], ComparisonReport]
              ) -> ComparisonReport:
    """The report `judge` makes, and the files `outputs` asks for written. Every file is
    tried; one NotWritten (exit 2, the report riding with it) names each that could not be
    written, the run directory's first."""
    from difftest.report.outputs import NotWritten

    failures: list[tuple[Path, str]] = []
    try:
        report = judge()
    except NotWritten as exc:
        report, failures = cast("ComparisonReport", exc.result), list(exc.failures)
    if outputs is not None:
        try:
            write_reports(report, csv=_path(outputs.csv), html=_path(outputs.html))
        except NotWritten as exc:
            failures += exc.failures
    if failures:
        raise NotWritten(failures, report)
    return report


def _path(path: Path | str | None) -> Path | None:
    return Path(path) if path is not None else None


def compare(arm_a: str | None = None, arm_b: str | None = None, *,
            traces: Traces | None = None, comparison: str | None = None,
            config: ConfigLike = None, overrides: Overrides | None = None,
            options: RunOptions | None = None, outputs: Outputs | None = None
            ) -> ComparisonReport:
    """`difftest compare`: two captured traces judged (`traces`), else two arms run and judged;
    what needs arms (a noise floor, teacher forcing) is refused with traces, what belongs to
    traces (a line prefix) with arms. `outputs`: files the report is also written to, their
    paths checked before any work (see `check_outputs`)."""
    traces = traces or Traces()
    if outputs is not None:
        source = config.path if isinstance(config, Config) else config or Path("difftest.toml")
        check_outputs(outputs.csv, outputs.html, reads=[traces.a, traces.b, source])
    return _reported(outputs, lambda: _compared(arm_a, arm_b, traces, comparison, config,
                                                overrides, options))


def _compared(arm_a: str | None, arm_b: str | None, traces: Traces, comparison: str | None,
              config: ConfigLike, overrides: Overrides | None, options: RunOptions | None
              ) -> ComparisonReport:
    given = overrides or Overrides()
    if traces.given:
        if arm_a or arm_b:
            raise UsageError("give either --trace-a/--trace-b or arms, not both")
        if traces.a is None or traces.b is None:
            raise UsageError("--trace-a and --trace-b go together")
        if given.noise_runs:
            raise UsageError("--noise-runs runs arm A again: it needs arms, not traces")
        if given.teacher_force:
            raise UsageError("--teacher-force runs arm B on arm A's stream: it needs arms, "
                             "not traces")
        if options is not None and options.until_decided is not None:
            raise UsageError("--until-decided runs the arms again: it needs arms, not traces")
        # a comparison supplies its expectations, toggle and its arms' evidence
        return compare_traces(traces.a, traces.b, comparison=comparison, config=config,
                              overrides=given, line_prefix=traces.line_prefix)
    if traces.line_prefix is not None:
        raise UsageError("--line-prefix is for --trace-a/--trace-b; an arm sets "
                         "line_prefix in its config table")
    return compare_arms(arm_a, arm_b, comparison=comparison, config=config, overrides=given,
                        options=options)


def rejudge(run_dir: Path | str, *, comparison: str | None = None,
            overrides: Overrides | None = None, outputs: Outputs | None = None,
            **keywords: Unpack[OverrideKeywords]) -> ComparisonReport:
    """Judge a past run again with the thresholds it recorded (or these overrides); a run of
    several comparisons (`check`, `probe`, `noise`) needs `comparison`, by name
    (`NAME/MUTATION` for a probed mutation). `outputs`: files the report is written to, their
    paths checked before any work (none may replace what the run holds)."""
    from difftest.flow.rejudge import rejudge_run

    if outputs is not None:
        check_outputs(outputs.csv, outputs.html, run_dir=run_dir)
    return _reported(outputs, lambda: rejudge_run(Path(run_dir), comparison=comparison,
                                                  overrides=Overrides.of(keywords, overrides)))


def noise(arm: str, *, noise_runs: int | None = None, config: ConfigLike = None,
          options: RunOptions | None = None, **keywords: Unpack[RunKeywords]) -> NoiseReport:
    """Run one arm `noise_runs` times and measure its A/A noise floor; writes noise.json into
    the run directory (3 runs unless told)."""
    from difftest.flow.judge import NoiseReport, judged
    from difftest.flow.plan import plan_noise
    from difftest.flow.run import analysed
    from difftest.report import outputs

    plan = plan_noise(_config(config), arm, 3 if noise_runs is None else noise_runs)
    def analysis(results: RunResults) -> NoiseReport:
        report = judged(plan, results, NoiseReport)
        outputs.write_noise(report)
        return report

    return analysed(plan, run_options(keywords, options), outputs.NOISE_REPORTS, analysis)


def export_csv(report: ComparisonReport, path: Path) -> bool:
    """Write the per-row diff; False when an arm failed and nothing was compared."""
    from difftest.report import outputs
    from difftest.report.comparison import write_csv

    if report.comparison is None:
        return False
    write_csv(report, path, reads=outputs.reads_of(report))
    return True


def check_outputs(*paths: Path | str | None, reads: list[Path | str | None] | None = None,
                  run_dir: Path | str | None = None) -> None:
    """Refuse (exit 2), before any work, output paths the writer would refuse: anything but a
    regular file, a file the run reads (`reads`, and a `run_dir`'s meta.json and captures), or
    a record a `run_dir` holds (its reports, probe.json, ...). The writer checks again when it
    writes."""
    from difftest.report import outputs

    for path in paths:
        if isinstance(path, str):  # a Path has lost a trailing separator: a str still has it
            output_file(path)
    known = [Path(p) for p in reads or [] if p is not None]
    run = Path(run_dir) if run_dir is not None else None
    outputs.check_outputs([Path(p) if p is not None else None for p in paths],
                          known + outputs.run_reads(run), keeps=outputs.run_records(run))


def export_html(report: ComparisonReport, path: Path) -> None:
    """Write report.html of a comparison to `path`."""
    from difftest.report import outputs

    outputs.write_comparison_html(report, path)


def write_reports(report: ComparisonReport, *, csv: Path | None = None,
                  html: Path | None = None) -> None:
    """The per-row diff (when something was compared) and report.html where the caller asked;
    each is tried, and any that could not be written raises NotWritten (exit 2) after the
    other was written."""
    from difftest.report import outputs

    outputs.write_requested(report, csv=csv, html_path=html)


def check(config: ConfigLike = None, *, only: list[str] | None = None, probes: bool = True,
          junit: Path | None = None, markdown: Path | None = None, html: Path | None = None,
          options: RunOptions | None = None, **keywords: Unpack[RunKeywords]) -> CheckResult:
    """Every configured comparison (and the probes they require): the pre-merge gate. Writes
    junit.xml, check.md, check.html, check.json and the diffs into the run directory. `jobs`
    caps how many arms run at once (default: see difftest.flow.run.job_limits). An output that
    could not be written raises NotWritten (its `result` holds the gate's) after every other
    was."""
    from difftest.flow.judge import CheckResult, judged
    from difftest.flow.plan import plan_check
    from difftest.flow.run import analysed
    from difftest.report import outputs

    cfg = _config(config)
    opts = run_options(keywords, options)
    check_outputs(junit, markdown, html, reads=[cfg.path])
    plan = plan_check(cfg, only, probes=probes)
    def analysis(results: RunResults) -> CheckResult:
        result = judged(plan, results, CheckResult)
        if cfg.check.sweep:  # its arms run after the gate's, each input a run of its own
            result = _with_sweeps(result, _check_sweeps(cfg, plan.selected, opts), results)
        outputs.write_check(result, junit=junit, markdown=markdown, html_path=html)
        return result

    return analysed(plan, opts, outputs.CHECK_REPORTS, analysis)


def _with_sweeps(result: CheckResult, sweeps: tuple[SweepReport, ...],
                 results: RunResults) -> CheckResult:
    """The check's result with its sweeps, its wall time counting theirs."""
    took = None if results.started is None else time.monotonic() - results.started
    return replace(result, sweeps=sweeps, duration_s=took)


def probe(arm_a: str | None = None, arm_b: str | None = None, *,
          comparison: str | None = None, mutations: list[str] | None = None,
          config: ConfigLike = None, options: RunOptions | None = None,
          **keywords: Unpack[RunKeywords]) -> ProbeReport:
    """Break arm B on purpose and check that the comparison notices. Writes the baseline's
    reports and probe.json into the run directory."""
    from difftest.flow.judge import judged
    from difftest.flow.plan import plan_probe
    from difftest.flow.run import analysed
    from difftest.flow.scoring import ProbeReport
    from difftest.report import outputs

    cfg = _config(config)
    opts = run_options(keywords, options)
    if comparison is None and (arm_a is None or arm_b is None):
        raise UsageError("name both arms (--arm-a NAME --arm-b NAME) or a --comparison")
    spec = (cfg.comparison(comparison) if comparison is not None
            else resolve_spec(cfg, arm_a, arm_b, None))
    plan = plan_probe(cfg, spec, mutations or None)
    def analysis(results: RunResults) -> ProbeReport:
        result = judged(plan, results, ProbeReport)
        outputs.write_probe(result)
        return result

    return analysed(plan, opts, outputs.PROBE_REPORTS, analysis)


def sweep(comparison: str, *, config: ConfigLike = None, seeds: int = 1,
          options: RunOptions | None = None, **keywords: Unpack[RunKeywords]) -> SweepReport:
    """Run a comparison over inputs generated to reach what its toggle is about
    (difftest.flow.sweep): each input a run of both arms with reference-runner arguments
    added, judged as the comparison is; `seeds` runs each input under that many seeds."""
    cfg = _config(config)
    spec = cfg.comparison(comparison)
    opts = run_options(keywords, options)
    if seeds < 1:
        raise UsageError(f"seeds must be >= 1, got {seeds}")
    return _swept(cfg, spec, seeds, opts)


def _swept(cfg: Config, spec: ComparisonSpec, seeds: int, opts: RunOptions,
           until: float | None = None) -> SweepReport:
    """The sweep of one comparison; with `until` (a time.monotonic() value) no input starts
    after it, and those left are reported as not run."""
    from difftest.flow import sweep as sw

    def spent() -> bool:
        return until is not None and time.monotonic() >= until

    classes = sw.sweep_classes(spec)
    eos: dict[int, sw.EosIds] = {}
    for seed in range(seeds) if sw.needs_eos(classes) else ():
        if spent():
            break
        # ids this seed's input commits, to end its requests at (inside a block, on a bonus)
        first = run_comparison(sw.with_args(cfg, spec, ("--seed", str(seed))), spec,
                               options=opts)
        t = first.arm_a.trace
        eos[seed] = sw.EosIds() if t is None else sw.eos_ids_of(
            [(t.requests[int(t.verifies.req[i])], [int(x) for x in t.verifies.emit(i)])
             for i in range(len(t.verifies))])

    def judge(item: sw.SweepInput) -> sw.InputRun:
        varied = sw.with_args(cfg, spec, item.args)
        rep = run_comparison(varied, spec, options=opts)
        return sw.InputRun(rep.verdict, (spec.arm_a, spec.arm_b), rep.arm_a.trace,
                           rep.arm_b.trace)

    items = sw.interleaved(sw.inputs_for(classes, tuple(range(seeds)), eos))
    outcomes, unrun = sw.run_sweep(items, judge, spent)
    return sw.SweepReport(spec.name, outcomes, classes, unrun)


def _check_sweeps(cfg: Config, names: Sequence[str], opts: RunOptions
                 ) -> tuple[SweepReport, ...]:
    """`[check] sweep = true`: each of these comparisons that is about some state
    (difftest.flow.sweep.sweepable) swept in turn, each given an equal share of the budget
    that is left when it starts."""
    from difftest.flow import sweep as sw

    settings = cfg.check
    specs = [cfg.comparison(n) for n in names if sw.sweepable(cfg.comparison(n))]
    end = time.monotonic() + settings.sweep_budget_s
    out = []
    for i, spec in enumerate(specs):
        now = time.monotonic()
        until = now + max(end - now, 0.0) / (len(specs) - i)
        out.append(_swept(cfg, spec, settings.sweep_seeds, opts, until))
    return tuple(out)


@dataclass(frozen=True)
class AuditReport:
    """One trace and its audit: could a comparison through it ever have failed?"""

    trace: ArmTrace
    audit: TraceAudit

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.audit.informative else ExitCode.UNINFORMATIVE


def audit(trace: Path | str, *, config: ConfigLike = None, min_distinct_ids: int | None = None,
          min_entropy_bits: float | None = None,
          max_blind_radius: float | None = None,
          line_prefix: str | None = None) -> AuditReport:
    """Audit one captured trace with the config's [audit] thresholds and these overrides."""
    from difftest.analysis.audit import audit_trace
    from difftest.trace import parse_trace

    base = _config(config).audit
    try:
        th = replace(
            base,
            min_distinct_ids=base.min_distinct_ids if min_distinct_ids is None else min_distinct_ids,
            min_entropy_bits=base.min_entropy_bits if min_entropy_bits is None else min_entropy_bits,
            max_blind_radius=base.max_blind_radius if max_blind_radius is None else max_blind_radius)
    except InvalidValue as exc:
        raise UsageError(f"{OVERRIDES}: audit threshold {exc.key}: {exc.why}") from None
    parsed = parse_trace(Path(trace), require_lines=True, line_prefix=line_prefix)
    return AuditReport(parsed, audit_trace(parsed, th))


def parse(trace: Path | str, *, line_prefix: str | None = None) -> ArmTrace:
    """The parsed events of one captured trace."""
    from difftest.trace import parse_trace

    return parse_trace(Path(trace), require_lines=True, line_prefix=line_prefix)


class BisectKeywords(RunKeywords, total=False):
    """`bisect`'s keywords besides its ends: how arms run at each commit, the per-commit test
    (difftest.bisect.evidence.Sequential) and how the arms run."""

    mode: Mode | str
    baseline: str | None
    flake_rate: float
    error_rate: float
    max_runs: int


def bisect(comparison: str | None = None, *, good: str | None = None, bad: str | None = None,
           config: ConfigLike = None, repo: Path | str | None = None,
           resume: Path | str | None = None, options: RunOptions | None = None,
           **keywords: Unpack[BisectKeywords]) -> BisectResult:
    """The first commit between `good` and `bad` at which the comparison fails its expectation
    (or, with `resume`, continue a bisect from its directory). Writes bisect.json, bisect.md and
    bisect.html into the bisect's directory."""
    from difftest.bisect import Mode, resume_bisect, start_bisect
    from difftest.bisect.engine import Ends
    from difftest.bisect.evidence import Sequential
    from difftest.report import bisect_report

    search: dict[str, object] = {"mode": Mode.WITHIN, "baseline": None, "flake_rate": 0.0,
                                 "error_rate": 0.01, "max_runs": 15}
    # the API draws no progress unless asked (RunOptions passed whole say so themselves)
    run: dict[str, object] = {"progress": False} if options is None else {}
    for key, value in keywords.items():
        (search if key in search else run)[key] = value
    opts = run_options(run, options)
    if resume is not None:
        if comparison is not None or good is not None or bad is not None:
            raise UsageError("--resume continues a bisect as it was planned: give no "
                             "comparison, --good or --bad with it")
        result = resume_bisect(Path(resume), jobs=opts.jobs, progress=opts.progress)
    else:
        if comparison is None or good is None or bad is None:
            raise UsageError("a bisect needs a comparison (-c NAME), --good REF and --bad REF "
                             "(or --resume DIR)")
        try:
            how = Mode(str(search["mode"]))
        except ValueError:
            raise UsageError(f"--mode must be within or against, got {search['mode']!r}") from None
        test = Sequential(search["flake_rate"], search["error_rate"],  # type: ignore[arg-type]
                          search["max_runs"])  # type: ignore[arg-type]
        baseline = search["baseline"]
        ends = Ends(good, bad, how, str(baseline) if baseline is not None else None,
                    Path(repo) if repo is not None else None)
        result = start_bisect(_config(config), comparison, ends, test, opts)
    bisect_report.write_all(result)
    return result


def cache_folder(cache: Path | None = None, config: ConfigLike = None) -> Path:
    """The checkout cache a command uses: `cache` when given (no config is read), else the
    config's [defaults] cache, else $DIFFTEST_CACHE, else ~/.cache/difftest."""
    from difftest.execute.worktree import default_cache_dir

    if cache is not None:
        return Path(cache)
    return _config(config).defaults.cache or default_cache_dir()


def cache_list(cache: Path | None = None, config: ConfigLike = None
               ) -> tuple[Path, list[CacheEntry]]:
    """The checkout cache a command uses (`cache_folder`) and every checkout difftest keeps
    in it."""
    from difftest.execute.worktree import list_cache

    where = cache_folder(cache, config)
    return where, list_cache(where)


def cache_prune(cache: Path | None = None, config: ConfigLike = None, *,
                older_than: float = 14.0) -> PruneResult:
    """Remove broken checkouts and those unused for `older_than` days (0: every one not in
    use now), only ones difftest made."""
    from difftest.execute.worktree import prune_cache

    return prune_cache(cache_folder(cache, config), max_age_days=older_than)


def calibrate(comparison: str, *, config: Config | Path | str | None = None,
              run_root: Path | None = None, progress: bool | None = None,
              jobs: int | None = None) -> Calibration:
    """Measure a comparison's thresholds on its held-out calibration_inputs and write its
    thresholds file (the config is read without it: it is what this replaces)."""
    from difftest.flow.calibrate import calibrate as measure

    cfg = config if isinstance(config, Config) else load_config(
        None if config is None else Path(config), unread_thresholds=comparison)
    return measure(cfg, cfg.comparison(comparison), run_root=run_root, progress=progress,
                   jobs=jobs)


def localize(run_dir: Path | str | None = None, *, at: str | None = None,
             dumps: tuple[Path, Path] | None = None, atol: float | None = None,
             comparison: str | None = None, baseline: str | None = None,
             config: Path | None = None) -> LocalizeReport | RunLocalization:
    """The first draft-forward module whose output differs between two arms (beyond a
    baseline's, where one is named): of two capture folders (`dumps`; `baseline` a third
    one), or of a judged run's arms rerun with capture at one step (`at`, by default the
    first differing one; `baseline` an arm of `config`), which writes the figure beside the
    captures."""
    from difftest.flow import localize as loc
    from difftest.report.outputs import NotWritten, write_localization

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
        return loc.localize_dumps(dumps[0], dumps[1], atol or 0.0,
                                  Path(baseline) if baseline is not None else None)
    assert run_dir is not None
    result = loc.localize_run(Path(run_dir), loc.parse_at(at) if at is not None else None,
                              atol, comparison, baseline, config)
    try:
        write_localization(result)
    except NotWritten as exc:
        raise NotWritten(list(exc.failures), result) from None
    return result


# The records the API returns, and `read_diff`, by where they live: loaded on first use.
_LAZY = {"BisectResult": "difftest.bisect", "CheckResult": "difftest.flow.judge",
         "ComparisonReport": "difftest.flow.evaluate", "NoiseReport": "difftest.flow.judge",
         "ProbeReport": "difftest.flow.scoring", "Verdict": "difftest.analysis.verdict",
         "read_diff": "difftest.report.diffread"}


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'difftest.api' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
