"""Runner options and the environment variables that choose lane, mutation and trace level."""

from __future__ import annotations

import pytest

from difftest.core.errors import UsageError
from difftest.runners.reference.options import RunnerOptions, lane_from_env, mutation_from_env


@pytest.mark.parametrize("value, lane", [
    (None, "paged"), ("", "paged"), ("1", "paged"), ("yes", "paged"), ("0", "materialized"),
    (" 0\n", "materialized"),
])
def test_lane_from_vt_dflash_paged(value: str | None, lane: str) -> None:
    assert lane_from_env({} if value is None else {"VT_DFLASH_PAGED": value}) == lane


@pytest.mark.parametrize("value, mutation", [
    (None, "none"), ("", "none"), ("none", "none"), ("causal-mask", "causal-mask"),
    ("skip-kv-write", "skip-kv-write"), ("stale-seq-lens", "stale-seq-lens"),
])
def test_mutation_from_environment(value: str | None, mutation: str) -> None:
    assert mutation_from_env({} if value is None else {"DIFFTEST_MUTATION": value}) == mutation


def test_unknown_mutation_in_environment_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="DIFFTEST_MUTATION='causal'"):
        mutation_from_env({"DIFFTEST_MUTATION": "causal"})


@pytest.mark.parametrize("changes, needle", [
    (dict(lane="fused"), "unknown lane 'fused'"),
    (dict(mutation="off-by-one"), "unknown mutation"),
    (dict(vocab=16), "vocab must be an integer >= 32"),
    (dict(k=0), "k must be an integer >= 1"),
    (dict(steps=True), "steps must be an integer"),
    (dict(topk=300), "topk (300) cannot exceed vocab"),
    (dict(layer_masks=("full",)), "1 masks for 2 draft layers"),
    (dict(layer_masks=("full", "sliding:x")), "bad layer mask 'sliding:x'"),
    (dict(final_logit_softcapping=0.0), "must be > 0"),
    (dict(seed=10**23), "seed must be an integer >= 0 and <= 4294967295, got 1000"),
    (dict(seed=-1), "seed must be an integer >= 0"),
    (dict(nondet_seed=2**64), "nondet_seed must be an integer >= 0 and <= 9223372036854775807"),
])
def test_bad_options_raise_usage_errors(changes: dict, needle: str) -> None:
    with pytest.raises(UsageError) as info:
        RunnerOptions(**changes)
    assert needle in str(info.value)


def test_masks_default_to_full_and_parse_windows() -> None:
    assert RunnerOptions().masks() == (("full", 0), ("full", 0))
    assert RunnerOptions(layers=3, layer_masks=("causal", "sliding:8", "full")).masks() == \
        (("causal", 0), ("sliding", 8), ("full", 0))
