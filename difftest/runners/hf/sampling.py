"""Sampled decoding with transformers: speculative sampling (`generate(..., assistant_model=...,
do_sample=True)`) or the target alone (`--no-spec`), traced.

transformers' assisted decoding with `do_sample=True` is speculative sampling: the assistant
draws each draft from its processed scores (temperature, top-p), the target tests draft x with
probability min(1, p(x)/q(x)) and, at the first rejection, draws from the normalised residual
max(0, p - q) (`_speculative_sampling`). The adapter reads p and q back from the very tensors
that test used and prints them as `[spec-sample]` lines. Every draw comes from torch's global
generator, seeded once per run with the sampler seed (`--sample-seed`, or a fresh one from the
OS). Each prompt is decoded `samples` times, as requests `r0~0`, `r0~1`, ..., each draw a
`generate` call of `max_new_tokens` tokens (transformers emits exactly that many: the
`max_tokens` budget in `[spec-config]`). The target alone traces one `k=0` step per token.
"""

from __future__ import annotations

import os
from typing import Any, TextIO

import torch

from difftest.adapters.hf import resolved_settings, traced_generation
from difftest.core.kinds import DraftingKind
from difftest.emit import Tracer
from difftest.runners.hf.models import load_pair, prepare_draft, prompts
from difftest.runners.hf.options import HFOptions
from difftest.runners.hf.wrong_verify import wrong_verify


def sample_seed(options: HFOptions) -> int:
    """The run's sampler seed: the one given, or 63 bits from the OS (a fresh draw per run)."""
    if options.sample_seed is not None:
        return options.sample_seed
    return int.from_bytes(os.urandom(8), "little") >> 1


def request_names(options: HFOptions, prompt: str) -> list[str]:
    """`r0` when a run draws once per prompt, else `r0~0`, `r0~1`, ...: draw J of prompt r0."""
    if options.samples == 1:
        return [prompt]
    return [f"{prompt}~{j}" for j in range(options.samples)]


def sampling_kwargs(options: HFOptions) -> dict[str, object]:
    """`generate`'s sampling arguments: temperature and top-p only (transformers' default top-k
    of 50 switched off, so the law is the one [spec-config] states). With the
    temperature-draft-only (top-p-draft-only) mutation the target verifies at temperature 1
    (top-p 1); `draft_overrides` gives the draft the stated one."""
    if options.temperature is None:
        return {"do_sample": False}
    wrong = draft_overrides(options)
    temperature = 1.0 if "temperature" in wrong else options.temperature
    top_p = 1.0 if "top_p" in wrong else options.top_p
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}


def draft_overrides(options: HFOptions) -> dict[str, object]:
    """What the assistant samples with that the target does not: its temperature
    (temperature-draft-only) or its top-p (top-p-draft-only), the stated one, while the target
    verifies at 1. Empty for every other run."""
    if options.mutation == "temperature-draft-only":
        return {"temperature": options.temperature}
    if options.mutation == "top-p-draft-only":
        return {"top_p": options.top_p}
    return {}


def run_sampled(options: HFOptions, tracer: Tracer, out: TextIO | None = None,
                pair: tuple[Any, Any] | None = None) -> dict[str, list[int]]:
    """Decode every prompt `samples` times; return (and print to `out`) the ids per request.
    `pair`: the (target, draft) `load_pair(options)` returns, built once for many runs (a
    measurement's trials); by default built here."""
    torch.set_num_threads(options.threads)
    target, draft = pair if pair is not None else load_pair(options)
    fault = prepare_draft(options, draft)
    extra: dict[str, object] = {}
    if not options.no_spec:
        extra["assistant_model"] = draft
        if options.drafter == "dflash":
            extra["speculation_type"] = "dflash"
    seed = sample_seed(options)
    settings: dict[str, object] = {**resolved_settings(target, draft), "drafter": options.drafter,
                                   "k": 0 if options.no_spec else options.k,
                                   "schedule": options.schedule, "confidence": options.confidence,
                                   "mutation": options.mutation,
                                   "threads": torch.get_num_threads(), "seed": options.seed,
                                   "spec": "off" if options.no_spec else "on",
                                   "temperature": "greedy" if options.temperature is None
                                   else f"{options.temperature:g}",
                                   "top_p": f"{options.top_p:g}", "sample_seed": seed,
                                   "samples": options.samples,
                                   "max_tokens": options.max_new_tokens}
    if fault is not None:
        settings["fault"] = fault.text
    tracer.config(settings)
    if options.no_spec:  # the pair's drafting kind, as a speculative run of it declares it
        tracer.declare(DraftingKind.BLOCK if options.drafter == "dflash"
                       else DraftingKind.SEQUENTIAL)
    generated: dict[str, list[int]] = {}
    vocab = int(target.get_output_embeddings().weight.shape[0])
    torch.manual_seed(seed)  # after the models are built: every draw of the run from here
    with torch.no_grad(), wrong_verify(options.mutation):
        for prompt_name, prompt in prompts(options, vocab).items():
            ids = torch.tensor([prompt], dtype=torch.long)
            for name in request_names(options, prompt_name):
                kwargs = dict(attention_mask=torch.ones_like(ids),
                              max_new_tokens=options.max_new_tokens, **sampling_kwargs(options),
                              **extra)
                if options.no_spec:
                    result = target.generate(ids, **kwargs)
                    tokens = result[0, len(prompt):].tolist()
                    for i, tok in enumerate(tokens):  # one target forward per token
                        tracer.step(name, len(prompt) + i, [], [tok])
                else:
                    with traced_generation(tracer, req=name,
                                           sampled=options.temperature is not None,
                                           draft_config=draft_overrides(options)):
                        result = target.generate(ids, **kwargs)
                    tokens = result[0, len(prompt):].tolist()
                generated[name] = tokens
                if out is not None:
                    out.write(f"{name}: {' '.join(map(str, tokens))}\n")
                    out.flush()
    return generated
