"""A small seeded target model and a DFlash block drafter over it.

The target is a causal pre-norm transformer decoded greedily; it exposes the hidden states of its
tapped layers. The drafter follows DFlash: the tapped features of every context token go through
a projection and a norm, then each draft layer's fused K/V projection (K gets the layer's K norm
and RoPE at its absolute position, V neither). A query block `[anchor, mask, ..., mask]` at the
next positions runs through the draft layers, attending over `[context K/V ; block K/V]` with
each layer's mask, and the target's LM head turns the result into block logits.

The draft may run in another dtype than the target (`RunnerOptions.draft_dtype`): its weights,
the target embeddings and LM head it reads, its RoPE tables, its K/V store and every activation
are then in that dtype, and only the block logits come back as float32, holding the draft
dtype's values exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from difftest.runners.reference.attention import KVStore, Kernel, allowed_keys, attend, forced_causal
from difftest.runners.reference.bugs import Coverage, window_edge, window_of
from difftest.runners.reference.options import DEGENERATE_ID, RunnerOptions

DTYPE = torch.float32
# What the draft forward hands each module's output to: (module name, output) -> output used.
Tap = Callable[[str, torch.Tensor], torch.Tensor]
D_MODEL = 64
N_HEADS = 4
HEAD_DIM = 16
D_FFN = 128
ROPE_THETA = 10000.0
EPS = 1e-6
# The degenerate fixture's head bias: far above any attention-driven logit, so the drafted id
# cannot move while the rest of every row still follows the attention.
DEGENERATE_BIAS = 60.0


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


class Rope:
    """Rotate-half RoPE with tables built once for every position a run can reach."""

    def __init__(self, max_positions: int, head_dim: int, dtype: torch.dtype = DTYPE) -> None:
        inv = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        self.cos = angles.cos().to(dtype)
        self.sin = angles.sin().to(dtype)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x is `[T, H, D]`; positions `[T]` are absolute."""
        cos = self.cos[positions][:, None, :]
        sin = self.sin[positions][:, None, :]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


