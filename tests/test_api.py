"""The Python API is the product: each function returns a frozen result with `.exit_code`,
writes the run directory the CLI writes, and reads config the same way in every mode."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import difftest
from conftest import TESTS, replay_arm
from difftest.core.errors import ExitCode

DATA = TESTS / "data" / "compare"


def _config(tmp_path: Path, extra: str = "") -> Path:
    text = (replay_arm("base", DATA / "agree_a.log") + replay_arm("same", DATA / "agree_b.log")
            + replay_arm("other", DATA / "differ_b.log")
            + '[comparisons.pair]\narm_a = "base"\narm_b = "same"\nmutations = ["flip"]\n'
            + '[comparisons.broken]\narm_a = "base"\narm_b = "other"\n'
            + f'[mutations.flip]\nargs = [{json.dumps(str(DATA / "differ_b.log"))}]\n' + extra)
    path = tmp_path / "difftest.toml"
    path.write_text(text)
    return path


def test_check_reads_the_local_config_and_writes_what_the_cli_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = difftest.check(only=["pair"], run_root=tmp_path / "runs", progress=False)
    assert r.exit_code == ExitCode.OK and r.run_dir is not None
    assert {"junit.xml", "check.md", "check.json", "diff-pair.csv"} <= {
        p.name for p in r.run_dir.iterdir()}
    cases = [c.get("name") for c in ET.parse(r.run_dir / "junit.xml").getroot().iter("testcase")]
    assert cases == ["pair", "pair/probe/flip"]
    assert json.loads((r.run_dir / "check.json").read_text())["exit_code"] == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.run_dir = None  # type: ignore[misc]


def test_compare_arms_and_probe_write_their_reports(tmp_path: Path) -> None:
    config = _config(tmp_path)
    rep = difftest.compare_arms(comparison="broken", config=config, run_root=tmp_path / "r1",
                                progress=False)
    assert rep.exit_code == ExitCode.DIFFER and rep.run_dir is not None
    assert {"report.json", "report.md", "report.html", "diff.csv"} <= {
        p.name for p in rep.run_dir.iterdir()}
    p = difftest.probe(comparison="pair", config=config, run_root=tmp_path / "r2",
                       progress=False)
    assert p.exit_code == ExitCode.OK and p.mutations[0].killed and p.run_dir is not None
    assert {"probe.json", "report.json"} <= {f.name for f in p.run_dir.iterdir()}


def test_trace_mode_takes_its_audit_thresholds_from_the_local_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = DATA / "agree_a.log", DATA / "agree_b.log"
    monkeypatch.chdir(tmp_path)
    assert difftest.compare_traces(a, b).verdict.instruments == ("tokens", "logits")
    _config(tmp_path, "[audit]\nmin_distinct_ids = 1000\n")
    rep = difftest.compare_traces(a, b)
    assert rep.thresholds.min_distinct_ids == 1000
    assert rep.verdict.instruments == ("logits",)  # the tokens alone are now too uniform


def test_the_package_root_loads_the_api_lazily() -> None:
    code = ("import sys, difftest; heavy = [m for m in ('numpy', 'pandas') if m in sys.modules]; "
            "f = difftest.compare_traces; print(heavy, f.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["[]", "difftest.api"]


def test_compare_and_rejudge_write_their_outputs_and_name_every_file_they_could_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`outputs=difftest.Outputs(csv, html)`: the paths are checked before any work, every
    file is tried, and one error names each that could not be written (the run directory's
    first), the report with it."""
    from difftest.report import outputs

    config = _config(tmp_path)
    with pytest.raises(difftest.UsageError, match="difftest.toml"):  # the config it reads
        difftest.compare(comparison="broken", config=config, outputs=difftest.Outputs(config),
                         options=difftest.RunOptions(run_root=tmp_path / "r0", progress=False))
    assert not (tmp_path / "r0").exists()  # refused before any arm ran
    traces = difftest.Traces(DATA / "agree_a.log", DATA / "differ_b.log")
    rep = difftest.compare(traces=traces, outputs=difftest.Outputs(tmp_path / "d.csv",
                                                                   str(tmp_path / "r.html")))
    assert rep.exit_code == ExitCode.DIFFER
    assert (tmp_path / "d.csv").stat().st_size > 0 and (tmp_path / "r.html").stat().st_size > 0

    (tmp_path / "a-file").write_text("")
    broken = difftest.Outputs(tmp_path / "a-file" / "d.csv", tmp_path / "a-file" / "r.html")
    written = outputs.write_comparison

    def run_dir_unwritten(report: difftest.ComparisonReport) -> None:
        written(report)
        raise outputs.NotWritten([(Path("report.md"), "disk full")], report)

    monkeypatch.setattr(outputs, "write_comparison", run_dir_unwritten)
    with pytest.raises(outputs.NotWritten) as caught:  # a UsageError: exit 2
        difftest.compare(comparison="broken", config=config, outputs=broken,
                         options=difftest.RunOptions(run_root=tmp_path / "r1", progress=False))
    assert isinstance(caught.value, difftest.UsageError)  # the public error, exit 2
    assert [path.name for path, _ in caught.value.failures] == ["report.md", "r.html", "d.csv"]
    run = caught.value.result
    assert isinstance(run, difftest.ComparisonReport)
    assert run.exit_code == ExitCode.DIFFER and run.run_dir is not None

    with pytest.raises(difftest.UsageError, match="report.md"):  # a record of the run
        difftest.rejudge(run.run_dir, outputs=difftest.Outputs(html=run.run_dir / "report.md"))
    with pytest.raises(outputs.NotWritten) as caught:
        difftest.rejudge(run.run_dir, outputs=broken)
    assert [path.name for path, _ in caught.value.failures] == ["r.html", "d.csv"]
