"""The bug corpus's classes that live in the mlx runner (difftest.core.corpus), and the
counters of its `[spec-coverage]` line.

`sliding-window-edge` reads the draft's --sliding-window one key too wide (models.attention_mask);
`verify-width-path` gives the target's verify of width 3 the rows of the next offsets (a kernel
path taken at one width); `broken-mask` drops the draft's causal mask; the control
`control-explicit-mask` hands the draft's fused sdpa its causal mask as an array. --draft-lens
sets the draft length of each verify (`cycled_generation`: one mlx-lm call per verify on the
request's caches), so that inputs reach the widths. `fired` counts the forwards a planted bug
changed, so a run can say that its bug never acted.
"""

from __future__ import annotations

import importlib
from typing import Any

from difftest.adapters.mlx import GENERATE_MODULE, HOOKED, MLXTrace, traced_steps
from difftest.core.corpus import StepCoverage, cycled_len, width_path_broken
from difftest.emit import Tracer
from difftest.runners.mlx.options import MLXOptions


class Planted:
    """One run's corpus state: the counters, and the request whose verifies the target sees."""

    def __init__(self, options: MLXOptions) -> None:
        self.options = options
        self.coverage = StepCoverage()
        self.first: Any = None  # the draft's first attention module: counted once a forward
        self.layers = 0  # the draft's
        self.prompt_len = 0  # the request being generated: its prompt's length

    def draft_forward(self, module: Any, q_len: int, k_len: int) -> None:
        """A draft attention forward (models.draft_attention_class): on its first layer, whether
        the window left a key out, and whether a planted mask bug changed this one."""
        if module is not self.first:
            return
        # mlx-lm's prefill leaves the prompt's last id to the first draft step: its rows are
        # not sampled
        self.coverage.draft_forward(self.options.mutation, self.options.sliding_window, q_len,
                                    k_len, layers=self.layers,
                                    last_sampled=k_len >= self.prompt_len)

    def count(self, record: MLXTrace) -> None:
        """A request's verifies, as traced, into the counters (a step the token budget cut
        emitted every draft and no token of the target's own)."""
        for step in record.steps:
            bonus = list(step.emitted) != list(step.drafted) or not step.drafted
            self.coverage.verified(len(step.drafted), len(step.emitted) - bonus)


class TargetProxy:
    """Stands in for the target: a verify of the broken width under `verify-width-path` returns
    each row's logits from the next row (the last keeps its own). A verify is a call on a cache
    that holds the prompt already (the prefill fills it up to the prompt's last id)."""

    def __init__(self, model: Any, planted: Planted) -> None:
        self._model = model
        self._planted = planted

    def __call__(self, inputs: Any, cache: Any = None, **kwargs: Any) -> Any:
        import mlx.core as mx

        logits = self._model(inputs, cache=cache, **kwargs)
        planted = self._planted
        offset = int(cache[0].offset) if cache else 0
        width = int(inputs.shape[1])
        if (offset + width < planted.prompt_len
                or not width_path_broken(planted.options.mutation, width)):
            return logits
        planted.coverage.fired += 1
        return mx.concatenate([logits[:, :-width], logits[:, -width + 1:], logits[:, -1:]],
                              axis=1)

    def __getattr__(self, name: str) -> Any:  # layers, ... of the real model
        return getattr(self._model, name)


def cycled_generation(target: Any, draft: Any, tracer: Tracer, record: MLXTrace,
                      prompt: list[int], options: MLXOptions, index: int) -> list[int]:
    """Request `index` with the draft length of each verify taken from --draft-lens: one
    mlx-lm `speculative_generate_step` per verify, each continuing on the request's caches
    (stopped after its verify, which rewinds them to the committed tokens). A verify that took
    every draft leaves its last draft out of the draft's cache (mlx-lm feeds it with the next
    step's first forward); it is fed here before the next call. Returns the generated ids."""
    import mlx.core as mx

    inner = getattr(importlib.import_module(GENERATE_MODULE), HOOKED)
    caches = importlib.import_module("mlx_lm.models.cache")
    model_cache = caches.make_prompt_cache(target)
    draft_cache = caches.make_prompt_cache(draft)
    context, pending = list(prompt), list(prompt)
    step = 0
    while len(context) - len(prompt) < options.max_new_tokens:
        k = cycled_len(options.draft_lens, options.k, step, index)
        before = len(record.steps)
        record.start = len(context)
        stream = traced_steps(tracer, record, inner, mx.array(pending, dtype=mx.uint32), target,
                              draft, num_draft_tokens=k,
                              max_tokens=options.max_new_tokens - (len(context) - len(prompt)),
                              prompt_cache=model_cache + draft_cache)
        for _ in stream:
            if len(record.steps) > before:
                break
        stream.close()
        done = record.steps[-1]
        context.extend(done.emitted)
        pending = [done.emitted[-1]]
        if done.drafted and len(done.emitted) == len(done.drafted) + 1:  # every draft taken
            draft(mx.array([[done.drafted[-1]]], dtype=mx.uint32), cache=draft_cache)
        left = options.max_new_tokens - (len(context) - len(prompt))
        if left > 0 and model_cache[0].offset != len(context) - 1:  # pragma: no cover
            raise RuntimeError(f"request {record.req}: the target's cache holds "
                               f"{model_cache[0].offset} ids after a verify, not "
                               f"{len(context) - 1}")
        step += 1
    return context[len(prompt):]
