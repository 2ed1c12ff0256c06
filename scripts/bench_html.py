"""What report.html costs on a 200 MB level-3 pair: the comparison is judged once, then the page
(every figure binned, never one element per row) is rendered several times, CPU and wall time.

The pair comes from `bench_compare.py` (arm B is arm A with a few drafts and logits changed), so
the page has differing rows, a first difference and a non-trivial |logit diff| distribution.

Usage: python scripts/bench_html.py [--mb 200] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compare import make_arm_b  # noqa: E402
from bench_parse import generate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0, help="size of each trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated pair in this folder")
    ap.add_argument("--out", type=Path, help="write the last page here")
    args = ap.parse_args()

    folder = args.keep or Path(tempfile.mkdtemp(prefix="difftest-bench-html-"))
    folder.mkdir(parents=True, exist_ok=True)
    a, b = folder / "arm_a.log", folder / "arm_b.log"
    if not a.exists():
        generate(a, args.mb)
    if not b.exists():
        make_arm_b(a, b)

    from difftest.config import ComparisonSpec
    from difftest.flow.evaluate import judge_traces

    t0 = time.perf_counter()
    rep = judge_traces(a, b, ComparisonSpec(name="bench", arm_a="a", arm_b="b"))
    judged = time.perf_counter() - t0
    assert rep.comparison is not None
    print(f"pair: {a.stat().st_size / 1e6:.0f} MB + {b.stat().st_size / 1e6:.0f} MB, "
          f"{len(rep.comparison.rows):,} block rows, verdict {rep.verdict.kind}; "
          f"parse + compare + judge {judged:.1f} s wall")

    t0 = time.perf_counter()
    import matplotlib.figure  # noqa: F401  (the first import, counted once)

    print(f"import matplotlib: {time.perf_counter() - t0:.2f} s wall")
    from difftest.report.html import render_comparison

    walls, cpus = [], []
    page = ""
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        page = render_comparison(rep)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    print(f"render report.html ({len(page) / 1e6:.2f} MB, {page.count('<img ')} figures): "
          f"median {statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} s CPU "
          f"(runs: {', '.join(f'{w:.2f}' for w in walls)} s wall)")
    if args.out:
        args.out.write_text(page, encoding="utf-8")


if __name__ == "__main__":
    main()
