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
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from difftest.emit import Tracer
from difftest.core.kinds import DraftingKind

__all__ = ["MLXCapture", "MLXStep", "MLXTrace", "forced_generation", "resolved_settings",
           "traced_generation", "traced_steps"]

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
    # records the draft forwards of its step module by module (None: no capture)
    capture: MLXCapture | None = None
    # the request's token count before the next traced call (None: the prompt's size; a caller
    # that continues a request on its `prompt_cache` sets the count so far)
    start: int | None = None


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


def wrap_call(module: Any, after: Callable[[Any], Any]) -> None:
    """Make `module(...)` return `after(output)`: its class becomes a subclass whose `__call__`
    passes the output through (mlx modules have no forward hooks). `unwrap_call` undoes it."""
    base = type(module)

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        return after(base.__call__(self, *args, **kwargs))

    module.__class__ = type(base.__name__, (base,), {"__call__": __call__, "_difftest_base": base})


def unwrap_call(module: Any) -> None:
    base = type(module).__dict__.get("_difftest_base")
    if base is not None:
        module.__class__ = base


def _first_array(output: Any) -> Any:
    if isinstance(output, (tuple, list)):
        return output[0] if output else None
    return output if hasattr(output, "shape") and hasattr(output, "dtype") else None


class MLXCapture:
    """Every submodule of a draft model wrapped (`wrap_call`), recording only while armed: at
    the step `at` = (req, pos), each module's output as its call returns (forward order, each of
    the step's draft forwards prefixed `dJ.`), through `Tracer.activation` (a `[spec-act]`
    line, and `NNN-dJ.MODULE.npy` in `folder`). The mlx counterpart of the hf adapter's
    ActivationCapture; `remove()` restores the modules."""

    def __init__(self, model: Any, tracer: Tracer, at: tuple[str, int],
                 folder: str | None = None) -> None:
        self.tracer = tracer
        self.at = at
        self.folder = folder
        self.armed_at: tuple[str, int] | None = None
        self.index = 0
        self.used = 0
        self.forward = -1
        self.done = False
        self.modules = [module for name, module in model.named_modules() if name]
        for name, module in model.named_modules():
            if name:
                wrap_call(module, self._recorder(name))

    def arm(self, req: str, pos: int) -> bool:
        """Start recording if (req, pos) is the captured step (once: a later visit is not)."""
        if self.done or (req, pos) != self.at:
            return self.armed_at is not None
        self.armed_at = (req, pos)
        return True

    def disarm(self) -> None:
        if self.armed_at is not None:
            self.armed_at = None
            self.done = True

    def _recorder(self, name: str) -> Callable[[Any], Any]:
        def record(output: Any) -> Any:
            array = _first_array(output) if self.armed_at is not None else None
            if array is not None:
                import mlx.core as mx
                import numpy as np

                req, pos = self.armed_at  # type: ignore[misc]  # armed: set
                values = np.array(array.astype(mx.float32))
                self.used = self.tracer.activation(req, pos, self.index,
                                                   f"d{max(self.forward, 0)}.{name}", values,
                                                   self.folder, self.used)
                self.index += 1
            return output
        return record

    def remove(self) -> None:
        for module in self.modules:
            unwrap_call(module)
        self.modules = []


class _DraftProxy:
    """Stands in for the draft model: forwards everything, remembers its last logits row, and
    counts the captured step's draft forwards."""

    def __init__(self, model: Any, seen: _Seen) -> None:
        self._model = model
        self._seen = seen

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        capture = self._seen.capture
        if capture is not None and capture.arm(self._seen.req, self._seen.pos):
            capture.forward += 1
        logits = self._model(*args, **kwargs)
        self._seen.last_row = logits[0, -1, :]
        return logits

    def __getattr__(self, name: str) -> Any:  # layers, make_cache, ... of the real model
        return getattr(self._model, name)


