"""Measure the transformers runner's sampled comparison: how often speculative sampling against
the target alone (the lossless claim) is called DIFFER, and how often a known-wrong arm is.

    python scripts/hf_sampled_rates.py [--trials 200 --draws 30] [--arm spec|MUTATION]
                                       [--temperature 0.3 --top-p 0.8]

Each trial is fresh: both arms decode the 3 prompts of configs/hf-sampled.toml (temperature 0.3,
top-p 0.8 unless given, 6 new tokens, one torch thread) `--draws` times each, every run with a sampler seed
of its own from the OS, in this process (`difftest.runners.hf.sampling.run_sampled`, the code of
`python -m difftest.runners.hf`, with the tiny seeded models built once), and the arms' traces
are judged as a `decoding = "sampled"` comparison judges them
(`difftest.analysis.distribution.judge_sampled` and `sampled_kind`) at `--alpha`. It prints the
DIFFER rate with its 95% Wilson interval, how many trials the acceptance check flagged, and
the UNINFORMATIVE count. `--arm` is `spec` (correct speculative sampling: every DIFFER is a
false red) or one of the runner's four known-wrong samplers (`--mutation`).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The runner settings of configs/hf-sampled.toml (its arms' --samples apart).
SETTINGS = dict(requests=3, max_new_tokens=6, temperature=0.3, top_p=0.8, threads=1)
ARMS = {"spec": {}, **{m: dict(mutation=m) for m in ("noise-reuse", "residual-unnormalised",
                                                     "top-p-draft-only",
                                                     "temperature-draft-only")}}


def trials(arm: str, count: int, draws: int, alpha: float, sampler: dict[str, float]) -> None:
    from difftest.analysis.distribution import judge_sampled, sampled_kind
    from difftest.core.kinds import VerdictKind
    from difftest.core.proportion import wilson_bounds
    from difftest.emit import Tracer
    from difftest.runners.hf.models import load_pair
    from difftest.runners.hf.options import HFOptions
    from difftest.runners.hf.sampling import run_sampled
    from difftest.trace.parser import parse_text
    from difftest.trace.sampled import checked, samples_of

    chosen = {**SETTINGS, **sampler}
    base = HFOptions(samples=draws, no_spec=True, **chosen)  # type: ignore[arg-type]
    other = HFOptions(samples=draws, **chosen, **ARMS[arm])  # type: ignore[arg-type]
    pair = load_pair(other)

    def traced(options: HFOptions) -> str:
        buf = io.StringIO()
        run_sampled(options, Tracer(level=1, file=buf), pair=pair)
        return buf.getvalue()

    differ = by_acceptance = uninformative = 0
    t0 = time.perf_counter()
    for i in range(count):
        a, b = traced(base), traced(other)
        trace_b = parse_text(b, arm)
        rows = checked(samples_of(b.encode(), arm), trace_b).rows()
        evidence = judge_sampled([parse_text(a, "no-spec")], [trace_b], {arm: [rows]}, alpha,
                                 ("no-spec", arm))
        kind, _ = sampled_kind(evidence)
        differ += kind is VerdictKind.DIFFER
        uninformative += kind is VerdictKind.UNINFORMATIVE
        by_acceptance += any(r.flagged for rows in evidence.acceptance.values() for r in rows)
        if (i + 1) % 10 == 0:
            print(f"  {i + 1} trials: {differ} DIFFER, {time.perf_counter() - t0:.0f} s",
                  flush=True)
    low, high = wilson_bounds(differ / count, count, 1.959964)
    print(f"{arm} vs no-spec at temperature {chosen['temperature']:g}, top-p "
          f"{chosen['top_p']:g}: DIFFER in {differ}/{count} trials ({100 * differ / count:.1f}%, "
          f"95% interval {100 * low:.1f}-{100 * high:.1f}%), "
          f"{by_acceptance} trial(s) with the acceptance check flagged, {uninformative} "
          f"UNINFORMATIVE; {draws} draws of each of {SETTINGS['requests']} prompts per arm and "
          f"trial ({draws * SETTINGS['requests']} pairs), alpha {alpha}; "
          f"{time.perf_counter() - t0:.0f} s", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", choices=list(ARMS), default="spec")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--draws", type=int, default=30)
    p.add_argument("--alpha", type=float, default=0.01)
    p.add_argument("--temperature", type=float, default=SETTINGS["temperature"])
    p.add_argument("--top-p", type=float, default=SETTINGS["top_p"])
    args = p.parse_args()
    if args.trials < 1 or args.draws < 1:
        p.error("--trials and --draws must be at least 1")
    trials(args.arm, args.trials, args.draws, args.alpha,
           {"temperature": args.temperature, "top_p": args.top_p})
    return 0


if __name__ == "__main__":
    sys.exit(main())
