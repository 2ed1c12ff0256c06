"""`python -m difftest.runners.reference`: options and environment are checked before torch is imported."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from pathlib import Path

from difftest.core.errors import DifftestError, ExitCode
from difftest.core.corpus import Runner, add_corpus_arguments, listing
from difftest.core.limits import parse_draft_lens
from difftest.core.force import FORCE_ENV, read_force_file
from difftest.runners.reference.options import (DRAFT_DTYPES, DRAFTERS, FIXTURES, KERNELS, LANES,
                                        MUTATIONS,
                                        RunnerOptions, fault_from_env, lane_from_env,
                                        mutation_from_env,
                                        trace_level_from_env)


CAPTURE_ENV = "DIFFTEST_CAPTURE"  # difftest.core.activations' names, without importing numpy here
CAPTURE_DIR_ENV = "DIFFTEST_CAPTURE_DIR"


def _count(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    return parse


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (exit 2), without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    d = RunnerOptions()
    p = _Parser(
        prog="python -m difftest.runners.reference",
        description="Reference DFlash/DFlash2 speculative-decoding runner. Trace lines go to stderr "
                    "at the level of VT_SPEC_TRACE (unset/0: none; 1, 2, 3), generated ids to stdout. "
                    "DIFFTEST_FORCE=FILE replays another arm's committed stream (teacher forcing).")
    p.add_argument("--lane", choices=LANES, default=None,
                   help="attention lane (default: VT_DFLASH_PAGED=0 -> materialized, else paged)")
    p.add_argument("--drafter", choices=DRAFTERS, default=d.drafter)
    p.add_argument("--scalars", choices=("on", "off"), default="on",
                   help="DFlash2 output_multiplier and final_logit_softcapping on candidate values")
    p.add_argument("--fixture", choices=FIXTURES, default=d.fixture)
    p.add_argument("--mutation", choices=MUTATIONS, default=None,
                   help="a known-wrong attention (default: DIFFTEST_MUTATION, unset = none)")
    p.add_argument("--fault", default=None,
                   help="a planted fault in one draft module, MODULE:KIND[:SIZE] with KIND scale, "
                        "noise or mask (default: DIFFTEST_FAULT, unset = none)")
    p.add_argument("--requests", type=_count(1), default=d.requests)
    p.add_argument("--steps", type=_count(1), default=d.steps, help="verify steps per request")
    p.add_argument("--k", type=_count(1), default=d.k, help="drafts per block")
    p.add_argument("--vocab", type=_count(32), default=d.vocab)
    p.add_argument("--layers", type=_count(1), default=d.layers, help="draft layers")
    p.add_argument("--target-layers", type=_count(1), default=d.target_layers)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--prompt-len", type=_count(1), default=d.prompt_len,
                   help="prompt length of r0; request i gets prompt-len + i ids")
    p.add_argument("--topk", type=_count(1), default=d.topk, help="DFlash2 candidates per row")
    p.add_argument("--attention-kernel", choices=KERNELS, default=d.attention_kernel,
                   help="draft attention: one softmax over all keys, or chunks of 16 keys combined "
                        "with an online softmax (equal in exact arithmetic, not in rounding)")
    p.add_argument("--draft-dtype", choices=DRAFT_DTYPES, default=d.draft_dtype,
                   help="dtype of the draft forward (weights, activations, K/V store); the "
                        "target stays float32, block logits are printed as float32")
    p.add_argument("--nondeterministic", action="store_true",
                   help="reduce the attention keys in an order drawn afresh each run, so reruns "
                        "differ by float32 rounding as GPU reductions do")
    p.add_argument("--nondet-seed", type=int, default=None,
                   help="with --nondeterministic: fix the drawn order (to reproduce one run)")
    p.add_argument("--draft-noise", type=float, default=d.draft_noise,
                   help="a worse drafter: seeded Gaussian noise of this standard deviation added "
                        "to every block logit before drafting (0: none)")
    p.add_argument("--layer-masks", default="",
                   help="comma-separated mask per draft layer: full, causal, sliding:W")
    p.add_argument("--eos-id", type=int, default=d.eos_id,
                   help="end-of-sequence id: a request stops once it commits it (-1: none)")
    p.add_argument("--shared-prefix", type=_count(0), default=d.shared_prefix,
                   help="later requests start with r0's first N ids; the paged lane's prefix "
                        "cache shares the pages holding only those")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampled decoding at this temperature (> 0): speculative sampling, "
                        "rejection test and residual draw, and a `[spec-sample]` line per verify "
                        "(default: greedy)")
    p.add_argument("--top-p", type=float, default=d.top_p,
                   help="with --temperature: nucleus sampling over the tempered distribution")
    p.add_argument("--sample-seed", type=int, default=None,
                   help="the sampler's seed (default: drawn afresh each run and printed in "
                        "[spec-config]; --seed builds the model and prompts)")
    p.add_argument("--samples", type=_count(1), default=d.samples,
                   help="with --temperature: draws per prompt in one run, requests rI~J")
    p.add_argument("--no-spec", action="store_true",
                   help="the target alone: one token per step, nothing drafted")
    add_corpus_arguments(p, window=False)
    return p


def options_of(args: argparse.Namespace) -> RunnerOptions:
    """The options parsed arguments ask for, the environment filling what they leave unset."""
    return RunnerOptions(
        lane=args.lane or lane_from_env(), drafter=args.drafter, scalars=args.scalars == "on",
        fixture=args.fixture, mutation=args.mutation or mutation_from_env(),
        requests=args.requests, steps=args.steps, k=args.k, vocab=args.vocab,
        layers=args.layers, target_layers=args.target_layers, seed=args.seed,
        prompt_len=args.prompt_len, topk=args.topk, attention_kernel=args.attention_kernel,
        draft_dtype=args.draft_dtype,
        nondeterministic=args.nondeterministic or args.nondet_seed is not None,
        nondet_seed=args.nondet_seed, draft_noise=args.draft_noise,
        layer_masks=tuple(m for m in args.layer_masks.split(",") if m),
        draft_lens=parse_draft_lens(args.draft_lens), eos_id=args.eos_id,
        shared_prefix=args.shared_prefix,
        fault=args.fault if args.fault is not None else fault_from_env(),
        temperature=args.temperature, top_p=args.top_p, sample_seed=args.sample_seed,
        samples=args.samples, no_spec=args.no_spec)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.list_mutations:
        sys.stdout.write(listing(Runner.REFERENCE))
        return int(ExitCode.OK)
    try:
        level = trace_level_from_env()
        options = options_of(args)
    except DifftestError as exc:
        print(f"python -m difftest.runners.reference: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)

    if options.sampled and (os.environ.get(FORCE_ENV, "").strip()
                            or os.environ.get(CAPTURE_ENV, "").strip()):
        print(f"python -m difftest.runners.reference: error: {FORCE_ENV} and {CAPTURE_ENV} replay "
              "greedy decoding; unset them for --temperature or --no-spec", file=sys.stderr)
        return int(ExitCode.USAGE)
    force = None
    path = os.environ.get(FORCE_ENV, "").strip()
    if path:
        try:
            force = read_force_file(Path(path))
        except DifftestError as exc:
            print(f"python -m difftest.runners.reference: error: {exc}", file=sys.stderr)
            return int(ExitCode.USAGE)

    capture = None
    at = os.environ.get(CAPTURE_ENV, "").strip()
    if at:
        req, sep, pos = at.rpartition(":")
        if not sep or not req or not pos.isdigit():
            print(f"python -m difftest.runners.reference: error: {CAPTURE_ENV}={at!r}: expected REQ:POS",
                  file=sys.stderr)
            return int(ExitCode.USAGE)
        capture = (req, int(pos))
    folder = os.environ.get(CAPTURE_DIR_ENV, "").strip()

    from difftest.runners.reference.runner import ForceMismatch, run  # torch loads only for a valid run

    def to_stderr(line: str) -> None:
        os.write(2, (line + "\n").encode())

    try:
        result = run(options, level, sink=to_stderr, force=force, capture=capture,
                     capture_dir=Path(folder) if folder else None)
    except ForceMismatch as exc:
        print(f"python -m difftest.runners.reference: error: {FORCE_ENV}={path}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    sys.stdout.write("".join(line + "\n" for line in result.stdout_lines()))
    sys.stdout.flush()
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
