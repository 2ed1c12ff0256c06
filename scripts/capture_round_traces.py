"""Record the reference-runner traces that the tests of rounds replay: `--until-decided`, noise
reruns and repeated sampler seeds (tests/data/sampled/, tests/flow/test_sampled_comparison.py)
and the sequential acceptance test (tests/data/sequential/, tests/analysis/test_sequential.py).

Those tests are about how difftest counts, pairs and judges runs, not about the runner: they
judge these captures through replay arms whose trace file names the input (`{seed}`), so a
round on the next input replays the next capture, and a rerun on the same input replays the
same one, as the reference runner (deterministic at a fixed seed) would print. Each capture is
the runner's stderr with the arm's environment, as an arm started by difftest gets it. Run this
again when the reference runner's output changes.
Usage: python scripts/capture_round_traces.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from difftest.execute.supervise import arm_environment

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
REFERENCE = [sys.executable, "-m", "difftest.runners.reference"]

# test_sampled_comparison.py: rounds_config's arms (8 draws per prompt) by sampler seed, and
# the reference_trace of 4 draws
SAMPLED = ["--vocab", "32", "--steps", "6", "--requests", "2", "--temperature", "0.4",
           "--top-p", "0.8"]
SAMPLED_ENV = {"VT_SPEC_TRACE": "1", "OMP_NUM_THREADS": "1"}
SAMPLED_ARMS = {  # name: (extra argv, DIFFTEST_MUTATION, sampler seeds)
    "target": (["--no-spec"], "none", [7, *range(100, 110)]),
    "spec": ([], "none", [7, *range(100, 104)]),
    "wrong": ([], "temperature-draft-only", list(range(100, 110))),
}

# test_sequential.py: the nondeterministic pair of 30 requests, without and with an input
# (`--seed`: the gate input 5, then 6, 7, ...; the planted comparison holds 6 out, so its worse
# arm runs on 5 and 7), and the deterministic one of 6 requests
REF_INPUTS = list(range(5, 13))
WORSE_INPUTS = [5, 7]
REF6_INPUTS = [5, 6, 7]


def capture(argv: list[str], env: dict[str, str], target: Path) -> None:
    own, _ = arm_environment(os.environ, env)
    out = subprocess.run(argv, env=own, capture_output=True, text=True, check=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(out.stderr, encoding="utf-8")
    print(target.relative_to(REPO))


def main() -> None:
    for name, (extra, mutation, seeds) in SAMPLED_ARMS.items():
        for seed in seeds:
            capture([*REFERENCE, *SAMPLED, "--samples", "8", "--sample-seed", str(seed), *extra],
                    {**SAMPLED_ENV, "DIFFTEST_MUTATION": mutation},
                    DATA / "sampled" / f"{name}-{seed}.log")
    for seed in (7, 8):
        capture([*REFERENCE, *SAMPLED, "--samples", "4", "--sample-seed", str(seed)],
                {"VT_SPEC_TRACE": "1"}, DATA / "sampled" / f"four-draws-{seed}.log")
    nondet = [*REFERENCE, "--nondeterministic", "--requests", "30", "--steps", "6"]
    det = [*REFERENCE, "--requests", "6", "--steps", "6"]
    env = {"VT_SPEC_TRACE": "1"}
    noise = ["--draft-noise", "6"]
    seq = DATA / "sequential"
    capture(nondet, env, seq / "ref.log")
    capture([*nondet, *noise], env, seq / "worse.log")
    capture(det, env, seq / "ref6.log")
    for seed in REF_INPUTS:
        capture([*nondet, "--seed", str(seed)], env, seq / f"ref-{seed}.log")
    for seed in REF6_INPUTS:
        capture([*det, "--seed", str(seed)], env, seq / f"ref6-{seed}.log")
    for seed in WORSE_INPUTS:
        capture([*nondet, "--seed", str(seed), *noise], env, seq / f"worse-{seed}.log")


if __name__ == "__main__":
    main()
