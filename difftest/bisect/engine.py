"""The bisect itself: confirm both ends, then test commits between the bounds until the first
bad commit (or the smallest range the skips allow) is left; every run is logged as it is judged,
so `resume` continues an interrupted bisect without running anything twice."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from difftest.bisect import journal
from difftest.bisect.evidence import (
    Decision, Sequential, Tally, mass, per_decision, posterior,
)
from difftest.bisect.history import Commit, commit_line, diff_stat
from difftest.bisect.journal import Plan
from difftest.bisect.search import Bounds, bounds, next_tests
from difftest.bisect.trial import Mode, Observation, Setup, rederive, run_round
from difftest.config import Config, load_config
from difftest.core.errors import ExitCode, InterruptedRun, UsageError
from difftest.execute import new_run_dir, signal_of, signals_as_interrupts
from difftest.core.gitinfo import git_toplevel
from difftest.flow.evaluate import thresholds_of
from difftest.flow.overrides import RunOptions


class BisectInterrupted(InterruptedRun):
    """Ctrl-C, SIGTERM or SIGHUP during a bisect: the arms were stopped, the log keeps every run
    judged so far, and `--resume` continues from there."""

    def __init__(self, bisect_dir: Path, signum: int) -> None:
        super().__init__(bisect_dir, signum)
        self.args = (f"{self.args[0]}; continue with: difftest bisect --resume {bisect_dir}",)


class Status(StrEnum):
    FOUND = "found"  # one commit named
    RANGE = "range"  # skipped commits next to the boundary: a range of candidates
    UNCONFIRMED = "ends-unconfirmed"  # the good end fails or the bad end passes (or no verdict)


@dataclass(frozen=True)
class CommitRecord:
    """A tested commit in the report: what its runs read and what they decided."""

    commit: Commit
    decision: Decision
    tally: Tally
    verdicts: tuple[str, ...]
    reasons: tuple[str, ...]  # why runs were skipped (each reason once)
    run_dirs: tuple[str, ...]
    first_run_at: str
    duration_s: float


@dataclass(frozen=True)
class BisectResult:
    run_dir: Path
    plan: Plan
    status: Status
    message: str
    first_bad: Commit | None
    last_good: Commit | None
    candidates: tuple[Commit, ...]  # where the first bad commit is (one when found)
    confidence: float | None  # posterior mass of the candidates under the stated flake rate
    decision_error: float  # the chance that one commit's decision is wrong (flaky arms)
    diff_stat: str
    tested: tuple[CommitRecord, ...]
    arm_runs: int
    comparisons: int
    notes: tuple[str, ...] = ()
    decisions: int = 0  # commits decided good or bad: a wrong one could mislead the search

    @property
    def error_bound(self) -> float:
        """Union bound on any decision of this bisect being wrong (flaky arms; 0 when the arms
        are taken as deterministic)."""
        return min(1.0, self.decisions * self.decision_error)

    @property
    def exit_code(self) -> ExitCode:
        """0 when a commit or a bounded range was found; 3 when the ends were not confirmed
        (the same code as an uninformative comparison: nothing was shown either way)."""
        return ExitCode.UNINFORMATIVE if self.status is Status.UNCONFIRMED else ExitCode.OK


def _repo_of(config: Config, arms: Sequence[str], repo: Path | None) -> Path:
    if repo is not None:
        return Path(os.path.abspath(repo))
    for name in arms:
        arm = config.arm(name)
        if arm.git_ref is not None and arm.repo is not None:
            return Path(arm.repo)
    top = git_toplevel(Path.cwd())
    if top is None:
        raise UsageError("no repository to bisect: run inside one, or name it with --repo")
    return top


@dataclass(frozen=True)
class Ends:
    """What a bisect searches between: a good and a bad commit, how the arms run at each tested
    commit (`mode`, and the arm that stays put against it), and the repository."""

    good: str
    bad: str
    mode: Mode = Mode.WITHIN
    baseline: str | None = None
    repo: Path | None = None


def start_bisect(config: Config, comparison: str, ends: Ends, test: Sequential,
                 options: RunOptions) -> BisectResult:
    """Search the first-parent history from `ends.good` to `ends.bad` for the first commit at
    which the configured comparison fails its expectation, each commit judged by `test`."""
    good, bad, mode, baseline, repo = ends.good, ends.bad, ends.mode, ends.baseline, ends.repo
    flake_rate, error_rate, max_runs = test.flake_rate, test.error_rate, test.max_runs
    jobs = 1 if options.jobs is None else options.jobs
    run_root, progress, cache_dir = options.run_root, options.progress, options.cache
    if isinstance(jobs, bool) or jobs < 1:
        raise UsageError(f"-j must be at least 1, got {jobs}")
    spec = config.comparison(comparison)
    if baseline is not None and mode is not Mode.AGAINST:
        raise UsageError("--baseline names the arm that stays put: it needs --mode against")
    arm_a = baseline or spec.arm_a
    config.arm(arm_a)
    where = _repo_of(config, [spec.arm_b, arm_a], repo)
    commits = commit_line(where, good, bad)
    cache = cache_dir or config.defaults.cache
    plan = Plan(config=str(Path(config.path).resolve()), comparison=spec.name, arm_a=arm_a,
                arm_b=spec.arm_b, mode=mode, baseline=baseline, repo=str(where), good=good,
                bad=bad, commits=tuple(commits), flake_rate=float(flake_rate),
                error_rate=float(error_rate), max_runs=int(max_runs), jobs=int(jobs),
                cache_dir=str(cache) if cache is not None else None,
                config_digest=journal.digest(config.path))
    bisect_dir = new_run_dir(run_root, label=f"bisect-{spec.name}")
    journal.write_plan(bisect_dir, plan)
    return _drive(bisect_dir, plan, config, [], [], progress, jobs)


def resume_bisect(bisect_dir: Path, *, jobs: int | None = None,
                  progress: bool | None = False) -> BisectResult:
    """Continue a bisect from its directory: the logged runs count, only what is missing runs."""
    bisect_dir = Path(bisect_dir)
    plan = journal.read_plan(bisect_dir)
    config = load_config(Path(plan.config))
    _same_commit_line(bisect_dir, plan)
    numbered, notes = journal.read_log_lines(bisect_dir, plan)
    observations = [obs for _n, obs in numbered]
    rederive(_setup(plan, config, progress), bisect_dir,
             [(f"{bisect_dir / journal.LOG}:{n}", obs) for n, obs in numbered])
    if plan.config_digest and journal.digest(Path(plan.config)) != plan.config_digest:
        notes.append(f"{plan.config} changed since the bisect started: the runs before and "
                     "after the resume may not run the same arms")
    # rewritten in this version's format: the rounds it adds hold records that a difftest
    # reading only the plan's older format would take for damaged ones
    journal.write_plan(bisect_dir, plan)
    return _drive(bisect_dir, plan, config, observations, notes, progress,
                  plan.jobs if jobs is None else jobs)


def _same_commit_line(bisect_dir: Path, plan: Plan) -> None:
    """The plan's commit line as the repository has it between the same two ends: a line cut,
    reordered or edited in plan.json would name the wrong commit."""
    if not plan.commits:
        raise UsageError(f"{bisect_dir / journal.PLAN}: key 'commits' is empty")
    line = commit_line(Path(plan.repo), plan.commits[0].sha, plan.commits[-1].sha)
    shas = [c.sha for c in line]
    for i, commit in enumerate(plan.commits):
        if i >= len(shas) or shas[i] != commit.sha:
            got = shas[i][:10] if i < len(shas) else "nothing"
            raise UsageError(f"{bisect_dir / journal.PLAN}: key 'commits' entry {i} is "
                             f"{commit.sha[:10]}, the repository's first-parent line from "
                             f"{shas[0][:10]} has {got} there: the plan was edited or the "
                             "history rewritten; not resumed")
    if len(shas) != len(plan.commits):
        raise UsageError(f"{bisect_dir / journal.PLAN}: key 'commits' lists {len(plan.commits)} "
                         f"commits, the repository's first-parent line between its ends "
                         f"{len(shas)}: the plan was edited; not resumed")


def _setup(plan: Plan, config: Config, progress: bool | None) -> Setup:
    spec = config.comparison(plan.comparison)
    return Setup(spec=spec, arm_a=config.arm(plan.arm_a), arm_b=config.arm(plan.arm_b),
                 mode=plan.mode, repo=Path(plan.repo), good_sha=plan.commits[0].sha,
                 thresholds=thresholds_of(config), baseline=plan.baseline is not None,
                 cache_dir=Path(plan.cache_dir) if plan.cache_dir else None, progress=progress)


def _test(plan: Plan) -> Sequential:
    """The per-commit test: the bisect-wide error rate split over the planned decisions."""
    n = len(plan.commits) - 1
    return Sequential(plan.flake_rate, per_decision(plan.error_rate, n), plan.max_runs)


def _tallies(observations: Sequence[Observation]) -> dict[int, Tally]:
    out: dict[int, Tally] = {}
    for obs in observations:
        out[obs.index] = out.get(obs.index, Tally()).add(obs.reading, obs.unbuildable)
    return out


def _end_tests(test: Sequential, decisions: Mapping[int, Decision],
               tallies: Mapping[int, Tally], n: int, jobs: int) -> list[int]:
    """Runs that confirm the ends: the bad end first (a failure that does not reproduce is the
    commonest way a bisect goes wrong), then the good end."""
    out: list[int] = []
    for i in (n, 0):
        if decisions.get(i, Decision.PENDING) is Decision.PENDING:
            want = test.runs_to_decide(tallies.get(i, Tally()))
            out += [i] * min(want, jobs - len(out))
    return out


def _drive(bisect_dir: Path, plan: Plan, config: Config, observations: list[Observation],
           notes: list[str], progress: bool | None, jobs: int) -> BisectResult:
    if isinstance(jobs, bool) or jobs < 1:
        raise UsageError(f"-j must be at least 1, got {jobs}")
    setup = _setup(plan, config, progress)
    test = _test(plan)
    rounds = len({o.run_dir for o in observations})
    try:
        with signals_as_interrupts():
            decisions, tallies = _loop(bisect_dir, plan, setup, test, observations, rounds, jobs)
    except KeyboardInterrupt as exc:
        raise BisectInterrupted(bisect_dir, signal_of(exc)) from None
    return _result(bisect_dir, plan, test, observations, decisions, tallies, notes)


def _loop(bisect_dir: Path, plan: Plan, setup: Setup, test: Sequential,
          observations: list[Observation], rounds: int, jobs: int
          ) -> tuple[dict[int, Decision], dict[int, Tally]]:
    """Rounds until the ends fail to confirm or nothing is left to test; the final decisions."""
    n = len(plan.commits) - 1
    while True:
        tallies = _tallies(observations)
        decisions = {i: test.decide(t) for i, t in tallies.items()}
        ends = (decisions.get(0, Decision.PENDING), decisions.get(n, Decision.PENDING))
        if ends[0] not in (Decision.PENDING, Decision.GOOD) or \
                ends[1] not in (Decision.PENDING, Decision.BAD):
            break
        if Decision.PENDING in ends:
            tests = _end_tests(test, decisions, tallies, n, jobs)
        else:
            tests = next_tests(bounds(n, decisions), decisions, tallies, test, jobs)
            if not tests:
                break
        rounds += 1
        got = run_round(setup, [plan.commits[i] for i in tests], bisect_dir / journal.RUNS,
                        f"round{rounds:03d}", jobs)
        journal.append(bisect_dir, got)
        observations += got
        if setup.progress is not False:
            said = ", ".join(f"#{o.index} {o.commit_short} {o.verdict}" for o in got)
            print(f"difftest: bisect round {rounds}: {said}", file=sys.stderr, flush=True)
    return decisions, tallies


def _records(plan: Plan, observations: Sequence[Observation], test: Sequential
             ) -> tuple[CommitRecord, ...]:
    by: dict[int, list[Observation]] = {}
    for obs in observations:
        by.setdefault(obs.index, []).append(obs)
    out = []
    for i in sorted(by):
        runs = by[i]
        tally = _tallies(runs)[i]
        out.append(CommitRecord(
            commit=plan.commits[i], decision=test.decide(tally), tally=tally,
            verdicts=tuple(o.verdict for o in runs),
            reasons=tuple(dict.fromkeys(o.reason for o in runs if o.reading.value == "skip")),
            run_dirs=tuple(dict.fromkeys(o.run_dir for o in runs)),
            first_run_at=runs[0].started_at,
            duration_s=round(sum(o.duration_s for o in runs), 3)))
    return tuple(out)


def _end_problem(which: str, ref: str, commit: Commit, decision: Decision,
                 record: CommitRecord | None) -> str | None:
    tally = record.tally if record is not None else Tally()
    counts = f"{tally.bad} failed, {tally.good} passed, {tally.skip} gave no verdict"
    if which == "bad" and decision is Decision.GOOD:
        return (f"the bad end --bad {ref} ({commit.short}) passes ({counts}): the failure does "
                "not reproduce there, so no commit is named. Check the ref and the comparison; "
                "if it fails only sometimes, state how often a run reads wrong with "
                "--flake-rate")
    if which == "good" and decision is Decision.BAD:
        return (f"the good end --good {ref} ({commit.short}) fails too ({counts}): the first "
                "bad commit is older than it; give an older --good")
    if decision is Decision.SKIPPED:
        why = "; ".join(record.reasons) if record is not None else ""
        return (f"the {which} end --{which} {ref} ({commit.short}) could not be judged "
                f"({counts}): {why}")
    return None


def _result(bisect_dir: Path, plan: Plan, test: Sequential, observations: Sequence[Observation],
            decisions: Mapping[int, Decision], tallies: Mapping[int, Tally],
            notes: Sequence[str]) -> BisectResult:
    records = _records(plan, observations, test)
    by_index = {r.commit.index: r for r in records}
    n = len(plan.commits) - 1
    base = BisectResult(run_dir=bisect_dir, plan=plan, status=Status.UNCONFIRMED, message="",
                        first_bad=None, last_good=None, candidates=(), confidence=None,
                        decision_error=test.decision_error, diff_stat="", tested=records,
                        decisions=sum(r.decision in (Decision.GOOD, Decision.BAD)
                                      for r in records),
                        arm_runs=sum(o.arm_runs for o in observations),
                        comparisons=sum(o.arm_runs > 0 for o in observations),
                        notes=tuple(notes))
    problems = [p for p in (
        _end_problem("bad", plan.bad, plan.commits[n], decisions.get(n, Decision.PENDING),
                     by_index.get(n)),
        _end_problem("good", plan.good, plan.commits[0], decisions.get(0, Decision.PENDING),
                     by_index.get(0))) if p is not None]
    if problems:
        return replace(base, message="; ".join(problems))
    b: Bounds = bounds(n, decisions)
    candidates = plan.commits[b.lo + 1: b.hi + 1]
    post = posterior(n, tallies, plan.flake_rate)
    confidence = mass(post, [c.index for c in candidates]) if post is not None else None
    more = list(notes) + list(b.notes)
    if post is None:
        more.append("no single first bad commit explains every reading (deterministic arms "
                    "that read non-monotonically): the arms may be flaky; state --flake-rate")
    more += _flake_note(records, plan.flake_rate)
    stat = diff_stat(Path(plan.repo), plan.commits[b.lo].sha, plan.commits[b.hi].sha)
    if len(candidates) == 1:
        status, first = Status.FOUND, candidates[0]
        message = f"first bad commit: {first.sha} {first.subject}"
    else:
        status, first = Status.RANGE, None
        message = (f"the first bad commit is one of {len(candidates)} commits "
                   f"{candidates[0].short}..{candidates[-1].short}: the commits before "
                   f"{candidates[-1].short} in that range could not be judged")
    return replace(base, status=status, message=message, first_bad=first,
                   last_good=plan.commits[b.lo], candidates=tuple(candidates),
                   confidence=confidence, diff_stat=stat, notes=tuple(more))


def _flake_note(records: Sequence[CommitRecord], flake_rate: float) -> list[str]:
    """How often runs read against their commit's decision: the flake rate the data shows."""
    against = total = 0
    for r in records:
        if r.decision is Decision.GOOD:
            against += r.tally.bad
        elif r.decision is Decision.BAD:
            against += r.tally.good
        else:
            continue
        total += r.tally.good + r.tally.bad
    if not total or not against:
        return []
    seen = against / total
    warn = (" — more than the stated flake rate can explain (binomial tail < 1%): the "
            "decisions' error bound does not hold; state a higher --flake-rate"
            if flake_rate > 0 and _tail(against, total, flake_rate) < 0.01 else "")
    if flake_rate == 0:
        warn = " — the arms are not deterministic: state --flake-rate"
    return [f"{against} of {total} run(s) read against their commit's decision "
            f"({seen:.0%}){warn}"]


def _tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return float(sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1)))
