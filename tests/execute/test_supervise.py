"""A hostile world for the arm supervisor: signals to difftest, stragglers and daemons, spewing
arms, full disks, odd run roots and report paths, and run records from elsewhere. Real
processes, real signals, a real (tiny) filesystem.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import pytest

from difftest.config import ArmSpec, parse_config
from difftest.core.errors import ConfigError, RunSignal, UsageError, raise_pending
from conftest import Ran, cli_in, process_dead, wait_dead
from difftest.execute import load_run, new_run_dir, run_arms, signal_of, signals_as_interrupts

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# An arm whose child ignores SIGTERM; both print their pids.
STUBBORN_FAMILY = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
    print(os.getpid(), child.pid, flush=True)
    time.sleep(120)
""")

CONFIG = f"""
[arms.a]
command = [{json.dumps(PY)}, "-c", {json.dumps(STUBBORN_FAMILY)}]
[arms.b]
command = [{json.dumps(PY)}, "-c", {json.dumps(STUBBORN_FAMILY)}]
"""


@pytest.mark.parametrize("sig, code, status", [(signal.SIGTERM, 143, "terminated"),
                                               (signal.SIGHUP, 129, "hangup")])
def test_sigterm_and_sighup_end_every_arm_tree_and_say_so(tmp_path: Path, sig: int, code: int,
                                                          status: str) -> None:
    (tmp_path / "difftest.toml").write_text(CONFIG)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([PY, "-m", "difftest", "compare", "--arm-a", "a", "--arm-b", "b",
                             "--run-root", str(runs), "--no-progress"], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and len(pids) < 4:
            pids = [int(p) for f in runs.glob("*/*.stdout") for p in f.read_text().split()]
            time.sleep(0.05)
        assert len(pids) == 4, "the arms never started"
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            if not wait_dead(pid, 0):
                _kill(pid)
    assert proc.returncode == code, err
    assert f"({signal.Signals(sig).name})" in err and "what they printed is kept" in err
    assert took < 8, took
    for pid in pids:  # the arms and their TERM-ignoring children
        assert wait_dead(pid, 5.0), f"process {pid} outlived {signal.Signals(sig).name}"
    run_dir = next(runs.iterdir())
    results, meta = load_run(run_dir)
    assert meta["status"] == status and meta["signal"] == signal.Signals(sig).name
    assert all(r.interrupted and r.stdout_path.read_text() for r in results.values())


def test_a_grandchild_that_ignores_sigterm_is_ended_before_the_capture_is_read(
        tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, sys, time\\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
            "while True:\\n"
            "    print('late', file=sys.stderr, flush=True)\\n"
            "    time.sleep(0.05)\\n"])
        print(child.pid, flush=True)
        time.sleep(1.0)  # the child is ignoring SIGTERM by now
    """)
    t0 = time.monotonic()
    res = run_arms([ArmSpec("leaves", (PY, "-c", code))], tmp_path, progress=False)["leaves"]
    took = time.monotonic() - t0
    grandchild = int(res.stdout_path.read_text())
    assert wait_dead(grandchild, 0.5), "the grandchild outlived its arm"
    assert 3.0 <= took < 8.0, took  # 1 s of arm, TERM ignored: KILL after the 2 s grace
    size = res.stderr_path.stat().st_size
    time.sleep(0.3)
    assert res.stderr_path.stat().st_size == size, "the capture grew after the arm was over"
    assert res.ok


def test_a_daemon_that_left_the_group_is_a_warning_and_cannot_write_the_capture(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = textwrap.dedent("""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                print(os.getpid(), flush=True)
                while True:
                    try:
                        print("daemon", file=sys.stderr, flush=True)
                    except BrokenPipeError:
                        time.sleep(0.05)
                    time.sleep(0.02)
            os._exit(0)
        time.sleep(0.3)
    """)
    res = run_arms([ArmSpec("daemonic", (PY, "-c", code))], tmp_path, progress=False)["daemonic"]
    daemon = int(res.stdout_path.read_text().split()[0])
    try:
        assert not process_dead(daemon)
        assert len(res.warnings) == 1 and f"pid {daemon}" in res.warnings[0]
        assert "left its process group" in res.warnings[0]
        assert "left its process group" in capsys.readouterr().err
        size = res.stderr_path.stat().st_size
        time.sleep(0.3)
        assert res.stderr_path.stat().st_size == size, "a daemon wrote after the run"
        meta = json.loads((tmp_path / "meta.json").read_text())
        assert meta["arms"]["daemonic"]["warnings"] == res.warnings
    finally:
        _kill(daemon)


def test_max_capture_bytes_stops_a_spewing_arm(tmp_path: Path) -> None:
    spew = "import sys\nwhile True:\n    sys.stderr.write('x' * 4096 + '\\n')\n"
    cfg = parse_config(f"""
