"""Paged and materialized attention: bit-identical on the same inputs, and the paged one is paged."""

from __future__ import annotations

import pytest
import torch

from difftest.runners.reference.attention import PAGE_SIZE
from difftest.runners.reference.options import ATTENTION_MUTATIONS, RunnerOptions
from difftest.runners.reference.runner import draft_blocks, feature_width
from reference_helpers import cached_run, parse, without_timings

DEFAULT = RunnerOptions()
LENGTHS = {"a": 40, "b": 45, "c": 50}  # b's block [45, 50) crosses a page boundary


def features(options: RunnerOptions, seed: int = 11) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {req: torch.randn(n, feature_width(options), generator=gen) for req, n in LENGTHS.items()}


ANCHORS = {"a": 3, "b": 200, "c": 19}


@pytest.mark.parametrize("masks", [("full", "full"), ("causal", "sliding:9"), ("sliding:30", "full")])
@pytest.mark.parametrize("mutation", ATTENTION_MUTATIONS)
def test_lanes_bit_identical_on_tensors(masks: tuple[str, str], mutation: str) -> None:
    opts = DEFAULT.with_(layer_masks=masks)
    feats = features(opts)
    paged = draft_blocks(opts, feats, ANCHORS, lane="paged", mutation=mutation)
    mat = draft_blocks(opts, feats, ANCHORS, lane="materialized", mutation=mutation)
    assert paged.store.lane == "paged" and mat.store.lane == "materialized"
    for req in LENGTHS:
        a, b = paged.logits[req], mat.logits[req]
        assert a.shape == (opts.k + 1, opts.vocab) and torch.isfinite(a).all()
        assert torch.equal(a, b), (req, float((a - b).abs().max()))
    # and the inputs matter: another anchor gives other logits
    other = draft_blocks(opts, feats, {**ANCHORS, "a": 4}, lane="paged", mutation=mutation)
    assert not torch.equal(other.logits["a"], paged.logits["a"])


def test_runs_bit_identical_across_lanes() -> None:
    paged = cached_run(DEFAULT.with_(lane="paged"), 3)
    mat = cached_run(DEFAULT.with_(lane="materialized"), 3)
    assert len(paged.records) == len(mat.records) == DEFAULT.requests * DEFAULT.steps
    for a, b in zip(paged.records, mat.records, strict=False):
        assert (a.req, a.pos, a.draft, a.emit) == (b.req, b.pos, b.draft, b.emit)
        assert torch.equal(a.logits, b.logits)
    # the route counters, the applied configuration and the page counters name the lane; every
    # other line agrees
    lane_lines = ("[dflash-route]", "[spec-config]", "[spec-coverage]")
    body = [line for line in without_timings(paged.lines) if not line.startswith(lane_lines)]
    assert body == [line for line in without_timings(mat.lines)
                    if not line.startswith(lane_lines)]
    configs = [[x for x in r.lines if x.startswith("[spec-config]")] for r in (paged, mat)]
    assert " lane=paged " in configs[0][0]
    assert configs[0] == [configs[1][0].replace(" lane=materialized ", " lane=paged ")]
    assert paged.generated == mat.generated


def test_route_line_names_the_lane_that_ran() -> None:
    forwards = DEFAULT.requests * DEFAULT.steps
    paged = cached_run(DEFAULT.with_(lane="paged"), 3)
    assert parse(paged.lines).route == dict(paged_seam=forwards, block_kernel=0, combined=0,
                                            last_combined_q=0, last_combined_k=0)
    mat = cached_run(DEFAULT.with_(lane="materialized"), 3)
    last = mat.records[-1]  # the last block: context pos-1 positions, then 1+k block rows
    assert parse(mat.lines).route == dict(paged_seam=0, block_kernel=0, combined=forwards,
                                          last_combined_q=DEFAULT.k + 1,
                                          last_combined_k=last.pos - 1 + DEFAULT.k + 1)
    assert mat.lines[-1].startswith("[dflash-route]")


