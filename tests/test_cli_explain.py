"""`difftest explain RUN`: a past run's verdict as a tree of the findings that decided it."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from conftest import replay_arm
from difftest import api
from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.analysis.verdict import Verdict
from difftest.cli import app
from difftest.core.kinds import Expect, Instrument
from difftest.report.headline import verdict_tree

DATA = Path(__file__).parent / "data" / "compare"


def test_explain_prints_each_finding_and_the_one_that_decides(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(replay_arm("base", DATA / "agree_a.log")
                      + replay_arm("cand", DATA / "logitonly_b.log"))
    rep = api.compare_arms("base", "cand", config=config, run_root=tmp_path / "runs",
                           progress=False)
    out = CliRunner().invoke(app, ["explain", str(rep.run_dir)])
    assert out.exit_code == 1, out.output  # the verdict's own exit code: differ
    lines = out.output.splitlines()
    assert lines[:2] == ["base-vs-cand: FAIL (differ, expect same)",
                         "`- drafts: differ -> differ (decides)"]
    assert "   |- 7 block(s) compared, 0 differ; 21 logit row(s) compared, 1 block(s) with " \
           "logit differences" in lines


def test_the_tree_marks_the_strongest_finding_wherever_it_stands() -> None:
    verdict = Verdict.of([
        VerdictFinding(Origin.DRAFTS, Demand.AGREE, ("7 block(s) compared, 0 differ",
                                                      "could have failed\nsecond line"),
                       (Instrument.TOKENS,)),
        VerdictFinding(Origin.SWITCH, Demand.INERT, ("toggle 'lane': both arms report lane=paged",)),
    ], Expect.SAME, ())
    assert verdict_tree("lanes", verdict) == [
        "lanes: INERT (inert, expect same)",
        "|- drafts: agree -> agree",
        "|  |- 7 block(s) compared, 0 differ",
        "|  `- could have failed",
        "`- switch: inert -> inert (decides)",
        "   `- toggle 'lane': both arms report lane=paged"]
