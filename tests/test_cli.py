"""The command line over the library: exit codes, formats, messages instead of tracebacks."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from difftest.cli import app
from conftest import ctrl_c_reaches_it

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def test_audit_exit_codes_follow_the_verdict() -> None:
    bad = runner.invoke(app, ["audit", str(DATA / "constant19_level1.log")])
    assert bad.exit_code == 3, bad.output
    assert bad.output.startswith("verdict: UNINFORMATIVE")
    good = runner.invoke(app, ["audit", str(DATA / "two_requests_level3.log")])
    assert good.exit_code == 0, good.output
    assert good.output.startswith("verdict: INFORMATIVE")


def test_audit_json_has_the_contract_keys() -> None:
    r = runner.invoke(app, ["audit", str(DATA / "constant19_level1.log"), "--format", "json"])
    data = json.loads(r.output)
    for key in ("blocks", "distinct_ids", "entropy_bits", "constant_blocks", "min_margin",
                "verdict", "reasons"):
        assert key in data
    assert data["verdict"] == "uninformative" and data["min_margin"] is None
    assert data["constant_blocks"] is True


def test_audit_threshold_flags_override() -> None:
    path = str(DATA / "two_requests_level3.log")
    r = runner.invoke(app, ["audit", path, "--min-distinct-ids", "100"])
    assert r.exit_code == 0  # still informative through its logits
    assert "token comparison           blind" in r.output


def test_malformed_trace_exits_2_with_file_and_line() -> None:
    r = runner.invoke(app, ["audit", str(DATA / "malformed_pos.log")])
    assert r.exit_code == 2
    assert "malformed_pos.log:7: [SPECTRACE] field pos: expected an integer, got '4x'" in r.output
    assert "Traceback" not in r.output


def test_missing_file_exits_2() -> None:
    r = runner.invoke(app, ["parse", "/nonexistent/trace.log"])
    assert r.exit_code == 2 and "no such trace file" in r.output


def test_parse_formats() -> None:
    path = str(DATA / "all_kinds.log")
    table = runner.invoke(app, ["parse", path])
    assert table.exit_code == 0 and "engine-error" in table.output
    data = json.loads(runner.invoke(app, ["parse", path, "--format", "json"]).output)
    assert data["summary"]["verifies"] == 3
    kinds = [e["kind"] for e in data["events"]]
    assert kinds.count("logits") == 3 and "no-propose" in kinds and "outgrown" in kinds
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["parse", path, "-f", "csv"]).output)))
    assert rows[0]["kind"] == "phase-dev"
    assert [r["ids"] for r in rows if r["kind"] == "verify"][1] == "2147483647 -2147483648 0"


def test_parse_csv_escapes_a_hostile_request_id(tmp_path: Path) -> None:
    trace = tmp_path / "hostile.log"
    trace.write_text('[SPECTRACE] req==HYPERLINK("http://x") pos=1 k=1 ns=1 acc=0 '
                     "draft=[ 4 ] emit=[ 4 ]\n")
    out = runner.invoke(app, ["parse", str(trace), "-f", "csv"]).output
    row = list(csv.DictReader(io.StringIO(out)))[0]
    assert row["req"] == "'=HYPERLINK(\"http://x\")"


def test_help_imports_no_heavy_module() -> None:
    code = ("import sys\n"
            "from difftest.cli import app\n"
            "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules)\n"
            "print('HEAVY=' + ','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "Usage" in out
    assert out.strip().splitlines()[-1] == "HEAVY="


def test_real_subprocess_audit() -> None:
    r = subprocess.run([sys.executable, "-m", "difftest", "audit",
                        str(DATA / "constant19_level1.log"), "--format", "json"],
                       capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert json.loads(r.stdout)["verdict"] == "uninformative"
    r = subprocess.run([sys.executable, "-m", "difftest", "parse", str(DATA / "malformed_pos.log")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("difftest: error: ") and "Traceback" not in r.stderr


def test_ctrl_c_stops_both_arms_and_says_where_the_captures_are(tmp_path: Path) -> None:
    import signal
    import time

    cfg = tmp_path / "difftest.toml"
    cfg.write_text(
        '[arms.a]\ncommand = ["{python}", "-c", "import sys, time; sys.stderr.write(\'started\\\\n\'); '
        'sys.stderr.flush(); time.sleep(60)"]\n'
        '[arms.b]\ncommand = ["{python}", "-c", "import time; time.sleep(60)"]\n')
    proc = subprocess.Popen([sys.executable, "-m", "difftest", "compare", "--arm-a", "a",
                             "--arm-b", "b", "--config", str(cfg), "--run-root",
                             str(tmp_path / "runs"), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        runs = list((tmp_path / "runs").glob("*/a.stderr"))
        if runs and runs[0].read_text():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)  # a loaded machine stops arms slowly
    assert proc.returncode == 130, err
    run_dir = runs[0].parent
    assert f"kept in {run_dir}" in err and "Traceback" not in err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["arms"]["a"]["interrupted"] and meta["arms"]["b"]["interrupted"]
    assert (run_dir / "a.stderr").read_text() == "started\n"


def test_parse_csv_escapes_id_lists_that_start_with_a_minus(tmp_path: Path) -> None:
    trace = tmp_path / "neg.log"
    trace.write_text("[SPECTRACE] req=r pos=1 k=2 ns=1 acc=0 draft=[ -3 5 ] emit=[ -3 ]\n")
    row = list(csv.DictReader(io.StringIO(runner.invoke(app, ["parse", str(trace), "-f",
                                                              "csv"]).output)))[0]
    assert (row["ids"], row["emit"]) == ("'-3 5", "'-3")


def test_a_file_that_is_no_trace_exits_2_for_every_command(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    binary = tmp_path / "core.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    for args in (["parse", str(empty)], ["audit", str(binary)],
                 ["compare", "--trace-a", str(empty), "--trace-b", str(DATA / "compare" / "agree_b.log")],
                 ["compare", "--trace-a", str(DATA / "compare" / "agree_a.log"), "--trace-b",
                  str(binary)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert "no VT_SPEC_TRACE lines in " in r.output and "Traceback" not in r.output
        assert "(is VT_SPEC_TRACE set, is this the runner's stderr?)" in r.output


def test_parse_shows_a_summary_and_the_first_rows_of_a_large_trace(tmp_path: Path) -> None:
    trace = tmp_path / "big.log"
    lines = [f"[spec-logits] req=r pos={p} row=1 top=[ 5:{p}.123456789 4:-2.5 ]"
             for p in range(1, 101)]
    trace.write_text("\n".join(lines[:50] + ["noise"] + lines[50:]) + "\n")
    r = runner.invoke(app, ["parse", str(trace)])
    assert r.exit_code == 0
    body = [ln for ln in r.output.splitlines() if ln.split()[:1] and ln.split()[0].isdigit()
            and "logits" in ln]
    assert len(body) == 40 and "... 60 more events (--rows all" in r.output
    every = runner.invoke(app, ["parse", str(trace), "--rows", "all"])
    assert every.output.count(" logits ") == 100 and "more events" not in every.output
    many = runner.invoke(app, ["parse", str(trace), "--rows", "many"])
    assert many.exit_code == 2
    assert "Invalid value for '--rows': expected a number or 'all', got 'many'" in many.output
    digit = runner.invoke(app, ["parse", str(trace), "--rows", "\u00b2"])  # a digit to
    assert digit.exit_code == 2  # str.isdigit, not to int(): refused, not an internal error
    assert "Invalid value for '--rows': expected a number or 'all', got '\u00b2'" in digit.output
    data = json.loads(runner.invoke(app, ["parse", str(trace), "-f", "json"]).output)
    lines_seen = [e["line"] for e in data["events"]]
    assert lines_seen == list(range(1, 51)) + list(range(52, 102))  # file order
    assert data["events"][0]["values"] == "1.123456789 -2.5"  # every printed digit kept


def test_help_states_atol_with_rtol_and_checks_exit_2_for_a_probe_not_applied() -> None:
    atol = runner.invoke(app, ["compare", "--help"], terminal_width=200).output
    assert "bitwise only with rtol 0 too: a configured rtol still applies" in " ".join(
        atol.split())
    check = " ".join(runner.invoke(app, ["check", "--help"], terminal_width=200).output.split())
    assert "usage (2: a probe whose mutation never reached the runner, NOT-APPLIED)" in check
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "probe and check: a mutation that never reached the runner (NOT-APPLIED)" in readme
