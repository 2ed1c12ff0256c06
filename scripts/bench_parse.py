"""Parse throughput, side by side in one run: difftest's two readers against the strongest
baselines the Python ecosystem offers on the same file.

Generates a large trace of one or more compositions (--mix; seeded, every line valid):

- standard: phase, propose, SPECTRACE, spec-logits top-8 rows printed with %.6g, 4 requests,
  and 30% other lines (`generate`);
- emitter: the emitter's spellings (%.9g of float32 logits, lists with a trailing space), 12
  requests with 22-byte names interleaved line by line, 6-digit ids, 15% logger output (some
  of it with `[` or a leading digit);
- wide: one request, top-32 lists of %.9g values, no other output;
- verify: level 1 only: SPECTRACE lines with k=24 lists of 6-digit ids, propose and phase;
- digits: top-8 values spelled the hard ways (%.17g of doubles, %.9e, values times 10**±30,
  signed zeros, subnormals, the largest double, exact halfway points between two doubles);
- noisy: 60% of lines vLLM-logger output (`INFO ... [engine.py:42] ...`), %.9g top-8 rows;

then runs each contender in a fresh process (so CPU time, wall time and peak RSS are its own),
interleaved over --repeat rounds:

- difftest compiled: `parse_trace` with the C scanner (full grammar, validation, invariants,
  every line kind, arrays out);
- difftest pure: the same on the pure-Python reader (DIFFTEST_PURE_PARSER=1);
- pandas C engine: per 4 MB chunk, bytes filters pick the `[spec-logits]` and `[SPECTRACE]`
  lines (with line numbers), `bytes.translate` turns separators into spaces, and one
  `pandas.read_csv(engine="c")` per kind per chunk reads the numbers; SPECTRACE id lists in one
  numpy read per chunk. No validation beyond what read_csv does, no other line kind;
- pyarrow column: the file read by pyarrow.csv as one binary column, filtered by tag with
  compute kernels, separators replaced, and the filtered lines re-read by pyarrow.csv as
  space-separated columns (top lists of the first row's width; SPECTRACE counted, not read).

Every contender returns the logit rows' pos, row, ids and values, and the routes that read
verifies their pos, k, ns, acc and id lists; checksums of both are compared so a fast wrong
answer shows. Usage:
    python scripts/bench_parse.py [--mb 200] [--repeat 3] [--mix standard emitter ...]
                                  [--keep DIR] [--only CONTENDER ...]
"""

from __future__ import annotations

import argparse
import decimal
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

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


MIXES = {
    "standard": "the generator above: %.6g values, K=8, k=16, 4 requests, 30% noise",
    "emitter": ("difftest.emit's spellings: %.9g float32 logits, K=8, k=6, 12 requests with "
                "22-byte names interleaved, 6-digit ids, 15% logger noise (some with `[`)"),
    "wide": "one request, K=32 top lists of %.9g float32 logits, k=4, no noise",
    "verify": "level 1: [SPECTRACE] with k=24 lists of 6-digit ids, propose and phase lines",
    "digits": ("K=8 values with exponents and long mantissas: %.17g of float64, %.9e, -0, "
               "subnormals, values that need round-half-even; 5% noise"),
    "noisy": ("60% of lines vLLM-logger output (`INFO 12-06 18:09:31 [engine.py:42] ...`, "
              "`[rank0]:`-free), %.9g K=8 logits, k=8, 2 requests"),
}

LOGGER = [
    "INFO 12-06 18:09:31 [engine.py:{n}] Avg prompt throughput: {f:.1f} tokens/s, Avg generation "
    "throughput: {g:.1f} tokens/s, Running: 12 reqs, Swapped: 0 reqs, Pending: 0 reqs",
    "DEBUG 12-06 18:09:31 [scheduler.py:{n}] scheduled {n} seqs, preempted 0, kv cache usage "
    "{f:.1f}%",
    "[graph-dispatch] captured batch={n} tokens=64 graph=17",
    "vt-dump-logits: wrote {n} floats",
    "WARNING 12-06 18:09:32 [metrics.py:{n}] spec decode metrics: draft acceptance rate "
    "{g:.3f}, system efficiency {f:.3f}",
    "{n} tokens done in {f:.3f}s",
]


