"""Every run is re-judgeable: `export RUN --comparison NAME` judges any comparison of a `check`
run again (a probed mutation too), and `difftest.read_diff` reads a diff CSV back typed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import difftest
from conftest import logits_line, replay_arm, verify_line
from difftest import api
from difftest.cli import app
from difftest.core.errors import UsageError

DATA = Path(__file__).parents[1] / "data" / "compare"
runner = CliRunner()


def _check_run(tmp_path: Path) -> tuple[Path, Path, difftest.flow.judge.CheckResult]:
    """A check of two comparisons; `logits` probes a mutation whose arm replays other drafts
    (a replay arm replays the file its last argument names)."""
    config = tmp_path / "difftest.toml"
    config.write_text(
        replay_arm("base", DATA / "agree_a.log") + replay_arm("same", DATA / "agree_b.log")
        + replay_arm("cand", DATA / "logitonly_b.log")
        + f"[mutations.flip]\nargs = [{json.dumps(str(DATA / 'differ_b.log'))}]\n"
        + '[comparisons.tokens]\narm_a = "base"\narm_b = "same"\nmutations = ["flip"]\n'
        + '[comparisons.logits]\narm_a = "base"\narm_b = "cand"\n')
    result = api.check(config, run_root=tmp_path / "runs", progress=False)
    assert result.run_dir is not None
    return config, result.run_dir, result


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, difftest.flow.judge.CheckResult]:
    """_check_run made once: the tests that leave its config in place judge copies of its run
    directory."""
    _, run_dir, result = _check_run(tmp_path_factory.mktemp("checked"))
    return run_dir, result


def copied(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / run_dir.name))


def test_export_rejudges_each_comparison_of_a_check_run(
        checked: tuple[Path, difftest.flow.judge.CheckResult], tmp_path: Path) -> None:
    run_dir, result = copied(checked[0], tmp_path), checked[1]
    plain = runner.invoke(app, ["export", str(run_dir)])
    assert plain.exit_code == 2
    assert "a run of 3 comparisons; name one with --comparison (tokens, tokens/flip, logits)" \
        in plain.output
    for rep in result.reports:
        again = api.rejudge(run_dir, comparison=rep.name)
        assert (again.verdict, again.spec) == (rep.verdict, rep.spec)
    out = runner.invoke(app, ["export", str(run_dir), "-c", "logits"])
    assert out.exit_code == 1
    assert out.output.splitlines()[:2] == ["logits: DIFFER (expect same): FAILED, exit 1",
                                           "  differed: logits in 1/7 blocks"]
    # looser than the 0.001 the logits moved, tighter than half the 0.02 smallest margin (the
    # derived near-tie is 2 x atol: a larger atol leaves the tokens blind, and exit 3)
    loose = runner.invoke(app, ["export", str(run_dir), "-c", "logits", "--atol", "0.005"])
    assert loose.exit_code == 0, loose.output
    mutated = runner.invoke(app, ["export", str(run_dir), "--comparison", "tokens/flip"])
    assert mutated.exit_code == 1 and "differed: tokens in 2/7 blocks" in mutated.output
    unknown = runner.invoke(app, ["export", str(run_dir), "-c", "nope"])
    assert unknown.exit_code == 2
    assert "no comparison 'nope' in this run (its comparisons: tokens, tokens/flip, logits)" \
        in unknown.output


def test_a_check_run_that_recorded_no_comparisons_is_judged_from_its_config(
        tmp_path: Path) -> None:
    config, run_dir, result = _check_run(tmp_path)
    meta_path = run_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    # as runs written before check recorded them (which had no plan record either: it came
    # later)
    meta["extra"] = meta.pop("plan")
    for key in ("comparisons", "format", "kind", "roles"):
        del meta["extra"][key]
    meta_path.write_text(json.dumps(meta))
    again = api.rejudge(run_dir, comparison="logits")
    assert again.verdict == result.reports[1].verdict
    config.unlink()
    with pytest.raises(UsageError, match="its config .* is gone"):
        api.rejudge(run_dir, comparison="logits")


def test_a_compare_run_still_needs_no_name(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(replay_arm("base", DATA / "agree_a.log")
                      + replay_arm("cand", DATA / "logitonly_b.log"))
    rep = api.compare_arms("base", "cand", config=config, run_root=tmp_path / "runs",
                           progress=False)
    assert rep.run_dir is not None
    assert api.rejudge(rep.run_dir).verdict == rep.verdict
    assert api.rejudge(rep.run_dir, comparison=rep.name).verdict == rep.verdict
    with pytest.raises(UsageError, match="no comparison 'x'"):
        api.rejudge(rep.run_dir, comparison="x")


def test_a_drafting_flag_is_told_from_the_config_through_the_run_record(tmp_path: Path) -> None:
    """A configured drafting reads "comparison", one set over it "flag": in the report, in
    meta.json's record of which rules were overridden, and when the run is judged again."""
    config = tmp_path / "difftest.toml"
    config.write_text(replay_arm("base", DATA / "agree_a.log")
                      + replay_arm("cand", DATA / "agree_b.log")
                      + '[comparisons.c]\narm_a = "base"\narm_b = "cand"\n'
                        'drafting = "sequential"\n')
    configured = api.compare_arms(comparison="c", config=config, run_root=tmp_path / "runs",
                                  progress=False)
    flagged = api.compare_arms(comparison="c", config=config, run_root=tmp_path / "runs",
                               progress=False, drafting="sequential")
    for rep, source, overridden in ((configured, "comparison", []),
                                    (flagged, "flag", ["drafting"])):
        assert rep.run_dir is not None and rep.comparison is not None
        assert rep.comparison.drafting_source == source
        assert json.loads((rep.run_dir / "report.json").read_text())["drafting_from"] == source
        meta = json.loads((rep.run_dir / "meta.json").read_text())
        assert meta["plan"]["comparison"]["overridden"] == overridden
        again = api.rejudge(rep.run_dir)
        assert again.comparison is not None and again.comparison.drafting_source == source
    # an override at export is the flag's too
    over = api.rejudge(configured.run_dir, drafting="block")  # type: ignore[arg-type]
    assert over.comparison is not None
    assert (over.comparison.drafting, over.comparison.drafting_source) == ("block", "flag")


