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

In sampled decoding (`generate(..., do_sample=True)` with an assistant: transformers'
speculative sampling) `traced_generation(..., sampled=True)` also prints each verify's rejection
test as a `[spec-sample]` line (`sample_test`), from the candidate logits and the target's
processed logits that very test used.

Two parts of difftest's protocol (docs/trace-format.md) come with it:

- `forced_generation` replays another arm's committed stream (`DIFFTEST_FORCE`, difftest.core.force):
  at each of its steps the pair drafts and verifies from that arm's context, the step is traced
  as what this pair would have accepted, and the other arm's tokens are committed instead (one
  `[spec-forced]` line). Each step is one `generate` call stopped after its first verify, so the
  draft runs from a fresh cache on the forced context: the same schedule for every forced arm.
- `ActivationCapture` (`DIFFTEST_CAPTURE=REQ:POS`) hooks every module of the draft model and, at
  that one verify step only, hands each module's output in forward order (the order their
  forwards finish) to `Tracer.activation`, named `dJ.MODULE` for the step's J-th draft forward.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterator, Mapping

from difftest.emit import Tracer
from difftest.core.kinds import DraftingKind

__all__ = ["ActivationCapture", "HFStep", "HFTrace", "drafting_kind_of", "forced_generation",
           "resolved_settings", "sample_test", "traced_generation"]

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


def sample_test(q_logits: Any, p_logits: Any, drafted: list[int], emitted: list[int]
                ) -> tuple[int, list[float], list[float], list[float], int | None]:
    """One speculative-sampling verify's test, as transformers made it (`_speculative_sampling`:
    q the softmax of the draft's processed scores, p of the target's, both after temperature
    and top-p; draft i accepted when a uniform falls below p_i(x_i) / q_i(x_i), the first
    rejection emits a draw from the normalised max(0, p - q)): (acc, q of every drafted token,
    p of each tested one, each tested row's overlap sum(min(p, q)), the residual draw or None).
    The same tensors and the same float32 softmax the verify used, read back, not recomputed
    another way."""
    import torch

    k = len(drafted)
    q = q_logits[:k].float().softmax(dim=-1)
    p = p_logits[:k].float().softmax(dim=-1)
    acc = len(emitted) - 1
    tested = k if acc >= k else acc + 1
    ids = torch.tensor(drafted, dtype=torch.long)
    rows = torch.arange(k)
    q_x = q[rows, ids].tolist()
    p_x = p[rows, ids][:tested].tolist()
    overlap = torch.minimum(p[:tested], q[:tested]).sum(dim=-1).tolist()
    residual = int(emitted[acc]) if acc < k else None
    return acc, q_x, p_x, overlap, residual