def test_paged_pool_is_really_paged() -> None:
    """Several non-contiguous pages per request, from one pool, read back through the table."""
    opts = DEFAULT
    feats = features(opts)
    run = draft_blocks(opts, feats, ANCHORS, lane="paged")
    store = run.store
    tables = store.block_tables
    owner: dict[int, str] = {}
    for req, n in LENGTHS.items():
        table = tables[req]
        assert len(table) == -(-(n + opts.k + 1) // PAGE_SIZE) >= 3
        assert any(b - a != 1 for a, b in zip(table, table[1:], strict=False)), table  # not one run of pages
        for page in table:
            assert page not in owner, f"page {page} of {req} also belongs to {owner.get(page)}"
            owner[page] = req
    spans = [(min(t), max(t)) for t in tables.values()]
    assert any(lo1 < hi2 and lo2 < hi1 for i, (lo1, hi1) in enumerate(spans)
               for lo2, hi2 in spans[i + 1:]), "requests' pages should interleave in the pool"
    # the context read through the block table is the materialized lane's context, in order
    mat = draft_blocks(opts, feats, ANCHORS, lane="materialized")
    for req, n in LENGTHS.items():
        for layer in range(opts.layers):
            k, v = store.gather(req, layer, n)
            assert torch.equal(k, mat.store.ctx_k[req][layer])
            assert torch.equal(v, mat.store.ctx_v[req][layer])


def test_paged_read_touches_only_the_requests_pages() -> None:
    opts = DEFAULT
    run = draft_blocks(opts, features(opts), ANCHORS, lane="paged")
    store, drafter = run.store, run.drafter
    mine = set(store.block_tables["a"])
    others = [p for p in range(store.k.shape[1] // PAGE_SIZE) if p not in mine]
    poison = torch.tensor([s for p in others for s in range(p * PAGE_SIZE, (p + 1) * PAGE_SIZE)])
    store.k[:, poison] = float("nan")
    store.v[:, poison] = float("nan")
    with torch.no_grad():
        again = drafter.block_logits(store, "a", ANCHORS["a"], opts.k)
    assert torch.equal(again, run.logits["a"])
    page = store.block_tables["a"][1]  # a context page in the middle of the request
    store.k[:, page * PAGE_SIZE + 3] += 1.0
    with torch.no_grad():
        moved = drafter.block_logits(store, "a", ANCHORS["a"], opts.k)
    assert not torch.equal(moved, run.logits["a"]) and torch.isfinite(moved).all()


def test_run_spreads_each_request_over_several_pages() -> None:
    opts = DEFAULT.with_(steps=20)
    result = cached_run(opts, 1)
    tables = result.store.block_tables
    assert all(len(t) >= 3 for t in tables.values()), tables
    assert all(any(b - a != 1 for a, b in zip(t, t[1:], strict=False)) for t in tables.values()), tables
    assert len({p for t in tables.values() for p in t}) == sum(len(t) for t in tables.values())
    mat = cached_run(opts.with_(lane="materialized"), 1)
    assert [r.draft for r in mat.records] == [r.draft for r in result.records]


def test_layer_masks_shape_the_attention() -> None:
    """A window that covers every key is the full mask, bit for bit; narrower masks are not."""
    feats = features(DEFAULT)
    logits = {masks: draft_blocks(DEFAULT.with_(layer_masks=masks), feats, ANCHORS).logits["b"]
              for masks in [("full", "full"), ("sliding:1000", "full"), ("sliding:9", "full"),
                            ("causal", "full"), ("full", "causal")]}
    assert torch.equal(logits[("full", "full")], logits[("sliding:1000", "full")])
    distinct = [logits[m] for m in [("full", "full"), ("sliding:9", "full"), ("causal", "full"),
                                    ("full", "causal")]]
    for i, a in enumerate(distinct):
        for b in distinct[i + 1:]:
            assert not torch.equal(a, b)
