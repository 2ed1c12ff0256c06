"""Block attention and the two lanes that feed it the same keys and values.

Both lanes end in one contiguous `[S, H, D]` key tensor and one value tensor, laid out by
absolute position, and hand them to the same `attend`: same op, same shapes, same reduction
order, hence bit-identical outputs. The lanes differ only in where the context K/V live and how
the block's K/V reach the read: the paged lane scatters them into a shared page pool through a
slot mapping and gathers `[0, bound)` back through the request's block table; the materialized
lane keeps each request's context contiguous and concatenates the block onto it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PAGE_SIZE = 16


def allowed_keys(q_pos: torch.Tensor, n_keys: int, kind: str, window: int) -> torch.Tensor | None:
    """Bool `[Tq, S]` of visible keys (keys sit at positions 0..S-1); None when all are visible."""
    if kind == "full":
        return None
    k_pos = torch.arange(n_keys)
    visible = torch.ones(q_pos.shape[0], n_keys, dtype=torch.bool)
    if kind in ("causal", "sliding-causal"):
        visible &= k_pos[None, :] <= q_pos[:, None]
    if kind in ("sliding", "sliding-causal"):
        visible &= k_pos[None, :] > q_pos[:, None] - window
    return visible


def forced_causal(kind: str) -> str:
    """What the causal-mask mutation turns a layer's mask into."""
    return {"full": "causal", "sliding": "sliding-causal"}.get(kind, kind)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           visible: torch.Tensor | None) -> torch.Tensor:
    """Softmax attention of `q [Tq,H,D]` over `k, v [S,H,D]`; returns `[Tq, H*D]`."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    qh = q.transpose(0, 1)
    scores = torch.matmul(qh, k.transpose(0, 1).transpose(1, 2)) * scale
    if visible is not None:
        scores = scores.masked_fill(~visible[None, :, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v.transpose(0, 1))
    return out.transpose(0, 1).reshape(q.shape[0], -1)


def attend_split(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 visible: torch.Tensor | None, chunk: int = PAGE_SIZE,
                 order: list[int] | None = None) -> torch.Tensor:
    """`attend` in the flash-decoding shape: the keys split into chunks of `chunk`, each chunk's
    partial softmax (its max, sum and weighted values), then one reduction of the partials with
    an online-softmax rescale. Equal to `attend` in exact arithmetic, rounding-different in
    float32. `order` permutes the order the partials are reduced in."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    qh, kh, vh = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    starts = list(range(0, k.shape[0], chunk))
    if order is not None:
        starts = [starts[i] for i in order]
    maxes, sums, outs = [], [], []
    for s0 in starts:
        scores = torch.matmul(qh, kh[:, s0:s0 + chunk].transpose(1, 2)) * scale
        if visible is not None:
            scores = scores.masked_fill(~visible[None, :, s0:s0 + chunk], float("-inf"))
        m = scores.amax(dim=-1, keepdim=True)
        # a chunk with no visible key contributes nothing (its max is -inf)
        p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        maxes.append(m)
        sums.append(p.sum(dim=-1, keepdim=True))
        outs.append(torch.matmul(p, vh[:, s0:s0 + chunk]))
    top = torch.stack(maxes).amax(dim=0)
    total = torch.zeros_like(sums[0])
    acc = torch.zeros_like(outs[0])
    for m, s, o in zip(maxes, sums, outs, strict=True):
        w = torch.where(torch.isfinite(m), torch.exp(m - top), torch.zeros_like(m))
        total = total + w * s
        acc = acc + w * o
    out = acc / total
    return out.transpose(0, 1).reshape(q.shape[0], -1)


