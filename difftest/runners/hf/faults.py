"""Planted per-module faults in the hf runner's draft model, so that `difftest localize` has a
known answer: one named module's output is perturbed through a forward hook.

`MODULE:KIND[:SIZE]` (difftest.runners.reference.faults parses it), MODULE a name from the draft's
`named_modules()` (e.g. `model.layers.1.mlp`, `model.layers.0.self_attn.o_proj`):

- `scale`: the module's output times `1 + SIZE` (default 1e-2);
- `noise`: plus seeded Gaussian noise of `SIZE` (default 1e-3) times the output's RMS;
- `mask`: only for `model.layers.N.self_attn`: that one layer attends with the other
  causality (a causal draft layer sees the whole block); every other layer keeps its mask.
"""

from __future__ import annotations

from typing import Any

import torch

from difftest.core.errors import UsageError
from difftest.core.faults import Fault

FAULTED_ATTN = "difftest-fault"


def plant(draft: Any, fault: Fault, seed: int) -> None:
    """Install `fault` on the draft model (a UsageError names a module the draft lacks)."""
    modules = dict(draft.named_modules())
    if fault.module not in modules or not fault.module:
        names = [n for n in modules if n]
        raise UsageError(f"fault {fault.text!r}: the draft has no module {fault.module!r}; "
                         f"modules: {', '.join(names[:12])}, ... ({len(names)} in all)")
    module = modules[fault.module]
    if fault.kind == "mask":
        _plant_mask(draft, module)
        return
    gen = torch.Generator().manual_seed(seed + 7919)

    def perturb(x: torch.Tensor) -> torch.Tensor:
        if fault.kind == "scale":
            return x * (1.0 + fault.size)
        rms = x.float().pow(2).mean().sqrt()
        noise = torch.randn(x.shape, generator=gen, dtype=torch.float32)
        return (x.float() + fault.size * rms * noise).to(x.dtype)

    def hook(mod: Any, args: Any, output: Any) -> Any:
        if isinstance(output, torch.Tensor):
            return perturb(output)
        if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
            return (perturb(output[0]), *output[1:])
        raise UsageError(f"fault {fault.text!r}: module {fault.module!r} does not output a "
                         "tensor")

    module.register_forward_hook(hook)


def _plant_mask(draft: Any, module: Any) -> None:
    """Route attention through an sdpa function that changes the mask of `module`'s layer only."""
    from difftest.runners.hf.attention import route_masked_attention

    route_masked_attention(draft, FAULTED_ATTN, "broken-mask", only=module)
