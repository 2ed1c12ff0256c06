"""The sweep's generated inputs reach what they are made for: page boundaries at
page_size * m - 1, m, m + 1, every verify width, both sides of a window edge; and its exit code
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
from difftest.core.kinds import Expect, VerdictKind
from difftest.core.model import ArmTrace, SpecConfig, SpecCoverage
from difftest.flow.sweep import (REPORTED, InputOutcome, InputRun, SweepInput, SweepReport,
                                 eos_ids_of, inputs_for, run_sweep, summarize, sweep_classes,
                                 unreached, with_args)
from difftest.trace.parser import parse_trace

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "default.toml"
# one run of each lane of the reference runner at its defaults (VT_SPEC_TRACE=3, seed 0,
# 3 requests): its [spec-config] line and a [spec-coverage] line with page_cross=9
SWEEP_DATA = Path(__file__).resolve().parents[1] / "data" / "sweep"
PAGED = parse_trace(SWEEP_DATA / "paged.log")
MATERIALIZED = parse_trace(SWEEP_DATA / "materialized.log")


def test_page_boundary_inputs_sit_on_both_sides_of_two_boundaries() -> None:
    made = inputs_for([CoverageClass.PAGE_BOUNDARY], seeds=(0, 1))
    lens = sorted({int(i.args[1]) for i in made})
    assert lens == [15, 16, 17, 31, 32, 33]
    assert len(made) == 12 and all(i.args[-2:] in (("--seed", "0"), ("--seed", "1"))
                                   for i in made)


def test_width_inputs_each_verify_every_width() -> None:
    made = inputs_for([CoverageClass.VERIFY_WIDTHS])
    assert [sorted(map(int, i.args[1].split(","))) for i in made] == [[1, 2, 3, 4]] * 4
    assert len({i.args[1] for i in made}) == 4  # in four orders


def test_eos_inputs_use_the_ids_given() -> None:
    assert eos_ids_of([[1, 2, 3, 4, 5, 4], [9, 9, 9, 7]]) == (4, 5, 7)
    made = inputs_for([CoverageClass.EOS], eos_ids=(4, 5))
    assert [i.args[:2] for i in made] == [("--eos-id", "4"), ("--eos-id", "5")]


def test_the_lanes_sweep_is_about_pages_and_adds_its_args_to_both_arms() -> None:
    config = load_config(SHIPPED)
    spec = config.comparison("lanes")
    assert sweep_classes(spec) == (CoverageClass.PAGE_BOUNDARY, CoverageClass.PAGE_ORDER)
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
    return SweepReport("lanes", run_sweep(inputs_for(classes), judge))


def test_the_summary_counts_coverage_and_differences_per_class() -> None:
    items = inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.BATCH])
    pages_only = replace(PAGED, coverage=SpecCoverage({"page_cross": 2, "batch": 1}, (), 1))
    none = replace(MATERIALIZED, coverage=SpecCoverage())

    def judge(item: SweepInput) -> InputRun:
        differ = item.cls is CoverageClass.PAGE_BOUNDARY and "15" in item.label
        return InputRun(verdict(VerdictKind.DIFFER if differ else VerdictKind.AGREE),
                        ("a", "b"), reached(pages_only, item.args), reached(none, item.args))

    outcomes = run_sweep(items, judge)
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
        kind = VerdictKind.DIFFER if "prompt_len=16" in item.label else VerdictKind.INERT
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
               "prompt_len=15)" in r for r in report.outcomes[0].verdict.reasons)
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
        if item.args[:2] == ("--prompt-len", "16"):  # this arm kept an older seed
            seed1 = dict(run.a.config.values) | {"seed": "1"} if run.a else {}
            return replace(run, a=replace(PAGED, config=SpecConfig(seed1, PAGED.config.lines)))
        return run

    report = sweep(judge)
    kinds = {o.input.label: o.kind for o in report.outcomes}
    assert kinds.pop("prompt_len=16 seed=0") is VerdictKind.UNINFORMATIVE
    assert set(kinds.values()) == {VerdictKind.AGREE}
    assert report.exit_code is ExitCode.OK


def test_inputs_combine_as_checks_comparisons_do_a_failed_arm_first() -> None:
    def judge(item: SweepInput) -> InputRun:
        kind = {"prompt_len=15 seed=0": VerdictKind.ARM_FAILED,
                "prompt_len=16 seed=0": VerdictKind.DIFFER}.get(item.label, VerdictKind.AGREE)
        return judge_all(kind)(item)

    assert sweep(judge).exit_code is ExitCode.ARM_FAILED


def test_an_arm_that_does_not_report_a_setting_leaves_that_input_unshown() -> None:
    # the arm's traces differ from input to input, but its [spec-config] says nothing of the
    # prompt length the input set: nothing shows that setting reached it
    def judge(item: SweepInput) -> InputRun:
        run = judge_all(VerdictKind.AGREE)(item)
        if run.b is not None and item.args[:2] == ("--prompt-len", "31"):
            values = {k: v for k, v in run.b.config.values.items() if k != "prompt_len"}
            return replace(run, b=replace(run.b, config=SpecConfig(values, run.b.config.lines)))
        return run

    report = sweep(judge)
    named = {o.input.label: o.verdict.reasons for o in report.outcomes
             if o.kind is VerdictKind.UNINFORMATIVE}
    assert list(named) == ["prompt_len=31 seed=0"]
    assert any("materialized's [spec-config] does not report prompt_len" in r
               for r in named["prompt_len=31 seed=0"])


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
