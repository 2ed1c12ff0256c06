"""The acceptance instrument and its gate, request-clustered rates, and minimum detectable
effects: arms replaying the reference runner's captures at trace level 1 (tests/data/acceptance/),
and traces written line by line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import TESTS, replay_arm, verify_line
from difftest import api
from difftest.analysis.acceptance import AcceptanceCounts, combine, measure_counts
from difftest.numerics.clustered import (ClusterSums, chi2_median, clustered_rate, effective_clusters,
                                mde_two_sample, mde_zero_events, paired_difference, t_quantile)
from difftest.config import AcceptanceGate, ComparisonSpec, InvalidValue, parse_config
from difftest.core.rules import Rules
from difftest.core.errors import ConfigError, ExitCode
from difftest.core.jsonout import dumps
from difftest.core.kinds import Expect, VerdictKind
from difftest.numerics.noise import NoiseFloor, RequestFlips, RerunPair, flip_test, noise_floor
from difftest.report import html as html_report
from difftest.report.comparison import to_dict
from difftest.analysis.verdict import Verdict

# -- the statistics ---------------------------------------------------------------------------


def test_t_quantiles_match_the_tables() -> None:
    for df, p, table in ((1, 0.975, 12.706), (2, 0.975, 4.303), (5, 0.975, 2.571),
                         (9, 0.99, 2.821), (30, 0.975, 2.042)):
        assert t_quantile(p, df) == pytest.approx(table, abs=1e-3)
    assert t_quantile(0.025, 5) == pytest.approx(-2.571, abs=1e-3)
    for df, median in ((2, 1.3863), (5, 4.3515), (10, 9.3418), (40, 39.3353)):
        assert chi2_median(df) == pytest.approx(median, rel=0.015)


def test_a_spread_carried_by_one_request_has_few_degrees_of_freedom() -> None:
    assert effective_clusters(np.ones(12)) == pytest.approx(12)
    assert effective_clusters(np.r_[10.0, np.full(11, 0.1)]) == pytest.approx(1.0, abs=0.01)
    assert effective_clusters(np.zeros(5)) is None


def test_flips_in_one_request_widen_the_clustered_interval() -> None:
    """10 requests of 50 rows; all 10 flips in request 0. Counted as independent rows the
    interval is narrow; the rows of one request move together, so it widens and says why."""
    cluster = np.repeat(np.arange(10), 50)
    flips = np.zeros(500, dtype=bool)
    flips[:10] = True
    rate = clustered_rate(flips, cluster)
    assert rate is not None
    assert rate.value == pytest.approx(0.02)
    assert rate.wider
    assert rate.low < rate.naive_low and rate.high > 2 * rate.naive_high
    assert rate.design_effect > 5
    text = rate.describe("token flip rate")
    assert "moved together" in text and "independent rows" in text
    # the same 10 flips spread one per request: nothing to widen
    spread = np.zeros(500, dtype=bool)
    spread[np.arange(10) * 50] = True
    even = clustered_rate(spread, cluster)
    assert even is not None and not even.wider
    assert (even.low, even.high) == (even.naive_low, even.naive_high)


def test_a_rate_with_no_event_keeps_a_width() -> None:
    rate = clustered_rate(np.zeros(300, dtype=bool), np.repeat(np.arange(6), 50))
    assert rate is not None and rate.low == 0.0 and rate.high > 0.0
    assert mde_zero_events(rate.effective_rows) == pytest.approx(1 - 0.2 ** (1 / 300))
    assert mde_two_sample(rate, 0.01) == pytest.approx(1 - 0.2 ** (1 / 300))


def test_a_single_request_counts_as_one_draw() -> None:
    rate = clustered_rate(np.array([True] * 30 + [False] * 70), np.zeros(100, np.int64))
    assert rate is not None and rate.effective_rows == pytest.approx(1.0)
    assert rate.high - rate.low > 0.5


def test_paired_difference_cancels_what_the_arms_share() -> None:
    """Identical arms: no paired spread at all; the unpaired error (what power assumes) stays."""
    cluster = np.repeat(np.arange(8), 20)
    values = (np.arange(160) % 3 == 0) | (cluster < 2)
    labels, sums = ClusterSums.labelled(values, cluster)
    same = paired_difference(sums, labels, sums, labels)
    assert same is not None and same.se == 0.0 and same.se_unpaired > 0.0
    low, high = same.bounds(0.01)
    assert low == high == 0.0
    assert same.mde(0.01) > 0.1
    fewer = paired_difference(sums, labels, ClusterSums.of(values & (cluster != 3), cluster),
                              labels)
    assert fewer is not None and fewer.diff < 0 and fewer.se > 0


# -- the config ------------------------------------------------------------------------------

_ARMS = '[arms.a]\ncommand = ["x"]\n[arms.b]\ncommand = ["y"]\n'


@pytest.mark.parametrize(("table", "needle"), [
    ("{ max_drop = 0.02, alpha = 0.01, beta = 0.2 }", "unknown key 'beta'"),
    ("{ alpha = 0.01 }", "missing key 'max_drop'"),
    ("{ max_drop = 1.5 }", "acceptance.max_drop': must be in (0, 1)"),
    ("{ max_drop = 0.02, alpha = 0.7 }", "acceptance.alpha': must be in (0, 0.5)"),
    ("{ max_drop = \"0.02\" }", "must be a number"),
    ("0.02", "must be a table"),
])
def test_a_bad_acceptance_table_names_file_table_and_key(table: str, needle: str) -> None:
    text = _ARMS + f'[comparisons.c]\narm_a = "a"\narm_b = "b"\nacceptance = {table}\n'
    with pytest.raises(ConfigError) as err:
        parse_config(text, Path("gate.toml"))
    message = str(err.value)
    assert "gate.toml" in message and "comparisons.c" in message and needle in message


def test_the_acceptance_gate_applies_to_same_only() -> None:
    text = (_ARMS + '[comparisons.c]\narm_a = "a"\narm_b = "b"\nexpect = "differ"\n'
            "acceptance = { max_drop = 0.02 }\n")
    with pytest.raises(ConfigError, match="expects \"same\""):
        parse_config(text, Path("gate.toml"))
    spec = parse_config(_ARMS + '[comparisons.c]\narm_a = "a"\narm_b = "b"\n'
                        "acceptance = { max_drop = 0.02 }\n", Path("g.toml")).comparisons["c"]
    assert spec.rules.acceptance == AcceptanceGate(0.02, 0.01)
    with pytest.raises(InvalidValue):
        ComparisonSpec("c", "a", "b", Rules(acceptance={"max_drop": 0.0}))  # type: ignore[arg-type]


# -- the gate on real arms ---------------------------------------------------------------------

ACCEPTANCE = TESTS / "data" / "acceptance"  # scripts/capture_replay_traces.py


def _config(tmp: Path, max_drop: float, small: bool = False) -> Path:
    """Arms replaying the reference runner's captures: `ref` (`--requests 40 --steps 15`, or
    with `small` 5 and 5) and `worse`, its drafter made worse (`--draft-noise 6`)."""
    ref = replay_arm("ref", ACCEPTANCE / ("ref-small.log" if small else "ref.log"))
    worse = replay_arm("worse", ACCEPTANCE / "worse.log")
    text = f"""{ref}{worse}
