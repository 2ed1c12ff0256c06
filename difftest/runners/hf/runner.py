"""Greedy speculative generation per request, traced through `difftest.adapters.hf`."""

from __future__ import annotations

from typing import TextIO
from collections.abc import Callable

import torch

from difftest.adapters.hf import (ActivationCapture, forced_generation, resolved_settings,
                                  traced_generation)
from difftest.emit import Tracer
from difftest.core.force import ForceStream
from difftest.runners.hf.corpus import Planted
from difftest.runners.hf.models import load_pair, prepare_draft, prompts
from difftest.runners.hf.options import HFOptions


class ForceMismatch(Exception):
    """The force file does not fit this run's prompts (another run's, or another prompt set)."""


def run(options: HFOptions, tracer: Tracer, out: TextIO | None = None,
        progress: Callable[[str], None] | None = None, force: ForceStream | None = None,
        capture: tuple[str, int] | None = None, capture_dir: str | None = None
        ) -> dict[str, list[int]]:
    """Generate every request; return (and print to `out`) the generated ids per request.

    With `force` (teacher forcing, difftest.core.force) each request replays the forced stream:
    assisted drafting only (DFlash drafts from the target's hidden states of the previous
    verify, which a fresh forced step does not have). With `capture` (req, pos) the draft
    forward of that step is captured module by module into `capture_dir`. Sampled options (a
    temperature, or `no_spec`) run difftest.runners.hf.sampling's loop; forcing and capture
    replay greedy decoding only."""
    if options.sampled:
        if force is not None or capture is not None:
            raise ForceMismatch("teacher forcing and capture replay greedy decoding; drop "
                                "--temperature and --no-spec")
        from difftest.runners.hf.sampling import run_sampled

        return run_sampled(options, tracer, out)
    torch.set_num_threads(options.threads)
    if force is not None and options.drafter != "assisted":
        raise ForceMismatch("teacher forcing needs --drafter assisted")
    if force is not None and (options.draft_lens or options.mutation == "verify-width-path"):
        raise ForceMismatch("teacher forcing replays the forced arm's steps: drop --draft-lens "
                            "and the verify-width-path mutation")
    planted = Planted(options) if options.corpus_run else None
    target, draft = load_pair(options, planted.draft_forward if planted is not None else None)
    if planted is not None:
        target.register_forward_hook(planted.target_output)
        planted.layers = int(draft.config.num_hidden_layers)
    fault = prepare_draft(options, draft)
    extra = {"speculation_type": "dflash"} if options.drafter == "dflash" else {}
    settings: dict[str, object] = {**resolved_settings(target, draft), "drafter": options.drafter,
                                   "k": options.k, "schedule": options.schedule,
                                   "confidence": options.confidence, "mutation": options.mutation,
                                   "threads": torch.get_num_threads(), "seed": options.seed}
    if fault is not None:  # keys only when in effect: a plain run prints what it always did
        settings["fault"] = fault.text
    if options.sliding_window:
        settings["sliding_window"] = options.sliding_window
    if options.draft_lens:
        settings["draft_lens"] = ",".join(map(str, options.draft_lens))
    if force is not None:
        settings["forced"] = True
        if any(step.drafts for steps in force.requests.values() for step in steps):
            settings["forced_drafts"] = True  # each row on the forced arm's drafted tokens
    tracer.config(settings)
    hooks = ActivationCapture(draft, tracer, capture, capture_dir) if capture else None
    generated: dict[str, list[int]] = {}
    vocab = int(target.get_output_embeddings().weight.shape[0])
    try:
        with torch.no_grad():
            for index, (req, prompt) in enumerate(prompts(options, vocab).items()):
                if planted is not None:
                    planted.request(index)
                if force is not None:
                    steps = force.requests.get(req)
                    if steps is None:
                        raise ForceMismatch(f"the force file has no request {req}")
                    try:
                        generated[req] = forced_generation(
                            target, draft, tracer, req, prompt, steps,
                            max_length=len(prompt) + options.max_new_tokens, capture=hooks)
                    except ValueError as exc:
                        raise ForceMismatch(str(exc)) from None
                else:
                    ids = torch.tensor([prompt], dtype=torch.long)
                    with traced_generation(tracer, req=req, capture=hooks, on_generator=(
                            planted.generator if planted is not None else None)) as record:
                        result = target.generate(
                            ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                            do_sample=False, max_new_tokens=options.max_new_tokens, **extra)
                    generated[req] = result[0, len(prompt):].tolist()
                    if planted is not None:
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
