"""A `decoding = "sampled"` comparison through the one path (plan, run, judge) with the reference
runner's real sampled arms: the target alone against speculative sampling agrees in
distribution, the token comparison plays no part, and a known-wrong sampler is caught by the
distribution instrument in a probe. Sampler seeds are fixed, so the verdicts are reproducible."""

from __future__ import annotations

from pathlib import Path

from difftest.config import parse_config
from difftest.core.kinds import DecodingMode, KilledBy, VerdictKind
from difftest.report.comparison import to_dict
from difftest.report.headline import report_differed
from difftest.report.html import figures
from planned import run_comparison, run_probe

ARMS = """
[arms.target]
command = ["{python}", "-m", "difftest.runners.reference", "--vocab", "32", "--steps", "6",
           "--requests", "2", "--temperature", "0.4", "--top-p", "0.8", "--samples", "50",
           "--no-spec", "--sample-seed", "1"]
env = { VT_SPEC_TRACE = "1", DIFFTEST_MUTATION = "none", OMP_NUM_THREADS = "1" }

[arms.spec]
command = ["{python}", "-m", "difftest.runners.reference", "--vocab", "32", "--steps", "6",
           "--requests", "2", "--temperature", "0.4", "--top-p", "0.8", "--samples", "50",
           "--sample-seed", "2"]
env = { VT_SPEC_TRACE = "1", DIFFTEST_MUTATION = "none", OMP_NUM_THREADS = "1" }

[comparisons.sampled]
arm_a = "target"
arm_b = "spec"
decoding = "sampled"
toggle = ["spec"]
mutations = ["temperature-draft-only"]

[mutations.temperature-draft-only]
env = { DIFFTEST_MUTATION = "temperature-draft-only" }
"""


def test_spec_agrees_with_the_target_alone_in_distribution_and_a_wrong_sampler_is_caught(
        tmp_path: Path) -> None:
    cfg = parse_config(ARMS, tmp_path / "difftest.toml")
    spec = cfg.comparison("sampled")
    assert spec.rules.decoding is DecodingMode.SAMPLED
    assert spec.rules.echo()["decoding"] == "sampled"
    report = run_comparison(cfg, spec, run_root=tmp_path / "runs", progress=False)
    assert report.verdict.kind is VerdictKind.AGREE, report.verdict.reasons
    assert report.comparison is None  # tokens differ from draw to draw: not compared
    assert report_differed(report).startswith("compared in distribution")
    assert any("100 request pairs" in r and "smallest per-position TV" in r
               for r in report.verdict.reasons)
    data = to_dict(report)["sampled"]
    assert data["distribution"]["pairs"] == 100 and data["distribution"]["positions"] == 6
    (row1, *_) = data["acceptance"]["spec"]  # the target alone drafts nothing: no check
    assert set(data["acceptance"]) == {"spec"} and row1["row"] == 1 and not row1["flagged"]
    assert "Token laws and acceptance (sampled decoding)" in [f.title for f in figures(report)]
    probe = run_probe(cfg, spec, run_root=tmp_path / "runs", progress=False)
    (mutation,) = probe.mutations
    assert mutation.killed and mutation.killed_by is KilledBy.EMITTED
    assert any(r.startswith("the token distributions differ")
               for r in mutation.report.verdict.reasons)
