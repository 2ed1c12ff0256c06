"""The library pipeline with real arm processes: run dir contents, re-judging a past run without
running anything, and arms that crash, hang, draft nothing or cannot start.

The arms are tiny real programs that print a golden trace on stderr, so a whole run costs two
interpreter start-ups rather than two model runs.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from difftest import api
from difftest.flow.evaluate import ComparisonReport, judge_traces
from difftest.flow.plan import self_pair
from difftest.flow.rejudge import rejudge_run
from difftest.flow.overrides import Overrides
from difftest.report import outputs
from difftest.config import ComparisonSpec, Config, parse_config
from difftest.core.rules import Rules
from difftest.core.errors import ExitCode, TraceError, UsageError
from conftest import REPLAY, replay_command

DATA = Path(__file__).parents[1] / "data" / "compare"
def replay(name: str) -> list[str]:
    return replay_command(DATA / name)


def toml_value(v: object) -> str:
    if isinstance(v, dict):  # an inline table
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)  # strings, numbers and lists of strings read the same in TOML


def config(tmp_path: Path, arms: dict[str, dict[str, object]],
           comparisons: dict[str, dict[str, object]] | None = None) -> Config:
    """A real config file's text, validated by the real loader."""
    lines = []
    for name, fields in arms.items():
        lines.append(f'[arms."{name}"]')
        lines += [f"{k} = {toml_value(v)}" for k, v in fields.items()]
    for name, fields in (comparisons or {}).items():
        lines.append(f'[comparisons."{name}"]')
        lines += [f"{k} = {toml_value(v)}" for k, v in fields.items()]
    path = tmp_path / "difftest.toml"
    path.write_text("\n".join(lines) + "\n")
    return parse_config(path.read_text(), path)


def run(tmp_path: Path, a: dict[str, object], b: dict[str, object], **spec: object
        ) -> ComparisonReport:
    cfg = config(tmp_path, {"base": a, "cand": b},
                 {"pair": {"arm_a": "base", "arm_b": "cand", **spec}})
    return api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                                   progress=False)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(root.rglob("*"))}


def test_a_run_keeps_both_arms_output_meta_and_every_report(tmp_path: Path) -> None:
    rep = run(tmp_path, {"command": replay("agree_a.log"), "env": {"VT_SPEC_TRACE": 3}},
              {"command": replay("agree_b.log")})
    assert (rep.verdict.kind, rep.verdict.exit_code) == ("agree", ExitCode.OK)
    d = rep.run_dir
    assert d is not None and d.parent == tmp_path / "runs"
    assert sorted(p.name for p in d.iterdir()) == [
        "base.stderr", "base.stdout", "cand.stderr", "cand.stdout", "diff.csv", "meta.json",
        "report.html", "report.json", "report.md"]
    assert (d / "base.stderr").read_bytes() == (DATA / "agree_a.log").read_bytes()
    assert (d / "cand.stderr").read_bytes() == (DATA / "agree_b.log").read_bytes()
    assert (d / "cand.stdout").read_text() == "generated 7 blocks\n"

    meta = json.loads((d / "meta.json").read_text())
    assert meta["status"] == "done"
    base = meta["arms"]["base"]
    assert base["argv"] == [sys.executable, "-c", REPLAY, str(DATA / "agree_a.log")]
    assert base["env_overrides"] == {"VT_SPEC_TRACE": "3"}
    assert base["returncode"] == 0 and base["stderr_path"] == "base.stderr"
    assert base["started_at"] <= base["ended_at"]
    assert meta["plan"]["comparison"] == {
        "name": "pair", "arm_a": "base", "arm_b": "cand", "expect": "same", "min_differing": 1,
        "near_tie": None, "atol": 0.0, "probe": [], "rtol": 0.0, "noise_runs": 0,
        "drafting": None, "acceptance": None, "tolerance": "given",
        "arm_dtypes": [None, None], "gate_input": None, "calibration_inputs": [],
        "thresholds": "", "threshold_origin": "", "overridden": []}

    report = json.loads((d / "report.json").read_text())
    assert (report["verdict"], report["exit_code"], report["blocks_compared"]) == ("agree", 0, 7)
    assert report["run_dir"] == str(d)
    assert (d / "report.md").read_text().startswith("### difftest `pair`: **AGREE** (expect same): passed")
    assert (d / "diff.csv").read_text().splitlines()[0] == (
        "req,pos,row,token_a,token_b,status,margin_a,margin_b,logit_a,logit_b,abs_logit_diff,logits")
    assert len((d / "diff.csv").read_text().splitlines()) == 22


