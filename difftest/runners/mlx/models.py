"""The models of one mlx run: a tiny seeded random Llama pair built from a config.

The target is a 4-layer mlx-lm Llama; the draft is a 2-layer one holding copies of the target's
embeddings, first two layers, final norm and head (an early exit of the target, so that some
drafts are accepted). Weights are drawn from N(0, 0.1²) (norms stay at one) so that the greedy
stream varies; the target's later layers are damped (LATE_SCALE). The draft's attention layers
are replaced by `DraftAttention`, which runs the chosen attention path and, for probes, a
known-wrong mask; the target is mlx-lm's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from difftest.core.corpus import window_read

from difftest.runners.mlx.options import MLXOptions

VOCAB = 256
HIDDEN = 64
TARGET_LAYERS = 4
DRAFT_LAYERS = 2
INIT_STD = 0.1
# The target's layers past the draft's write 0.3x as much into the residual stream, so that the
# early-exit draft is often right: verifies accept 0 to k drafts, all of them seen.
LATE_SCALE = 0.3


def _args(layers: int) -> Any:
    llama = importlib.import_module("mlx_lm.models.llama")
    return llama.ModelArgs(model_type="llama", hidden_size=HIDDEN, num_hidden_layers=layers,
                           intermediate_size=2 * HIDDEN, num_attention_heads=4,
                           num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=VOCAB,
                           max_position_embeddings=512, tie_word_embeddings=False)


def builtin_target(seed: int) -> Any:
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    llama = importlib.import_module("mlx_lm.models.llama")
    model = llama.Model(_args(TARGET_LAYERS))
    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    keys = mx.random.split(mx.random.key(seed), num=len(params))
    drawn = [(name, mx.ones_like(value) if "norm" in name
              else INIT_STD * mx.random.normal(value.shape, key=keys[n]))
             for n, (name, value) in enumerate(params)]
    model.update(tree_unflatten(drawn))
    for layer in model.model.layers[DRAFT_LAYERS:]:
        layer.self_attn.o_proj.weight = LATE_SCALE * layer.self_attn.o_proj.weight
        layer.mlp.down_proj.weight = LATE_SCALE * layer.mlp.down_proj.weight
    mx.eval(model.parameters())
    return model


def builtin_draft(target: Any) -> Any:
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    llama = importlib.import_module("mlx_lm.models.llama")
    draft = llama.Model(_args(DRAFT_LAYERS))
    weights: list[tuple[str, Any]] = tree_flatten(target.parameters())  # type: ignore[assignment]
    kept = [(name, mx.array(value)) for name, value in weights
            if not name.startswith("model.layers.") or int(name.split(".")[2]) < DRAFT_LAYERS]
    draft.update(tree_unflatten(kept))
    return draft


def attention_mask(q_len: int, k_len: int, mutation: str, window: int = 0) -> Any:
    """Which keys each query sees, (q, k) booleans; the queries are the last q of k positions.
    None where every query sees every key it would see anyway (one query, no window).
    `window`: each query sees only its last `window` keys (0: none), one more under
    `sliding-window-edge`."""
    import mlx.core as mx

    qpos = mx.arange(k_len - q_len, k_len)[:, None]
    kpos = mx.arange(k_len)[None, :]
    # a window wider than the keys reads them all: clamped, it stays within int32 (mlx's ints)
    inside = kpos > qpos - min(window_read(mutation, window), k_len) if window else None
    if mutation == "broken-mask":
        return inside  # every key, the future included (inside the window, if any)
    visible = kpos <= qpos
    if mutation == "sliding-window-4":
        visible = visible & (kpos > qpos - 4)
    elif inside is not None:
        visible = visible & inside
    elif q_len == 1:
        return None
    return visible


def split_k_attention(queries: Any, keys: Any, values: Any, scale: float, mask: Any,
                      split: int) -> Any:
    """Attention over the keys in chunks of `split`, each chunk's softmax merged by its max and
    sum (as split-K decoding kernels do): the same function, summed in another order."""
    import mlx.core as mx

    repeats = queries.shape[1] // keys.shape[1]
    if repeats > 1:
        keys = mx.repeat(keys, repeats, axis=1)
        values = mx.repeat(values, repeats, axis=1)
    scores = (queries * scale) @ keys.swapaxes(-1, -2)
    if mask is not None:
        scores = mx.where(mask, scores, mx.array(-mx.inf, dtype=scores.dtype))
    parts = []
    for start in range(0, keys.shape[2], split):
        s = scores[..., start:start + split]
        m = s.max(axis=-1, keepdims=True)
        safe = mx.where(mx.isinf(m), mx.zeros_like(m), m)  # a chunk this query cannot see
        p = mx.exp(s - safe)
        parts.append((m, p.sum(axis=-1, keepdims=True), p @ values[:, :, start:start + split]))
    top = parts[0][0]
    for m, _, _ in parts[1:]:
        top = mx.maximum(top, m)
    num: Any = None
    den: Any = None
    for m, total, o in parts:
        w = mx.where(mx.isinf(m), mx.zeros_like(m), mx.exp(m - top))
        num = o * w if num is None else num + o * w
        den = total * w if den is None else den + total * w
    return num / den


def draft_attention_class(path: str, mutation: str, split: int, window: int = 0,
                          seen: Callable[[Any, int, int], None] | None = None) -> type:
    """A subclass of mlx-lm's Llama attention running `path` with `mutation`'s mask and
    `window`; `seen(module, q_len, k_len)` hears each forward (the corpus's counters)."""
    # mlx-lm's own mask where the draft's is the correct one (the window bug without a window)
    own_mask = mutation in ("none", "verify-width-path", "sliding-window-edge") and not window
    import mlx.core as mx

    llama = importlib.import_module("mlx_lm.models.llama")

    class DraftAttention(llama.Attention):  # type: ignore[misc, name-defined]
        def __call__(self, x: Any, mask: Any = None, cache: Any = None) -> Any:
            b, length, _ = x.shape
            q = self.q_proj(x).reshape(b, length, self.n_heads, -1).transpose(0, 2, 1, 3)
            k = self.k_proj(x).reshape(b, length, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
            v = self.v_proj(x).reshape(b, length, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
            offset = cache.offset if cache is not None else 0
            q = self.rope(q, offset=offset)
            k = self.rope(k, offset=offset)
            if cache is not None:
                k, v = cache.update_and_fetch(k, v)
            if seen is not None:
                seen(self, length, k.shape[2])
            if path == "sdpa" and own_mask:
                out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)
            else:
                visible = attention_mask(length, k.shape[2], mutation, window)
                if path == "sdpa":
                    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale,
                                                               mask=visible)
                else:
                    out = split_k_attention(q, k, v, self.scale, visible, split)
            return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, length, -1))

    return DraftAttention


def load_pair(options: MLXOptions, seen: Callable[[Any, int, int], None] | None = None
              ) -> tuple[Any, Any]:
    """(target, draft): the draft in the options' dtype, attention path, mutation and window
    (`seen`: see draft_attention_class)."""
    import mlx.core as mx

    target = builtin_target(options.seed)
    draft = builtin_draft(target)
    attention = draft_attention_class(options.attn, options.mutation, options.split,
                                      options.sliding_window, seen)
    for layer in draft.model.layers:
        layer.self_attn.__class__ = attention
    if options.mutation == "zeroed-layer":
        last = draft.model.layers[-1]
        last.self_attn.o_proj.weight = mx.zeros_like(last.self_attn.o_proj.weight)
        last.mlp.down_proj.weight = mx.zeros_like(last.mlp.down_proj.weight)
    draft.set_dtype(getattr(mx, options.draft_dtype))
    mx.eval(target.parameters(), draft.parameters())
    return target, draft
