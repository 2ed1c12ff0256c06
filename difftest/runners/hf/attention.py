"""The draft's attention routed through a mask of difftest's own: the attention mutations of
the hf runner (models.load_pair) and the one-layer mask fault (faults) both use it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from difftest.core.corpus import window_read


def mutated_mask(query: torch.Tensor, key: torch.Tensor, causal: bool, mutation: str,
                 window: int = 0) -> torch.Tensor:
    """An additive (1, 1, q, k) mask; queries are the last q of the k key positions. `window`:
    each query sees only its last `window` keys (0: no window), one more under
    `sliding-window-edge`; any other mutation keeps the model's own causality."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    qpos = torch.arange(k_len - q_len, k_len)[:, None]
    kpos = torch.arange(k_len)[None, :]
    if mutation == "broken-mask":
        # the wrong causality: a causal draft sees the future, a bidirectional one loses it
        causal = not causal
    visible = kpos <= qpos if causal else torch.ones(q_len, k_len, dtype=torch.bool)
    if mutation == "sliding-window-4":
        visible = visible & (kpos > qpos - 4)
    if window:
        visible = visible & (kpos > qpos - window_read(mutation, window))
    zero = torch.zeros((), dtype=query.dtype)
    blocked = torch.tensor(torch.finfo(query.dtype).min, dtype=query.dtype)
    return torch.where(visible, zero, blocked)[None, None].to(query.device)


def route_masked_attention(draft: Any, name: str, mutation: str, only: Any = None,
                           window: int = 0,
                           seen: Callable[[Any, int, int], None] | None = None) -> None:
    """Register, as attention implementation `name`, sdpa with the mask `mutation` and `window`
    make (mutated_mask), in every attention module or in `only` (a planted one-layer fault; the
    others keep their own mask), and route the draft's attention through it. `seen(module,
    q_len, k_len)` is called before each routed forward."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, **kwargs: Any) -> Any:
        if only is not None and module is not only:
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        if seen is not None:
            seen(module, query.shape[-2], key.shape[-2])
        mask = mutated_mask(query, key, bool(getattr(module, "is_causal", True)), mutation,
                            window)
        kwargs.pop("is_causal", None)
        kwargs.pop("sliding_window", None)
        return sdpa_attention_forward(module, query, key, value, mask, is_causal=False, **kwargs)

    AttentionInterface.register(name, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    draft.set_attn_implementation(name)
