"""The llama.cpp runner's options, kept free of llama_cpp and numpy so that bad options fail
before either loads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from difftest.core.errors import UsageError
from difftest.core.limits import check_seed

# KV cache element types both contexts store K and V in (llama.cpp's `type_k`/`type_v`).
KV_TYPES: tuple[str, ...] = ("f16", "f32")
FLASH_ATTN: tuple[str, ...] = ("off", "on")
# How the target's verify reaches llama.cpp: `block` is one `llama_decode` call carrying the
# pending token and the k drafts (logits for every position), `serial` one call per token.
VERIFY: tuple[str, ...] = ("block", "serial")
# Whose block logits the `[spec-logits]` rows carry (the other model's go to side lines).
LOGITS: tuple[str, ...] = ("draft", "target")
# Known-wrong drafts, for probes; each changes only the draft, so a lossless verify keeps the
# output. skip-position: the draft's KV cell of one prompt position is removed
# (llama_memory_seq_rm on one cell), so every later draft query ignores that position;
# corrupt-kv: that cell's K is re-rotated one position back (llama_memory_seq_add on one cell);
# rope-base: the draft context runs with 10x the model's RoPE base (rope_freq_base).
MUTATIONS: tuple[str, ...] = ("none", "skip-position", "corrupt-kv", "rope-base")


@dataclass(frozen=True)
class LlamaCppOptions:
    """Everything that decides what one run prints; equal options print equal traces."""

    requests: int = 3
    max_new_tokens: int = 16
    k: int = 4
    prompt_len: int = 8
    seed: int = 0
    threads: int = 1
    n_batch: int = 512
    n_ubatch: int = 512
    kv_type: str = "f16"
    flash_attn: str = "off"
    verify: str = "block"
    logits: str = "draft"
    mutation: str = "none"
    top_k: int = 8
    cache_dir: Path | None = None  # where the GGUF pair is written (None: the user cache)

    def __post_init__(self) -> None:
        for name, allowed in (("kv_type", KV_TYPES), ("flash_attn", FLASH_ATTN),
                              ("verify", VERIFY), ("logits", LOGITS), ("mutation", MUTATIONS)):
            if getattr(self, name) not in allowed:
                raise UsageError(f"unknown {name.replace('_', '-')} {getattr(self, name)!r}; "
                                 f"choose one of {', '.join(allowed)}")
        for name, low in (("requests", 1), ("max_new_tokens", 1), ("k", 1), ("prompt_len", 2),
                          ("threads", 1), ("n_batch", 1), ("n_ubatch", 1), ("top_k", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"{name.replace('_', '-')} must be an integer >= {low}, "
                                 f"got {value!r}")
        check_seed(self.seed)
        if self.n_ubatch > self.n_batch:
            # llama.cpp would clamp it silently; a run says what it ran, so refuse instead
            raise UsageError(f"n-ubatch {self.n_ubatch} is larger than n-batch {self.n_batch}")
        if self.verify == "block" and self.k + 1 > self.n_batch:
            raise UsageError(f"n-batch {self.n_batch} cannot carry a verify block of "
                             f"{self.k + 1} tokens (k + 1); raise --n-batch")
        if self.mutation in ("skip-position", "corrupt-kv") and self.prompt_len < 3:
            raise UsageError(f"mutation {self.mutation} needs prompt-len >= 3")

    @property
    def n_ctx(self) -> int:
        """Room for the longest request, its drafts and the bonus token, rounded up, and at
        least n_batch (llama.cpp lowers n_batch to the context size it is asked for)."""
        need = self.prompt_len + self.requests + self.max_new_tokens + self.k + 2
        return max(self.n_batch, -(-need // 256) * 256)
