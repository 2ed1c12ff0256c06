"""Trace Hugging Face transformers' speculative decoding with a `difftest.emit.Tracer`.

```python
from difftest.adapters.hf import traced_generation
from difftest.emit import Tracer

tracer = Tracer()                                   # VT_SPEC_TRACE decides the level
with traced_generation(tracer, req="r0"):
    model.generate(ids, assistant_model=draft, do_sample=False)
```

transformers drives every speculative method through one loop (`_assisted_decoding`): a
candidate generator proposes (`get_candidates`), the target verifies, and the generator hears
the outcome (`update_candidate_strategy`) once per verify, also when it proposed nothing. The
context manager wraps the generator that loop builds, so every kind is traced the same way:
assisted generation (`AssistedCandidateGenerator`: a small model drafting token by token,
`sequential`) and DFlash (`DFlashTokenCandidateGenerator`: one forward per block, `block`).
transformers returns no candidates (k = 0) on DFlash's first step and wherever the token
budget leaves no room to draft; those steps are traced as `k=0` verifies.

The one private name this relies on is `GenerationMixin._get_candidate_generator`, present
from transformers 5.0 through the versions the `difftest[hf]` extra admits.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterator

from difftest.emit import Tracer
from difftest.kinds import DraftingKind

__all__ = ["HFStep", "HFTrace", "drafting_kind_of", "resolved_settings", "traced_generation"]

# Generators whose rows come from one forward pass; everything else drafts row by row.
_BLOCK_GENERATORS = ("DFlashTokenCandidateGenerator",)


def drafting_kind_of(generator: object) -> DraftingKind:
    """`block` for DFlash's one-forward drafter, `sequential` for the others (assisted, MTP, ...)."""
    names = {cls.__name__ for cls in type(generator).__mro__}
    return DraftingKind.BLOCK if names & set(_BLOCK_GENERATORS) else DraftingKind.SEQUENTIAL


def _dtype_of(model: Any) -> str:
    dtype = getattr(model, "dtype", None)
    if dtype is None:
        dtype = next(model.parameters()).dtype
    return str(dtype).removeprefix("torch.")


def _attention_of(model: Any) -> str:
    """The attention implementation transformers resolved for the model (what it runs, after
    any fallback), not the one it was asked for."""
    value = getattr(model.config, "_attn_implementation", None)
    return str(value) if value else "unknown"


def resolved_settings(target: Any, draft: Any) -> dict[str, object]:
    """`[spec-config]` settings read back from a loaded target and draft model: the attention
    implementation and dtype transformers really uses for each (pass to `Tracer.config`)."""
    return {"attention_target": _attention_of(target), "attention_draft": _attention_of(draft),
            "dtype_target": _dtype_of(target), "dtype_draft": _dtype_of(draft)}


@dataclass(frozen=True)
class HFStep:
    """One verify as the hook saw it (kept for callers and tests; the tracer printed it)."""

    pos: int
    drafted: tuple[int, ...]
    emitted: tuple[int, ...]


@dataclass
class HFTrace:
    """What one traced generation did: its generator's kind and every verify step."""

    req: str
    generator: str = ""
    drafting: DraftingKind | None = None
    steps: list[HFStep] = field(default_factory=list)


def cut_at_stop(drafted: list[int], emitted: list[int], logits: Any) -> tuple[list[int], Any]:
    """A verify that a stopping criterion cut short (max length, EOS) emits only drafts: every
    emitted token is a draft the target accepted, and the step ends without a token of its own.
    A trace step always ends with one (its `acc` is one less than what it emitted), so the last
    emitted draft is traced as that token and the rows past it, which the stop made moot, are
    left out of the step (their logits with them)."""
    if not emitted or len(emitted) > len(drafted) or drafted[:len(emitted)] != emitted:
        return drafted, logits
    keep = len(emitted) - 1
    return drafted[:keep], (logits[:keep] if logits is not None else None)


class _Hook:
    """Wraps one candidate generator instance: remembers the proposal, traces the outcome."""

    def __init__(self, generator: Any, tracer: Tracer, record: HFTrace) -> None:
        self.tracer = tracer
        self.record = record
        self.pending: tuple[int, list[int], Any] | None = None
        self.inner_get: Callable[..., Any] = generator.get_candidates
        self.inner_update: Callable[..., Any] = generator.update_candidate_strategy
        generator.get_candidates = self.get_candidates
        generator.update_candidate_strategy = self.update_candidate_strategy

    def get_candidates(self, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        candidate_ids, candidate_logits = self.inner_get(input_ids, *args, **kwargs)
        cur_len = int(input_ids.shape[-1])
        drafted = candidate_ids[0, cur_len:].tolist()
        logits = None
        if candidate_logits is not None and drafted and self.tracer.wants_logits:
            logits = candidate_logits[0, : len(drafted)]
        self.pending = (cur_len, drafted, logits)
        return candidate_ids, candidate_logits

    def update_candidate_strategy(self, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if self.pending is not None:
            cur_len, drafted, logits = self.pending
            self.pending = None
            emitted = input_ids[0, cur_len:].tolist()
            drafted, logits = cut_at_stop(drafted, emitted, logits)
            self.tracer.step(self.record.req, cur_len, drafted, emitted, logits=logits)
            self.record.steps.append(HFStep(cur_len, tuple(drafted), tuple(emitted)))
        return self.inner_update(input_ids, *args, **kwargs)


@contextmanager
def traced_generation(tracer: Tracer, req: str = "r0") -> Iterator[HFTrace]:
    """Trace every speculative `generate` call made inside the block as request `req`.

    The tracer's drafting kind, when it has none, is set from the first generator built (and
    printed in its header); a tracer declared otherwise keeps its declaration.
    """
    from transformers.generation.utils import GenerationMixin

    record = HFTrace(req=req)
    original = GenerationMixin.__dict__["_get_candidate_generator"]

    def hooked(model: Any, *args: Any, **kwargs: Any) -> Any:
        generator = original(model, *args, **kwargs)
        record.generator = type(generator).__name__
        record.drafting = drafting_kind_of(generator)
        tracer.declare(record.drafting)
        _Hook(generator, tracer, record)
        return generator

    setattr(GenerationMixin, "_get_candidate_generator", hooked)  # noqa: B010 - a typed hook
    try:
        yield record
    finally:
        setattr(GenerationMixin, "_get_candidate_generator", original)  # noqa: B010
