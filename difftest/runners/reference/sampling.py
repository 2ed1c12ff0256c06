"""Sampled decoding: speculative sampling (Leviathan et al. 2023, Chen et al. 2023) and the
target alone, with temperature and top-p.

A verify of drafted tokens x_1..x_k, each drawn from the draft's distribution q_i of its row,
tests them in order: x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)), p_i the
target's distribution after the accepted prefix; at the first rejection the step emits a token
drawn from the normalised residual max(0, p_i - q_i) and stops; when all k are accepted it emits
a bonus token drawn from p_{k+1}. Temperature and top-p are applied to both models' logits
before the test, so the emitted stream follows the target's tempered, truncated distribution
exactly: speculative sampling is lossless in distribution, not in tokens.

Every draw is an inverse-CDF draw of one uniform (ids most probable first) from the run's
generator (`--sample-seed`, or a fresh seed each run), so the four known-wrong samplers
(`SAMPLED_MUTATIONS`) are each a small change of one line: the acceptance test reusing the
uniform that drew the token, a residual drawn without normalising, top-p on the draft only, the
temperature on the draft only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from difftest.runners.reference import trace
from difftest.runners.reference.attention import RouteCounters
from difftest.runners.reference.model import Target, TargetCache, build
from difftest.runners.reference.options import RunnerOptions
from difftest.runners.reference.setup import (Request, RunResult, VerifyRecord, applied, fault_tap,
                                              make_kernel, make_prompts, make_store, max_positions)

PROB = torch.float64  # the sampler's arithmetic: the model's float32 logits, widened


def warp(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """softmax(logits / temperature), then top-p: the smallest set of highest-probability ids
    (lower id first among equals) whose mass reaches top_p, renormalised."""
    probs = torch.softmax(logits.to(PROB) / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    values, ids = torch.sort(probs, descending=True, stable=True)
    before = torch.cumsum(values, dim=-1) - values  # mass of the ids ranked above each
    kept = torch.zeros_like(probs)
    keep = before < top_p
    kept[ids[keep]] = values[keep]
    return kept / kept.sum()


def draw(probs: torch.Tensor, u: float, *, normalised: bool = True) -> int:
    """The inverse-CDF draw of uniform u in [0, 1) from `probs`, ids taken most probable first
    (lower id first among equals), as a top-p sampler that has sorted them draws. A
    distribution that does not sum to one (`normalised=False`: the residual-unnormalised
    sampler) is read as it stands: a u beyond its mass falls off the end, onto the least
    probable id."""
    values, order = torch.sort(probs, descending=True, stable=True)
    cdf = torch.cumsum(values, dim=-1)
    if normalised:
        cdf = cdf / cdf[-1]
    idx = int(torch.searchsorted(cdf, torch.tensor([u], dtype=cdf.dtype), right=True)[0])
    if idx >= probs.shape[-1]:
        if not normalised:
            return int(order[-1])
        idx = probs.shape[-1] - 1
    while values[idx] <= 0 and idx > 0:  # rounding past the last id with mass: step back to it
        idx -= 1
    return int(order[idx])


@dataclass(frozen=True)
class Sampler:
    """The distributions a run samples from, and the verify's test: one place per rule, so each
    known-wrong sampler (`mutation`) changes exactly one of them."""

    temperature: float
    top_p: float
    mutation: str = "none"

    def target(self, logits: torch.Tensor) -> torch.Tensor:
        """p: the distribution the verify tests against and draws residual and bonus from."""
        if self.mutation == "top-p-draft-only":
            return warp(logits, self.temperature, 1.0)
        if self.mutation == "temperature-draft-only":
            return warp(logits, 1.0, self.top_p)
        return warp(logits, self.temperature, self.top_p)

    def plain(self, logits: torch.Tensor) -> torch.Tensor:
        """The target's distribution when nothing is drafted (the target alone, and the first
        token after the prompt): no speculative sampler is involved."""
        return warp(logits, self.temperature, self.top_p)

    def draft(self, logits: torch.Tensor) -> torch.Tensor:
        """q: the draft's distribution of one block row."""
        return warp(logits, self.temperature, self.top_p)

    def residual(self, p: torch.Tensor, q: torch.Tensor, u: float) -> int:
        """The token drawn at a rejection, from max(0, p - q) normalised (every id where p > q);
        where p equals q to the last bit (nothing to draw from) p itself."""
        rest = torch.clamp(p - q, min=0.0)
        if float(rest.sum()) <= 0.0:
            return draw(p, u)
        return draw(rest, u, normalised=self.mutation != "residual-unnormalised")