class _Hook:
    """Wraps one candidate generator instance: remembers the proposal, traces the outcome."""

    def __init__(self, generator: Any, tracer: Tracer, record: HFTrace,
                 capture: ActivationCapture | None = None, sampled: bool = False) -> None:
        self.tracer = tracer
        self.record = record
        self.capture = capture
        # sampled decoding: keep each step's candidate logits (the draft's processed scores,
        # q = their softmax) for the step's [spec-sample] line
        self.sampled = sampled
        self.q_logits: Any = None
        self.pending: tuple[int, list[int], Any] | None = None
        self.last_candidates: list[int] = []  # the sequence the generator last drafted along
        # teacher-forced drafts (forced_generation): the recorder sits in the assistant's
        # logits processors; with `along` set, the draft follows those tokens row by row
        self.recorder: _DraftRecorder | None = None
        self.along: list[int] | None = None
        self.target: Any = None
        self.budget: int | None = None
        self.candidates: list[int] = []  # the tokens the generator proposed this step
        self.inner_get: Callable[..., Any] = generator.get_candidates
        self.inner_update: Callable[..., Any] = generator.update_candidate_strategy
        generator.get_candidates = self.get_candidates
        generator.update_candidate_strategy = self.update_candidate_strategy

    def get_candidates(self, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        cur_len = int(input_ids.shape[-1])
        armed = self.capture is not None and self.capture.arm(self.record.req, cur_len)
        if self.recorder is not None:
            self.recorder.start(cur_len, self.along)
        try:
            candidate_ids, candidate_logits = self.inner_get(input_ids, *args, **kwargs)
        finally:
            if armed and self.capture is not None:
                self.capture.disarm()
        self.last_candidates = candidate_ids[0].tolist()
        drafted = candidate_ids[0, cur_len:].tolist()
        self.candidates = drafted
        logits = None
        if self.along is not None and self.recorder is not None and self.recorder.rows:
            import torch

            # drafted along another arm's tokens: the trace shows this draft's own picks
            # and its own (unforced) rows
            own = torch.cat(self.recorder.rows, dim=0)[: len(drafted)]
            drafted = own.argmax(dim=-1).tolist()
            if self.tracer.wants_logits:
                logits = own
        elif candidate_logits is not None and drafted and self.tracer.wants_logits:
            logits = candidate_logits[0, : len(drafted)]
        self.pending = (cur_len, drafted, logits)
        self.q_logits = (candidate_logits[0, : len(drafted)]
                         if self.sampled and candidate_logits is not None and drafted else None)
        return candidate_ids, candidate_logits

    def would_have(self, prefix: list[int], drafted: list[int], candidates: list[int],
                   scores: Any) -> list[int]:
        """What this pair would have emitted on its own drafts, from a verify of the forced
        ones: the target's pick at each row is known while the own drafts equal the forced
        ones; past an own draft the target accepted but never saw, one more target forward
        gives the bonus token."""
        import torch

        picks = scores[0].argmax(dim=-1).tolist()
        accepted: list[int] = []
        for j, tok in enumerate(drafted):
            if tok != picks[j]:
                return accepted + [int(picks[j])]
            accepted.append(tok)
            if j >= len(candidates) or tok != candidates[j]:
                ids = torch.tensor([prefix + accepted], dtype=torch.long)
                nxt = self.target(ids, attention_mask=torch.ones_like(ids)).logits[0, -1]
                return accepted + [int(nxt.argmax())]
        return accepted + [int(picks[len(drafted)])]

    def update_candidate_strategy(self, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if self.pending is not None:
            cur_len, drafted, logits = self.pending
            self.pending = None
            emitted = input_ids[0, cur_len:].tolist()
            if self.along is not None and args:
                emitted = self.would_have(input_ids[0, :cur_len].tolist(), drafted,
                                          self.candidates, args[0])
                if self.budget is not None:
                    emitted = emitted[: self.budget]
                # an adaptive draft length (the heuristic schedule, a learned confidence
                # threshold) hears how many of its own drafts it would have had accepted
                if len(args) >= 2:
                    args = (args[0], len(emitted) - 1, *args[2:])
                elif "num_matches" in kwargs:
                    kwargs["num_matches"] = len(emitted) - 1
            drafted, logits = cut_at_stop(drafted, emitted, logits)
            self.tracer.step(self.record.req, cur_len, drafted, emitted, logits=logits)
            self.record.steps.append(HFStep(cur_len, tuple(drafted), tuple(emitted)))
            if self.sampled and drafted and self.q_logits is not None and args:
                self.tracer.sample(self.record.req, cur_len,
                                   *sample_test(self.q_logits, args[0][0], drafted, emitted))
            self.q_logits = None
        return self.inner_update(input_ids, *args, **kwargs)


@contextmanager
def traced_generation(tracer: Tracer, req: str = "r0",
                      capture: ActivationCapture | None = None, *, sampled: bool = False,
                      draft_config: Mapping[str, object] | None = None,
                      on_generator: Callable[[Any], None] | None = None) -> Iterator[HFTrace]:
    """Trace every speculative `generate` call made inside the block as request `req`.

    The tracer's drafting kind, when it has none, is set from the first generator built (and
    printed in its header); a tracer declared otherwise keeps its declaration. With `capture`,
    the draft forward of the step it names is captured module by module.

    `sampled` (a `generate(..., do_sample=True)`): after each verify that tested drafts, its
    rejection test as a `[spec-sample]` line (`sample_test`). `draft_config`: a
    known-wrong sampler for probes: generation settings (temperature, top_p) the assistant
    samples with whatever the target's (transformers hands the assistant a copy of the target's
    generation config; this changes that copy only), so the verify tests the draft's law against
    the target's own.

    `on_generator(generator)` sees each candidate generator before it is traced (a runner that
    sets the draft length per verify wraps its `get_candidates` there, so the trace shows what
    it drafted).
    """
    from transformers.generation.utils import GenerationMixin

    record = HFTrace(req=req)
    original = GenerationMixin.__dict__["_get_candidate_generator"]

    def hooked(model: Any, *args: Any, **kwargs: Any) -> Any:
        generator = original(model, *args, **kwargs)
        record.generator = type(generator).__name__
        record.drafting = drafting_kind_of(generator)
        tracer.declare(record.drafting)
        for key, value in (draft_config or {}).items():
            setattr(generator.generation_config, key, value)
        if on_generator is not None:
            on_generator(generator)
        _Hook(generator, tracer, record, capture, sampled)
        return generator

    setattr(GenerationMixin, "_get_candidate_generator", hooked)  # noqa: B010 - a typed hook
    try:
        yield record
    finally:
        setattr(GenerationMixin, "_get_candidate_generator", original)  # noqa: B010


def _first_tensor(output: Any) -> Any:
    """The tensor a module hands on: itself, a tuple's first element, a model output's first."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


class ActivationCapture:
    """Forward hooks on every submodule of a draft model, recording only while armed: at the
    step `at` = (req, pos), each module's output as its forward finishes (forward order),
    through `Tracer.activation` (a `[spec-act]` line, and `NNN-dJ.MODULE.npy` in `folder`).
    Call `remove()` when done."""

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
        self.handles = [model.register_forward_pre_hook(self._count)]
        for name, module in model.named_modules():
            if name:
                self.handles.append(module.register_forward_hook(self._hook(name)))

    def arm(self, req: str, pos: int) -> bool:
        """Start recording if (req, pos) is the captured step (once: a later visit is not)."""
        if self.done or (req, pos) != self.at:
            return False
        self.armed_at = (req, pos)
        return True

    def disarm(self) -> None:
        self.armed_at = None
        self.done = True

    def _count(self, module: Any, args: Any) -> None:
        if self.armed_at is not None:
            self.forward += 1

    def _hook(self, name: str) -> Callable[[Any, Any, Any], None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            if self.armed_at is None:
                return
            tensor = _first_tensor(output)
            if tensor is None:
                return
            req, pos = self.armed_at
            self.used = self.tracer.activation(req, pos, self.index,
                                               f"d{max(self.forward, 0)}.{name}",
                                               tensor.detach().float().cpu().numpy(),
                                               self.folder, self.used)
            self.index += 1
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


class _DraftRecorder:
    """A logits processor for the assistant's own `generate`: keeps each row's scores as the
    assistant computed them and, given tokens to draft along, makes the draft pick those (so
    row j + 1 runs on the forced row j's token). Its rows are what gets traced."""

    def __init__(self) -> None:
        self.start_len = 0
        self.along: list[int] | None = None
        self.rows: list[Any] = []

    def start(self, cur_len: int, along: list[int] | None) -> None:
        self.start_len, self.along, self.rows = cur_len, along, []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.rows.append(scores.detach().float().clone())
        j = int(input_ids.shape[-1]) - self.start_len
        if self.along is None or j >= len(self.along):
            return scores
        # swap the forced token's score with the draft's own top one: the forced token is
        # picked, and what reads the picked token's probability (a confidence threshold that
        # stops drafting) reads the draft's own top probability, as it would have free
        own = int(scores[0].argmax())
        want = self.along[j]
        if own == want:
            return scores
        forced = scores.clone()
        forced[:, own], forced[:, want] = scores[:, want], scores[:, own]
        if int(forced[0].argmax()) != want:  # a tie with a lower id: one step above it
            import torch

            top = forced[:, want]
            forced[:, want] = torch.nextafter(top, torch.full_like(top, float("inf")))
        return forced


def _keep_valid_draft_cache(generator: Any, seen: list[int], context: list[int]) -> None:
    """Before a forced step: the assistant's cache holds the sequence it last drafted along
    (`seen`, but its last token); keep only the prefix the forced context shares with it. When
    the forced tokens are what the pair would have committed, the generator's own crop keeps no
    more than that, and the step runs exactly as it would have free."""
    cache = getattr(generator, "assistant_kwargs", {}).get("cache")
    if cache is None or not seen:
        return
    shared = 0
    for x, y in zip(seen, context, strict=False):
        if x != y:
            break
        shared += 1
    held = int(cache.get_seq_length())
    kept = min(len(context) - 1, int(generator._last_ids_length) - 1, held)
    if shared < kept:
        cache.crop(-(held - shared))
        generator._last_ids_length = 0  # its own crop would now cut valid entries


def forced_generation(target: Any, draft: Any, tracer: Tracer, req: str, prompt: list[int],
                      steps: Any, max_length: int, **generate_kwargs: Any) -> list[int]:
    """Replay a committed stream (`steps`: difftest.core.force.ForcedStep in order) on the pair:
    per step, one verify from the forced context (traced as what this pair would have accepted),
    then that step's tokens committed and a `[spec-forced]` line printed. Returns the committed
    ids (the prompt excluded). A step not at the context's end raises ValueError.

    Each step is a `generate` call stopped after its first verify; the candidate generator (and
    with it the assistant's cache) lives across the steps, its cache cut back to what the forced
    context shares with it, so the draft computes as in a free run on the same tokens.

    With `draft_along` (default) and a sequential drafter, a step that carries the other arm's
    drafts is drafted along them: row j + 1 runs on the other arm's row-j token, so every row
    has a counterpart on the same context. The trace shows this draft's own pick and its own
    logits per row, and the emit it would have committed on its own drafts.

    Two keywords are read here, the rest go to `generate`: `capture` (an ActivationCapture, or
    None) and `draft_along` (default True)."""
    capture = generate_kwargs.pop("capture", None)
    if capture is not None and not isinstance(capture, ActivationCapture):
        raise TypeError(f"capture must be an ActivationCapture, got {type(capture).__name__}")
    draft_along = generate_kwargs.pop("draft_along", True)
    if not isinstance(draft_along, bool):
        raise TypeError(f"draft_along must be true or false, got {draft_along!r}")
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList
    from transformers.generation.utils import GenerationMixin

    class _AfterOneVerify(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    record = HFTrace(req=req)
    original = GenerationMixin.__dict__["_get_candidate_generator"]
    held: dict[str, Any] = {}
    state: dict[str, Any] = {"along": None, "budget": None}
    context = list(prompt)

    def hooked(model: Any, *args: Any, **kwargs: Any) -> Any:
        if "generator" not in held:
            generator = original(model, *args, **kwargs)
            record.generator = type(generator).__name__
            record.drafting = drafting_kind_of(generator)
            tracer.declare(record.drafting)
            held["generator"] = generator
            hook = held["hook"] = _Hook(generator, tracer, record, capture)
            if record.drafting is DraftingKind.SEQUENTIAL and hasattr(generator,
                                                                      "logits_processor"):
                hook.recorder = _DraftRecorder()
                hook.target = target
                generator.logits_processor.append(hook.recorder)
        else:
            _keep_valid_draft_cache(held["generator"], held["hook"].last_candidates, context)
        hook = held["hook"]
        hook.along, hook.budget = state["along"], state["budget"]
        if hook.recorder is None:
            hook.along = None  # a block drafter's rows do not run on each other
        return held["generator"]

    setattr(GenerationMixin, "_get_candidate_generator", hooked)  # noqa: B010 - a typed hook
    try:
        for step in steps:
            if step.pos != len(context):
                raise ValueError(f"the force file has no step of request {req} at position "
                                 f"{len(context)} (next forced step is at {step.pos})")
            before = len(record.steps)
            state["along"] = list(step.drafts) if draft_along and step.drafts else None
            state["budget"] = max_length - len(context)
            ids = torch.tensor([context], dtype=torch.long)
            target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                            do_sample=False, max_length=max_length,
                            stopping_criteria=StoppingCriteriaList([_AfterOneVerify()]),
                            **generate_kwargs)
            if len(record.steps) != before + 1:
                raise ValueError(f"request {req} at position {step.pos}: generate verified "
                                 f"{len(record.steps) - before} times, expected once")
            tracer.forced(req, step.pos, list(step.tokens))
            context.extend(step.tokens)
    finally:
        setattr(GenerationMixin, "_get_candidate_generator", original)  # noqa: B010
    return context[len(prompt):]
