"""A trace header's `k=` is one number the engine printed: a verify's depth is bounded by the
drafts its line lists, so a hostile `k=` costs what the line holds, not what it claims."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from conftest import verify_line
from difftest.analysis.acceptance import counts_of, measure
from difftest.trace import parse_trace

REPO = Path(__file__).resolve().parents[2]


def _arm(path: Path, first_k: int | None = None) -> Path:
    """Six requests of eight verifies drafting four ids; `first_k` rewrites the first line's k."""
    lines = []
    for r in range(6):
        pos = 0
        for s in range(8):
            draft = [100 + s, 200 + s, 300 + s, 400 + s]
            acc = (r + s) % 5
            emit = draft[:acc] + [900 + s]
            lines.append(verify_line(f"q{r}", pos, draft, emit))
            pos += len(emit)
    if first_k is not None:
        lines[0] = lines[0].replace("k=4 ", f"k={first_k} ", 1)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_k_beyond_the_listed_drafts_counts_the_listed_drafts(tmp_path: Path) -> None:
    a = parse_trace(_arm(tmp_path / "a.log"))
    b = parse_trace(_arm(tmp_path / "b.log", first_k=1000))
    assert int(b.verifies.k[0]) == 1000  # read as printed; the parser reports the mismatch
    counts = counts_of(b)
    assert int(counts.k.max()) == 4
    report = measure(a, b, ("a", "b"))
    assert report is not None
    assert len(report.deltas) == 4  # positions 1..4, as listed, not 1..1000
    # and a k below the list caps the depth of that verify (acc is capped with it)
    short = parse_trace(_arm(tmp_path / "s.log", first_k=1))
    assert int(counts_of(short).k[0]) == 1 and int(counts_of(short).acc[0]) <= 1


def test_compare_with_a_billion_k_finishes_quickly(tmp_path: Path) -> None:
    """End to end through the command: k=1000000000 beside four ids used to loop a billion
    positions; it now finishes like the unmodified pair."""
    a = _arm(tmp_path / "a.log")
    b = _arm(tmp_path / "b.log", first_k=1_000_000_000)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "difftest", "compare", "--trace-a", str(a),
                           "--trace-b", str(b), "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert time.monotonic() - start < 120
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1, 3), done.stderr
    assert "k=1000000000 but draft has 4 ids" in done.stdout + done.stderr
