"""Greedy speculative generation per request on llama.cpp, traced through
`difftest.adapters.llamacpp`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from difftest.adapters.llamacpp import (ContextSettings, LlamaCppModel, Speculation, Taps,
                                        cpu_features, speculative_generate)
from difftest.core.force import ForceStream
from difftest.emit import Tracer
from difftest.runners.llamacpp.models import ROPE_BASE, VOCAB, model_pair
from difftest.runners.llamacpp.options import LlamaCppOptions


class ForceMismatch(Exception):
    """The force file does not fit this run's prompts (another run's, or another prompt set)."""


def prompts(options: LlamaCppOptions) -> dict[str, list[int]]:
    """Seeded prompts; request i gets prompt_len + i ids, so requests differ in length too."""
    import numpy as np

    rng = np.random.default_rng(options.seed + 1000)
    return {f"r{i}": [int(t) for t in rng.integers(0, VOCAB, options.prompt_len + i)]
            for i in range(options.requests)}


def mutated_position(options: LlamaCppOptions) -> int:
    """The prompt position the KV mutations touch (inside every prompt, never its last)."""
    return options.prompt_len // 2


def _mutation_hook(options: LlamaCppOptions) -> Callable[[LlamaCppModel, int, int], None] | None:
    """After the draft's decode calls: once per request, as soon as the cache holds a position
    past it, remove (`skip-position`) or re-rotate (`corrupt-kv`) the draft's cell at the
    mutated position. llama.cpp wants each decode to continue from the cache's last position,
    so the cell is touched only once a later one exists."""
    if options.mutation not in ("skip-position", "corrupt-kv"):
        return None
    where = mutated_position(options)
    state = {"done": False}

    def hook(model: LlamaCppModel, p0: int, p1: int) -> None:
        if p0 == 0:
            state["done"] = False  # a new request's prefill
        if state["done"] or len(model.held) - 1 <= where:
            return
        if options.mutation == "skip-position":
            model.drop_cell(where)
        else:
            model.shift_cell(where, -1)
        state["done"] = True

    return hook


def run(options: LlamaCppOptions, tracer: Tracer, out: TextIO | None = None,
        force: ForceStream | None = None, capture: tuple[str, int] | None = None,
        capture_dir: str | None = None, side: TextIO | None = None) -> dict[str, list[int]]:
    """Generate every request; return (and print to `out`) the generated ids per request.
    `side`: where the other model's logits lines go (default: stderr, the trace stream)."""
    pair = model_pair(options.seed, options.cache_dir)
    common = dict(n_ctx=options.n_ctx, n_batch=options.n_batch, n_ubatch=options.n_ubatch,
                  n_threads=options.threads, kv_type=options.kv_type,
                  flash_attn=options.flash_attn == "on")
    target = LlamaCppModel(pair.target, ContextSettings(**common))  # type: ignore[arg-type]
    rope = ROPE_BASE * 10 if options.mutation == "rope-base" else 0.0
    draft = LlamaCppModel(pair.draft, ContextSettings(**common, rope_freq_base=rope),  # type: ignore[arg-type]
                          hook=_mutation_hook(options))
    try:
        return _generate(options, tracer, (target, draft), (out, side), force,
                         (capture, capture_dir))
    finally:
        draft.close()
        target.close()


def _generate(options: LlamaCppOptions, tracer: Tracer,
              pair: tuple[LlamaCppModel, LlamaCppModel], outs: tuple[TextIO | None, TextIO | None],
              force: ForceStream | None, capture_at: tuple[tuple[str, int] | None, str | None]
              ) -> dict[str, list[int]]:
    import llama_cpp

    target, draft = pair
    out, side = outs
    capture, capture_dir = capture_at
    settings: dict[str, object] = {**target.applied(), **draft.applied("draft"),
                                   "verify": options.verify, "logits": options.logits,
                                   "k": options.k, "mutation": options.mutation,
                                   "seed": options.seed, "cpu_features": cpu_features(),
                                   "llama_cpp_python": llama_cpp.__version__}
    if force is not None:
        settings["forced"] = True
    tracer.config(settings)
    grab = _capture(tracer, capture, capture_dir) if capture is not None else None
    spec = Speculation(max_new_tokens=options.max_new_tokens, k=options.k,
                       verify=options.verify, logits=options.logits)
    taps = Taps(side=side, capture=grab)
    generated: dict[str, list[int]] = {}
    for req, prompt in prompts(options).items():
        steps = None
        if force is not None:
            steps = force.requests.get(req)
            if steps is None:
                raise ForceMismatch(f"the force file has no request {req}")
        try:
            generated[req] = speculative_generate(
                target, draft, tracer, req, prompt, spec, forced=steps, taps=taps)
        except ValueError as exc:
            if force is None:
                raise
            raise ForceMismatch(str(exc)) from None
        if out is not None:
            out.write(f"{req}: {' '.join(map(str, generated[req]))}\n")
            out.flush()
    return generated


def _capture(tracer: Tracer, at: tuple[str, int], folder: str | None
             ) -> Callable[[str, int, Any], None]:
    """At step `at` only, hand each draft logits row to `Tracer.activation` as `dJ.logits`
    (llama-cpp-python exposes no module outputs: logits are all a capture holds)."""
    used = {"bytes": 0}

    def grab(req: str, pos: int, rows: Any) -> None:
        if (req, pos) != at:
            return
        for j in range(rows.shape[0]):
            used["bytes"] = tracer.activation(req, pos, j, f"d{j}.logits", rows[j:j + 1],
                                              folder, used["bytes"])

    return grab
