"""The speculative-decoding loop: draft a block per request, verify it greedily, trace both."""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass, field
from collections.abc import Callable

import torch

from difftest.core.corpus import cycled_len
from difftest.core.force import ForceStream, forced_line
from difftest.runners.reference import trace
from difftest.runners.reference.attention import KVStore, PagedKVStore
from difftest.runners.reference.bugs import Coverage, CorpusPagedKVStore, StaleHidden
from difftest.runners.reference.drafter import Selection, dflash1, dflash2, top_entries
from difftest.runners.reference.model import D_MODEL, DTYPE, Drafter, Tap, Target, build, tap_layers
from difftest.runners.reference.options import RunnerOptions
from difftest.runners.reference.setup import (Request, RunResult, VerifyRecord, applied, fault_tap,
                                              make_kernel, make_prompts, make_store, max_positions)
from difftest.runners.reference.verify import verify_block

TOP_LOGITS = 8  # entries per `[spec-logits]` line


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
    reqs: list[Request] = []
    with torch.no_grad():
        for name, prompt in prompts.items():
            r = Request(name, target.new_cache(), list(prompt), [])
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


def draft_len(options: RunnerOptions, step: int, index: int) -> int:
    """Tokens request `index` drafts at `step`: k, or its entry of the draft_lens cycle."""
    return cycled_len(options.draft_lens, options.k, step, index)


def verify(target: Target, r: Request, draft: list[int], options: RunnerOptions | None = None,
           coverage: Coverage | None = None) -> list[int]:
    """Greedy lossless verify (difftest.runners.reference.verify.verify_block): the longest prefix
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


def forced_verify(target: Target, r: Request, draft: list[int], force: ForceStream,
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
