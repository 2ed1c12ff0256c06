"""Coverage as evidence through real runs: the shipped lanes comparison on prompts whose drafted
blocks never reach a page boundary is uninformative (exit 3) and names the missing state; on
the shipped prompts it stays AGREE. The shipped config runs as it is, but for its two lane arms'
commands, which replay the reference runner's captures of those arms (tests/data/shipped/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPLAY

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "configs" / "default.toml"
CAPTURES = ROOT / "tests" / "data" / "shipped"  # scripts/capture_replay_traces.py shipped
LANE_COMMAND = '''command = ["{python}", "-m", "difftest.runners.reference",
           "--drafter", "dflash2", "--scalars", "on",
           "--fixture", "informative"]'''


def _compare(tmp_path: Path, captured: str) -> subprocess.CompletedProcess[str]:
    """`difftest compare` of the shipped lanes, each arm printing the runner's capture of it
    (`captured`: the suffix naming which)."""
    text = SHIPPED.read_text()
    paged, materialized = text.split("[arms.materialized]", 1)
    assert paged.count(LANE_COMMAND) == 1 and materialized.count(LANE_COMMAND) >= 1

    def replay(arm: str) -> str:
        argv = ["{python}", "-c", REPLAY, str(CAPTURES / f"{arm}{captured}.log")]
        return f"command = {json.dumps(argv)}"
    (tmp_path / "difftest.toml").write_text(
        paged.replace(LANE_COMMAND, replay("paged")) + "[arms.materialized]"
        + materialized.replace(LANE_COMMAND, replay("materialized"), 1))
    return subprocess.run([sys.executable, "-m", "difftest", "compare", "--arm-a", "paged",
                           "--arm-b", "materialized", "--run-root", str(tmp_path / "runs"),
                           "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


def test_prompts_that_never_reach_a_page_boundary_are_uninformative(tmp_path: Path) -> None:
    # one request of 4 ids, 2 steps (the arms run with `--requests 1 --prompt-len 4 --steps 2`
    # added): every drafted block stays inside the first page
    proc = _compare(tmp_path, "-short")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "UNINFORMATIVE" in proc.stdout
    assert "page boundary inside a drafted block (page_cross), which neither arm exercised " \
           "(paged: 0, materialized: 0; 1 needed)" in proc.stdout


def test_the_shipped_prompts_reach_it_and_agree(tmp_path: Path) -> None:
    proc = _compare(tmp_path, "")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AGREE" in proc.stdout and "coverage:" not in proc.stdout
