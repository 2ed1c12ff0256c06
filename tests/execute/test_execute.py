"""Arm execution with real subprocesses: concurrency, capture, meta.json, failures, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from difftest.config import ArmSpec
from difftest.core.errors import ArmFailedError, ExitCode, UsageError
from difftest.core.atomic import write_json_atomic
from difftest.execute import ArmResult, load_run, new_run_dir, run_arms, safe_name
from conftest import git, wait_dead


PY = sys.executable
REPO = Path(__file__).resolve().parents[2]


def py_arm(name: str, code: str, **kw: object) -> ArmSpec:
    return ArmSpec(name, (PY, "-c", textwrap.dedent(code)), **kw)  # type: ignore[arg-type]


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


SLEEP_AND_TALK = """
import os, sys, time
print("out:" + os.environ["WHO"], flush=True)
print("[SPECTRACE] err:" + os.environ["WHO"], file=sys.stderr, flush=True)
time.sleep(1.0)
"""


# --- the happy path --------------------------------------------------------------------------


def test_two_arms_run_concurrently_and_are_captured(tmp_path: Path) -> None:
    specs = [py_arm("paged", SLEEP_AND_TALK, env={"WHO": "a"}),
             py_arm("materialized", SLEEP_AND_TALK, env={"WHO": "b"})]
    t0 = time.monotonic()
    results = run_arms(specs, tmp_path / "run", progress=False)
    wall = time.monotonic() - t0
    assert wall < 1.8, f"arms did not overlap: {wall:.2f} s for two 1 s arms"
    a, b = results["paged"], results["materialized"]
    assert list(results) == ["paged", "materialized"]
    assert a.ok and b.ok and a.returncode == 0 and a.failure() is None
    assert a.stdout_path == tmp_path / "run" / "paged.stdout"
    assert a.stdout_path.read_text() == "out:a\n"
    assert b.stderr_path.read_text() == "[SPECTRACE] err:b\n"
    assert b.stderr_tail() == "[SPECTRACE] err:b"
    # Their lifetimes overlap: each started before the other ended.
    assert _ts(a.started_at) < _ts(b.ended_at) and _ts(b.started_at) < _ts(a.ended_at)
    assert 0.9 < a.duration_s < 1.7
    assert a.argv == list(specs[0].command) and a.env_overrides == {"WHO": "a"}
    assert a.cwd == os.getcwd()


def test_env_is_merged_over_the_callers_and_cwd_is_used(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIFFTEST_INHERITED", "from-parent")
    monkeypatch.setenv("DIFFTEST_OVERRIDDEN", "parent")
    work = tmp_path / "work"
    work.mkdir()
    code = """
    import os
    print(os.getcwd())
    print(os.environ["DIFFTEST_INHERITED"], os.environ["DIFFTEST_OVERRIDDEN"], os.environ["N"])
    """
    res = run_arms([py_arm("e", code, env={"DIFFTEST_OVERRIDDEN": "arm", "N": 3}, cwd=work)],
                   tmp_path / "run", progress=False)["e"]
    assert res.ok, res.failure()
    assert res.stdout_path.read_text().splitlines() == [str(work), "from-parent arm 3"]
    assert res.cwd == str(work)
    assert res.env_overrides == {"DIFFTEST_OVERRIDDEN": "arm", "N": "3"}
    assert "DIFFTEST_INHERITED" not in json.loads((tmp_path / "run" / "meta.json").read_text())[
        "arms"]["e"]["env_overrides"]


def test_arm_names_become_safe_unique_file_names(tmp_path: Path) -> None:
    specs = [py_arm("a/b c", "print(1)"), py_arm("a_b_c", "print(2)"),
             py_arm("paged+causal-mask", "print(3)"), py_arm("..", "print(4)")]
    results = run_arms(specs, tmp_path, progress=False)
    names = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".stdout")
    assert names == ["a_b_c-2.stdout", "a_b_c.stdout", "arm.stdout",
                     "paged+causal-mask.stdout"]
    assert results["a/b c"].stdout_path.read_text() == "1\n"
    assert results["a_b_c"].stdout_path.read_text() == "2\n"
    assert safe_name("x;rm -rf /") == "x_rm_-rf__"
    with pytest.raises(UsageError, match="unique"):
        run_arms([py_arm("x", "1"), py_arm("x", "2")], tmp_path / "dup", progress=False)


def test_git_sha_of_the_cwd_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q",
         "--allow-empty", "-m", "init")
    sha = git(repo, "rev-parse", "HEAD")
    plain = tmp_path / "plain"
    plain.mkdir()
    results = run_arms([py_arm("in", "pass", cwd=repo), py_arm("out", "pass", cwd=plain)],
                       tmp_path / "run", progress=False)
    assert results["in"].git_sha == sha and results["in"].git_ref is None
    assert results["out"].git_sha is None


# --- meta.json -------------------------------------------------------------------------------


def test_meta_json_is_valid_while_the_arms_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    specs = [py_arm("a", "import time; time.sleep(1.2)", timeout_s=30),
             py_arm("b", "import time; time.sleep(1.2)")]
    out: dict[str, object] = {}
    worker = threading.Thread(target=lambda: out.update(
        run_arms(specs, run_dir, progress=False, plan={"comparison": "lanes"})))
    worker.start()
    seen: list[dict] = []
    try:
        end = time.monotonic() + 5
        while worker.is_alive() and time.monotonic() < end:
            path = run_dir / "meta.json"
            if path.exists():
                seen.append(json.loads(path.read_text()))  # never a half-written file
            time.sleep(0.01)
    finally:
        worker.join(10)
    running = [m for m in seen if m["status"] == "running"]
    assert running, f"never saw a running meta.json: {[m['status'] for m in seen]}"
    # meta.json is rewritten whenever an arm starts or ends: take one from mid-run.
    mid = next(m for m in running if m["arms"]["a"]["started_at"]
               and not m["arms"]["a"]["ended_at"])
    assert mid["plan"] == {"comparison": "lanes"} and "extra" not in mid
    assert mid["arms"]["a"]["argv"] == list(specs[0].command)
    assert mid["arms"]["a"]["timeout_s"] == 30 and mid["arms"]["a"]["returncode"] is None
    assert mid["arms"]["a"]["stderr_path"] == "a.stderr"
    assert mid["difftest_version"]
    final = json.loads((run_dir / "meta.json").read_text())
    assert final["status"] == "done"
    assert final["arms"]["b"]["returncode"] == 0 and final["arms"]["b"]["ended_at"]
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_write_json_atomic_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    write_json_atomic(path, {"a": 1, "p": Path("/x")})
    assert json.loads(path.read_text()) == {"a": 1, "p": "/x"}
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        write_json_atomic(path, {"bad": loop})
    assert json.loads(path.read_text()) == {"a": 1, "p": "/x"}
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_load_run_round_trip(tmp_path: Path) -> None:
    run_dir = new_run_dir(tmp_path / "runs", label="lanes vs/x")
    specs = [py_arm("ok", "print('hi')"), py_arm("bad", "import sys; sys.exit(7)"),
             ArmSpec("missing", ("/no/such/runner",))]
    results = run_arms(specs, run_dir, progress=False, plan={"config": "x.toml"})
    loaded, meta = load_run(run_dir)
    assert loaded == results
    assert meta["plan"] == {"config": "x.toml"} and meta["status"] == "done"
    assert loaded["bad"].failure() is not None and loaded["bad"].failure().returncode == 7
    # The run directory can move: capture paths are stored relative to it.
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    again, _ = load_run(moved)
    assert again["ok"].stdout_path.read_text() == "hi\n"


def test_load_run_rejects_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a run directory"):
        load_run(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_run(tmp_path)
    (tmp_path / "meta.json").write_text('{"arms": {"a": {"name": "a"}}}')
    with pytest.raises(UsageError, match="arm 'a': incomplete record"):
        load_run(tmp_path)


def test_new_run_dir_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = new_run_dir(tmp_path, label="paged/materialized")
    b = new_run_dir(tmp_path, label="paged/materialized")
    assert a != b and a.is_dir() and b.is_dir()
    assert a.name.endswith("-paged_materialized") and a.name[:8].isdigit() and "T" in a.name
    monkeypatch.chdir(tmp_path)
    c = new_run_dir()
    assert c.parent == Path("traces") / "runs" and c.is_dir()


# --- failures --------------------------------------------------------------------------------


def test_nonzero_exit_is_an_arm_failure_with_the_stderr_tail(tmp_path: Path) -> None:
    code = """
    import sys
    for i in range(30):
        print(f"line {i}", file=sys.stderr)
    print("vt: propose_drafts_block: out of memory", file=sys.stderr)
    sys.exit(3)
    """
    res = run_arms([py_arm("crashy", code)], tmp_path, progress=False)["crashy"]
    assert res.returncode == 3 and not res.ok and not res.timed_out
    err = res.failure()
    assert isinstance(err, ArmFailedError) and err.exit_code == ExitCode.ARM_FAILED
    assert (err.arm, err.returncode) == ("crashy", 3)
    assert "arm 'crashy': exited with an error (exit code 3)" in str(err)
    assert err.stderr_tail.splitlines()[-1] == "vt: propose_drafts_block: out of memory"
    assert len(err.stderr_tail.splitlines()) == 20
    assert err.stderr_tail.splitlines()[0] == "line 11" and "line 10" not in err.stderr_tail
    assert res.stderr_tail(2).splitlines() == ["line 29", "vt: propose_drafts_block: out of memory"]


def test_killed_by_a_signal_says_which(tmp_path: Path) -> None:
    res = run_arms([py_arm("seg", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")],
                   tmp_path, progress=False)["seg"]
    assert res.returncode == -signal.SIGSEGV
    assert "was killed by SIGSEGV" in str(res.failure())


def test_timeout_kills_the_group_including_grandchildren(tmp_path: Path) -> None:
    spec = ArmSpec("hung", ("sh", "-c", "sleep 60 & echo $!; sleep 60"), timeout_s=1)
    fast = py_arm("fast", "print('done')")
    t0 = time.monotonic()
    results = run_arms([spec, fast], tmp_path, progress=False)
    wall = time.monotonic() - t0
    assert wall < 4.0, f"a hung arm held difftest for {wall:.1f} s"
    res = results["hung"]
    assert res.timed_out and not res.ok and res.returncode == -signal.SIGTERM
    assert "arm 'hung': timed out after 1 s" in str(res.failure())
    grandchild = int(res.stdout_path.read_text().split()[0])
    assert wait_dead(grandchild, 3.0), "the backgrounded grandchild outlived the timeout"
    assert results["fast"].ok


def test_timeout_escalates_to_sigkill(tmp_path: Path) -> None:
    code = """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)
    """
    t0 = time.monotonic()
    res = run_arms([py_arm("stubborn", code, timeout_s=0.5)], tmp_path, progress=False)["stubborn"]
    wall = time.monotonic() - t0
    assert res.timed_out and res.returncode == -signal.SIGKILL
    assert 2.0 <= wall < 5.0, wall


def test_stragglers_are_stopped_when_the_arm_exits(tmp_path: Path) -> None:
    spec = ArmSpec("leaves", ("sh", "-c", "sleep 60 & echo $!; exit 0"))
    t0 = time.monotonic()
    res = run_arms([spec], tmp_path, progress=False)["leaves"]
    assert time.monotonic() - t0 < 2.0 and res.ok
    assert wait_dead(int(res.stdout_path.read_text().split()[0]), 3.0)


def test_missing_executable_and_cwd_are_results_not_exceptions(tmp_path: Path) -> None:
    specs = [ArmSpec("nobin", ("/no/such/vt-serve", "--model", "m")),
             ArmSpec("nocwd", (PY, "-c", "pass"), cwd=tmp_path / "gone"),
             py_arm("fine", "print('ok')")]
    results = run_arms(specs, tmp_path / "run", progress=False)
    nobin, nocwd = results["nobin"], results["nocwd"]
    assert nobin.returncode is None and not nobin.ok
    assert nobin.error == "cannot start: /no/such/vt-serve: No such file or directory"
    assert nocwd.error is not None and nocwd.error.startswith("cannot start: working directory")
    assert "arm 'nobin': cannot start: /no/such/vt-serve" in str(nobin.failure())
    assert results["fine"].ok
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["arms"]["nobin"]["error"] == nobin.error


CTRL_C_SCRIPT = """
import signal, sys
from pathlib import Path
from difftest.config import ArmSpec
from difftest.execute import run_arms
signal.signal(signal.SIGINT, signal.default_int_handler)
code = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
specs = [ArmSpec(n, (sys.executable, "-c", code)) for n in ("a", "b")]
try:
    run_arms(specs, Path(sys.argv[1]), progress=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("finished", flush=True)
"""


def test_ctrl_c_stops_both_arms_and_keeps_the_captures(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([PY, "-c", CTRL_C_SCRIPT, str(run_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    pids: list[int] = []
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and len(pids) < 2:
            pids = [int(t) for n in "ab" if (run_dir / f"{n}.stdout").exists()
                    for t in (run_dir / f"{n}.stdout").read_text().split()[:1]]
            time.sleep(0.02)
        assert len(pids) == 2, "arms never started"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        stop_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert out.strip() == "interrupted"
    assert stop_s < 4.0
    for pid in pids:
        assert wait_dead(pid, 3.0), f"arm process {pid} survived Ctrl-C"
    results, meta = load_run(run_dir)
    assert meta["status"] == "interrupted"
    for name in "ab":
        r = results[name]
        assert r.interrupted and not r.ok and r.ended_at
        assert r.stdout_path.read_text().split()[0] in {str(p) for p in pids}
        assert "interrupted" in str(r.failure())


# --- progress --------------------------------------------------------------------------------


TRACE_TALKER = """
import sys, time
for i in range(6):
    print("[spec-propose] rows=1 nqpr=3 drafts/row=2 first=[1 2 ]", file=sys.stderr, flush=True)
    print(f"[SPECTRACE] req=r0 pos={10 + 3 * i} k=2 ns=3 acc=2 draft=[ 1 2 ] emit=[ 1 2 3 ]",
          file=sys.stderr, flush=True)
    time.sleep(0.25)
"""

PTY_SCRIPT = """
import sys
from pathlib import Path
from difftest.config import ArmSpec
from difftest.execute import run_arms
specs = [ArmSpec("paged", (sys.executable, "-c", sys.argv[2])),
         ArmSpec("materialized", (sys.executable, "-c", "import time; time.sleep(0.8)"))]
run_arms(specs, Path(sys.argv[1]), progress=None)
"""


def test_progress_on_a_terminal_counts_trace_lines_and_blocks(tmp_path: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120", "LINES": "30"}
    proc = subprocess.Popen([PY, "-c", PTY_SCRIPT, str(tmp_path / "run"),
                             textwrap.dedent(TRACE_TALKER)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=follower, env=env)
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(leader)
    text = b"".join(chunks).decode()
    assert proc.returncode == 0, text
    counts = [(int(m[0]), int(m[1])) for m in
              __import__("re").findall(r"paged: running [0-9.]+s, (\d+) trace lines, (\d+) blocks",
                                       text)]
    assert counts, text
    assert counts[-1][0] > counts[0][0] or len(set(counts)) > 1, "the counts never moved"
    assert all(lines == 2 * blocks or lines == 2 * blocks + 1 for lines, blocks in counts)
    assert "materialized: running" in text
    assert "\x1b[J" in text  # redrawn in place
    assert text.rstrip().endswith("analysing")


def test_progress_without_a_terminal_is_a_plain_heartbeat(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from difftest.execute import progress

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.5)
    run_arms([py_arm("paged", TRACE_TALKER)], tmp_path, progress=True)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err
    lines = err.splitlines()
    beats = [line for line in lines if "running" in line]
    assert 1 <= len(beats) <= 4, err  # ~1.5 s of arm at one line per 0.5 s
    assert "arms: 0 queued, 1 running, 0 done: paged: running" in beats[0]
    assert lines[-1].startswith("difftest: arms done in") and lines[-1].endswith("analysing")
    run_arms([py_arm("quiet", "pass")], tmp_path / "q", progress=False)
    assert capsys.readouterr().err == ""


# --- git_ref arms ----------------------------------------------------------------------------


def _repo_with_script(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "engine"
    (repo / "tools").mkdir(parents=True)
    (repo / "tools" / "run.py").write_text(
        "import os, pathlib\nprint(pathlib.Path('built.txt').read_text().strip() if "
        "pathlib.Path('built.txt').exists() else 'unbuilt', os.getcwd())\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "x")
    return repo, git(repo, "rev-parse", "HEAD")


def test_git_ref_arm_runs_in_its_checkout(tmp_path: Path) -> None:
    pytest.importorskip("difftest.execute.worktree")
    repo, sha = _repo_with_script(tmp_path)
    build = (PY, "-c", "open('tools/built.txt', 'w').write('built')")
    spec = ArmSpec("main", (PY, "run.py"), git_ref="main", build=build, repo=repo, cwd="tools")
    plain = ArmSpec("again", (PY, "run.py"), git_ref=sha, repo=repo, cwd="tools")
    results = run_arms([spec, plain], tmp_path / "run", progress=False,
                       cache_dir=tmp_path / "cache")
    res = results["main"]
    assert res.ok, res.failure()
    assert res.git_ref == "main" and res.git_sha == sha
    word, cwd = res.stdout_path.read_text().split()
    assert word == "built" and Path(cwd).name == "tools" and Path(cwd).parent != repo
    assert Path(cwd).is_relative_to(tmp_path / "cache")
    assert results["again"].ok and results["again"].git_sha == sha
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["arms"]["main"]["git_sha"] == sha and meta["arms"]["main"]["build_log"]


def test_git_ref_errors_become_arm_errors(tmp_path: Path) -> None:
    pytest.importorskip("difftest.execute.worktree")
    repo, _ = _repo_with_script(tmp_path)
    specs = [ArmSpec("badref", (PY, "run.py"), git_ref="no-such-branch", repo=repo),
             ArmSpec("badbuild", (PY, "run.py"), git_ref="main", repo=repo,
                     build=(PY, "-c", "import sys; print('cc: error', file=sys.stderr); "
                                      "sys.exit(2)")),
             py_arm("fine", "print('ok')")]
    results = run_arms(specs, tmp_path / "run", progress=False, cache_dir=tmp_path / "cache")
    bad = results["badref"]
    assert bad.returncode is None and bad.error and "no-such-branch" in bad.error
    assert "arm 'badref': git ref 'no-such-branch'" in str(bad.failure())
    build = results["badbuild"]
    assert build.error and "failed" in build.error and build.build_log
    assert Path(build.build_log).is_file() and "cc: error" in Path(build.build_log).read_text()
    assert results["fine"].ok


# --- failure() for each kind -----------------------------------------------------------------


def _result(tmp_path: Path, **kw: object) -> ArmResult:
    base: dict[str, object] = dict(
        name="x", argv=["x"], cwd="/", env_overrides={}, stdout_path=tmp_path / "x.stdout",
        stderr_path=tmp_path / "x.stderr", returncode=0, timed_out=False, interrupted=False,
        started_at="", ended_at="", duration_s=0.0, git_ref=None, git_sha=None, error=None)
    base.update(kw)
    return ArmResult(**base)  # type: ignore[arg-type]


def test_failure_messages(tmp_path: Path) -> None:
    assert _result(tmp_path).failure() is None and _result(tmp_path).ok
    assert "did not finish" in str(_result(tmp_path, returncode=None).failure())
    assert "timed out after its limit" in str(_result(tmp_path, timed_out=True,
                                                      returncode=-15).failure())
    assert "timed out after 2.5 s" in str(_result(tmp_path, timed_out=True, timeout_s=2.5,
                                                  returncode=None).failure())
    assert not _result(tmp_path, interrupted=True).ok
    cannot = _result(tmp_path, error="cannot start: x", returncode=None).failure()
    assert cannot is not None and cannot.returncode is None and "cannot start: x" in str(cannot)
    assert _result(tmp_path).stderr_tail() == ""  # no capture file: empty, no exception
    long = tmp_path / "long.stderr"
    long.write_bytes(b"y" * 100_000 + b"\nlast\n")
    assert _result(tmp_path, stderr_path=long).stderr_tail(5) == "last"  # no cut-off fragment


def test_progress_fits_many_arms_into_a_short_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import os as _os

    from difftest.execute.progress import ArmState, ArmStatus, Progress

    monkeypatch.setattr("shutil.get_terminal_size", lambda fallback=None: _os.terminal_size((40, 5)))
    out = io.StringIO()
    bar = Progress(True, stream=out, tty=True)
    arms = ([ArmStatus(f"arm{i}", ArmState.RUNNING, 1.0, 10 * i, i) for i in range(6)]
            + [ArmStatus("q", ArmState.QUEUED, 0.0, 0, 0),
               ArmStatus("d", ArmState.DONE, 2.0, 5, 2, "exit 0")])
    bar.draw(arms, force=True)
    lines = out.getvalue().split("\n")
    assert lines[0] == "arms: 1 queued, 6 running, 1 done"
    assert len(lines) == 4 and lines[-1] == "... and 4 more running"  # 5 rows - 2 kept free
    assert all(len(line) <= 39 for line in lines)
    bar.draw(arms, force=True)  # redrawn in place: up 3 lines, clear, draw
    assert "\x1b[3F\r\x1b[J" in out.getvalue()


def test_a_failed_write_names_the_file_it_was_writing(tmp_path: Path) -> None:
    """A write or fsync error carries no file name; the atomic writer adds the target's, so a
    full disk is never reported as a failure to write to standard output."""
    import errno

    from difftest.core.atomic import write_with

    def full(_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "report.md"
    with pytest.raises(OSError) as err:
        write_with(target, full)
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(target))
    assert not target.exists() and list(tmp_path.iterdir()) == []
