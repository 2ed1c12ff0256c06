"""Planted per-module faults in the mlx runner's draft model, so that `difftest localize` has a
known answer: one named module's output is perturbed (mlx modules have no forward hooks: the
module's `__call__` is wrapped, `difftest.adapters.mlx.wrap_call`).

`MODULE:KIND[:SIZE]` (difftest.core.faults parses it), MODULE a name from the draft's
`named_modules()` (e.g. `model.layers.1.mlp`, `model.layers.0.self_attn.o_proj`, `lm_head`):

- `scale`: the module's output times `1 + SIZE` (default 1e-2);
- `noise`: plus seeded Gaussian noise of `SIZE` (default 1e-3) times the output's RMS;
- `mask`: only for `model.layers.N.self_attn`: that one layer attends to every key of a
  forward (no causal mask, as the broken-mask mutation does to every layer); the others keep
  theirs.
"""

from __future__ import annotations

from typing import Any

from difftest.adapters.mlx import wrap_call
from difftest.core.errors import UsageError
from difftest.core.faults import Fault
from difftest.runners.mlx.options import MLXOptions


def plant(draft: Any, fault: Fault, options: MLXOptions) -> None:
    """Install `fault` on the draft model (a UsageError names a module the draft lacks)."""
    import mlx.core as mx
    import numpy as np

    modules = dict(draft.named_modules())
    if fault.module not in modules or not fault.module:
        names = [n for n in modules if n]
        raise UsageError(f"fault {fault.text!r}: the draft has no module {fault.module!r}; "
                         f"modules: {', '.join(names[:12])}, ... ({len(names)} in all)")
    module = modules[fault.module]
    if fault.kind == "mask":
        from difftest.runners.mlx.models import draft_attention_class

        module.__class__ = draft_attention_class(options.attn, "broken-mask", options.split)
        return
    rng = np.random.default_rng(options.seed + 7919)

    def perturb(x: Any) -> Any:
        if fault.kind == "scale":
            return x * (1.0 + fault.size)
        wide = x.astype(mx.float32)
        rms = mx.sqrt(mx.mean(wide * wide))
        noise = mx.array(rng.standard_normal(x.shape).astype(np.float32))
        return (wide + fault.size * rms * noise).astype(x.dtype)

    def after(output: Any) -> Any:
        if isinstance(output, mx.array):
            return perturb(output)
        if isinstance(output, tuple) and output and isinstance(output[0], mx.array):
            return (perturb(output[0]), *output[1:])
        raise UsageError(f"fault {fault.text!r}: module {fault.module!r} does not output an "
                         "array")

    wrap_call(module, after)
