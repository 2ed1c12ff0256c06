"""Greedy speculative decoding on llama.cpp (through llama-cpp-python's bindings), traced with a
`difftest.emit.Tracer`.

```python
from difftest.adapters.llamacpp import (ContextSettings, LlamaCppModel, Speculation,
                                        speculative_generate)
from difftest.emit import Tracer

settings = ContextSettings(n_ctx=256, n_threads=1)
target = LlamaCppModel("target.gguf", settings)
draft = LlamaCppModel("draft.gguf", settings)
tracer = Tracer()                                    # VT_SPEC_TRACE decides the level
tracer.config({**target.applied("target"), **draft.applied("draft")})
ids = speculative_generate(target, draft, tracer, "r0", prompt, Speculation(max_new_tokens=64))
```

llama-cpp-python's high-level `Llama` has no draft-model speculative loop, so this module is
the loop, on llama.cpp's C API as the bindings expose it (`llama_decode`, `llama_get_logits_ith`,
`llama_memory_seq_rm`): the draft proposes k tokens one `llama_decode` call each (`sequential`
drafting); the target verifies the pending token and the k drafts in one call that asks for
the logits of every position (`verify="block"`) or in k + 1 calls of one token
(`verify="serial"`); the longest prefix of drafts equal to the target's argmax is accepted and
the target's own next token appended; each model's KV cache is then cut back
(`llama_memory_seq_rm`) to the tokens both it and the committed stream share, so a rejected
draft leaves no entry behind.

What reached llama.cpp is read back, not assumed: `applied()` takes `n_batch`, `n_ubatch`,
`flash_attn`, the RoPE base and the K/V cache types from the lines llama.cpp logs while it
creates the context (a log callback keeps them off the trace stream), the thread counts from
`llama_n_threads`, and the CPU features the build uses from `llama_print_system_info`.

At level 3 the `[spec-logits]` rows are one model's block logits (`logits="draft"`: the draft's
row j that drafted token j; `"target"`: the target's verify row that accepted or rejected draft
j) and the other model's rows go on `[llamacpp-logits] model=...` side lines in the same top-k
`%.9g` format, which difftest's parsers skip as other output. Teacher forcing replays another
arm's committed stream (each step drafted and verified from the forced context, then the forced
tokens committed); drafting along the other arm's drafts is not implemented. Capture
(`Taps.capture`) is handed the draft's logits rows of each step: llama-cpp-python exposes no
module outputs, so logits are all a capture can hold.
"""

from __future__ import annotations

import ctypes
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from difftest.core.kinds import DraftingKind
from difftest.emit import Tracer, top_pairs

__all__ = ["ContextSettings", "LlamaCppError", "LlamaCppModel", "SIDE_TAG", "Speculation", "Step",
           "Taps", "cpu_features", "speculative_generate"]

SIDE_TAG = "[llamacpp-logits]"
KV_TYPES = {"f32": 0, "f16": 1}  # ggml_type ids
FLASH_ATTN = {False: 0, True: 1}  # LLAMA_FLASH_ATTN_TYPE_DISABLED / _ENABLED
SEQ = 0


class LlamaCppError(Exception):
    """llama.cpp refused a model, a context or a decode call (its message or return code)."""


@dataclass(frozen=True)
class ContextSettings:
    """What one context is created with (llama_context_params)."""

    n_ctx: int = 256
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 1
    kv_type: str = "f16"
    flash_attn: bool = False
    rope_freq_base: float = 0.0  # 0: the model's own


