"""The bf16 scenario of the rate instruments, on the transformers or the mlx runner: an fp32
draft against a bf16 draft (benign) and the bf16 draft with a broken causal mask (wrong),
thresholds calibrated on three inputs, then unseen inputs judged at those thresholds, with and
without the benign rates. Prints calibrate's answer, then one table row per unseen input and pair.

    nice -n 10 python scripts/bf16_rates.py --runner {hf,mlx} [--inputs 11-20] [--out DIR]
    python scripts/bf16_rates.py --runner {hf,mlx} --judge DIR [--inputs 11-20]

It runs the calibration's arms and 3 x (unseen inputs) runner processes one at a time (-j 1).
The thresholds are written even when calibrate refuses them, to show what a gate at them would
have done (calibrate's own answer, exit 3 with the inputs needed, is printed first). `--judge DIR`
judges the captures an earlier run left in DIR (its thresholds file and unseen run) again without
running anything. Each capture is judged through its own run record, so the broken-mask capture
is held to the mutated arm that made it (a capture showing a mutation its launch did not ask
for is INERT).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from difftest.analysis.audit import AuditThresholds
from difftest.config import ComparisonSpec, load_config
from difftest.core.errors import DifftestError
from difftest.core.thresholds import ThresholdError, read_thresholds
from difftest.execute import load_run
from difftest.execute.records import ArmResult
from difftest.flow.calibrate import calibrate, thresholds_toml
from difftest.flow.evaluate import ComparisonReport, evaluate, outcomes_from_run
from difftest.flow.run import job_limits, run_arm_set

# Each runner's fp32 arm; the bf16 arm adds DTYPE. Both pinned to one thread.
RUNNERS: dict[str, tuple[str, str]] = {
    "hf": ('"{python}", "-m", "difftest.runners.hf", "--drafter", "assisted", "--attn", "sdpa", '
           '"--threads", "1", "--seed", "{seed}"', '"--assistant-dtype", "bfloat16"'),
    "mlx": ('"{python}", "-m", "difftest.runners.mlx", "--attn", "sdpa", "--seed", "{seed}"',
            '"--draft-dtype", "bfloat16"'),
}
ENV = '{ VT_SPEC_TRACE = "3", OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }'
UNSEEN = "unseen"


def config_text(runner: str) -> str:
    arm, dtype = RUNNERS[runner]
    return f"""
