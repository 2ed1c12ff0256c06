"""Parse throughput, side by side in one run: difftest's two readers against the strongest
baselines the Python ecosystem offers on the same file.

Generates a large mixed level-3 trace (phase, propose, SPECTRACE, spec-logits top-8 rows, and
30% other lines), then runs each contender in a fresh process (so CPU time, wall time and peak
RSS are its own), interleaved over --repeat rounds:

- difftest compiled: `parse_trace` with the C scanner (full grammar, validation, invariants,
  every line kind, arrays out);
- difftest pure: the same on the pure-Python reader (DIFFTEST_PURE_PARSER=1);
- pandas C engine: per 4 MB chunk, bytes filters pick the `[spec-logits]` and `[SPECTRACE]`
  lines (with line numbers), `bytes.translate` turns separators into spaces, and one
  `pandas.read_csv(engine="c")` per kind per chunk reads the numbers; SPECTRACE id lists in one
  numpy read per chunk. No validation beyond what read_csv does, no other line kind;
- pyarrow column: the file read by pyarrow.csv as one binary column, filtered by tag with
  compute kernels, separators replaced, and the filtered lines re-read by pyarrow.csv as
  space-separated columns (fixed K=8 top lists; SPECTRACE fixed fields only).

Every contender returns the logit rows' pos, row, ids and values; their checksums are compared
so a fast wrong answer shows. Usage:
    python scripts/bench_parse.py [--mb 200] [--repeat 3] [--keep PATH]
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



COMMON = """
import hashlib, json, resource, sys, time
import numpy as np
PATH = sys.argv[1]
def checksum(pos, row, ids, vals):
    h = hashlib.sha256()
    for a in (pos.astype(np.int64), row.astype(np.int64), ids.astype(np.int64),
              vals.astype(np.float64)):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]
"""

START = """
t0, c0 = time.perf_counter(), time.process_time()  # imports done: only the reading is timed
"""

TAIL = """
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "rows": int(len(pos)), "verifies": int(nver), "sum": checksum(pos, row, ids, vals),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

DIFFTEST = """
from difftest.trace import parse_trace, fast_path_available
assert fast_path_available(), "the compiled scanner is not built (pip install -e .)"
""" + START + """
t = parse_trace(PATH, pure=PURE)
lg = t.logits
pos, row, ids, vals, nver = lg.pos, lg.row, lg.top_ids, lg.top_vals, len(t.verifies)
"""

PANDAS = r"""
import io
import pandas as pd
""" + START + r"""
SEP = bytes.maketrans(b":=[]", b"    ")
parts = {"pos": [], "row": [], "ids": [], "vals": [], "line": [], "vfix": [], "vids": []}
lineno, carry = 1, b""
with open(PATH, "rb") as fh:
    while True:
        chunk = fh.read(4 << 20)
        if not chunk:
            break
        buf = carry + chunk
        cut = buf.rfind(b"\n")
        carry = buf[cut + 1:]
        lines = buf[:cut].split(b"\n")
        lg = [i for i, l in enumerate(lines) if l.startswith(b"[spec-logits] ")]
        ver = [i for i, l in enumerate(lines) if l.startswith(b"[SPECTRACE] ")]
        if lg:
            text = b"\n".join([lines[i] for i in lg]).translate(SEP)
            df = pd.read_csv(io.BytesIO(text), sep=r"\s+", header=None, engine="c",
                             usecols=[4, 6] + list(range(8, 24)))
            a = df.to_numpy()
            parts["pos"].append(a[:, 0]); parts["row"].append(a[:, 1])
            parts["ids"].append(a[:, 2::2].astype(np.int32)); parts["vals"].append(a[:, 3::2].astype(np.float64))
            parts["line"].append(np.asarray(lg) + lineno)
        if ver:
            vl = [lines[i] for i in ver]
            text = b"\n".join(l.split(b" draft=")[0] for l in vl).translate(SEP)
            parts["vfix"].append(pd.read_csv(io.BytesIO(text), sep=r"\s+", header=None, engine="c",
                                             usecols=[4, 6, 8, 10]).to_numpy())
            lists = b" ".join(l.split(b" draft=")[1] for l in vl).translate(SEP, b"emit")
            parts["vids"].append(np.fromstring(lists, dtype=np.int32, sep=" "))
        lineno += len(lines)
pos = np.concatenate(parts["pos"]); row = np.concatenate(parts["row"])
ids = np.concatenate(parts["ids"]); vals = np.concatenate(parts["vals"])
nver = sum(len(x) for x in parts["vfix"])
"""