def _f32(x: float) -> float:
    return float(np.float32(x))


def _digits_value(rnd: random.Random) -> str:
    """A value spelled the hard ways: long mantissas, exponents, signed zero, subnormals,
    decimal halfway cases."""
    kind = rnd.randrange(8)
    x = rnd.gauss(0, 8)
    if kind <= 2:
        return f"{x:.17g}"
    if kind == 3:
        return f"{_f32(x):.9e}"
    if kind == 4:
        return f"{x * 10 ** rnd.randint(-30, 30):.12g}"
    if kind == 5:
        return rnd.choice(["-0", "0", "-0.0", "4.9406564584124654e-324",
                           "2.2250738585072009e-308", "1.7976931348623157e308", "5e-324"])
    if kind == 6:  # exactly halfway between two doubles: round-half-even decides
        m = rnd.getrandbits(53) | (1 << 53) | 1
        exact = decimal.Context(prec=80).divide(decimal.Decimal(m), 2 ** rnd.randint(1, 20))
        return str(exact)
    return f"{_f32(x):.9g}"


def generate_mix(path: Path, target_mb: float, mix: str, seed: int = 0) -> None:
    """A trace of another composition than `generate`'s (MIXES), seeded; every line valid."""
    if mix == "standard":
        generate(path, target_mb, seed)
        return
    rnd = random.Random(seed)
    cfg = {"emitter": (8, 6, 12, 0.15), "wide": (32, 4, 1, 0.0), "verify": (0, 24, 8, 0.05),
           "digits": (8, 8, 4, 0.05), "noisy": (8, 8, 2, 0.6)}[mix]
    top_k, k, reqs, noise = cfg
    names = [f"cmpl-{rnd.getrandbits(48):012x}-{r}" if mix != "wide" else "r0"
             for r in range(reqs)]
    if mix in ("standard", "digits"):
        names = [f"req{r}" for r in range(reqs)]
    pos = {name: rnd.randrange(5, 900) for name in names}
    vocab = 152064
    target = int(target_mb * 1e6)
    written = 0
    with open(path, "w") as fh:
        while written < target:
            out: list[str] = []
            drafts = {name: [rnd.randrange(vocab) for _ in range(k)] for name in names}
            out.append(f"[spec-phase] pre={rnd.random():.2f}ms backbone={rnd.random() * 30:.2f}ms "
                       f"sample={rnd.random() * 9:.2f}ms logits={reqs * k * vocab}")
            first = "".join(f"{i} " for i in drafts[names[0]])
            out.append(f"[spec-propose] rows={reqs} nqpr={k + 1} drafts/row={k} first=[{first}]")
            if top_k:
                for row in range(1, k + 1):  # the engine prints row by row over the batch
                    for name in names:
                        if mix == "digits":
                            vals = [_digits_value(rnd) for _ in range(top_k)]
                            vals.sort(key=float, reverse=True)
                        else:
                            vals = [f"{_f32(v):.9g}" for v in
                                    sorted((rnd.gauss(2, 6) for _ in range(top_k)), reverse=True)]
                        ids = [drafts[name][row - 1]] + [rnd.randrange(vocab)
                                                         for _ in range(top_k - 1)]
                        pairs = "".join(f"{i}:{v} " for i, v in zip(ids, vals, strict=True))
                        out.append(f"[spec-logits] req={name} pos={pos[name]} row={row} "
                                   f"top=[ {pairs}]")
            for name in names:
                draft = drafts[name]
                acc = rnd.randrange(k + 1)
                emit = draft[:acc] + [rnd.randrange(vocab)]
                out.append(f"[SPECTRACE] req={name} pos={pos[name]} k={k} ns={acc + 1} "
                           f"acc={acc} draft=[ {''.join(f'{i} ' for i in draft)}] "
                           f"emit=[ {''.join(f'{i} ' for i in emit)}]")
                pos[name] += acc + 1
            n_noise = round(len(out) * noise / (1 - noise))
            for _ in range(n_noise):
                out.insert(rnd.randrange(len(out) + 1), rnd.choice(LOGGER).format(
                    n=rnd.randrange(1, 999), f=rnd.random() * 100, g=rnd.random()))
            text = "\n".join(out) + "\n"
            fh.write(text)
            written += len(text)


