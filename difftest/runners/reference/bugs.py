"""The bug corpus (difftest.core.corpus) as real bugs of the runner's state, and the coverage
counters that say what state a run exercised.

Each mutation acts where its class lives: the page tables of the paged store, the sliding
window's mask, the target's verify with its rollback, the acceptance loop, the end-of-sequence
check, the features handed to the drafter. None substitutes tokens: a bug changes what its
state holds or how it is read, and shows only when an input reaches that state. `fired` counts
the times a mutation's code path computed something other than the correct one did, so a run
can say that its bug never acted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from difftest.core.corpus import CoverageClass, window_read
from difftest.core.corpus import window_edge as past_window
from difftest.runners.reference.attention import PAGE_SIZE, Kernel, PagedKVStore, attend_split

@dataclass
class Coverage:
    """What a run exercised, printed once as the `[spec-coverage]` line."""

    blocks: int = 0
    page_cross: int = 0
    page_end: int = 0
    page_order: int = 0
    widths: Counter[int] = field(default_factory=Counter)
    rejections: int = 0
    rollbacks: int = 0
    full_accepts: int = 0
    batch: int = 0
    window_edges: int = 0
    eos: int = 0
    eos_bonus: int = 0
    prefix_shared: int = 0
    prefix_partial: int = 0
    fired: int = 0

    def fields(self, paged: bool) -> dict[str, object]:
        """The line's `key=value` settings, in print order (page counters only where pages are)."""
        out: dict[str, object] = {"blocks": self.blocks,
                                  "page_size": PAGE_SIZE if paged else 0,
                                  CoverageClass.PAGE_BOUNDARY.value: self.page_cross,
                                  CoverageClass.PAGE_END.value: self.page_end,
                                  CoverageClass.PAGE_ORDER.value: self.page_order,
                                  CoverageClass.VERIFY_WIDTHS.value: ",".join(
                                      f"{w}:{n}" for w, n in sorted(self.widths.items())) or "-",
                                  CoverageClass.REJECTION.value: self.rejections,
                                  "rollbacks": self.rollbacks,
                                  CoverageClass.FULL_ACCEPT.value: self.full_accepts,
                                  CoverageClass.BATCH.value: self.batch,
                                  CoverageClass.WINDOW_EDGE.value: self.window_edges,
                                  CoverageClass.EOS.value: self.eos,
                                  CoverageClass.EOS_BONUS.value: self.eos_bonus,
                                  CoverageClass.PREFIX_SHARED.value: self.prefix_shared,
                                  CoverageClass.PREFIX_PARTIAL.value: self.prefix_partial,
                                  "fired": self.fired}
        return out


