"""Arms launched through a real Slurm (`srun`): the single-node cluster of scripts/slurm-up.sh.

Where Slurm is not installed these tests skip and say so; under CI (CI=true) they fail instead,
because CI installs and starts the cluster (.ci/run) and a skip there would hide a broken gate.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from difftest.config import ArmSpec
from difftest.execute import load_run, run_arms

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
SLURM_UP = REPO / "scripts" / "slurm-up.sh"
SRUN = ["srun", "-Q", "--"]


def _slurm_ready() -> str | None:
    """None when srun can run a job here, else why not."""
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        return "Slurm is not installed (apt-get install slurmctld slurmd slurm-client munge)"
    state = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True,
                           text=True, check=False)
    if state.returncode == 0 and state.stdout.split()[:1] in (["idle"], ["mix"], ["alloc"]):
        return None
    if os.geteuid() == 0 and shutil.which("slurmd"):
        up = subprocess.run(["bash", str(SLURM_UP), "start"], capture_output=True, text=True,
                            check=False, timeout=120)
        if up.returncode == 0:
            return None
        return f"scripts/slurm-up.sh start failed: {up.stderr.strip()[-500:]}"
    return f"no Slurm node takes jobs here (sinfo: {state.stdout.strip() or state.stderr.strip()})"


@pytest.fixture(scope="module")
def slurm() -> None:
    why = _slurm_ready()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"Slurm tests cannot run: {why}. CI must run scripts/slurm-up.sh first.")
    pytest.skip(f"Slurm tests need a Slurm cluster: {why}")


def _jobs_named(prefix: str) -> list[str]:
    out = subprocess.run(["squeue", "--noheader", "--format=%j %i %T"], capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith(prefix)]


def _wait_no_jobs(prefix: str, within: float = 5.0) -> list[str]:
    """Jobs left after `within` s: well under InactiveLimit (15 s), after which Slurm itself
    would cancel a job whose srun vanished and hide a leak."""
    end = time.monotonic() + within
    left = _jobs_named(prefix)
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = _jobs_named(prefix)
    return left


def _without_launcher_lines(data: bytes) -> bytes:
    return b"".join(line for line in data.splitlines(keepends=True)
                    if not line.startswith((b"srun: ", b"slurmstepd")))


def _untimed(data: bytes) -> bytes:
    """Phase lines carry wall-clock times, which differ between any two runs, local or not."""
    return re.sub(rb"=[0-9]+\.[0-9]+ms", b"=<t>ms", data)


REFERENCE = ["{python}", "-m", "difftest.runners.reference", "--lane", "paged", "--requests", "2",
             "--steps", "4"]


def _config(tmp_path: Path) -> Path:
    cmd = ", ".join(f'"{a}"' for a in REFERENCE)
    path = tmp_path / "difftest.toml"
    path.write_text(f"""
