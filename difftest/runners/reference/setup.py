"""A reference run's parts, greedy and sampled alike: its prompts, KV store and attention kernel,
the planted fault's tap, the settings it prints as `[spec-config]`, and the records a run
returns (difftest.runners.reference.runner's loop and .sampling's both build a run of these)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from difftest.runners.reference.attention import (Kernel, KVStore, MaterializedKVStore, PagedKVStore,
                                                  RouteCounters, pages_needed)
from difftest.runners.reference.bugs import Coverage, CorpusPagedKVStore, ReversedKernel
from difftest.runners.reference.faults import Fault
from difftest.runners.reference.model import HEAD_DIM, N_HEADS, Drafter, Tap, TargetCache
from difftest.runners.reference.options import RunnerOptions


@dataclass
class VerifyRecord:
    """One request's block at one verify step, as traced, plus its full raw logits."""

    req: str
    pos: int
    draft: list[int]
    emit: list[int]
    logits: torch.Tensor  # [k, V] raw logits of rows 1..k

    @property
    def ns(self) -> int:
        return len(self.emit)

    @property
    def acc(self) -> int:
        return max(self.ns - 1, 0)


@dataclass
class RunResult:
    lines: list[str]  # trace lines in print order
    generated: dict[str, list[int]]  # ids generated per request (prompt excluded)
    prompts: dict[str, list[int]]
    records: list[VerifyRecord]
    route: RouteCounters
    store: KVStore = field(repr=False)

    def stdout_lines(self) -> list[str]:
        return [f"{req}: {' '.join(map(str, ids))}" for req, ids in self.generated.items()]


def max_positions(options: RunnerOptions) -> int:
    """Every position a run can touch: longest prompt, every step fully accepted, one more block."""
    return options.prompt_len + options.requests + (options.steps + 2) * (options.k + 1)


def make_store(options: RunnerOptions, lane: str | None = None,
               coverage: Coverage | None = None) -> KVStore:
    lane = lane or options.lane
    if lane == "paged":
        return CorpusPagedKVStore(options.layers, N_HEADS, HEAD_DIM,
                                  pages_needed(max_positions(options), options.requests),
                                  options.seed, draft_dtype(options), options.mutation,
                                  coverage or Coverage())
    return MaterializedKVStore(options.layers, N_HEADS, HEAD_DIM, draft_dtype(options))


def draft_dtype(options: RunnerOptions) -> torch.dtype:
    """The torch dtype the draft forward and its K/V store run in."""
    dtype: torch.dtype = getattr(torch, options.draft_dtype)
    return dtype


def make_prompts(options: RunnerOptions) -> dict[str, list[int]]:
    """Request i gets prompt_len + i seeded ids, so requests sit at different positions; with a
    shared prefix, requests after the first begin with the first one's first ids."""
    gen = torch.Generator().manual_seed(options.seed + 104729)
    prompts = {f"r{i}": torch.randint(0, options.vocab, (options.prompt_len + i,),
                                      generator=gen).tolist()
               for i in range(options.requests)}
    shared = prompts["r0"][:options.shared_prefix]
    for ids in prompts.values():
        ids[:len(shared)] = shared
    return prompts


def make_kernel(options: RunnerOptions) -> Kernel:
    """The draft attention of these options; a nondeterministic one draws its seed from the OS
    unless `nondet_seed` fixes it."""
    if options.mutation == "control-reordered-reduction":
        return ReversedKernel()
    generator = None
    if options.nondeterministic:
        seed = options.nondet_seed
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") >> 1
        generator = torch.Generator().manual_seed(seed)
    return Kernel(split=options.attention_kernel == "split", generator=generator)


@dataclass
class Request:
    name: str
    cache: TargetCache
    tokens: list[int]
    pending: list[torch.Tensor]  # tapped features of consumed tokens not yet in the draft store
    generated: list[int] = field(default_factory=list)
    finished: bool = False  # committed its end-of-sequence id


def applied(options: RunnerOptions, store: KVStore, kernel: Kernel,
            drafter: Drafter) -> dict[str, object]:
    """The `[spec-config]` settings, read from the objects the run built (the store's class, the
    kernel's shape, the weights' dtypes), not from what the options asked for."""
    return {
        "lane": "paged" if isinstance(store, PagedKVStore) else "materialized",
        "attention": kernel.label,
        "nondeterministic": kernel.generator is not None,
        "dtype_target": str(drafter.target.head.dtype).removeprefix("torch."),
        "dtype_draft": str(drafter.fc.dtype).removeprefix("torch."),
        "drafter": options.drafter,
        "scalars": "on" if options.scalars and options.drafter == "dflash2" else "off",
        "mutation": options.mutation,
        "fixture": options.fixture,
        "threads": torch.get_num_threads(),
        "k": options.k,
        "topk": options.topk,
        "vocab": options.vocab,
        "requests": options.requests,
        "seed": options.seed,
        # the input's shape, in the syntax of the options that set it (so `difftest sweep` can
        # check that its generated arguments reached the runner); the optional ones named only
        # when set
        "prompt_len": options.prompt_len,
        **({"draft_lens": ",".join(map(str, options.draft_lens))} if options.draft_lens else {}),
        **({"layer_masks": ",".join(options.layer_masks)} if options.layer_masks else {}),
        **({"eos_id": options.eos_id} if options.eos_id >= 0 else {}),
        **({"shared_prefix": options.shared_prefix} if options.shared_prefix else {}),
        # noise planted on the drafter's block logits, named only when planted (the default
        # run's line stays as it was)
        **({"draft_noise": options.draft_noise} if options.draft_noise else {}),
    }


def fault_tap(fault: Fault | None, seed: int) -> Tap | None:
    """The draft-forward tap that plants a scale or noise fault (a mask fault is planted in the
    masks the drafter is built with). The noise is seeded, so reruns plant the same."""
    if fault is None or fault.kind == "mask":
        return None
    gen = torch.Generator().manual_seed(seed + 7919)

    def tap(name: str, x: torch.Tensor) -> torch.Tensor:
        if name != fault.module:
            return x
        if fault.kind == "scale":
            return x * (1.0 + fault.size)
        rms = x.pow(2).mean().sqrt()
        return x + fault.size * rms * torch.randn(x.shape, generator=gen, dtype=x.dtype)
    return tap
