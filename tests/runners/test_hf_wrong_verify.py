"""The transformers runner's known-wrong verifies (difftest.runners.hf.wrong_verify): each
changes exactly one rule of transformers' `_speculative_sampling` and nothing else, and is in
place only for the run that asked for it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
generation = pytest.importorskip("transformers.generation.utils")

from difftest.runners.hf.wrong_verify import (mutated_sampling, reused_uniforms,  # noqa: E402
                                              unnormalised_draw, wrong_verify)


def by_hand_interval(q: list[float], x: int) -> tuple[float, float]:
    """[F(x-), F(x-) + q(x)): the uniforms an inverse-CDF draw maps to x, ids most probable
    first and the lower id first among equals, summed in plain Python."""
    order = sorted(range(len(q)), key=lambda i: (-q[i], i))
    below = sum(q[i] for i in order[:order.index(x)])
    return below, below + q[x]


def test_the_reused_uniform_is_one_that_draws_the_drafted_token() -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        q = torch.softmax(torch.randn(3, 12, generator=gen, dtype=torch.float64) * 2, dim=-1)
        drafted = torch.multinomial(q, 1, generator=gen).squeeze(1)
        u = reused_uniforms(q, drafted)
        for i, x in enumerate(drafted.tolist()):
            low, high = by_hand_interval(q[i].tolist(), x)
            assert low - 1e-12 <= float(u[i]) < high + 1e-12


def test_the_reused_uniform_is_uniform_on_its_own() -> None:
    """Over tokens drawn from q, the reused uniform has the uniform law (only its tie to the
    token is wrong): its deciles each hold a tenth of 4000 draws, within 4 standard errors."""
    torch.manual_seed(1)
    q = torch.softmax(torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]], dtype=torch.float64), dim=-1)
    u = torch.cat([reused_uniforms(q, torch.multinomial(q, 1)[0]) for _ in range(4000)])
    counts = torch.histc(u, bins=10, min=0.0, max=1.0)
    se = (4000 * 0.1 * 0.9) ** 0.5
    assert bool(((counts - 400).abs() < 4 * se).all()), counts.tolist()


def test_the_unnormalised_residual_falls_past_its_mass_onto_the_least_probable_id() -> None:
    torch.manual_seed(2)
    rest = torch.tensor([0.0, 0.3, 0.1, 0.0], dtype=torch.float64)  # mass 0.4
    drawn = [unnormalised_draw(rest) for _ in range(4000)]
    share = {i: drawn.count(i) / 4000 for i in range(4)}
    # the order most probable first, equals by id: 1, 2, 0, 3; past 0.4 is id 3
    for i, expected in {0: 0.0, 1: 0.3, 2: 0.1, 3: 0.6}.items():
        assert share[i] == pytest.approx(expected, abs=4 * (expected * (1 - expected) / 4000) ** 0.5
                                         + 1e-12)


def verify_inputs(seed: int, gamma: int = 4, vocab: int = 16) -> tuple[object, ...]:
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(vocab, (1, 3), generator=gen)
    candidate_logits = torch.randn(1, gamma, vocab, generator=gen)
    drafted = torch.multinomial(candidate_logits[0].softmax(-1), 1, generator=gen).T
    new_logits = candidate_logits.clone() if seed % 2 else torch.randn(1, gamma + 1, vocab,
                                                                       generator=gen)
    if seed % 2:  # p equal to q on every drafted row: every draft is accepted
        new_logits = torch.cat((new_logits, torch.randn(1, 1, vocab, generator=gen)), dim=1)
    return torch.cat((prompt, drafted), dim=1), candidate_logits, gamma, new_logits


@pytest.mark.parametrize("seed", range(12))
def test_the_unnormalised_residual_changes_only_the_rejections_draw(seed: int) -> None:
    """Under one generator state transformers' verify and the residual-unnormalised one accept
    the same drafts (the same uniforms in the same order); where every draft is accepted they
    emit the same tokens, bonus included, in the same shapes and types."""
    inputs = verify_inputs(seed)
    torch.manual_seed(seed)
    ours, n_ours = mutated_sampling("residual-unnormalised")(*inputs)
    torch.manual_seed(seed)
    theirs, n_theirs = generation._speculative_sampling(*inputs)
    assert int(n_ours) == int(n_theirs) and n_ours.shape == n_theirs.shape == ()
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    n = int(n_theirs)
    assert torch.equal(ours[:, :n], theirs[:, :n])
    if seed % 2:
        assert n == inputs[2] and torch.equal(ours, theirs)


def test_noise_reuse_accepts_by_the_drafts_own_uniform() -> None:
    """The reused uniform decides: the draft ranked first by q has a uniform below q(x) and is
    accepted wherever p(x)/q(x) is at least q(x); one ranked last (uniform above 1 - q(x)) is
    rejected wherever p(x)/q(x) is below that."""
    q_row = torch.tensor([0.7, 0.2, 0.1])
    candidate_logits = q_row.log()[None, None, :].repeat(1, 1, 1)
    accept_first = torch.tensor([[0.6, 0.3, 0.1], [0.3, 0.3, 0.4]]).log()[None]
    verify = mutated_sampling("noise-reuse")
    for _ in range(50):
        tokens, n = verify(torch.tensor([[5, 0]]), candidate_logits, 1, accept_first)
        assert int(n) == 1 and int(tokens[0, 0]) == 0  # 0.6 / 0.7 > 0.7 > u
    reject_last = torch.tensor([[0.7, 0.2, 0.08], [0.3, 0.3, 0.4]]).log()[None]
    for _ in range(50):
        _, n = verify(torch.tensor([[5, 2]]), candidate_logits, 1, reject_last)
        assert int(n) == 0  # u >= 0.9 > 0.8 = p / q


def test_the_wrong_verify_is_in_place_for_its_block_only() -> None:
    own = generation._speculative_sampling
    with wrong_verify("none"):
        assert generation._speculative_sampling is own
    with wrong_verify("top-p-draft-only"):  # a sampler of the assistant's, not of the verify
        assert generation._speculative_sampling is own
    with pytest.raises(RuntimeError), wrong_verify("noise-reuse"):
        assert generation._speculative_sampling is not own
        raise RuntimeError
    assert generation._speculative_sampling is own
