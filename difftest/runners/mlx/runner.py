"""Greedy speculative generation per request, traced through `difftest.adapters.mlx`."""

from __future__ import annotations

import importlib
from typing import Any, TextIO

from difftest.adapters.mlx import (MLXCapture, MLXTrace, forced_generation,
                                   resolved_settings, traced_generation)
from difftest.core.force import ForceStream
from difftest.emit import Tracer
from difftest.runners.mlx.corpus import Planted, TargetProxy, cycled_generation
from difftest.runners.mlx.models import VOCAB, load_pair
from difftest.runners.mlx.options import MLXOptions


class ForceMismatch(Exception):
    """The force file does not fit this run's prompts (another run's, or another prompt set)."""


def prompts(options: MLXOptions) -> dict[str, list[int]]:
    """Seeded prompts; request i gets prompt_len + i ids, so requests differ in length too."""
    import numpy as np

    rng = np.random.default_rng(options.seed + 1000)
    return {f"r{i}": [int(t) for t in rng.integers(0, VOCAB, options.prompt_len + i)]
            for i in range(options.requests)}


def run(options: MLXOptions, tracer: Tracer, out: TextIO | None = None,
        force: ForceStream | None = None, capture: tuple[str, int] | None = None,
        capture_dir: str | None = None) -> dict[str, list[int]]:
    """Generate every request; return (and print to `out`) the generated ids per request.

    With `force` (teacher forcing, difftest.core.force) each request replays the forced
    stream, one verify per forced step. With `capture` (req, pos) the draft forwards of that
    step are captured module by module into `capture_dir`."""
    import mlx.core as mx

    generate = importlib.import_module("mlx_lm.generate")
    if force is not None and (options.draft_lens or options.mutation == "verify-width-path"):
        raise ForceMismatch("teacher forcing replays the forced arm's steps: drop --draft-lens "
                            "and the verify-width-path mutation")
    planted = Planted(options) if options.corpus_run else None
    target, draft = load_pair(options, planted.draft_forward if planted is not None else None)
    verifier: Any = target
    if planted is not None:
        planted.first = draft.model.layers[0].self_attn
        planted.layers = len(draft.model.layers)
        verifier = TargetProxy(target, planted)
    fault = options.planted()
    if fault is not None:
        from difftest.runners.mlx.faults import plant

        plant(draft, fault, options)
    settings: dict[str, object] = {
        **resolved_settings(target, draft), "attention_target": "sdpa",
        "attention_draft": options.attn, "k": options.k, "mutation": options.mutation,
        "seed": options.seed, "engine": f"mlx-lm-{importlib.import_module('mlx_lm').__version__}"}
    if fault is not None:  # keys only when in effect: a plain run prints what it always did
        settings["fault"] = fault.text
    if options.sliding_window:
        settings["sliding_window"] = options.sliding_window
    if options.draft_lens:
        settings["draft_lens"] = ",".join(map(str, options.draft_lens))
    if force is not None:
        settings["forced"] = True
    tracer.config(settings)
    hooks = MLXCapture(draft, tracer, capture, capture_dir) if capture else None
    generated: dict[str, list[int]] = {}
    try:
        for index, (req, prompt) in enumerate(prompts(options).items()):
            if planted is not None:
                planted.prompt_len = len(prompt)
            if force is not None:
                steps = force.requests.get(req)
                if steps is None:
                    raise ForceMismatch(f"the force file has no request {req}")
                try:
                    generated[req] = forced_generation(
                        target, draft, tracer, MLXTrace(req, capture=hooks), prompt, steps,
                        max_tokens=options.max_new_tokens, num_draft_tokens=options.k)
                except ValueError as exc:
                    raise ForceMismatch(str(exc)) from None
            elif options.draft_lens:
                record = MLXTrace(req, capture=hooks)
                generated[req] = cycled_generation(verifier, draft, tracer, record, prompt,
                                                   options, index)
            else:
                with traced_generation(tracer, req=req, capture=hooks) as record:
                    stream = generate.speculative_generate_step(
                        mx.array(prompt, dtype=mx.uint32), verifier, draft,
                        num_draft_tokens=options.k, max_tokens=options.max_new_tokens)
                    generated[req] = [int(token) for token, _, _ in stream]
            if planted is not None and force is None:
                planted.count(record)
            if out is not None:
                out.write(f"{req}: {' '.join(map(str, generated[req]))}\n")
                out.flush()
    finally:
        if hooks is not None:
            hooks.remove()
    if planted is not None and force is None:
        tracer.coverage(planted.coverage.fields())
    return generated
