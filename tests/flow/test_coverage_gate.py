"""Coverage as evidence through real runs: the shipped lanes comparison on prompts whose drafted
blocks never reach a page boundary is uninformative (exit 3) and names the missing state; on
the shipped prompts it stays AGREE."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "configs" / "default.toml"
INFORMATIVE = '"--fixture", "informative"]'


def _compare(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    text = SHIPPED.read_text()
    assert text.count(INFORMATIVE) >= 2
    (tmp_path / "difftest.toml").write_text(
        text.replace(INFORMATIVE, f'"--fixture", "informative"{extra}]'))
    return subprocess.run([sys.executable, "-m", "difftest", "compare", "--arm-a", "paged",
                           "--arm-b", "materialized", "--run-root", str(tmp_path / "runs"),
                           "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


def test_prompts_that_never_reach_a_page_boundary_are_uninformative(tmp_path: Path) -> None:
    # one request of 4 ids, 2 steps: every drafted block stays inside the first page
    proc = _compare(tmp_path, ', "--requests", "1", "--prompt-len", "4", "--steps", "2"')
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "UNINFORMATIVE" in proc.stdout
    assert "page boundary inside a drafted block (page_cross), which neither arm exercised " \
           "(paged: 0, materialized: 0; 1 needed)" in proc.stdout


def test_the_shipped_prompts_reach_it_and_agree(tmp_path: Path) -> None:
    proc = _compare(tmp_path, "")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AGREE" in proc.stdout and "coverage:" not in proc.stdout
