"""`python -m difftest.runners.hf`: options are checked before torch and transformers are imported."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from difftest.core.corpus import Runner, add_corpus_arguments, listing, mutation_from_env
from difftest.core.errors import DifftestError, ExitCode, UsageError
from difftest.core.limits import parse_draft_lens
from difftest.core.faults import FAULT_ENV
from difftest.core.force import FORCE_ENV, read_force_file
from difftest.runners.hf.options import ATTNS, DRAFTERS, DTYPES, MUTATIONS, SCHEDULES, HFOptions

CAPTURE_ENV = "DIFFTEST_CAPTURE"  # difftest.core.activations' names, without importing numpy here
CAPTURE_DIR_ENV = "DIFFTEST_CAPTURE_DIR"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (exit 2), without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    d = HFOptions()
    p = _Parser(prog="python -m difftest.runners.hf",
                description="Speculative decoding with Hugging Face transformers, greedy or "
                            "sampled (--temperature). Trace "
                            "lines go to stderr at the level of VT_SPEC_TRACE (unset/0: none; 1; "
                            "3 with draft logits), generated ids to stdout. DIFFTEST_FORCE=FILE "
                            "replays another arm's committed stream (teacher forcing); "
                            "DIFFTEST_CAPTURE=REQ:POS captures that step's draft forward.")
    p.add_argument("--model", type=Path, help="target model directory (default: built-in tiny model)")
    p.add_argument("--assistant", type=Path, help="draft model directory (with --model)")
    p.add_argument("--drafter", choices=DRAFTERS, default=d.drafter,
                   help="assisted (sequential) or dflash (block)")
    p.add_argument("--attn", choices=ATTNS, default=d.attn, help="attention of both models")
    p.add_argument("--dtype", choices=DTYPES, default=d.dtype, help="target dtype")
    p.add_argument("--assistant-dtype", choices=DTYPES, default=None,
                   help="draft dtype (default: the target's)")
    p.add_argument("--requests", type=int, default=d.requests)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--k", type=int, default=d.k,
                   help="assisted: drafts per step; dflash: block size - 1 (built-in drafter)")
    p.add_argument("--confidence", type=float, default=d.confidence,
                   help="assisted: stop drafting below this draft probability (0: never)")
    p.add_argument("--schedule", choices=SCHEDULES, default=d.schedule,
                   help="assisted: k drafts every verify (constant), or transformers' heuristic "
                        "(k follows the acceptance)")
    p.add_argument("--prompt-len", type=int, default=d.prompt_len)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=d.threads,
                   help="torch threads (default 1: two arms side by side otherwise slow each "
                        "other down)")
    p.add_argument("--mutation", choices=MUTATIONS, default=None,
                   help="a known-wrong draft attention (broken-mask, sliding-window-4), a "
                        "corpus bug (--list-mutations) or, with --temperature, a sampler "
                        "(noise-reuse, residual-unnormalised, top-p-draft-only, "
                        "temperature-draft-only), for probes (default: DIFFTEST_MUTATION, "
                        "unset = none)")
    p.add_argument("--top-k", type=int, default=d.top_k, help="entries per [spec-logits] row")
    p.add_argument("--fault", default=None,
                   help="a planted fault in one draft module, MODULE:KIND[:SIZE] with KIND scale, "
                        "noise or mask, MODULE e.g. model.layers.1.mlp (default: DIFFTEST_FAULT, "
                        "unset = none)")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampled decoding at this temperature (> 0): transformers' speculative "
                        "sampling (do_sample=True), a `[spec-sample]` line per verify that "
                        "drafted (default: greedy)")
    p.add_argument("--top-p", type=float, default=d.top_p,
                   help="with --temperature: nucleus sampling over the tempered distribution "
                        "(transformers' top-k is off)")
    p.add_argument("--sample-seed", type=int, default=None,
                   help="the sampler's seed (default: drawn afresh each run and printed in "
                        "[spec-config]; --seed builds the models and prompts)")
    p.add_argument("--samples", type=int, default=d.samples,
                   help="with --temperature: draws per prompt in one run, requests rI~J")
    p.add_argument("--no-spec", action="store_true",
                   help="the target alone: one token per step, nothing drafted")
    add_corpus_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.list_mutations:
        sys.stdout.write(listing(Runner.HF))
        return int(ExitCode.OK)
    try:
        options = HFOptions(
            model=args.model, assistant=args.assistant, attn=args.attn, dtype=args.dtype,
            assistant_dtype=args.assistant_dtype, drafter=args.drafter, requests=args.requests,
            max_new_tokens=args.max_new_tokens, k=args.k, confidence=args.confidence,
            schedule=args.schedule,
            prompt_len=args.prompt_len, seed=args.seed, threads=args.threads,
            mutation=args.mutation or mutation_from_env(MUTATIONS), top_k=args.top_k,
            fault=args.fault if args.fault is not None else os.environ.get(FAULT_ENV, "").strip(),
            temperature=args.temperature, top_p=args.top_p, sample_seed=args.sample_seed,
            samples=args.samples, no_spec=args.no_spec, sliding_window=args.sliding_window,
            draft_lens=parse_draft_lens(args.draft_lens))
        if options.sampled and (os.environ.get(FORCE_ENV, "").strip()
                                or os.environ.get(CAPTURE_ENV, "").strip()):
            raise UsageError(f"{FORCE_ENV} and {CAPTURE_ENV} replay greedy decoding; unset them "
                             "for --temperature or --no-spec")
        force, force_path = None, os.environ.get(FORCE_ENV, "").strip()
        if force_path:
            force = read_force_file(Path(force_path))
        capture = None
        at = os.environ.get(CAPTURE_ENV, "").strip()
        if at:
            req, sep, pos = at.rpartition(":")
            if not sep or not req or not pos.isdigit():
                raise UsageError(f"{CAPTURE_ENV}={at!r}: expected REQ:POS, e.g. r0:13")
            capture = (req, int(pos))
    except DifftestError as exc:
        print(f"python -m difftest.runners.hf: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # keep the trace stream quiet
    os.environ.setdefault("TQDM_DISABLE", "1")
    from difftest.emit import Tracer
    from difftest.runners.hf.runner import ForceMismatch, run  # torch loads only for a valid run

    try:
        run(options, Tracer(top_k=options.top_k), out=sys.stdout, force=force, capture=capture,
            capture_dir=os.environ.get(CAPTURE_DIR_ENV, "").strip() or None)
    except ForceMismatch as exc:
        print(f"python -m difftest.runners.hf: error: {FORCE_ENV}={force_path}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except DifftestError as exc:
        print(f"python -m difftest.runners.hf: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
