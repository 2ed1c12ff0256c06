"""The sweep's generated inputs reach what they are made for: a drafted block's last row at
page_size * m - 1, m, m + 1 and each request's block ending on a page's last slot, every verify
width, both sides of a window edge, shared prefixes ending inside a page, short blocks, EOS ids
committed inside a block and as the bonus token."""

from __future__ import annotations

from difftest.config import load_config
from difftest.core.corpus import CoverageClass
from difftest.core.kinds import VerdictKind
from difftest.core.model import SpecCoverage
from difftest.flow.sweep import (EosIds, InputOutcome, SweepInput, SweepReport, eos_ids_of,
                                 inputs_for, interleaved, run_sweep, summarize, sweep_classes,
                                 sweepable, with_args)
from dataclasses import replace

from difftest.core.errors import ExitCode
from difftest.core.kinds import DecodingMode
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "default.toml"


def test_page_boundary_inputs_put_a_blocks_last_row_around_two_boundaries() -> None:
    made = inputs_for([CoverageClass.PAGE_BOUNDARY], seeds=(0, 1))
    # the first block of r0 is the anchor at position prompt_len, then 4 drafted rows
    ends = sorted({int(i.args[1]) + 4 for i in made})
    assert ends == [15, 16, 17, 31, 32, 33]
    assert len(made) == 12 and all(i.args[-2:] in (("--seed", "0"), ("--seed", "1"))
                                   for i in made)


def test_page_end_inputs_end_each_requests_first_block_on_a_pages_last_slot() -> None:
    made = inputs_for([CoverageClass.PAGE_END])
    # request r_j's prompt is prompt_len + j ids: its first block ends at prompt_len + j + 4
    ends = [(i.label.split()[0], int(i.args[1]) + int(i.label[1]) + 4) for i in made]
    assert ends == [("r0", 15), ("r1", 15), ("r2", 15), ("r0", 31), ("r1", 31), ("r2", 31)]


def test_prefix_inputs_include_prefixes_ending_inside_a_page() -> None:
    shared = [int(i.args[3]) for i in inputs_for([CoverageClass.PREFIX_SHARED])]
    partial = [int(i.args[3]) for i in inputs_for([CoverageClass.PREFIX_PARTIAL])]
    assert shared == [15, 16, 17, 31, 32, 33]
    assert partial == [15, 17, 24, 31, 33, 40] and all(n % 16 for n in partial)


def test_full_accept_inputs_draft_short_blocks() -> None:
    made = inputs_for([CoverageClass.FULL_ACCEPT])
    assert [i.args[1] for i in made] == ["1", "1,2", "1,3"]


def test_width_inputs_each_verify_every_width() -> None:
    made = inputs_for([CoverageClass.VERIFY_WIDTHS])
    assert [sorted(map(int, i.args[1].split(","))) for i in made] == [[1, 2, 3, 4]] * 4
    assert len({i.args[1] for i in made}) == 4  # in four orders


def test_eos_ids_are_read_by_where_a_request_first_commits_them() -> None:
    steps = [("r0", [1, 2, 3]), ("r1", [4]), ("r0", [2, 5]), ("r1", [6, 1]), ("r0", [7])]
    # r0 first commits 1 and 2 inside a block, 3 as the bonus, 2 again later (not first), 5
    # and 7 as bonuses; r1 first commits 4 as a bonus, 6 inside a block and 1 as a bonus
    assert eos_ids_of(steps, n=9) == EosIds(drafted=(1, 2, 6), bonus=(3, 4, 5, 1, 7))
    assert eos_ids_of(steps) == EosIds((1, 2, 6), (3, 4, 5))


def test_eos_inputs_use_each_seeds_own_ids() -> None:
    eos = {0: EosIds(drafted=(4,), bonus=(5,)), 1: EosIds(bonus=(9,))}
    made = inputs_for([CoverageClass.EOS, CoverageClass.EOS_BONUS], seeds=(0, 1, 2), eos=eos)
    assert [(i.cls, i.args) for i in made] == [
        (CoverageClass.EOS, ("--eos-id", "4", "--seed", "0")),
        (CoverageClass.EOS, ("--eos-id", "5", "--seed", "0")),
        (CoverageClass.EOS, ("--eos-id", "9", "--seed", "1")),
        (CoverageClass.EOS_BONUS, ("--eos-id", "5", "--seed", "0")),
        (CoverageClass.EOS_BONUS, ("--eos-id", "9", "--seed", "1"))]