[comparisons.planted]
arm_a = "ref"
arm_b = "worse"
acceptance = {{ max_drop = {max_drop}, alpha = 0.01 }}
[comparisons.aa]
arm_a = "ref"
arm_b = "ref"
acceptance = {{ max_drop = {max_drop}, alpha = 0.01 }}
"""
    path = tmp / "difftest.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_planted_acceptance_drop_differs_and_reruns_agree(tmp_path: Path) -> None:
    """A drafter made worse (noise on its block logits) at trace level 1: the gate is DIFFER,
    with the per-position figure in the HTML report; the arm against its own rerun is AGREE."""
    cfg = _config(tmp_path, 0.2)
    planted = api.compare_arms(comparison="planted", config=cfg, run_root=tmp_path / "runs",
                               progress=False)
    acc = planted.acceptance
    assert acc is not None and acc.verdict is VerdictKind.DIFFER
    assert planted.verdict.kind is VerdictKind.DIFFER
    assert planted.exit_code is ExitCode.DIFFER
    assert acc.deltas[0].high is not None and acc.deltas[0].high < -0.2
    assert any("acceptance gate: B accepts less" in r for r in planted.verdict.reasons)
    data = json.loads(json.dumps(to_dict(planted)))
    gate = data["acceptance"]
    assert gate["verdict"] == "differ" and gate["gate"] == {"max_drop": 0.2, "alpha": 0.01}
    first = gate["arms"][0]["accepted_at_least"][0]
    assert first["requests"] == 40 and first["rows"] == 600
    assert gate["b_minus_a"][0]["decision"] == "differ"
    page = html_report.render_comparison(planted)
    assert "Acceptance per draft position" in page and "Gate: differ." in page
    assert planted.run_dir is not None
    assert "Acceptance per draft position" in (planted.run_dir / "report.html").read_text()
    again = api.rejudge(planted.run_dir)  # the gate is recorded with the run
    assert again.acceptance is not None and again.acceptance.verdict is VerdictKind.DIFFER
    assert again.spec.rules.acceptance == AcceptanceGate(0.2, 0.01)

    aa = api.compare_arms(comparison="aa", config=cfg, run_root=tmp_path / "runs",
                          progress=False)
    assert aa.acceptance is not None and aa.acceptance.verdict is VerdictKind.AGREE
    assert aa.verdict.kind is VerdictKind.AGREE and aa.exit_code is ExitCode.OK
    assert "acceptance" in aa.verdict.instruments
    said = " ".join(aa.verdict.reasons)
    assert "would have detected with 80% power" in said
    assert "minimum detectable effects" in said


def test_too_small_a_sample_for_the_margin_is_uninformative(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 0.05, small=True)
    aa = api.compare_arms(comparison="aa", config=cfg, run_root=tmp_path / "runs",
                          progress=False)
    assert aa.acceptance is not None and aa.acceptance.verdict is VerdictKind.UNINFORMATIVE
    assert aa.verdict.kind is VerdictKind.UNINFORMATIVE
    assert aa.exit_code is ExitCode.UNINFORMATIVE
    assert any("too small for the margin" in r for r in aa.verdict.reasons)


# -- clustered rates in a comparison -----------------------------------------------------------

def _trace(path: Path, flip_requests: list[int]) -> Path:
    lines = []
    for r in range(10):
        pos = 20
        for step in range(5):
            draft = [(7 * step + 3 * r + i) % 40 for i in range(4)]
            if r in flip_requests and step in ((0, 1, 2, 3, 4) if len(flip_requests) == 1
                                               else (0,)):
                draft[1] = 99
            lines.append(verify_line(f"r{r}", pos, draft, [50 + step]))
            pos += 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_report_says_why_flips_in_one_request_are_less_certain(tmp_path: Path) -> None:
    a = _trace(tmp_path / "a.log", [])
    one = api.compare_traces(a, _trace(tmp_path / "one.log", [0]))
    spread = api.compare_traces(a, _trace(tmp_path / "spread.log", [0, 1, 2, 3, 4]))
    for rep in (one, spread):
        assert rep.rates is not None and rep.rates.flip_rate is not None
        assert rep.rates.flip_rate.value == pytest.approx(5 / 200)
    assert one.rates is not None and one.rates.flip_rate is not None
    assert one.rates.flip_rate.wider
    assert any("moved together" in r for r in one.verdict.reasons)
    assert spread.rates is not None and spread.rates.flip_rate is not None
    assert not spread.rates.flip_rate.wider
    assert not any(r.startswith("token flip rate") for r in spread.verdict.reasons)
    data = to_dict(one)["rates"]
    assert isinstance(data, dict)
    flip = data["token_flip_rate"]
    assert isinstance(flip, dict) and flip["requests"] == 10 and flip["design_effect"] > 1


def test_a_green_states_what_it_could_have_detected(tmp_path: Path) -> None:
    a = _trace(tmp_path / "a.log", [])
    # a second capture of the same run (one line of other output): one file, or a byte-identical
    # copy, would be refused as one capture compared with itself
    b = tmp_path / "b.log"
    b.write_text(a.read_text(encoding="utf-8") + "[spec-config] build=second\n", encoding="utf-8")
    rep = api.compare_traces(a, b)
    assert rep.verdict.kind is VerdictKind.AGREE
    assert rep.rates is not None and rep.rates.flip_mde is not None
    # 200 rows, no flip anywhere: the strict rule sees a rate of 1 - 0.2^(1/200) with 80% power
    assert rep.rates.flip_mde == pytest.approx(1 - 0.2 ** (1 / 200))
    line = next(r for r in rep.verdict.reasons if r.startswith("minimum detectable effects"))
    assert "token flip rate 0.00801" in line and "10 requests, 200 rows" in line
    assert math.isfinite(rep.rates.flip_mde)


# -- the gate's decision and how it joins the verdict ------------------------------------------

def _counts(rate: float, requests: int = 30, verifies: int = 40, seed: int = 0
            ) -> AcceptanceCounts:
    """Verifies of k=2 drafts; about `rate` of them accept the first draft, half of those the
    second; each request's own rate spread around it."""
    rng = np.random.default_rng(seed)
    labels, accs = [], []
    for g in range(requests):
        own = min(1.0, max(0.0, rate + rng.uniform(-0.1, 0.1)))
        first = rng.random(verifies) < own
        second = first & (rng.random(verifies) < 0.5)
        accs.append(first.astype(np.int64) + second)
        labels.append(np.full(verifies, f"r{g}"))
    acc = np.concatenate(accs)
    return AcceptanceCounts(np.concatenate(labels), np.full(acc.size, 2), acc)