COMMON = """
import hashlib, json, resource, sys, time
import numpy as np
PATH, K = sys.argv[1], int(sys.argv[2])
def checksum(*arrays, floats=0):
    # every array as int64 but the last `floats`, as float64 (a route may hold ints in floats)
    h = hashlib.sha256()
    for i, a in enumerate(arrays):
        kind = np.float64 if i >= len(arrays) - floats else np.int64
        h.update(np.ascontiguousarray(np.asarray(a).astype(kind)).tobytes())
    return h.hexdigest()[:12]
def stream(draft, doff, emit, eoff):
    # each verify's draft ids, then its emit ids, in file order (the pandas route's order)
    nd, ne = np.diff(doff), np.diff(eoff)
    out = np.empty(nd.sum() + ne.sum(), dtype=np.int64)
    start = np.cumsum(nd + ne) - nd - ne
    isd = np.zeros(out.size, dtype=bool)
    isd[np.repeat(start, nd) + np.arange(nd.sum()) - np.repeat(np.cumsum(nd) - nd, nd)] = True
    out[isd], out[~isd] = draft, emit
    return out
"""

START = """
t0, c0 = time.perf_counter(), time.process_time()  # imports done: only the reading is timed
"""

TAIL = """
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"wall": wall, "cpu": cpu,
                  "rows": int(len(pos)), "verifies": int(nver), "sum": checksum(pos, row, ids, vals, floats=1),
                  "vsum": VSUM() if VSUM else None,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

DIFFTEST = """
from difftest.trace import parse_trace, fast_path_available
assert fast_path_available(), "the compiled scanner is not built (pip install -e .)"
""" + START + """
t = parse_trace(PATH, pure=PURE)
lg, v = t.logits, t.verifies
pos, row, ids, vals, nver = lg.pos, lg.row, lg.top_ids, lg.top_vals, len(t.verifies)
VSUM = lambda: checksum(v.pos, v.k, v.ns, v.acc,
                        stream(v.draft_ids, v.draft_off, v.emit_ids, v.emit_off))
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
                             usecols=[4, 6] + list(range(8, 8 + 2 * K)))
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
def cat(name, shape):
    return np.concatenate(parts[name]) if parts[name] else np.zeros(shape)
pos, row = cat("pos", 0), cat("row", 0)
ids, vals = cat("ids", (0, K)), cat("vals", (0, K))
vfix = cat("vfix", (0, 4))
nver = len(vfix)
VSUM = lambda: checksum(vfix[:, 0], vfix[:, 1], vfix[:, 2], vfix[:, 3], cat("vids", 0))
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
if pc.any(lmask).as_py():
    lt = reread(lmask)  # columns: '' spec-logits '' req NAME pos P row W top '' '' id val ...
    def c(i):
        return lt.column(i).to_numpy()
    pos, row = c(6), c(8)
    ids = np.stack([c(12 + 2 * j) for j in range(K)], axis=1).astype(np.int32)
    vals = np.stack([c(13 + 2 * j) for j in range(K)], axis=1).astype(np.float64)
    line = np.flatnonzero(lmask.to_numpy(zero_copy_only=False)) + 1
else:
    pos = row = np.zeros(0); ids = vals = np.zeros((0, K))
vmask = pc.starts_with(col, "[SPECTRACE] ")
nver = pc.sum(vmask).as_py()
VSUM = None  # the verifies' fields are not read by this route
"""

CONTENDERS = {
    "difftest compiled": "PURE = False\n" + DIFFTEST,
    "difftest pure": "PURE = True\n" + DIFFTEST,
    "pandas C engine": PANDAS,
    "pyarrow column": PYARROW,
}


def top_k(trace: Path) -> int:
    """The width of the trace's first top list (0: no logits lines), for the column routes."""
    with open(trace, "rb") as fh:
        for raw in fh:
            if raw.startswith(b"[spec-logits] "):
                return raw.split(b"top=[", 1)[1].count(b":")
    return 0