def test_a_past_run_is_rejudged_with_other_thresholds_and_nothing_runs(tmp_path: Path) -> None:
    rep = run(tmp_path, {"command": replay("agree_a.log")}, {"command": replay("logitonly_b.log")})
    assert (rep.verdict.kind, rep.verdict.exit_code) == ("differ", ExitCode.DIFFER)
    assert rep.run_dir is not None
    before = snapshot(tmp_path / "runs")

    again = rejudge_run(rep.run_dir)
    assert (again.verdict.kind, again.verdict.reasons) == (rep.verdict.kind,
                                                              rep.verdict.reasons)
    loose = rejudge_run(rep.run_dir, atol=0.01)
    assert (loose.verdict.kind, loose.verdict.exit_code) == ("agree", ExitCode.OK)
    assert loose.spec.rules.atol == 0.01 and loose.spec.name == "pair"
    # no arm ran again, no run directory appeared, no file of the run was touched
    assert snapshot(tmp_path / "runs") == before


def test_rejudging_keeps_the_comparisons_expectation_unless_overridden(tmp_path: Path) -> None:
    rep = run(tmp_path, {"command": replay("agree_a.log")}, {"command": replay("differ_b.log")},
              expect="differ", min_differing=2)
    assert rep.verdict.passed and rep.verdict.exit_code == ExitCode.OK
    assert rep.run_dir is not None
    assert rejudge_run(rep.run_dir).verdict.exit_code == ExitCode.OK
    assert rejudge_run(rep.run_dir, min_differing=3).verdict.exit_code == ExitCode.DIFFER
    same = rejudge_run(rep.run_dir, expect="same")
    assert (same.verdict.kind, same.verdict.exit_code) == ("differ", ExitCode.DIFFER)


def test_a_crashed_arm_fails_the_run_with_its_name_exit_code_and_stderr(tmp_path: Path) -> None:
    crash = ["{python}", "-c",
             "import sys; sys.stderr.write('loading weights\\nboom: bad tensor\\n'); sys.exit(3)"]
    rep = run(tmp_path, {"command": replay("agree_a.log")}, {"command": crash})
    v = rep.verdict
    assert (v.kind, v.exit_code, v.passed) == ("arm-failed", ExitCode.ARM_FAILED, False)
    assert v.reasons == ("arm 'cand': exited with an error (exit code 3)\n--- last lines of its "
                         "stderr ---\nloading weights\nboom: bad tensor",)
    assert rep.comparison is None
    d = rep.run_dir
    assert d is not None and not (d / "diff.csv").exists()
    assert json.loads((d / "meta.json").read_text())["arms"]["cand"]["returncode"] == 3
    assert json.loads((d / "report.json").read_text())["verdict"] == "arm-failed"
    assert (d / "cand.stderr").read_text().endswith("boom: bad tensor\n")


def test_a_hung_arm_is_stopped_at_its_timeout(tmp_path: Path) -> None:
    hang = ["{python}", "-c", "import sys, time; sys.stderr.write('warming up\\n'); "
                              "sys.stderr.flush(); time.sleep(60)"]
    rep = run(tmp_path, {"command": replay("agree_a.log")}, {"command": hang, "timeout_s": 1})
    v = rep.verdict
    assert (v.kind, v.exit_code) == ("arm-failed", ExitCode.ARM_FAILED)
    assert len(v.reasons) == 1 and v.reasons[0].startswith("arm 'cand': timed out after 1 s")
    assert "warming up" in v.reasons[0]
    assert rep.run_dir is not None
    meta = json.loads((rep.run_dir / "meta.json").read_text())["arms"]["cand"]
    assert meta["timed_out"] is True and meta["duration_s"] < 10