class _Log:
    """llama.cpp's log lines, kept in memory (a trace is the runner's stderr: llama.cpp's
    chatter stays off it). Pieces of one line (GGML_LOG_LEVEL_CONT) are joined."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.callback: Any = None

    def install(self) -> None:
        import llama_cpp

        def sink(level: int, text: bytes, user_data: Any) -> None:
            self.text.append(text.decode("utf-8", "replace"))

        self.callback = llama_cpp.llama_log_callback(sink)  # kept: C holds the pointer
        llama_cpp.llama_log_set(self.callback, ctypes.c_void_p(0))

    def mark(self) -> int:
        return len(self.text)

    def since(self, mark: int) -> str:
        return "".join(self.text[mark:])


_LOG = _Log()


def _library() -> Any:
    """llama_cpp, imported once with its backend up and its log routed into memory."""
    import llama_cpp

    if _LOG.callback is None:
        _LOG.install()
        llama_cpp.llama_backend_init()
    return llama_cpp


def cpu_features() -> str:
    """The CPU features this llama.cpp build uses (`AVX2,FMA,...`, from llama_print_system_info:
    every `NAME = 1`), one word for `[spec-config]`."""
    info = _library().llama_print_system_info().decode("utf-8", "replace")
    names = [m.group(1) for m in re.finditer(r"([A-Za-z0-9_]+) = 1\b", info)]
    return ",".join(dict.fromkeys(names)) or "none"


_APPLIED = {"n_batch": r"n_batch\s+= (\d+)", "n_ubatch": r"n_ubatch\s+= (\d+)",
            "flash_attn": r"flash_attn\s+= (\w+)", "rope_base": r"freq_base\s+= ([\d.]+)",
            "type_k": r"K \((\w+)\)", "type_v": r"V \((\w+)\)"}


def _read_applied(log: str) -> dict[str, str]:
    """The settings llama.cpp logged while creating a context; a missing one is `unknown`."""
    out = {}
    for key, pattern in _APPLIED.items():
        found = re.findall(pattern, log)
        out[key] = found[-1] if found else "unknown"
    if out["flash_attn"] in ("enabled", "disabled"):
        out["flash_attn"] = "on" if out["flash_attn"] == "enabled" else "off"
    if out["rope_base"].endswith(".0"):
        out["rope_base"] = out["rope_base"][:-2]
    return out


@dataclass
class LlamaCppModel:
    """One GGUF model and its context, with the tokens its KV cache holds (positions 0..n-1 of
    sequence 0, `held`), so a caller can cut it back to what the committed stream shares."""

    path: Path | str
    settings: ContextSettings = field(default_factory=ContextSettings)
    held: list[int] = field(default_factory=list)
    hook: Callable[[LlamaCppModel, int, int], None] | None = None  # after a decode of [p0, p1)

    def __post_init__(self) -> None:
        lib = _library()
        self._lib = lib
        s = self.settings
        if s.kv_type not in KV_TYPES:
            raise LlamaCppError(f"kv type {s.kv_type!r}: choose one of {', '.join(KV_TYPES)}")
        mark = _LOG.mark()
        mparams = lib.llama_model_default_params()
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self.model:
            raise LlamaCppError(f"llama.cpp cannot load {self.path}: "
                                f"{_last_error(_LOG.since(mark))}")
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = s.n_ctx
        cparams.n_batch = s.n_batch
        cparams.n_ubatch = s.n_ubatch
        cparams.n_seq_max = 1
        cparams.n_threads = s.n_threads
        cparams.n_threads_batch = s.n_threads
        cparams.type_k = KV_TYPES[s.kv_type]
        cparams.type_v = KV_TYPES[s.kv_type]
        cparams.flash_attn_type = FLASH_ATTN[s.flash_attn]
        cparams.rope_freq_base = s.rope_freq_base
        cparams.no_perf = True
        mark = _LOG.mark()
        self.ctx = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise LlamaCppError(f"llama.cpp cannot make a context for {self.path}: "
                                f"{_last_error(_LOG.since(mark))}")
        self._log = _LOG.since(mark)
        self.memory = lib.llama_get_memory(self.ctx)
        self.vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model)))
        self.n_batch = int(lib.llama_n_batch(self.ctx))  # as llama.cpp took it
        self._batch = lib.llama_batch_init(self.n_batch, 0, 1)

    def applied(self, role: str = "") -> dict[str, object]:
        """The context's settings as llama.cpp took them, keys suffixed `_ROLE` when given."""
        lib = self._lib
        values: dict[str, object] = dict(_read_applied(self._log))
        values["n_threads"] = int(lib.llama_n_threads(self.ctx))
        values["n_threads_batch"] = int(lib.llama_n_threads_batch(self.ctx))
        values["n_ctx"] = int(lib.llama_n_ctx(self.ctx))
        suffix = f"_{role}" if role else ""
        return {f"{key}{suffix}": value for key, value in values.items()}

    def close(self) -> None:
        lib = self._lib
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "ctx", None):
            lib.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            lib.llama_model_free(self.model)
            self.model = None

    def clear(self) -> None:
        """Empty the KV cache (a new request)."""
        self._lib.llama_memory_clear(self.memory, True)
        self.held = []

    def keep(self, n: int) -> None:
        """Cut the KV cache back to its first `n` positions (a rejection's rollback)."""
        if n < len(self.held):
            if not self._lib.llama_memory_seq_rm(self.memory, SEQ, n, -1):
                raise LlamaCppError(f"llama_memory_seq_rm({n}, -1) failed")
            del self.held[n:]

    def drop_cell(self, pos: int) -> None:
        """Remove the KV cell of one position (llama_memory_seq_rm over [pos, pos + 1)): later
        queries attend to every held position but that one. `held` still counts it, so a
        later `keep` cuts at the same places."""
        if not self._lib.llama_memory_seq_rm(self.memory, SEQ, pos, pos + 1):
            raise LlamaCppError(f"llama_memory_seq_rm({pos}, {pos + 1}) failed")

    def shift_cell(self, pos: int, delta: int) -> None:
        """Move the KV cell of one position by `delta` (llama_memory_seq_add): llama.cpp
        re-rotates its K to the new position at the next decode."""
        self._lib.llama_memory_seq_add(self.memory, SEQ, pos, pos + 1, delta)

    def decode(self, tokens: Sequence[int], outputs: str = "last") -> Any:
        """Append `tokens` at the end of the KV cache in one `llama_decode` call; return the
        logits rows asked for (`last`: (1, vocab), `all`: (len, vocab), `none`: None)."""
        import numpy as np

        lib, n, pos = self._lib, len(tokens), len(self.held)
        if not 0 < n <= self.n_batch:
            raise LlamaCppError(f"a decode call of {n} tokens (n_batch {self.n_batch})")
        b = self._batch
        b.n_tokens = n
        for i, tok in enumerate(tokens):
            b.token[i] = int(tok)
            b.pos[i] = pos + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = SEQ
            b.logits[i] = outputs == "all" or (outputs == "last" and i == n - 1)
        rc = int(lib.llama_decode(self.ctx, b))
        if rc != 0:
            raise LlamaCppError(f"llama_decode returned {rc} for {n} tokens at position {pos}")
        self.held.extend(int(t) for t in tokens)
        if self.hook is not None:
            self.hook(self, pos, pos + n)
        if outputs == "none":
            return None
        rows = range(n) if outputs == "all" else [n - 1]
        return np.stack([np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, i),
                                               shape=(self.vocab,)).copy() for i in rows])

    def extend(self, tokens: Sequence[int], outputs: str = "last") -> Any:
        """Append `tokens` in calls of at most n_batch tokens; the last call's rows as `decode`."""
        step = self.n_batch
        chunks = [tokens[i:i + step] for i in range(0, len(tokens), step)]
        for chunk in chunks[:-1]:
            self.decode(chunk, "none")
        return self.decode(chunks[-1], outputs) if chunks else None