[arms.local]
command = [{cmd}]
env = {{ VT_SPEC_TRACE = "3", DIFFTEST_MUTATION = "none" }}
[arms.launched]
command = [{cmd}]
env = {{ VT_SPEC_TRACE = "3", DIFFTEST_MUTATION = "none" }}
launcher = ["srun", "--", ]
""")
    return path


def test_a_launched_arm_prints_what_the_local_one_prints(slurm: None, tmp_path: Path) -> None:
    # VT_SPEC_TRACE=1 in difftest's own environment must not win over the arm's "3".
    env = {**os.environ, "PYTHONPATH": str(REPO), "VT_SPEC_TRACE": "1"}
    run_root = tmp_path / "runs"
    proc = subprocess.run([PY, "-m", "difftest", "compare", "--config", str(_config(tmp_path)),
                           "--arm-a", "local", "--arm-b", "launched", "--run-root",
                           str(run_root), "--no-progress"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(run_root.iterdir())
    results, meta = load_run(run_dir)
    local, launched = results["local"], results["launched"]
    trace = local.stderr_path.read_bytes()
    assert b"[spec-logits]" in trace  # level 3 reached the job
    assert _untimed(_without_launcher_lines(launched.stderr_path.read_bytes())) == _untimed(trace)
    assert launched.stdout_path.read_bytes() == local.stdout_path.read_bytes()
    assert launched.launcher == ["srun", "--"] and local.launcher is None
    assert launched.job_id is not None and launched.job_id.isdigit()
    assert meta["arms"]["launched"]["job_id"] == launched.job_id


def test_srun_lines_in_the_trace_do_not_break_parsing(slurm: None, tmp_path: Path) -> None:
    """Without -Q srun adds its own lines to stderr; the parser skips them as noise."""
    code = ("import sys; print('[SPECTRACE] req=r0 pos=3 k=2 ns=3 acc=2 draft=[ 5 6 ] "
            "emit=[ 5 6 7 ]', file=sys.stderr); sys.exit(3)")
    res = run_arms([ArmSpec("noisy", (PY, "-c", code), launcher=("srun", "--"))],
                   tmp_path / "run", progress=False)["noisy"]
    from difftest.trace import parse_trace

    assert b"srun: error:" in res.stderr_path.read_bytes()
    trace = parse_trace(res.stderr_path)
    assert len(trace.verifies) == 1 and trace.lines_skipped >= 1 and not trace.findings


def test_a_failing_job_is_an_arm_failure_with_its_exit_code(slurm: None, tmp_path: Path) -> None:
    code = "import sys, time; print('boom', file=sys.stderr, flush=True); time.sleep(1.5); sys.exit(3)"
    specs = [ArmSpec("fails", (PY, "-c", code), launcher=tuple(SRUN)),
             ArmSpec("killed", ("sh", "-c", "kill -9 $$"), launcher=tuple(SRUN))]
    results = run_arms(specs, tmp_path / "run", progress=False)
    res = results["fails"]
    assert res.returncode == 3 and not res.ok
    failure = res.failure()
    assert failure is not None and failure.returncode == 3
    assert "exited with an error (exit code 3)" in str(failure) and "boom" in str(failure)
    assert res.job_id is not None
    assert results["killed"].returncode == 137  # srun reports a killed task as 128 + 9


def test_a_timeout_leaves_no_job_behind(slurm: None, tmp_path: Path) -> None:
    spec = ArmSpec("hung", ("sleep", "120"), launcher=("srun", "-Q", "--job-name=dt-hung", "--"),
                   timeout_s=2)
    t0 = time.monotonic()
    res = run_arms([spec], tmp_path / "run", progress=False)["hung"]
    assert time.monotonic() - t0 < 15
    assert res.timed_out and not res.ok
    assert _wait_no_jobs("dt-hung") == []


SIGTERM_CONFIG = """
[arms.a]
command = ["sleep", "120"]
launcher = ["srun", "-Q", "--job-name=dt-term-a", "--"]
[arms.b]
command = ["sleep", "120"]
launcher = ["srun", "-Q", "--job-name=dt-term-b", "--"]
"""


def test_sigterm_to_difftest_ends_the_jobs(slurm: None, tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(SIGTERM_CONFIG)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([PY, "-m", "difftest", "compare", "--config", str(config),
                             "--arm-a", "a", "--arm-b", "b", "--run-root", str(tmp_path / "runs"),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and len(
                [j for j in _jobs_named("dt-term-") if "RUNNING" in j]) < 2:
            time.sleep(0.2)
        assert len(_jobs_named("dt-term-")) == 2, "the jobs never ran"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err
    assert _wait_no_jobs("dt-term-") == []
    run_dir = next((tmp_path / "runs").iterdir())
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "terminated" and meta["signal"] == "SIGTERM"
    assert all(arm["interrupted"] for arm in meta["arms"].values())


def test_check_j2_on_the_shipped_config_through_srun_passes(slurm: None, tmp_path: Path) -> None:
    shipped = (REPO / "difftest" / "configs" / "default.toml").read_text()
    config = tmp_path / "difftest.toml"
    config.write_text('[defaults]\nlauncher = ["srun", "-Q", "--"]\n' + shipped)
    proc = subprocess.run([PY, "-m", "difftest", "check", "-j", "2", "--config", str(config),
                           "--run-root", str(tmp_path / "runs"), "--no-progress"],
                          capture_output=True, text=True, env={**os.environ,
                                                               "PYTHONPATH": str(REPO)},
                          cwd=tmp_path, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results, _ = load_run(next((tmp_path / "runs").iterdir()))
    assert len(results) == 19  # 6 arms, 3 mutated, 2 reruns for the nondet noise floor, the
    # sampled comparison's two arms and its three mutated ones, and sampled-t1's two and one
    assert all(r.launcher == ["srun", "-Q", "--"] and r.job_id for r in results.values())


def test_bisect_through_srun_with_j2(slurm: None, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two commits tested at once, each arm a Slurm job; the planted commit is named."""
    sys.path.insert(0, str(REPO / "tests"))
    from bisect_history import make_history, write_config

    from difftest import api

    monkeypatch.setenv("DIFFTEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BISECT_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.delenv("BISECT_FLAKE_RATE", raising=False)
    monkeypatch.chdir(tmp_path)
    h = make_history(tmp_path / "repo", 10, 6, unbuildable={2})
    config = write_config(tmp_path / "difftest.toml", h.repo, launcher=SRUN)
    r = api.bisect("lanes", good=h.shas[0], bad="main", config=config, repo=h.repo, jobs=2,
                   run_root=tmp_path / "runs")
    assert r.first_bad is not None and r.first_bad.sha == h.shas[6], r.message
    rounds = sorted((r.run_dir / "runs").iterdir())
    arms = [arm for d in rounds for arm in json.loads((d / "meta.json").read_text())["arms"]
            .values()]
    assert arms and all(a["launcher"] == SRUN for a in arms)
    # every arm ran inside a Slurm job of its own (the runner logs $SLURM_JOB_ID)
    jobs = [line.split()[2] for line in (tmp_path / "ledger").read_text().splitlines()]
    assert len(jobs) == r.arm_runs == len(arms) and all(j.isdigit() for j in jobs)
    assert len(set(jobs)) == len(jobs)
    sizes = [len(json.loads((d / "meta.json").read_text())["arms"]) for d in rounds]
    assert 4 in sizes  # two commits, two arms each, in one round