def test_an_arm_that_prints_no_drafts_fails_the_run(tmp_path: Path) -> None:
    silent = ["{python}", "-c", "print('ran fine, traced nothing')"]
    rep = run(tmp_path, {"command": silent}, {"command": replay("agree_b.log")})
    assert (rep.verdict.kind, rep.verdict.exit_code) == ("arm-failed", ExitCode.ARM_FAILED)
    assert rep.verdict.reasons[0].startswith("arm 'base': it printed no VT_SPEC_TRACE lines in ")
    assert rep.verdict.reasons[0].endswith(
        "base.stderr (is VT_SPEC_TRACE set, is this the runner's stderr?)")


def test_an_arm_that_cannot_start_fails_the_run(tmp_path: Path) -> None:
    rep = run(tmp_path, {"command": [str(tmp_path / "no-such-engine")]},
              {"command": replay("agree_b.log")})
    assert rep.verdict.exit_code == ExitCode.ARM_FAILED
    assert rep.verdict.reasons[0].startswith("arm 'base': cannot start")


def test_both_arms_failing_reports_both(tmp_path: Path) -> None:
    crash = ["{python}", "-c", "raise SystemExit(5)"]
    rep = run(tmp_path, {"command": crash}, {"command": ["{python}", "-c", "raise SystemExit(6)"]})
    assert [r.splitlines()[0] for r in rep.verdict.reasons] == [
        "arm 'base': exited with an error (exit code 5)",
        "arm 'cand': exited with an error (exit code 6)"]


def test_a_malformed_trace_is_an_error_after_the_capture_is_safe(tmp_path: Path) -> None:
    bad = ["{python}", "-c", "import sys; sys.stderr.write('[SPECTRACE] req=r pos=x k=1 ns=1 "
                             "acc=0 draft=[ 1 ] emit=[ 2 ]\\n')"]
    with pytest.raises(TraceError) as err:
        run(tmp_path, {"command": replay("agree_a.log")}, {"command": bad})
    assert err.value.line == 1 and err.value.path.endswith("cand.stderr")
    (d,) = (tmp_path / "runs").iterdir()
    assert json.loads((d / "meta.json").read_text())["status"] == "done"
    assert (d / "cand.stderr").read_text().startswith("[SPECTRACE] req=r pos=x")


def test_the_same_arm_on_both_sides_runs_twice_under_two_names(tmp_path: Path) -> None:
    cfg = config(tmp_path, {"only": {"command": replay("agree_a.log")}})
    spec = ComparisonSpec(name="self", arm_a="only", arm_b="only")
    rep = api.run_comparison(cfg, spec, run_root=tmp_path / "runs", progress=False)
    assert (rep.arm_a.name, rep.arm_b.name) == ("only", "only#2")
    assert rep.verdict.kind == "agree"


def test_judge_traces_compares_captured_files_and_runs_nothing(tmp_path: Path) -> None:
    spec = ComparisonSpec(name="t", arm_a="x", arm_b="y", rules=Rules(near_tie=0.05, atol=0.02))
    rep = judge_traces(DATA / "agree_a.log", DATA / "shift_b.log", spec)
    assert rep.run_dir is None and rep.arm_a.result is None
    assert (rep.verdict.kind, rep.comparison and rep.comparison.unmatched_b) == ("agree", 1)
    outputs.write_comparison(rep)  # no run dir: nothing to write, no error
    assert list(tmp_path.iterdir()) == []


