"""Overrides: one record, its API keywords derived alike, applied and checked in one place."""

from __future__ import annotations

from dataclasses import fields

import pytest

from difftest.config import ComparisonSpec
from difftest.core.errors import UsageError
from difftest.core.kinds import DraftingKind, Expect
from difftest.flow.plan import RunOptions
from difftest.flow.rules import (OverrideKeywords, Overrides, RunKeywords, run_options,
                            split_keywords)

SPEC = ComparisonSpec(name="t", arm_a="a", arm_b="b", atol=0.5)


def test_the_keywords_spell_the_records_fields() -> None:
    assert list(OverrideKeywords.__annotations__) == [f.name for f in fields(Overrides)]
    assert [k.replace("cache_dir", "cache") for k in RunKeywords.__annotations__] == [
        f.name for f in fields(RunOptions)]


def test_apply_sets_what_is_given_and_leaves_the_rest() -> None:
    spec = Overrides(expect="differ", near_tie=0.25, drafting="sequential").apply(SPEC)
    assert (spec.expect, spec.near_tie, spec.drafting, spec.atol) == (
        Expect.DIFFER, 0.25, DraftingKind.SEQUENTIAL, 0.5)
    assert Overrides().apply(SPEC) == SPEC
    assert Overrides(atol=0.0).apply(SPEC).atol == 0.0  # a zero is a value, not "unset"


@pytest.mark.parametrize("given, message", [
    (Overrides(atol=float("inf")), "the overrides: comparison atol: must be a finite number"),
    (Overrides(expect="maybe"), "the overrides: comparison expect: must be \"same\" or"),
    (Overrides(noise_runs=1), "the overrides: comparison noise_runs: must be 0 (no floor)"),
])
def test_a_bad_override_is_one_usage_error(given: Overrides, message: str) -> None:
    with pytest.raises(UsageError) as err:
        given.apply(SPEC)
    assert str(err.value).startswith(message)


def test_keywords_become_records_over_the_ones_passed() -> None:
    given, opts = split_keywords({"near_tie": 0.1, "progress": False, "cache_dir": None},
                                 Overrides(atol=1.0), RunOptions(jobs=2))
    assert given == Overrides(atol=1.0, near_tie=0.1)
    assert opts == RunOptions(progress=False, jobs=2)
    with pytest.raises(TypeError, match="unexpected keyword argument.*nera_tie"):
        split_keywords({"nera_tie": 0.1})
    with pytest.raises(TypeError, match="not an override: run_root"):
        Overrides.of({"run_root": "x"})
    assert run_options({"cache_dir": "c"}).cache == "c"
    # a keyword left at None (an option not given) leaves the record's value alone
    assert Overrides.of({"atol": None, "expect": None}, Overrides(atol=1.0)) == Overrides(atol=1.0)
