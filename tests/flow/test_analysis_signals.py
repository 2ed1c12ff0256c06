"""Signals while the analysis runs (the arms have finished, their traces are being judged):
difftest ends as it does when signalled while the arms run (exit 143, 129, 130, meta.json's
status, one line saying what was kept and what was not written). Real subprocesses, real
signals; the arms print traces large enough that judging them takes a while."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ctrl_c_reaches_it, replay_arm
from test_switch import steps, trace_file

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _status(runs: Path) -> str | None:
    for meta in runs.glob("*/meta.json"):
        try:
            return str(json.loads(meta.read_text())["status"])
        except (OSError, ValueError, KeyError):
            return None
    return None


@pytest.fixture(scope="module")
def large_traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two traces of about 30 MB each: judging them takes seconds, so the signal sent when
    the arms are done lands in the analysis even on a loaded machine (the signal ends the run,
    so the rest of the analysis costs nothing)."""
    tmp = tmp_path_factory.mktemp("large")
    lines = steps(n=30000, logits_width=4)
    return (trace_file(tmp, "a.log", lines),
            trace_file(tmp, "b.log", [*lines, "[spec-config] build=second"]))


@pytest.mark.parametrize("sig, code, status", [(signal.SIGTERM, 143, "terminated"),
                                               (signal.SIGHUP, 129, "hangup"),
                                               (signal.SIGINT, 130, "interrupted")])
def test_a_signal_during_the_analysis_ends_like_one_during_the_arms(
        tmp_path: Path, large_traces: tuple[Path, Path], sig: int, code: int,
        status: str) -> None:
    a, b = large_traces
    (tmp_path / "difftest.toml").write_text(replay_arm("a", a) + replay_arm("b", b))
    runs = tmp_path / "runs"
    proc = subprocess.Popen([PY, "-m", "difftest", "compare", "--arm-a", "a", "--arm-b", "b",
                             "--run-root", str(runs), "--no-progress"], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and _status(runs) != "done":
            time.sleep(0.005)
        assert _status(runs) == "done", "the arms never finished"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, (proc.returncode, out, err)
    run_dir = next(runs.iterdir())
    name = signal.Signals(sig).name
    assert f"during the analysis: the arms had finished and their captures are kept in " \
           f"{run_dir}" in err, err
    assert "not written: report.json, report.md, report.html, diff.csv" in err, err
    assert f"difftest export {run_dir}" in err
    if sig != signal.SIGINT:
        assert f"({name})" in err
    assert "Traceback" not in err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert (meta["status"], meta["signal"], meta["stopped_in"]) == (status, name, "analysis")
    assert all(arm["returncode"] == 0 for arm in meta["arms"].values())
    assert not list(run_dir.glob("report.*")) and not list(run_dir.glob(".*tmp*"))
