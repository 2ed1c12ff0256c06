"""What comparing costs on top of parsing: a pair of large level-3 traces, parsed only, against
parsed, aligned, compared, audited and judged.

The issue's target: the whole comparison of a 200 MB pair stays below the time of parsing both
files plus 20%. Arm A comes from `bench_parse.generate`; arm B is A with a few drafted ids and
logit values changed (rows that were rejected, so the emitted streams stay identical and every
step is compared). Each contender runs in its own interpreter (its own page of peak RSS, no
warm caches of the other), interleaved so that drift on a shared machine hits both alike.

Usage: python scripts/bench_compare.py [--mb 200] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_parse import generate  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DRAFT_EVERY = 5000  # every n-th verify line whose last row was rejected gets another last id
LOGIT_EVERY = 7001  # every n-th logits line gets its top-1 value nudged


def make_arm_b(a: Path, b: Path) -> tuple[int, int]:
    """Copy A to B with a few rows changed; returns (drafts changed, logit rows changed)."""
    drafts = logits = 0
    n_verify = n_logits = 0
    with open(a, "rb") as src, open(b, "wb") as dst:
        for line in src:
            if line.startswith(b"[SPECTRACE]"):
                n_verify += 1
                if n_verify % DRAFT_EVERY == 0:
                    head, _, rest = line.partition(b"draft=[ ")
                    ids, _, tail = rest.partition(b" ]")
                    fields = dict(f.split(b"=", 1) for f in head.split()[1:])
                    draft = ids.split()
                    if int(fields[b"acc"]) < len(draft):  # the last row was not accepted
                        draft[-1] = str((int(draft[-1]) + 1) % 4096).encode()
                        line = head + b"draft=[ " + b" ".join(draft) + b" ]" + tail
                        drafts += 1
            elif line.startswith(b"[spec-logits]"):
                n_logits += 1
                if n_logits % LOGIT_EVERY == 0:
                    head, _, rest = line.partition(b"top=[ ")
                    first, _, others = rest.partition(b" ")
                    tok, _, val = first.partition(b":")
                    nudged = repr(float(val) + 0.001).encode()
                    line = head + b"top=[ " + tok + b":" + nudged + b" " + others
                    logits += 1
            dst.write(line)
    return drafts, logits


PARSE_ONLY = """
from difftest.trace import parse_trace
t0 = time.perf_counter()
a = parse_trace(A); b = parse_trace(B)
stages = {"parse": time.perf_counter() - t0}
result = {"verifies": len(a.verifies) + len(b.verifies)}
"""

FULL = """
from difftest.trace.align import align
from difftest.analysis.audit import audit_trace
from difftest.analysis.compare import compare
from difftest.trace import parse_trace
from difftest.analysis.verdict import judge
t0 = time.perf_counter()
a = parse_trace(A); b = parse_trace(B)
t1 = time.perf_counter()
al = align(a, b)
t2 = time.perf_counter()
c = compare(a, b, alignment=al)
t3 = time.perf_counter()
au_a, au_b = audit_trace(a), audit_trace(b)
t4 = time.perf_counter()
v = judge(c, au_a, au_b, names=("a", "b"))
t5 = time.perf_counter()
stages = {"parse": t1 - t0, "align": t2 - t1, "compare": t3 - t2, "audit": t4 - t3,
          "judge": t5 - t4}
result = {"verifies": len(a.verifies) + len(b.verifies), "verdict": v.kind,
          "blocks_compared": c.blocks_compared, "blocks_differing": c.blocks_differing,
          "blocks_logit_differing": c.blocks_logit_differing, "unmatched": c.unmatched_a + c.unmatched_b,
          "context_diverged": c.context_diverged}
"""

RUNNER = """
import json, resource, sys, time
A, B = sys.argv[1], sys.argv[2]
import numpy  # interpreter start-up and imports are not what is measured
start = time.perf_counter()
{body}
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "stages": stages, "result": result,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""

CONTENDERS = {"parse A + parse B": PARSE_ONLY, "parse + align + compare + judge": FULL}


def run_one(body: str, a: Path, b: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", RUNNER.format(body=body), str(a), str(b)],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0, help="size of each trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated pair in this folder")
    args = ap.parse_args()

    folder = args.keep or Path(tempfile.mkdtemp(prefix="difftest-bench-compare-"))
    folder.mkdir(parents=True, exist_ok=True)
    a, b = folder / "arm_a.log", folder / "arm_b.log"
    if not a.exists():
        t0 = time.perf_counter()
        generate(a, args.mb)
        print(f"generated {a} in {time.perf_counter() - t0:.1f}s")
    if not b.exists():
        drafts, logits = make_arm_b(a, b)
        print(f"arm B: {drafts} drafted ids and {logits} logit values changed")
    print(f"traces: {os.path.getsize(a) / 1e6:.1f} MB + {os.path.getsize(b) / 1e6:.1f} MB")

    runs: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
    for i in range(args.repeat):
        order = list(CONTENDERS) if i % 2 == 0 else list(reversed(CONTENDERS))
        for name in order:
            runs[name].append(run_one(CONTENDERS[name], a, b))

    print(f"\n{'contender':<34}{'best s':>8}{'median s':>10}{'peak RSS MB':>13}  runs")
    for name, rs in runs.items():
        secs = [r["seconds"] for r in rs]
        print(f"{name:<34}{min(secs):>8.2f}{statistics.median(secs):>10.2f}"
              f"{max(r['peak_rss_mb'] for r in rs):>13.0f}  "
              + " ".join(f"{s:.2f}" for s in secs))
    parse_runs, full_runs = runs["parse A + parse B"], runs["parse + align + compare + judge"]
    best_full = min(full_runs, key=lambda r: r["seconds"])
    print("\nstages of the best full run: " + ", ".join(
        f"{k} {v:.2f}s" for k, v in best_full["stages"].items()))
    print("result: " + ", ".join(f"{k}={v}" for k, v in best_full["result"].items()))
    # the same question without the noise of two parses: analysis after parsing, per full run
    share = [sum(v for k, v in r["stages"].items() if k != "parse") / r["stages"]["parse"]
             for r in full_runs]
    print("analysis after parsing / parsing, within each full run: "
          + " ".join(f"{x:.3f}" for x in share))
    best = min(r["seconds"] for r in full_runs) / min(r["seconds"] for r in parse_runs)
    med = (statistics.median(r["seconds"] for r in full_runs)
           / statistics.median(r["seconds"] for r in parse_runs))
    print(f"\nfull / parse-only: best {best:.3f}, median {med:.3f} (target below 1.20: "
          f"{'met' if best < 1.2 else 'NOT met'})")
    if args.keep is None:
        a.unlink()
        b.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
