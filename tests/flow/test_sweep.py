"""The sweep's generated inputs reach what they are made for: page boundaries at
page_size * m - 1, m, m + 1, every verify width, both sides of a window edge."""

from __future__ import annotations

from difftest.config import load_config
from difftest.core.corpus import CoverageClass
from difftest.core.kinds import VerdictKind
from difftest.core.model import SpecCoverage
from difftest.flow.sweep import (InputOutcome, SweepInput, eos_ids_of, inputs_for, run_sweep,
                                 summarize, sweep_classes, with_args)
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "default.toml"


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


def test_the_summary_counts_coverage_and_differences_per_class() -> None:
    items = inputs_for([CoverageClass.PAGE_BOUNDARY, CoverageClass.BATCH])
    reached = SpecCoverage({"page_cross": 2, "batch": 1}, (), 1)

    def judge(item: SweepInput) -> tuple[VerdictKind, SpecCoverage, SpecCoverage]:
        differ = item.cls is CoverageClass.PAGE_BOUNDARY and "15" in item.label
        return (VerdictKind.DIFFER if differ else VerdictKind.AGREE), reached, SpecCoverage()

    outcomes = run_sweep(items, judge)
    assert all(isinstance(o, InputOutcome) for o in outcomes)
    pages, batch = summarize(outcomes)
    assert (pages.cls, pages.inputs, pages.covered, pages.differed) == \
        (CoverageClass.PAGE_BOUNDARY, 6, 6, 1)
    assert (batch.cls, batch.inputs, batch.covered, batch.differed) == \
        (CoverageClass.BATCH, 3, 0, 0)  # one request per batch is not two
