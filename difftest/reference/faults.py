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

from dataclasses import dataclass

from difftest.errors import UsageError

FAULT_KINDS: tuple[str, ...] = ("scale", "noise", "mask")
DEFAULT_SIZE = {"scale": 1e-2, "noise": 1e-3, "mask": 0.0}
LAYER_PARTS: tuple[str, ...] = ("q", "attn", "o_proj", "mlp")


def module_names(layers: int) -> tuple[str, ...]:
    """The draft forward's modules in the order they run."""
    return ("embed", *(f"layers.{i}.{p}" for i in range(layers) for p in LAYER_PARTS),
            "final_norm", "head")


@dataclass(frozen=True)
class Fault:
    module: str
    kind: str
    size: float

    @property
    def text(self) -> str:
        return self.module if self.kind == "mask" else f"{self.module}:{self.kind}:{self.size:g}"

    def mask_layer(self) -> int | None:
        """The layer whose mask this fault changes, if it is a mask fault."""
        return int(self.module.split(".")[1]) if self.kind == "mask" else None


def parse_fault(text: str, layers: int) -> Fault:
    """`MODULE:KIND[:SIZE]`; a bad one is a UsageError naming what is wrong and what exists."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise UsageError(f"bad fault {text!r}; use MODULE:KIND[:SIZE], e.g. layers.1.attn:scale:0.01")
    module, kind = parts[0], parts[1]
    names = module_names(layers)
    if module not in names:
        raise UsageError(f"fault {text!r}: no module {module!r}; modules: {', '.join(names)}")
    if kind not in FAULT_KINDS:
        raise UsageError(f"fault {text!r}: unknown kind {kind!r}; choose one of "
                         f"{', '.join(FAULT_KINDS)}")
    if kind == "mask" and not module.endswith(".attn"):
        raise UsageError(f"fault {text!r}: a mask fault applies to a layers.N.attn module")
    size = DEFAULT_SIZE[kind]
    if len(parts) == 3:
        try:
            size = float(parts[2])
        except ValueError:
            raise UsageError(f"fault {text!r}: size {parts[2]!r} is not a number") from None
        if not size > 0 or size != size or size == float("inf"):
            raise UsageError(f"fault {text!r}: size must be a finite number > 0")
    return Fault(module, kind, size)


def flipped_mask(kind: str) -> str:
    """The mask a mask fault gives a layer: full <-> causal; a sliding window becomes full."""
    return "causal" if kind == "full" else "full"
