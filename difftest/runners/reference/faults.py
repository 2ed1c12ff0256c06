"""Planted per-module faults in the reference draft forward: one named module's output is
perturbed, so a tool that localises differences has a known answer to find.

A fault is `MODULE:KIND[:SIZE]`:

- `scale`: the module's output times `1 + SIZE` (default 1e-2);
- `noise`: plus seeded Gaussian noise of `SIZE` (default 1e-3) times the output's RMS;
- `mask`: only for `layers.N.attn`: that layer's mask is changed (full <-> causal, a sliding
  window becomes full), every other layer keeps its own.

Modules, in forward order: `embed` (the query block), then per draft layer N `layers.N.q`
(queries after norm and RoPE), `layers.N.attn` (attention output), `layers.N.o_proj` (the
residual stream after the output projection), `layers.N.mlp` (the layer's output), then
`final_norm` and `head` (the block logits). Torch-free, so bad options fail fast.
"""

from __future__ import annotations

from difftest.core.errors import UsageError
from difftest.core.faults import DEFAULT_SIZE, FAULT_KINDS, Fault, parse_fault_text

__all__ = ["DEFAULT_SIZE", "FAULT_KINDS", "Fault", "flipped_mask", "module_names", "parse_fault",
           "parse_fault_text"]

LAYER_PARTS: tuple[str, ...] = ("q", "attn", "o_proj", "mlp")


def module_names(layers: int) -> tuple[str, ...]:
    """The draft forward's modules in the order they run."""
    return ("embed", *(f"layers.{i}.{p}" for i in range(layers) for p in LAYER_PARTS),
            "final_norm", "head")


def parse_fault(text: str, layers: int) -> Fault:
    """`MODULE:KIND[:SIZE]`; a bad one is a UsageError naming what is wrong and what exists."""
    fault = parse_fault_text(text)
    names = module_names(layers)
    if fault.module not in names:
        raise UsageError(f"fault {text!r}: no module {fault.module!r}; modules: {', '.join(names)}")
    if fault.kind == "mask" and not fault.module.endswith(".attn"):
        raise UsageError(f"fault {text!r}: a mask fault applies to a layers.N.attn module")
    return fault


def flipped_mask(kind: str) -> str:
    """The mask a mask fault gives a layer: full <-> causal; a sliding window becomes full."""
    return "causal" if kind == "full" else "full"
