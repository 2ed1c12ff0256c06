"""The separation bound, proved over generated data: a lower prediction bound on a probe's
strength on an unseen input (not the minimum the inputs showed), and the number of inputs that
would bring it to the margin."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.flow.calibrate import (MARGIN, MAX_INPUTS, catch_rate_bound, inputs_needed,
                                     model_multiplier, strength_bound)

strength = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False)
strengths = st.lists(strength, min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(strengths)
def test_the_bound_is_below_the_geometric_mean_and_equal_only_without_spread(
        xs: list[float]) -> None:
    geo = math.exp(math.fsum(math.log(x) for x in xs) / len(xs))
    b = strength_bound(xs)
    assert b <= geo * (1 + 1e-12)
    if max(xs) / min(xs) > 1 + 1e-9:
        assert b < geo


@settings(max_examples=60, deadline=None)
@given(strengths, st.floats(min_value=0.01, max_value=100))
def test_the_bound_scales_with_the_strengths(xs: list[float], c: float) -> None:
    assert math.isclose(strength_bound([x * c for x in xs]), c * strength_bound(xs),
                        rel_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(strengths, st.floats(min_value=1.01, max_value=10))
def test_more_spread_at_the_same_centre_lowers_the_bound(xs: list[float], k: float) -> None:
    logs = [math.log(x) for x in xs]
    mean = math.fsum(logs) / len(logs)
    if max(logs) - min(logs) < 1e-6:
        return
    wider = [math.exp(mean + k * (v - mean)) for v in logs]
    assert strength_bound(wider) < strength_bound(xs)


@settings(max_examples=40, deadline=None)
@given(strengths)
def test_a_missed_input_leaves_no_bound_and_no_count(xs: list[float]) -> None:
    assert strength_bound([*xs, 0.0]) == 0.0
    assert inputs_needed([*xs, 0.0], len(xs) + 1) is None


def test_one_input_has_no_spread_and_certain_catches_are_unbounded() -> None:
    assert strength_bound([5.0]) == 0.0 and strength_bound([]) == 0.0
    assert strength_bound([math.inf, math.inf]) == math.inf
    assert inputs_needed([math.inf, math.inf], 2) == 2
    # one certain catch says nothing of the next input: no bound, and two inputs are needed
    assert strength_bound([math.inf]) == 0.0
    assert inputs_needed([math.inf], 1) == 2
    # without a model, n catches of n bound the catch rate only from 0.05 ** (1/n) up
    assert [round(catch_rate_bound(n), 3) for n in (1, 2, 10)] == [0.05, 0.224, 0.741]
    assert catch_rate_bound(58) < 0.95 <= catch_rate_bound(59)
    assert strength_bound([math.inf, 4.0, 4.0]) == 4.0  # spread of the finite ones: none


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=0.5, max_value=20), min_size=2, max_size=8))
def test_the_count_is_the_smallest_that_reaches_the_margin(xs: list[float]) -> None:
    n = len(xs)
    need = inputs_needed(xs, n)
    logs = [math.log(x) for x in xs]
    mean = math.fsum(logs) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in logs) / (n - 1))

    def projected(m: int) -> float:
        # the same strengths' spread, atol shrunk by the model's multiplier at m inputs
        grow = model_multiplier(n) / model_multiplier(m)
        return strength_bound([math.exp(mean + sd * z) * grow for z in _unit(m)])

    if need is None:
        assert projected(MAX_INPUTS) < MARGIN
    elif need == n:
        assert strength_bound(xs) >= MARGIN * (1 - 1e-9)
    else:
        assert projected(need) >= MARGIN * (1 - 1e-9)
        assert projected(need - 1) < MARGIN or need - 1 == n


def _unit(m: int) -> list[float]:
    """m values of mean 0 and sample standard deviation 1 (so a sample of m inputs with the
    seen mean and spread is exactly `mean + sd * z`)."""
    z = np.linspace(-1.0, 1.0, m)
    z = (z - z.mean()) / z.std(ddof=1)
    return [float(v) for v in z]


# derandomized: each example is itself a random experiment whose band holds 99.9% of outcomes,
# so fresh examples on every run would fail one run in a few hundred by chance alone (a
# seed that drew 108 of 1,500 did); the same eight examples each run still fail a bound that
# is a 92% one (a 94% one passes, with fresh examples too: the band is 3.1% to 6.9%)
@settings(max_examples=8, deadline=None, derandomize=True, database=None)
@given(st.integers(min_value=2, max_value=10), st.floats(min_value=-1, max_value=3),
       st.floats(min_value=0.05, max_value=1.5), st.integers(min_value=0, max_value=2**31))
def test_an_unseen_input_falls_below_the_bound_about_one_time_in_twenty(
        n: int, mu: float, sigma: float, seed: int) -> None:
    # lognormal strengths across inputs: the bound is a 95% prediction bound for one more
    rng = np.random.default_rng(seed)
    trials = 1500
    below = 0
    for _ in range(trials):
        xs = np.exp(rng.normal(mu, sigma, n + 1))
        below += bool(xs[-1] < strength_bound(xs[:-1].tolist()))
    # 5% expected; 1,500 trials put 99.9% of outcomes within +-1.9 points
    assert 0.031 <= below / trials <= 0.069, below / trials


def test_calibrate_refuses_a_bound_below_the_margin_and_says_how_many_inputs_reach_it() -> None:
    from pathlib import Path

    from difftest.core.errors import ExitCode
    from difftest.flow.calibrate import Bound, Calibration, ProbeSeparation
    atol = Bound(1.0, 16.9, "exponential model")
    # caught on all three inputs (1.3x to 2.6x the thresholds), but widely spread
    probe = ProbeSeparation("broken-mask", (1.3, 2.6, 1.8), (0.0, 0.0, 0.0), (1.3, 2.6, 1.8))
    cal = Calibration("c", ("1", "2", "3"), (0.1, 0.05, 0.08), (0.0, 0.0, 0.0), atol, 2.0,
                      (probe,), Path("run"), None)
    assert cal.caught and cal.separation is not None and cal.separation < MARGIN
    assert cal.exit_code is ExitCode.UNINFORMATIVE
    need = cal.needed
    assert need is not None and 3 < need <= MAX_INPUTS
    line = next(s for s in cal.summary() if "separation" in s)
    assert (f"every probe was caught on the 3 input(s), but the 95% lower bound of probe "
            f"broken-mask's strength on an unseen input is below the margin; about {need} "
            "inputs would reach it") in line and line.endswith("nothing written (exit 3)")
    # missed on one input (0.97x the thresholds): refused as overlapping, with a count too
    missed = ProbeSeparation("broken-mask", (0.97, 2.6, 1.8), (0.0, 0.0, 0.0), (0.97, 2.6, 1.8))
    cal = Calibration("c", ("1", "2", "3"), (0.1, 0.05, 0.08), (0.0, 0.0, 0.0), atol, 2.0,
                      (missed,), Path("run"), None)
    assert not cal.caught and cal.exit_code is ExitCode.UNINFORMATIVE
    line = next(s for s in cal.summary() if "separation" in s)
    assert "these thresholds cannot tell benign from wrong; about " in line
    # with a narrow spread the same three inputs bound it above the margin
    tight = ProbeSeparation("broken-mask", (1.9, 2.0, 2.1), (0.0, 0.0, 0.0), (1.9, 2.0, 2.1))
    ok = Calibration("c", ("1", "2", "3"), (0.1, 0.05, 0.08), (0.0, 0.0, 0.0), atol, 2.0,
                     (tight,), Path("run"), None)
    assert ok.exit_code is ExitCode.OK and ok.needed == 3


def test_a_probe_finite_on_one_input_only_is_refused_for_want_of_a_spread() -> None:
    # certain catches (inf: a row shared no id) on two inputs, a finite strength on the third:
    # one finite strength has no spread, so the bound is 0 without the probe being weak, and
    # the refusal must say so instead of "no count would reach it"
    from pathlib import Path

    from difftest.core.errors import ExitCode
    from difftest.flow.calibrate import Bound, Calibration, ProbeSeparation
    atol = Bound(1.0, 16.9, "exponential model")
    inf = math.inf
    probe = ProbeSeparation("zeroed-layer", (inf, 3.0, inf), (0.0, 0.0, 0.0), (inf, 3.0, inf))
    cal = Calibration("c", ("1", "2", "3"), (0.1, 0.05, 0.08), (0.0, 0.0, 0.0), atol, 2.0,
                      (probe,), Path("run"), None)
    assert cal.caught and cal.separation == 0.0 and cal.needed is None
    assert cal.exit_code is ExitCode.UNINFORMATIVE
    line = next(s for s in cal.summary() if "separation" in s)
    assert ("probe zeroed-layer was a certain catch on 2 of the 3 inputs and finite on one: one "
            "finite strength shows no spread") in line
    assert "about 6 inputs would show two" in line
    assert f"no count up to {MAX_INPUTS}" not in line
    # two finite strengths do show a spread: the count is read from them as usual
    two = ProbeSeparation("zeroed-layer", (inf, 3.0, 2.9), (0.0, 0.0, 0.0), (inf, 3.0, 2.9))
    cal = Calibration("c", ("1", "2", "3"), (0.1, 0.05, 0.08), (0.0, 0.0, 0.0), atol, 2.0,
                      (two,), Path("run"), None)
    assert "finite on one" not in " ".join(cal.summary())


def test_calibrate_leaves_a_disarming_benign_rate_out_of_the_file_and_says_so(
        tmp_path: object) -> None:
    # a benign flip rate over too few effective rows has an upper bound no gate's rate could be
    # shown to exceed: written, it would disarm the rate test (and the reader refuses it)
    from pathlib import Path

    from difftest.core.errors import ExitCode
    from difftest.core.thresholds import BenignRate, read_thresholds
    from difftest.flow.calibrate import Bound, Calibration, ProbeSeparation, thresholds_toml
    atol = Bound(1.0, 16.9, "exponential model")
    probe = ProbeSeparation("broken-mask", (3.9, 4.0, 4.1), (0.0, 0.0, 0.0), (3.9, 4.0, 4.1))
    wide = BenignRate(1, 4, 3, 2.0)  # a quarter of four rows: bound far above one half
    fine = BenignRate(2, 400, 3, 300.0)
    atol = Bound(0.1 * 16.9, 16.9, "exponential model")  # as calibrate sizes it: read back
    cal = Calibration("c", ("1", "2", "3"), (0.1, 0.05, 0.08), (0.0, 0.0, 0.0), atol, 2.0 * 1.69,
                      (probe,), Path("run"), None, (), wide, 0.05, fine)
    assert wide.disarms and not fine.disarms
    text = thresholds_toml(cal, "abc", {"cpu": "X"})
    assert "[benign.near_tie_flips]" not in text and "[benign.above_level]" in text
    path = Path(str(tmp_path)) / "t.toml"
    path.write_text(text)
    read = read_thresholds(path).calibrated
    assert read is not None and read.near_tie_flips is None and read.above_level == fine
    said = [s for s in cal.summary() if "near-tie flip rate" in s]
    assert "its 99% upper bound" in said[0] and said[0].endswith("not written to a file")
    # and with near-ties excused and no benign rate to count them against, a gate could excuse
    # any number of flips: calibrate refuses and asks for more inputs
    assert cal.flips_unjudged and cal.exit_code is ExitCode.UNINFORMATIVE
    assert any("the benign near-tie flip rate seen is too wide to judge a gate's rate against: "
               "add calibration inputs; nothing written (exit 3)" in s for s in said)
    # a too-wide rate above the level alone is left out, and the file is written
    ok = Calibration("c", ("1", "2", "3"), (0.1, 0.05, 0.08), (0.0, 0.0, 0.0), atol, 2.0 * 1.69,
                     (probe,), Path("run"), None, (), fine, 0.05, wide)
    assert ok.exit_code is ExitCode.OK
    assert "[benign.above_level]" not in thresholds_toml(ok, "abc", {"cpu": "X"})
