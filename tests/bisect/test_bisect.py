"""`difftest bisect` on real git histories made in tmp dirs, with a real runner committed at
every commit (tests/bisect_history.py) run as real subprocess arms."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bisect_history import History, make_history, write_config
from conftest import cli_in
from difftest import api
from difftest.bisect import Decision, Mode, Reading, Sequential, Status, Tally
from difftest.bisect.evidence import decision_budget, per_decision, posterior
from difftest.bisect.journal import LOG
from difftest.core.errors import ExitCode, UsageError

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("DIFFTEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BISECT_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setenv("BISECT_BUILD_LEDGER", str(tmp_path / "builds"))
    monkeypatch.delenv("BISECT_FLAKE_RATE", raising=False)
    monkeypatch.chdir(tmp_path)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def history(tmp_path: Path, commits: int = 12, bad_at: int = 8, **kw: object) -> History:
    h = make_history(tmp_path / "repo", commits, bad_at, **kw)  # type: ignore[arg-type]
    write_config(tmp_path / "difftest.toml", h.repo)
    return h


def bisect(tmp_path: Path, h: History, comparison: str = "lanes", **kw: object) -> api.BisectResult:
    return api.bisect(comparison, good=h.shas[0], bad="main", config=tmp_path / "difftest.toml",
                      repo=h.repo, run_root=tmp_path / "runs", **kw)  # type: ignore[arg-type]


# -------------------------------------------------------------------- the statistics alone


def test_sequential_test_steps_and_error_rate() -> None:
    det = Sequential()
    assert det.step == 1 and det.decision_error == 0.0
    assert det.decide(Tally(bad=1)) is Decision.BAD and det.decide(Tally(skip=1)) is Decision.SKIPPED
    flaky = Sequential(flake_rate=0.1, error_rate=0.01)
    # 2 * ln 9 = 4.39 < ln 99 = 4.60 <= 3 * ln 9: three net runs decide
    assert flaky.step == 3
    assert flaky.decision_error == pytest.approx(1 / (1 + 9 ** 3))
    assert flaky.decision_error <= 0.01
    assert flaky.decide(Tally(bad=3, good=1)) is Decision.PENDING
    assert flaky.decide(Tally(bad=4, good=1)) is Decision.BAD
    assert flaky.decide(Tally(good=3)) is Decision.GOOD
    assert flaky.decide(Tally(good=1, skip=3)) is Decision.SKIPPED
    assert flaky.decide(Tally(good=1, unbuildable=True)) is Decision.SKIPPED
    assert Sequential(0.1, 0.01, max_runs=4).decide(Tally(bad=2, good=2)) is Decision.SKIPPED
    assert flaky.runs_to_decide(Tally(bad=2, good=1)) == 2
    # a bisect-wide error rate is split over the ends and twice the bisection depth
    assert decision_budget(63) == 2 + 2 * 6 and decision_budget(1) == 4
    assert per_decision(0.05, 63) == pytest.approx(0.05 / 14)
    for bad in ({"flake_rate": 0.5}, {"error_rate": 0.0}, {"max_runs": 0}):
        with pytest.raises(UsageError):
            Sequential(**bad)  # type: ignore[arg-type]


def test_posterior_over_the_first_bad_commit() -> None:
    # 0 good, 4 bad (ends); 2 read good once, 3 read bad once: under determinism b = 3
    readings = {0: Tally(good=1), 2: Tally(good=1), 3: Tally(bad=1), 4: Tally(bad=1)}
    post = posterior(4, readings, 0.0)
    assert post == [0.0, 0.0, 0.0, 1.0, 0.0]
    # commit 2 untested: 2 and 3 equally likely
    post = posterior(4, {0: Tally(good=1), 1: Tally(good=1), 3: Tally(bad=1)}, 0.0)
    assert post is not None and post[2] == post[3] == 0.5
    # non-monotone deterministic readings have no explanation
    assert posterior(4, {0: Tally(good=1), 1: Tally(bad=1), 2: Tally(good=1)}, 0.0) is None
    # with a flake rate they do, and the posterior follows the likelihood ratio
    post = posterior(2, {0: Tally(good=1), 1: Tally(bad=1), 2: Tally(bad=1)}, 0.1)
    assert post is not None and math.isclose(sum(post), 1.0)
    assert post[1] / post[2] == pytest.approx(9.0)


# -------------------------------------------------------------------- bisects that run


def test_within_names_the_planted_commit_and_logs_every_run(tmp_path: Path) -> None:
    h = history(tmp_path, 12, 8, unbuildable={3})
    r = bisect(tmp_path, h)
    assert r.status is Status.FOUND and r.exit_code == ExitCode.OK
    assert r.first_bad is not None and r.first_bad.sha == h.shas[8]
    assert r.last_good is not None and r.last_good.sha == h.shas[7]
    assert r.confidence == 1.0
    assert "state.txt" in r.diff_stat and "2 files changed" in r.diff_stat
    assert all(t.tally.runs == 1 for t in r.tested)  # deterministic arms: once per commit
    log = [json.loads(x) for x in lines(r.run_dir / LOG)]
    assert len(log) == len(r.tested) == r.comparisons
    for entry in log:
        assert entry["sha"] == h.shas[entry["index"]]
        assert entry["subject"] == f"commit {entry['index']}"
        assert entry["verdict"] in ("PASS", "FAIL", "BUILD-FAILED")
        assert (r.run_dir / entry["run_dir"] / "meta.json").is_file()
        assert entry["started_at"].endswith("Z") and entry["duration_s"] >= 0
    assert len(lines(tmp_path / "ledger")) == r.arm_runs == 2 * r.comparisons
    report = json.loads((r.run_dir / "bisect.json").read_text())
    assert report["first_bad"]["sha"] == h.shas[8] and report["status"] == "found"
    assert h.shas[8] in (r.run_dir / "bisect.md").read_text()
    assert h.shas[8][:10] in (r.run_dir / "bisect.html").read_text()


def test_a_failure_that_does_not_reproduce_names_no_commit(tmp_path: Path) -> None:
    """`drift` compares arm b with itself: at every commit both runs print the same, so the bad
    end passes. The bisect stops there: exit 3, and no commit (least of all HEAD) is named."""
    h = history(tmp_path, 8, 5)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([PY, "-m", "difftest", "bisect", "-c", "drift", "--good", h.shas[0],
                           "--bad", "main", "--repo", str(h.repo), "--run-root",
                           str(tmp_path / "runs"), "-f", "json"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 3, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "ends-unconfirmed" and out["first_bad"] is None
    assert out["candidates"] == []
    assert "the bad end --bad main" in out["message"] and "does not reproduce" in out["message"]
    assert [t["index"] for t in out["tested"]] == [7]  # nothing past the bad end ran
    assert h.shas[-1] not in proc.stdout.replace(out["tested"][0]["sha"], "")


def test_a_good_end_that_fails_is_named(tmp_path: Path) -> None:
    h = history(tmp_path, 8, 3)
    r = api.bisect("lanes", good=h.shas[4], bad="main", config=tmp_path / "difftest.toml",
                   repo=h.repo, run_root=tmp_path / "runs", jobs=2)
    assert r.status is Status.UNCONFIRMED and r.exit_code == ExitCode.UNINFORMATIVE
    assert "the good end" in r.message and "fails too" in r.message
    assert r.first_bad is None


def test_against_mode_keeps_arm_a_at_the_good_end(tmp_path: Path) -> None:
    h = history(tmp_path, 10, 6)
    r = bisect(tmp_path, h, "drift", mode=Mode.AGAINST)
    assert r.status is Status.FOUND and r.first_bad is not None
    assert r.first_bad.sha == h.shas[6]
    meta = json.loads(next((r.run_dir / "runs").iterdir()).joinpath("meta.json").read_text())
    shas = {arm["git_sha"] for arm in meta["arms"].values() if arm["name"].startswith("b@")
            and arm["name"].endswith(".1") and "#2" not in arm["name"]}
    assert shas == {h.shas[0]}  # arm A of every run sits at the good end
    # a configured baseline arm replaces arm A, run as configured (arm a: git_ref HEAD)
    base = bisect(tmp_path, h, "drift", mode=Mode.AGAINST, baseline="a")
    assert base.first_bad is not None and base.first_bad.sha == h.shas[6]
    meta = json.loads(next((base.run_dir / "runs").iterdir()).joinpath("meta.json").read_text())
    assert {arm["git_sha"] for arm in meta["arms"].values()
            if arm["name"].startswith("a@")} == {h.shas[-1]}


def test_skips_next_to_the_boundary_end_in_a_range_with_their_reasons(tmp_path: Path) -> None:
    h = history(tmp_path, 10, 7, unbuildable={3},
                states={4: "crash", 5: "garbled", 6: "blind"})
    r = bisect(tmp_path, h)
    assert r.status is Status.RANGE and r.exit_code == ExitCode.OK and r.first_bad is None
    assert [c.index for c in r.candidates] == [3, 4, 5, 6, 7]
    assert r.confidence == pytest.approx(1.0)
    why = {t.commit.index: (t.verdicts, " ".join(t.reasons)) for t in r.tested}
    assert why[3][0] == ("BUILD-FAILED",) and "does not compile" in why[3][1]
    logged = [json.loads(x) for x in lines(r.run_dir / LOG)]
    assert [e["arm_runs"] for e in logged if e["index"] == 3] == [0]  # its arms never ran
    assert lines(tmp_path / "builds").count("3") == 1  # and its build ran once
    assert why[4][0] == ("ARM-FAILED",) and "exit code 7" in why[4][1]
    assert why[5][0] == ("REFUSED",) and "malformed_pos.log:7" not in why[5][1] \
        and ":7:" in why[5][1]
    assert why[6][0] == ("UNINFORMATIVE",)
    assert all(t.decision is Decision.SKIPPED for t in r.tested if 3 <= t.commit.index <= 6)
    assert "one of 5 commits" in r.message


def test_flaky_arms_get_a_sequential_test_and_a_confidence(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_FLAKE_RATE", "0.15")
    monkeypatch.setenv("BISECT_SEED", "3")
    h = history(tmp_path, 12, 5)
    r = bisect(tmp_path, h, flake_rate=0.15, error_rate=0.01)
    assert r.status is Status.FOUND and r.first_bad is not None
    assert r.first_bad.sha == h.shas[5]
    # the bisect-wide 1% split over 2 + 2 * ceil(log2(12)) = 10 decisions: 0.1% each
    step = Sequential(0.15, per_decision(0.01, 11)).step
    assert per_decision(0.01, 11) == pytest.approx(0.001) and step == 4
    for t in r.tested:
        assert abs(t.tally.bad - t.tally.good) == step  # each decided by the sequential test
    assert r.decisions == len(r.tested)
    assert r.error_bound == pytest.approx(r.decisions * (1 / (1 + (0.85 / 0.15) ** 4)))
    assert r.error_bound <= 0.01
    assert r.confidence is not None and 0.99 < r.confidence < 1.0
    md = (r.run_dir / "bisect.md").read_text()
    assert "posterior under a flake rate of 0.15" in md
    assert f"the {r.decisions} decisions made are all right with probability" in md


def test_multisection_tests_several_commits_per_round(tmp_path: Path) -> None:
    h = history(tmp_path, 16, 11)
    one = bisect(tmp_path, h, jobs=1)
    three = bisect(tmp_path, h, jobs=3)
    for r in (one, three):
        assert r.first_bad is not None and r.first_bad.sha == h.shas[11]
    rounds = {r.plan.jobs: sorted((r.run_dir / "runs").iterdir()) for r in (one, three)}
    assert len(rounds[3]) < len(rounds[1])
    sizes = [len(json.loads((d / "meta.json").read_text())["arms"]) for d in rounds[3]]
    assert max(sizes) == 6 and all(s <= 6 for s in sizes)  # 3 commits x 2 arms at once
    # the second bisect built nothing the first had built: the sha-keyed cache
    built = lines(tmp_path / "builds")
    assert len(built) == len(set(built))


def test_an_interrupted_bisect_resumes_without_running_anything_twice(tmp_path: Path) -> None:
    h = history(tmp_path, 24, 17)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([PY, "-m", "difftest", "bisect", "-c", "lanes", "--good", h.shas[0],
                             "--bad", "main", "--repo", str(h.repo), "--run-root",
                             str(tmp_path / "runs")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        end = time.monotonic() + 60
        log: list[str] = []
        while time.monotonic() < end and len(log) < 3:
            time.sleep(0.05)
            found = list((tmp_path / "runs").glob("*/log.jsonl"))
            log = lines(found[0]) if found else []
        assert len(log) >= 3, "the bisect never logged three runs"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    bisect_dir = next((tmp_path / "runs").iterdir())
    before = [json.loads(x) for x in lines(bisect_dir / LOG)]
    assert not (bisect_dir / "bisect.json").exists()
    runs_before = len(lines(tmp_path / "ledger"))
    r = api.bisect(resume=bisect_dir)
    assert r.first_bad is not None and r.first_bad.sha == h.shas[17]
    after = [json.loads(x) for x in lines(bisect_dir / LOG)]
    assert after[: len(before)] == before
    assert len({e["index"] for e in after}) == len(after)  # no commit ran twice
    assert len(lines(tmp_path / "ledger")) - runs_before == 2 * (len(after) - len(before))
    assert r.comparisons == len(after)


def test_a_line_cut_short_in_the_log_is_run_again(tmp_path: Path) -> None:
    h = history(tmp_path, 8, 5)
    r = bisect(tmp_path, h)
    log = r.run_dir / LOG
    kept = lines(log)[:2]
    log.write_text("\n".join(kept) + '\n{"index": 3, "sha": "')
    runs_before = len(lines(tmp_path / "ledger"))
    assert not any("changed since" in n for n in r.notes)
    with open(tmp_path / "difftest.toml", "a") as fh:
        fh.write("\n# edited between the runs\n")
    again = api.bisect(resume=r.run_dir)
    assert again.first_bad == r.first_bad
    assert any("not a run of this bisect" in n for n in again.notes)
    assert any("difftest.toml changed since the bisect started" in n for n in again.notes)
    assert len(lines(tmp_path / "ledger")) - runs_before == 2 * (again.comparisons - 2)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 5-commit history for the bad-input cases (nothing runs in them)."""
    where = tmp_path_factory.mktemp("small")
    history(where, 5, 3)
    return where