def test_a_class_without_inputs_is_reported_and_uninformative() -> None:
    report = SweepReport("c", (), (CoverageClass.EOS_BONUS,))
    (row,) = report.classes
    assert (row.cls, row.inputs, row.covered) == (CoverageClass.EOS_BONUS, 0, 0)
    assert report.exit_code is ExitCode.UNINFORMATIVE


def test_an_input_shared_by_two_classes_is_judged_once() -> None:
    items = inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_END])
    calls: list[tuple[str, ...]] = []

    def judge(item: SweepInput) -> tuple[VerdictKind, SpecCoverage, SpecCoverage]:
        calls.append(item.args)
        return VerdictKind.AGREE, SpecCoverage({"page_end": 1}, (), 1), SpecCoverage()

    outcomes, unrun = run_sweep(items, judge)
    assert len(outcomes) == 12 and len(calls) == len(set(calls)) == 10 and unrun == ()


def test_once_the_budget_is_spent_no_input_starts_and_the_rest_are_reported_not_run() -> None:
    items = interleaved(inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_ORDER]))
    # taking turns: each class is tried before any class's second input
    assert [i.cls for i in items[:4]] == [CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_ORDER] * 2
    runs: list[SweepInput] = []

    def judge(item: SweepInput) -> tuple[VerdictKind, SpecCoverage, SpecCoverage]:
        runs.append(item)
        return VerdictKind.AGREE, SpecCoverage({"page_cross": 1}, (), 1), SpecCoverage()

    outcomes, unrun = run_sweep(items, judge, deadline=lambda: len(runs) >= 3)
    assert [o.input for o in outcomes] == runs == list(items[:3])
    assert unrun == items[3:]
    report = SweepReport("lanes", outcomes, (CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_ORDER),
                         unrun)
    pages, order = report.classes
    assert (pages.inputs, pages.covered, pages.not_run) == (2, 2, 4)
    assert (order.inputs, order.covered, order.not_run) == (1, 0, 2)  # no page_order counted
    assert report.exit_code is ExitCode.UNINFORMATIVE
    assert sum("not run" in line for line in report.lines()) == 1 + 6
    not_run = report.to_json()["not_run"]
    assert isinstance(not_run, list) and [x["input"] for x in not_run] == [i.label for i in unrun]


def test_check_sweeps_greedy_comparisons_whose_toggle_names_a_state() -> None:
    config = load_config(SHIPPED)
    assert [n for n, spec in config.comparisons.items() if sweepable(spec)] == \
        ["lanes", "split", "nondet"]  # not scalars (no state), not sampled (in distribution)
    lanes = config.comparison("lanes")
    sampled = replace(lanes, rules=replace(lanes.rules, decoding=DecodingMode.SAMPLED))
    assert sweepable(lanes) and not sweepable(sampled)


def test_the_lanes_sweep_is_about_pages_and_adds_its_args_to_both_arms() -> None:
    config = load_config(SHIPPED)
    spec = config.comparison("lanes")
    assert sweep_classes(spec) == (CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_END,
                                   CoverageClass.PAGE_ORDER)
    changed = with_args(config, spec, ("--prompt-len", "15"))
    for arm in (spec.arm_a, spec.arm_b):
        assert changed.arm(arm).command[-2:] == ("--prompt-len", "15")
    assert changed.arm("scalars-on").command == config.arm("scalars-on").command


def test_the_summary_counts_coverage_and_differences_per_class() -> None:
    items = inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.BATCH])
    reached = SpecCoverage({"page_cross": 2, "batch": 1}, (), 1)

    def judge(item: SweepInput) -> tuple[VerdictKind, SpecCoverage, SpecCoverage]:
        differ = item.cls is CoverageClass.PAGE_BOUNDARY and "=15" in item.label
        return (VerdictKind.DIFFER if differ else VerdictKind.AGREE), reached, SpecCoverage()

    outcomes, _ = run_sweep(items, judge)
    assert all(isinstance(o, InputOutcome) for o in outcomes)
    pages, batch = summarize(outcomes)
    assert (pages.cls, pages.inputs, pages.covered, pages.differed) == \
        (CoverageClass.PAGE_BOUNDARY, 6, 6, 1)
    assert (batch.cls, batch.inputs, batch.covered, batch.differed) == \
        (CoverageClass.BATCH, 3, 0, 0)  # one request per batch is not two
