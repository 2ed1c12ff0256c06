"""Gate paths the other tests never run, on replay arms of captured traces: `check` and `probe`
judging with the config's [audit] thresholds, and each run recording what it ran (the
comparisons, the thresholds, the probe's mutations) in its meta.json."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from difftest.config import parse_config
from difftest.core.errors import ExitCode, UsageError
from difftest.execute import JobLimits
from difftest.flow.run import job_limits
from planned import run_check, run_probe
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
    assert rep.verdict.kind == "agree" and rep.verdict.instruments == ("logits",)
    assert BLIND in rep.verdict.reasons  # then the detectable effects
    # a counted token difference is a kill whatever the audit predicted of the tokens
    probe = result.probes["lanes"]
    assert [(m.name, m.killed, m.killed_by) for m in probe.mutations] == [
        ("causal-mask", True, "tokens"), ("skip-kv-write", True, "tokens"),
        ("stale-seq-lens", True, "tokens")]
    assert result.exit_code == ExitCode.OK
    extra = _meta(result.run_dir)["plan"]
    for key in ("format", "kind", "roles"):  # the plan's own, beside what the run judged
        extra.pop(key)  # type: ignore[union-attr]
    # every comparison judged, by name, for `export --comparison`
    assert list(extra.pop("comparisons")) == [  # type: ignore[union-attr]
        "lanes", "lanes/causal-mask", "lanes/skip-kv-write", "lanes/stale-seq-lens"]
    assert extra == {
        "check": ["lanes"], "config": str(tmp_path / "strict.toml"),
        "audit": {"min_distinct_ids": 100000, "min_entropy_bits": 0.5, "max_blind_radius": 2.0}}


def test_check_with_default_thresholds_sees_both_instruments(tmp_path: Path) -> None:
    cfg = parse_config(_config(""), tmp_path / "plain.toml")
    result = run_check(cfg, run_root=tmp_path, progress=False, probes=False)
    assert result.reports[0].verdict.instruments == ("tokens", "logits")
    assert result.probes == {}
    assert _meta(result.run_dir)["plan"]["audit"] == {  # type: ignore[index]
        "min_distinct_ids": 2, "min_entropy_bits": 1.0, "max_blind_radius": 1.0}


def test_a_probe_records_its_mutations_and_thresholds_in_its_run(tmp_path: Path) -> None:
    cfg = parse_config(_config(STRICT), tmp_path / "strict.toml")
    p = run_probe(cfg, cfg.comparisons["lanes"], ["skip-kv-write"], run_root=tmp_path,
                  progress=False)
    assert BLIND in p.baseline.verdict.reasons
    assert [m.name for m in p.mutations] == ["skip-kv-write"] and p.mutation_score == 1.0
    extra = _meta(p.run_dir)["plan"]
    for key in ("format", "kind", "roles"):
        extra.pop(key)  # type: ignore[union-attr]
    assert list(extra.pop("comparisons")) == ["lanes", "lanes/skip-kv-write"]  # type: ignore[union-attr]
    assert extra == {
        "comparison": {"name": "lanes", "arm_a": "paged", "arm_b": "materialized",
                       "expect": "same", "min_differing": 1, "near_tie": None, "atol": 0.0,
                       "probe": ["causal-mask", "skip-kv-write", "stale-seq-lens"],
                       "rtol": 0.0, "noise_runs": 0, "drafting": None,  # no toggle declared
                       "acceptance": None,
                       "tolerance": "given", "arm_dtypes": [None, None], "gate_input": None,
                       "calibration_inputs": [], "thresholds": "", "threshold_origin": "", "overridden": []},
        "audit": {"min_distinct_ids": 100000, "min_entropy_bits": 0.5, "max_blind_radius": 2.0},
        "probe": ["skip-kv-write"]}
    assert p.run_dir is not None and p.run_dir.name.endswith("-probe-lanes")


def test_job_limits_cap_every_arm_or_each_kind_apart(tmp_path: Path) -> None:
    cfg = parse_config(_config("") + "[defaults]\nlaunched_jobs = 7\n", tmp_path / "j.toml")
    assert job_limits(cfg, 3) == JobLimits(total=3)
    assert job_limits(cfg, None) == JobLimits(local=os.cpu_count() or 1, launched=7)


def test_a_config_without_comparisons_has_nothing_to_check(tmp_path: Path) -> None:
    path = tmp_path / "none.toml"
    cfg = parse_config(replays("default", "paged", "materialized"), path)
    with pytest.raises(UsageError) as err:
        run_check(cfg, run_root=tmp_path, progress=False)
    assert str(err.value) == f"{path} configures no [comparisons.*]: nothing to check"


def test_a_check_says_when_it_started_and_how_long_it_took(tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = run_check(parse_config(_config(""), tmp_path / "t.toml"), run_root=tmp_path,
                       progress=False, probes=False)
    assert result.started_at is not None and result.duration_s is not None
    started = datetime.fromisoformat(result.started_at)
    assert started.tzinfo == UTC and "." not in result.started_at  # whole seconds, UTC
    assert before <= started <= datetime.now(UTC)
    assert 0 < result.duration_s < (datetime.now(UTC) - before).total_seconds() + 1


def test_each_mutation_is_labelled_killed_survived_or_not_applied(tmp_path: Path) -> None:
    killed = run_probe(parse_config(_config(""), tmp_path / "k.toml"),
                       parse_config(_config(""), tmp_path / "k.toml").comparisons["lanes"],
                       ["causal-mask"], run_root=tmp_path, progress=False)
    assert [(m.result, m.killed_by, m.measures) for m in killed.mutations] == [
        ("killed", "tokens", ("tokens", "logits"))]
    blind_cfg = parse_config(replays("degenerate", "paged", "materialized") + LANES
                             + replayed_mutations("degenerate", "materialized", "causal-mask"),
                             tmp_path / "d.toml")
    blind = run_probe(blind_cfg, blind_cfg.comparisons["lanes"], ["causal-mask"],
                      run_root=tmp_path, progress=False)
    assert [(m.result, m.killed_by) for m in blind.mutations] == [("SURVIVED", None)]
    assert blind.survivors == ["causal-mask"] and blind.exit_code == ExitCode.UNINFORMATIVE
    ignored_cfg = parse_config(replays("default", "paged", "materialized") + LANES,
                               tmp_path / "i.toml")
    ignored = run_probe(ignored_cfg, ignored_cfg.comparisons["lanes"], ["skip-kv-write"],
                        run_root=tmp_path, progress=False)
    assert [(m.result, m.applied, m.measures) for m in ignored.mutations] == [
        ("NOT-APPLIED", False, ())]


def test_every_report_of_a_check_carries_its_run_thresholds_and_noise_reruns(
        tmp_path: Path) -> None:
    """What a check hands each comparison and each probe: the run directory under run_root,
    the config's thresholds, its arm names as configured, and the reruns noise_runs asks for."""
    from difftest.analysis.audit import AuditThresholds

    config = _config(STRICT).replace('mutations = [', 'noise_runs = 2\nmutations = [')
    cfg = parse_config(config, tmp_path / "c.toml")
    runs = tmp_path / "runs"
    result = run_check(cfg, run_root=runs, progress=False, jobs=1)
    th = AuditThresholds(min_distinct_ids=100000, min_entropy_bits=0.5, max_blind_radius=2.0)
    assert result.run_dir is not None and result.run_dir.parent == runs
    assert result.run_dir.name.endswith("-check")
    rep = result.reports[0]
    assert (rep.name, rep.thresholds, rep.run_dir) == ("lanes", th, result.run_dir)
    assert (rep.arm_a.name, rep.arm_b.name) == ("paged", "materialized")
    assert rep.comparison is not None and rep.comparison.logits is not None
    assert rep.comparison.logits.floor is not None
    probe = result.probes["lanes"]
    assert (probe.comparison, probe.arm_a, probe.arm_b, probe.run_dir) == (
        "lanes", "paged", "materialized", result.run_dir)
    for m in probe.mutations:
        assert (m.report.name, m.report.thresholds, m.report.run_dir) == (
            f"lanes/{m.name}", th, result.run_dir)
        assert m.report.arm_b.name == f"materialized+{m.name}"
        assert m.report.comparison is not None and m.report.comparison.logits is not None
        assert m.report.comparison.logits.floor is not None
    arms = _meta(result.run_dir)["arms"]
    assert sorted(arms) == sorted([  # type: ignore[arg-type]
        "paged", "materialized", "materialized+causal-mask", "materialized+skip-kv-write",
        "materialized+stale-seq-lens", "paged#run2"])


