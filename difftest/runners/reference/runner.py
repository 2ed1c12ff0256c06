"""The speculative-decoding loop: draft a block per request, verify it greedily, trace both."""

from __future__ import annotations

import os
import time
from pathlib import Path
from dataclasses import dataclass, field
from collections.abc import Callable

import torch

from difftest.core.corpus import cycled_len
from difftest.core.force import ForceStream, forced_line
from difftest.runners.reference import trace
from difftest.runners.reference.attention import (Kernel, KVStore, MaterializedKVStore, PagedKVStore,
                                          RouteCounters, pages_needed)
from difftest.runners.reference.bugs import (Coverage, CorpusPagedKVStore, ReversedKernel,
                                             StaleHidden, verify_block)
from difftest.runners.reference.drafter import Selection, dflash1, dflash2, top_entries
from difftest.runners.reference.faults import Fault
from difftest.runners.reference.model import (D_MODEL, DTYPE, HEAD_DIM, N_HEADS, Drafter, Tap, Target,
                                      TargetCache, build, tap_layers)
from difftest.runners.reference.options import RunnerOptions

TOP_LOGITS = 8  # entries per `[spec-logits]` line


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


def select(drafter: Drafter, options: RunnerOptions, rows: torch.Tensor) -> Selection:
    if options.drafter == "dflash1":
        return dflash1(rows)
    if options.scalars:
        return dflash2(drafter, rows, options.topk, options.output_multiplier,
                       options.final_logit_softcapping)
    return dflash2(drafter, rows, options.topk, 1.0, None)


def top_pairs(row: torch.Tensor) -> list[tuple[int, float]]:
    ids, vals = top_entries(row, TOP_LOGITS)
    return list(zip(ids.tolist(), vals.tolist(), strict=False))


@dataclass
class _Request:
    name: str
    cache: TargetCache
    tokens: list[int]
    pending: list[torch.Tensor]  # tapped features of consumed tokens not yet in the draft store
    generated: list[int] = field(default_factory=list)
    finished: bool = False  # committed its end-of-sequence id


class ForceMismatch(Exception):
    """The force file has no step where this run stands: it came from another prompt set."""