def test_read_diff_types_every_column_and_keeps_token_ids_integers(tmp_path: Path) -> None:
    rep = api.compare_traces(DATA / "agree_a.log", DATA / "shift_b.log", near_tie=0.05)
    path = tmp_path / "diff.csv"
    assert api.export_csv(rep, path)
    plain = pd.read_csv(path)
    assert plain["token_a"].dtype.kind == "f"  # what pandas makes of it alone: floats
    frame = difftest.read_diff(path)
    assert {c: str(t) for c, t in frame.dtypes.items()} == {
        "req": "string", "pos": "int64", "row": "int64", "token_a": "Int64", "token_b": "Int64",
        "status": "category", "margin_a": "float64", "margin_b": "float64",
        "logit_a": "float64", "logit_b": "float64", "abs_logit_diff": "float64",
        "logits": "category"}
    r = rep.comparison.rows  # type: ignore[union-attr]
    assert frame["token_a"].isna().to_numpy().tolist() == (~r.has_a).tolist()
    assert frame["token_b"].isna().to_numpy().tolist() == (~r.has_b).tolist()
    assert frame["token_a"].dropna().tolist() == r.token_a[r.has_a].tolist()
    assert frame["status"].astype(str).tolist() == list(
        pd.read_csv(path, dtype=str, keep_default_na=False)["status"])
    assert "unmatched-b" in set(frame["status"])


def test_read_diff_gives_back_request_ids_a_spreadsheet_quote_protected(tmp_path: Path) -> None:
    lines = [verify_line("=cmd", 5, [1, 2], [1, 3]), logits_line("=cmd", 5, 1, [(1, "2"), (4, "1")]),
             verify_line("-1", 5, [6, 7], [6, 8])]
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("\n".join(lines) + "\n")
    b.write_text("\n".join(lines) + "\n[spec-config] build=second\n")  # a capture of its own
    rep = api.compare_traces(a, b)
    path = tmp_path / "diff.csv"
    api.export_csv(rep, path)
    assert "'=cmd" in path.read_text()
    assert set(difftest.read_diff(path)["req"]) == {"=cmd", "-1"}


HEADER = ("req,pos,row,token_a,token_b,status,margin_a,margin_b,logit_a,logit_b,abs_logit_diff,"
          "logits\n")


@pytest.mark.parametrize(("text", "message"), [
    ("a,b\n1,2\n", "not a difftest diff CSV: its header is 'a,b'"),
    ("req,pos,row,token_a,token_b,status,margin_a,margin_b,logit_a,logit_b,abs_logit_diff,"
     "logits\nr,1,1,2,2,same,,,,,,\nr,2,1,2,2,maybe,,,,,,\n",
     ":3: column status: 'maybe' is not one of"),
    ("req,pos,row,token_a,token_b,status,margin_a,margin_b,logit_a,logit_b,abs_logit_diff,"
     "logits\nr,1,1,2.5,2,same,,,,,,\n", "column token_a"),
    (HEADER + "r,12.5,1,2,2,same,,,,,,\n", ":2: column pos: 12.5 is not a whole number"),
    (HEADER + "r,1e30,1,2,2,same,,,,,,\n", ":2: column pos: 1e30 is not a whole number"),
    (HEADER + "r,99999999999999999999999,1,2,2,same,,,,,,\n", "column pos"),
    (HEADER.encode() + b"r\xff,1,1,2,2,same,,,,,,\n", "not UTF-8 text"),
    (HEADER + 'r,1,1,2,2,same,,,,,,\n"r,1,1\n', "not a well-formed CSV"),
])
def test_read_diff_refuses_what_is_not_a_diff(tmp_path: Path, text: str | bytes,
                                              message: str) -> None:
    path = tmp_path / "x.csv"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("[", r"\[")):
        difftest.read_diff(path)
    with pytest.raises(UsageError, match="cannot read"):
        difftest.read_diff(tmp_path / "missing.csv")


