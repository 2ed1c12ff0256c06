"""Parse throughput and peak memory: difftest's parser against pyarrow and pandas baselines.

Generates a large mixed level-3 trace (phase, propose, SPECTRACE, spec-logits top-8 rows, and 30%
other lines), then runs each contender in its own subprocess (so peak RSS is its own) on the same
file, side by side in one run:

- difftest: `parse_trace` (full grammar, validation, invariants, arrays out);
- pyarrow-regex: the best vectorized pipeline pyarrow offers over the same text: read lines as
  one string column, filter by tag, regex-extract fields, split and cast the id:logit lists;
- pandas-csv: pandas' C reader on the same numeric payload pre-extracted as CSV (no trace grammar
  at all: an upper bound on what reading those numbers can cost).

Usage: python scripts/bench_parse.py [--mb 200] [--repeat 3] [--keep PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOISE = [
    "[graph-dispatch] captured batch=4 tokens=64 graph=17",
    "[DFLASH-GRAPH] replay id=3 nodes=812",
    "vt-dump-logits: wrote 32768 floats",
    "INFO scheduler: 4 running, 0 waiting, kv usage 12.5%",
    "[dflash-route-debug] seam ok",
]


def generate(path: Path, target_mb: float, seed: int = 0, k: int = 16, reqs: int = 4) -> None:
    """Write a trace of about target_mb megabytes; every line valid, 30% of lines noise."""
    rnd = random.Random(seed)
    target = int(target_mb * 1e6)
    pos = {f"req{r}": 8 for r in range(reqs)}
    written = 0
    with open(path, "w") as fh:
        while written < target:
            out: list[str] = []
            out.append(f"[spec-phase] pre={rnd.random():.2f}ms backbone={rnd.random():.2f}ms "
                       f"sample={rnd.random() * 9:.2f}ms logits={reqs * k * 4096}")
            blocks = {}
            for name in pos:
                draft = [rnd.randrange(4096) for _ in range(k)]
                blocks[name] = draft
            first = " ".join(map(str, blocks["req0"]))
            out.append(f"[spec-propose] rows={reqs} nqpr={k + 1} drafts/row={k} first=[{first} ]")
            for name, draft in blocks.items():
                for row in range(1, k + 1):
                    vals = sorted((rnd.gauss(4, 3) for _ in range(8)), reverse=True)
                    ids = [draft[row - 1]] + [rnd.randrange(4096) for _ in range(7)]
                    top = " ".join(f"{i}:{v:.6g}" for i, v in zip(ids, vals, strict=False))
                    out.append(f"[spec-logits] req={name} pos={pos[name]} row={row} top=[ {top} ]")
                acc = rnd.randrange(k + 1)
                ns = acc + 1
                emit = draft[:acc] + [rnd.randrange(4096)]
                out.append(f"[SPECTRACE] req={name} pos={pos[name]} k={k} ns={ns} acc={acc} "
                           f"draft=[ {' '.join(map(str, draft))} ] emit=[ {' '.join(map(str, emit))} ]")
                pos[name] += ns
            # 30% of all lines are other program output
            n_noise = round(len(out) * 0.3 / 0.7)
            for _ in range(n_noise):
                out.insert(rnd.randrange(len(out) + 1), rnd.choice(NOISE))
            text = "\n".join(out) + "\n"
            fh.write(text)
            written += len(text)


def to_csv(trace: Path, csv_path: Path) -> None:
    """The numeric payload of the logits lines, one CSV row each (for the pandas baseline)."""
    import re

    pat = re.compile(r"\[spec-logits\] req=(\S+) pos=(\d+) row=(\d+) top=\[ (.*) \]")
    with open(trace) as src, open(csv_path, "w") as dst:
        dst.write("req,pos,row," + ",".join(f"id{i},v{i}" for i in range(8)) + "\n")
        for line in src:
            m = pat.match(line)
            if m:
                pairs = m.group(4).replace(":", ",").replace(" ", ",")
                dst.write(f"{m.group(1)},{m.group(2)},{m.group(3)},{pairs}\n")


CONTENDERS = {
    "difftest": """
from difftest.trace import parse_trace
t = parse_trace(PATH)
rows = len(t.logits); verifies = len(t.verifies)
""",
    "pyarrow-regex": """
import pyarrow as pa, pyarrow.compute as pc, pyarrow.csv as pcsv
tbl = pcsv.read_csv(PATH, read_options=pcsv.ReadOptions(column_names=["line"], block_size=1 << 24),
                    parse_options=pcsv.ParseOptions(delimiter="\\x01", quote_char=False,
                                                    escape_char=False))
