"""A comparison's rules: one record, checked once; the overrides, the TOML keys, the JSON echo
and the API keywords derived from its fields; overrides applied and checked in one place."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from difftest.analysis.compare import Comparison, compare
from difftest.config import _COMPARISON_KEYS, AcceptanceGate, ComparisonSpec
from difftest.core.rules import OVERRIDE_KEYS, RULE_KEYS, InvalidValue, Rules
from difftest.core.thresholds import Dtype, ToleranceMode
from difftest.core.errors import UsageError
from difftest.core.kinds import DraftingKind, Expect
from difftest.trace import parse_lines
from difftest.flow.overrides import (OverrideKeywords, Overrides, RunKeywords, RunOptions,
                            run_options, split_keywords)

SPEC = ComparisonSpec(name="t", arm_a="a", arm_b="b", rules=Rules(atol=0.5))


def test_the_keywords_spell_the_records_fields() -> None:
    assert list(OverrideKeywords.__annotations__) == [f.name for f in fields(Overrides)]
    assert [f.name for f in fields(Overrides)] == list(OVERRIDE_KEYS)
    assert set(OVERRIDE_KEYS) < set(RULE_KEYS)
    # `into` is no keyword: only a command that made its own folder (localize, bisect) sets it
    assert [k.replace("cache_dir", "cache") for k in RunKeywords.__annotations__] == [
        f.name for f in fields(RunOptions) if f.name != "into"]


def test_apply_sets_what_is_given_and_leaves_the_rest() -> None:
    rules = Overrides(expect="differ", near_tie=0.25, drafting="sequential").apply(SPEC.rules)
    assert (rules.expect, rules.near_tie, rules.drafting, rules.atol) == (
        Expect.DIFFER, 0.25, DraftingKind.SEQUENTIAL, 0.5)
    # where each came from travels with the rules
    assert rules.overridden == ("expect", "near_tie", "drafting")
    assert Overrides().apply(SPEC.rules) == SPEC.rules and Overrides().on(SPEC) == SPEC
    assert Overrides(atol=0.0).apply(SPEC.rules).atol == 0.0  # a zero is a value, not "unset"
    assert Overrides(min_differing=2).on(SPEC).rules.min_differing == 2


def test_a_comparison_table_takes_the_rules_keys_and_the_echo_reads_back() -> None:
    """One list of rules: the TOML keys, meta.json's echo and the overrides all follow it."""
    assert set(RULE_KEYS) <= set(_COMPARISON_KEYS)
    spec = ComparisonSpec("t", "a", "b", Rules(
        expect="same", min_differing=2, near_tie=0.5, noise_runs=3,
        mutations=("causal-mask",), drafting="sequential", toggle=("lane",), teacher_force=True,
        acceptance=AcceptanceGate(0.02), tolerance=ToleranceMode.DTYPE,
        overridden=("near_tie", "drafting")), arm_dtypes=(Dtype.FLOAT32, None), gate_input="7")
    echo = spec.echo()
    # `decoding` is echoed only when sampled, as teacher_force only when asked for: a greedy
    # record reads as it did before the rule existed
    assert set(RULE_KEYS) - {"decoding"} <= set(echo)
    assert echo["overridden"] == ["near_tie", "drafting"] and "decoding" not in echo
    assert ComparisonSpec.of(echo) == spec
    sampled = ComparisonSpec("s", "a", "b", Rules(decoding="sampled"))  # type: ignore[arg-type]
    assert sampled.echo()["decoding"] == "sampled"
    assert ComparisonSpec.of(sampled.echo()) == sampled
    with pytest.raises(InvalidValue, match="nera_tie: not a rule"):
        Rules.of({"nera_tie": 0.5})


def test_a_rule_is_stored_once() -> None:
    """The spec and the comparison each hold their rules as one `Rules`, never a field of their
    own beside it (a copy that the verdict and the reports could read apart)."""
    for record in (ComparisonSpec, Comparison):
        assert not set(RULE_KEYS) & {f.name for f in fields(record)}, record
    a = parse_lines(["[spec-verify] req=r pos=1 k=1 drafted=[ 5 ] emitted=[ 5 6 ]"])
    rules = Rules(near_tie=0.25, atol=0.5, drafting=DraftingKind.SEQUENTIAL)
    assert compare(a, a, rules).rules is rules
    # the kind the rows were compared as, when the caller resolved it
    assert compare(a, a, rules, drafting=DraftingKind.BLOCK).rules == replace(
        rules, drafting=DraftingKind.BLOCK)
    # a rule passed loose is refused, not silently dropped
    with pytest.raises(TypeError, match="unexpected keyword argument.*near_tie"):
        compare(a, a, near_tie=0.5)  # type: ignore[call-arg]


def test_rules_are_checked_when_made_and_when_replaced() -> None:
    with pytest.raises(InvalidValue, match="noise_runs: must be 0"):
        Rules(noise_runs=1)
    with pytest.raises(InvalidValue, match="acceptance: gates a comparison that expects"):
        Rules(expect="differ", acceptance=AcceptanceGate(0.02))  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="overridden: must list keys among"):
        Rules(overridden=("name",))


@pytest.mark.parametrize("given, message", [
    (Overrides(atol=float("inf")), "the overrides: comparison atol: must be a finite number"),
    (Overrides(expect="maybe"), "the overrides: comparison expect: must be \"same\" or"),
    (Overrides(noise_runs=1), "the overrides: comparison noise_runs: must be 0 (no floor)"),
])
def test_a_bad_override_is_one_usage_error(given: Overrides, message: str) -> None:
    with pytest.raises(UsageError) as err:
        given.apply(SPEC.rules)
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
