"""Gate paths the other tests never run, on replay arms of captured traces: `check` and `probe`
judging with the config's [audit] thresholds, and each run recording what it ran (the
comparisons, the thresholds, the probe's mutations) in its meta.json."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.config import parse_config
from difftest.errors import ExitCode
from difftest.gate import run_check, run_probe
from test_gate import LANES, replayed_mutations, replays

STRICT = "[audit]\nmin_distinct_ids = 100000\nmin_entropy_bits = 0.5\nmax_blind_radius = 2.0\n"
BLIND = ("the token comparison alone would have been blind (41 distinct drafted id(s)); the exact "
         "logit comparison could have failed and did not")


def _config(audit: str) -> str:
    return (replays("default", "paged", "materialized") + LANES
            + replayed_mutations("default", "materialized", "causal-mask", "skip-kv-write",
                                 "stale-seq-lens") + audit)


def _meta(run_dir: Path | None) -> dict[str, object]:
    assert run_dir is not None
    return json.loads((run_dir / "meta.json").read_text())  # type: ignore[no-any-return]


def test_check_judges_with_the_configs_audit_thresholds(tmp_path: Path) -> None:
    cfg = parse_config(_config(STRICT), tmp_path / "strict.toml")
    result = run_check(cfg, run_root=tmp_path, progress=False)
    rep = result.reports[0]
    assert rep.verdict.verdict == "agree" and rep.verdict.instruments == ("logits",)
    assert rep.verdict.reasons[-1] == BLIND
    # a counted token difference is a kill whatever the audit predicted of the tokens
    probe = result.probes["lanes"]
    assert [(m.name, m.killed, m.killed_by) for m in probe.mutations] == [
        ("causal-mask", True, "tokens"), ("skip-kv-write", True, "tokens"),
        ("stale-seq-lens", True, "tokens")]
    assert result.exit_code == ExitCode.OK
    assert _meta(result.run_dir)["extra"] == {
        "check": ["lanes"], "config": str(tmp_path / "strict.toml"),
        "audit": {"min_distinct_ids": 100000, "min_entropy_bits": 0.5, "max_blind_radius": 2.0}}


def test_check_with_default_thresholds_sees_both_instruments(tmp_path: Path) -> None:
    cfg = parse_config(_config(""), tmp_path / "plain.toml")
    result = run_check(cfg, run_root=tmp_path, progress=False, probes=False)
    assert result.reports[0].verdict.instruments == ("tokens", "logits")
    assert result.probes == {}
    assert _meta(result.run_dir)["extra"]["audit"] == {  # type: ignore[index]
        "min_distinct_ids": 2, "min_entropy_bits": 1.0, "max_blind_radius": 1.0}


def test_a_probe_records_its_mutations_and_thresholds_in_its_run(tmp_path: Path) -> None:
    cfg = parse_config(_config(STRICT), tmp_path / "strict.toml")
    p = run_probe(cfg, cfg.comparisons["lanes"], ["skip-kv-write"], run_root=tmp_path,
                  progress=False)
    assert p.baseline.verdict.reasons[-1] == BLIND
    assert [m.name for m in p.mutations] == ["skip-kv-write"] and p.mutation_score == 1.0
    extra = _meta(p.run_dir)["extra"]
    assert extra == {
        "comparison": {"name": "lanes", "arm_a": "paged", "arm_b": "materialized",
                       "expect": "same", "min_differing": 1, "near_tie": 0.0, "atol": 0.0,
                       "probe": ["causal-mask", "skip-kv-write", "stale-seq-lens"],
                       "rtol": 0.0, "noise_runs": 0, "drafting": None},
        "audit": {"min_distinct_ids": 100000, "min_entropy_bits": 0.5, "max_blind_radius": 2.0},
        "probe": ["skip-kv-write"]}
    assert p.run_dir is not None and p.run_dir.name.endswith("-probe-lanes")
