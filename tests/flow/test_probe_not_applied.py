"""A probe whose mutation never reaches the runner says so (exit 2) instead of calling the
comparison blind: the mutated arm printed exactly what the unmutated arm printed."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from typer.testing import CliRunner

from difftest.cli import app
from difftest.config import parse_config
from difftest.core.errors import ExitCode
from planned import run_check, run_probe
from difftest.report.gate_report import check_lines, junit_xml
from test_gate import LANES, MUTATIONS, replayed_mutations, replays

runner = CliRunner()


def test_a_mutation_the_runner_ignores_is_not_applied(tmp_path: Path) -> None:
    # replay arms ignore DIFFTEST_MUTATION: every mutated arm prints the baseline's trace
    cfg = parse_config(replays("default", "paged", "materialized") + LANES,
                       tmp_path / "replay.toml")
    p = run_probe(cfg, cfg.comparisons["lanes"], run_root=tmp_path, progress=False)
    assert p.baseline.verdict.kind == "agree"
    assert p.not_applied == list(MUTATIONS)
    assert p.survivors == [] and p.mutation_score == 0.0
    assert p.exit_code == ExitCode.USAGE
    assert all(m.result == "NOT-APPLIED" and not m.killed for m in p.mutations)
    assert p.notes[0] == (
        "mutation causal-mask: the mutated arm printed exactly what materialized printed "
        "(drafts, emitted tokens, logits): the mutation does not reach the runner (does it read "
        "DIFFTEST_MUTATION, or the mutation's env and args?); it is not scored")


def test_not_applied_through_the_cli_and_the_gate_reports(tmp_path: Path) -> None:
    config = tmp_path / "replay.toml"
    config.write_text(replays("default", "paged", "materialized") + LANES)
    r = runner.invoke(app, ["probe", "--config", str(config), "-c", "lanes", "--format", "json",
                            "--run-root", str(tmp_path), "--no-progress"])
    assert r.exit_code == 2, r.output
    data = json.loads(r.output)
    assert data["not_applied"] == list(MUTATIONS) and data["survivors"] == []
    assert [m["applied"] for m in data["mutations"]] == [False, False, False]

    cfg = parse_config(config.read_text(), config)
    result = run_check(cfg, run_root=tmp_path, progress=False)
    assert result.exit_code == ExitCode.USAGE
    assert "NOT-APPLIED    lanes/probe" in check_lines(result)
    root = ET.fromstring(junit_xml(result))
    errors = [c.find("error") for c in root.iter("testcase") if "/probe/" in (c.get("name") or "")]
    assert [e.get("type") for e in errors if e is not None] == ["not-applied"] * 3


def test_a_mutation_that_reaches_the_runner_is_applied(tmp_path: Path) -> None:
    # one mutation captured, two ignored: only the reached one is scored
    cfg = parse_config(replays("default", "paged", "materialized") + LANES
                       + replayed_mutations("default", "materialized", "causal-mask"),
                       tmp_path / "replay.toml")
    p = run_probe(cfg, cfg.comparisons["lanes"], run_root=tmp_path, progress=False)
    assert p.not_applied == ["skip-kv-write", "stale-seq-lens"]
    assert [m.name for m in p.applied] == ["causal-mask"] and p.mutation_score == 1.0
    assert p.exit_code == ExitCode.USAGE
