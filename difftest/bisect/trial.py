"""One round of a bisect: the comparison run at a few commits side by side, each run read as
good, bad or skip. The arms are the configured ones, placed at the commit under test (both arms
`within`, arm B only `against`); checkouts and builds come from the sha-keyed worktree cache,
and arms keep their launcher, so -j N through `srun` runs N commits on the cluster at once."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from difftest.analysis.audit import AuditThresholds
from difftest.bisect.evidence import Reading
from difftest.bisect.history import Commit
from difftest.config import ArmSpec, ComparisonSpec
from difftest.core.errors import DifftestError, ExitCode, UsageError
from difftest.core.names import at_commit, second_run
from difftest.execute import ArmResult, load_run, new_run_dir
from difftest.execute.gitprep import git_placement
from difftest.analysis.floor import reruns
from difftest.flow.evaluate import evaluate, outcomes_from_run, rerun_outcomes
from difftest.flow.overrides import RunOptions
from difftest.flow.plan import Plan, PlanKind, judged_record, spec_from, spec_meta
from difftest.flow.run import run


class Mode(StrEnum):
    """Which arms move with the commit under test."""

    WITHIN = "within"  # both arms run at the tested commit
    AGAINST = "against"  # arm A stays at the good end (or is a fixed baseline arm)


@dataclass(frozen=True)
class Setup:
    """Everything a round needs that does not change between rounds."""

    spec: ComparisonSpec
    arm_a: ArmSpec
    arm_b: ArmSpec
    mode: Mode
    repo: Path
    good_sha: str
    thresholds: AuditThresholds
    baseline: bool = False  # arm A is a configured baseline arm, run as configured
    cache_dir: Path | None = None
    progress: bool | None = False

    @property
    def arms_per_run(self) -> int:
        return 2 + max(0, self.spec.rules.noise_runs - 1)


@dataclass(frozen=True)
class Observation:
    """One run of the comparison at one commit, as the log keeps it."""

    index: int
    sha: str
    subject: str
    reading: Reading
    verdict: str  # PASS, FAIL, UNINFORMATIVE, ARM-FAILED, BUILD-FAILED, REFUSED ...
    reason: str  # why a run was skipped; the first reason of a verdict otherwise
    run_dir: str  # the round's run directory
    started_at: str
    duration_s: float
    arm_runs: int  # arm processes started for this reading
    unbuildable: bool = False

    @property
    def commit_short(self) -> str:
        return self.sha[:10]

    def to_json(self) -> dict[str, object]:
        return {k: (str(v) if isinstance(v, StrEnum) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Observation:
        values = dict(data)
        values["reading"] = Reading(str(values["reading"]))
        return cls(**values)  # type: ignore[arg-type]  # the log is ours; checked by the reader


def place(arm: ArmSpec, sha: str, repo: Path, name: str) -> ArmSpec:
    """The arm run at commit `sha` of `repo`: its git_ref replaced, its cwd kept (relative to
    the checkout)."""
    cwd = arm.cwd
    if arm.git_ref is not None and arm.repo is not None and (
            os.path.realpath(arm.repo) != os.path.realpath(repo)):
        raise UsageError(f"arm {arm.name!r} checks out repository {arm.repo}, the bisect walks "
                         f"{repo}: bisect one repository at a time (--repo)")
    if arm.git_ref is None and cwd is not None and cwd.is_absolute():
        real, top = os.path.realpath(cwd), os.path.realpath(repo)
        if real != top and not real.startswith(top + os.sep):
            raise UsageError(f"arm {arm.name!r} runs in {cwd}, outside the repository {repo}: "
                             "it cannot run at a commit of it")
        cwd = Path(os.path.relpath(real, top))
    return arm.with_changes(name=name, git_ref=sha, repo=repo, cwd=cwd)


def _pair(setup: Setup, commit: Commit, slot: int) -> tuple[ComparisonSpec, list[ArmSpec]]:
    name_a = at_commit(setup.arm_a.name, commit.short, slot)
    name_b = at_commit(setup.arm_b.name, commit.short, slot)
    if name_b == name_a:
        name_b = at_commit(second_run(setup.arm_b.name), commit.short, slot)
    if setup.mode is Mode.WITHIN:
        a = place(setup.arm_a, commit.sha, setup.repo, name_a)
    elif setup.baseline:
        a = setup.arm_a.with_changes(name=name_a)
    else:
        a = place(setup.arm_a, setup.good_sha, setup.repo, name_a)
    b = place(setup.arm_b, commit.sha, setup.repo, name_b)
    spec = replace(setup.spec, name=at_commit(setup.spec.name, commit.short, slot), arm_a=a.name,
                   arm_b=b.name)
    return spec, [a, b, *reruns(a, spec.rules.noise_runs, {b.name})]


def _unbuildable(arms: Sequence[ArmSpec], cache_dir: Path | None) -> str | None:
    """Check out and build each arm's commit before anything runs (once per sha and recipe,
    in the cache); why a commit cannot be built, or None."""
    for arm in arms:
        if arm.git_ref is None:
            continue
        placed = git_placement(arm, cache_dir)
        if placed.error is not None:
            log = f" (build log: {placed.build_log})" if placed.build_log else ""
            said = [line for line in placed.error.splitlines() if line.strip()]
            last = f": {said[-1].strip()}" if len(said) > 1 else ""
            return f"arm {arm.name}: {said[0]}{last}{log}"
    return None


def _read(setup: Setup, spec: ComparisonSpec, typed: Mapping[str, ArmResult],
          run_dir: Path) -> tuple[Reading, str, str]:
    """(reading, verdict label, reason) of one comparison in a finished round."""
    try:
        a, b = outcomes_from_run(typed, (spec.arm_a, spec.arm_b), setup.thresholds)
        report = evaluate(spec, a, b, setup.thresholds, run_dir,
                          rerun_outcomes(typed, spec, setup.thresholds))
    except DifftestError as exc:  # a trace refused by the parser (file and line)
        return Reading.SKIP, "REFUSED", f"trace refused: {exc}"
    verdict = report.verdict
    first = verdict.reasons[0].splitlines()[0] if verdict.reasons else ""
    if verdict.passed:
        return Reading.GOOD, verdict.label, first
    if verdict.exit_code == ExitCode.DIFFER:
        return Reading.BAD, verdict.label, first
    why = "; ".join(r.splitlines()[0] for r in verdict.reasons[:2])
    return Reading.SKIP, verdict.label, f"{verdict.kind.value}: {why}"


def run_round(setup: Setup, tests: Sequence[Commit], runs_root: Path, label: str,
              jobs: int) -> list[Observation]:
    """Run the comparison once per entry of `tests` (a commit may repeat), `jobs` at a time."""
    from difftest.execute import utc_now

    started_at = utc_now()
    clock = time.monotonic()
    run_dir = new_run_dir(runs_root, label=label)
    rel = str(run_dir.relative_to(runs_root.parent)) if runs_root.parent in run_dir.parents \
        else str(run_dir)
    slots: dict[int, int] = {}
    planned: list[tuple[Commit, ComparisonSpec, list[ArmSpec]]] = []
    for commit in tests:
        slots[commit.index] = slots.get(commit.index, 0) + 1
        spec, arms = _pair(setup, commit, slots[commit.index])
        planned.append((commit, spec, arms))
    out: list[Observation] = []
    runnable: list[tuple[Commit, ComparisonSpec, list[ArmSpec]]] = []
    broken: dict[str, str] = {}
    for commit, spec, arms in planned:
        if commit.sha not in broken:
            why = _unbuildable(arms, setup.cache_dir)
            if why is not None:
                broken[commit.sha] = why
        if commit.sha in broken:
            out.append(Observation(commit.index, commit.sha, commit.subject, Reading.SKIP,
                                   "BUILD-FAILED", broken[commit.sha], rel, started_at,
                                   0.0, 0, unbuildable=True))
        else:
            runnable.append((commit, spec, arms))
    if not runnable:
        return out
    every = [arm for _c, _s, arms in runnable for arm in arms]
    meta = {"bisect_round": label,
            "tests": [{"commit": c.sha, "comparison": spec_meta(s, setup.thresholds)}
                      for c, s, _a in runnable]}
    # the one path, into the round's folder (made before the build checks): Ctrl-C, SIGTERM
    # and SIGHUP stop the arms and reach the bisect's loop, which keeps the log as it is:
    # every run logged so far was judged whole.
    plan = Plan(PlanKind.BISECT, label, tuple(every), (), setup.thresholds,
                cache=setup.cache_dir, jobs=max(1, jobs) * setup.arms_per_run, extra=meta)
    results = run(plan, RunOptions(progress=setup.progress, into=run_dir)).arms
    duration = round(time.monotonic() - clock, 3)
    for commit, spec, arms in runnable:
        reading, label_, reason = _read(setup, spec, results, run_dir)
        out.append(Observation(commit.index, commit.sha, commit.subject, reading, label_,
                               reason, rel, started_at, duration, len(arms)))
    return out


def rederive(setup: Setup, bisect_dir: Path, logged: Sequence[tuple[str, Observation]]) -> None:
    """Each logged reading judged again from its round's run directory (its meta.json and
    captures): a log line that says otherwise than its run is refused, naming the line. A
    resumed bisect decides on what its runs show, never on what its log claims. `logged`:
    (where, observation), where is `log.jsonl:N`."""
    for rel, entries in _rounds(logged).items():
        run_dir, results, tests = _round_run(bisect_dir, rel, entries)
        for (where, obs), test in zip(entries, tests, strict=True):
            _rejudge_line(setup, where, obs, test, results, run_dir)


def _rounds(logged: Sequence[tuple[str, Observation]]
            ) -> dict[str, list[tuple[str, Observation]]]:
    """The logged readings by the round's run directory they came from; a commit that could
    not be built has no run, and reads skip or the log was edited."""
    rounds: dict[str, list[tuple[str, Observation]]] = {}
    for where, obs in logged:
        if obs.unbuildable:
            if obs.reading is not Reading.SKIP:
                raise UsageError(f"{where}: a commit that could not be built reads "
                                 f"{obs.reading.value}, not skip: the log was edited")
            continue
        rounds.setdefault(obs.run_dir, []).append((where, obs))
    return rounds


def _round_run(bisect_dir: Path, rel: str, entries: list[tuple[str, Observation]]
               ) -> tuple[Path, dict[str, ArmResult], list[object]]:
    """A round's run directory read back (inside this bisect's folder), with the tests its
    meta.json records: one per log line of that round, or the two disagree."""
    run_dir = Path(bisect_dir) / rel
    where0 = entries[0][0]
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise UsageError(f"{where0}: run_dir {rel!r} is not a run directory of this bisect")
    try:
        results, meta = load_run(run_dir)
    except UsageError as exc:
        raise UsageError(f"{where0}: its run cannot be read again: {exc}") from None
    try:
        tests = judged_record(meta, str(run_dir / "meta.json"))[0].get("tests")
    except UsageError as exc:
        raise UsageError(f"{where0}: its run cannot be read again: {exc}") from None
    if not isinstance(tests, list) or len(tests) != len(entries):
        raise UsageError(f"{where0}: its run {run_dir} records "
                         f"{len(tests) if isinstance(tests, list) else 'no'} test(s), the "
                         f"log {len(entries)}: the log and the run directory disagree")
    return run_dir, results, tests


def _rejudge_line(setup: Setup, where: str, obs: Observation, test: object,
                  results: dict[str, ArmResult], run_dir: Path) -> None:
    """One log line judged again from the test its run recorded: the run must have tested that
    commit, hold both arms, and judge what the line reads."""
    recorded = test.get("comparison") if isinstance(test, dict) else None
    table = recorded.get("comparison") if isinstance(recorded, dict) else None
    if not isinstance(test, dict) or test.get("commit") != obs.sha or \
            not isinstance(table, dict):
        raise UsageError(f"{where}: its run {run_dir} did not test commit "
                         f"{obs.sha[:10]} there")
    spec = spec_from(table, str(run_dir / "meta.json"))
    missing = [n for n in (spec.arm_a, spec.arm_b) if n not in results]
    if missing:
        raise UsageError(f"{where}: its run {run_dir} holds no arm {missing[0]!r}")
    reading, label, _reason = _read(setup, spec, results, run_dir)
    if (reading, label) != (obs.reading, obs.verdict):
        raise UsageError(f"{where}: the log reads commit {obs.sha[:10]} "
                         f"{obs.reading.value} ({obs.verdict}), its run {run_dir} "
                         f"judges {reading.value} ({label}): the log was edited or the "
                         "run changed since; not resumed")
