"""Calibrate difftest's request-clustered statistics on simulated comparisons built from real
traces: how often each instrument calls a difference where there is none (false reds, against
its alpha), and how often it finds a difference of the size it states it would detect (its
minimum detectable effect, against the 80% power it promises).

The real part: level-3 traces of the reference runner (three seeds) and of the transformers
runner (its built-in tiny model), captured on first use into --traces, whose requests give
the acceptance sequences (accepted drafts per verify) and the top-1/top-2 margins of the
drafted rows. The simulated part, per comparison: `--requests` requests drawn from that
pool, each arm's verifies resampled within its request, and noise that is clustered by request
(each request's run draws its own loss of acceptance, or its own perturbation scale), so the
rows of one request move together as they do in an engine.

Instruments:
- acceptance: the acceptance gate of `difftest.analysis.acceptance` (B - A per draft position, paired by
  request, Bonferroni over positions), with a margin of ~0 so that it tests "B accepts less";
- token flip rate: B's flips against A minus A's flips against its own rerun, paired by request
  (`difftest.numerics.clustered.paired_difference`); beside it, the exact test that counts rows as
  independent (`difftest.numerics.noise.fisher_greater`), to show what clustering does to it;
- top-1 agreement: the same paired test on the logit rows' top-1 ids, at the higher
  disagreement of a perturbed-logit comparison.

- sequential acceptance test (`--until-decided`, `difftest.analysis.sequential`): reruns of a pair on
  fixed requests, each round resampled with clustered loss as above, looked at after every
  round until it decides: false DIFFER with B as A (against alpha), DIFFER and false AGREE
  with B's acc@1 lower by max_drop (against 1 - beta and beta), the runs each took.

Run: python scripts/calibrate_stats.py            (1,000 comparisons per figure, ~7 minutes)
     python scripts/calibrate_stats.py --only sequential   (the sequential test alone)
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from difftest.analysis.acceptance import AcceptanceCounts, measure_counts
from difftest.core.proportion import wilson_bounds
from difftest.numerics.clustered import ClusterSums, paired_difference
from difftest.config import AcceptanceGate
from difftest.core.kinds import VerdictKind
from difftest.numerics.noise import fisher_greater
from difftest.analysis.sequential import Design, Tally, look
from difftest.trace import parse_trace

ROOT = Path(__file__).resolve().parent.parent
# (file, runner argv): the reference runner at three seeds, and the transformers runner (a tiny
# seeded model built from its config, no download)
CAPTURES = tuple((f"reference-seed{seed}.log",
                  ("-m", "difftest.runners.reference", "--requests", "40", "--steps", "15", "--seed",
                   str(seed))) for seed in (0, 1, 2)) + (
    ("transformers-seed0.log", ("-m", "difftest.runners.hf", "--requests", "40",
                                "--max-new-tokens", "40", "--seed", "0")),)
TINY_MARGIN = 1e-9  # the gate's margin: "any drop", so that alpha is the test's level


def capture(traces: Path) -> list[Path]:
    """Level-3 traces of each runner (captured once, then reused)."""
    traces.mkdir(parents=True, exist_ok=True)
    out = []
    for name, argv in CAPTURES:
        path = traces / name
        if not path.exists():
            env = {**os.environ, "VT_SPEC_TRACE": "3"}
            with open(path.with_suffix(".tmp"), "wb") as err:
                subprocess.run([sys.executable, *argv], env=env, stderr=err,
                               stdout=subprocess.DEVNULL, check=True)
            path.with_suffix(".tmp").rename(path)
        out.append(path)
    return out


@dataclass(frozen=True)
class Pool:
    """Per real request: accepted count of each drafted verify, drafted count, and the
    finite top-1/top-2 margins of its logit rows."""

    acc: list[np.ndarray]
    k: list[np.ndarray]
    margins: list[np.ndarray]


def pool(paths: list[Path]) -> Pool:
    acc, ks, margins = [], [], []
    for path in paths:
        t = parse_trace(path)
        v, lg = t.verifies, t.logits
        m_all = lg.margins
        for code in range(len(t.requests)):
            sel = (v.req == code) & (v.k > 0)
            acc.append(np.minimum(v.acc[sel], v.k[sel]).astype(np.int64))
            ks.append(v.k[sel].astype(np.int64))
            m = m_all[(lg.req == code) & np.isfinite(m_all)]
            margins.append(m)
    return Pool(acc, ks, margins)


def rate_line(name: str, hits: int, n: int, target: str) -> str:
    low, high = wilson_bounds(hits / n, float(n), 1.959963984540054)
    return f"  {name:<46} {hits / n:7.4f}  [{low:.4f}, {high:.4f}]  {target}"


# -- acceptance --------------------------------------------------------------------------------

def acceptance_arm(rng: np.random.Generator, p: Pool, chosen: np.ndarray, loss: float,
                   planted: float) -> AcceptanceCounts:
    """One arm: each chosen request's verifies resampled, a request-level loss of acceptance
    drawn per request (clustered noise), and a planted loss on top."""
    labels, ks, accs = [], [], []
    for g, req in enumerate(chosen):
        a, k = p.acc[req], p.k[req]
        idx = rng.integers(0, a.size, a.size)
        acc = a[idx].copy()
        tau = rng.uniform(0.0, loss)  # this request's own bad luck in this run
        acc[(acc >= 1) & (rng.random(acc.size) < tau)] = 0
        if planted:
            acc[(acc >= 1) & (rng.random(acc.size) < planted)] = 0
        labels.append(np.full(acc.size, f"g{g}"))
        ks.append(k[idx])
        accs.append(acc)
    return AcceptanceCounts(np.concatenate(labels), np.concatenate(ks), np.concatenate(accs))


def unclustered(c: AcceptanceCounts) -> AcceptanceCounts:
    """Every verify its own request: the statistics of independent rows."""
    return AcceptanceCounts(np.array([f"v{i}" for i in range(c.acc.size)]), c.k, c.acc)


def calibrate_acceptance(rng: np.random.Generator, p: Pool, sims: int, requests: int,
                         alpha: float, loss: float = 0.3) -> list[str]:
    usable = np.flatnonzero([a.size > 0 for a in p.acc])
    gate = AcceptanceGate(TINY_MARGIN, alpha)
    red = red_naive = 0
    mdes, base, draws = [], [], []
    for _ in range(sims):
        chosen = rng.choice(usable, requests)
        draws.append(chosen)
        ca = acceptance_arm(rng, p, chosen, loss, 0.0)
        cb = acceptance_arm(rng, p, chosen, loss, 0.0)
        rep = measure_counts(ca, cb, ("A", "B"), gate)
        assert rep is not None
        red += rep.verdict is VerdictKind.DIFFER
        first = rep.deltas[0]
        mdes.append(first.mde if first.mde is not None else math.nan)
        base.append(first.a)
        naive = measure_counts(unclustered(ca), unclustered(cb), ("A", "B"), gate)
        assert naive is not None
        red_naive += naive.verdict is VerdictKind.DIFFER
    mde = float(np.nanmedian(mdes))
    p1 = float(np.mean(base))
    detected = 0
    for chosen, own in zip(draws, mdes, strict=True):
        # the same requests again, B made worse by the MDE this comparison stated
        ca = acceptance_arm(rng, p, chosen, loss, 0.0)
        cb = acceptance_arm(rng, p, chosen, loss, min(1.0, own / p1))
        rep = measure_counts(ca, cb, ("A", "B"), gate)
        assert rep is not None
        detected += rep.deltas[0].decision is VerdictKind.DIFFER
    return [f"acceptance gate (acc@1 {p1:.3f}, {requests} requests, alpha {alpha:g}, "
            f"stated MDE at acc@1: median {mde:.4f})",
            rate_line("false reds, clustered (difftest)", red, sims, f"target <= {alpha:g}"),
            rate_line("false reds, rows counted as independent", red_naive, sims,
                      f"target <= {alpha:g}"),
            rate_line("detection of a drop of the MDE each stated", detected, sims,
                      "target >= 0.80")]


# -- sequential stopping -----------------------------------------------------------------------

def _int_labels(c: AcceptanceCounts, run: int) -> AcceptanceCounts:
    """Each run of a request its own cluster, as `difftest.flow.sequential_runs` labels them (as
    integers: the tally sorts no strings)."""
    g = np.char.lstrip(c.label.astype(str), "g").astype(np.int64)
    return AcceptanceCounts(run * 100_000 + g, c.k, c.acc)


def calibrate_sequential(rng: np.random.Generator, p: Pool, sims: int, requests: int,
                         alpha: float, margin: float, max_runs: int,
                         loss: float = 0.3) -> list[str]:
    """Reruns of a nondeterministic pair on fixed requests: each round, each arm's verifies
    resampled within request with its own clustered loss (as `acceptance_arm`); looks after every
    round until `difftest.analysis.sequential.look` decides. Null: B as A. Effect: B's acc@1 lower by
    the margin (a planted loss of margin / acc@1 of the accepting verifies)."""
    usable = np.flatnonzero([a.size > 0 for a in p.acc])
    design = Design(margin, alpha, max_runs)

    def one(chosen: np.ndarray, planted: float) -> tuple[VerdictKind, int]:
        tally = Tally()
        while True:
            run = tally.runs + 1
            tally.add(_int_labels(acceptance_arm(rng, p, chosen, loss, 0.0), run),
                      _int_labels(acceptance_arm(rng, p, chosen, loss, planted), run))
            seen = look(tally, design)
            if seen.decision is not None:
                return seen.decision, seen.runs

    out: dict[str, list[tuple[VerdictKind, int]]] = {"null": [], "effect": []}
    base = []
    for _ in range(sims):
        chosen = rng.choice(usable, requests)
        p1 = float(np.mean(np.concatenate([p.acc[r] for r in chosen]) >= 1)) * (1 - loss / 2)
        base.append(p1)
        out["null"].append(one(chosen, 0.0))
        out["effect"].append(one(chosen, min(1.0, margin / p1)))

    def count(kind: str, v: VerdictKind) -> int:
        return sum(d is v for d, _ in out[kind])

    def runs(kind: str) -> str:
        r = np.array([n for _, n in out[kind]])
        return f"runs median {np.median(r):g}, 90th percentile {np.percentile(r, 90):g}"

    return [f"sequential acceptance test (acc@1 {np.mean(base):.3f}, {requests} requests per "
            f"run, alpha {alpha:g}, beta {design.beta:g}, max_drop {margin:g}, at most "
            f"{max_runs} runs)",
            rate_line("false reds (DIFFER, B as A)", count("null", VerdictKind.DIFFER), sims,
                      f"target <= {alpha:g}"),
            f"    B as A: AGREE {count('null', VerdictKind.AGREE) / sims:.4f}, UNINFORMATIVE "
            f"{count('null', VerdictKind.UNINFORMATIVE) / sims:.4f}; {runs('null')}",
            rate_line("detection (DIFFER, acc@1 down by max_drop)",
                      count("effect", VerdictKind.DIFFER), sims,
                      f"target >= {1 - design.beta:.2f}"),
            rate_line("false AGREE at a drop of max_drop", count("effect", VerdictKind.AGREE),
                      sims, f"target <= {design.beta:g}"),
            f"    drop of max_drop: UNINFORMATIVE "
            f"{count('effect', VerdictKind.UNINFORMATIVE) / sims:.4f}; {runs('effect')}"]


# -- flips and top-1 agreement -----------------------------------------------------------------

def _flip_probability(m: np.ndarray, sigma: float) -> np.ndarray:
    """A row flips when a perturbation of scale sigma moves it past half its margin."""
    z = (m / 2) / sigma
    cdf = np.vectorize(NormalDist().cdf)
    out: np.ndarray = 2 * (1 - cdf(z))
    return out


def sigma_for(p: Pool, rate: float) -> float:
    """The perturbation scale at which the pool's rows flip at `rate` on average."""
    rows = np.concatenate(p.margins)
    rows = rows[np.random.default_rng(0).integers(0, rows.size, min(rows.size, 4000))]
    lo, hi = 1e-6, 1e3
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if float(_flip_probability(rows, mid).mean()) < rate:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def flips(rng: np.random.Generator, m: np.ndarray, sigma: float, spread: float,
          extra: float) -> np.ndarray:
    """One run's flips over a request's rows: its own scale (lognormal around sigma, clustered
    noise), plus planted flips at rate `extra`."""
    s = sigma * math.exp(spread * rng.standard_normal() - spread * spread / 2)
    f = np.abs(rng.normal(0.0, s, m.size)) > m / 2
    if extra:
        f |= rng.random(m.size) < extra
    return f


