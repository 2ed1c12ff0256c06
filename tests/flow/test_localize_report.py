"""`difftest localize RUN_DIR` leaves its figure in the run directory and a localisation section
in the run's report.md and report.html; under teacher forcing the arms tables show B's would-be
acceptance beside A's. The arms replay the reference runner's captured runs: free, forced and
capturing where localize reruns them (a teacher-forced run localised for the figure and the
section, a probe run localised at its mutation), and a free run that nothing is localised in."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from difftest import api
from difftest.cli import app
from difftest.config import parse_config
from difftest.core.errors import ExitCode
from difftest.core.kinds import VerdictKind
from difftest.report.comparison import ACCEPTED_HEADER
from conftest import TESTS, replay_arm, replay_localize_command
from test_pipeline import config

REF = [sys.executable, "-m", "difftest.runners.reference", "--requests", "2", "--steps", "4"]
LEVEL3 = {"VT_SPEC_TRACE": "3"}
FAULT = "layers.0.o_proj:noise:0.01"
GATE = TESTS / "data" / "gate"  # scripts/capture_gate_traces.py
PROBE = TESTS / "data" / "localize" / "probe"  # scripts/capture_replay_traces.py localize
REPORT = TESTS / "data" / "localize" / "report"


def difftest(*args: str) -> Result:
    """The `difftest` command line in this process (typer's runner): exit code, stdout and
    stderr as a fresh `python -m difftest` would give them, without its start-up."""
    return CliRunner().invoke(app, list(args))


def judged(tmp_path: Path, teacher_force: bool) -> api.ComparisonReport:
    """REF against REF with FAULT, on arms replaying the reference runner's free, forced and
    capturing runs of them (tests/data/localize/report/, scripts/capture_replay_traces.py
    localize); localize on the runner itself is tests/flow/test_localize_baseline.py's."""
    cfg = config(tmp_path, {
        "base": {"command": replay_localize_command(REPORT / "base", *REF[3:]), "env": LEVEL3},
        "cand": {"command": replay_localize_command(REPORT / "o_proj-noise", *REF[3:],
                                                    "--fault", FAULT), "env": LEVEL3}},
        {"pair": {"arm_a": "base", "arm_b": "cand", "teacher_force": teacher_force}})
    return api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                              progress=False)


def test_localize_writes_the_figure_and_the_report_section(tmp_path: Path) -> None:
    rep = judged(tmp_path, teacher_force=True)
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.run_dir is not None
    run_dir = rep.run_dir
    md = (run_dir / "report.md").read_text()
    assert "Localisation" not in md
    # B's would-be acceptance beside A's in both tables
    assert f"| {ACCEPTED_HEADER} |" in md and "(would have)" in md
    assert f"<th>{ACCEPTED_HEADER}</th>" in (run_dir / "report.html").read_text()
    out = difftest("localize", str(run_dir))
    assert out.exit_code == ExitCode.DIFFER, out.stderr
    assert "first differing module: layers.0.o_proj" in out.stdout
    figures = list((run_dir / "localize").glob("*/modules.svg"))
    assert len(figures) == 1 and b"<svg" in figures[0].read_bytes()[:400]
    assert out.stdout.endswith(f"\n\nfigure: {figures[0]}; the run's report.md and report.html "
                               "have the section\n")
    md = (run_dir / "report.md").read_text()
    assert "#### Localisation at `r" in md
    assert "`layers.0.o_proj` **first**" in md
    page = (run_dir / "report.html").read_text()
    assert "Localisation at r" in page and "first differing module: layers.0.o_proj" in page
    # judged again from the run directory (export), the section stays
    out = difftest("export", str(run_dir), "-f", "markdown", "--html", str(tmp_path / "again.html"))
    assert out.exit_code == ExitCode.DIFFER, out.stderr
    assert "#### Localisation at" in out.stdout
    assert "Localisation at r" in (tmp_path / "again.html").read_text()


