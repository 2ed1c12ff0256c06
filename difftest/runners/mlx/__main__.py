"""`python -m difftest.runners.mlx`: options are checked before mlx is imported."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from difftest.core.activations import CAPTURE_DIR_ENV, CAPTURE_ENV, parse_at
from difftest.core.corpus import Runner, add_corpus_arguments, listing, mutation_from_env
from difftest.core.errors import DifftestError, ExitCode
from difftest.core.limits import parse_draft_lens
from difftest.core.faults import FAULT_ENV
from difftest.core.force import FORCE_ENV, read_force_file
from difftest.runners.mlx.options import ATTNS, DTYPES, MUTATIONS, MLXOptions


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (exit 2), without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    d = MLXOptions()
    p = _Parser(prog="python -m difftest.runners.mlx",
                description="Greedy speculative decoding with mlx-lm on a tiny seeded model "
                            "pair. Trace lines go to stderr at the level of VT_SPEC_TRACE "
                            "(unset/0: none; 1; 3 with draft logits), generated ids to stdout.")
    p.add_argument("--attn", choices=ATTNS, default=d.attn,
                   help="the draft's attention: mlx's fused kernel or split-K chunks")
    p.add_argument("--split", type=int, default=d.split, help="split-k: keys per chunk")
    p.add_argument("--draft-dtype", choices=DTYPES, default=d.draft_dtype,
                   help="the draft model's dtype (the target stays float32)")
    p.add_argument("--requests", type=int, default=d.requests)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--k", type=int, default=d.k, help="drafts per verify")
    p.add_argument("--prompt-len", type=int, default=d.prompt_len)
    p.add_argument("--seed", type=int, default=d.seed, help="weights and prompts")
    p.add_argument("--mutation", choices=MUTATIONS, default=None,
                   help="a known-wrong draft or a corpus bug (--list-mutations), for probes "
                        "(default: DIFFTEST_MUTATION, unset = none)")
    p.add_argument("--top-k", type=int, default=d.top_k, help="entries per [spec-logits] row")
    p.add_argument("--fault", default=None,
                   help="a planted fault in one draft module, MODULE:KIND[:SIZE] with KIND scale, "
                        "noise or mask, MODULE e.g. model.layers.1.mlp (default: DIFFTEST_FAULT, "
                        "unset = none)")
    add_corpus_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.list_mutations:
        sys.stdout.write(listing(Runner.MLX))
        return int(ExitCode.OK)
    force_path = os.environ.get(FORCE_ENV, "").strip()
    try:
        options = MLXOptions(
            attn=args.attn, draft_dtype=args.draft_dtype, requests=args.requests,
            max_new_tokens=args.max_new_tokens, k=args.k, prompt_len=args.prompt_len,
            seed=args.seed, mutation=args.mutation or mutation_from_env(MUTATIONS),
            top_k=args.top_k, split=args.split,
            fault=args.fault if args.fault is not None else os.environ.get(FAULT_ENV, "").strip(),
            sliding_window=args.sliding_window, draft_lens=parse_draft_lens(args.draft_lens))
        force = read_force_file(Path(force_path)) if force_path else None
        at = os.environ.get(CAPTURE_ENV, "").strip()
        capture = parse_at(at) if at else None
    except DifftestError as exc:
        print(f"python -m difftest.runners.mlx: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    from difftest.emit import Tracer
    # mlx loads only for a valid run; without it the import fails as Python says, and difftest
    # names the extra to install for an arm that fails so (difftest.execute.hints)
    from difftest.runners.mlx.runner import ForceMismatch, run

    try:
        run(options, Tracer(top_k=options.top_k), out=sys.stdout, force=force, capture=capture,
            capture_dir=os.environ.get(CAPTURE_DIR_ENV, "").strip() or None)
    except ForceMismatch as exc:
        print(f"python -m difftest.runners.mlx: error: {FORCE_ENV}={force_path}: {exc}",
              file=sys.stderr)
        return int(ExitCode.USAGE)
    except DifftestError as exc:
        print(f"python -m difftest.runners.mlx: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    return int(ExitCode.OK)

if __name__ == "__main__":
    sys.exit(main())
