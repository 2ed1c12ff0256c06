"""Coverage as evidence: a toggle names the state its comparison is about, and an agreement on
inputs that never exercised that state is uninformative, with the counts."""

from __future__ import annotations

from difftest.analysis.coverage import ABOUT, about, effect, finding, table
from difftest.core.corpus import CORPUS, CoverageClass
from difftest.core.kinds import VerdictKind
from difftest.core.model import SpecCoverage

NAMES = ("paged", "materialized")


def cov(line: int = 1, widths: tuple[tuple[int, int], ...] = (), **counts: int) -> SpecCoverage:
    return SpecCoverage(counts, widths, line)


def test_lane_is_about_page_boundaries_and_page_order() -> None:
    assert about(["lane"]) == (CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_END,
                               CoverageClass.PAGE_ORDER)
    assert about(["lane", "attention"]) == about(["lane"])  # attention names no state
    assert about(["scalars"]) == ()


def test_every_class_a_corpus_bug_needs_has_a_toggle_or_is_named_by_the_sweep() -> None:
    named = {c for classes in ABOUT.values() for c in classes}
    needed = {c for m in CORPUS for c in m.needs}
    # rejections, full acceptance and batches are reached by every input of the shipped configs
    # or by the sweep; every other class a bug needs is what some toggle is about
    assert needed - named <= {CoverageClass.REJECTION, CoverageClass.FULL_ACCEPT,
                              CoverageClass.BATCH}


def test_an_agreement_without_a_page_boundary_is_uninformative_with_the_counts() -> None:
    kind, reasons = effect(["lane"], cov(page_cross=0, page_end=1, page_order=3), cov(page_cross=0),
                           NAMES)
    assert kind is VerdictKind.UNINFORMATIVE
    (reason,) = reasons
    assert "page boundary inside a drafted block (page_cross)" in reason
    assert "paged: 0, materialized: 0; 1 needed" in reason


def test_one_arm_exercising_the_state_is_enough() -> None:
    # the materialized lane has no pages; the paged arm crossing boundaries covers the claim
    assert effect(["lane"], cov(page_cross=4, page_end=1, page_order=2), cov(), NAMES) == \
        (None, ())


def test_blocks_crossing_pages_but_never_ending_on_a_last_slot_are_uninformative() -> None:
    # the off-by-one of a last page's valid length lives where a block ends on a page's last
    # slot: crossing boundaries elsewhere does not reach it
    kind, reasons = effect(["lane"], cov(page_cross=6, page_order=3), cov(), NAMES)
    assert kind is VerdictKind.UNINFORMATIVE
    assert ["drafted block ending on a page's last slot (page_end)" in r for r in reasons] == [True]


def test_each_bugs_trigger_is_the_class_it_needs() -> None:
    needs = {m.name: m.needs for m in CORPUS}
    assert needs["page-boundary-off-by-one"] == (CoverageClass.PAGE_END,)
    assert needs["prefix-cache-partial-page"] == (CoverageClass.PREFIX_PARTIAL,)
    assert needs["bonus-dropped-at-eos"] == (CoverageClass.EOS_BONUS,)
    assert needs["last-draft-never-accepted"] == (CoverageClass.FULL_ACCEPT,)
    assert about(["prefix_cache"]) == (CoverageClass.PREFIX_SHARED, CoverageClass.PREFIX_PARTIAL)
    assert about(["eos"]) == (CoverageClass.EOS, CoverageClass.EOS_BONUS)


def test_widths_need_two_different_ones() -> None:
    one = cov(widths=((5, 30),))
    assert effect(["verify_kernel"], one, one, NAMES)[0] is VerdictKind.UNINFORMATIVE
    two = cov(widths=((3, 1), (5, 29)))
    assert effect(["verify_kernel"], two, one, NAMES) == (None, ())


def test_traces_without_a_coverage_line_demand_nothing_of_a_mutation_and_draw_no_table() -> None:
    # (of a toggle about a state they do: test_a_toggle_about_a_state_with_no_arm_counting_it...)
    none = SpecCoverage()
    assert effect([], none, none, NAMES, "causal-mask") == (None, ())
    assert table(["lane"], none, none) == ()
    rows = table(["lane"], cov(page_cross=1), none)
    assert [r.count_b for r in rows] == [None] * len(CoverageClass)
    assert [r.cls for r in rows if r.demanded] == list(about(["lane"]))


def test_the_finding_asks_for_no_agreement_so_a_difference_stands() -> None:
    from difftest.analysis.findings import Demand, Origin, decide

    found = finding(["lane"], cov(page_cross=0), cov(page_cross=0), NAMES)
    assert found is not None and found.origin is Origin.COVERAGE
    assert found.demand is Demand.NO_AGREEMENT
    agree = Demand.AGREE
    differ = Demand.DIFFER
    from difftest.analysis.findings import VerdictFinding
    assert decide([VerdictFinding(Origin.DRAFTS, agree), found]) is VerdictKind.UNINFORMATIVE
    assert decide([VerdictFinding(Origin.DRAFTS, differ), found]) is VerdictKind.DIFFER
    assert finding(["lane"], cov(page_cross=1, page_end=1, page_order=1), cov(), NAMES) is None