def run(options: RunnerOptions, level: int,
        sink: Callable[[str], None] | None = None,
        force: ForceStream | None = None,
        capture: tuple[str, int] | None = None, capture_dir: Path | None = None) -> RunResult:
    """Run the loop; trace lines at `level` (0..3) are returned and, as they happen, given to sink.

    With `force` (teacher forcing, difftest.core.force) each step drafts and verifies as usual, traces
    what it would have emitted, then commits the forced tokens instead. With `capture`
    (request, pos) the draft forward of that one step prints a `[spec-act]` line per module and
    saves each output under `capture_dir` (difftest.core.activations)."""
    if options.sampled:  # a temperature, or the target alone: difftest.runners.reference.sampling
        if force is not None or capture is not None:
            raise ValueError("teacher forcing and capture are greedy-only")
        from difftest.runners.reference.sampling import run_sampled
        return run_sampled(options, level, sink)
    torch.set_num_threads(1)
    lines: list[str] = []

    def emit_line(line: str) -> None:
        lines.append(line)
        if sink is not None:
            sink(line)

    drafter = build(options, max_positions(options))
    target = drafter.target
    coverage = Coverage()
    stale = StaleHidden() if options.mutation == "drafter-stale-hidden" else None
    store = make_store(options, coverage=coverage)
    kernel = make_kernel(options)
    prompts = make_prompts(options)
    noise = torch.Generator().manual_seed(options.seed + 7919) if options.draft_noise else None
    k = options.k
    tap = fault_tap(options.planted(), options.seed)
    if level >= 1:
        settings = applied(options, store, kernel, drafter)
        if options.fault:  # keys only when in effect: a plain run prints what it always did
            settings["fault"] = options.planted().text  # type: ignore[union-attr]
        if force is not None:
            settings["forced"] = True
        emit_line(trace.spec_config(settings))
    reqs: list[_Request] = []
    with torch.no_grad():
        for name, prompt in prompts.items():
            r = _Request(name, target.new_cache(), list(prompt), [])
            for tok in prompt:
                logits, feat = target.consume(r.cache, tok)
                r.pending.append(feat)
            first = int(logits.argmax())
            r.tokens.append(first)
            r.generated.append(first)
            reqs.append(r)

        records: list[VerifyRecord] = []
        order = reqs[::-1] if options.mutation == "control-request-order" else reqs
        for step in range(options.steps):
            pre = fwd = sample = sel_ms = walk_ms = 0.0
            blocks = []
            active = [r for r in order if not r.finished]
            if not active:
                break
            coverage.batch = max(coverage.batch, len(active))
            for r in active:
                t0 = time.perf_counter()
                start = store.context_len(r.name)
                if start == 0 and options.shared_prefix and r is not reqs[0] \
                        and isinstance(store, CorpusPagedKVStore):
                    store.share_prefix(r.name, reqs[0].name, options.shared_prefix)
                feats = r.pending if stale is None else stale.features(r.name, r.pending, coverage)
                store.append_context(r.name, drafter.context_kv(torch.stack(feats), start))
                r.pending = []
                t1 = time.perf_counter()
                step_tap = tap
                if capture == (r.name, len(r.tokens)):
                    step_tap = capture_tap(r.name, len(r.tokens), tap,
                                           emit_line if level >= 1 else None, capture_dir)
                block = drafter.block_logits(store, r.name, r.tokens[-1], k, options.mutation,
                                             kernel, step_tap, coverage)
                if noise is not None:
                    block = block + options.draft_noise * torch.randn(
                        block.shape, generator=noise, dtype=block.dtype)
                t2 = time.perf_counter()
                chosen = select(drafter, options, block[1:])
                n = draft_len(options, step, reqs.index(r))
                t3 = time.perf_counter()
                pre += (t1 - t0) * 1e3
                fwd += (t2 - t1) * 1e3
                sample += (t3 - t2) * 1e3
                sel_ms += chosen.select_ms
                walk_ms += chosen.walk_ms
                blocks.append((block[1:n + 1], chosen.draft[:n]))
            if level >= 2 and options.drafter == "dflash2":
                emit_line(trace.spec_phase_dev(pre, fwd, sel_ms, walk_ms))
            if level >= 1:
                first = min(range(len(active)), key=lambda i: reqs.index(active[i]))
                emit_line(trace.spec_phase(pre, fwd, sample, len(active) * (k + 1) * options.vocab))
                emit_line(trace.spec_propose(len(active), k + 1, k, blocks[first][1]))
            for r, (rows, draft) in zip(active, blocks, strict=True):
                pos = len(r.tokens)
                if force is None:
                    emitted = verify(target, r, draft, options, coverage)
                    committed = None
                else:
                    emitted, committed = forced_verify(target, r, draft, force, options, coverage)
                records.append(VerifyRecord(r.name, pos, draft, emitted, rows))
                if level >= 3:
                    for i, row in enumerate(rows, start=1):
                        emit_line(trace.spec_logits(r.name, pos, i, top_pairs(row)))
                if level >= 1:
                    ns = len(emitted)
                    emit_line(trace.spectrace(r.name, pos, len(draft), ns, max(ns - 1, 0), draft,
                                              emitted))
                    if committed is not None:
                        emit_line(forced_line(r.name, pos, committed))
    route = store.route
    if level >= 1:
        emit_line(trace.spec_coverage(coverage.fields(isinstance(store, PagedKVStore))))
        emit_line(trace.dflash_route(route.paged_seam, route.combined, route.last_combined_q,
                                     route.last_combined_k))
    return RunResult(lines=lines, generated={r.name: r.generated for r in reqs}, prompts=prompts,
                     records=records, route=route, store=store)


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


def draft_len(options: RunnerOptions, step: int, index: int) -> int:
    """Tokens request `index` drafts at `step`: k, or its entry of the draft_lens cycle."""
    return cycled_len(options.draft_lens, options.k, step, index)


