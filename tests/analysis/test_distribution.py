"""The distribution instrument's statistics on generated samples: under the null (both arms
draw from one law) the betting test calls DIFFER at most alpha of the time, measured; a planted
difference is found; the acceptance check holds a correct verify and flags a biased one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.analysis.distribution import (MIN_PAIRS, Bettor, DistributionTest, Draws,
                                            SampledEvidence, acceptance_check, aligned,
                                            distribution_test, draws_of, judge_sampled,
                                            ENDED, NOT_STARTED, prompt_of, sampled_kind,
                                            simulated_mde, tv)
from difftest.core.errors import TraceError
from difftest.core.kinds import VerdictKind
from difftest.core.model import ArmTrace
from difftest.trace.parser import parse_lines
from difftest.trace.sampled import VerifiedRows


def draws(rng: np.random.Generator, laws: np.ndarray, n: int) -> np.ndarray:
    """n draws of a stream whose token at position t follows laws[t] (independent positions)."""
    return np.stack([rng.choice(laws.shape[1], size=n, p=law) for law in laws], axis=1)


def trial(rng: np.random.Generator, law_a: np.ndarray, law_b: np.ndarray, n: int,
          prompts: int, alpha: float) -> DistributionTest:
    a = Draws({f"r{i}": draws(rng, law_a, n) for i in range(prompts)}, {})
    b = Draws({f"r{i}": draws(rng, law_b, n) for i in range(prompts)}, {})
    return distribution_test(a, b, alpha)


def binomial_ceiling(rate: float, trials: int) -> float:
    """rate plus three binomial standard deviations: a measured rate above it is not noise."""
    return rate + 3.0 * float(np.sqrt(rate * (1 - rate) / trials))


def random_laws(rng: np.random.Generator, positions: int, vocab: int, skew: float) -> np.ndarray:
    logits = rng.normal(scale=skew, size=(positions, vocab))
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@settings(max_examples=3, deadline=None)
@given(vocab=st.integers(2, 40), positions=st.integers(1, 6), skew=st.floats(0.0, 3.0),
       seed=st.integers(0, 2**32 - 1))
def test_false_red_rate_under_the_null_is_at_most_alpha(vocab: int, positions: int,
                                                        skew: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    law = random_laws(rng, positions, vocab, skew)
    alpha, trials = 0.1, 100
    red = sum(trial(rng, law, law, 30, 2, alpha).differ for _ in range(trials))
    assert red / trials <= binomial_ceiling(alpha, trials)


def test_false_red_rate_measured_at_alpha_0_05() -> None:
    """A fixed measurement (seeded): 200 null trials of 80 request pairs each."""
    rng = np.random.default_rng(2026)
    law = random_laws(rng, 5, 16, 1.5)
    red = sum(trial(rng, law, law, 40, 2, 0.05).differ for _ in range(200))
    assert red / 200 <= 0.05  # Ville's inequality bounds it; the measured rate is far below


@settings(max_examples=3, deadline=None)
@given(vocab=st.integers(4, 30), positions=st.integers(2, 6), seed=st.integers(0, 2**32 - 1))
def test_a_planted_difference_of_tv_0_2_or_more_is_found(vocab: int, positions: int,
                                                          seed: int) -> None:
    rng = np.random.default_rng(seed)
    law_a = random_laws(rng, positions, vocab, 1.0)
    # move 0.3 of each position's mass onto its least likely id: TV = 0.3 (1 - what it held)
    law_b = 0.7 * law_a
    least = law_a.argmin(axis=1)
    law_b[np.arange(positions), least] += 0.3
    assert float((0.5 * np.abs(law_a - law_b).sum(axis=1)).min()) >= 0.2
    found = sum(trial(rng, law_a, law_b, 150, 2, 0.01).differ for _ in range(10))
    assert found >= 9


def test_power_grows_with_the_pairs_seen() -> None:
    rng = np.random.default_rng(7)
    law_a = random_laws(rng, 4, 12, 1.0)
    law_b = 0.9 * law_a
    law_b[:, 3] += 0.1
    few = sum(trial(rng, law_a, law_b, 30, 2, 0.01).differ for _ in range(15))
    many = sum(trial(rng, law_a, law_b, 300, 2, 0.01).differ for _ in range(15))
    assert few < many and many >= 13


def test_the_excess_tv_is_near_zero_under_the_null_and_a_conservative_estimate_otherwise() -> None:
    rng = np.random.default_rng(3)
    law = random_laws(rng, 3, 8, 1.0)
    shifted = 0.6 * law
    shifted[:, 0] += 0.4
    same = trial(rng, law, law, 400, 2, 0.01)
    other = trial(rng, law, shifted, 400, 2, 0.01)
    true_tv = 0.5 * np.abs(law - shifted).sum(axis=1)
    assert max(abs(x) for x in same.excess_tv) < 0.05
    # where the laws differ the floor over-corrects (the sampling bias of a plug-in TV shrinks
    # as the laws part): the excess is a conservative estimate, the raw TV an upward one
    gap = true_tv - np.array(other.excess_tv)
    assert bool(np.all(gap > -0.03)) and bool(np.all(gap < 0.12))
    assert bool(np.all(np.array(other.raw_tv) > true_tv - 0.03))
    assert all(f > 0 for f in same.floor_tv)  # finite samples never show a TV of 0


def test_tv_of_samples() -> None:
    assert tv(np.array([1, 2]), np.array([2, 1])) == 0.0
    assert tv(np.array([1, 1]), np.array([2, 2])) == 1.0
    assert tv(np.array([1, 2, 3, 4]), np.array([1, 1, 1, 1])) == 0.75


def test_the_bettor_never_bets_against_its_own_record_nor_more_than_half() -> None:
    b = Bettor()
    assert b.bet() == 0.0
    for _ in range(50):
        b.add(-0.5)
    assert b.bet() == 0.0 and b.wealth == 1.0
    up = Bettor()
    for _ in range(200):
        up.add(0.5)
    assert up.bet() == 0.5 and up.crossed(0.01)


def rows_of(rng: np.random.Generator, n: int, bias: float) -> VerifiedRows:
    """n tested rows of one index: acceptance Bernoulli(ratio * bias) where a correct verify
    accepts with probability ratio; overlap is the mean ratio of the row's law."""
    q = rng.uniform(0.05, 1.0, size=n)
    ratio = rng.uniform(0.0, 1.0, size=n)
    accepted = (rng.uniform(size=n) < ratio * bias).astype(np.int64)
    return VerifiedRows(np.zeros(n, dtype=np.int64), accepted, ratio, ratio, q)


