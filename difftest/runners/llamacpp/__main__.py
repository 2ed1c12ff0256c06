"""`python -m difftest.runners.llamacpp`: options are checked before llama_cpp is imported."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from difftest.core.errors import DifftestError, ExitCode, UsageError
from difftest.core.force import FORCE_ENV, read_force_file
from difftest.runners.llamacpp.options import (FLASH_ATTN, KV_TYPES, LOGITS, MUTATIONS, VERIFY,
                                               LlamaCppOptions)

CAPTURE_ENV = "DIFFTEST_CAPTURE"  # difftest.core.activations' names, without importing numpy here
CAPTURE_DIR_ENV = "DIFFTEST_CAPTURE_DIR"
PROG = "python -m difftest.runners.llamacpp"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (exit 2), without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    d = LlamaCppOptions()
    p = _Parser(prog=PROG,
                description="Greedy speculative decoding on llama.cpp (llama-cpp-python) with a "
                            "tiny seeded GGUF target and draft. Trace lines go to stderr at the "
                            "level of VT_SPEC_TRACE (unset/0: none; 1; 3 with block logits), "
                            "generated ids to stdout. DIFFTEST_FORCE=FILE replays another arm's "
                            "committed stream (teacher forcing); DIFFTEST_CAPTURE=REQ:POS "
                            "captures that step's draft logits (the only capture llama.cpp "
                            "offers here).")
    p.add_argument("--requests", type=int, default=d.requests)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--k", type=int, default=d.k, help="drafts per verify")
    p.add_argument("--prompt-len", type=int, default=d.prompt_len)
    p.add_argument("--seed", type=int, default=d.seed, help="weights and prompts")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="llama.cpp threads of both contexts (default 1: two arms side by side "
                        "otherwise slow each other down)")
    p.add_argument("--n-batch", type=int, default=d.n_batch, help="llama.cpp n_batch")
    p.add_argument("--n-ubatch", type=int, default=d.n_ubatch, help="llama.cpp n_ubatch")
    p.add_argument("--kv-type", choices=KV_TYPES, default=d.kv_type,
                   help="type_k and type_v of both KV caches")
    p.add_argument("--flash-attn", choices=FLASH_ATTN, default=d.flash_attn)
    p.add_argument("--verify", choices=VERIFY, default=d.verify,
                   help="block: the pending token and the k drafts in one llama_decode call; "
                        "serial: one call per token")
    p.add_argument("--logits", choices=LOGITS, default=d.logits,
                   help="whose block logits the [spec-logits] rows carry (the other model's go "
                        "to [llamacpp-logits] side lines)")
    p.add_argument("--mutation", choices=MUTATIONS, default="none",
                   help="a known-wrong draft, for probes")
    p.add_argument("--top-k", type=int, default=d.top_k, help="entries per logits row")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where the GGUF pair is written (default: $DIFFTEST_CACHE/llamacpp or "
                        "~/.cache/difftest/llamacpp)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        options = LlamaCppOptions(
            requests=args.requests, max_new_tokens=args.max_new_tokens, k=args.k,
            prompt_len=args.prompt_len, seed=args.seed, threads=args.threads,
            n_batch=args.n_batch, n_ubatch=args.n_ubatch, kv_type=args.kv_type,
            flash_attn=args.flash_attn, verify=args.verify, logits=args.logits,
            mutation=args.mutation, top_k=args.top_k, cache_dir=args.cache_dir)
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
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        import llama_cpp  # noqa: F401 - only to say what is missing, in one line
    except ImportError as exc:
        print(f"{PROG}: error: llama-cpp-python is not installed ({exc}); "
              "pip install -e '.[llamacpp]'", file=sys.stderr)
        return int(ExitCode.USAGE)
    from difftest.adapters.llamacpp import LlamaCppError
    from difftest.emit import Tracer
    from difftest.runners.llamacpp.runner import ForceMismatch, run

    try:
        run(options, Tracer(top_k=options.top_k), out=sys.stdout, force=force, capture=capture,
            capture_dir=os.environ.get(CAPTURE_DIR_ENV, "").strip() or None)
    except ForceMismatch as exc:
        print(f"{PROG}: error: {FORCE_ENV}={force_path}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except (DifftestError, LlamaCppError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