def test_a_planted_mutation_demands_its_own_state_and_to_have_acted() -> None:
    reached = cov(page_cross=3, page_end=1, page_order=3, fired=5)
    # the window bug on inputs without a window edge: the toggle's state is there, its own not
    kind, reasons = effect(["lane"], reached, cov(fired=0), NAMES, "sliding-window-edge")
    assert kind is VerdictKind.UNINFORMATIVE
    assert any("mutation 'sliding-window-edge' acts only about sliding-window edges "
               "(window_edges), which neither arm exercised" in r for r in reasons), reasons
    assert any("never acted in materialized (fired=0)" in r for r in reasons), reasons
    # reached and acted: nothing to say
    acted = cov(window_edges=4, fired=4)
    assert effect(["lane"], reached, acted, NAMES, "sliding-window-edge") == (None, ())
    # a control never "acts" on the result; a name outside the corpus demands nothing
    assert effect(["lane"], reached, cov(fired=0), NAMES, "control-page-layout") == (None, ())
    assert effect(["lane"], reached, cov(fired=0), NAMES, "my-own-mutation") == (None, ())


def test_a_mutation_planted_in_arm_a_is_checked_as_one_in_b() -> None:
    # the hf/mlx runners' rerun comparison with the window bug in A, on inputs without an edge
    plain = cov(window_edges=0, fired=0)
    kind, reasons = effect([], cov(window_edges=0, fired=0), plain, ("sdpa", "sdpa"),
                           None, "sliding-window-edge")
    assert kind is VerdictKind.UNINFORMATIVE
    assert any("mutation 'sliding-window-edge' acts only about sliding-window edges" in r
               for r in reasons), reasons
    assert any("never acted in sdpa (fired=0)" in r for r in reasons), reasons
    acted = cov(window_edges=3, fired=3)
    assert effect([], acted, plain, ("sdpa", "sdpa"), None, "sliding-window-edge") == (None, ())


def test_the_hf_and_mlx_options_name_their_state() -> None:
    assert about(["sliding_window"]) == (CoverageClass.WINDOW_EDGE,)
    assert about(["draft_lens"]) == (CoverageClass.VERIFY_WIDTHS,)


def test_a_toggle_about_a_state_with_no_arm_counting_it_is_uninformative() -> None:
    # an engine that prints no [spec-coverage]: nothing shows the inputs reached a page boundary
    none = SpecCoverage()
    kind, reasons = effect(["lane"], none, none, NAMES)
    assert kind is VerdictKind.UNINFORMATIVE
    assert reasons == ("coverage unknown: toggle 'lane' is about page boundary inside a drafted "
                       "block, drafted block ending on a page's last slot, block table out of "
                       "physical order, and neither arm prints [spec-coverage]: nothing shows the "
                       "inputs reached that state (an engine can count it in that line, "
                       "docs/trace-format.md)",)
    # a toggle about no state demands nothing of an engine without the line
    assert effect(["attention_draft"], none, none, NAMES) == (None, ())
    # one arm counting it and reaching it is enough
    assert effect(["lane"], cov(page_cross=2, page_end=1, page_order=1), none, NAMES) == \
        (None, ())


def test_teacher_forcing_hides_a_verify_path_bug_and_a_verify_width_toggle() -> None:
    # accept-one-too-many acts (fired=2) on a reached state: free, the comparison is judged as
    # usual; forced, B commits A's stream and the bug cannot show
    acted = cov(rejections=5, fired=2)
    assert effect([], cov(rejections=5), acted, NAMES, "accept-one-too-many") == (None, ())
    kind, reasons = effect([], cov(rejections=5), acted, NAMES, "accept-one-too-many",
                           forced=True)
    assert kind is VerdictKind.UNINFORMATIVE
    assert reasons == ("coverage: teacher forcing hides the verify path: mutation "
                       "'accept-one-too-many' in materialized changes what a verify commits, and "
                       "forced, B commits A's stream; compare it free",)
    # a drafter bug shows forced too: nothing said
    assert effect([], cov(window_edges=3), cov(window_edges=3, fired=4), NAMES,
                  "sliding-window-edge", forced=True) == (None, ())
    # a toggle about verify widths
    widths = cov(widths=((2, 3), (3, 4)))
    assert effect(["draft_lens"], widths, widths, NAMES) == (None, ())
    kind, reasons = effect(["draft_lens"], widths, widths, NAMES, forced=True)
    assert kind is VerdictKind.UNINFORMATIVE and len(reasons) == 1
    assert "toggle 'draft_lens' is about verify widths, and forced" in reasons[0]
