"""`difftest compare` and `difftest export` on the command line: exit codes, the JSON, markdown and
CSV contracts, bad configs, failing arms, re-judging a past run, and a real run of the reference
runner through the installed command in a subprocess (the other runs replay its captures)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from difftest.cli import app
from conftest import cli_in, replay_command
from conftest import replay_arm as shared_replay_arm

DATA = Path(__file__).parent / "data" / "compare"
REPO = Path(__file__).resolve().parent.parent
CSV_HEADER = ("req,pos,row,token_a,token_b,status,margin_a,margin_b,logit_a,logit_b,abs_logit_diff,"
              "logits")
runner = CliRunner()


def cli(*args: object) -> object:
    return runner.invoke(app, [str(a) for a in args])


def traces(a: str, b: str, *extra: object):  # noqa: ANN201 - a click Result
    return cli("compare", "--trace-a", DATA / a, "--trace-b", DATA / b, *extra)


def csv_rows(path: Path) -> list[dict[str, str]]:
    text = path.read_text()
    assert text.splitlines()[0] == CSV_HEADER
    return list(csv.DictReader(io.StringIO(text)))


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "arms.toml"
    path.write_text(text)
    return path


def replay_arm(name: str, trace: str) -> str:
    return shared_replay_arm(name, DATA / trace)


# -- verdicts and exit codes ---------------------------------------------------------------------

def test_agreeing_traces_exit_0_with_the_verdict_first() -> None:
    r = traces("agree_a.log", "agree_b.log")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "traces: AGREE (expect same): passed, exit 0"
    assert "  - the comparison could have failed through: tokens, logits" in lines
    # these traces' values show 4 significant digits; the format is taken to print at least 6
    # (`%.6g`), so "bitwise" holds at that resolution only
    assert lines[1] == "  nothing differed in 7 block(s)"
    assert lines[3].startswith("  - bitwise at 6 significant digits: agreement means equal to "
                               "within the printed resolution 1e-04, not bit-identical")


def test_differing_traces_exit_1_and_list_the_differing_rows() -> None:
    r = traces("agree_a.log", "differ_b.log")
    assert r.exit_code == 1, r.output
    assert r.output.startswith("traces: DIFFER (expect same): FAILED, exit 1\n"
                             "  differed: tokens in 2/7 blocks, logits in 2/7 blocks\n")
    assert ("first difference at req b pos 7 row 3: agree_a.log drafted 5, differ_b.log "
            "drafted 77") in r.output
    rows = r.output.split("differences (first rows; all of them in the CSV export):")[1]
    cells = [line.split() for line in rows.splitlines()[3:] if line.strip()]
    assert [c[:6] for c in cells] == [["a", "8", "2", "42", "99", "differ"],
                                     ["b", "7", "3", "5", "77", "differ"]]


def test_the_degenerate_pair_exits_3_and_names_the_measure() -> None:
    r = traces("degenerate_a.log", "degenerate_b.log")
    assert r.exit_code == 3, r.output
    assert r.output.startswith("traces: UNINFORMATIVE")
    assert ("the arms agree, but the comparison could not have failed: 1 distinct drafted "
            "id(s), every block is [19, 19, 19]") in r.output


def test_constant_tokens_with_live_logits_pass_and_say_tokens_alone_were_blind() -> None:
    r = traces("constlogits_a.log", "constlogits_b.log", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["verdict"] == "agree" and data["instruments"] == ["logits"]
    assert any(s.startswith("the token comparison alone would have been blind")
               for s in data["reasons"])


def test_expect_differ_on_identical_arms_exits_1_and_suspects_the_toggle() -> None:
    r = traces("agree_a.log", "agree_b.log", "--expect", "differ")
    assert r.exit_code == 1, r.output
    assert "the toggle may not reach the runner" in r.output


def test_near_tie_and_atol_flags_override_the_comparison() -> None:
    assert traces("agree_a.log", "ties_b.log").exit_code == 1
    assert traces("agree_a.log", "ties_b.log", "--near-tie", "0.6", "--atol", "0.6").exit_code == 0
    assert traces("agree_a.log", "logitonly_b.log").exit_code == 1
    assert traces("agree_a.log", "logitonly_b.log", "--atol", "0.01").exit_code == 0


def test_bad_trace_options_are_usage_errors_without_a_traceback(tmp_path: Path) -> None:
    missing = cli("compare", "--trace-a", tmp_path / "nope.log", "--trace-b", DATA / "agree_b.log")
    assert missing.exit_code == 2
    assert f"difftest: error: {tmp_path / 'nope.log'}: no such trace file" in missing.output
    half = cli("compare", "--trace-a", DATA / "agree_a.log")
    assert half.exit_code == 2 and "--trace-a and --trace-b go together" in half.output
    for r in (missing, half):
        assert "Traceback" not in r.output


# -- report contracts ----------------------------------------------------------------------------

ARM_KEYS = {"name", "blocks", "distinct_ids", "entropy_bits", "constant_blocks", "min_margin"}


def test_json_report_holds_the_contract_keys_and_values() -> None:
    r = traces("agree_a.log", "differ_b.log", "--format", "json")
    data = json.loads(r.output)
    assert {"verdict", "exit_code", "arms", "blocks_compared", "blocks_differing", "unmatched",
            "context_diverged", "first_difference", "reasons"} <= set(data)
    assert (data["verdict"], data["exit_code"], r.exit_code) == ("differ", 1, 1)
    assert [a["name"] for a in data["arms"]] == ["agree_a.log", "differ_b.log"]
    for arm in data["arms"]:
        assert ARM_KEYS <= set(arm)
        assert (arm["blocks"], arm["constant_blocks"]) == (7, False)
    assert data["arms"][0]["distinct_ids"] == 21
    assert data["arms"][0]["min_margin"] == pytest.approx(0.02)
    assert (data["blocks_compared"], data["blocks_differing"]) == (7, 2)
    assert data["unmatched"] == {"a": 0, "b": 0} and data["context_diverged"] == 0
    assert {k: data["first_difference"][k] for k in ("req", "pos", "row")} == \
        {"req": "b", "pos": 7, "row": 3}
    assert all(isinstance(s, str) and s for s in data["reasons"])


def test_json_report_counts_unmatched_and_diverged_steps() -> None:
    shift = json.loads(traces("agree_a.log", "shift_b.log", "--format", "json",
                              "--near-tie", "0.05", "--atol", "0.02").output)
    assert (shift["verdict"], shift["unmatched"], shift["blocks_differing"]) == \
        ("agree", {"a": 0, "b": 1}, 0)
    diverged = json.loads(traces("agree_a.log", "diverge_b.log", "--format", "json").output)
    assert (diverged["verdict"], diverged["context_diverged"], diverged["first_difference"]) == \
        ("differ", 2, None)
    degenerate = json.loads(traces("degenerate_a.log", "degenerate_b.log", "--format",
                                   "json").output)
    assert (degenerate["verdict"], degenerate["exit_code"]) == ("uninformative", 3)
    assert degenerate["arms"][0]["min_margin"] is None
    assert degenerate["arms"][0]["constant_blocks"] is True


def test_markdown_report_has_verdict_reasons_and_arm_table() -> None:
    r = traces("agree_a.log", "shift_b.log", "--format", "markdown")
    assert r.exit_code == 1
    lines = r.output.splitlines()
    assert lines[0] == "### difftest `traces`: **DIFFER** (expect same): FAILED, exit 1"
    assert "- first difference at req a pos 9 row 3: agree_a.log drafted 53, shift_b.log " \
           "drafted 63 (margins 0.02 / 0.005)" in lines
    assert "| arm | blocks | distinct ids | entropy bits | constant | min margin | trace |" in lines
    assert any(line.startswith("| shift_b.log | 8 |") for line in lines)


def test_csv_export_has_one_row_per_block_row_with_every_status(tmp_path: Path) -> None:
    out = tmp_path / "shift.csv"
    r = traces("agree_a.log", "shift_b.log", "--csv", out, "--near-tie", "0.05", "--atol", "0.02")
    assert r.exit_code == 0, r.output
    rows = csv_rows(out)
    assert len(rows) == 24
    by_key = {(x["req"], x["pos"], x["row"]): x for x in rows}
    tie = by_key[("a", "9", "3")]
    assert (tie["status"], tie["token_a"], tie["token_b"]) == ("near-tie", "53", "63")
    assert float(tie["margin_a"]) == pytest.approx(0.02)
    assert float(tie["abs_logit_diff"]) == pytest.approx(0.015)
    lonely = by_key[("a", "12", "1")]
    assert lonely == {"req": "a", "pos": "12", "row": "1", "token_a": "", "token_b": "54",
                      "status": "unmatched-b", "margin_a": "", "margin_b": "", "logit_a": "",
                      "logit_b": "", "abs_logit_diff": "", "logits": ""}
    assert by_key[("b", "7", "2")]["token_a"] == "70000"
    assert by_key[("b", "7", "1")]["token_b"] == "-3"

    seen = {x["status"] for x in rows}
    for a, b, extra in (("shift_b.log", "agree_a.log", ()), ("agree_a.log", "diverge_b.log", ()),
                        ("agree_a.log", "differ_b.log", ())):
        path = tmp_path / f"{a}-{b}.csv"
        traces(a, b, "--csv", path, *extra)
        seen |= {x["status"] for x in csv_rows(path)}
    assert seen == {"same", "differ", "near-tie", "unmatched-a", "unmatched-b",
                    "context-diverged"}


def test_csv_cells_are_empty_where_a_value_is_unknown(tmp_path: Path) -> None:
    out = tmp_path / "level1.csv"
    traces("degenerate_a.log", "degenerate_b.log", "--csv", out)
    rows = csv_rows(out)
    assert len(rows) == 18
    for x in rows:
        assert (x["token_a"], x["token_b"], x["status"]) == ("19", "19", "same")
        assert [x[k] for k in ("margin_a", "margin_b", "logit_a", "logit_b", "abs_logit_diff")] \
            == [""] * 5


def test_csv_escapes_request_ids_a_spreadsheet_would_evaluate(tmp_path: Path) -> None:
    out = tmp_path / "hostile.csv"
    again = tmp_path / "hostile-again.log"  # a second capture: one compared with itself is refused
    again.write_text((DATA / "hostile.log").read_text() + "[spec-config] build=second\n")
    r = cli("compare", "--trace-a", DATA / "hostile.log", "--trace-b", again, "--csv", out)
    assert r.exit_code == 0, r.output
    reqs = [x["req"] for x in csv_rows(out)]
    assert sorted(set(reqs)) == sorted(["'=HYPERLINK(\"http://evil.example/x\",\"click\")",
                                        "'+cmd", "'@x", "'-2+3", "plain"])
    assert len(reqs) == 10
    for line in out.read_text().splitlines()[1:]:
        first = line.lstrip('"')
        assert not first.startswith(("=", "+", "-", "@")), line


# -- bad configs and failing arms ----------------------------------------------------------------

@pytest.mark.parametrize("text, where, what", [
    ('[arms.a]\ncommand = ["x"]\n[comparisons.lanes]\narm_a = "a"\narm_b = "a"\natoll = 0.1\n',
     "[comparisons.lanes]", "key 'atoll': unknown key"),
    ('[arms.slow]\ncommand = ["x"]\ntimeout_s = "ten"\n', "[arms.slow]",
     "key 'timeout_s': must be a number, got a string ('ten')"),
    ('[arms.sh]\ncommand = "python -m difftest.runners.reference"\n', "[arms.sh]",
     "key 'command': must be an argv list of strings, not a shell string"),
    ('[arms.a]\ncommand = ["x"\n', "TOML syntax error", ""),
], ids=["unknown-key", "wrong-type", "shell-string", "syntax"])
def test_a_malformed_config_exits_2_naming_file_table_and_key(tmp_path: Path, text: str,
                                                               where: str, what: str) -> None:
    path = write_config(tmp_path, text)
    r = cli("compare", "--config", path, "--arm-a", "a", "--arm-b", "b")
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"difftest: error: {path}: ")
    assert where in r.output and what in r.output
    assert "Traceback" not in r.output


def test_an_unknown_arm_name_exits_2_with_the_known_ones(tmp_path: Path) -> None:
    path = write_config(tmp_path, replay_arm("base", "agree_a.log"))
    r = cli("compare", "--config", path, "--arm-a", "base", "--arm-b", "bsae")
    assert r.exit_code == 2
    assert "unknown arm 'bsae'" in r.output and "(known arms: base)" in r.output


FAILING_ARMS = """
[arms.crash]
command = ["{python}", "-c", 'import sys; sys.stderr.write("loading\\nboom\\n"); sys.exit(3)']
[arms.hang]
command = ["{python}", "-c", "import time; time.sleep(60)"]
timeout_s = 1
[arms.silent]
command = ["{python}", "-c", "print('no trace here')"]
"""


@pytest.mark.parametrize("arm, message", [
    ("crash", "arm 'crash': exited with an error (exit code 3)\n--- last lines of its stderr ---\n"
              "loading\nboom"),
    ("hang", "arm 'hang': timed out after 1 s"),
    ("silent", "arm 'silent': it printed no VT_SPEC_TRACE lines in "),
], ids=["crash", "hang", "silent"])
def test_a_failing_arm_exits_4_with_its_name_and_why(tmp_path: Path, arm: str,
                                                     message: str) -> None:
    path = write_config(tmp_path, replay_arm("base", "agree_a.log") + FAILING_ARMS)
    r = cli("compare", "--config", path, "--arm-a", "base", "--arm-b", arm,
            "--run-root", tmp_path / "runs", "--no-progress")
    assert r.exit_code == 4, r.output
    assert r.output.startswith(f"base-vs-{arm}: ARM-FAILED")
    assert message in r.output


# -- export: a past run, re-exported and re-judged -----------------------------------------------

def test_export_reexports_and_rejudges_a_run_without_running_it(tmp_path: Path) -> None:
    path = write_config(tmp_path, replay_arm("base", "agree_a.log")
                        + replay_arm("cand", "logitonly_b.log"))
    runs = tmp_path / "runs"
    first = cli("compare", "--config", path, "--arm-a", "base", "--arm-b", "cand",
                "--run-root", runs, "--no-progress")
    assert first.exit_code == 1, first.output
    (run_dir,) = runs.iterdir()
    files = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in run_dir.iterdir()}

    out = tmp_path / "again.csv"
    same = cli("export", run_dir, "--csv", out)
    assert same.exit_code == 1 and "DIFFER" in same.output.splitlines()[0]
    assert out.read_bytes() == (run_dir / "diff.csv").read_bytes()

    loose = cli("export", run_dir, "--atol", "0.01", "--format", "json")
    assert loose.exit_code == 0, loose.output
    data = json.loads(loose.output)
    assert (data["verdict"], data["atol"], data["run_dir"]) == ("agree", 0.01, str(run_dir))

    # nothing ran: still one run directory, and its files are exactly as the run left them
    assert list(runs.iterdir()) == [run_dir]
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in run_dir.iterdir()} == files


def test_export_of_a_directory_that_is_no_run_exits_2(tmp_path: Path) -> None:
    r = cli("export", tmp_path)
    assert r.exit_code == 2 and f"{tmp_path}: not a run directory (no meta.json)" in r.output


# -- the real reference runner -------------------------------------------------------------------

def difftest_command() -> list[str]:
    exe = shutil.which("difftest")
    return [exe] if exe else [sys.executable, "-m", "difftest"]


def test_end_to_end_paged_against_materialized_agrees(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VT_SPEC_TRACE", "VT_DFLASH_PAGED", "DIFFTEST_MUTATION")}
    proc = subprocess.run([*difftest_command(), "compare", "--arm-a", "paged", "--arm-b",
                           "materialized", "--format", "json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert (data["comparison"], data["verdict"], data["exit_code"]) == ("lanes", "agree", 0)
    assert data["instruments"] == ["tokens", "logits"]
    assert data["blocks_compared"] > 0 and data["blocks_differing"] == 0
    assert data["blocks_logit_differing"] == 0 and data["max_abs_logit_diff"] == 0.0
    paged, materialized = data["arms"]
    assert paged["route"]["combined"] == 0 and materialized["route"]["combined"] > 0
    run_dir = Path(data["run_dir"])
    if not run_dir.is_absolute():
        run_dir = tmp_path / run_dir
    assert run_dir.parent == tmp_path / "traces" / "runs"
    assert {p.name for p in run_dir.iterdir()} == {
        "meta.json", "paged.stdout", "paged.stderr", "materialized.stdout",
        "materialized.stderr", "report.json", "report.md", "report.html", "diff.csv"}
    assert json.loads((run_dir / "report.json").read_text())["verdict"] == "agree"


def test_a_mutated_lane_is_caught_as_a_difference(tmp_path: Path) -> None:
    # captures of the reference runner's paged lane and its causal-mask-broken materialized lane
    # (its trace says mutation=causal-mask: the arm's env states it, or the arm would be a free
    # arm showing a mutation nothing asked for, INERT)
    gate = DATA.parent / "gate"
    path = write_config(tmp_path, shared_replay_arm("paged", gate / "default-paged.log")
                        + shared_replay_arm("broken", gate / "default-materialized+causal-mask.log")
                        + 'env = { DIFFTEST_MUTATION = "causal-mask" }\n')
    r = cli("compare", "--config", path, "--arm-a", "paged", "--arm-b", "broken",
            "--run-root", tmp_path / "runs", "--no-progress", "--format", "json")
    assert r.exit_code == 1, r.output
    data = json.loads(r.output)
    assert data["verdict"] == "differ" and data["exit_code"] == 1
    assert data["blocks_differing"] > 0 or data["context_diverged"] > 0
    assert data["blocks_logit_differing"] > 0


def test_the_shipped_degenerate_config_is_uninformative(tmp_path: Path) -> None:
    """The shipped degenerate config, its two lanes replaying the reference runner's captures
    of them (tests/data/gate/, scripts/capture_gate_traces.py) under the environment and
    evidence the config gives them."""
    text = (REPO / "configs" / "degenerate.toml").read_text(encoding="utf-8")
    for arm in ("paged", "materialized"):
        command = ", ".join(json.dumps(a) for a in replay_command(
            DATA.parent / "gate" / f"degenerate-{arm}.log"))
        text, n = re.subn(rf"(\[arms\.{arm}\]\ncommand = )\[[^\]]*\]",
                          lambda m, c=command: f"{m.group(1)}[{c}]", text)
        assert n == 1
    config = write_config(tmp_path, text)
    r = cli("compare", "--config", config, "--arm-a", "paged",
            "--arm-b", "materialized", "--run-root", tmp_path / "runs", "--no-progress")
    assert r.exit_code == 3, r.output
    assert r.output.startswith("lanes: UNINFORMATIVE")
    assert "could not have failed: 1 distinct drafted id(s)" in r.output


def test_json_reports_hold_no_nan_or_infinity_literals(tmp_path: Path) -> None:
    """A nan in one arm is an infinite difference; strict JSON parsers must still read it."""
    a = DATA / "agree_a.log"
    b = tmp_path / "nan_b.log"
    b.write_text(a.read_text().replace("11:9.25", "11:nan", 1))
    r = runner.invoke(app, ["compare", "--trace-a", str(a), "--trace-b", str(b), "-f", "json"])
    assert r.exit_code == 1, r.output

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON literal {token}")

    data = json.loads(r.output, parse_constant=refuse)
    # no number is ever a string: a difference with no finite size has none (null)
    assert data["first_logit_difference"]["abs_logit_diff"] is None
    assert data["max_abs_logit_diff"] is None  # infinite, which the table says as inf
    assert data["max_abs_logit_diff_unsized"].startswith("1 compared row(s) differ")
    assert data["blocks_logit_differing"] == 1
    assert data["logit_stats"]["rows_nonfinite"] == 1

    def strings(x: object) -> list[str]:
        if isinstance(x, dict):
            return [s for v in x.values() for s in strings(v)]
        if isinstance(x, list):
            return [s for v in x for s in strings(v)]
        return [x] if isinstance(x, str) else []

    assert not {"inf", "-inf", "nan", "Infinity", "NaN"} & set(strings(data))


def test_csv_of_a_failed_arm_says_why_nothing_was_written(tmp_path: Path) -> None:
    cfg = tmp_path / "difftest.toml"
    cfg.write_text('[arms.a]\ncommand = ["{python}", "-c", "import sys; sys.exit(3)"]\n'
                   '[arms.b]\ncommand = ["{python}", "-c", "import sys; sys.exit(3)"]\n')
    out = tmp_path / "diff.csv"
    r = cli_in(tmp_path, "compare", "--arm-a", "a", "--arm-b", "b", "--config", str(cfg),
               "--csv", str(out), "--run-root", str(tmp_path / "runs"), "--no-progress")
    assert r.returncode == 4 and not out.exists()
    assert f"no CSV written to {out}: an arm failed" in r.stderr
