"""The sweep's generated inputs reach what they are made for: a drafted block's last row at
page_size * m - 1, m, m + 1 and each request's block ending on a page's last slot, every verify
width, both sides of a window edge, shared prefixes ending inside a page, short blocks, EOS ids
committed inside a block and as the bonus token; a budget spent leaves inputs not run; and its
exit code
follows each input's outcome under the comparison's expectation, with inputs that never reached
the arms, and uninformative or inert ones, judging nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.analysis.verdict import Verdict
from difftest.config import load_config
from difftest.core.corpus import CoverageClass
from difftest.core.errors import ExitCode
from difftest.core.kinds import DecodingMode, Expect, VerdictKind
from difftest.core.model import ArmTrace, SpecConfig, SpecCoverage
from difftest.flow.sweep import (REPORTED, EosIds, InputOutcome, InputRun, SweepInput,
                                 SweepReport, eos_ids_of, inputs_for, interleaved, run_sweep,
                                 summarize, sweep_classes, sweepable, unreached, with_args)
from difftest.trace.parser import parse_trace

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "default.toml"
# one run of each lane of the reference runner at its defaults (VT_SPEC_TRACE=3, seed 0,
# 3 requests): its [spec-config] line and a [spec-coverage] line with page_cross=9
SWEEP_DATA = Path(__file__).resolve().parents[1] / "data" / "sweep"
PAGED = parse_trace(SWEEP_DATA / "paged.log")
MATERIALIZED = parse_trace(SWEEP_DATA / "materialized.log")


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


def test_the_lanes_sweep_is_about_pages_and_adds_its_args_to_both_arms() -> None:
    config = load_config(SHIPPED)
    spec = config.comparison("lanes")
    assert sweep_classes(spec) == (CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_END,
                                   CoverageClass.PAGE_ORDER)
    changed = with_args(config, spec, ("--prompt-len", "15"))
    for arm in (spec.arm_a, spec.arm_b):
        assert changed.arm(arm).command[-2:] == ("--prompt-len", "15")
    assert changed.arm("scalars-on").command == config.arm("scalars-on").command


def verdict(kind: VerdictKind, expect: Expect = Expect.SAME) -> Verdict:
    """A verdict decided by the one rule (`findings.decide`) from one finding of this kind."""
    return Verdict.of([VerdictFinding(Origin.DRAFTS, Demand.of_kind(kind))], expect, ())


def reached(trace: ArmTrace, args: tuple[str, ...]) -> ArmTrace:
    """The capture as the reference runner would print it given these arguments: its
    [spec-config] reports each setting they set (so no two inputs' traces read the same)."""
    values = dict(trace.config.values)
    values.update({REPORTED[k]: v for k, v in zip(args, args[1:], strict=False)
                   if k in REPORTED})
    return replace(trace, config=SpecConfig(values, trace.config.lines))


def judge_all(kind: VerdictKind, expect: Expect = Expect.SAME, a: ArmTrace = PAGED,
              b: ArmTrace = MATERIALIZED, reach: bool = True
              ) -> Callable[[SweepInput], InputRun]:
    def judge(item: SweepInput) -> InputRun:
        ta, tb = (reached(a, item.args), reached(b, item.args)) if reach else (a, b)
        return InputRun(verdict(kind, expect), ("paged", "materialized"), ta, tb)
    return judge


LANES = (CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_ORDER)


def sweep(judge: Callable[[SweepInput], InputRun],
          classes: tuple[CoverageClass, ...] = LANES) -> SweepReport:
    outcomes, unrun = run_sweep(inputs_for(classes), judge)
    return SweepReport("lanes", outcomes, classes, unrun)


def test_the_summary_counts_coverage_and_differences_per_class() -> None:
    items = inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.BATCH])
    pages_only = replace(PAGED, coverage=SpecCoverage({"page_cross": 2, "batch": 1}, (), 1))
    none = replace(MATERIALIZED, coverage=SpecCoverage())

    def judge(item: SweepInput) -> InputRun:
        differ = item.cls is CoverageClass.PAGE_BOUNDARY and "=15" in item.label
        return InputRun(verdict(VerdictKind.DIFFER if differ else VerdictKind.AGREE),
                        ("a", "b"), reached(pages_only, item.args), reached(none, item.args))

    outcomes, _ = run_sweep(items, judge)
    assert all(isinstance(o, InputOutcome) for o in outcomes)
    pages, batch = summarize(outcomes)
    assert (pages.cls, pages.inputs, pages.covered, pages.differed, pages.judged) == \
        (CoverageClass.PAGE_BOUNDARY, 6, 6, 1, 5)
    assert (batch.cls, batch.inputs, batch.covered, batch.differed, batch.judged) == \
        (CoverageClass.BATCH, 3, 0, 0, 0)  # one request per batch is not two


def test_agreeing_inputs_that_exercised_each_class_pass() -> None:
    report = sweep(judge_all(VerdictKind.AGREE))
    assert [c.judged for c in report.classes] == [6, 3]
    assert report.exit_code is ExitCode.OK