def test_the_gate_decides_per_position_with_the_margin() -> None:
    gate = AcceptanceGate(0.1, 0.01)
    a = _counts(0.6)
    drop = measure_counts(a, _counts(0.3, seed=1), ("a", "b"), gate)
    assert drop is not None and drop.verdict is VerdictKind.DIFFER
    assert drop.deltas[0].decision is VerdictKind.DIFFER
    same = measure_counts(a, a, ("a", "b"), gate)
    assert same is not None and same.verdict is VerdictKind.AGREE
    big = _counts(0.6, requests=60)
    near = measure_counts(big, _counts(0.52, requests=60, seed=2), ("a", "b"), gate)
    assert near is not None and near.verdict is VerdictKind.UNINFORMATIVE
    assert "reaches past -0.1" in near.reasons[0]
    small = _counts(0.6, requests=3, verifies=5)
    few = measure_counts(small, small, ("a", "b"), gate)  # no drop at all, but a tiny sample
    assert few is not None and few.verdict is VerdictKind.UNINFORMATIVE
    assert "too small for the margin" in few.reasons[0]
    none = AcceptanceCounts(np.zeros(0, dtype=str), np.zeros(0, np.int64), np.zeros(0, np.int64))
    blind = measure_counts(none, a, ("a", "b"), gate)
    assert blind is not None and blind.verdict is VerdictKind.UNINFORMATIVE
    assert blind.reasons == ("acceptance gate: a traced no drafted verify, so its acceptance is "
                             "unknown",)
    assert json.loads(dumps(blind.to_json()))["b_minus_a"][0]["a"] is None


