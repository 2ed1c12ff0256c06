"""Greedy speculative generation per request, traced through `difftest.adapters.hf`."""

from __future__ import annotations

from typing import TextIO
from collections.abc import Callable

import torch

from difftest.adapters.hf import resolved_settings, traced_generation
from difftest.emit import Tracer
from difftest.hf.models import load_pair
from difftest.hf.options import HFOptions


def prompts(options: HFOptions, vocab: int) -> dict[str, list[int]]:
    """Seeded prompts; request i gets prompt_len + i ids, so requests differ in length too."""
    g = torch.Generator().manual_seed(options.seed + 1000)
    return {f"r{i}": torch.randint(0, vocab, (options.prompt_len + i,), generator=g).tolist()
            for i in range(options.requests)}


def run(options: HFOptions, tracer: Tracer, out: TextIO | None = None,
        progress: Callable[[str], None] | None = None) -> dict[str, list[int]]:
    """Generate every request; return (and print to `out`) the generated ids per request."""
    torch.set_num_threads(options.threads)
    target, draft = load_pair(options)
    if options.drafter == "assisted":
        config = draft.generation_config
        config.num_assistant_tokens = options.k
        config.num_assistant_tokens_schedule = options.schedule
        config.assistant_confidence_threshold = options.confidence
    extra = {"speculation_type": "dflash"} if options.drafter == "dflash" else {}
    tracer.config({**resolved_settings(target, draft), "drafter": options.drafter,
                   "k": options.k, "schedule": options.schedule, "confidence": options.confidence,
                   "mutation": options.mutation,
                   "threads": torch.get_num_threads(), "seed": options.seed})
    generated: dict[str, list[int]] = {}
    vocab = int(target.get_output_embeddings().weight.shape[0])
    with torch.no_grad():
        for req, prompt in prompts(options, vocab).items():
            ids = torch.tensor([prompt], dtype=torch.long)
            with traced_generation(tracer, req=req):
                result = target.generate(
                    ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                    do_sample=False, max_new_tokens=options.max_new_tokens, **extra)
            generated[req] = result[0, len(prompt):].tolist()
            if out is not None:
                out.write(f"{req}: {' '.join(map(str, generated[req]))}\n")
                out.flush()
    return generated
