"""Greedy speculative generation per request, traced through `difftest.adapters.mlx`."""

from __future__ import annotations

import importlib
from typing import TextIO

from difftest.adapters.mlx import resolved_settings, traced_generation
from difftest.emit import Tracer
from difftest.runners.mlx.models import VOCAB, load_pair
from difftest.runners.mlx.options import MLXOptions


def prompts(options: MLXOptions) -> dict[str, list[int]]:
    """Seeded prompts; request i gets prompt_len + i ids, so requests differ in length too."""
    import numpy as np

    rng = np.random.default_rng(options.seed + 1000)
    return {f"r{i}": [int(t) for t in rng.integers(0, VOCAB, options.prompt_len + i)]
            for i in range(options.requests)}


def run(options: MLXOptions, tracer: Tracer, out: TextIO | None = None) -> dict[str, list[int]]:
    """Generate every request; return (and print to `out`) the generated ids per request."""
    import mlx.core as mx

    generate = importlib.import_module("mlx_lm.generate")
    target, draft = load_pair(options)
    tracer.config({**resolved_settings(target, draft), "attention_target": "sdpa",
                   "attention_draft": options.attn, "k": options.k,
                   "mutation": options.mutation, "seed": options.seed,
                   "engine": f"mlx-lm-{importlib.import_module('mlx_lm').__version__}"})
    generated: dict[str, list[int]] = {}
    for req, prompt in prompts(options).items():
        with traced_generation(tracer, req=req):
            stream = generate.speculative_generate_step(
                mx.array(prompt, dtype=mx.uint32), target, draft,
                num_draft_tokens=options.k, max_tokens=options.max_new_tokens)
            generated[req] = [int(token) for token, _, _ in stream]
        if out is not None:
            out.write(f"{req}: {' '.join(map(str, generated[req]))}\n")
            out.flush()
    return generated
