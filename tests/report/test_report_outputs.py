"""Markdown, JUnit and terminal output of comparisons and gates: golden files, a JUnit schema,
and hostile arm output (ANSI colours, control characters, HTML in request ids and `vt:` lines).

Goldens live in tests/golden (`pytest --regen-golden` rewrites them).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import Golden, replay_arm
from difftest.analysis.audit import AuditThresholds
from difftest.config import ComparisonSpec
from difftest.core.errors import RefusedOutput
from difftest.execute import ArmResult
from difftest.flow.judge import CheckResult
from difftest.flow.scoring import MutationResult, ProbeReport
from difftest.flow.evaluate import ComparisonReport, evaluate
from difftest.flow.evaluate import outcome as _outcome
from difftest.report import comparison, gate_report
from difftest.report.text import md_code, md_fence, md_inline, strip_ansi, xml_safe

DATA = Path(__file__).parents[1] / "data"
COMPARE = DATA / "compare"
SCHEMA = DATA / "junit" / "junit.xsd"
RUN_DIR = Path("traces/runs/20261203T000000Z-abc123-check")
HOSTILE_STDERR = ("loading model\n\x1b[1;31mvt: CUDA error: out of memory\x1b[0m <script>alert(1)"
                  "</script>\x07\x00\x1b]0;pwned\x07\n```\nfenced? no\n")


def arm_result(tmp: Path, name: str, *, returncode: int = 0, stderr: str = "",
               sha: str | None = None, ref: str | None = None,
               trace: Path | None = None) -> ArmResult:
    err = tmp / f"{name}.stderr"
    err.write_text(trace.read_text() if trace is not None else stderr, encoding="utf-8")
    out = tmp / f"{name}.stdout"
    out.write_text("")
    return ArmResult(name=name, argv=["runner"], cwd=".", env_overrides={}, stdout_path=out,
                     stderr_path=err, returncode=returncode, timed_out=False, interrupted=False,
                     started_at="2026-12-03T00:00:01.000Z", ended_at="2026-12-03T00:00:04.250Z",
                     duration_s=3.25 if returncode == 0 else 0.5, git_ref=ref, git_sha=sha,
                     error=None)


def report(tmp: Path, name: str, a: tuple[str, str | None], b: tuple[str, str | None],
           **kw: object) -> ComparisonReport:
    """A comparison of two replayed traces (None: the arm crashed with HOSTILE_STDERR)."""
    th = AuditThresholds()
    outcomes = []
    for arm, trace in (a, b):
        extra = kw.get(arm, {})
        assert isinstance(extra, dict)
        if trace is None:
            res = arm_result(tmp, arm, returncode=7, stderr=HOSTILE_STDERR)
            path = res.stderr_path
        else:
            path = COMPARE / trace
            res = arm_result(tmp, arm, trace=path, **extra)
            path = res.stderr_path
        outcomes.append(_outcome(arm, path, res, th))
    spec = ComparisonSpec(name=name, arm_a=a[0], arm_b=b[0])
    return evaluate(spec, outcomes[0], outcomes[1], th, RUN_DIR)


@pytest.fixture()
def gate(tmp_path: Path) -> CheckResult:
    sha_a, sha_b = "1" * 40, "2" * 40
    agree = report(tmp_path, "lanes", ("main", "agree_a.log"), ("branch", "agree_b.log"),
                   main={"sha": sha_a, "ref": "main"}, branch={"sha": sha_b, "ref": "HEAD"})
    differ = report(tmp_path, "shift", ("base", "agree_a.log"), ("shifted", "shift_b.log"))
    blind = report(tmp_path, "blind", ("deg-a", "degenerate_a.log"),
                   ("deg-b", "degenerate_b.log"))
    crash = report(tmp_path, "crash", ("base", "agree_a.log"), ("crasher", None))
    killed = MutationResult("skip-kv-write", True, "tokens", ["tokens"], 3, 0, differ)
    survived = MutationResult("stale-seq-lens", False, None, [], 0, 0, agree)
    probe = ProbeReport("lanes", "main", "branch", agree, [killed, survived])
    assert [r.verdict.kind for r in (agree, differ, blind, crash)] == [
        "agree", "differ", "uninformative", "arm-failed"]
    return CheckResult(Path("difftest.toml"), RUN_DIR, [agree, differ, blind, crash],
                       {"lanes": probe}, "2026-12-03T00:00:00+00:00", 12.5)


# -- golden files ------------------------------------------------------------------------------

def test_gate_markdown_and_junit_goldens(gate: CheckResult, golden: Golden) -> None:
    golden.check("gate.check.md", gate_report.check_markdown(gate))
    golden.check("gate.junit.xml", gate_report.junit_xml(gate, hostname="ci-host"))
    golden.check("gate.agree-git.md", comparison.render_markdown(gate.reports[0]))
    golden.check("gate.arm-failed.md", comparison.render_markdown(gate.reports[3]))


# -- JUnit -------------------------------------------------------------------------------------

def validate(xml: str) -> None:
    import xmlschema

    xmlschema.XMLSchema(str(SCHEMA)).validate(xml)


def test_junit_validates_and_tells_a_crash_from_a_difference(gate: CheckResult) -> None:
    xml = gate_report.junit_xml(gate)
    validate(xml)
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "6", "failures": "3", "errors": "1", "skipped": "0", "time": "12.500"}
    assert suite.get("timestamp") == "2026-12-03T00:00:00" and suite.get("hostname")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["crash"].find("error") is not None and cases["crash"].find("failure") is None
    assert cases["crash"].find("error").get("type") == "arm-failed"  # type: ignore[union-attr]
    assert cases["blind"].find("failure").get("type") == "uninformative"  # type: ignore[union-attr]
    assert cases["shift"].find("failure").get("type") == "differ"  # type: ignore[union-attr]
    assert cases["lanes/probe/stale-seq-lens"].find("failure").get("type") == "survived"  # type: ignore[union-attr]
    assert cases["lanes"].get("time") == "3.250"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["run_dir"] == str(RUN_DIR)
    assert props["arm.main.git_sha"] == "1" * 40 and props["arm.branch.git_ref"] == "HEAD"


def test_junit_schema_rejects_what_it_should() -> None:
    """The schema is a gate: a suite without its time, or an unknown outcome, does not pass."""
    import xmlschema

    ok = ('<testsuites><testsuite name="d" tests="1" failures="0" errors="0" skipped="0" '
          'time="1.0" timestamp="2026-12-03T00:00:00" hostname="h">'
          '<testcase name="c" classname="k" time="0.5"/></testsuite></testsuites>')
    validate(ok)
    for bad in (ok.replace(' time="1.0"', ""), ok.replace('<testcase name="c" classname="k" '
                                                           'time="0.5"/>',
                                                           '<testcase name="c" classname="k" '
                                                           'time="0.5"><crash/></testcase>'),
                ok.replace("2026-12-03T00:00:00", "yesterday")):
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            validate(bad)


def test_junit_stays_well_formed_when_a_crashing_arm_prints_colours(gate: CheckResult) -> None:
    xml = gate_report.junit_xml(gate)
    assert "\x1b" not in xml and "\x07" not in xml and "\x00" not in xml
    root = ET.fromstring(xml)  # raises on a character XML 1.0 forbids
    error = next(c for c in root.iter("testcase") if c.get("name") == "crash").find("error")
    assert error is not None and "vt: CUDA error: out of memory" in (error.text or "")


# -- markdown ----------------------------------------------------------------------------------

def test_markdown_passes_no_html_from_request_ids_or_vt_lines(tmp_path: Path) -> None:
    hostile = tmp_path / "hostile_b.log"
    evil = "<img/src=x/onerror=alert(1)>"
    hostile.write_text((COMPARE / "shift_b.log").read_text().replace("req=a ", f"req={evil} ")
                       + "vt: <script>alert(2)</script> failed\n")
    base = tmp_path / "hostile_a.log"
    base.write_text((COMPARE / "agree_a.log").read_text().replace("req=a ", f"req={evil} "))
    th = AuditThresholds()
    a, b = _outcome("a", base, None, th), _outcome("b", hostile, None, th)
    rep = evaluate(ComparisonSpec(name="<b>x</b>", arm_a="a", arm_b="b"), a, b, th)
    text = comparison.render_markdown(rep)
    for raw in ("<img", "<script", "<b>"):
        assert raw not in text, text
    assert "&lt;script&gt;" in text


def test_markdown_report_shows_rows_shas_stderr_and_no_none(gate: CheckResult) -> None:
    agree, differ, _, crash = gate.reports
    text = comparison.render_markdown(agree)
    assert "| git sha |" in text and "`111111111111`" in text and "None" not in text
    text = comparison.render_markdown(differ)
    assert "Differing rows: " in text and "| req | pos | row |" in text
    text = comparison.render_markdown(crash)
    assert "None" not in text and "<details><summary>stderr of crasher" in text
    assert "\x1b" not in text
    # inside a fenced block HTML is shown, not run; the fence is longer than any in the stderr
    outside = text.split("````text\n")[0] + text.split("\n````\n")[-1]
    assert "<script>" not in outside and "`````" not in text
    assert "vt: CUDA error: out of memory <script>alert(1)</script>" in text
    assert f"Run directory: `{RUN_DIR}`" in text


def test_check_markdown_why_is_a_whole_sentence(gate: CheckResult) -> None:
    text = gate_report.check_markdown(gate)
    rows = {line.split("|")[2].strip(): line for line in text.splitlines()
            if line.startswith("| ") and line.count("|") == 7}
    assert "first difference at req" in rows["`shift`"]
    assert "could not have failed" in rows["`blind`"]
    assert "exited with an error (exit code 7)" in rows["`crash`"]


def test_github_step_summary_is_appended_by_check(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from difftest.cli import app

    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    # the shipped lanes, replaying the reference runner's captures of them (tests/data/shipped/)
    config = tmp_path / "difftest.toml"
    config.write_text(replay_arm("paged", DATA / "shipped" / "paged.log")
                      + replay_arm("materialized", DATA / "shipped" / "materialized.log")
                      + '[comparisons.lanes]\narm_a = "paged"\narm_b = "materialized"\n')
    r = CliRunner().invoke(app, ["check", "--config", str(config), "--only", "lanes",
                                 "--no-probes", "--run-root", str(tmp_path / "runs"),
                                 "--no-progress"], env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 0, r.output
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "## difftest check: passed (exit 0)" in text


# -- text helpers and the terminal --------------------------------------------------------------

def test_text_helpers_neutralise_escapes_and_markup() -> None:
    assert strip_ansi("\x1b[31mred\x1b[0m\x1b]0;title\x07\x00 ok\r") == "red ok"
    assert xml_safe("a\x01b\ufffe\x1b[1mc") == "abc"
    # every character XML 1.0 forbids is dropped, the edges of the ranges it allows kept
    # (#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; #xD and the
    # C1 controls are terminal controls, which strip_ansi drops first)
    allowed = "\t\n\x20\ud7ff\ue000\ufffd\U00010000\U0010ffff"
    forbidden = "\x00\x08\x0b\x0c\x0e\x1f\ud800\udfff\ufffe\uffff"
    assert xml_safe(allowed + forbidden) == allowed
    assert md_inline("<a href=x>[y](z)</a> | *k*") == (
        "&lt;a href=x&gt;\\[y\\](z)&lt;/a&gt; \\| \\*k\\*")
    assert md_code("a`b") == "``a`b``" and md_code("x|y") == "`x\\|y`"
    assert md_code("<i>") == "<code>&lt;i&gt;</code>"
    fenced = md_fence("```\nclose?\n````")
    assert fenced.startswith("`````text\n") and fenced.endswith("\n`````")


def test_terminal_output_strips_escapes_from_arm_stderr(gate: CheckResult) -> None:
    for text in (comparison.render_table(gate.reports[3]), gate_report.check_lines(gate)):
        assert "\x1b" not in text and "\x07" not in text and "\x00" not in text
        assert "vt: CUDA error: out of memory" in text or "crash" in text


# -- CSV ---------------------------------------------------------------------------------------

def test_csv_write_never_follows_a_planted_link(gate: CheckResult, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = tmp_path / "out" / "diff.csv"
    target.parent.mkdir()
    for name in ("diff.csv.tmp", ".diff.csv.tmp", "diff.csv~"):
        (target.parent / name).symlink_to(victim)
    comparison.write_csv(gate.reports[1], target)
    assert victim.read_text() == "precious\n"
    assert target.read_text().startswith("req,pos,row,token_a,token_b,status,")
    assert not target.is_symlink()
    # a link planted at the target itself is refused: neither written through nor replaced
    target.unlink()
    target.symlink_to(victim)
    with pytest.raises(RefusedOutput, match="is a symbolic link"):
        comparison.write_csv(gate.reports[1], target)
    assert victim.read_text() == "precious\n" and target.is_symlink()


def test_compare_writes_its_csv_without_pandas(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "diff.csv"
    code = ("import sys\nfrom difftest.cli import app\ntry:\n    app(sys.argv[1:])\n"
            "except SystemExit as e:\n    print('exit', e.code)\n"
            "print('pandas imported:', 'pandas' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code, "compare", "--trace-a",
                           str(COMPARE / "agree_a.log"), "--trace-b", str(COMPARE / "shift_b.log"),
                           "--csv", str(out)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
    assert "exit 1" in done.stdout and "pandas imported: False" in done.stdout, done.stderr
    rows = out.read_text().splitlines()
    assert rows[0] == ("req,pos,row,token_a,token_b,status,margin_a,margin_b,logit_a,logit_b,"
                       "abs_logit_diff,logits")
    assert "a,9,3,53,63,differ,0.02,0.005," in out.read_text()


def test_a_warning_reason_reaches_the_check_line_markdown_and_html_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A passing comparison with a warning (an arm variable removed from the arms' environment):
    the warning is in check's terminal lines, check.md (the PR comment) and check.html's
    summary, outside the folded section."""
    from conftest import replay_arm

    from difftest import api
    from difftest.report import html

    compare = DATA / "compare"
    config = tmp_path / "difftest.toml"
    config.write_text(replay_arm("base", compare / "agree_a.log")
                      + replay_arm("cand", compare / "agree_b.log")
                      + '[comparisons.c]\narm_a = "base"\narm_b = "cand"\n')
    monkeypatch.setenv("DIFFTEST_FAULT", "layers.1.mlp:scale")
    result = api.check(config, run_root=tmp_path / "runs", probes=False, progress=False)
    (rep,) = result.reports
    assert rep.verdict.passed
    said = ("warning: base: DIFFTEST_FAULT set in difftest's environment was removed from the "
            "arm's")
    lines = gate_report.check_lines(result)
    assert any(line.strip().startswith(said) for line in lines.splitlines()), lines
    assert said in gate_report.check_markdown(result).split("<details>")[0]
    page = html.render_check(result)
    assert said.replace("'", "&#x27;") in page.split("<details")[0], page[:3000]