def _last_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def _shared(held: Sequence[int], context: Sequence[int]) -> int:
    n = 0
    for x, y in zip(held, context, strict=False):
        if x != y:
            break
        n += 1
    return n


def _side_lines(model: str, req: str, pos: int, rows: Any, top_k: int) -> list[str]:
    out = []
    for j in range(rows.shape[0]):
        pairs = "".join(f"{i}:{v:.9g} " for i, v in top_pairs(rows[j], top_k))
        out.append(f"{SIDE_TAG} model={model} req={req} pos={pos} row={j + 1} top=[ {pairs}]")
    return out


@dataclass(frozen=True)
class Step:
    """One verify (kept for callers and tests; the tracer printed it)."""

    pos: int
    drafted: tuple[int, ...]
    emitted: tuple[int, ...]


def _propose(draft: LlamaCppModel, context: list[int], n: int) -> tuple[list[int], Any]:
    """n greedy drafts from `context`, one decode call per row after the catch-up."""
    import numpy as np

    if n == 0:
        return [], None
    draft.keep(min(_shared(draft.held, context), len(context) - 1))
    rows = [draft.extend(context[len(draft.held):])[0]]
    drafts = [int(np.argmax(rows[0]))]
    while len(drafts) < n:
        rows.append(draft.decode([drafts[-1]])[0])
        drafts.append(int(np.argmax(rows[-1])))
    return drafts, np.stack(rows)


def _verify(target: LlamaCppModel, context: list[int], drafts: list[int], serial: bool) -> Any:
    """The target's logits at the pending token and at each draft: (len(drafts) + 1, vocab)."""
    import numpy as np

    target.keep(min(_shared(target.held, context), len(context) - 1))
    if len(target.held) < len(context) - 1:
        target.extend(context[len(target.held):-1], "none")
    block = [context[-1], *drafts]
    if serial:
        return np.concatenate([target.decode([tok]) for tok in block])
    return target.decode(block, "all")