def verify(target: Target, r: _Request, draft: list[int], options: RunnerOptions | None = None,
           coverage: Coverage | None = None) -> list[int]:
    """Greedy lossless verify (difftest.runners.reference.bugs.verify_block): the longest prefix
    the target agrees with, then its own next id; the target's cache and the drafter's pending
    features are rolled back to the accepted rows, so the consumed rows become the next context.
    """
    options = options or RunnerOptions()
    done = verify_block(target, r.cache, r.pending, r.tokens[-1], draft, options.mutation,
                        coverage or Coverage(), options.eos_id)
    r.tokens.extend(done.emitted)
    r.generated.extend(done.emitted)
    r.finished = done.finished
    return done.emitted


def capture_tap(req: str, pos: int, inner: Tap | None,
                emit_line: Callable[[str], None] | None, folder: Path | None) -> Tap:
    """A tap that plants what `inner` plants, then records the module's output as it flows on."""
    from difftest.core.activations import capture_line, save_dump

    state = {"n": 0, "used": 0}

    def tap(name: str, x: torch.Tensor) -> torch.Tensor:
        y = inner(name, x) if inner is not None else x
        arr = y.detach().to(torch.float32).cpu().numpy()
        if emit_line is not None:
            emit_line(capture_line(req, pos, state["n"], name, arr))
        if folder is not None:
            state["used"] = save_dump(folder, state["n"], name, arr, state["used"])
        state["n"] += 1
        return y
    return tap


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


def forced_verify(target: Target, r: _Request, draft: list[int], force: ForceStream,
                  options: RunnerOptions | None = None, coverage: Coverage | None = None
                  ) -> tuple[list[int], list[int]]:
    """(what verify would have emitted, what was committed): verify on a copy of the request's
    state, then consume the forced tokens as verify would have consumed them."""
    pos = len(r.tokens)
    step = force.step_at(r.name, pos)
    if step is None:
        raise ForceMismatch(f"the force file has no step of request {r.name} at position {pos}")
    saved = (list(r.cache.k), list(r.cache.v), len(r.pending), len(r.tokens), len(r.generated))
    emitted = verify(target, r, draft, options, coverage)
    r.finished = False  # the forced stream, not this run's, decides where the request ends
    r.cache.k, r.cache.v = saved[0], saved[1]
    del r.pending[saved[2]:], r.tokens[saved[3]:], r.generated[saved[4]:]
    committed = list(step.tokens)
    _, feat = target.consume(r.cache, r.tokens[-1])
    r.pending.append(feat)
    for tok in committed[:-1]:
        _, feat = target.consume(r.cache, tok)
        r.pending.append(feat)
    r.tokens.extend(committed)
    r.generated.extend(committed)
    return emitted, committed


@dataclass
class BlockRun:
    """What `draft_blocks` computed: block logits `[1+k, V]` per request, and what made them."""

    logits: dict[str, torch.Tensor]
    store: KVStore = field(repr=False)
    drafter: Drafter = field(repr=False)


def draft_blocks(options: RunnerOptions, features: dict[str, torch.Tensor], anchors: dict[str, int],
                 lane: str | None = None, mutation: str | None = None, chunk: int = 5) -> BlockRun:
    """One draft forward per request over given context features `[C, F]`.

    The context goes into a fresh store of the lane in chunks, requests taking turns, as a run
    appends it step by step, so a paged store interleaves their pages. Lets tests compare the
    lanes on tensors directly, without the decoding loop around them.
    """
    torch.set_num_threads(1)
    longest = max(f.shape[0] for f in features.values())
    options = options.with_(prompt_len=max(options.prompt_len, longest))
    drafter = build(options, max_positions(options))
    store = make_store(options, lane)
    kernel = make_kernel(options)
    with torch.no_grad():
        for start in range(0, longest, chunk):
            for req, feats in features.items():
                part = feats[start:start + chunk]
                if part.shape[0]:
                    store.append_context(req, drafter.context_kv(part.to(DTYPE), start))
        logits = {req: drafter.block_logits(store, req, anchors[req], options.k,
                                            options.mutation if mutation is None else mutation,
                                            kernel)
                  for req in features}
    return BlockRun(logits=logits, store=store, drafter=drafter)


def feature_width(options: RunnerOptions) -> int:
    """Width F of the tapped target features the drafter reads."""
    return D_MODEL * len(tap_layers(options.target_layers))