class CorpusPagedKVStore(PagedKVStore):
    """The paged store with its page-table bugs, counting the page state each block read meets."""

    def __init__(self, n_layers: int, n_heads: int, head_dim: int, num_pages: int, seed: int,
                 dtype: torch.dtype, mutation: str, coverage: Coverage) -> None:
        # a different but exact page layout: the same pool, the free list shuffled otherwise
        shuffle = seed + 1 if mutation == "control-page-layout" else seed
        super().__init__(n_layers, n_heads, head_dim, num_pages, shuffle, dtype)
        self.mutation = mutation
        self.coverage = coverage

    def share_prefix(self, req: str, donor: str, n: int) -> None:
        """Prefix caching: req's first n positions hold the donor's tokens, so it takes the donor's
        pages that hold only those. The bug takes the partly filled page too, which both then
        write their own tokens into."""
        full = n // PAGE_SIZE
        take = -(-n // PAGE_SIZE) if self.mutation == "prefix-cache-partial-page" else full
        held = self.block_tables.get(donor, [])
        pages = held[:take]
        if n % PAGE_SIZE and len(held) > full:  # the donor holds a partly shared page
            self.coverage.prefix_partial += 1
        if take > full and len(pages) > full:
            self.coverage.fired += 1
        self.block_tables[req] = list(pages)
        self.seq_lens.setdefault(req, 0)
        self.coverage.prefix_shared += 1

    def _bound_of(self, req: str, right: int) -> int:
        """How many keys the block read takes: the mutations' wrong bounds, else `right`."""
        if self.mutation == "page-boundary-off-by-one" and right % PAGE_SIZE == 0:
            # the last page's valid length taken as seq_len % page_size: 0 at a boundary
            return right - PAGE_SIZE
        if self.mutation == "batch-seq-lens-shift" and len(self.seq_lens) > 1:
            names = sorted(self.seq_lens)
            other = names[(names.index(req) + 1) % len(names)]
            return right - self.seq_lens[req] + self.seq_lens[other]
        return right

    def _slots(self, req: str, start: int, stop: int, ordered: bool) -> torch.Tensor:
        table = self.block_tables[req]
        if not ordered:
            table = sorted(table[:-(-stop // PAGE_SIZE)]) + table[-(-stop // PAGE_SIZE):]
        pages = torch.tensor(table, dtype=torch.long)
        pos = torch.arange(start, stop)
        slots: torch.Tensor = pages[pos // PAGE_SIZE] * PAGE_SIZE + pos % PAGE_SIZE
        return slots

    def block_kv(self, req: str, layer: int, blk_k: torch.Tensor, blk_v: torch.Tensor,
                 mutation: str) -> tuple[torch.Tensor, torch.Tensor]:
        ctx = self.context_len(req)
        tq = blk_k.shape[0]
        if mutation in ("causal-mask", "skip-kv-write", "stale-seq-lens"):
            return super().block_kv(req, layer, blk_k, blk_v, mutation)
        self.reserve(req, ctx + tq)
        table = self.block_tables[req][:-(-(ctx + tq) // PAGE_SIZE)]
        first = layer == 0
        if first:
            self.coverage.page_cross += ctx // PAGE_SIZE != (ctx + tq) // PAGE_SIZE
            self.coverage.page_end += (ctx + tq) % PAGE_SIZE == 0
            self.coverage.page_order += table != sorted(table)
        slots = self.slot_mapping(req, ctx, ctx + tq)
        if mutation == "block-crosses-page":
            # the block's slots taken as contiguous from its first one, as if it fit in a page
            pool = self.k.shape[1]
            wrong = (slots[0] + torch.arange(tq)) % pool
            if first and not torch.equal(wrong, slots):
                self.coverage.fired += 1
            slots = wrong
        self.k[layer].index_copy_(0, slots, blk_k)
        self.v[layer].index_copy_(0, slots, blk_v)
        bound = self._bound_of(req, ctx + tq)
        self.reserve(req, bound)
        ordered = mutation != "block-table-order"
        if first and (bound != ctx + tq or (not ordered and table != sorted(table))):
            self.coverage.fired += 1
        read = self._slots(req, 0, bound, ordered)
        return self.k[layer].index_select(0, read), self.v[layer].index_select(0, read)


class ReversedKernel(Kernel):
    """The split kernel with its chunk partials reduced last to first: a reordered reduction,
    equal in exact arithmetic, rounding-different in float32."""

    label = "split-reversed"

    def __init__(self) -> None:
        super().__init__(split=True)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 visible: torch.Tensor | None) -> torch.Tensor:
        chunks = -(-k.shape[0] // PAGE_SIZE)
        return attend_split(q, k, v, visible, order=list(range(chunks))[::-1])


def window_of(mutation: str, kind: str, window: int) -> int:
    """A layer's sliding window as the mask reads it: one key too many under the edge bug."""
    return window_read(mutation, window) if kind == "sliding" else window


def window_edge(kind: str, window: int, last_query: int) -> bool:
    """Whether a sliding window leaves out a key of this block (its last query sees furthest)."""
    return kind == "sliding" and past_window(window, last_query)


class StaleHidden:
    """`drafter-stale-hidden`: the context rows appended at a step get the features one row
    behind, the first of them the previous step's last (a buffer read a step late)."""

    def __init__(self) -> None:
        self.last: dict[str, torch.Tensor] = {}

    def features(self, req: str, pending: list[torch.Tensor], coverage: Coverage
                 ) -> list[torch.Tensor]:
        prev = self.last.get(req)
        self.last[req] = pending[-1]
        if prev is None:  # the prompt: nothing from an earlier step to mix in
            return pending
        coverage.fired += 1
        return [prev, *pending[:-1]]