def calibrate_rate(rng: np.random.Generator, p: Pool, sims: int, requests: int, alpha: float,
                   name: str, rate: float, spread: float = 1.0) -> list[str]:
    usable = np.flatnonzero([m.size > 0 for m in p.margins])
    sigma = sigma_for(p, rate)

    def one(extra: float, chosen: np.ndarray) -> tuple[bool, bool, float, float]:
        aa, ba, labels = [], [], []
        for g, req in enumerate(chosen):
            m = p.margins[req]
            aa.append(flips(rng, m, sigma, spread, 0.0))
            ba.append(flips(rng, m, sigma, spread, extra))
            labels.append(np.full(m.size, g))
        fa, fb, lab = np.concatenate(aa), np.concatenate(ba), np.concatenate(labels)
        la, sa = ClusterSums.labelled(fa, lab)
        lb, sb = ClusterSums.labelled(fb, lab)
        pd = paired_difference(sa, la, sb, lb)
        assert pd is not None
        red = pd.bounds(alpha)[0] > 0
        naive = fisher_greater(int(fb.sum()), fb.size, int(fa.sum()), fa.size) <= alpha
        return red, naive, pd.mde(alpha, increase=True), float(fa.mean())

    draws = [rng.choice(usable, requests) for _ in range(sims)]
    nulls = [one(0.0, chosen) for chosen in draws]
    mde = float(np.median([n[2] for n in nulls]))
    base = float(np.mean([n[3] for n in nulls]))
    # the same requests again, with extra flips on unflipped rows: an expected increase of the
    # MDE that comparison stated
    detected = sum(one(min(1.0, n[2] / (1 - base)), chosen)[0]
                   for n, chosen in zip(nulls, draws, strict=True))
    shown = base if name == "token flip rate" else 1 - base
    return [f"{name} ({shown:.3f} under the null, {requests} requests, alpha {alpha:g}, stated "
            f"MDE: median {mde:.4f})",
            rate_line("false reds, clustered paired test (difftest)", sum(n[0] for n in nulls),
                      sims, f"target <= {alpha:g}"),
            rate_line("false reds, exact test of independent rows", sum(n[1] for n in nulls),
                      sims, f"target <= {alpha:g}"),
            rate_line("detection of a change of the MDE each stated", detected, sims,
                      "target >= 0.80")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulated comparisons per figure")
    ap.add_argument("--requests", type=int, default=40, help="requests per simulated arm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--traces", type=Path, default=ROOT / "traces" / "calibration",
                    help="where the reference traces are captured (and reused from)")
    ap.add_argument("--only", choices=("all", "fixed", "sequential"), default="all",
                    help="the fixed-sample instruments, the sequential test, or both")
    ap.add_argument("--margin", type=float, default=0.05,
                    help="max_drop of the sequential test (acc@1)")
    ap.add_argument("--max-runs", type=int, default=30,
                    help="most runs of each arm the sequential test may take")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    p = pool(capture(args.traces))
    rng = np.random.default_rng(args.seed)
    # the sequential figures draw from their own stream: the fixed-sample ones stay as they were
    seq_rng = np.random.default_rng([args.seed, 1])
    print(f"pool: {len(p.acc)} real requests from {len(CAPTURES)} traces (3 reference runner, "
          "1 transformers runner) "
          f"({sum(a.size for a in p.acc)} verifies, {sum(m.size for m in p.margins)} logit "
          f"rows); {args.sims} simulated comparisons per figure, seed {args.seed}")
    print("  figure                                          rate    95% interval (sims)")
    for alpha in (0.05, 0.01):
        if args.only != "fixed":
            for line in calibrate_sequential(seq_rng, p, args.sims, args.requests, alpha,
                                             args.margin, args.max_runs):
                print(line, flush=True)
        if args.only == "sequential":
            continue
        for line in calibrate_acceptance(rng, p, args.sims, args.requests, alpha):
            print(line)
        for line in calibrate_rate(rng, p, args.sims, args.requests, alpha,
                                   "token flip rate", 0.02):
            print(line)
        for line in calibrate_rate(rng, p, args.sims, args.requests, alpha,
                                   "top-1 agreement", 0.10):
            print(line)
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