def test_overrides_change_only_what_was_given() -> None:
    spec = ComparisonSpec(name="t", arm_a="x", arm_b="y",
                          rules=Rules(expect="differ", near_tie=0.5))
    assert Overrides().on(spec) == spec
    changed = Overrides.of(dict(atol=0.25, expect=None)).on(spec)
    assert (changed.rules.expect, changed.rules.near_tie, changed.rules.atol) == ("differ", 0.5, 0.25)


@pytest.mark.parametrize("extra, expected", [
    ("vt: propose_drafts_block: cudaErrorIllegalAddress\n", "the engine reported an error at "),
    ("[SPECTRACE] req=a pos=99 k=3 ns=", "its trace is cut off mid-line at "),
    # cut exactly at a field boundary: the line parses, the trace is cut all the same
    ("[spec-phase] pre=0.1ms backbone=0.2ms sample=0.3ms logits=9", "cut off mid-line at "),
    ("[spec-pha", "cut off mid-line at "),
])
def test_a_trace_that_says_its_arm_failed_is_arm_failed(tmp_path: Path, extra: str,
                                                        expected: str) -> None:
    b = tmp_path / "b.log"
    b.write_text((DATA / "agree_a.log").read_text() + extra)
    spec = ComparisonSpec(name="t", arm_a="a", arm_b="b")
    rep = judge_traces(DATA / "agree_a.log", b, spec)
    assert (rep.verdict.kind, rep.verdict.exit_code) == ("arm-failed", ExitCode.ARM_FAILED)
    assert expected in rep.verdict.reasons[0] and "arm 'b'" in rep.verdict.reasons[0]


