"""The bug corpus: each mutation acts on its own state, shows the kind of difference its class
has, and is silent where no input reaches that state; the controls change nothing the lanes
comparison may see; the `[spec-coverage]` counters count what a recount of the trace finds."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
import torch

from difftest.config import KNOWN_MUTATIONS, load_config
from difftest.core.corpus import BugKind, CoverageClass, Lane, Runner, carried_by
from difftest.runners.reference.__main__ import main
from difftest.runners.reference.options import MUTATIONS, RunnerOptions
from reference_helpers import cached_run

CORPUS = carried_by(Runner.REFERENCE)  # the records this runner carries
BUGS = [m for m in CORPUS if not m.control]
# Inputs that reach every class: verify widths 2..5, a window on the second layer, a shared
# prefix of 10 ids, prompts of 15+ ids (some blocks end on a page boundary).
REACHING = RunnerOptions(draft_lens=(1, 2, 3, 4), layer_masks=("full", "sliding:8"),
                         shared_prefix=10, prompt_len=15)
# One short request: no block reaches a page boundary, one page, one width, no window.
SHORT = RunnerOptions(requests=1, prompt_len=4, steps=2)


def coverage(lines: list[str]) -> dict[str, str]:
    (line,) = [x for x in lines if x.startswith("[spec-coverage]")]
    return dict(w.split("=", 1) for w in line.split()[1:])


def drafts(run) -> dict[tuple[str, int], list[int]]:
    return {(r.req, r.pos): r.draft for r in run.records}


def prefix_equal(a: dict[str, list[int]], b: dict[str, list[int]]) -> bool:
    return all(x[:min(len(x), len(y))] == y[:min(len(x), len(y))]
               for x, y in zip(a.values(), b.values(), strict=True))


def options_for(mutation, base: RunnerOptions, eos: bool = True) -> RunnerOptions:
    lane = "paged" if mutation.lane is Lane.PAGED else "materialized"
    if eos and mutation.name == "bonus-dropped-at-eos":  # an id the correct run commits
        base = base.with_(eos_id=cached_run(base.with_(lane=lane), 1).generated["r1"][5])
    return base.with_(lane=lane)


def test_list_mutations_prints_the_corpus_without_torch() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--list-mutations"]) == 0
    names = [line.split()[0] for line in out.getvalue().splitlines()[1:]]
    assert names == [m.name for m in CORPUS]
    assert len(BUGS) >= 12 and len(CORPUS) - len(BUGS) >= 2


def test_every_corpus_name_is_a_runner_and_a_config_mutation() -> None:
    assert set(MUTATIONS) >= {"none", *(m.name for m in CORPUS)}
    assert set(KNOWN_MUTATIONS) >= {m.name for m in CORPUS}
    config = load_config(None)
    for m in CORPUS:
        assert config.mutation(m.name).env == {"DIFFTEST_MUTATION": m.name}


@pytest.mark.parametrize("bug", BUGS, ids=lambda m: m.name)
def test_bug_acts_and_shows_its_kind(bug) -> None:
    base = options_for(bug, REACHING)
    good, bad = cached_run(base, 1), cached_run(base.with_(mutation=bug.name), 1)
    cov = coverage(good.lines)
    for need in bug.needs:
        count = len(cov[need.value].split(",")) if need is CoverageClass.VERIFY_WIDTHS \
            else int(cov[need.value])
        assert count >= need.needed, (need, cov)
    assert int(coverage(bad.lines)["fired"]) > 0
    dg, db = drafts(good), drafts(bad)
    same_place = [key for key in dg if key in db]
    moved = [key for key in same_place if dg[key] != db[key]]
    # equal where both went on; a stream that ended at EOS is compared whole
    ended = [r for r, ids in good.generated.items() if base.eos_id in ids]
    committed_equal = prefix_equal(good.generated, bad.generated) and \
        all(good.generated[r] == bad.generated[r] for r in ended)
    if bug.shows is BugKind.STATE:
        assert not committed_equal
    else:
        assert committed_equal
    if bug.shows is BugKind.DRAFTER:
        assert moved
    if bug.shows is BugKind.ACCEPTANCE:  # the first step that parted drafted the same tokens
        first = min((key for key in same_place
                     if [r for r in good.records if (r.req, r.pos) == key][0].emit
                     != [r for r in bad.records if (r.req, r.pos) == key][0].emit),
                    key=lambda k: (k[1], k[0]))
        assert dg[first] == db[first]


@pytest.mark.parametrize("bug", BUGS, ids=lambda m: m.name)
def test_bug_is_silent_where_its_state_is_not_reached(bug) -> None:
    base = options_for(bug, SHORT, eos=False)
    good = cached_run(base, 3)
    cov = coverage(good.lines)
    reached = [n for n in bug.needs if n is not CoverageClass.VERIFY_WIDTHS
               and int(cov[n.value]) >= n.needed]
    reached += [n for n in bug.needs if n is CoverageClass.VERIFY_WIDTHS
                and "3:" in cov[n.value]]
    bad = cached_run(base.with_(mutation=bug.name), 3)
    if not bug.needs or reached:  # acts on every input: then it does
        assert int(coverage(bad.lines)["fired"]) > 0, cov
        return
    assert coverage(bad.lines)["fired"] == "0"
    strip = ("[spec-config]", "[spec-phase")
    assert [x for x in good.lines if not x.startswith(strip)] == \
        [x for x in bad.lines if not x.startswith(strip)]


@pytest.mark.parametrize("name", ["control-page-layout", "control-request-order"])
def test_exact_controls_change_nothing_the_lanes_compare(name: str) -> None:
    good = cached_run(REACHING, 3)
    bad = cached_run(REACHING.with_(mutation=name), 3)
    key = {(r.req, r.pos): r for r in good.records}
    assert len(bad.records) == len(good.records)
    for r in bad.records:
        g = key[(r.req, r.pos)]
        assert (r.draft, r.emit) == (g.draft, g.emit)
        assert torch.equal(r.logits, g.logits)
    if name == "control-page-layout":  # the pages did move
        assert bad.store.block_tables != good.store.block_tables


def test_reordered_reduction_stays_within_the_split_tolerance() -> None:
    split = cached_run(RunnerOptions(attention_kernel="split"), 3)
    control = cached_run(RunnerOptions(lane="materialized", mutation="control-reordered-reduction"),
                         3)
    assert [(r.pos, r.draft, r.emit) for r in split.records] == \
        [(r.pos, r.draft, r.emit) for r in control.records]
    diff = max(float((a.logits - b.logits).abs().max())
               for a, b in zip(split.records, control.records, strict=True))
    assert diff <= 1e-5  # the `split` comparison's atol; a rounding difference, not zero
    assert "attention=split-reversed" in control.lines[0]


def test_page_boundary_counter_matches_a_recount_of_the_trace() -> None:
    run = cached_run(REACHING, 1)
    # a block of width 1 + k starts at the context length pos - 1
    expect = sum((r.pos - 1) // 16 != (r.pos - 1 + 5) // 16 for r in run.records)
    cov = coverage(run.lines)
    assert int(cov["page_cross"]) == expect > 0
    widths = dict(w.split(":") for w in cov["widths"].split(","))
    assert {int(w): int(n) for w, n in widths.items()} == \
        {n: sum(len(r.draft) + 1 == n for r in run.records) for n in (2, 3, 4, 5)}
    materialized = coverage(cached_run(REACHING.with_(lane="materialized"), 1).lines)
    assert materialized["page_size"] == materialized["page_cross"] == "0"


def test_page_end_counter_counts_blocks_ending_on_a_pages_last_slot() -> None:
    run = cached_run(REACHING, 1)
    # a block of 1 + k rows starts at the context length pos - 1 and ends before pos - 1 + 5
    expect = sum((r.pos - 1 + 5) % 16 == 0 for r in run.records)
    assert int(coverage(run.lines)["page_end"]) == expect > 0
    # one request, one step: its block holds rows 11..15, the first page's last slot its last
    one = RunnerOptions(requests=1, prompt_len=11, steps=1)
    assert coverage(cached_run(one, 1).lines)["page_end"] == "1"
    assert coverage(cached_run(one.with_(prompt_len=12), 1).lines)["page_end"] == "0"


def test_off_by_one_is_silent_where_blocks_cross_pages_but_never_end_on_a_last_slot() -> None:
    # prompt 12 of 1 request, 2 steps: blocks 12..16 and 13/14..17/18 cross into page 2 and
    # none ends on slot 15
    base = RunnerOptions(requests=1, prompt_len=12, steps=2)
    cov = coverage(cached_run(base, 1).lines)
    assert int(cov["page_cross"]) > 0 and cov["page_end"] == "0"
    bad = cached_run(base.with_(mutation="page-boundary-off-by-one"), 1)
    assert coverage(bad.lines)["fired"] == "0"


@pytest.mark.parametrize(("shared", "partial"), [(16, 0), (32, 0), (15, 2), (17, 2), (24, 2)])
def test_prefix_partial_counts_shared_prefixes_ending_inside_a_page(shared: int,
                                                                    partial: int) -> None:
    base = RunnerOptions(prompt_len=40, shared_prefix=shared, steps=2)
    cov = coverage(cached_run(base, 1).lines)
    assert (cov["prefix_shared"], cov["prefix_partial"]) == ("2", str(partial))
    bad = cached_run(base.with_(mutation="prefix-cache-partial-page"), 1)
    assert coverage(bad.lines)["fired"] == str(partial)  # acts exactly there


def test_eos_bonus_counts_requests_ending_on_their_verifys_own_token() -> None:
    from difftest.flow.sweep import eos_ids_of

    base = RunnerOptions(draft_lens=(1,))  # short blocks: some drafts accepted
    eos = eos_ids_of([(r.req, r.emit) for r in cached_run(base, 1).records])
    assert eos.drafted and eos.bonus
    inside = coverage(cached_run(base.with_(eos_id=eos.drafted[0]), 1).lines)
    assert int(inside["eos"]) >= 1
    bonus = coverage(cached_run(base.with_(eos_id=eos.bonus[0]), 1).lines)
    assert int(bonus["eos_bonus"]) >= 1
    # the bug acts only where a request ends on its bonus token
    for eos_id, reached in ((eos.drafted[0], int(inside["eos_bonus"])),
                            (eos.bonus[0], int(bonus["eos_bonus"]))):
        bad = cached_run(base.with_(eos_id=eos_id, mutation="bonus-dropped-at-eos"), 1)
        assert int(coverage(bad.lines)["fired"]) == reached
