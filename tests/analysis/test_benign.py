"""Near-tie flips and in-tolerance logit rows judged against the benign rate: a wrong arm whose
every flip is excused one at a time is DIFFER by their number; a benign one at its calibrated
rate stays AGREE; near_tie covering most margins is said, and no AGREE rests on it alone."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from conftest import logits_line, verify_line
from difftest.analysis.audit import audit_trace
from difftest.analysis.benign import (ALPHA, BLIND_SHARE, RateEffect, RateTest, _test, rate_effect,
                                      rate_tests)
from difftest.analysis.compare import compare
from difftest.analysis.verdict import judge
from difftest.core.kinds import Instrument, VerdictKind
from difftest.core.model import ArmTrace
from difftest.core.rules import Rules
from difftest.core.thresholds import BenignRate, Calibrated
from difftest.flow.evaluate import with_rate_effect
from difftest.trace import parse_text

REQUESTS, STEPS, K = 12, 10, 3


def _trace(flip_every: int, seed: int = 0, shift: float = 0.0, margin: float = 0.2) -> ArmTrace:
    """Arms drafting the top-1 id of seeded rows with margin `margin`; with `flip_every` > 0,
    every such row's top two swap (a near-tie flip: both margins `margin`), and `shift` is
    added to every logit of the second half of each row's list."""
    rng = random.Random(seed)
    lines = []
    n = 0
    for r in range(REQUESTS):
        for pos in range(STEPS):
            rows, draft = [], []
            for _ in range(K):
                ids = rng.sample(range(10, 500), 3)
                top = rng.uniform(4.0, 9.0)
                vals = [top, top - margin, top - margin - 1.5]
                n += 1
                if flip_every and n % flip_every == 0:
                    ids[0], ids[1] = ids[1], ids[0]
                vals = [vals[0], vals[1], vals[2] + shift]
                rows.append(list(zip(ids, (f"{v:.4f}" for v in vals), strict=True)))
                draft.append(ids[0])
            lines.append(verify_line(f"r{r}", pos, draft, [7]))
            lines += [logits_line(f"r{r}", pos, j, row) for j, row in enumerate(rows, start=1)]
    return parse_text("\n".join(lines) + "\n")


RULES = Rules(near_tie=1.0, atol=2.0)
BENIGN = Calibrated("t.toml", near_tie_flips=BenignRate(10, 1000, 30, 500.0))


def _effect(b: ArmTrace, calibrated: Calibrated | None = BENIGN,
            instruments: tuple[Instrument, ...] = (Instrument.TOKENS,)) -> RateEffect:
    a = _trace(0)
    return rate_effect(compare(a, b, RULES), calibrated, instruments)


def test_near_tie_flips_above_the_benign_rate_are_differ_naming_rate_benign_and_interval() -> None:
    effect = _effect(_trace(3))  # a third of the rows flip, each a near-tie
    assert effect.kind is VerdictKind.DIFFER
    [test] = effect.tests
    assert test.exceeds and test.rate.value == pytest.approx(1 / 3)
    said = effect.reasons[0]
    assert said.startswith("near-tie flip rate 0.3333 (99% [")
    assert "against the benign rate 0.01 (99% [" in said and "calibrated, t.toml" in said
    assert "above the benign rate" in said


def test_a_rate_within_the_benign_one_changes_nothing() -> None:
    effect = _effect(_trace(100))  # 3 flips in 360 rows, against a benign 1%
    assert effect.kind is None
    assert "within the benign rate" in effect.reasons[0]


def test_without_a_benign_rate_nothing_is_judged() -> None:
    effect = _effect(_trace(3), calibrated=None)
    assert effect.tests == ()  # (near_tie hides every row here: that alone is said, below)


def test_logit_rows_above_the_benign_level_are_judged_too() -> None:
    calibrated = Calibrated("t.toml", logit_level=0.5,
                            above_level=BenignRate(100, 1000, 30, 400.0))
    a = _trace(0)
    tests = rate_tests(compare(a, _trace(0, shift=1.0), RULES), calibrated)
    [t] = tests
    assert t.rate.value == 1.0 and t.exceeds  # every row moved 1.0: within atol 2, above 0.5
    assert t.name == "rate of logit rows above the benign level 0.5"
    same = rate_tests(compare(a, _trace(0, shift=0.2), RULES), calibrated)
    assert not same[0].exceeds and same[0].rate.value == 0.0


def test_near_tie_covering_most_margins_says_so_and_blocks_a_tokens_only_agree() -> None:
    b = _trace(0)
    effect = _effect(b, calibrated=None)  # every margin 0.2 < near_tie 1: all hidden
    assert effect.blind_share == 1.0 > BLIND_SHARE
    assert effect.kind is VerdictKind.UNINFORMATIVE
    assert "the token instrument is nearly blind: near_tie 1 is above the margins of 100% of " \
           "the compared rows" in effect.reasons[-1]
    # the logits could still fail: said, but the agreement stands on them
    effect = _effect(b, calibrated=None, instruments=(Instrument.TOKENS, Instrument.LOGITS))
    assert effect.kind is None and effect.blind_share == 1.0
    # a wide margin: near_tie hides nothing
    wide = _trace(0, margin=3.0)
    effect = rate_effect(compare(_trace(0, margin=3.0), wide, RULES), None, (Instrument.TOKENS,))
    assert effect.kind is None and effect.blind_share == 0.0