class Kernel:
    """The draft block's attention as a lane computes it: `attend` or `attend_split`, and with a
    generator, keys (and chunk partials) reduced in an order drawn afresh at every call, the way
    GPU reductions with atomics differ from run to run."""

    def __init__(self, split: bool = False, generator: torch.Generator | None = None) -> None:
        self.split = split
        self.generator = generator

    @property
    def label(self) -> str:
        """The kernel's shape as `[spec-config]` names it."""
        return "split" if self.split else "single"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 visible: torch.Tensor | None) -> torch.Tensor:
        order = None
        if self.generator is not None:
            perm = torch.randperm(k.shape[0], generator=self.generator)
            k, v = k[perm], v[perm]
            visible = None if visible is None else visible[:, perm]
            chunks = -(-k.shape[0] // PAGE_SIZE)
            order = torch.randperm(chunks, generator=self.generator).tolist()
        if self.split:
            return attend_split(q, k, v, visible, order=order)
        return attend(q, k, v, visible)


@dataclass
class RouteCounters:
    """How many block reads went through each lane, printed as the `[dflash-route]` line."""

    paged_seam: int = 0
    combined: int = 0
    last_combined_q: int = 0
    last_combined_k: int = 0


class PagedKVStore:
    """A page pool shared by all requests: per-request block tables of pages taken from one free list.

    The free list is a seeded permutation of the pool, and requests allocate as they grow, so a
    request's pages are neither consecutive nor in order: a read that ignored the block table
    would gather another request's keys.
    """

    lane = "paged"

    def __init__(self, n_layers: int, n_heads: int, head_dim: int, num_pages: int, seed: int,
                 dtype: torch.dtype = torch.float32) -> None:
        slots = num_pages * PAGE_SIZE
        self.k = torch.zeros(n_layers, slots, n_heads, head_dim, dtype=dtype)
        self.v = torch.zeros(n_layers, slots, n_heads, head_dim, dtype=dtype)
        gen = torch.Generator().manual_seed(seed + 7919)
        self.free: list[int] = torch.randperm(num_pages, generator=gen).tolist()
        self.block_tables: dict[str, list[int]] = {}
        self.seq_lens: dict[str, int] = {}
        self.route = RouteCounters()

    def reserve(self, req: str, n_slots: int) -> None:
        """Take pages from the shared free list until the request can hold n_slots positions."""
        table = self.block_tables.setdefault(req, [])
        self.seq_lens.setdefault(req, 0)
        while len(table) * PAGE_SIZE < n_slots:
            if not self.free:
                raise RuntimeError("page pool exhausted")
            table.append(self.free.pop(0))

    def slot_mapping(self, req: str, start: int, stop: int) -> torch.Tensor:
        """Pool slots of positions [start, stop) of a request, through its block table."""
        table = torch.tensor(self.block_tables[req], dtype=torch.long)
        pos = torch.arange(start, stop)
        return table[pos // PAGE_SIZE] * PAGE_SIZE + pos % PAGE_SIZE

    def context_len(self, req: str) -> int:
        return self.seq_lens.get(req, 0)

    def append_context(self, req: str, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Write the K/V of newly accepted context tokens (every layer) after the stored ones."""
        start = self.context_len(req)
        n = kv[0][0].shape[0]
        self.reserve(req, start + n)
        slots = self.slot_mapping(req, start, start + n)
        for layer, (k, v) in enumerate(kv):
            self.k[layer].index_copy_(0, slots, k)
            self.v[layer].index_copy_(0, slots, v)
        self.seq_lens[req] = start + n

    def gather(self, req: str, layer: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions [0, n) of a request read through its block table."""
        slots = self.slot_mapping(req, 0, n)
        return self.k[layer].index_select(0, slots), self.v[layer].index_select(0, slots)

    def block_kv(self, req: str, layer: int, blk_k: torch.Tensor, blk_v: torch.Tensor,
                 mutation: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values the block attends over: store `[0, C)` then the block at `[C, C+Tq)`."""
        ctx = self.context_len(req)
        tq = blk_k.shape[0]
        self.reserve(req, ctx + tq)
        slots = self.slot_mapping(req, ctx, ctx + tq)
        write_first = mutation != "skip-kv-write"
        if write_first:
            self.k[layer].index_copy_(0, slots, blk_k)
            self.v[layer].index_copy_(0, slots, blk_v)
        # seq_lens extended by the block; the stale-seq-lens bug reads the store's own bound.
        bound = ctx if mutation == "stale-seq-lens" else ctx + tq
        k_all, v_all = self.gather(req, layer, bound)
        if not write_first:  # the write lands after the read: the next block finds it stale
            self.k[layer].index_copy_(0, slots, blk_k)
            self.v[layer].index_copy_(0, slots, blk_v)
        return k_all, v_all

    def count(self, tq: int, n_keys: int) -> None:
        self.route.paged_seam += 1


class MaterializedKVStore:
    """Per-request contiguous context K/V; the block is concatenated onto it for each read.

    `scratch` is the request's block buffer, indexed by position like the page pool, so that the
    skip-kv-write bug finds there what a late write left, exactly as the paged lane does.
    """

    lane = "materialized"

    def __init__(self, n_layers: int, n_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> None:
        self.n_layers = n_layers
        self.shape = (n_heads, head_dim)
        self.dtype = dtype
        self.ctx_k: dict[str, list[torch.Tensor]] = {}
        self.ctx_v: dict[str, list[torch.Tensor]] = {}
        self.scratch: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.route = RouteCounters()

    def _empty(self, n: int) -> torch.Tensor:
        return torch.zeros(n, *self.shape, dtype=self.dtype)

    def context_len(self, req: str) -> int:
        return self.ctx_k[req][0].shape[0] if req in self.ctx_k else 0

    def append_context(self, req: str, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        if req not in self.ctx_k:
            self.ctx_k[req] = [self._empty(0) for _ in range(self.n_layers)]
            self.ctx_v[req] = [self._empty(0) for _ in range(self.n_layers)]
        for layer, (k, v) in enumerate(kv):
            self.ctx_k[req][layer] = torch.cat([self.ctx_k[req][layer], k])
            self.ctx_v[req][layer] = torch.cat([self.ctx_v[req][layer], v])

    def _scratch(self, req: str, layer: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        bufs = self.scratch.setdefault(req, [(self._empty(0), self._empty(0))] * self.n_layers)
        k, v = bufs[layer]
        if k.shape[0] < n:
            grow = self._empty(n - k.shape[0])
            k, v = torch.cat([k, grow]), torch.cat([v, grow])
            bufs[layer] = (k, v)
        return k, v

    def block_kv(self, req: str, layer: int, blk_k: torch.Tensor, blk_v: torch.Tensor,
                 mutation: str) -> tuple[torch.Tensor, torch.Tensor]:
        ctx = self.context_len(req)
        tq = blk_k.shape[0]
        ctx_k, ctx_v = self.ctx_k[req][layer], self.ctx_v[req][layer]
        if mutation == "skip-kv-write":  # concatenates what the block buffer held before this write
            sk, sv = self._scratch(req, layer, ctx + tq)
            k_all = torch.cat([ctx_k, sk[ctx:ctx + tq].clone()])
            v_all = torch.cat([ctx_v, sv[ctx:ctx + tq].clone()])
            sk[ctx:ctx + tq] = blk_k
            sv[ctx:ctx + tq] = blk_v
        else:
            k_all = torch.cat([ctx_k, blk_k])
            v_all = torch.cat([ctx_v, blk_v])
        if mutation == "stale-seq-lens":
            k_all, v_all = k_all[:ctx], v_all[:ctx]
        return k_all, v_all

    def count(self, tq: int, n_keys: int) -> None:
        self.route.combined += 1
        self.route.last_combined_q = tq
        self.route.last_combined_k = n_keys


KVStore = PagedKVStore | MaterializedKVStore


def pages_needed(max_positions: int, requests: int) -> int:
    """Pool size for `requests` requests of up to max_positions positions, plus one spare page each."""
    return requests * (-(-max_positions // PAGE_SIZE) + 1)
