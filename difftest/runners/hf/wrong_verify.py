"""Known-wrong speculative-sampling verifies for probes: transformers' rejection test with one
rule changed, put in place of `transformers.generation.utils._speculative_sampling` for the
duration of a run (`wrong_verify`).

transformers' verify (algorithm 1 of Leviathan et al.): q and p the softmax of the draft's and
the target's processed scores, draft x_i accepted while a fresh uniform r_i < p_i(x_i) /
q_i(x_i), and at the first rejection a token drawn from max(0, p - q) normalised; after k
acceptances a bonus token from p_{k+1}. The two mutations here change one line of that each:

- noise-reuse: the test's r_i is the uniform that drew x_i. The assistant draws with
  `torch.multinomial`, which exposes no uniform, so r_i is the one an inverse-CDF draw of x_i
  (ids most probable first, as the reference runner draws) would have used, drawn given x_i:
  F(x_i-) + V q(x_i) with V uniform. (x_i, r_i) then has exactly the joint law of a token and
  the uniform that drew it, and r_i is uniform on its own: only its tie to x_i is wrong.
- residual-unnormalised: the rejection's token is an inverse-CDF draw of one uniform over
  max(0, p - q) as it stands, not normalised (the reference runner's rule): a uniform beyond
  the residual's mass falls onto the least probable id.

The other two known-wrong samplers (temperature-draft-only, top-p-draft-only) change what the
assistant samples from, not the test: `sampling.draft_overrides`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

VERIFY_MUTATIONS: tuple[str, ...] = ("noise-reuse", "residual-unnormalised")


def _sorted_cdf(probs: Any) -> tuple[Any, Any]:
    """(ids most probable first, lower id first among equals; their cumulative mass)."""
    import torch

    values, order = torch.sort(probs, descending=True, stable=True)
    return order, torch.cumsum(values, dim=-1)


def reused_uniforms(q: Any, drafted: Any) -> Any:
    """Per drafted row i, the uniform an inverse-CDF draw of `drafted[i]` from `q[i]` used:
    F(x-) + V q(x), V uniform (the noise-reuse sampler's acceptance uniforms)."""
    import torch

    out = torch.empty(len(drafted), dtype=q.dtype)
    for i, x in enumerate(drafted.tolist()):
        order, cdf = _sorted_cdf(q[i])
        rank = int((order == x).nonzero()[0, 0])
        below = cdf[rank - 1] if rank > 0 else torch.zeros((), dtype=q.dtype)
        out[i] = below + torch.rand((), dtype=q.dtype) * q[i, x]
    return out


def unnormalised_draw(rest: Any) -> int:
    """An inverse-CDF draw of one uniform over `rest` read as it stands (its mass below one):
    a uniform past the mass falls onto the last id of the order, the least probable."""
    import torch

    order, cdf = _sorted_cdf(rest)
    u = torch.rand((), dtype=cdf.dtype)
    idx = int(torch.searchsorted(cdf, u.reshape(1), right=True)[0])
    return int(order[min(idx, len(order) - 1)])


def mutated_sampling(mutation: str) -> Any:
    """transformers' `_speculative_sampling` (same arguments, same returns) with `mutation`'s
    one rule changed."""
    import torch

    def verify(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
               new_logits: Any, assistant_ensemble_weight: float | None = None) -> Any:
        if assistant_ensemble_weight is not None:
            raise ValueError("the known-wrong verifies test plain speculative sampling only")
        drafted = candidate_input_ids[0, -candidate_length:]
        q = candidate_logits[0].softmax(dim=-1)
        p = new_logits[0].softmax(dim=-1)
        rows = torch.arange(candidate_length)
        ratio = p[rows, drafted] / q[rows, drafted]
        r = (reused_uniforms(q, drafted) if mutation == "noise-reuse"
             else torch.rand_like(ratio))
        n_matches = ((~(r < ratio)).cumsum(dim=-1) < 1).sum()
        n = int(n_matches)
        if n < candidate_logits.shape[1]:
            rest = torch.clamp(p[n] - q[n], min=0)
            if mutation == "residual-unnormalised" and float(rest.sum()) > 0:
                token = unnormalised_draw(rest)
            else:  # p equal to q to the last bit leaves no residual: p itself (transformers
                # would divide by zero there; the reference runner draws from p too)
                law = rest / rest.sum() if float(rest.sum()) > 0 else p[n]
                token = int(torch.multinomial(law, num_samples=1))
        else:
            token = int(torch.multinomial(p[n], num_samples=1))
        t = torch.tensor([[token]], dtype=candidate_input_ids.dtype)
        valid = torch.cat((drafted[:n][None, :], t), dim=-1) if n > 0 else t
        return valid, n_matches

    return verify


@contextmanager
def wrong_verify(mutation: str | None) -> Iterator[None]:
    """Inside the block transformers verifies with `mutation`'s rule (a VERIFY_MUTATIONS name);
    any other mutation, or none, leaves transformers' own verify in place."""
    if mutation not in VERIFY_MUTATIONS:
        yield
        return
    import transformers.generation.utils as generation

    original = generation._speculative_sampling
    generation._speculative_sampling = mutated_sampling(mutation)
    try:
        yield
    finally:
        generation._speculative_sampling = original