@dataclass(frozen=True)
class Verified:
    """One sampled verify: what it emitted and the test's record (the `[spec-sample]` line)."""

    emit: list[int]
    acc: int
    q: list[float]
    p: list[float]
    overlap: list[float]
    residual: int | None


def speculative_verify(sampler: Sampler, rows_q: torch.Tensor, draft: list[int],
                       u_draft: list[float], next_logits: Callable[[int | None], torch.Tensor],
                       uniform: Callable[[], float]) -> Verified:
    """Test drafted tokens `draft` (drawn from the rows `rows_q` with the uniforms `u_draft`)
    against the target. `next_logits(None)` gives the target's logits after the anchor,
    `next_logits(x)` after consuming accepted token x; `uniform()` is the run's next draw."""
    logits = next_logits(None)
    qs: list[float] = []
    ps: list[float] = []
    overlaps: list[float] = []
    emit: list[int] = []
    for i, x in enumerate(draft):
        p = sampler.target(logits)
        q = rows_q[i]
        qs.append(float(q[x]))
        ps.append(float(p[x]))
        overlaps.append(float(torch.minimum(p, q).sum()))
        u = u_draft[i] if sampler.mutation == "noise-reuse" else uniform()
        if u * float(q[x]) < float(p[x]):  # u < min(1, p(x) / q(x)), without dividing
            emit.append(x)
            logits = next_logits(x)
            continue
        y = sampler.residual(p, q, uniform())
        return Verified(emit + [y], len(emit), [float(rows_q[j][t]) for j, t in enumerate(draft)],
                        ps, overlaps, y)
    bonus = draw(sampler.target(logits), uniform())
    return Verified(emit + [bonus], len(emit), qs, ps, overlaps, None)


def sample_seed(options: RunnerOptions) -> int:
    """The run's sampler seed: the one given, or 63 bits from the OS (a fresh draw per run)."""
    if options.sample_seed is not None:
        return options.sample_seed
    return int.from_bytes(os.urandom(8), "little") >> 1


def request_names(options: RunnerOptions, prompt: str) -> list[str]:
    """`r0` when a run draws once per prompt, else `r0~0`, `r0~1`, ...: draw J of prompt r0."""
    if options.samples == 1:
        return [prompt]
    return [f"{prompt}~{j}" for j in range(options.samples)]


