"""The mlx runner's options, kept free of mlx so that bad options fail before it loads."""

from __future__ import annotations

from dataclasses import dataclass

from difftest.core.errors import UsageError
from difftest.core.faults import Fault, parse_fault_text
from difftest.core.limits import check_seed

# The draft's attention: mlx's fused kernel (`sdpa`, what mlx-lm runs) or a split-K one that
# sums the keys in chunks and merges the partial softmaxes (a harmless reordering of floats).
ATTNS: tuple[str, ...] = ("sdpa", "split-k")
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
# Known-wrong drafts, for probes. broken-mask: the draft attends to every key of a forward
# (no causal mask: the prompt's prefill sees its future); sliding-window-4: each draft query
# sees only the 4 most recent keys; zeroed-layer: the draft's last layer adds nothing (its
# output projections are zero). Each changes only the draft: a lossless verify keeps the output.
MUTATIONS: tuple[str, ...] = ("none", "broken-mask", "sliding-window-4", "zeroed-layer")


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
            if self.mutation != "none":
                raise UsageError(f"fault {self.fault!r}: a mask fault needs no --mutation (it "
                                 "changes one layer's mask)")

    def planted(self) -> Fault | None:
        """The planted fault, parsed (its module is checked against the loaded draft)."""
        return parse_fault_text(self.fault) if self.fault else None