class _Seen:
    """Draft rows in the order mlx-lm sampled them: (id, logits row)."""

    def __init__(self, req: str = "", pos: int = 0, capture: MLXCapture | None = None) -> None:
        self.last_row: Any = None
        self.drafts: list[tuple[int, Any]] = []
        self.req, self.pos, self.capture = req, pos, capture  # the step the drafts are for

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
                 **kwargs: Any) -> Generator[Any, None, None]:
    """`inner(prompt, model, draft_model, ...)` (mlx-lm's speculative_generate_step) with every
    verify traced as request `record.req` and kept in `record`; yields what `inner` yields.
    With `record.capture`, the draft forwards of its step are recorded module by module.
    `record.start`: the request's token count before the first step (None: the prompt's
    size)."""
    import mlx.core as mx

    capture = record.capture

    sample_utils = importlib.import_module("mlx_lm.sample_utils")
    req = record.req
    tracer.declare(DraftingKind.SEQUENTIAL)
    pos = int(prompt.size) if record.start is None else record.start
    seen = _Seen(req, pos, capture)
    kwargs["sampler"] = seen.sampler(kwargs.get("sampler") or sample_utils.greedy_sampler)
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
        if capture is not None:
            capture.disarm()  # the captured step's forwards are done (a no-op elsewhere)
        pos += len(emitted)
        seen.pos = pos
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
def traced_generation(tracer: Tracer, req: str = "r0",
                      capture: MLXCapture | None = None) -> Iterator[MLXTrace]:
    """Trace every `speculative_generate_step` started inside the block as request `req` (with
    `capture`, its step's draft forwards recorded module by module)."""
    module = importlib.import_module(GENERATE_MODULE)
    original = getattr(module, HOOKED)
    record = MLXTrace(req=req, capture=capture)

    def hooked(prompt: Any, model: Any, draft_model: Any, *args: Any, **kwargs: Any
               ) -> Iterator[Any]:
        return traced_steps(tracer, record, original, prompt, model, draft_model, *args,
                            **kwargs)

    setattr(module, HOOKED, hooked)
    try:
        yield record
    finally:
        setattr(module, HOOKED, original)


def forced_generation(target: Any, draft: Any, tracer: Tracer, record: MLXTrace,
                      prompt: list[int], steps: Any, max_tokens: int,
                      num_draft_tokens: int) -> list[int]:
    """Replay a committed stream (`steps`: difftest.core.force.ForcedStep in order) of request
    `record.req` on the pair, its verifies kept in `record` (with `record.capture`, the captured
    step's draft forwards recorded):
    per step, one verify of mlx-lm's `speculative_generate_step` from the forced context
    (traced as what this pair would have accepted, with the budget a free run would have
    left), then that step's tokens committed and a `[spec-forced]` line printed. Returns the
    committed ids (the prompt excluded). A step not at the context's end raises ValueError.

    Each step is a fresh call, its caches prefilled from the forced context: the draft sees the
    forced tokens, not its own, but a replay of a free run's own stream is not that run to the
    bit (a free run extends its caches a step at a time). Both arms of a localisation are forced
    alike. The drafts of the other arm are not drafted along (no `forced_drafts`)."""
    import mlx.core as mx

    inner = getattr(importlib.import_module(GENERATE_MODULE), HOOKED)
    req = record.req
    context = list(prompt)
    for step in steps:
        if step.pos != len(context):
            raise ValueError(f"the force file has no step of request {req} at position "
                             f"{len(context)} (next forced step is at {step.pos})")
        left = max_tokens - (len(context) - len(prompt))
        if left < 1:
            raise ValueError(f"request {req}: the force file goes on past the token budget "
                             f"({max_tokens}) at position {step.pos}")
        before = len(record.steps)
        stream = traced_steps(tracer, record, inner, mx.array(context, dtype=mx.uint32), target,
                              draft, num_draft_tokens=num_draft_tokens, max_tokens=left)
        for _ in stream:
            if len(record.steps) > before:
                break
        stream.close()
        if len(record.steps) != before + 1:
            raise ValueError(f"request {req} at position {step.pos}: mlx-lm verified "
                             f"{len(record.steps) - before} times, expected once")
        tracer.forced(req, step.pos, list(step.tokens))
        context.extend(step.tokens)
    return context[len(prompt):]
