"""Cases an attack on the integrated tool found: each was a false pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from difftest.api import compare_traces
from difftest.core.kinds import VerdictKind


def _trace(path: Path, top1: str, top2: str) -> Path:
    lines = []
    for pos, (top, other) in enumerate((("5", "4"), (top1, top2))):
        lines += [f"[spec-logits] req=r pos={pos} row=1 top=[ {pos + 1}:{top} 20:{other} ]",
                  f"[SPECTRACE] req=r pos={pos} k=1 ns=1 acc=0 draft=[ {pos + 1} ] "
                  f"emit=[ {pos + 7} ]"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_short_printed_values_never_make_a_coarse_resolution(tmp_path: Path) -> None:
    # every value happens to print short ("5", "7"): the format is still taken to print at
    # least 6 digits, so a difference of 0.4 is real under atol 0.01, not rounding
    a = _trace(tmp_path / "a.log", "7", "4")
    b = _trace(tmp_path / "b.log", "7.4", "4.3")
    rep = compare_traces(a, b, atol=0.01)
    assert rep.verdict.kind is VerdictKind.DIFFER
    assert rep.comparison is not None and rep.comparison.blocks_logit_differing == 1


def test_python_m_difftest_cli_runs_the_command_line(tmp_path: Path) -> None:
    a = _trace(tmp_path / "a.log", "7", "4")
    b = _trace(tmp_path / "b.log", "7.4", "4.3")
    proc = subprocess.run([sys.executable, "-m", "difftest.cli", "compare", "--trace-a", str(a),
                           "--trace-b", str(b), "--atol", "0.01"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("traces: DIFFER")