def test_inert_inputs_judge_nothing_although_the_state_was_exercised() -> None:
    # both arms paged: every input exercised page_cross and page_order, and every input is
    # INERT (the lane never switched): no class was judged, the sweep is uninformative
    report = sweep(judge_all(VerdictKind.INERT, a=PAGED, b=PAGED))
    assert [(c.covered, c.judged, c.uninformative) for c in report.classes] == \
        [(6, 0, 6), (3, 0, 3)]
    assert report.exit_code is ExitCode.UNINFORMATIVE
    assert report.lines()[0] == "sweep lanes: exit 3"


def test_one_class_without_a_passing_input_leaves_the_sweep_uninformative() -> None:
    def judge(item: SweepInput) -> InputRun:
        kind = VerdictKind.UNINFORMATIVE if "requests" in item.label else VerdictKind.AGREE
        return judge_all(kind)(item)

    report = sweep(judge)
    assert [c.judged for c in report.classes] == [6, 0]
    assert report.exit_code is ExitCode.UNINFORMATIVE


def test_under_expect_differ_an_agreement_fails_and_a_difference_passes() -> None:
    # the lanes must differ: inputs on which they agree each failed the expectation (exit 1);
    # inputs on which they differ each met it (exit 0), whatever a same-comparison would say
    failed = sweep(judge_all(VerdictKind.AGREE, Expect.DIFFER))
    assert failed.exit_code is ExitCode.DIFFER
    assert all(o.verdict.label == "FAIL" for o in failed.outcomes)
    passed = sweep(judge_all(VerdictKind.DIFFER, Expect.DIFFER))
    assert [c.judged for c in passed.classes] == [6, 3]
    assert passed.exit_code is ExitCode.OK


def test_under_expect_same_one_differing_input_fails_the_sweep() -> None:
    def judge(item: SweepInput) -> InputRun:
        kind = VerdictKind.DIFFER if "block_end=16" in item.label else VerdictKind.INERT
        return judge_all(kind)(item)

    assert sweep(judge).exit_code is ExitCode.DIFFER


def test_arms_that_never_received_the_inputs_make_every_input_uninformative() -> None:
    # each arm prints one capture whatever it is given: nine inputs are one input run nine
    # times; every input is named, and no class is judged
    report = sweep(judge_all(VerdictKind.AGREE, reach=False))
    assert all(o.kind is VerdictKind.UNINFORMATIVE for o in report.outcomes)
    assert report.exit_code is ExitCode.UNINFORMATIVE
    first = report.outcomes[1]
    assert any("paged's trace reads the same as for the input" in r
               for r in first.verdict.reasons)
    # the capture says requests=3 seed=0: an input that set requests=2 is contradicted by name
    two = next(o for o in report.outcomes if "requests=2" in o.input.label)
    assert any("paged's [spec-config] (line 1) says requests=3, the input set requests=2" in r
               for r in two.verdict.reasons)
    # the capture (made before the runner reported prompt_len) does not report the prompt
    # length the input set
    assert any("paged's [spec-config] does not report prompt_len (the input set "
               "prompt_len=11)" in r for r in report.outcomes[0].verdict.reasons)
    text = "\n".join(report.lines())
    assert text.count("trace reads the same as for the input") == 2 * 9


def test_under_expect_differ_a_difference_on_unreached_inputs_passes_nothing() -> None:
    # arms that differ on their one fixed input: a difference would be the pass, and no input
    # of the sweep can show it
    report = sweep(judge_all(VerdictKind.DIFFER, Expect.DIFFER, reach=False))
    assert all(o.kind is VerdictKind.UNINFORMATIVE for o in report.outcomes)
    assert report.exit_code is ExitCode.UNINFORMATIVE


def test_under_expect_same_a_difference_on_unreached_inputs_stands() -> None:
    report = sweep(judge_all(VerdictKind.DIFFER, reach=False))
    assert all(o.kind is VerdictKind.DIFFER for o in report.outcomes)
    assert report.exit_code is ExitCode.DIFFER


def test_one_unreached_input_is_named_and_the_others_judge() -> None:
    def judge(item: SweepInput) -> InputRun:
        run = judge_all(VerdictKind.AGREE)(item)
        if item.args[:2] == ("--prompt-len", "12"):  # this arm kept an older seed
            seed1 = dict(run.a.config.values) | {"seed": "1"} if run.a else {}
            return replace(run, a=replace(PAGED, config=SpecConfig(seed1, PAGED.config.lines)))
        return run

    report = sweep(judge)
    kinds = {o.input.label: o.kind for o in report.outcomes}
    assert kinds.pop("r0 block_end=16 seed=0") is VerdictKind.UNINFORMATIVE
    assert set(kinds.values()) == {VerdictKind.AGREE}
    assert report.exit_code is ExitCode.OK


