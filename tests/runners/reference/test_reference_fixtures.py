"""The fixtures: informative drafts vary and are partly accepted; degenerate drafts are one id."""

from __future__ import annotations

import pytest

from difftest.runners.reference.options import ATTENTION_MUTATIONS, DEGENERATE_ID, RunnerOptions
from reference_helpers import cached_run, entropy_bits, parse

DEFAULT = RunnerOptions()


def margins(result) -> list[float]:
    """Top-1 minus top-2 of every traced block row."""
    rows = parse(result.lines).logits.values()
    return [top[0][1] - top[1][1] for top in rows]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_informative_drafts_are_varied_and_partly_accepted(seed: int) -> None:
    result = cached_run(DEFAULT.with_(seed=seed), 3)
    parsed = parse(result.lines)
    drafted = parsed.drafted()
    assert entropy_bits(drafted) >= 4.0
    assert len(set(drafted)) >= 25
    constant = sum(len(set(v["draft"])) == 1 for v in parsed.verifies)
    assert constant <= len(parsed.verifies) // 10
    accepted = [v["acc"] for v in parsed.verifies]
    assert 0 < sum(a > 0 for a in accepted) < len(accepted) // 2 + len(accepted) // 4
    assert any(a == 0 for a in accepted) and not all(a == DEFAULT.k for a in accepted)
    assert min(margins(result)) / 2 < 0.1  # a small perturbation could flip some token


@pytest.mark.parametrize("drafter", ["dflash1", "dflash2"])
@pytest.mark.parametrize("scalars", [True, False])
@pytest.mark.parametrize("lane", ["paged", "materialized"])
def test_degenerate_drafts_one_id_everywhere(drafter: str, scalars: bool, lane: str) -> None:
    result = cached_run(DEFAULT.with_(fixture="degenerate", drafter=drafter, scalars=scalars,
                                      lane=lane), 3)
    drafted = parse(result.lines).drafted()
    assert set(drafted) == {DEGENERATE_ID} and entropy_bits(drafted) == 0.0
    assert len(drafted) == DEFAULT.requests * DEFAULT.steps * DEFAULT.k


@pytest.mark.parametrize("mutation", ATTENTION_MUTATIONS)
def test_degenerate_margin_is_enormous_and_rest_of_row_follows_attention(mutation: str) -> None:
    result = cached_run(DEFAULT.with_(fixture="degenerate", mutation=mutation), 3)
    assert set(parse(result.lines).drafted()) == {DEGENERATE_ID}
    assert min(margins(result)) / 2 > 5.0
    # below the biased id the rows are not one fixed list: they follow the context
    runners_up = {tuple(i for i, _ in top[1:]) for top in parse(result.lines).logits.values()}
    assert len(runners_up) > len(result.records)


def test_degenerate_shares_the_informative_weights_but_the_bias() -> None:
    info = cached_run(DEFAULT, 3).records[0].logits
    dege = cached_run(DEFAULT.with_(fixture="degenerate"), 3).records[0].logits
    diff = dege - info
    assert diff[:, DEGENERATE_ID].min() > 50
    others = [i for i in range(DEFAULT.vocab) if i != DEGENERATE_ID]
    assert float(diff[:, others].abs().max()) == 0.0