def test_a_probe_carries_its_run_thresholds_and_noise_reruns(tmp_path: Path) -> None:
    from difftest.analysis.audit import AuditThresholds

    config = _config(STRICT).replace('mutations = [', 'noise_runs = 2\nmutations = [')
    cfg = parse_config(config, tmp_path / "p.toml")
    runs = tmp_path / "runs"
    p = run_probe(cfg, cfg.comparisons["lanes"], None, run_root=runs, progress=False)
    th = AuditThresholds(min_distinct_ids=100000, min_entropy_bits=0.5, max_blind_radius=2.0)
    assert p.run_dir is not None and p.run_dir.parent == runs
    assert [m.name for m in p.mutations] == ["causal-mask", "skip-kv-write", "stale-seq-lens"]
    assert (p.baseline.thresholds, p.baseline.comparison is not None) == (th, True)
    assert p.baseline.comparison.logits.floor is not None  # type: ignore[union-attr]
    for m in p.mutations:
        assert (m.report.thresholds, m.report.run_dir) == (th, p.run_dir)
    assert "paged#run2" in _meta(p.run_dir)["arms"]  # type: ignore[operator]


@pytest.mark.parametrize(("b", "measures"), [
    ("agree_b.log", []), ("differ_b.log", ["tokens", "logits"]), ("diverge_b.log", ["emitted"]),
    ("logitonly_b.log", ["logits"]), ("propose_b.log", ["tokens"]),
])
def test_what_a_kill_is_measured_by(b: str, measures: list[str]) -> None:
    import difftest
    from difftest.flow.scoring import _measures

    data = Path(__file__).parents[1] / "data" / "compare"
    assert _measures(difftest.compare_traces(data / "agree_a.log", data / b)) == measures


def test_a_failed_mutated_arm_is_measured_as_arm_failed(tmp_path: Path) -> None:
    from difftest.flow.scoring import _measures, _not_applied

    cfg = parse_config(_config("") + '[arms.crash]\ncommand = ["false"]\n'
                       '[comparisons.crash]\narm_a = "paged"\narm_b = "crash"\n',
                       tmp_path / "c.toml")
    result = run_check(cfg, ["crash", "lanes"], run_root=tmp_path, progress=False, probes=False)
    crashed, lanes = result.reports
    assert _measures(crashed) == ["arm-failed"]
    # a mutated arm that failed, or a baseline whose B failed, is never "not applied"
    assert not _not_applied(lanes, crashed.arm_b)
    assert not _not_applied(crashed, lanes.arm_b)
    assert _not_applied(lanes, lanes.arm_b)  # B printed exactly what B printed