@dataclass
class _Run:
    """One request's loop state and what it prints."""

    target: LlamaCppModel
    draft: LlamaCppModel
    tracer: Tracer
    req: str
    spec: Speculation
    taps: Taps
    steps: list[Step] = field(default_factory=list)

    def step(self, context: list[int], budget: int) -> list[int]:
        import numpy as np

        pos = len(context)
        drafts, draft_rows = _propose(self.draft, context, min(self.spec.k, budget - 1))
        target_rows = _verify(self.target, context, drafts, self.spec.verify == "serial")
        picks = [int(np.argmax(row)) for row in target_rows]
        acc = 0
        while acc < len(drafts) and drafts[acc] == picks[acc]:
            acc += 1
        emitted = drafts[:acc] + [picks[acc]]
        if self.taps.capture is not None and draft_rows is not None:
            self.taps.capture(self.req, pos, draft_rows)
        mine, other = ((draft_rows, target_rows) if self.spec.logits == "draft"
                       else (target_rows[:len(drafts)] if drafts else None, draft_rows))
        self.tracer.step(self.req, pos, drafts, emitted,
                         logits=mine if self.tracer.wants_logits else None)
        if self.tracer.wants_logits and other is not None:
            name = "target" if self.spec.logits == "draft" else "draft"
            out = self.taps.side if self.taps.side is not None else sys.stderr
            out.write("".join(line + "\n" for line in
                              _side_lines(name, self.req, pos, other, self.tracer.top_k)))
            out.flush()
        self.steps.append(Step(pos, tuple(drafts), tuple(emitted)))
        return emitted


@dataclass(frozen=True)
class Speculation:
    """How one request is generated: its token budget, drafts per verify, how the target's
    verify reaches llama.cpp (`block`: one call; `serial`: one call per token) and whose block
    logits the `[spec-logits]` rows carry (`draft` or `target`)."""

    max_new_tokens: int = 16
    k: int = 4
    verify: str = "block"
    logits: str = "draft"

    def __post_init__(self) -> None:
        if self.verify not in ("block", "serial") or self.logits not in ("draft", "target"):
            raise ValueError(f"verify must be block or serial, logits draft or target; got "
                             f"{self.verify!r}, {self.logits!r}")
        if self.max_new_tokens < 1 or self.k < 1:
            raise ValueError("max_new_tokens and k must be >= 1")


@dataclass(frozen=True)
class Taps:
    """Where a run's extra outputs go: the other model's logits lines (`side`, default
    stderr) and, per step, the draft's logits rows (`capture(req, pos, rows)`)."""

    side: TextIO | None = None
    capture: Callable[[str, int, Any], None] | None = None


def speculative_generate(target: LlamaCppModel, draft: LlamaCppModel, tracer: Tracer, req: str,
                         prompt: Sequence[int], spec: Speculation = Speculation(),
                         forced: Sequence[Any] | None = None, taps: Taps = Taps()) -> list[int]:
    """Generate one request greedily with the pair, tracing each verify as request `req`;
    return the committed ids (the prompt excluded). Both KV caches are emptied first.

    `forced`: another arm's committed steps for this request (difftest.core.force.ForcedStep:
    `pos`, `tokens`), replayed in order: each step drafts and verifies from the forced
    context, is traced as what this pair would have emitted, and commits the forced tokens (a
    `[spec-forced]` line); a step not at the context's end raises ValueError."""
    if len(prompt) < 1:
        raise ValueError("give a prompt of at least one token")
    tracer.declare(DraftingKind.SEQUENTIAL)
    target.clear()
    draft.clear()
    run = _Run(target, draft, tracer, req, spec, taps)
    context = [int(t) for t in prompt]
    end = len(context) + spec.max_new_tokens
    if forced is None:
        while len(context) < end:
            context.extend(run.step(context, end - len(context)))
        return context[len(prompt):]
    for step in forced:
        if step.pos != len(context):
            raise ValueError(f"the force file has no step of request {req} at position "
                             f"{len(context)} (next forced step is at {step.pos})")
        run.step(context, max(end - len(context), 1))
        tracer.forced(req, step.pos, list(step.tokens))
        context.extend(int(t) for t in step.tokens)
    return context[len(prompt):]