def test_the_gate_joins_the_comparisons_verdict() -> None:
    gate = AcceptanceGate(0.1, 0.01)
    a = _counts(0.6)
    agree = Verdict(VerdictKind.AGREE, Expect.SAME, ("tokens agree",), ("tokens",))
    drop = measure_counts(a, _counts(0.3, seed=1), ("a", "b"), gate)
    joined = combine(agree, drop, gate)
    assert joined.kind is VerdictKind.DIFFER and joined.exit_code is ExitCode.DIFFER
    assert joined.reasons[0] == "tokens agree" and "accepts less" in joined.reasons[-1]
    same = combine(agree, measure_counts(a, a, ("a", "b"), gate), gate)
    assert same.kind is VerdictKind.AGREE and same.instruments == ("tokens", "acceptance")
    near = combine(agree, measure_counts(a, _counts(0.52, seed=2), ("a", "b"), gate), gate)
    assert near.kind is VerdictKind.UNINFORMATIVE
    assert combine(agree, None, None) is agree
    assert combine(agree, None, gate).kind is VerdictKind.UNINFORMATIVE


# -- the noise floor's flip test, clustered by request -----------------------------------------

def _floor_by_request(flips_per_request: list[int], rows: int = 60) -> NoiseFloor:
    by = tuple(RequestFlips(f"r{i}", rows, f) for i, f in enumerate(flips_per_request))
    pair = RerunPair(0, 1, rows * len(by), sum(flips_per_request), 0, 0.5, False, by)
    return noise_floor("a", 2, [pair], None)