@dataclass
class AttnLayer:
    """One pre-norm transformer layer; `wkv` is the fused K/V projection (K rows first)."""

    ln1: torch.Tensor
    wq: torch.Tensor
    wkv: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    wo: torch.Tensor
    ln2: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor

    def qkv(self, x: torch.Tensor, positions: torch.Tensor, rope: Rope
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = rms_norm(x, self.ln1)
        q = (h @ self.wq.T).view(x.shape[0], N_HEADS, HEAD_DIM)
        k, v = self.project_kv(h, positions, rope)
        return rope(rms_norm(q, self.q_norm), positions), k, v

    def project_kv(self, h: torch.Tensor, positions: torch.Tensor, rope: Rope
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """K with its norm and RoPE, V as projected."""
        kv = (h @ self.wkv.T).view(h.shape[0], 2, N_HEADS, HEAD_DIM)
        k = rope(rms_norm(kv[:, 0], self.k_norm), positions)
        return k, kv[:, 1].contiguous()

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.o_proj(x, attn))

    def o_proj(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The residual stream after the attention's output projection."""
        return x + attn @ self.wo.T

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The layer's output: the residual stream plus the gated MLP of its norm."""
        h = rms_norm(x, self.ln2)
        return x + (torch.nn.functional.silu(h @ self.w_gate.T) * (h @ self.w_up.T)) @ self.w_down.T


class TargetCache:
    """One request's target K/V, one row per token the target has consumed."""

    def __init__(self, n_layers: int) -> None:
        self.k: list[torch.Tensor] = [torch.zeros(0, N_HEADS, HEAD_DIM, dtype=DTYPE)] * n_layers
        self.v: list[torch.Tensor] = list(self.k)

    def __len__(self) -> int:
        return self.k[0].shape[0]


@dataclass
class Target:
    embed: torch.Tensor  # [V, d]
    layers: list[AttnLayer]
    final_norm: torch.Tensor
    head: torch.Tensor  # [V, d]
    taps: tuple[int, ...]  # layer indices whose outputs the drafter reads
    rope: Rope

    def new_cache(self) -> TargetCache:
        return TargetCache(len(self.layers))

    def consume(self, cache: TargetCache, token: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed one token at the next position: (next-token logits `[V]`, tapped features `[F]`).

        One row at a time, so what the target computes for a position depends only on the tokens
        before it, never on how many tokens a step happened to verify: two arms that reach the
        same context hold bit-identical features.
        """
        pos = torch.tensor([len(cache)])
        x = self.embed[token][None, :]
        tapped = []
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(x, pos, self.rope)
            cache.k[i] = torch.cat([cache.k[i], k])
            cache.v[i] = torch.cat([cache.v[i], v])
            x = layer.finish(x, attend(q, cache.k[i], cache.v[i], None))
            if i in self.taps:
                tapped.append(x)
        return (rms_norm(x, self.final_norm) @ self.head.T)[0], torch.cat(tapped, dim=-1)[0]


@dataclass
class Drafter:
    fc: torch.Tensor  # [d, F]
    hidden_norm: torch.Tensor
    mask_embed: torch.Tensor  # [d]
    layers: list[AttnLayer]
    masks: tuple[tuple[str, int], ...]  # (kind, window) per layer
    final_norm: torch.Tensor
    head_bias: torch.Tensor  # [V]; zero except in the degenerate fixture
    edge: torch.Tensor  # [d, d] DFlash2 pairwise edge form over the target embeddings
    target: Target
    # The target's embeddings, LM head and RoPE as the draft reads them: in the draft's dtype.
    embed: torch.Tensor
    head: torch.Tensor
    rope: Rope

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.dtype

    def context_kv(self, features: torch.Tensor, start: int
                   ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per draft layer, K/V `[n,H,D]` of context tokens at start.. from tapped features `[n,F]`.

        Row by row, for the reason `Target.consume` gives.
        """
        per_row = []
        features = features.to(self.dtype)
        for j in range(features.shape[0]):
            h = rms_norm(features[j:j + 1] @ self.fc.T, self.hidden_norm)
            pos = torch.tensor([start + j])
            per_row.append([layer.project_kv(h, pos, self.rope) for layer in self.layers])
        return [(torch.cat([row[i][0] for row in per_row]), torch.cat([row[i][1] for row in per_row]))
                for i in range(len(self.layers))]

    def block_logits(self, store: KVStore, req: str, anchor: int, k: int,
                     mutation: str = "none", kernel: Kernel | None = None,
                     tap: Tap | None = None, coverage: Coverage | None = None) -> torch.Tensor:
        """Logits `[1+k, V]` of the block `[anchor, mask x k]` that follows the stored context.

        `tap(name, output)` sees each module's output in forward order (difftest.runners.reference.faults
        names them) and returns what the forward goes on with: a planted fault, or a capture.
        The logits come back as float32 whatever the draft's dtype (exact: a widening)."""
        def out_of(name: str, value: torch.Tensor) -> torch.Tensor:
            return value if tap is None else tap(name, value)

        ctx = store.context_len(req)
        if ctx < 1:
            raise ValueError(f"request {req!r} has no context in the store")
        tq = 1 + k
        q_pos = torch.arange(ctx, ctx + tq)
        x = out_of("embed", torch.cat([self.embed[anchor][None, :],
                                       self.mask_embed[None, :].expand(k, -1)]))
        n_keys = 0
        edge = False
        for i, layer in enumerate(self.layers):
            q, blk_k, blk_v = layer.qkv(x, q_pos, self.rope)
            q = out_of(f"layers.{i}.q", q)
            k_all, v_all = store.block_kv(req, i, blk_k, blk_v, mutation)
            kind, window = self.masks[i]
            if coverage is not None and window_edge(kind, window, ctx + k):
                edge = True
            window = window_of(mutation, kind, window)
            if mutation == "causal-mask":
                kind = forced_causal(kind)
            n_keys = k_all.shape[0]
            attn = kernel or attend
            a = out_of(f"layers.{i}.attn",
                       attn(q, k_all, v_all, allowed_keys(q_pos, n_keys, kind, window)))
            x = out_of(f"layers.{i}.o_proj", layer.o_proj(x, a))
            x = out_of(f"layers.{i}.mlp", layer.mlp(x))
        store.count(tq, n_keys)
        if coverage is not None:
            coverage.blocks += 1
            coverage.window_edges += edge
            coverage.fired += edge and mutation == "sliding-window-edge"
            # the attention mutations act on every block
            coverage.fired += mutation in ("causal-mask", "skip-kv-write", "stale-seq-lens")
        out = out_of("final_norm", rms_norm(x, self.final_norm))
        return out_of("head", out @ self.head.T + self.head_bias).to(torch.float32)

    def edge_scores(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """`[len(a), len(b)]` scores of candidate a followed by candidate b."""
        ea = torch.nn.functional.normalize(self.embed[a], dim=-1)
        eb = torch.nn.functional.normalize(self.embed[b], dim=-1)
        return ea @ self.edge @ eb.T


def _layer(gen: torch.Generator, attn_scale: float, norm_gain: float) -> AttnLayer:
    def w(*shape: int, scale: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=DTYPE) * scale

    d, hd, f = D_MODEL, N_HEADS * HEAD_DIM, D_FFN
    return AttnLayer(
        ln1=torch.ones(d, dtype=DTYPE), wq=w(hd, d, scale=d ** -0.5),
        wkv=w(2 * hd, d, scale=d ** -0.5),
        q_norm=torch.full((HEAD_DIM,), norm_gain, dtype=DTYPE),
        k_norm=torch.full((HEAD_DIM,), norm_gain, dtype=DTYPE),
        wo=w(d, hd, scale=attn_scale * hd ** -0.5), ln2=torch.ones(d, dtype=DTYPE),
        w_gate=w(f, d, scale=d ** -0.5), w_up=w(f, d, scale=d ** -0.5),
        w_down=w(d, f, scale=0.5 * f ** -0.5))


@dataclass(frozen=True)
class Tuning:
    """The synthetic weights' scales in one place, chosen by measuring the informative fixture
    (varied drafts, part of them accepted, every mutation visible in the drafts) and then fixed."""

    target_attn: float = 0.3
    draft_attn: float = 0.5
    draft_norm_gain: float = 2.0
    mask_scale: float = 0.2
    head_scale: float = 0.5
    edge_scale: float = 1.0
    token_channel: float = 4.0  # share of every token embedding along one common direction
    anchor_key: float = 5.0
    copy_gain: float = 1.0


def tap_layers(target_layers: int) -> tuple[int, ...]:
    """The target layers whose outputs the drafter reads: the first and the last."""
    return tuple(sorted({0, target_layers - 1}))


def _unit(x: torch.Tensor) -> torch.Tensor:
    unit: torch.Tensor = x / x.norm()
    return unit


def _without(x: torch.Tensor, c: torch.Tensor, dim: int) -> torch.Tensor:
    """x with its component along unit vector c removed, along dimension dim (0: rows' outputs)."""
    if dim == 0:
        return x - c[:, None] * (c @ x)[None, :]
    return x - (x @ c)[:, None] * c[None, :]


def _anchor_layer(gen: torch.Generator, t: Tuning, c: torch.Tensor, mask_dir: torch.Tensor
                  ) -> AttnLayer:
    """The first draft layer, set by hand to do what training teaches it: read the anchor.

    Every token embedding carries the common direction c, which context features and the mask
    embedding lack; the K projection turns c into one key per head on RoPE's fastest pair, and the
    mask rows' query is that key turned back one position. Row 1 then attends almost only to the
    anchor, row 2 mostly, later rows away from it and over the context. V and O are an orthogonal
    pair, so what row 1 reads is close to the anchor's own normalised embedding.
    """
    layer = _layer(gen, attn_scale=t.draft_attn, norm_gain=t.draft_norm_gain)
    d, hd, half = D_MODEL, N_HEADS * HEAD_DIM, HEAD_DIM // 2
    key = torch.zeros(HEAD_DIM, dtype=DTYPE)
    key[0] = 1.0
    query = torch.zeros(HEAD_DIM, dtype=DTYPE)
    query[0], query[half] = math.cos(1.0), -math.sin(1.0)
    wk = layer.wkv[:hd] + t.anchor_key * torch.outer(key.repeat(N_HEADS), c)
    wq = 0.1 * layer.wq + torch.outer(query.repeat(N_HEADS), mask_dir)
    wv, _ = torch.linalg.qr(torch.randn(hd, d, generator=gen, dtype=torch.float64))
    wv = wv.to(DTYPE)
    return AttnLayer(ln1=layer.ln1, wq=wq, wkv=torch.cat([wk, wv]), q_norm=layer.q_norm,
                     k_norm=layer.k_norm, wo=t.copy_gain * wv.T.contiguous(), ln2=layer.ln2,
                     w_gate=layer.w_gate, w_up=layer.w_up, w_down=layer.w_down)


def build(options: RunnerOptions, max_positions: int, tuning: Tuning = Tuning()) -> Drafter:
    """Seeded target and drafter for these options; the fixture only changes the head bias."""
    t = tuning
    gen = torch.Generator().manual_seed(options.seed)
    d, vocab = D_MODEL, options.vocab
    c = _unit(torch.randn(d, generator=gen, dtype=DTYPE))
    embed = torch.randn(vocab, d, generator=gen, dtype=DTYPE) + t.token_channel * c
    t_layers = [_layer(gen, attn_scale=t.target_attn, norm_gain=1.0)
                for _ in range(options.target_layers)]
    # The head ignores the common direction, so it biases no id.
    head = _without(torch.randn(vocab, d, generator=gen, dtype=DTYPE) * t.head_scale, c, 1)
    taps = tap_layers(options.target_layers)
    target = Target(embed=embed, layers=t_layers, final_norm=torch.ones(d, dtype=DTYPE),
                    head=head, taps=taps, rope=Rope(max_positions, HEAD_DIM))
    mask_embed = _without(torch.randn(1, d, generator=gen, dtype=DTYPE) * t.mask_scale, c, 1)[0]
    fc = _without(torch.randn(d, d * len(taps), generator=gen, dtype=DTYPE)
                  * (d * len(taps)) ** -0.5, c, 0)
    # Layer 0 reads the anchor; the MLPs are the target's, so what it read is mapped as the target
    # would map it; the later layers' attention is free to follow the context.
    d_layers = [_anchor_layer(gen, t, c, _unit(mask_embed))]
    d_layers += [_layer(gen, attn_scale=t.draft_attn, norm_gain=t.draft_norm_gain)
                 for _ in range(options.layers - 1)]
    for i, layer in enumerate(d_layers):
        base = t_layers[i % len(t_layers)]
        layer.w_gate, layer.w_up, layer.w_down = base.w_gate, base.w_up, base.w_down
    edge = torch.randn(d, d, generator=gen, dtype=DTYPE) * t.edge_scale
    head_bias = torch.zeros(vocab, dtype=DTYPE)
    if options.fixture == "degenerate":
        head_bias[DEGENERATE_ID] = DEGENERATE_BIAS
    # Drawn in float32 whatever the draft dtype, so both dtypes round the same weights.
    dt = getattr(torch, options.draft_dtype)
    return Drafter(fc=fc.to(dt), hidden_norm=torch.ones(d, dtype=dt), mask_embed=mask_embed.to(dt),
                   layers=[_cast(layer, dt) for layer in d_layers], masks=options.masks(),
                   final_norm=torch.ones(d, dtype=dt), head_bias=head_bias.to(dt),
                   edge=edge.to(dt), target=target, embed=embed.to(dt), head=head.to(dt),
                   rope=Rope(max_positions, HEAD_DIM, dt))


def _cast(layer: AttnLayer, dtype: torch.dtype) -> AttnLayer:
    """The layer with every weight in dtype (the same tensors when it is theirs already)."""
    return AttnLayer(**{f.name: getattr(layer, f.name).to(dtype) for f in fields(layer)})
