"""Measure the sampled comparison's error rates: how often spec vs no-spec (the lossless claim)
is called DIFFER, and how often each known-wrong sampler is.

    python scripts/sampled_rates.py record DIR [--runs 12 --samples 50]   # the reference runner
    python scripts/sampled_rates.py rates DIR [--trials 200 --draws 60 --alpha 0.01]
    python scripts/sampled_rates.py fresh [--arm spec --trials 200 --draws 40 --alpha 0.01]
    python scripts/sampled_rates.py rows DIR [--arm spec --runs 3]

`record` runs the reference runner in-process (the same code as `python -m
difftest.runners.reference`) for the target alone and for speculative sampling, correct and
with each known-wrong sampler, each run with a fresh sampler seed, and keeps every run's trace
in DIR/ARM/run-NNN.log. `rates` judges trials on those traces: each trial takes, per prompt,
`--draws` draws of the no-spec arm and as many of the other arm, chosen without replacement
from the recorded pool (so a trial's draws are independent draws of each arm, as fresh runs
would give; trials share draws with each other, so the spread of a rate across trials is wider
than a binomial's), with the rows those very draws' verifies tested, and applies the
instrument of a `mode = "sampled"` comparison (difftest.analysis.distribution) at `--alpha`.
It prints each arm's DIFFER rate.

`fresh` makes every trial independent: two fresh runs (the target alone and `--arm`, each with
`--draws` draws per prompt and a fresh sampler seed, as `difftest check` runs the default
config's `sampled` comparison), judged by the same instrument (`judge_sampled`). It prints the
DIFFER count, how many by the acceptance check, and the e-values' spread.

`rows` says of an arm's recorded tested drafts (`[spec-sample]`) how many a sampler bug in the
acceptance test could touch: p(x) = 0 is rejected whatever the uniform, q(x) = 1 leaves the
uniform no choice of token, and only 0 < p(x)/q(x) < 1 is decided by the uniform's value.

`--temperature` and `--top-p` (record, fresh) change the sampler of every arm; the default is
the default config's. `record` writes them to DIR/settings.json and refuses to add runs made
with other settings.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The runner settings of the measurement: the sampled comparison of difftest/configs/default.toml.
SETTINGS = dict(requests=3, steps=6, vocab=32, temperature=0.6, top_p=0.8)
ARMS = {"no-spec": dict(no_spec=True), "spec": {}, "noise-reuse": dict(mutation="noise-reuse"),
        "residual-unnormalised": dict(mutation="residual-unnormalised"),
        "top-p-draft-only": dict(mutation="top-p-draft-only"),
        "temperature-draft-only": dict(mutation="temperature-draft-only")}


def settings(temperature: float, top_p: float) -> dict[str, object]:
    """The runner settings of every arm: SETTINGS with the sampler given."""
    return {**SETTINGS, "temperature": temperature, "top_p": top_p}


def record(folder: Path, runs: int, samples: int, arms: list[str], chosen: dict[str, object]
           ) -> None:
    from difftest.runners.reference.options import RunnerOptions
    from difftest.runners.reference.runner import run

    folder.mkdir(parents=True, exist_ok=True)
    stated = folder / "settings.json"
    if stated.exists() and json.loads(stated.read_text()) != chosen:
        raise SystemExit(f"{stated} records {stated.read_text().strip()}, not {chosen}: "
                         "record other settings in another folder")
    stated.write_text(json.dumps(chosen) + "\n")
    for arm in arms:
        out = folder / arm
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        for i in range(runs):
            if (out / f"run-{i:03d}.log").exists():  # kept from an earlier, interrupted record
                continue
            options = RunnerOptions(samples=samples, **chosen, **ARMS[arm])  # type: ignore[arg-type]
            result = run(options, 1)
            (out / f"run-{i:03d}.log").write_text("".join(line + "\n" for line in result.lines))
        print(f"{arm}: {runs} runs of {samples} draws per prompt in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


def rates(folder: Path, trials: int, draws: int, alpha: float, seed: int, arms: list[str]
          ) -> None:
    from difftest.analysis.distribution import (SampledEvidence, acceptance_check, aligned,
                                                distribution_test, prompt_of, sampled_kind,
                                                streams)
    from difftest.core.kinds import VerdictKind
    from difftest.trace.parser import parse_trace
    from difftest.trace.sampled import SampleSteps, VerifiedRows, parse_samples

    Draw = tuple[tuple[int, list[int]], VerifiedRows]

    def load(arm: str) -> dict[str, list[Draw]]:
        """Per prompt, every recorded draw: its stream and the rows its verifies tested, so a
        trial's acceptance check reads the rows of the very draws its token test reads."""
        out: dict[str, list[Draw]] = {}
        for log in sorted((folder / arm).glob("run-*.log")):
            steps = parse_samples(log)
            by_req: dict[str, list] = {}
            for step in steps.steps:
                by_req.setdefault(step.req, []).append(step)
            for name, stream in streams(parse_trace(log)).items():
                rows = SampleSteps(steps.path, tuple(by_req.get(name, ()))).rows()
                out.setdefault(prompt_of(name), []).append((stream, rows))
        return out

    base = load("no-spec")
    rng = random.Random(seed)
    print(f"alpha {alpha}, {trials} trials, {draws} draws per prompt and arm per trial, "
          f"{len(base)} prompts, pools of {min(len(v) for v in base.values())} draws per prompt "
          "(no-spec)")
    for arm in arms:
        if arm == "no-spec" or not (folder / arm).is_dir():
            continue
        other = load(arm)
        differ = by_accept = 0
        t0 = time.perf_counter()
        for _ in range(trials):
            a = {p: [s for s, _ in rng.sample(base[p], draws)] for p in base}
            picked = {p: rng.sample(other[p], draws) for p in other}
            da, db = aligned(a, {p: [s for s, _ in v] for p, v in picked.items()})
            test = distribution_test(da, db, alpha)
            joined = VerifiedRows.joined([r for p in sorted(picked) for _, r in picked[p]])
            acc = acceptance_check(joined, alpha) if len(joined) else ()
            kind, _ = sampled_kind(SampledEvidence(test, {arm: acc}))
            differ += kind is VerdictKind.DIFFER
            by_accept += any(r.flagged for r in acc)
        print(f"{arm}: DIFFER in {differ}/{trials} trials ({100 * differ / trials:.1f}%), "
              f"{by_accept} with an acceptance row flagged; {draws * len(base)} draw pairs per "
              f"trial from pools of {min(len(v) for v in other.values())} draws per prompt; "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


def fresh(arm: str, trials: int, draws: int, alpha: float, chosen: dict[str, object]) -> None:
    """Independent trials: per trial a fresh run of the target alone and of `arm`, each with a
    fresh sampler seed, judged as a sampled comparison judges them (judge_sampled)."""
    import tempfile

    import numpy as np

    from difftest.analysis.distribution import judge_sampled, sampled_kind
    from difftest.core.kinds import VerdictKind
    from difftest.runners.reference.options import RunnerOptions
    from difftest.runners.reference.runner import run
    from difftest.trace.parser import parse_trace
    from difftest.trace.sampled import checked, parse_samples

    print(f"alpha {alpha}, {trials} fresh trials of no-spec vs {arm}, {draws} draws per prompt "
          f"and arm, settings {chosen}", flush=True)
    differ = by_accept = 0
    peaks: list[float] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(trials):
            traces, rows = [], {}
            for name in ("no-spec", arm):
                options = RunnerOptions(samples=draws, **chosen, **ARMS[name])  # type: ignore[arg-type]
                path = Path(tmp) / f"{name}.log"
                path.write_text("".join(line + "\n" for line in run(options, 1).lines))
                trace = parse_trace(path)
                traces.append(trace)
                rows[name] = [checked(parse_samples(path), trace).rows()]
            found = judge_sampled([traces[0]], [traces[1]], rows, alpha)
            kind, _ = sampled_kind(found)
            differ += kind is VerdictKind.DIFFER
            by_accept += any(r.flagged for rs in found.acceptance.values() for r in rs)
            peaks.append(found.test.peak)
            if (i + 1) % 5 == 0:
                print(f"  {i + 1} trials: DIFFER {differ}, {time.perf_counter() - t0:.0f} s",
                      flush=True)
    q = np.quantile(np.array(peaks), [0.5, 0.9, 0.99, 1.0]).tolist()
    print(f"{arm}: DIFFER in {differ}/{trials} fresh trials ({100 * differ / trials:.1f}%), "
          f"{by_accept} trials with an acceptance row flagged; distribution e-value median "
          f"{q[0]:.3g}, 90% {q[1]:.3g}, 99% {q[2]:.3g}, max {q[3]:.3g} (DIFFER at "
          f"{1 / alpha:g}); {time.perf_counter() - t0:.0f} s", flush=True)


def rows(folder: Path, arm: str, runs: int) -> None:
    import numpy as np

    from difftest.trace.sampled import VerifiedRows, parse_samples

    logs = sorted((folder / arm).glob("run-*.log"))[:runs]
    r = VerifiedRows.joined([parse_samples(p).rows() for p in logs])
    mid = (r.ratio > 0) & (r.ratio < 1)
    print(f"{arm}: {len(r)} tested drafts in {len(logs)} runs; accepted {r.accepted.mean():.2f}; "
          f"p(x) = 0: {np.mean(r.ratio == 0):.0%}; q(x) = 1: {np.mean(r.q >= 1):.0%}; "
          f"0 < p(x)/q(x) < 1: {np.mean(mid):.0%}; mean overlap {r.overlap.mean():.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record")
    r.add_argument("folder", type=Path)
    r.add_argument("--runs", type=int, default=12)
    r.add_argument("--samples", type=int, default=50)
    r.add_argument("--arms", default=",".join(ARMS))
    f = sub.add_parser("fresh")
    f.add_argument("--arm", default="spec", choices=[a for a in ARMS if a != "no-spec"])
    f.add_argument("--trials", type=int, default=200)
    f.add_argument("--draws", type=int, default=40)
    f.add_argument("--alpha", type=float, default=0.01)
    w = sub.add_parser("rows")
    w.add_argument("folder", type=Path)
    w.add_argument("--arm", default="spec")
    w.add_argument("--runs", type=int, default=3)
    for q in (r, f):
        q.add_argument("--temperature", type=float, default=SETTINGS["temperature"])
        q.add_argument("--top-p", type=float, default=SETTINGS["top_p"])
    t = sub.add_parser("rates")
    t.add_argument("folder", type=Path)
    t.add_argument("--trials", type=int, default=200)
    t.add_argument("--draws", type=int, default=60)
    t.add_argument("--alpha", type=float, default=0.01)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--arms", default=",".join(ARMS))
    args = p.parse_args()
    if args.command == "record":
        record(args.folder, args.runs, args.samples, args.arms.split(","),
               settings(args.temperature, args.top_p))
    elif args.command == "rows":
        rows(args.folder, args.arm, args.runs)
    elif args.command == "fresh":
        fresh(args.arm, args.trials, args.draws, args.alpha, settings(args.temperature, args.top_p))
    else:
        rates(args.folder, args.trials, args.draws, args.alpha, args.seed, args.arms.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
