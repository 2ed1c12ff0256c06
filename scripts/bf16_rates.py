"""The bf16 scenario of the rate instruments, measured on the transformers runner: an fp32 draft
against a bf16 draft (benign) and the bf16 draft with a broken causal mask (wrong), thresholds
calibrated on three inputs, then ten unseen inputs judged at those thresholds, with and without
the benign rates. Prints one table row per unseen input.

    nice -n 10 python scripts/bf16_rates.py [--inputs 11-20] [--out DIR]

It runs 9 + 3 x 10 runner processes one at a time (-j 1). The thresholds are written even when
calibrate refuses them, to show what a gate at them would have done (calibrate's own answer,
exit 3 with the inputs needed, is printed first).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from difftest.config import ComparisonSpec, load_config
from difftest.core.thresholds import read_thresholds
from difftest.flow.calibrate import calibrate, thresholds_toml
from difftest.flow.evaluate import judge_traces
from difftest.flow.run import job_limits, run_arm_set

ARM = ('"{python}", "-m", "difftest.runners.hf", "--drafter", "assisted", "--attn", "sdpa", '
       '"--threads", "1", "--seed", "{seed}"')
CONFIG = f"""
[arms.fp32]
command = [{ARM}]
env = {{ VT_SPEC_TRACE = "3" }}
[arms.bf16]
command = [{ARM}, "--assistant-dtype", "bfloat16"]
env = {{ VT_SPEC_TRACE = "3" }}
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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--inputs", default="11-20")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    lo, hi = (int(x) for x in args.inputs.split("-"))
    root = args.out or Path(tempfile.mkdtemp(prefix="bf16-rates-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "difftest.toml").write_text(CONFIG)
    config = load_config(root / "difftest.toml", unread_thresholds="bf16")
    spec = config.comparison("bf16")
    cal = calibrate(config, spec, run_root=root / "runs", progress=False, write=False, jobs=1)
    print("\n".join(cal.summary()))
    print(f"calibrate exit {int(cal.exit_code)}")
    path = root / "bf16.thresholds.toml"
    path.write_text(thresholds_toml(cal, None))
    found = read_thresholds(path)
    fp32, bf16 = config.arm("fp32"), config.arm("bf16")
    broken = config.mutation("broken-mask")
    runs = []
    for seed in range(lo, hi + 1):
        b = bf16.with_input(str(seed)).with_changes(name=f"bf16@{seed}")
        runs += [fp32.with_input(str(seed)).with_changes(name=f"fp32@{seed}"), b,
                 broken.apply(b)]
    _, results = run_arm_set(runs, run_root=root / "runs", label="unseen", progress=False,
                             limits=job_limits(config, 1))
    rules = dataclasses.replace(spec.rules, atol=found.atol, rtol=found.rtol,
                                near_tie=found.near_tie)
    with_rates = ComparisonSpec("bf16", "fp32", "bf16", rules, thresholds=str(path),
                                threshold_origin=found.origin, calibrated=found.calibrated)
    without = dataclasses.replace(with_rates, calibrated=None)
    print(f"atol {found.atol:.3g}, near_tie {found.near_tie:.3g}, separation bound "
          f"{cal.separation:.3g}, inputs needed {cal.needed}")
    print("| input | pair | near-tie flips | rate (99% CI) | near_tie hides | without rates | "
          "with rates |")
    print("|---|---|---|---|---|---|---|")
    for seed in range(lo, hi + 1):
        a = results[f"fp32@{seed}"].stderr_path
        for label, name in (("benign", f"bf16@{seed}"),
                            ("broken-mask", broken.arm_name(f"bf16@{seed}"))):
            b = results[name].stderr_path
            old = judge_traces(a, b, without)
            new = judge_traces(a, b, with_rates)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