def run_one(name: str, trace: Path, k: int) -> dict:
    code = COMMON + CONTENDERS[name] + TAIL
    out = subprocess.run([sys.executable, "-c", code, str(trace), str(k)], capture_output=True,
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
    ap.add_argument("--mix", nargs="+", choices=list(MIXES), default=["standard"],
                    help="trace compositions, each benchmarked on its own trace")
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated traces in this folder")
    ap.add_argument("--only", nargs="*", choices=list(CONTENDERS), help="run only these")
    args = ap.parse_args()
    for mix in args.mix:
        print(f"\n== mix {mix}: {MIXES[mix]}")
        bench(mix, args)


def bench(mix: str, args: argparse.Namespace) -> None:
    folder = args.keep or Path(tempfile.mkdtemp(prefix="difftest-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / f"{mix}-{args.mb:g}mb.log"
    if not trace.exists():
        t0 = time.perf_counter()
        generate_mix(trace, args.mb, mix)
        print(f"generated {trace} in {time.perf_counter() - t0:.1f}s")
    size_mb = os.path.getsize(trace) / 1e6
    k = top_k(trace)
    names = args.only or list(CONTENDERS)
    print(f"trace: {size_mb:.1f} MB; {args.repeat} interleaved rounds, fresh process each")

    results: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(args.repeat):  # interleaved, so drift hits every contender alike
        for name in names:
            results[name].append(run_one(name, trace, k))

    ref = "pandas C engine" if "pandas C engine" in results else names[0]
    ref_cpu = min(r["cpu"] for r in results[ref])
    print(f"\n{'contender':<19}{'CPU s':>7}{'wall s':>8}{'MB/s CPU':>10}{'MB/s wall':>11}"
          f"{'peak RSS MB':>13}{'vs pandas':>11}{'paired':>13}{'rows':>10}{'verifies':>10}"
          "  checksums")
    for name, runs in results.items():
        cpu = min(r["cpu"] for r in runs)
        wall = min(r["wall"] for r in runs)
        # each round's pandas CPU over this contender's, same round: their median and range
        paired = sorted(p["cpu"] / r["cpu"] for p, r in zip(results[ref], runs, strict=True))
        mid = paired[len(paired) // 2] if len(paired) % 2 else \
            (paired[len(paired) // 2 - 1] + paired[len(paired) // 2]) / 2
        print(f"{name:<19}{cpu:>7.2f}{wall:>8.2f}{size_mb / cpu:>10.1f}{size_mb / wall:>11.1f}"
              f"{max(r['peak_rss_mb'] for r in runs):>13.0f}{ref_cpu / cpu:>10.2f}x"
              f"{mid:>6.2f}x {paired[0]:.2f}-{paired[-1]:.2f}"
              f"{runs[0]['rows']:>10}{runs[0]['verifies']:>10}  {runs[0]['sum']} {runs[0]['vsum']}")
    print("(CPU = process CPU seconds, best of the rounds; 'vs pandas' = the best over the best; "
          "'paired' = median and range of each round's pandas CPU over the contender's)")
    sums = {runs[0]["sum"] for runs in results.values()}
    vsums = {runs[0]["vsum"] for runs in results.values()} - {None}
    print("every contender read the same logit arrays" if len(sums) == 1 else
          f"LOGIT CHECKSUMS DIFFER: {sums}")
    print("the routes that read verifies read the same ones" if len(vsums) <= 1 else
          f"VERIFY CHECKSUMS DIFFER: {vsums}")
    if "difftest compiled" in results:
        ours = results["difftest compiled"][0]
        arrays_mb = ours["rows"] * (k * 4 + k * 8 + 4 + 8 + 4 + 4 + 8 + 1) / 1e6
        peak = max(r["peak_rss_mb"] for r in results["difftest compiled"])
        print(f"difftest compiled peak RSS {peak:.0f} MB (interpreter+numpy alone: "
              f"{baseline_rss():.0f} MB) vs text {size_mb:.0f} MB + logit arrays "
              f"~{arrays_mb:.0f} MB = {size_mb + arrays_mb:.0f} MB")
    if args.keep is None:
        trace.unlink()


if __name__ == "__main__":
    main()