def test_json_max_abs_logit_diff_is_null_with_its_reason_where_a_row_is_nan(
        tmp_path: Path) -> None:
    """A nan in B's logit: the CSV row says inf; the JSON (which holds no infinity) says null
    and why, never 0.0, and stays strict JSON."""
    import json

    from difftest import api

    text = (DATA / "compare" / "agree_a.log").read_text()
    b = tmp_path / "nan_b.log"
    b.write_text(text.replace("top=[ 11:9.25 ", "top=[ 11:nan ", 1))
    rep = api.compare_traces(DATA / "compare" / "agree_a.log", b)
    data = json.loads(comparison.render_json(rep),
                      parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert data["max_abs_logit_diff"] is None
    assert data["max_abs_logit_diff_unsized"].startswith("1 compared row(s) differ without a "
                                                         "finite size")
    csv = tmp_path / "d.csv"
    api.export_csv(rep, csv)
    assert ",inf," in csv.read_text()


def test_html_says_no_token_flips_without_the_flip_heading(tmp_path: Path) -> None:
    """Logit-only differences and no flip: the page says "Token flips: none", not a red
    "Token flips: 0 row(s)" heading over "the arms drafted different tokens"."""
    from difftest import api
    from difftest.report import html

    rep = api.compare_traces(DATA / "compare" / "agree_a.log", DATA / "compare" / "logitonly_b.log")
    assert rep.comparison is not None and rep.comparison.blocks_logit_differing
    page = html.render_comparison(rep)
    assert "Token flips: none" in page and "Token flips: 0 row(s)" not in page
    assert "the arms drafted different tokens" not in page
    assert '<h4 class="logit">Logit-only differences:' in page
