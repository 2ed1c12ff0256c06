"""Trace mlx-lm's speculative decoding with a `difftest.emit.Tracer`.

```python
from difftest.adapters.mlx import traced_generation
from difftest.emit import Tracer

tracer = Tracer()                                   # VT_SPEC_TRACE decides the level
with traced_generation(tracer, req="r0"):
    for token, logprobs, from_draft in mlx_lm.generate.speculative_generate_step(
            prompt, model, draft_model, num_draft_tokens=4, max_tokens=16):
        ...
```

mlx-lm drafts token by token (`sequential`): `speculative_generate_step` asks the draft model for
`num_draft_tokens` tokens, one forward each, verifies them in one target forward and yields the
accepted drafts (`from_draft` true) and then the target's own token. It hands neither the
drafted ids past the first rejection nor the draft logits to its caller, so the context manager
replaces `mlx_lm.generate.speculative_generate_step` (also what `stream_generate` and `generate`
call with a `draft_model`) by a wrapper that sees the draft model's calls and the sampler's
choices, and closes a verify step when the target's token is yielded, or when the token budget
ends a step whose every draft was accepted (traced with `bonus=False`).

The draft model is wrapped in a proxy whose call remembers the last row of logits it returned;
the first sampler call after a draft call is that row's choice (mlx-lm samples every draft
forward once, and the target's verify is never preceded by a draft call without a sample
between). The drafted ids traced are therefore the ids mlx-lm really drafted, and the logits
the raw draft logits of those rows. Only public names of mlx-lm 0.32 are used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from difftest.emit import Tracer
from difftest.core.kinds import DraftingKind

__all__ = ["MLXStep", "MLXTrace", "resolved_settings", "traced_generation", "traced_steps"]

GENERATE_MODULE = "mlx_lm.generate"
HOOKED = "speculative_generate_step"


@dataclass(frozen=True)
class MLXStep:
    """One verify as the hook saw it (kept for callers and tests; the tracer printed it)."""

    pos: int
    drafted: tuple[int, ...]
    emitted: tuple[int, ...]


@dataclass
class MLXTrace:
    """What one traced generation did: every verify step, in order."""

    req: str
    drafting: DraftingKind = DraftingKind.SEQUENTIAL
    steps: list[MLXStep] = field(default_factory=list)


def dtype_name(model: Any) -> str:
    """The dtype of a model's floating parameters (`float32`, `bfloat16`...), read back from
    the arrays themselves; `mixed` when they disagree."""
    from mlx.utils import tree_flatten

    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    names = {str(value.dtype).removeprefix("mlx.core.") for _, value in params
             if hasattr(value, "dtype")}
    floats = {n for n in names if n.startswith(("float", "bfloat"))}
    if not floats:
        return "unknown"
    return floats.pop() if len(floats) == 1 else "mixed"


def resolved_settings(target: Any, draft: Any) -> dict[str, object]:
    """`[spec-config]` settings read back from the loaded models (pass to `Tracer.config`)."""
    return {"dtype_target": dtype_name(target), "dtype_draft": dtype_name(draft)}


class _DraftProxy:
    """Stands in for the draft model: forwards everything, remembers its last logits row."""

    def __init__(self, model: Any, seen: _Seen) -> None:
        self._model = model
        self._seen = seen

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        logits = self._model(*args, **kwargs)
        self._seen.last_row = logits[0, -1, :]
        return logits

    def __getattr__(self, name: str) -> Any:  # layers, make_cache, ... of the real model
        return getattr(self._model, name)


class _Seen:
    """Draft rows in the order mlx-lm sampled them: (id, logits row)."""

    def __init__(self) -> None:
        self.last_row: Any = None
        self.drafts: list[tuple[int, Any]] = []

    def sampler(self, inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def sample(logprobs: Any) -> Any:
            chosen = inner(logprobs)
            if self.last_row is not None:  # the sample of the draft forward just made
                self.drafts.append((int(chosen.reshape(-1)[0].item()), self.last_row))
                self.last_row = None
            return chosen
        return sample


def traced_steps(tracer: Tracer, record: MLXTrace, inner: Callable[..., Iterator[Any]],
                 prompt: Any, model: Any, draft_model: Any, *args: Any,
                 **kwargs: Any) -> Iterator[Any]:
    """`inner(prompt, model, draft_model, ...)` (mlx-lm's speculative_generate_step) with every
    verify traced as request `record.req` and kept in `record`; yields what `inner` yields."""
    import mlx.core as mx

    sample_utils = importlib.import_module("mlx_lm.sample_utils")
    req = record.req
    tracer.declare(DraftingKind.SEQUENTIAL)
    seen = _Seen()
    kwargs["sampler"] = seen.sampler(kwargs.get("sampler") or sample_utils.greedy_sampler)
    pos = int(prompt.size)
    emitted: list[int] = []
    max_tokens = int(kwargs.get("max_tokens", 256))
    produced = 0

    def close(bonus: bool) -> None:
        nonlocal pos, emitted
        # every draft sampled since the last verify is this verify's: mlx-lm drafts the whole
        # block, verifies it, and yields its tokens before it drafts again
        ids = [i for i, _ in seen.drafts]
        logits = None
        if ids and tracer.wants_logits:
            logits = mx.stack([row for _, row in seen.drafts])  # its own dtype: emit reads it
        seen.drafts = []
        tracer.step(req, pos, ids, emitted, logits=logits, bonus=bonus)
        record.steps.append(MLXStep(pos, tuple(ids), tuple(emitted)))
        pos += len(emitted)
        emitted = []

    for item in inner(prompt, model, _DraftProxy(draft_model, seen), *args, **kwargs):
        token, _, from_draft = item
        emitted.append(int(token))
        produced += 1
        if not from_draft:
            close(bonus=True)
        elif produced == max_tokens:  # the budget ended a verify whose drafts were all taken
            close(bonus=False)
        yield item


@contextmanager
def traced_generation(tracer: Tracer, req: str = "r0") -> Iterator[MLXTrace]:
    """Trace every `speculative_generate_step` started inside the block as request `req`."""
    module = importlib.import_module(GENERATE_MODULE)
    original = getattr(module, HOOKED)
    record = MLXTrace(req=req)

    def hooked(prompt: Any, model: Any, draft_model: Any, *args: Any, **kwargs: Any
               ) -> Iterator[Any]:
        return traced_steps(tracer, record, original, prompt, model, draft_model, *args,
                            **kwargs)

    setattr(module, HOOKED, hooked)
    try:
        yield record
    finally:
        setattr(module, HOOKED, original)