def run_sampled(options: RunnerOptions, level: int,
                sink: Callable[[str], None] | None = None) -> RunResult:
    """The decoding loop of a sampled run (a temperature) or of the target alone (`no_spec`),
    each request decoded to the end before the next; trace lines at `level` as in `run`."""
    torch.set_num_threads(1)
    lines: list[str] = []

    def emit_line(line: str) -> None:
        lines.append(line)
        if sink is not None:
            sink(line)

    seed = sample_seed(options)
    gen = torch.Generator().manual_seed(seed)

    def uniform() -> float:
        return float(torch.rand(1, generator=gen, dtype=PROB)[0])

    sampler = (Sampler(options.temperature, options.top_p, options.mutation)
               if options.temperature is not None else None)
    drafter = build(options, max_positions(options))
    target = drafter.target
    kernel = make_kernel(options)
    tap = fault_tap(options.planted(), options.seed)
    store = make_store(options)
    route = RouteCounters()
    if level >= 1:
        settings = applied(options, store, kernel, drafter)
        settings.update(spec="off" if options.no_spec else "on",
                        temperature="greedy" if options.temperature is None
                        else f"{options.temperature:g}",
                        top_p=f"{options.top_p:g}", sample_seed=seed, samples=options.samples,
                        max_tokens=options.steps)
        emit_line(trace.spec_config(settings))
    generated: dict[str, list[int]] = {}
    records: list[VerifyRecord] = []
    k = 0 if options.no_spec else options.k
    with torch.no_grad():
        for prompt_name, prompt in make_prompts(options).items():
            cache = target.new_cache()
            pending = []
            for tok in prompt:
                logits, feat = target.consume(cache, tok)
                pending.append(feat)
            for name in request_names(options, prompt_name):
                r = Request(name, _copy(cache), list(prompt), list(pending))
                first = _pick(sampler, logits, uniform)
                r.tokens.append(first)
                r.generated.append(first)
                store = make_store(options)
                # each draw emits at least `steps` traced tokens, as an engine serving
                # max_tokens does (a verify that passes the budget is traced whole; the
                # budget is in [spec-config] and difftest reads each stream up to it)
                while len(r.generated) - 1 < options.steps:
                    pos = len(r.tokens)
                    if k == 0:
                        out, _feat = target.consume(r.cache, r.tokens[-1])
                        emitted = [_pick(sampler, out, uniform)]
                        r.tokens.extend(emitted)
                        r.generated.extend(emitted)
                        records.append(VerifyRecord(name, pos, [], emitted, torch.zeros(0)))
                        if level >= 1:
                            emit_line(trace.spectrace(name, pos, 0, 1, 0, [], emitted))
                        continue
                    start = store.context_len(name)
                    store.append_context(name, drafter.context_kv(torch.stack(r.pending), start))
                    r.pending = []
                    block = drafter.block_logits(store, name, r.tokens[-1], k, "none", kernel, tap)
                    rows = block[1:]
                    assert sampler is not None  # options: drafting without a temperature is run()'s
                    verified = _verify(sampler, target, r, rows, uniform)
                    records.append(VerifyRecord(name, pos, verified[0], verified[1].emit, rows))
                    if level >= 1:
                        v = verified[1]
                        ns = len(v.emit)
                        emit_line(trace.spectrace(name, pos, k, ns, ns - 1, verified[0], v.emit))
                        if sampler is not None:
                            emit_line(trace.spec_sample(name, pos, v.acc, v.q, v.p, v.overlap,
                                                        v.residual))
                route = _added(route, store.route)
                generated[name] = r.generated
    if level >= 1:
        emit_line(trace.dflash_route(route.paged_seam, route.combined, route.last_combined_q,
                                     route.last_combined_k))
    return RunResult(lines=lines, generated=generated, prompts=make_prompts(options),
                     records=records, route=route, store=store)


def _copy(cache: TargetCache) -> TargetCache:
    """A request's own copy of a prompt's target cache (consuming concatenates new tensors, so
    the lists are all that must not be shared)."""
    out = TargetCache(len(cache.k))
    out.k, out.v = list(cache.k), list(cache.v)
    return out


def _pick(sampler: Sampler | None, logits: torch.Tensor, uniform: Callable[[], float]) -> int:
    """The target's next token outside a speculative verify: a draw, or greedy the argmax."""
    if sampler is None:
        return int(logits.argmax())
    return draw(sampler.plain(logits), uniform())


def _verify(sampler: Sampler, target: Target, r: Request, rows: torch.Tensor,
            uniform: Callable[[], float]) -> tuple[list[int], Verified]:
    """Draw a token from each block row, then verify them by rejection sampling. The target
    consumes the anchor and each accepted token; the emitted stream is committed."""

    def next_logits(tok: int | None) -> torch.Tensor:
        out, feat = target.consume(r.cache, r.tokens[-1] if tok is None else tok)
        r.pending.append(feat)
        return out

    q_rows = torch.stack([sampler.draft(row) for row in rows])
    u_draft = [uniform() for _ in range(rows.shape[0])]
    draft = [draw(q, u) for q, u in zip(q_rows, u_draft, strict=True)]
    v = speculative_verify(sampler, q_rows, draft, u_draft, next_logits, uniform)
    r.tokens.extend(v.emit)
    r.generated.extend(v.emit)
    return draft, v


def _added(total: RouteCounters, more: RouteCounters) -> RouteCounters:
    """Route counters over every draw's store (each draw drafts in a store of its own)."""
    return RouteCounters(paged_seam=total.paged_seam + more.paged_seam,
                         combined=total.combined + more.combined,
                         last_combined_q=more.last_combined_q or total.last_combined_q,
                         last_combined_k=more.last_combined_k or total.last_combined_k)
