"""Running a plan: `run(plan, options)` starts every arm the plan names, each once, into one
fresh run directory whose meta.json holds the plan's record before any arm starts. It is the
one place a plan's arms are started: teacher forcing's second phase (arm B on arm A's committed
stream) and the rounds of `--until-decided` the plan names (each run while the sequential test
has not decided) run here too, into the same directory. Nothing else here judges:
`difftest.flow.judge` reads what ran.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from difftest.config import ArmSpec, Config
from difftest.core.errors import (DifftestError, InternalError, InterruptedAnalysis,
                                  InterruptedRun, UsageError)
from difftest.core.force import FORCE_ENV, FORCE_NAME, committed_stream, write_force_file
from difftest.core.atomic import write_json_atomic
from difftest.core.limits import MAX_JOBS
from difftest.execute import (META_NAME, ArmResult, ArmsEnded, JobLimits, load_run, new_run_dir,
                              run_arms, signal_of, signals_as_interrupts)
from difftest.execute.records import record_stopped
from difftest.flow.evaluate import outcome
from difftest.flow.overrides import RunOptions
from difftest.flow.plan import Plan
from difftest.flow.sequential_runs import (SampledRounds, SampledRun, SequentialRun,
                                          SequentialTest)
from difftest.trace import parse_trace


@dataclass(frozen=True)
class RunResults:
    """What a run of a plan left: its directory and each arm's result, once (by the name the
    plan gave it); when it began (ISO 8601 UTC, and on the monotonic clock, so a judge can
    give the wall time of the whole command); under `--until-decided`, what the rounds after
    the first left (None: no round ran, an arm of the first run failed)."""

    run_dir: Path
    arms: Mapping[str, ArmResult]
    started_at: str | None = None
    started: float | None = None
    sequential: SequentialRun | SampledRun | None = None


def run(plan: Plan, options: RunOptions | None = None) -> RunResults:
    """Run every arm of a plan once into a fresh run directory, its record in meta.json. The
    checkout cache: the options', else the config's [defaults] cache. A check plan runs its
    arms at most `options.jobs` at a time (see `job_limits`); other plans run theirs at once."""
    options = options or RunOptions()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    cache = options.cache or plan.cache
    limits = (JobLimits(total=plan.jobs) if plan.jobs is not None
              else None if plan.launched_jobs is None
              else limits_of(plan.launched_jobs, options.jobs))
    if options.into is not None:
        if plan.teacher_force or plan.rounds is not None:
            raise InternalError("a plan run in two phases or rounds runs into a run directory "
                                "of its own")
        run_dir = options.into
        results = _start(plan.arms, run_dir, progress=options.progress, cache_dir=cache,
                         limits=limits, record=plan.record())
    elif plan.teacher_force:
        run_dir, results = _run_forced(plan, options, cache)
    else:
        run_dir, results = run_arm_set(plan.arms, run_root=options.run_root, label=plan.label,
                                       progress=options.progress, cache_dir=cache,
                                       limits=limits, record=plan.record())
    rounds = None
    if plan.rounds is not None:
        results, rounds = _until_decided(plan, options, run_dir, results, cache)
    return RunResults(run_dir, results, started_at, started, rounds)


def _until_decided(plan: Plan, options: RunOptions, run_dir: Path,
                   results: dict[str, ArmResult], cache: Path | None
                   ) -> tuple[dict[str, ArmResult], SequentialRun | SampledRun | None]:
    """The rounds the plan names, run one after another into the run directory while the
    sequential test (a sampled comparison's: its distribution instrument) has not decided;
    an arm that fails in a round ends them."""
    assert plan.rounds is not None
    spec = plan.judged[0].spec
    a0, b0 = (outcome(n, results[n].stderr_path, results[n], plan.audit)
              for n in (spec.arm_a, spec.arm_b))
    if a0.trace is None or b0.trace is None:
        return results, None  # an arm failed: reported as such
    design = plan.rounds.design
    test: SampledRounds | SequentialTest
    if design is None:  # a sampled comparison: A's reruns are draws of A too
        reruns = [outcome(n, results[n].stderr_path, results[n], plan.audit)
                  for n in plan.judged[0].reruns if n in results]
        if any(o.trace is None for o in reruns):
            return results, None  # a rerun failed: reported as such
        test = SampledRounds(plan.rounds.max_runs, [a0, *reruns], b0)
    else:
        test = SequentialTest(design, a0.trace, b0.trace)
    while (r := test.next_round) is not None:
        pair = plan.rounds.arms[r - 2]
        more = run_more(run_dir, list(pair), progress=options.progress, cache_dir=cache)
        results = {**results, **more}
        a, b = (outcome(arm.name, more[arm.name].stderr_path, more[arm.name], plan.audit)
                for arm in pair)
        failures = tuple(o.failure for o in (a, b) if o.failure is not None)
        if failures:
            return results, (SampledRun(plan.rounds.max_runs, failures=failures)
                             if design is None else SequentialRun(None, failures))
        assert a.trace is not None and b.trace is not None
        if isinstance(test, SampledRounds):
            test.add(a, b)
        else:
            test.add(a.trace, b.trace)
    if isinstance(test, SampledRounds):
        return results, test.result()
    return results, SequentialRun(test.result(plan.rounds.inputs))


def job_limits(config: Config, jobs: int | None) -> JobLimits:
    """-j N caps all arms at N; by default local arms are capped at the CPU count and arms run
    through a launcher at [defaults] launched_jobs (the cluster, not this machine, runs them)."""
    return limits_of(config.defaults.launched_jobs, jobs)


def limits_of(launched_jobs: int, jobs: int | None) -> JobLimits:
    if jobs is not None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
            raise UsageError(f"--jobs must be an integer from 1 to {MAX_JOBS}, got {jobs!r}")
        return JobLimits(total=jobs)
    return JobLimits(local=os.cpu_count() or 1, launched=launched_jobs)


def run_arm_set(arms: Sequence[ArmSpec], *, run_root: Path | None = None, label: str = "",
                progress: bool | None = None, cache_dir: Path | None = None,
                limits: JobLimits | None = None,
                record: Mapping[str, object] | None = None) -> tuple[Path, dict[str, ArmResult]]:
    """Run arms concurrently (up to `limits`) into a fresh run directory; `record`: the
    run's plan record (difftest.flow.plan)."""
    run_dir = new_run_dir(run_root, label=label)
    try:
        results = _start(arms, run_dir, progress=progress, cache_dir=cache_dir, limits=limits,
                         record=record)
    except ArmsEnded:
        raise  # the arms' record is complete: the analysis reports the signal
    except KeyboardInterrupt as exc:
        raise InterruptedRun(run_dir, signal_of(exc)) from None
    return run_dir, results


def _run_forced(plan: Plan, options: RunOptions,
                cache_dir: Path | None) -> tuple[Path, dict[str, ArmResult]]:
    """Teacher forcing: arm A (and its reruns) first, then B on A's committed stream, given in
    DIFFTEST_FORCE. One run directory and one meta.json hold both phases. When A failed or
    printed nothing usable, B still runs free so the failure is reported as usual."""
    spec = plan.judged[0].spec
    first = [a for a in plan.arms if a.name != spec.arm_b]
    arm_a, arm_b = plan.arms[0], next(a for a in plan.arms if a.name == spec.arm_b)
    run_dir, results = run_arm_set(first, run_root=options.run_root, label=plan.label,
                                   progress=options.progress, cache_dir=cache_dir,
                                   record=plan.record())
    env = dict(arm_b.env)
    a = results[arm_a.name]
    if a.failure() is None:
        try:
            trace = parse_trace(a.stderr_path)
        except DifftestError:  # judged (and reported) with A's outcome
            trace = None
        if trace is not None and len(trace.verifies):
            env[FORCE_ENV] = str(write_force_file(committed_stream(trace),
                                                  run_dir / FORCE_NAME).resolve())
    second = run_more(run_dir, [arm_b.with_changes(env=env)], progress=options.progress,
                      cache_dir=cache_dir)
    return run_dir, {**results, **second}


def run_more(run_dir: Path, arms: list[ArmSpec], *, progress: bool | None,
             cache_dir: Path | None) -> dict[str, ArmResult]:
    """More arms run into an existing run directory (teacher forcing's second phase, a
    sequential round): meta.json keeps every earlier arm, the run's metadata and plan record,
    and when the run was created."""
    _, before = load_run(run_dir)
    try:
        results = _start(arms, run_dir, progress=progress, cache_dir=cache_dir,
                         record=before.get("plan"))
    except KeyboardInterrupt as exc:
        _keep_earlier_arms(run_dir, before)  # an interrupted round keeps the rounds before it
        if isinstance(exc, ArmsEnded):
            raise
        raise InterruptedRun(run_dir, signal_of(exc)) from None
    _keep_earlier_arms(run_dir, before)
    return results


def _start(arms: Sequence[ArmSpec], run_dir: Path, *, progress: bool | None,
           cache_dir: Path | None, limits: JobLimits | None = None,
           record: Mapping[str, object] | None = None) -> dict[str, ArmResult]:
    """The one call of the arm runner (`difftest.execute.run_arms`) in the package: every arm
    any command runs starts here (`tests/test_one_path.py` holds it so)."""
    return run_arms(arms, run_dir, progress=progress, cache_dir=cache_dir, limits=limits,
                    plan=record)


def _keep_earlier_arms(run_dir: Path, before: dict[str, object]) -> None:
    """meta.json as the arms just run left it, with the arms recorded before them."""
    _, after = load_run(run_dir)
    after["arms"] = {**before["arms"], **after["arms"]}  # type: ignore[dict-item]
    after["created_at"] = before.get("created_at", after.get("created_at"))
    write_json_atomic(run_dir / META_NAME, after)


T = TypeVar("T")


def analysed(plan: Plan, options: RunOptions | None, reports: Sequence[str],
             analysis: Callable[[RunResults], T]) -> T:
    """Run a plan's arms, then its analysis (judging them, writing the run directory's
    `reports`). SIGTERM, SIGHUP or Ctrl-C after the arms ended ends the analysis as it ends
    the arms: InterruptedAnalysis (exit 143, 129, 130), meta.json's status saying so, the
    reports already complete kept (each is written whole or not at all) and the rest named."""
    results: RunResults | None = None
    try:
        with signals_as_interrupts():  # from the arms' end on: run_arms has its own before
            results = run(plan, options)
            return analysis(results)  # a signal dropped meanwhile is raised at the block's end
    except KeyboardInterrupt as exc:
        run_dir = results.run_dir if results is not None else (
            exc.run_dir if isinstance(exc, ArmsEnded) else None)
        if run_dir is None:
            raise
        signum = signal_of(exc)
        record_stopped(run_dir, signum, "analysis")
        kept = [r for r in reports if (run_dir / r).is_file()]
        missing = [r for r in reports if r not in kept]
        raise InterruptedAnalysis(run_dir, signum, kept, missing) from None
