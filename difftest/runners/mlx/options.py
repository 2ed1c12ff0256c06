"""The mlx runner's options, kept free of mlx so that bad options fail before it loads."""

from __future__ import annotations

from dataclasses import dataclass

from difftest.core.errors import UsageError
from difftest.core.faults import Fault, parse_fault_text
from difftest.core.corpus import Runner, names_of
from difftest.core.limits import check_draft_lens, check_seed, check_window

# The draft's attention: mlx's fused kernel (`sdpa`, what mlx-lm runs) or a split-K one that
# sums the keys in chunks and merges the partial softmaxes (a harmless reordering of floats).
ATTNS: tuple[str, ...] = ("sdpa", "split-k")
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
# Known-wrong drafts, for probes. broken-mask: the draft attends to every key of a forward
# (no causal mask: the prompt's prefill sees its future); sliding-window-4: each draft query
# sees only the 4 most recent keys; zeroed-layer: the draft's last layer adds nothing (its
# output projections are zero). Each changes only the draft: a lossless verify keeps the output.
# The bug corpus's records this runner carries (difftest.core.corpus, --list-mutations):
# sliding-window-edge (the draft's --sliding-window one key too wide), verify-width-path (the
# target's verify rows shifted at width 3), broken-mask (above) and the control-explicit-mask
# control (the draft's fused sdpa given its causal mask as an array).
CORPUS_MUTATIONS: tuple[str, ...] = names_of(Runner.MLX)
MUTATIONS: tuple[str, ...] = tuple(dict.fromkeys(("none", "broken-mask", "sliding-window-4",
                                                  "zeroed-layer", *CORPUS_MUTATIONS)))


@dataclass(frozen=True)
class MLXOptions:
    """Everything that decides what one run prints; equal options print equal traces."""

    attn: str = "sdpa"
    draft_dtype: str = "float32"
    requests: int = 3
    max_new_tokens: int = 16
    k: int = 4
    prompt_len: int = 8
    seed: int = 0
    mutation: str = "none"
    top_k: int = 8
    split: int = 4  # split-k: keys per chunk
    # A planted fault in one draft module (difftest.runners.mlx.faults), MODULE:KIND[:SIZE];
    # "" for none.
    fault: str = ""
    # the draft's attention sees only the last W keys (its own included); 0: no window
    sliding_window: int = 0
    # drafted tokens per verify, cycled (request i starts i entries on); (): k every verify
    draft_lens: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name, allowed in (("attn", ATTNS), ("draft_dtype", DTYPES), ("mutation", MUTATIONS)):
            if getattr(self, name) not in allowed:
                raise UsageError(f"unknown {name.replace('_', '-')} {getattr(self, name)!r}; "
                                 f"choose one of {', '.join(allowed)}")
        for name, low in (("requests", 1), ("max_new_tokens", 1), ("k", 1), ("prompt_len", 2),
                          ("top_k", 2), ("split", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"{name.replace('_', '-')} must be an integer >= {low}, "
                                 f"got {value!r}")
        check_seed(self.seed)
        fault = self.planted()
        if fault is not None and fault.kind == "mask":
            if not (fault.module.startswith("model.layers.")
                    and fault.module.endswith(".self_attn")):
                raise UsageError(f"fault {self.fault!r}: a mask fault applies to an attention "
                                 "module (model.layers.N.self_attn)")
            if self.mutation != "none" or self.sliding_window:
                raise UsageError(f"fault {self.fault!r}: a mask fault needs no --mutation and "
                                 "no --sliding-window (it changes one layer's mask)")
        if self.sliding_window:
            check_window(self.sliding_window)
        check_draft_lens(self.draft_lens, self.k)

    @property
    def corpus_run(self) -> bool:
        """A run that prints its `[spec-coverage]` line: a corpus mutation, a window or a
        draft-length cycle in effect (a plain run prints what it always did)."""
        return bool(self.mutation in CORPUS_MUTATIONS or self.sliding_window or self.draft_lens)

    def planted(self) -> Fault | None:
        """The planted fault, parsed (its module is checked against the loaded draft)."""
        return parse_fault_text(self.fault) if self.fault else None