[arms.spew]
command = [{json.dumps(PY)}, "-c", {json.dumps(spew)}]
max_capture_bytes = 100000
timeout_s = 15
""", tmp_path / "difftest.toml")
    t0 = time.monotonic()
    res = run_arms([cfg.arms["spew"]], tmp_path / "run", progress=False)["spew"]
    assert time.monotonic() - t0 < 5
    assert not res.ok and res.error is not None
    assert "max_capture_bytes = 100000" in res.error
    failure = res.failure()
    assert failure is not None and "printed more than" in str(failure)
    assert res.stderr_path.stat().st_size + res.stdout_path.stat().st_size == 100000


# --- results never lost ----------------------------------------------------------------------


ONE_BLOCK = ("import sys; print('[SPECTRACE] req=r pos=3 k=2 ns=3 acc=2 draft=[ 5 6 ] "
             "emit=[ 5 6 7 ]', file=sys.stderr)")
TWO_ARMS = f"""
[arms.a]
command = [{json.dumps(PY)}, "-c", {json.dumps(ONE_BLOCK)}]
[arms.b]
command = [{json.dumps(PY)}, "-c", {json.dumps(ONE_BLOCK)}]
[comparisons.ab]
arm_a = "a"
arm_b = "b"
"""


def _difftest(cwd: Path, *args: str) -> Ran:
    """`difftest ARGS` from `cwd`, in this process (conftest.cli_in); the signal tests above
    run it as a process of its own, which is what they are about."""
    return cli_in(cwd, *args)


def test_check_creates_report_folders_and_survives_one_unwritable_path(tmp_path: Path) -> None:
    (tmp_path / "difftest.toml").write_text(TWO_ARMS)
    (tmp_path / "a-file").write_text("")
    r = _difftest(tmp_path, "check", "--run-root", "runs", "--junit", "reports/deep/junit.xml",
                  "--markdown", "a-file/check.md", "--no-progress")
    # the verdict is printed, the other reports written, and the missing one exits 2
    assert r.returncode == 2, r.stderr
    assert (tmp_path / "reports" / "deep" / "junit.xml").is_file()
    assert "a-file/check.md: cannot write" in r.stderr
    assert "ab" in r.stdout  # the verdict was printed
    run_dir = next((tmp_path / "runs").iterdir())
    assert {"check.json", "junit.xml", "check.md"} <= {p.name for p in run_dir.iterdir()}


def test_compare_csv_into_a_missing_folder_is_created(tmp_path: Path) -> None:
    (tmp_path / "difftest.toml").write_text(TWO_ARMS)
    (tmp_path / "link.csv").symlink_to(tmp_path / "victim")
    r = _difftest(tmp_path, "compare", "-c", "ab", "--run-root", "runs", "--csv",
                  "out/new/diff.csv", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "new" / "diff.csv").read_text().startswith("req,pos,row")
    assert not [p for p in (tmp_path / "out" / "new").iterdir() if p.name != "diff.csv"]
    # A link planted at the report path is refused (exit 2), never written through or replaced.
    r = _difftest(tmp_path, "compare", "-c", "ab", "--run-root", "runs", "--csv", "link.csv",
                  "--no-progress")
    assert r.returncode == 2 and "link.csv: is a symbolic link" in r.stderr, r.stderr
    assert not (tmp_path / "victim").exists() and (tmp_path / "link.csv").is_symlink()


@pytest.mark.parametrize("kind", ["file", "dangling-link", "read-only"])
def test_a_run_root_that_cannot_hold_runs_is_a_clear_exit_2(tmp_path: Path, kind: str) -> None:
    if kind == "read-only" and os.geteuid() == 0:
        pytest.skip("root writes into read-only directories; the full-disk test covers root")
    (tmp_path / "difftest.toml").write_text(TWO_ARMS)
    root = tmp_path / "root"
    if kind == "file":
        root.write_text("")
    elif kind == "dangling-link":
        root.symlink_to(tmp_path / "nowhere" / "deeper")
    else:
        root.mkdir(mode=0o500)
    r = _difftest(tmp_path, "compare", "-c", "ab", "--run-root", str(root), "--no-progress")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"difftest: error: run root {root}: cannot create a run directory")
    assert "Traceback" not in r.stderr


@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_exit_2_and_meta_json_is_finalised(tiny_disk: Path, tmp_path: Path) -> None:
    spew = "import sys\nfor _ in range(200):\n    sys.stderr.write('[spec-x] ' + 'y' * 4000 + '\\n')\n"
    (tmp_path / "difftest.toml").write_text(f"""