@pytest.fixture(scope="module")
def free_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of a free (not teacher-forced) DIFFER comparison, of arms replaying the reference
    runner's captured default lanes, the materialized one with the causal-mask bug
    (tests/data/gate/). The tests below read it and localize nothing in it."""
    tmp = tmp_path_factory.mktemp("free")
    cfg = parse_config(replay_arm("base", GATE / "default-paged.log")
                       + replay_arm("cand", GATE / "default-materialized+causal-mask.log")
                       + 'env = { DIFFTEST_MUTATION = "causal-mask" }\n'  # as it was launched
                       + '[comparisons.pair]\narm_a = "base"\narm_b = "cand"\n',
                       tmp / "difftest.toml")
    rep = api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp / "runs",
                             progress=False)
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.run_dir is not None
    return rep.run_dir


def test_a_free_run_has_no_acceptance_column(free_run: Path) -> None:
    md = (free_run / "report.md").read_text()
    assert ACCEPTED_HEADER not in md and "(would have)" not in md


def test_localize_refuses_what_it_cannot_judge_before_rerunning_anything(free_run: Path,
                                                                         tmp_path: Path) -> None:
    """A tolerance that calls every module equal (nan, inf) or different (< 0), and a step arm
    A never verified, are bad input: exit 2, one line, and nothing rerun or overwritten."""
    run_dir = free_run

    def localize(*args: str) -> Result:
        return difftest("localize", *args)

    for atol in ("nan", "inf", "-1"):
        out = localize(str(run_dir), "--atol", atol)
        assert out.exit_code == ExitCode.USAGE, (atol, out.stdout, out.stderr)
        assert "--atol must be a finite number >= 0" in out.stderr
        out = localize("--dumps", str(tmp_path), str(tmp_path), "--atol", atol)
        assert out.exit_code == ExitCode.USAGE and "--atol" in out.stderr
    for at, said in (("r9:13", "traced no request 'r9'"), ("r0:99999", "positions"),
                     ("foo", "--at 'foo': expected REQ:POS")):
        out = localize(str(run_dir), "--at", at)
        assert out.exit_code == ExitCode.USAGE, (at, out.stderr)
        assert said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (run_dir / "localize").exists()  # nothing was rerun


def test_localize_names_the_comparison_of_a_run_of_several(tmp_path: Path) -> None:
    """A probe run judged its baseline and each mutation: localize, as export, needs -c, and
    localises the mutation named in a folder of its own, leaving the baseline's report alone.
    Its arms replay the reference runner's captured runs of them, free and capturing
    (tests/data/localize/probe/, scripts/capture_replay_traces.py localize)."""
    cfg_path = tmp_path / "difftest.toml"
    config(tmp_path, {"base": {"command": replay_localize_command(PROBE / "base", *REF[3:]),
                               "env": LEVEL3},
                      "same": {"command": replay_localize_command(PROBE / "same", *REF[3:]),
                               "env": LEVEL3}},
           {"pair": {"arm_a": "base", "arm_b": "same"}})
    # the mutation's arguments, and the replay's captures of the arm so mutated (argv[-1])
    noisy = json.dumps(["--fault", FAULT, str(PROBE / "same+noisy")])
    cfg_path.write_text(cfg_path.read_text() + f"[mutations.noisy]\nargs = {noisy}\n")
    result = api.probe(comparison="pair", mutations=["noisy"], config=cfg_path,
                       run_root=tmp_path / "runs", progress=False)
    assert result.run_dir is not None
    run_dir = result.run_dir
    report_md = (run_dir / "report.md").read_bytes()

    def localize(*args: str) -> Result:
        return difftest("localize", str(run_dir), *args)

    for args in ((), ("--at", "r0:1")):
        out = localize(*args)
        assert out.exit_code == ExitCode.USAGE, out.stdout + out.stderr
        assert "a run of 2 comparisons; name one with --comparison (pair, pair/noisy)" \
            in out.stderr
    assert not (run_dir / "localize").exists()  # refused before rerunning anything
    out = localize("-c", "pair/noisy")
    assert out.exit_code == ExitCode.DIFFER, out.stderr
    assert "first differing module: layers.0.o_proj" in out.stdout
    assert [p.relative_to(run_dir).parts[:3] for p in run_dir.glob("localize/**/modules.svg")] \
        == [("localize", "pair", "noisy")]
    assert (run_dir / "report.md").read_bytes() == report_md  # the baseline's, untouched
    out = difftest("localize", "--dumps", "a", "b", "-c", "pair")
    assert out.exit_code == ExitCode.USAGE
    assert "--comparison picks what to rerun in a run: it needs a RUN_DIR" in out.stderr