def test_the_acceptance_check_holds_a_correct_verify_and_flags_a_biased_one() -> None:
    rng = np.random.default_rng(11)
    false = sum(any(r.flagged for r in acceptance_check(rows_of(rng, 300, 1.0), 0.05))
                for _ in range(100))
    assert false / 100 <= 0.05
    found = sum(any(r.flagged for r in acceptance_check(rows_of(rng, 300, 0.7), 0.01))
                for _ in range(20))
    assert found == 20


def test_the_witnessed_acceptance_check_sees_a_token_dependent_bias() -> None:
    """Acceptance right on average but wrong per token (draft-favoured tokens accepted more,
    the others less), as when the verify reuses the uniform that drew the token."""
    rng = np.random.default_rng(5)
    n = 600
    q = rng.uniform(0.05, 1.0, size=n)
    ratio = np.full(n, 0.5)
    accepted = (rng.uniform(size=n) < np.where(q > 0.5, 0.7, 0.3)).astype(np.int64)
    rows = VerifiedRows(np.zeros(n, dtype=np.int64), accepted, ratio, ratio, q)
    (row,) = acceptance_check(rows, 0.01)
    assert row.flagged and abs(row.observed - row.expected) < 0.05


def test_the_verdict_kind_and_its_reasons() -> None:
    rng = np.random.default_rng(1)
    law = random_laws(rng, 3, 6, 1.0)
    few = trial(rng, law, law, MIN_PAIRS // 2 - 1, 2, 0.01)
    assert sampled_kind(SampledEvidence(few, {}))[0] is VerdictKind.UNINFORMATIVE
    same = trial(rng, law, law, 200, 2, 0.01)
    kind, reasons = sampled_kind(SampledEvidence(same, {}))
    assert kind is VerdictKind.AGREE and "would have been found in 90% of simulated tests" in reasons[0]
    biased = acceptance_check(rows_of(rng, 400, 0.6), 0.01)
    kind, reasons = sampled_kind(SampledEvidence(same, {"spec": biased}))
    assert kind is VerdictKind.DIFFER and reasons[0].startswith("spec: row 1 accepted")


def test_draws_pool_a_prompts_named_draws_over_every_position_any_draw_reached() -> None:
    """A prompt's matrix runs from the earliest start to the furthest end of its draws in
    either arm; a draw's cells before its start are NOT_STARTED and after its end ENDED."""
    assert [prompt_of(n) for n in ("r0~3", "r0", "a~b", "~1")] == ["r0", "r0", "a~b", "~1"]
    spec = parse_lines(["[SPECTRACE] req=r0~0 pos=5 k=2 ns=2 acc=1 draft=[ 1 2 ] emit=[ 1 3 ]",
                        "[SPECTRACE] req=r0~0 pos=7 k=2 ns=1 acc=0 draft=[ 1 2 ] emit=[ 4 ]",
                        "[SPECTRACE] req=r0~1 pos=5 k=2 ns=3 acc=2 draft=[ 1 2 ] emit=[ 1 2 9 ]"])
    alone = parse_lines([f"[SPECTRACE] req=r0 pos={p} k=0 ns=1 acc=0 draft=[ ] emit=[ {p} ]"
                         for p in (5, 6, 7, 8)])
    a, b = aligned(draws_of([spec]), draws_of([alone]))
    e = ENDED
    assert a.tokens["r0"].tolist() == [[1, 3, 4, e], [1, 2, 9, e]] and a.start["r0"] == 5
    assert b.tokens["r0"].tolist() == [[5, 6, 7, 8]]
    late = parse_lines(["[SPECTRACE] req=r0 pos=7 k=0 ns=1 acc=0 draft=[ ] emit=[ 7 ]"])
    _, c = aligned(draws_of([spec]), draws_of([late]))
    assert c.tokens["r0"].tolist() == [[NOT_STARTED, NOT_STARTED, 7]]


@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_the_mde_shrinks_with_the_pairs(alpha: float) -> None:
    rng = np.random.default_rng(0)
    law = random_laws(rng, 2, 4, 1.0)
    small, large = (trial(rng, law, law, n, 1, alpha) for n in (50, 800))
    assert large.mde < small.mde < 1.0


def constant_arm(names: list[str], token: int, length: int = 1) -> list[ArmTrace]:
    """One run whose every request emits `token` at each of `length` positions, one a step."""
    return [parse_lines([f"[SPECTRACE] req={n} pos={p} k=0 ns=1 acc=0 draft=[ ] emit=[ {token} ]"
                         for n in names for p in range(length)])]


def test_one_draw_per_prompt_is_learned_from_across_prompts() -> None:
    """30 prompts of one draw each, A always 7, B always 9 (TV 1): a witness that learned only
    from a prompt's own earlier pairs never bet; the cross-prompt class learns from the first."""
    names = [f"r{i}" for i in range(30)]
    ev = judge_sampled(constant_arm(names, 7), constant_arm(names, 9), {}, 0.01)
    assert sampled_kind(ev)[0] is VerdictKind.DIFFER


def test_two_draws_of_ten_prompts_decide_or_say_too_few() -> None:
    names = [f"r{i}~{j}" for i in range(10) for j in range(2)]
    ev = judge_sampled(constant_arm(names, 7), constant_arm(names, 9), {}, 0.01)
    assert sampled_kind(ev)[0] in (VerdictKind.DIFFER, VerdictKind.UNINFORMATIVE)


def test_the_stated_mde_is_reached_by_the_test() -> None:
    """Whatever AGREE states as detectable, a TV of 1 at as many pairs is detected."""
    for n in range(MIN_PAIRS, 60, 7):
        names = [f"r{i}" for i in range(n)]
        ev = judge_sampled(constant_arm(names, 7), constant_arm(names, 9), {}, 0.01)
        assert sampled_kind(ev)[0] is not VerdictKind.AGREE, n


def test_a_difference_in_how_many_positions_each_arm_emitted_is_judged() -> None:
    names = [f"r0~{j}" for j in range(25)]
    ev = judge_sampled(constant_arm(names, 7, length=8), constant_arm(names, 7, length=1), {},
                       0.01)
    kind, reasons = sampled_kind(ev)
    assert kind is not VerdictKind.AGREE, reasons
    names = [f"r{i}" for i in range(25)]
    ev = judge_sampled(constant_arm(names, 7, length=8), constant_arm(names, 7, length=1), {},
                       0.01)
    assert sampled_kind(ev)[0] is not VerdictKind.AGREE


def _streams(law: Callable[[int, int, int], int], prompts: int = 3, draws: int = 40,
             length: int | Callable[[int, int], int] = 10, start: Callable[[int], int] = lambda p: 0,
             twice: Callable[[int, int, int], int] | None = None) -> list[ArmTrace]:
    """One run: prompt p's draw d emits law(p, d, t) at offset t, one token a step; `twice`
    traces every step again with another token (a conflicting repeat)."""
    lines = []
    for p in range(prompts):
        for d in range(draws):
            n = length if isinstance(length, int) else length(p, d)
            for t in range(n):
                pos = start(p) + t
                lines.append(f"[SPECTRACE] req=r{p}~{d} pos={pos} k=0 ns=1 acc=0 draft=[ ] "
                             f"emit=[ {law(p, d, t)} ]")
                if twice is not None:
                    lines.append(f"[SPECTRACE] req=r{p}~{d} pos={pos} k=0 ns=1 acc=0 draft=[ ] "
                                 f"emit=[ {twice(p, d, t)} ]")
    return [parse_lines(lines)]


def _judged(a: list[ArmTrace], b: list[ArmTrace]) -> tuple[VerdictKind, list[str]]:
    return sampled_kind(judge_sampled(a, b, {}, 0.01, ("A", "B")))


def test_one_short_draw_hides_no_later_position() -> None:
    """One draw of A per prompt ends after a token (an early end); B emits a token A never
    does at every later position: the positions past the short draw are still compared."""
    rng = np.random.default_rng(1)
    a = _streams(lambda p, d, t: int(rng.integers(4)), length=lambda p, d: 1 if d == 7 else 10)
    b = _streams(lambda p, d, t: int(rng.integers(4)) if t == 0 else 20)
    assert _judged(a, b)[0] is VerdictKind.DIFFER


@pytest.mark.parametrize("length", [10, 30])
def test_a_difference_at_one_position_of_many_is_not_averaged_away(length: int) -> None:
    """TV 1 at one offset of 10 or 30, the same law elsewhere (the shipped draw count, 40 per
    prompt): DIFFER; without the difference, AGREE."""
    rng = np.random.default_rng(2)

    def arm(token: int) -> list[ArmTrace]:
        return _streams(lambda p, d, t: token if t == 5 else int(rng.integers(8)), length=length)

    assert _judged(arm(1), arm(2))[0] is VerdictKind.DIFFER
    kind, reasons = _judged(arm(1), arm(1))
    assert kind is VerdictKind.AGREE and "would have been found in 90% of simulated tests" in reasons[0]


def test_streams_at_other_positions_are_compared_not_dropped() -> None:
    """B's prompts r1 and r2 start at position 40 instead of 13: where a stream starts is part
    of what is compared."""
    rng = np.random.default_rng(3)
    a = _streams(lambda p, d, t: int(rng.integers(4)), length=6, start=lambda p: 13)
    b = _streams(lambda p, d, t: int(rng.integers(4)) if p == 0 else 30, length=6,
                 start=lambda p: 13 if p == 0 else 40)
    assert _judged(a, b)[0] is VerdictKind.DIFFER


def test_a_trace_whose_stream_breaks_decides_nothing() -> None:
    rng = np.random.default_rng(4)
    a = _streams(lambda p, d, t: int(rng.integers(4)), length=6)
    b = _streams(lambda p, d, t: int(rng.integers(4)), length=6, twice=lambda p, d, t: 30)
    kind, reasons = _judged(a, b)
    assert kind is VerdictKind.UNINFORMATIVE
    assert reasons[0].startswith("B: 720 trace finding(s) break the stream"), reasons[0]


@pytest.mark.parametrize(("n", "positions"), [(10, 6), (40, 6)])
def test_the_stated_detectable_tv_is_found(n: int, positions: int) -> None:
    """The promise of an AGREE: a TV of the stated size at every position (mass moved to a
    token neither arm drew) is found in at least 90% of comparisons of that shape; measured
    over 20 fresh ones (fewer than 15 found would be below 90% beyond chance, p < 0.05)."""
    rng = np.random.default_rng(n)
    law = random_laws(rng, positions, 8, 1.0)

    def arm(moved: float) -> Draws:
        out = {}
        for p in range(3):
            m = draws(rng, law, n)
            out[f"r{p}"] = np.where(rng.random(m.shape) < moved, 99, m)
        return Draws(out, {})

    a, b = arm(0.0), arm(0.0)
    test = distribution_test(a, b, 0.01)
    assert not test.differ
    stated = simulated_mde(a, b, 0.01)
    assert stated is not None and stated > test.oracle_mde  # the learned witness needs more
    found = sum(distribution_test(arm(0.0), arm(stated), 0.01).differ for _ in range(20))
    assert found >= 15, (stated, found)

    def between(moved: float) -> Draws:
        """Mass moved from tokens 0-3 to 4-7 at even positions and back at odd ones, the
        same law elsewhere: TV `moved` at every position, and no token gains overall."""
        flat = np.full((positions, 8), 1 / 8)
        flat[0::2, :4] -= moved / 4
        flat[0::2, 4:] += moved / 4
        flat[1::2, :4] += moved / 4
        flat[1::2, 4:] -= moved / 4
        return Draws({f"r{p}": draws(rng, flat, n) for p in range(3)}, {})

    uniform = between(0.0), between(0.0)
    stated = simulated_mde(*uniform, 0.01)
    assert stated is not None
    found = sum(distribution_test(between(0.0), between(min(stated, 0.5)), 0.01).differ
                for _ in range(20))
    assert stated > 0.5 or found >= 15, (stated, found)


def test_one_draft_accepted_at_target_probability_zero_is_a_difference() -> None:
    """A correct verify accepts x with probability min(1, p(x)/q(x)): one acceptance at p(x) = 0
    is proof, among 400 rows a statistic would not flag."""
    rng = np.random.default_rng(7)
    rows = rows_of(rng, 400, 1.0)
    assert not any(r.flagged for r in acceptance_check(rows, 0.01))
    accepted = rows.accepted.copy()
    ratio = rows.ratio.copy()
    accepted[0], ratio[0] = 1, 0.0
    broken = VerifiedRows(rows.index, accepted, rows.overlap, ratio, rows.q)
    found = acceptance_check(broken, 0.01)
    assert found[0].flagged and found[0].impossible == 1
    names = [f"r{i}~{j}" for i in range(3) for j in range(40)]
    ev = SampledEvidence(distribution_test(*aligned(draws_of(constant_arm(names, 7)),
                                                    draws_of(constant_arm(names, 7))), 0.01),
                         {"B": found})
    kind, reasons = sampled_kind(ev)
    assert kind is VerdictKind.DIFFER and "accepted whose traced target probability p(x) is 0" \
        in reasons[0]


def test_arms_that_never_sampled_decide_nothing() -> None:
    """40 draws of each prompt, all one stream, in both arms: the sampler never sampled."""
    names = [f"r{i}~{j}" for i in range(3) for j in range(40)]
    kind, reasons = sampled_kind(judge_sampled(constant_arm(names, 7, 4),
                                               constant_arm(names, 7, 4), {}, 0.01))
    assert kind is VerdictKind.UNINFORMATIVE and "nothing was sampled" in reasons[0]


def test_a_verify_past_the_stated_budget_is_an_error() -> None:
    """Only the verify that crosses `max_tokens` may pass it; one starting past it is not a
    budget's overshoot and is not cut silently."""
    lines = ["[spec-config] max_tokens=2"] + [
        f"[SPECTRACE] req=r0 pos={p} k=0 ns=1 acc=0 draft=[ ] emit=[ 5 ]" for p in range(3)]
    with pytest.raises(TraceError, match=r":4: .*starts past the budget max_tokens=2"):
        draws_of([parse_lines(lines)])
    assert draws_of([parse_lines(lines[:3])])["r0"] == [(0, [5, 5])]


def test_one_draft_rejected_at_ratio_one_is_a_difference() -> None:
    """The mirror: a draft with p(x) >= q(x) is always accepted by a correct verify."""
    rng = np.random.default_rng(8)
    rows = rows_of(rng, 400, 1.0)
    accepted, ratio = rows.accepted.copy(), rows.ratio.copy()
    accepted[0], ratio[0] = 0, 1.0
    found = acceptance_check(VerifiedRows(rows.index, accepted, rows.overlap, ratio, rows.q),
                             0.01)
    assert found[0].flagged and found[0].impossible == 1
