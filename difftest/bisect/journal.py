"""A bisect's run directory: the plan it follows (plan.json, written once) and the log of every
run (log.jsonl, one line appended per run as soon as it is judged), so an interrupted bisect
resumes where it stopped and nothing that ran is run again.

    <bisect-dir>/plan.json     the ends, the commit line, the comparison, the test's settings
    <bisect-dir>/log.jsonl     one Observation per line, in the order they were made
    <bisect-dir>/runs/<round>  each round's run directory (captures and meta.json)
    <bisect-dir>/bisect.json, bisect.md, bisect.html   the result, when it ends
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from difftest.core.atomic import write_json_atomic
from difftest.bisect.history import Commit
from difftest.bisect.trial import Mode, Observation
from difftest.core.errors import UsageError

PLAN = "plan.json"
LOG = "log.jsonl"
RUNS = "runs"
# 2: its rounds' runs hold one record each (a run's plan record, format 2, difftest.flow.plan),
# which a difftest reading format 1 would take for a damaged round; 1 is read as 2 (the rounds'
# runs of that bisect hold their older records, which difftest.flow.plan reads too)
PLAN_FORMAT = 2
READS = (1, 2)


@dataclass(frozen=True)
class Plan:
    """What a bisect searches, and how; enough to resume it from its directory alone."""

    config: str  # the config file the arms and the comparison come from
    comparison: str
    arm_a: str
    arm_b: str
    mode: Mode
    baseline: str | None  # against: a configured arm run as configured in place of arm A
    repo: str
    good: str  # the refs as given
    bad: str
    commits: tuple[Commit, ...]
    flake_rate: float
    error_rate: float
    max_runs: int
    jobs: int
    cache_dir: str | None
    config_digest: str = ""  # sha256 of the config file's bytes when the bisect started

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["mode"] = self.mode.value
        data["commits"] = [[c.sha, c.subject] for c in self.commits]
        return {"format": PLAN_FORMAT, **data}

    @classmethod
    def from_json(cls, data: dict[str, object], where: Path) -> Plan:
        try:
            version = data.get("format")
            if isinstance(version, bool) or version not in READS:
                raise ValueError(f"format {version!r}, expected one of {READS}")
            values = {k: v for k, v in data.items() if k != "format"}
            raw = values.pop("commits")
            assert isinstance(raw, list)
            commits = tuple(Commit(i, str(sha), str(subject))
                            for i, (sha, subject) in enumerate(raw))
            values["mode"] = Mode(str(values["mode"]))
            return cls(commits=commits, **values)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError, AssertionError) as exc:
            raise UsageError(f"{where}: not a bisect plan this difftest can resume ({exc})") \
                from None


def write_plan(bisect_dir: Path, plan: Plan) -> None:
    write_json_atomic(bisect_dir / PLAN, plan.to_json())


def read_plan(bisect_dir: Path) -> Plan:
    path = Path(bisect_dir) / PLAN
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{bisect_dir}: not a bisect directory (no {PLAN})") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a bisect plan")
    return Plan.from_json(data, path)


def append(bisect_dir: Path, observations: Sequence[Observation]) -> None:
    """One line per run, flushed to disk before the next round starts."""
    if not observations:
        return
    with open(bisect_dir / LOG, "a", encoding="utf-8") as fh:
        for obs in observations:
            fh.write(json.dumps(obs.to_json(), sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_log(bisect_dir: Path, plan: Plan) -> tuple[list[Observation], list[str]]:
    """Every run logged so far, and notes on lines that could not be used (a line cut short by
    a crash is dropped: that run is simply run again)."""
    numbered, notes = read_log_lines(bisect_dir, plan)
    return [obs for _n, obs in numbered], notes


def read_log_lines(bisect_dir: Path, plan: Plan
                   ) -> tuple[list[tuple[int, Observation]], list[str]]:
    """`read_log`, each run with its line number in log.jsonl."""
    path = Path(bisect_dir) / LOG
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return [], []
    out: list[tuple[int, Observation]] = []
    notes: list[str] = []
    for n, line in enumerate(lines, 1):
        try:
            obs = Observation.from_json(json.loads(line))
            ok = (0 <= obs.index < len(plan.commits)
                  and plan.commits[obs.index].sha == obs.sha)
        except (ValueError, TypeError, KeyError):
            ok = False
        if not ok:
            notes.append(f"{path}:{n}: not a run of this bisect; ignored (run again)")
            continue
        out.append((n, obs))
    return out, notes


def digest(path: Path) -> str:
    """sha256 of a file's bytes ("" when it cannot be read): a resumed bisect says when its
    config changed since it started."""
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""