[arms.a]
command = [{json.dumps(PY)}, "-c", {json.dumps(spew)}]
[arms.b]
command = [{json.dumps(PY)}, "-c", "pass"]
""")
    r = _difftest(tmp_path, "compare", "--arm-a", "a", "--arm-b", "b", "--run-root",
                  str(tiny_disk), "--no-progress")
    assert r.returncode == 2, r.stderr
    assert "the disk is full" in r.stderr and "Traceback" not in r.stderr
    run_dir = next(tiny_disk.iterdir())
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["arms"]["a"]["ended_at"]
    assert meta["arms"]["b"]["returncode"] == 0


# --- untrusted run records and configs --------------------------------------------------------


def _a_run(tmp_path: Path) -> Path:
    run_dir = new_run_dir(tmp_path / "runs")
    run_arms([ArmSpec("a", (PY, "-c", ONE_BLOCK)), ArmSpec("b", (PY, "-c", ONE_BLOCK))], run_dir,
             progress=False)
    return run_dir


@pytest.mark.parametrize("path", ["/etc/passwd", "../../etc/passwd", "sub/a.stderr", ""])
def test_export_reads_only_names_inside_the_run_directory(tmp_path: Path, path: str) -> None:
    run_dir = _a_run(tmp_path)
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["arms"]["a"]["stderr_path"] = path
    (run_dir / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match="not a file name inside the run directory"):
        load_run(run_dir)
    r = _difftest(tmp_path, "export", str(run_dir))
    assert r.returncode == 2 and "root:" not in r.stdout + r.stderr


def test_export_does_not_follow_a_capture_linked_out_of_the_run(tmp_path: Path) -> None:
    run_dir = _a_run(tmp_path)
    (run_dir / "a.stderr").unlink()
    (run_dir / "a.stderr").symlink_to("/etc/passwd")
    r = _difftest(tmp_path, "export", str(run_dir))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "leads outside the run directory" in r.stderr and "root:" not in r.stdout


def test_meta_json_nested_thousands_deep_is_bad_input(tmp_path: Path) -> None:
    run_dir = _a_run(tmp_path)
    (run_dir / "meta.json").write_text('{"arms": ' + "[" * 50000 + "]" * 50000 + "}")
    with pytest.raises(UsageError, match="nested too deep"):
        load_run(run_dir)
    r = _difftest(tmp_path, "export", str(run_dir))
    assert r.returncode == 2 and "nested too deep" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("text, expected", [
    ('[arms.' + "x" * 300 + ']\ncommand = ["a"]\n', "an arm name must be at most 100 characters"),
    ('[arms.a]\ncommand = ["a\\u0000b"]\n', "key 'command': item 0 contains a NUL character"),
    ('[arms.a]\ncommand = ["a"]\nlauncher = ["srun", "\\u0000"]\n',
     "key 'launcher': item 1 contains a NUL character"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "TOML nested too deep"),
    ('[defaults]\nlauncher = "srun --"\n', "[defaults]: key 'launcher': must be an argv list"),
    ('[defaults]\nlaunched_jobs = 0\n', "[defaults]: key 'launched_jobs': must be >= 1"),
    ('[arms.a]\ncommand = ["a"]\nmax_capture_bytes = 0\n', "key 'max_capture_bytes': must be >= 1"),
])
def test_hostile_configs_are_named_errors(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        parse_config(text, tmp_path / "difftest.toml")
    assert expected in str(info.value)
    (tmp_path / "difftest.toml").write_text(text)
    r = _difftest(tmp_path, "compare", "--arm-a", "a", "--arm-b", "a")
    assert r.returncode == 2 and "Traceback" not in r.stderr and expected in r.stderr


def test_defaults_launcher_applies_to_arms_without_their_own(tmp_path: Path) -> None:
    cfg = parse_config('[defaults]\nlauncher = ["srun", "-Q", "--"]\ncache = "shared/cache"\n'
                       '[arms.a]\ncommand = ["x"]\n[arms.b]\ncommand = ["y"]\nlauncher = ["env"]\n',
                       tmp_path / "difftest.toml")
    assert cfg.arms["a"].launcher == ("srun", "-Q", "--")
    assert cfg.arms["b"].launcher == ("env",)
    assert cfg.defaults.cache == (tmp_path / "shared" / "cache").resolve()


# --- -j: how many arms at once ----------------------------------------------------------------


def _most_at_once(results: dict[str, object]) -> int:
    from datetime import datetime

    def ts(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    spans = [(ts(r.started_at), ts(r.ended_at)) for r in results.values()]  # type: ignore[attr-defined]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


def test_job_limits_cap_local_and_launched_arms_apart(tmp_path: Path) -> None:
    from difftest.execute import JobLimits

    nap = (PY, "-c", "import time; time.sleep(0.6)")
    local = [ArmSpec(f"l{i}", nap) for i in range(3)]
    launched = [ArmSpec(f"r{i}", nap, launcher=("env",)) for i in range(3)]
    res = run_arms(local, tmp_path / "one", progress=False, limits=JobLimits(total=1))
    assert _most_at_once(res) == 1
    res = run_arms(local + launched, tmp_path / "pools", progress=False,
                   limits=JobLimits(local=1, launched=3))
    assert _most_at_once({k: v for k, v in res.items() if k.startswith("l")}) == 1
    assert _most_at_once({k: v for k, v in res.items() if k.startswith("r")}) == 3
    assert all(r.ok and r.launcher == ["env"] for k, r in res.items() if k.startswith("r"))


def test_check_jobs_flag_caps_the_gate(tmp_path: Path) -> None:
    arms = "".join(f'[arms.n{i}]\ncommand = [{json.dumps(PY)}, "-c", "import time, sys; '
                   "time.sleep(0.5); print('[SPECTRACE] req=r pos=3 k=2 ns=3 acc=2 "
                   "draft=[ 5 6 ] emit=[ 5 6 7 ]', file=sys.stderr)\"]\n" for i in range(4))
    (tmp_path / "difftest.toml").write_text(
        arms + '[comparisons.a]\narm_a = "n0"\narm_b = "n1"\n'
               '[comparisons.b]\narm_a = "n2"\narm_b = "n3"\n')
    r = _difftest(tmp_path, "check", "-j", "1", "--run-root", "runs", "--no-progress")
    assert r.returncode == 0, r.stderr
    results, _ = load_run(next((tmp_path / "runs").iterdir()))
    assert len(results) == 4 and _most_at_once(results) == 1  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_python_dropped_in_a_weakref_callback_is_raised_again(sig: int) -> None:
    """A garbage collection can run a weakref callback just when a signal arrives: the
    handler's interrupt is raised inside the callback, where Python prints and drops it (a
    Ctrl-C during the analysis ended as AGREE). The signal is raised again at the next check."""
    class Held:
        pass

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored if run with &
    with signals_as_interrupts():
        held = Held()
        watch = weakref.ref(held, lambda _: os.kill(os.getpid(), sig))
        del held  # the callback runs now, and the interrupt raised in it is dropped
        assert watch() is None
        with pytest.raises(KeyboardInterrupt) as raised:
            raise_pending()
        assert signal_of(raised.value) == sig
        raise_pending()  # taken: raised once
    signal.signal(signal.SIGINT, before)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_dropped_signal_nothing_raised_again_ends_the_block() -> None:
    """Dropped in a callback, and no check inside the block: leaving the block raises it."""
    class Held:
        pass

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored if run with &
    try:
        with pytest.raises(RunSignal) as raised, signals_as_interrupts():
            held = Held()
            watch = weakref.ref(held, lambda _: os.kill(os.getpid(), signal.SIGHUP))
            del held
            assert watch() is None
        assert signal_of(raised.value) == signal.SIGHUP
        raise_pending()  # raised once
    finally:
        signal.signal(signal.SIGINT, before)