col = tbl.column("line")
lg = pc.filter(col, pc.starts_with(col, "[spec-logits]"))
f = pc.extract_regex(lg, r"^\\[spec-logits\\] req=(?P<req>\\S+) pos=(?P<pos>-?\\d+) row=(?P<row>-?\\d+) top=\\[ *(?P<top>.*?) *\\]$")
req = pc.struct_field(f, "req"); pos = pc.cast(pc.struct_field(f, "pos"), pa.int64())
row = pc.cast(pc.struct_field(f, "row"), pa.int32())
items = pc.list_flatten(pc.split_pattern(pc.struct_field(f, "top"), " "))
kv = pc.split_pattern(items, ":")
ids = pc.cast(pc.list_element(kv, 0), pa.int32()); vals = pc.cast(pc.list_element(kv, 1), pa.float64())
ver = pc.filter(col, pc.starts_with(col, "[SPECTRACE]"))
vf = pc.extract_regex(ver, r"^\\[SPECTRACE\\] req=(?P<req>\\S+) pos=(?P<pos>-?\\d+) k=(?P<k>\\d+) ns=(?P<ns>\\d+) acc=(?P<acc>\\d+) draft=\\[ *(?P<draft>.*?) *\\] emit=\\[ *(?P<emit>.*?) *\\]$")
d = pc.cast(pc.list_flatten(pc.split_pattern(pc.struct_field(vf, "draft"), " ")), pa.int32())
rows = len(lg); verifies = len(ver)
""",
    "pandas-csv": """
import pandas as pd
df = pd.read_csv(CSV, engine="c")
rows = len(df); verifies = -1
""",
}

RUNNER = """
import json, resource, sys, time
PATH, CSV = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
{body}
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "rows": rows, "verifies": verifies,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run_one(name: str, trace: Path, csv_path: Path) -> dict:
    code = RUNNER.format(body=CONTENDERS[name])
    out = subprocess.run([sys.executable, "-c", code, str(trace), str(csv_path)],
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    return json.loads(out.stdout)


def baseline_rss() -> float:
    code = ("import resource, numpy, difftest.trace; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, cwd=Path(__file__).resolve().parent.parent).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated trace at this path")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="difftest-bench-"))
    trace = args.keep or tmp / "trace.log"
    if not trace.exists():
        t0 = time.perf_counter()
        generate(trace, args.mb)
        print(f"generated {trace} in {time.perf_counter() - t0:.1f}s")
    csv_path = tmp / "payload.csv"
    to_csv(trace, csv_path)
    size_mb = os.path.getsize(trace) / 1e6
    print(f"trace: {size_mb:.1f} MB; numeric payload CSV: {os.path.getsize(csv_path) / 1e6:.1f} MB")

    results: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
    for _ in range(args.repeat):  # interleaved, so drift hits every contender alike
        for name in CONTENDERS:
            results[name].append(run_one(name, trace, csv_path))
    import statistics

    base = min(r["seconds"] for r in results["pyarrow-regex"])
    print(f"\n{'contender':<15}{'best s':>9}{'median s':>10}{'MB/s':>8}{'peak RSS MB':>13}"
          f"{'vs pyarrow':>12}{'rows':>10}")
    for name, runs in results.items():
        secs = [r["seconds"] for r in runs]
        best = min(secs)
        print(f"{name:<15}{best:>9.2f}{statistics.median(secs):>10.2f}{size_mb / best:>8.1f}"
              f"{max(r['peak_rss_mb'] for r in runs):>13.0f}{base / best:>11.2f}x"
              f"{runs[0]['rows']:>10}")
    ours = results["difftest"][0]
    # per logit row: 8 int32 ids, 8 float64 values, req, pos, row, width, line
    arrays_mb = ours["rows"] * (8 * 4 + 8 * 8 + 4 + 8 + 4 + 4 + 8) / 1e6
    print(f"\ndifftest peak RSS {max(r['peak_rss_mb'] for r in results['difftest']):.0f} MB "
          f"(interpreter+numpy alone: {baseline_rss():.0f} MB) vs text {size_mb:.0f} MB + "
          f"logit arrays ~{arrays_mb:.0f} MB = {size_mb + arrays_mb:.0f} MB")
    if args.keep is None:
        trace.unlink()
    csv_path.unlink()


if __name__ == "__main__":
    main()