[arms.fp32]
command = [{arm}]
env = {ENV}
[arms.bf16]
command = [{arm}, {dtype}]
env = {ENV}
[mutations.broken-mask]
args = ["--mutation", "broken-mask"]
[comparisons.bf16]
arm_a = "fp32"
arm_b = "bf16"
drafting = "sequential"
gate_input = 0
calibration_inputs = [1, 2, 3]
thresholds = "bf16.thresholds.toml"
mutations = ["broken-mask"]
"""


def judge(results: Mapping[str, ArmResult], a: str, b: str,
          spec: ComparisonSpec) -> ComparisonReport:
    """One pair judged from its run records, as a compare of those two arms would judge it."""
    th = AuditThresholds()
    oa, ob = outcomes_from_run(results, (a, b), th)
    return evaluate(spec, oa, ob, th)


def _unseen_run(root: Path) -> Path:
    runs = sorted((root / "runs").glob(f"*-{UNSEEN}"))
    if not runs:
        raise DifftestError(f"{root / 'runs'}: no run folder ending in -{UNSEEN}; run the "
                            "scenario first (without --judge)")
    return runs[-1]


def _seeds(text: str) -> range:
    try:
        lo, hi = (int(x) for x in text.split("-"))
    except ValueError:
        raise DifftestError(f"--inputs {text!r}: give two seeds as FIRST-LAST, e.g. 11-20") from None
    if not 0 <= lo <= hi:
        raise DifftestError(f"--inputs {text!r}: FIRST-LAST with 0 <= FIRST <= LAST")
    return range(lo, hi + 1)


def scenario(runner: str, seeds: range, root: Path, judge_only: bool) -> None:
    if not judge_only:
        root.mkdir(parents=True, exist_ok=True)
        (root / "difftest.toml").write_text(config_text(runner))
    config = load_config(root / "difftest.toml", unread_thresholds="bf16")
    spec = config.comparison("bf16")
    path = root / "bf16.thresholds.toml"
    fp32, bf16 = config.arm("fp32"), config.arm("bf16")
    broken = config.mutation("broken-mask")
    if judge_only:
        results, _ = load_run(_unseen_run(root))
    else:
        cal = calibrate(config, spec, run_root=root / "runs", progress=False, write=False,
                        jobs=1)
        print("\n".join(cal.summary()))
        print(f"calibrate exit {int(cal.exit_code)}")
        path.write_text(thresholds_toml(cal, None))
        runs = []
        for seed in seeds:
            b = bf16.with_input(str(seed)).with_changes(name=f"bf16@{seed}")
            runs += [fp32.with_input(str(seed)).with_changes(name=f"fp32@{seed}"), b,
                     broken.apply(b)]
        _, results = run_arm_set(runs, run_root=root / "runs", label=UNSEEN, progress=False,
                                 limits=job_limits(config, 1))
    found = read_thresholds(path)
    rules = dataclasses.replace(spec.rules, atol=found.atol, rtol=found.rtol,
                                near_tie=found.near_tie)
    with_rates = ComparisonSpec("bf16", "fp32", "bf16", rules, thresholds=str(path),
                                threshold_origin=found.origin, calibrated=found.calibrated)
    without = dataclasses.replace(with_rates, calibrated=None)
    print(f"{runner}: atol {found.atol:.3g}, near_tie {found.near_tie:.3g}, separation bound "
          f"{found.separation:.3g}")
    print("| input | pair | near-tie flips | rate (99% CI) | near_tie hides | without rates | "
          "with rates |")
    print("|---|---|---|---|---|---|---|")
    for seed in seeds:
        a = f"fp32@{seed}"
        for label, name in (("benign", f"bf16@{seed}"),
                            ("broken-mask", broken.arm_name(f"bf16@{seed}"))):
            if a not in results or name not in results:
                print(f"| {seed} | {label} | not in this run | | | | |")
                continue
            old = judge(results, a, name, without)
            new = judge(results, a, name, with_rates)
            eff = new.benign_rates
            t = eff.tests[0] if eff is not None and eff.tests else None
            rate = (f"{t.rate.value:.3f} [{t.low:.3f}, {t.high:.3f}]" if t is not None else "-")
            flips = (f"{int(round(t.rate.value * t.rate.rows))}/{t.rate.rows}"
                     if t is not None else "-")
            hides = (f"{eff.blind_share:.0%}" if eff is not None and eff.blind_share is not None
                     else "-")
            print(f"| {seed} | {label} | {flips} | {rate} | {hides} | {old.verdict.kind.value} | "
                  f"{new.verdict.kind.value} |")
    print(f"run root: {root}")


def _runner_of(root: Path) -> str:
    """The engine a run root's config runs (its arms' runner module)."""
    text = (root / "difftest.toml").read_text()
    found = [name for name in RUNNERS if f"difftest.runners.{name}" in text]
    if len(found) != 1:
        raise DifftestError(f"{root / 'difftest.toml'}: not a config this script wrote (no one "
                            "runner of " + ", ".join(sorted(RUNNERS)) + " in it)")
    return found[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runner", choices=sorted(RUNNERS), default=None,
                   help="the engine (default: hf; with --judge, the one DIR's config runs)")
    p.add_argument("--inputs", default="11-20", help="the unseen seeds, FIRST-LAST")
    p.add_argument("--out", type=Path, default=None, help="the run root (default: a temp dir)")
    p.add_argument("--judge", type=Path, default=None, metavar="DIR",
                   help="judge an earlier run root's captures again; runs nothing")
    args = p.parse_args()
    try:
        seeds = _seeds(args.inputs)
        if args.judge is not None and not (args.judge / "difftest.toml").is_file():
            raise DifftestError(f"--judge {args.judge}: no difftest.toml there (not a run root "
                                "of this script)")
        root = args.judge or args.out or Path(tempfile.mkdtemp(prefix="bf16-rates-"))
        runner = args.runner or (_runner_of(root) if args.judge is not None else "hf")
        scenario(runner, seeds, root, judge_only=args.judge is not None)
    except (DifftestError, ThresholdError, OSError) as exc:
        print(f"bf16_rates: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