@pytest.mark.parametrize(("path", "message"), [
    ("/dev/zero", "/dev/zero: not a regular file"),
    (".", "is a folder, not a diff CSV"),
])
def test_read_diff_refuses_a_device_or_folder_before_reading(tmp_path: Path, path: str,
                                                           message: str) -> None:
    with pytest.raises(UsageError, match=message):
        difftest.read_diff(tmp_path if path == "." else path)


def test_export_applies_the_evidence_a_check_comparison_ran_with(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(
        replay_arm("base", DATA / "agree_a.log") + replay_arm("same", DATA / "agree_b.log")
        + 'evidence = ["line ~ this line is never printed"]\n'
        + '[comparisons.proved]\narm_a = "base"\narm_b = "same"\n')
    result = api.check(config, run_root=tmp_path / "runs", probes=False, progress=False)
    assert result.run_dir is not None
    (rep,) = result.reports
    assert rep.verdict.kind == "inert"
    again = api.rejudge(result.run_dir, comparison="proved")
    assert again.verdict == rep.verdict
    # the same run without the evidence it recorded would read as a plain agreement
    meta_path = result.run_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["plan"]["comparisons"]["proved"]["evidence"]
    meta_path.write_text(json.dumps(meta))
    assert api.rejudge(result.run_dir, comparison="proved").verdict.kind == "agree"


@pytest.fixture(scope="module")
def forced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """_forced_run made once: each test below edits a copy of its run directory."""
    return _forced_run(tmp_path_factory.mktemp("forced"))


def _forced_run(tmp_path: Path) -> Path:
    """A teacher-forced run whose B does not follow A's stream: uninformative (exit 3). B is an
    engine that prints a `[spec-forced]` line when DIFFTEST_FORCE is set, but commits its own
    stream."""
    engine = tmp_path / "engine.py"
    engine.write_text("import os, sys\nsys.stderr.write(open(sys.argv[1]).read())\n"
                      "if os.environ.get('DIFFTEST_FORCE'):\n"
                      "    sys.stderr.write('[spec-forced] req=a pos=5 commit=[ 99 98 ]\\n')\n")
    config = tmp_path / "difftest.toml"
    config.write_text(replay_arm("base", DATA / "agree_a.log")
                      + f'[arms.cand]\ncommand = ["{{python}}", "{engine}", '
                        f'{json.dumps(str(DATA / "agree_b.log"))}]\n'
                      + '[comparisons.c]\narm_a = "base"\narm_b = "cand"\nteacher_force = true\n')
    rep = api.compare_arms(comparison="c", config=config, run_root=tmp_path / "runs",
                           progress=False)
    assert rep.verdict.kind == "uninformative" and rep.run_dir is not None
    assert "[spec-forced]" in rep.arm_b.trace_path.read_text()
    return rep.run_dir


def _edit_meta(run_dir: Path, edit) -> None:  # type: ignore[no-untyped-def]
    meta = json.loads((run_dir / "meta.json").read_text())
    edit(meta)
    (run_dir / "meta.json").write_text(json.dumps(meta))


def test_a_run_whose_comparison_record_is_missing_is_refused(forced_run: Path,
                                                             tmp_path: Path) -> None:
    """Deleting the comparison record must not get the run judged under a default comparison
    (which, without teacher forcing, agreed): refused like an unreadable record."""
    run_dir = copied(forced_run, tmp_path)
    _edit_meta(run_dir, lambda m: m["plan"].pop("comparison"))
    out = runner.invoke(app, ["export", str(run_dir)])
    assert out.exit_code == 2, out.output
    assert f"{run_dir / 'meta.json'}: key 'plan.comparison' is missing" in out.output


def test_a_check_comparison_the_plan_names_but_the_record_lost_is_refused(
        checked: tuple[Path, difftest.flow.judge.CheckResult], tmp_path: Path) -> None:
    """With a plan record, every comparison it names was recorded: one missing is damage, not
    a reason to read the config file again (which may have changed since)."""
    run_dir = copied(checked[0], tmp_path)
    _edit_meta(run_dir, lambda m: m["plan"]["comparisons"].pop("logits"))
    out = runner.invoke(app, ["export", str(run_dir), "-c", "logits"])
    assert out.exit_code == 2, out.output
    assert "key 'plan.comparisons' has no comparison 'logits'" in out.output


def test_forcing_is_read_from_the_trace_not_only_from_the_record(forced_run: Path,
                                                                 tmp_path: Path) -> None:
    """teacher_force edited to false: B's trace still carries `[spec-forced]` lines, so B did
    not run free, and the run is not judged as if it had (INERT, naming the lines)."""
    run_dir = copied(forced_run, tmp_path)
    _edit_meta(run_dir, lambda m: m["plan"]["comparison"].update(teacher_force=False))
    out = runner.invoke(app, ["export", str(run_dir)])
    assert out.exit_code == 3, out.output
    assert "cand: its trace shows [spec-forced] lines (teacher forcing)" in out.output