def test_the_flip_test_clusters_by_request_where_it_can() -> None:
    """A's reruns flip 1 row in 60 in each of 10 requests. B's 30 flips all in one request: the
    exact test of independent rows calls that a difference; clustered by request it is one
    request's bad luck. B's 30 flips spread over every request count either way."""
    floor = _floor_by_request([1] * 10)
    one = (RequestFlips("r0", 60, 30),) + tuple(RequestFlips(f"r{i}", 60, 0)
                                                 for i in range(1, 10))
    lumped = flip_test(30, 600, floor, by_request_b=one)
    assert lumped.p_value is not None and lumped.p_value <= 0.01  # what the exact test says
    assert not lumped.counts and lumped.requests == 10
    assert lumped.clustered_low is not None and lumped.clustered_low <= 0
    assert "clustered by request (10 requests, paired)" in lumped.reason()
    spread = tuple(RequestFlips(f"r{i}", 60, 3) for i in range(10))
    wide = flip_test(30, 600, floor, by_request_b=spread)
    assert wide.counts and wide.clustered_low is not None and wide.clustered_low > 0
    # no per-request record (one request, or a floor measured before): the exact test decides
    assert flip_test(30, 600, floor).counts and flip_test(30, 600, floor).clustered_low is None


def test_the_flip_test_holds_a_long_request_name_once() -> None:
    """One 1 MiB request name among 10,000 requests on both sides of the clustered flip test:
    the names are held as Python strings, not padded to the longest in a fixed-width array
    (10,000 x 4 MiB, a MemoryError)."""
    names = ["x" * (1 << 20)] + [f"r{i}" for i in range(1, 10_000)]
    by = tuple(RequestFlips(n, 6, int(i % 7 == 0)) for i, n in enumerate(names))
    pair = RerunPair(0, 1, 6 * len(by), sum(r.flips for r in by), 0, 0.5, False, by)
    floor = noise_floor("a", 2, [pair], None)
    test = flip_test(sum(r.flips for r in by), 6 * len(by), floor, by_request_b=by)
    assert test.requests == 10_000 and not test.counts


def test_a_request_name_of_a_mebibyte_costs_its_own_bytes_not_every_verifys(
        tmp_path: Path) -> None:
    """One hostile 1 MiB request name beside 15,000 verifies of short-named requests: the
    acceptance labels are the names themselves (Python strings), not a fixed-width array that
    pads every verify's label to the longest (58.6 GiB here, a MemoryError)."""
    long_name = "x" * (1 << 20)
    lines = [verify_line(long_name, 5, [11, 12, 13], [11, 12, 40])]
    lines += [verify_line(f"r{i % 3}", 10 + i, [i % 50, (i * 7) % 50, (i * 3) % 50],
                          [i % 50, 9][:1 + i % 2]) for i in range(15_000)]
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    for path in (a, b):
        path.write_text("\n".join(lines) + "\n")
    report = api.compare(traces=api.Traces(a, b))
    assert report.acceptance is not None
    assert report.acceptance.arm_a.verifies == 15_001
    assert report.acceptance.arm_a.requests == 4
