"""What comparing costs on top of parsing, as ratios a regression shows in: end to end / parse
CPU seconds and peak RSS, at several trace sizes.

Arm A comes from `bench_parse.generate` (seeded, an independent writer of the trace format:
it does not use difftest's emitter); arm B is A with a few drafted ids and logit values
changed (rows that were rejected, so the emitted streams stay identical and every step is
compared). For each size, each contender runs in a fresh interpreter (its own peak RSS, no
warm caches of another), interleaved over --repeat rounds:

- parse: `parse_trace` of both files, nothing else;
- table: what `difftest compare --trace-a A --trace-b B` does by default (parse, audit, align,
  compare, judge, the terminal table), through the command line's own code;
- markdown, csv, html: the same with `--format markdown`, `--csv FILE`, `--html FILE`.

Every figure is CPU seconds (user + system) of the work after the imports, and peak RSS of
the whole child; each contender's child also reports its own parse stage, so the ratio is
also shown against the parse measured in the same process.

`--baseline DIR` runs each contender but the parse a second time from another checkout (a
`git worktree add --detach DIR REV` of an earlier commit, its compiled scanner built), named
`NAME@base`, interleaved with this checkout's: a before/after pair from one run.

Usage: python scripts/bench_compare.py [--mb 25 50 100 200] [--repeat 3] [--keep DIR]
       [--only table csv] [--baseline DIR] [--logit-every N]
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


def make_arm_b(a: Path, b: Path, logit_every: int = LOGIT_EVERY) -> tuple[int, int]:
    """Copy A to B with a few rows changed (every `logit_every`-th logits line's top-1 value:
    1 changes every row); returns (drafts changed, logit rows changed)."""
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
                if n_logits % logit_every == 0:
                    head, _, rest = line.partition(b"top=[ ")
                    first, _, others = rest.partition(b" ")
                    tok, _, val = first.partition(b":")
                    nudged = repr(float(val) + 0.001).encode()
                    line = head + b"top=[ " + tok + b":" + nudged + b" " + others
                    logits += 1
            dst.write(line)
    return drafts, logits


# The child: imports first (not measured: the modules the command imports, and those it imports
# at its first run, by a compare of two tiny committed traces; what starting difftest costs is
# the tiny compare's own figure in docs/performance.md), then the work, timed by CPU; the parse
# stage of the command line is timed by wrapping parse_trace where the analysis calls it.
CHILD = r"""
import io, json, resource, sys, time, contextlib
A, B, HOW, OUT = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
TINY = ("tests/data/compare/agree_a.log", "tests/data/compare/agree_b.log")
import numpy
from difftest.trace import parse_trace
parse_cpu = [0.0]
if HOW != "parse":
    import difftest.api, difftest.cli, difftest.flow.evaluate as ev, difftest.report.comparison
    import difftest.report.outputs, difftest.report.html, tabulate
    real = ev.parse_trace
    def timed(*args, **kwargs):
        t = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            parse_cpu[0] += time.process_time() - t
    ev.parse_trace = timed
    # the imports the command makes at its first run (typer's coercion, the analysis' modules)
    # happen here, on two tiny traces, and the figures' plotting modules are imported (not used)
    from difftest.cli import main
    sys.argv = ["difftest", "compare", "--trace-a", TINY[0], "--trace-b", TINY[1]]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
        except SystemExit:
            pass
    if HOW == "html":
        import matplotlib.figure, matplotlib.backends.backend_svg, matplotlib.colors
        import matplotlib.patches
else:
    parse_trace(TINY[0])  # the parse's own first run, likewise
parse_cpu[0] = 0.0
start = time.process_time()
if HOW == "parse":
    a = parse_trace(A); b = parse_trace(B)
    parse_cpu[0] = time.process_time() - start
    code = 0
else:
    from difftest.cli import main
    extra = {"table": [], "markdown": ["--format", "markdown"], "csv": ["--csv", OUT],
             "html": ["--html", OUT]}[HOW]
    sys.argv = ["difftest", "compare", "--trace-a", A, "--trace-b", B, *extra]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
cpu = time.process_time() - start
print(json.dumps({"cpu": cpu, "parse_cpu": parse_cpu[0], "code": code,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CONTENDERS = ("parse", "table", "markdown", "csv", "html")


def run_one(how: str, a: Path, b: Path, out: Path, repo: Path = REPO) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(a), str(b), how, str(out)],
                          capture_output=True, text=True, cwd=repo)
    if done.returncode != 0:
        raise SystemExit(f"{how} failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    out.unlink(missing_ok=True)
    return result


def pair(folder: Path, mb: float, logit_every: int = LOGIT_EVERY) -> tuple[Path, Path]:
    every = "" if logit_every == LOGIT_EVERY else f"_every{logit_every}"
    a, b = folder / f"arm_a_{mb:g}.log", folder / f"arm_b_{mb:g}{every}.log"
    if not a.exists():
        t0 = time.perf_counter()
        generate(a, mb)
        print(f"generated {a} in {time.perf_counter() - t0:.1f}s", flush=True)
    if not b.exists():
        drafts, logits = make_arm_b(a, b, logit_every)
        print(f"arm B: {drafts} drafted ids and {logits} logit values changed", flush=True)
    return a, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[25.0, 50.0, 100.0, 200.0],
                    help="size of each trace of a pair (one pair per size)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated pairs in this folder")
    ap.add_argument("--baseline", type=Path,
                    help="another checkout whose contenders (but the parse) run beside these")
    ap.add_argument("--logit-every", type=int, default=LOGIT_EVERY, metavar="N",
                    help="arm B changes every N-th logits line's top-1 value (1: every row "
                         "differs, none is judged as a plain row)")
    args = ap.parse_args()
    if "parse" not in args.only:
        args.only.insert(0, "parse")
    # contender name -> (what the child does, the checkout it imports difftest from)
    contenders = {name: (name, REPO) for name in args.only}
    if args.baseline is not None:
        contenders.update({f"{name}@base": (name, args.baseline.resolve())
                           for name in args.only if name != "parse"})

    folder = args.keep or Path(tempfile.mkdtemp(prefix="difftest-bench-compare-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'MB':>5} {'contender':<14} {'cpu s':>7} {'x parse':>8} {'x own parse':>12} "
          f"{'peak MB':>8} {'x parse':>8}  exit  runs (cpu s)")
    for mb in args.mb:
        a, b = pair(folder, mb, args.logit_every)
        runs: dict[str, list[dict]] = {name: [] for name in contenders}
        for i in range(args.repeat):
            order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
            for name in order:
                how, repo = contenders[name]
                runs[name].append(run_one(how, a, b, folder / "out.tmp", repo))
        parse_cpu = statistics.median(r["cpu"] for r in runs["parse"])
        parse_rss = statistics.median(r["peak_rss_mb"] for r in runs["parse"])
        for name, rs in runs.items():
            cpu = statistics.median(r["cpu"] for r in rs)
            own = statistics.median(r["cpu"] / r["parse_cpu"] for r in rs)
            rss = statistics.median(r["peak_rss_mb"] for r in rs)
            print(f"{mb:>5g} {name:<14} {cpu:>7.2f} {cpu / parse_cpu:>8.2f} {own:>12.2f} "
                  f"{rss:>8.0f} {rss / parse_rss:>8.2f}  {rs[0]['code']!s:>4}  "
                  + " ".join(f"{r['cpu']:.2f}" for r in rs), flush=True)
        if args.keep is None:
            a.unlink()
            b.unlink()
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.keep is None:
        folder.rmdir()


if __name__ == "__main__":
    main()