@pytest.mark.parametrize(("args", "message"), [
    (["-c", "lanes", "--good", "main", "--bad", "main~3"], "is not an ancestor"),
    (["-c", "lanes", "--good", "main", "--bad", "main"], "the same commit"),
    (["-c", "nope", "--good", "main~3", "--bad", "main"], "unknown comparison 'nope'"),
    (["-c", "lanes", "--good", "main~3", "--bad", "main", "--baseline", "a"], "--mode against"),
    (["-c", "lanes", "--good", "main~3", "--bad", "main", "--flake-rate", "0.6"], "--flake-rate"),
    (["-c", "lanes", "--good", "nosuchref", "--bad", "main"], "'nosuchref' does not name"),
    (["--good", "main~3", "--bad", "main"], "needs a comparison"),
    (["--resume", "."], "not a bisect directory"),
])
def test_bad_input_is_exit_2_with_a_message(small: Path, args: list[str], message: str) -> None:
    """`difftest bisect` run in this process (conftest.cli_in): refused before anything runs."""
    proc = cli_in(small, "bisect", *args, "--repo", str(small / "repo"), "--run-root",
                  str(small / "runs"), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("difftest: error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (small / "runs").exists()  # refused before anything ran


def test_a_good_end_off_the_first_parent_line_is_refused(tmp_path: Path) -> None:
    h = history(tmp_path, 4, 2)
    from bisect_history import git

    git(h.repo, "checkout", "-q", "-b", "side", h.shas[1])
    (h.repo / "side.txt").write_text("x\n")
    git(h.repo, "add", "-A")
    git(h.repo, "commit", "-q", "-m", "side")
    side = git(h.repo, "rev-parse", "HEAD")
    git(h.repo, "checkout", "-q", "main")
    git(h.repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    with pytest.raises(UsageError, match="not on the first-parent history"):
        api.bisect("lanes", good=side, bad="main", config=tmp_path / "difftest.toml",
                   repo=h.repo, run_root=tmp_path / "runs")


def test_reading_values_are_what_the_log_stores() -> None:
    assert [r.value for r in Reading] == ["good", "bad", "skip"]


def test_the_walk_follows_the_first_parent_line_through_a_merge(tmp_path: Path) -> None:
    from bisect_history import git

    h = history(tmp_path, 6, 100)  # never bad so far
    git(h.repo, "checkout", "-q", "-b", "side", h.shas[2])
    side = []
    for i in range(2):
        (h.repo / f"side{i}.txt").write_text(f"{i}\n")
        git(h.repo, "add", "-A")
        git(h.repo, "commit", "-q", "-m", f"side {i}")
        side.append(git(h.repo, "rev-parse", "HEAD"))
    git(h.repo, "checkout", "-q", "main")
    git(h.repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(h.repo, "rev-parse", "HEAD")
    after = []
    for i, state in enumerate(("good", "bad", "bad")):
        (h.repo / "state.txt").write_text(state + "\n")
        (h.repo / "number.txt").write_text(f"after {i}\n")
        git(h.repo, "commit", "-q", "-am", f"after {i}")
        after.append(git(h.repo, "rev-parse", "HEAD"))
    r = bisect(tmp_path, h)
    line = [c.sha for c in r.plan.commits]
    assert line == [*h.shas, merge, *after]  # the merged branch's commits are not walked
    assert not set(side) & {t.commit.sha for t in r.tested}
    assert r.first_bad is not None and r.first_bad.sha == after[1]


def _edit_log(log: Path, index: int, **changes: object) -> int:
    """Change the first log line of commit `index`; its line number."""
    entries = [json.loads(x) for x in lines(log)]
    n = next(i for i, e in enumerate(entries) if e["index"] == index)
    entries[n].update(changes)
    log.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))
    return n + 1


def test_a_resumed_bisect_rederives_every_reading_from_its_run(tmp_path: Path) -> None:
    """A reading flipped to good in the log (its verdict still FAIL, or both flipped) is
    refused, naming the log line: the run directory judges it bad."""
    h = history(tmp_path, 8, 5)
    r = bisect(tmp_path, h)
    assert r.first_bad is not None and r.first_bad.sha == h.shas[5]
    log = r.run_dir / LOG
    original = log.read_text()
    bad = next(json.loads(x) for x in lines(log) if json.loads(x)["reading"] == "bad")
    for changes in ({"reading": "good"}, {"reading": "good", "verdict": "PASS"}):
        log.write_text(original)
        n = _edit_log(log, bad["index"], **changes)
        with pytest.raises(UsageError, match=rf"log\.jsonl:{n}: the log reads commit "
                                             rf"{bad['sha'][:10]} good \(.*\), its run .* "
                                             r"judges bad \(FAIL\)"):
            api.bisect(resume=r.run_dir)
    log.write_text(original)
    again = api.bisect(resume=r.run_dir)  # the log as written resumes
    assert again.first_bad == r.first_bad


def test_a_resumed_bisect_rederives_its_commit_line(tmp_path: Path) -> None:
    h = history(tmp_path, 8, 5)
    r = bisect(tmp_path, h)
    plan_path = r.run_dir / "plan.json"
    plan = json.loads(plan_path.read_text())
    del plan["commits"][3]  # a cut line: every index after it names the next commit
    plan_path.write_text(json.dumps(plan))
    with pytest.raises(UsageError, match=r"plan\.json: key 'commits' entry 3 is "):
        api.bisect(resume=r.run_dir)


def test_a_resumed_bisect_reads_a_rounds_run_record_as_export_does(tmp_path: Path) -> None:
    """A round's meta.json whose plan record this difftest cannot read is refused naming the
    key, as `export` refuses it; a bisect written in the last format (its rounds' runs with
    the two records of that version) still resumes."""
    h = history(tmp_path, 8, 5)
    r = bisect(tmp_path, h)
    (meta_path,) = sorted(r.run_dir.glob("runs/*round001*/meta.json"))
    original = meta_path.read_text()
    for plan, message in ((99, r"plan format 99 is newer than this difftest reads"),
                          ("2", r"key 'plan.format' must be a plan format"),
                          (None, r"key 'plan' must be a table")):
        meta = json.loads(original)
        if plan is None:
            meta["plan"] = "x"
        else:
            meta["plan"]["format"] = plan
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(UsageError, match=r"log\.jsonl:1: its run cannot be read again: "
                                             rf".*meta\.json: {message}"):
            api.bisect(resume=r.run_dir)
    meta = json.loads(original)  # the previous version's round: plan format 1 beside `extra`
    record = meta.pop("plan")
    meta["plan"] = {"format": 1, "kind": record.pop("kind"), "roles": record.pop("roles")}
    del record["format"]
    meta["extra"] = record
    meta_path.write_text(json.dumps(meta))
    plan_path = r.run_dir / "plan.json"
    plan_path.write_text(json.dumps({**json.loads(plan_path.read_text()), "format": 1}))
    assert api.bisect(resume=r.run_dir).first_bad == r.first_bad
    # resumed here, the plan is rewritten in this format: an older difftest refuses it by its
    # format instead of taking the rounds added here for damaged ones
    assert json.loads(plan_path.read_text())["format"] == 2
    plan_path.write_text(json.dumps({**json.loads(plan_path.read_text()), "format": 3}))
    with pytest.raises(UsageError, match=r"not a bisect plan this difftest can resume "
                                         r"\(format 3, expected one of \(1, 2\)\)"):
        api.bisect(resume=r.run_dir)