def test_outgrown_notices_reach_the_reasons(tmp_path: Path) -> None:
    note = "vllm.cpp: request a has outgrown the draft speculative context; it stops speculating"
    for name in ("a.log", "b.log"):  # two captures (byte-identical files would be refused)
        (tmp_path / name).write_text((DATA / "agree_a.log").read_text() + note + "\n"
                                     + f"[spec-config] build={name}\n")
    rep = judge_traces(tmp_path / "a.log", tmp_path / "b.log",
                                ComparisonSpec(name="t", arm_a="a", arm_b="b"))
    assert rep.verdict.kind == "agree"
    assert f"a: {note}" in rep.verdict.reasons and f"b: {note}" in rep.verdict.reasons


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of one compare of replay arms, made once: each damaged-record test
    edits a copy of it."""
    rep = run(tmp_path_factory.mktemp("recorded"), {"command": replay("agree_a.log")},
              {"command": replay("agree_b.log")})
    assert rep.run_dir is not None and rep.verdict.kind == "agree", rep.verdict.reasons
    return rep.run_dir


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["plan"]["comparison"].update(near_tie="x"),
     "comparison near_tie: must be a number, got a string ('x')"),
    (lambda m: m["plan"]["comparison"].update(expect="maybe"),
     "comparison expect: must be \"same\" or \"differ\", got 'maybe'"),
    (lambda m: m["plan"]["audit"].update(bogus=1), "audit threshold bogus: unknown key"),
    (lambda m: m["plan"]["audit"].update(min_entropy_bits="high"),
     "audit threshold min_entropy_bits: must be a number, got a string ('high')"),
    (lambda m: m["arms"]["cand"].update(returncode="0"), "returncode is str '0'"),
    (lambda m: m["arms"]["cand"].update(returncode=True), "returncode is bool True"),
    (lambda m: m["plan"]["audit"].update(max_blind_radius=float("nan")),
     "audit threshold max_blind_radius: must be a finite number >= 0, got nan"),
    (lambda m: m["plan"]["audit"].update(min_distinct_ids=1.5),
     "audit threshold min_distinct_ids: must be an integer, got a float (1.5)"),
    (lambda m: m["plan"]["audit"].update(min_distinct_ids=0),
     "audit threshold min_distinct_ids: must be >= 1, got 0"),
    (lambda m: m["plan"]["comparison"].update(probe="causal-mask"),
     "comparison probe: must be a list of mutation names, got 'causal-mask'"),
])
def test_a_damaged_run_record_is_a_usage_error(recorded: Path, tmp_path: Path, edit,
                                               message: str) -> None:
    run_dir = Path(shutil.copytree(recorded, tmp_path / "run"))
    meta_path = run_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UsageError, match=re.escape(message)):
        rejudge_run(run_dir)


def test_non_finite_overrides_are_refused() -> None:
    spec = ComparisonSpec(name="t", arm_a="a", arm_b="b")
    with pytest.raises(UsageError,
                       match="the overrides: comparison atol: must be a finite number >= 0, got inf"):
        Overrides.of(dict(atol=float("inf"))).on(spec)


def test_the_second_run_of_a_self_comparison_takes_a_name_no_arm_has() -> None:
    spec = ComparisonSpec(name="det", arm_a="p", arm_b="p")
    assert self_pair(spec).arm_b == "p#2"
    assert self_pair(spec, {"p", "p#2", "p#3"}).arm_b == "p#4"
    other = ComparisonSpec(name="real", arm_a="p", arm_b="q")
    assert self_pair(other, {"p", "q"}) is other


def test_a_last_line_of_program_output_without_newline_is_no_failure(tmp_path: Path) -> None:
    b = tmp_path / "b.log"
    b.write_text((DATA / "agree_a.log").read_text() + "[spec-config] build=b\nbye")
    rep = judge_traces(DATA / "agree_a.log", b, ComparisonSpec(name="t", arm_a="a",
                                                                        arm_b="b"))
    assert rep.verdict.kind == "agree"


def test_byte_identical_captures_are_judged_inert_and_one_file_twice_is_refused(
        tmp_path: Path) -> None:
    """Two runs of a deterministic engine print byte-identical captures: judged, and INERT
    (nothing shows the arms ran different configurations), not a usage error. One file named
    twice is still one capture compared with itself (exit 2)."""
    from typer.testing import CliRunner

    from difftest.cli import app

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes((DATA / "agree_a.log").read_bytes())
    b.write_bytes(a.read_bytes())
    out = CliRunner().invoke(app, ["compare", "--trace-a", str(a), "--trace-b", str(b)])
    assert out.exit_code == ExitCode.UNINFORMATIVE, out.output
    assert out.output.startswith("traces: INERT")
    assert f"{a} and {b} are byte-identical: nothing in them shows the arms ran different " \
           "configurations" in out.output
    differ = judge_traces(a, b, ComparisonSpec(name="t", arm_a="a", arm_b="b",
                                               rules=Rules(expect="differ")))
    assert differ.verdict.kind == "inert" and differ.exit_code == ExitCode.UNINFORMATIVE
    same = CliRunner().invoke(app, ["compare", "--trace-a", str(a), "--trace-b", str(a)])
    assert same.exit_code == ExitCode.USAGE and "they are the same file" in same.output


@pytest.mark.parametrize("extra", [
    "engine: second run\n", "[spec-phase] pre=0.20ms backbone=0.61ms sample=9.00ms logits=96\n",
    "\n\n"])
def test_captures_apart_only_in_lines_difftest_does_not_read_are_inert(
        tmp_path: Path, extra: str) -> None:
    """One copied capture with a line of other output, a timing or blank lines added says
    nothing more about which configuration ran than the copy: INERT as the byte-identical pair,
    naming why. A `[spec-config]` line that tells the arms apart makes it a judged pair."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes((DATA / "agree_a.log").read_bytes())
    b.write_text(a.read_text() + extra)
    rep = judge_traces(a, b, ComparisonSpec(name="t", arm_a="a", arm_b="b"))
    assert rep.verdict.kind == "inert" and rep.exit_code == ExitCode.UNINFORMATIVE
    assert f"{a} and {b} say the same in every line difftest reads" in rep.verdict.reasons[0]
    b.write_text(a.read_text() + extra + "[spec-config] build=b\n")
    assert judge_traces(a, b, ComparisonSpec(name="t", arm_a="a", arm_b="b")).verdict.kind \
        == "agree"
