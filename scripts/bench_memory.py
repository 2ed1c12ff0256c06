"""Peak memory of `difftest compare --trace-a A --trace-b B` against trace size and top-k width.

Each measurement runs in a fresh child process and reads its peak resident set (ru_maxrss);
the baseline (importing difftest and comparing a one-row trace) is subtracted, and what is
left is divided by the logit values in both traces. Memory bounded by the input's size means
that figure stays flat as the traces grow and as the top-k widens (1, 8, 64, 1024).

    python scripts/bench_memory.py                  # the table in docs/safety.md
    python scripts/bench_memory.py --values 200000  # one size only, faster
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHILD = r"""
import json, resource, sys
from difftest import api
rep = api.compare_traces(sys.argv[1], sys.argv[2])
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rss": rss, "verdict": str(rep.verdict.kind)}))
"""


def write_trace(path: Path, rows: int, k: int, shift: float) -> None:
    """`rows` steps of one request, each one drafted token and its top-k logit row."""
    with open(path, "w") as fh:
        pos = 1
        for i in range(rows):
            top = " ".join(f"{(i * 7 + j * 13) % 50000}:{(k - j) / 4 + shift:.4f}"
                           for j in range(k))
            first = (i * 7) % 50000
            fh.write(f"[spec-logits] req=r pos={pos} row=1 top=[ {top} ]\n")
            fh.write(f"[SPECTRACE] req=r pos={pos} k=1 ns=2 acc=1 draft=[ {first} ] "
                     f"emit=[ {first} 3 ]\n")
            pos += 2


@dataclass(frozen=True)
class Measure:
    rows: int
    k: int
    values: int  # logit values in both traces
    trace_bytes: int
    rss: int  # peak resident set of the child, bytes


def measure(tmp: Path, rows: int, k: int) -> Measure:
    a, b = tmp / f"a-{rows}-{k}.log", tmp / f"b-{rows}-{k}.log"
    write_trace(a, rows, k, 0.0)
    write_trace(b, rows, k, 0.0005)
    out = subprocess.run([sys.executable, "-c", CHILD, str(a), str(b)], capture_output=True,
                         text=True, check=True)
    rss = int(json.loads(out.stdout)["rss"])
    size = a.stat().st_size + b.stat().st_size
    a.unlink()
    b.unlink()
    return Measure(rows, k, 2 * rows * k, size, rss)


def judge_peaks(values: int = 200 * 1024) -> None:
    """Peak traced memory (tracemalloc) of the row judgement and the statistics per value, on
    paired rows built in memory: the part of compare whose memory once grew with k x k."""
    import time
    import tracemalloc

    import numpy as np

    from difftest.numerics.stats import PairedRows, logit_stats
    from difftest.numerics.tolerance import Tolerance, judge_rows

    print(f"row judgement + statistics, {values} values:")
    for k in (1, 8, 64, 1024):
        rng = np.random.default_rng(k)
        rows = values // k
        ids_a = np.argsort(rng.random((rows, 4 * k)), axis=1)[:, :k].astype(np.int32)
        ids_b = ids_a.copy()
        ids_b[rng.random((rows, k)) < 0.25] += 4 * k
        vals = np.round(rng.normal(size=(rows, k)), 3)
        pairs = PairedRows(ids_a, vals, ids_b, vals + 0.0)
        tracemalloc.start()
        t0 = time.perf_counter()
        judge_rows(pairs, Tolerance(atol=0.0), 6, 6)
        logit_stats(pairs)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"  k={k:>5}: {peak / values:>7.0f} bytes/value peak, {seconds:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description="Peak memory of compare against trace size and "
                                             "top-k width.")
    ap.add_argument("--values", type=int, nargs="*", default=[50_000, 200_000, 800_000],
                    help="logit values per trace")
    ap.add_argument("--k", type=int, nargs="*", default=[1, 8, 64, 1024])
    ap.add_argument("--judge-only", action="store_true",
                    help="only the in-process row judgement peaks (a second)")
    args = ap.parse_args()
    judge_peaks()
    if args.judge_only:
        return
    with tempfile.TemporaryDirectory(prefix="difftest-bench-") as tmp:
        base = measure(Path(tmp), 1, 1).rss
        print(f"baseline (import + one-row compare): {base / 2**20:.0f} MiB")
        print(f"{'values/trace':>12} {'k':>5} {'rows':>8} {'trace MB':>9} {'peak MiB':>9} "
              f"{'above base MiB':>14} {'bytes/value':>11}")
        for values in args.values:
            for k in args.k:
                m = measure(Path(tmp), max(1, values // k), k)
                extra = max(0, m.rss - base)
                print(f"{values:>12} {k:>5} {m.rows:>8} {m.trace_bytes / 1e6:>9.1f} "
                      f"{m.rss / 2**20:>9.0f} {extra / 2**20:>14.0f} "
                      f"{extra / m.values:>11.0f}", flush=True)


if __name__ == "__main__":
    main()