def test_the_verdict_takes_the_effect_only_over_an_agree() -> None:
    a, b = _trace(0), _trace(3)
    c = compare(a, b, RULES)
    v = judge(c, audit_trace(a), audit_trace(b), names=("a", "b"))
    assert v.kind is VerdictKind.AGREE  # each flip excused one at a time
    effect = rate_effect(c, BENIGN, v.instruments)
    got = with_rate_effect(v, effect)
    assert got.kind is VerdictKind.DIFFER
    assert got.reasons[-1].startswith("verdict differ, not agree: every row was within the rules")
    differ = judge(compare(a, b, Rules(near_tie=0.0)), audit_trace(a), audit_trace(b),
                   names=("a", "b"))
    assert with_rate_effect(differ, effect).kind is VerdictKind.DIFFER


def test_the_test_level_holds_under_equal_rates() -> None:
    # equal true rates, benign and gate sampled alike: the rejections stay under alpha
    rng = random.Random(5)
    rejected, trials = 0, 300
    for _ in range(trials):
        p = 0.05
        values = np.array([rng.random() < p for _ in range(400)])
        groups = np.repeat(np.arange(20), 20)
        benign_events = sum(rng.random() < p for _ in range(400))
        t = _test("x", values, groups, BenignRate(benign_events, 400, 20, 400.0), "s", ALPHA)
        assert t is not None
        rejected += t.exceeds
    assert rejected / trials <= ALPHA


def test_without_a_file_the_a_a_reruns_give_the_benign_rate() -> None:
    from difftest.analysis.floor import measure_floor
    a = _trace(0)
    floor = measure_floor("a", [a, _trace(0)])  # bit-identical reruns: a zero floor
    assert floor.zero and floor.flips == 0
    c = compare(a, _trace(3), RULES, floor=floor)
    effect = rate_effect(c, None, (Instrument.TOKENS, Instrument.LOGITS))
    [t] = effect.tests
    assert t.source == "A/A reruns" and t.benign.rows == floor.rows and t.exceeds
    assert effect.kind is VerdictKind.DIFFER


def test_a_test_that_cannot_fail_says_whose_rows_are_the_cause() -> None:
    # a benign rate of 1 has the upper bound 1: no rate of B's can be above it, however many
    # rows B has; the sentence must not blame B's rows
    a = _trace(0)
    calibrated = Calibrated("t.toml", near_tie_flips=BenignRate(1000, 1000, 30, 500.0))
    [t] = rate_tests(compare(a, _trace(3), RULES), calibrated)
    assert not t.armed and not t.exceeds
    assert t.sentence().endswith(": the benign rate's upper bound is 1: no rate can exceed it, "
                                 "so this test could not have failed")
    # B's own rows too few: said as such
    few = Calibrated("t.toml", near_tie_flips=BenignRate(0, 1000, 30, 1000.0))
    [t] = rate_tests(compare(_trace(0), _trace(3), RULES), few)
    short = RateTest(t.name, replace(t.rate, rows=2, value=0.5), t.benign, t.source, 0.0, 1.0,
                     t.benign_low, 0.999, t.alpha)
    assert not short.armed
    assert "too few independent rows of this comparison (" in short.sentence()


def test_a_file_without_a_benign_flip_rate_says_the_rate_was_not_judged() -> None:
    # a thresholds file from before [benign] (or with it left out): the flips are excused one at
    # a time, and the report says the rate went unjudged, with the command that fixes it
    old_file = Calibrated("old.toml")
    effect = _effect(_trace(3), calibrated=old_file)
    said = [r for r in effect.reasons if r.startswith("near-tie flip rate not judged")]
    assert len(said) == 1 and "old.toml records no benign rate" in said[0]
    assert "`difftest calibrate -c NAME`" in said[0]
    # near-ties flipped and nothing can weigh them: no AGREE, even where the logits could fail
    # (each flip excused one at a time would pass a wrong arm that flips every row)
    assert effect.tests == () and effect.kind is VerdictKind.UNINFORMATIVE
    assert "120 near-tie flip(s) here, so the verdict cannot be AGREE" in said[0]
    logits = _effect(_trace(3), calibrated=old_file,
                     instruments=(Instrument.TOKENS, Instrument.LOGITS))
    assert logits.kind is VerdictKind.UNINFORMATIVE
    # no near-tie flip: said, nothing demanded
    quiet = _effect(_trace(0), calibrated=old_file,
                    instruments=(Instrument.TOKENS, Instrument.LOGITS))
    assert quiet.kind is None and any("not judged" in r for r in quiet.reasons)
    # with the rate, nothing of the kind is said
    assert not any("not judged" in r for r in _effect(_trace(3)).reasons)
    # without a thresholds file there is no file to blame (A/A or nothing, said elsewhere)
    assert not any("not judged" in r for r in _effect(_trace(3), calibrated=None).reasons)