PYARROW = r"""
import pyarrow as pa, pyarrow.compute as pc, pyarrow.csv as pcsv
""" + START + r"""
tbl = pcsv.read_csv(PATH, read_options=pcsv.ReadOptions(column_names=["l"], block_size=1 << 24),
                    parse_options=pcsv.ParseOptions(delimiter="\x1f", quote_char=False,
                                                    escape_char=False, ignore_empty_lines=False),
                    convert_options=pcsv.ConvertOptions(column_types={"l": pa.binary()}))
col = tbl.column("l")
def reread(mask):
    sel = pc.filter(col, mask)
    for old in (":", "=", "[", "]"):
        sel = pc.replace_substring(sel, old, " ")
    nl = pc.binary_join_element_wise(sel, pa.scalar(b"\n"), pa.scalar(b""))
    arr = pa.concat_arrays(nl.chunks)
    end = int(np.frombuffer(arr.buffers()[1], dtype=np.int32)[len(arr)])
    buf = arr.buffers()[2].slice(0, end)
    return pcsv.read_csv(pa.BufferReader(buf), read_options=pcsv.ReadOptions(autogenerate_column_names=True),
                         parse_options=pcsv.ParseOptions(delimiter=" ", quote_char=False, escape_char=False))
lmask = pc.starts_with(col, "[spec-logits] ")
lt = reread(lmask)  # columns: '' spec-logits '' req NAME pos P row W top '' '' id val ... '' ''
def c(i):
    return lt.column(i).to_numpy()
pos, row = c(6), c(8)
ids = np.stack([c(12 + 2 * j) for j in range(8)], axis=1).astype(np.int32)
vals = np.stack([c(13 + 2 * j) for j in range(8)], axis=1).astype(np.float64)
line = np.flatnonzero(lmask.to_numpy(zero_copy_only=False)) + 1
vmask = pc.starts_with(col, "[SPECTRACE] ")
nver = pc.sum(vmask).as_py()
"""

CONTENDERS = {
    "difftest compiled": "PURE = False\n" + DIFFTEST,
    "difftest pure": "PURE = True\n" + DIFFTEST,
    "pandas C engine": PANDAS,
    "pyarrow column": PYARROW,
}


def run_one(name: str, trace: Path) -> dict:
    code = COMMON + CONTENDERS[name] + TAIL
    out = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True,
                         text=True, check=False, cwd=Path(__file__).resolve().parent.parent)
    if out.returncode:
        raise SystemExit(f"{name} failed:\n{out.stderr}")
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
    ap.add_argument("--only", nargs="*", choices=list(CONTENDERS), help="run only these")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="difftest-bench-"))
    trace = args.keep or tmp / "trace.log"
    if not trace.exists():
        t0 = time.perf_counter()
        generate(trace, args.mb)
        print(f"generated {trace} in {time.perf_counter() - t0:.1f}s")
    size_mb = os.path.getsize(trace) / 1e6
    names = args.only or list(CONTENDERS)
    print(f"trace: {size_mb:.1f} MB; {args.repeat} interleaved rounds, fresh process each")

    results: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(args.repeat):  # interleaved, so drift hits every contender alike
        for name in names:
            results[name].append(run_one(name, trace))

    ref = "pandas C engine" if "pandas C engine" in results else names[0]
    ref_cpu = min(r["cpu"] for r in results[ref])
    print(f"\n{'contender':<19}{'CPU s':>7}{'wall s':>8}{'MB/s CPU':>10}{'MB/s wall':>11}"
          f"{'peak RSS MB':>13}{'vs pandas':>11}{'rows':>10}{'verifies':>10}  checksum")
    for name, runs in results.items():
        cpu = min(r["cpu"] for r in runs)
        wall = min(r["wall"] for r in runs)
        print(f"{name:<19}{cpu:>7.2f}{wall:>8.2f}{size_mb / cpu:>10.1f}{size_mb / wall:>11.1f}"
              f"{max(r['peak_rss_mb'] for r in runs):>13.0f}{ref_cpu / cpu:>10.2f}x"
              f"{runs[0]['rows']:>10}{runs[0]['verifies']:>10}  {runs[0]['sum']}")
    print("(best of the rounds; CPU = process CPU seconds; 'vs pandas' = throughput ratio on CPU)")
    sums = {runs[0]["sum"] for runs in results.values()}
    print("every contender read the same logit arrays" if len(sums) == 1 else
          f"CHECKSUMS DIFFER: {sums}")
    if "difftest compiled" in results:
        ours = results["difftest compiled"][0]
        arrays_mb = ours["rows"] * (8 * 4 + 8 * 8 + 4 + 8 + 4 + 4 + 8 + 1) / 1e6
        peak = max(r["peak_rss_mb"] for r in results["difftest compiled"])
        print(f"difftest compiled peak RSS {peak:.0f} MB (interpreter+numpy alone: "
              f"{baseline_rss():.0f} MB) vs text {size_mb:.0f} MB + logit arrays "
              f"~{arrays_mb:.0f} MB = {size_mb + arrays_mb:.0f} MB")
    if args.keep is None:
        trace.unlink()


if __name__ == "__main__":
    main()