def test_an_input_shared_by_two_classes_is_judged_once() -> None:
    items = inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_END])
    calls: list[tuple[str, ...]] = []

    def judge(item: SweepInput) -> InputRun:
        calls.append(item.args)
        return judge_all(VerdictKind.AGREE)(item)

    outcomes, unrun = run_sweep(items, judge)
    assert len(outcomes) == 12 and len(calls) == len(set(calls)) == 10 and unrun == ()


def test_once_the_budget_is_spent_no_input_starts_and_the_rest_are_reported_not_run() -> None:
    items = interleaved(inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_ORDER]))
    # taking turns: each class is tried before any class's second input
    assert [i.cls for i in items[:4]] == [CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_ORDER] * 2
    runs: list[SweepInput] = []

    def judge(item: SweepInput) -> InputRun:
        runs.append(item)
        return judge_all(VerdictKind.AGREE)(item)

    outcomes, unrun = run_sweep(items, judge, deadline=lambda: len(runs) >= 3)
    assert [o.input for o in outcomes] == runs == list(items[:3])
    assert unrun == items[3:]
    report = SweepReport("lanes", outcomes, LANES, unrun)
    pages, order = report.classes
    assert (pages.inputs, pages.judged, pages.not_run) == (2, 2, 4)
    assert (order.inputs, order.judged, order.not_run) == (1, 1, 2)
    assert report.exit_code is ExitCode.OK  # each class passed on an input that ran
    assert sum("(budget spent)" in line for line in report.lines()) == 6
    not_run = report.to_json()["not_run"]
    assert isinstance(not_run, list) and [x["input"] for x in not_run] == [i.label for i in unrun]
    nothing = SweepReport("lanes", (), LANES, tuple(items))
    assert nothing.exit_code is ExitCode.UNINFORMATIVE


def test_a_class_without_inputs_is_reported_and_uninformative() -> None:
    report = SweepReport("c", (), (CoverageClass.EOS_BONUS,))
    (row,) = report.classes
    assert (row.cls, row.inputs, row.covered) == (CoverageClass.EOS_BONUS, 0, 0)
    assert report.exit_code is ExitCode.UNINFORMATIVE


def test_check_sweeps_greedy_comparisons_whose_toggle_names_a_state() -> None:
    config = load_config(SHIPPED)
    assert [n for n, spec in config.comparisons.items() if sweepable(spec)] == \
        ["lanes", "split", "nondet"]  # not scalars (no state), not sampled (in distribution)
    lanes = config.comparison("lanes")
    sampled = replace(lanes, rules=replace(lanes.rules, decoding=DecodingMode.SAMPLED))
    assert sweepable(lanes) and not sweepable(sampled)


def test_inputs_combine_as_checks_comparisons_do_a_failed_arm_first() -> None:
    def judge(item: SweepInput) -> InputRun:
        kind = {"r0 block_end=15 seed=0": VerdictKind.ARM_FAILED,
                "r0 block_end=16 seed=0": VerdictKind.DIFFER}.get(item.label, VerdictKind.AGREE)
        return judge_all(kind)(item)

    assert sweep(judge).exit_code is ExitCode.ARM_FAILED


def test_an_arm_that_does_not_report_a_setting_leaves_that_input_unshown() -> None:
    # the arm's traces differ from input to input, but its [spec-config] says nothing of the
    # prompt length the input set: nothing shows that setting reached it
    def judge(item: SweepInput) -> InputRun:
        run = judge_all(VerdictKind.AGREE)(item)
        if run.b is not None and item.args[:2] == ("--prompt-len", "27"):
            values = {k: v for k, v in run.b.config.values.items() if k != "prompt_len"}
            return replace(run, b=replace(run.b, config=SpecConfig(values, run.b.config.lines)))
        return run

    report = sweep(judge)
    named = {o.input.label: o.verdict.reasons for o in report.outcomes
             if o.kind is VerdictKind.UNINFORMATIVE}
    assert list(named) == ["r0 block_end=31 seed=0"]
    assert any("materialized's [spec-config] does not report prompt_len" in r
               for r in named["r0 block_end=31 seed=0"])


def test_the_reference_runner_reports_every_setting_the_inputs_set(tmp_path: Path) -> None:
    # a real run given one of each kind of generated argument: its [spec-config] reports each
    # in the syntax the sweep wrote it, so the sweep's check finds nothing unreached
    args = ("--requests", "2", "--prompt-len", "40", "--shared-prefix", "17", "--draft-lens",
            "1,2", "--layer-masks", "full,sliding:8", "--eos-id", "0", "--steps", "2",
            "--seed", "1")
    assert set(REPORTED) <= set(args)
    proc = subprocess.run([sys.executable, "-m", "difftest.runners.reference", *args],
                          env={**os.environ, "VT_SPEC_TRACE": "1", "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "arm.log").write_text(proc.stderr)
    trace = parse_trace(tmp_path / "arm.log")
    run = InputRun(verdict(VerdictKind.AGREE), ("a", "b"), trace, trace)
    assert unreached({args: run}) == {}
    assert trace.config.values["layer_masks"] == "full,sliding:8"
