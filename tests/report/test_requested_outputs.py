"""One rule for every output a command writes: when one cannot be written, the others still are
and the verdict is still printed, but the command exits 2, never the verdict's 0 or 1 (a CI
step must not pass without the artifact it publishes, and exit 1 means "differ" only). A report
path that names a folder (`--csv out/`) is refused, not written as a file named `out`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import Ran, cli_in, replay_arm
from difftest import api
from difftest.core.errors import UsageError
from difftest.report import outputs

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data" / "compare"


def _difftest(cwd: Path, *args: str) -> Ran:
    """`difftest ARGS` from `cwd`, in this process (conftest.cli_in)."""
    return cli_in(cwd, *args)


def _traces(b: str) -> list[str]:
    return ["--trace-a", str(DATA / "agree_a.log"), "--trace-b", str(DATA / b)]


@pytest.mark.parametrize("b, verdict", [("agree_b.log", "AGREE"), ("differ_b.log", "DIFFER")])
@pytest.mark.parametrize("broken, kept", [("--html", "--csv"), ("--csv", "--html")])
def test_compare_exits_2_beside_its_verdict_when_a_report_was_not_written(
        tmp_path: Path, b: str, verdict: str, broken: str, kept: str) -> None:
    (tmp_path / "a-file").write_text("")
    r = _difftest(tmp_path, "compare", *_traces(b), broken, "a-file/out", kept, "other")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"traces: {verdict} (expect same)" in r.stdout  # the verdict was printed
    assert "difftest: error: a-file/out: cannot write" in r.stderr, r.stderr
    assert (tmp_path / "other").stat().st_size > 0  # the other report was written


@pytest.fixture(scope="module")
def differed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of `compare -c ac` of two replay arms that differ, made once: each
    export test below exports a copy of it."""
    folder = tmp_path_factory.mktemp("differed")
    (folder / "difftest.toml").write_text(
        replay_arm("a", DATA / "agree_a.log") + replay_arm("c", DATA / "differ_b.log")
        + '[comparisons.ac]\narm_a = "a"\narm_b = "c"\n')
    run = _difftest(folder, "compare", "-c", "ac", "--run-root", "runs", "--no-progress")
    assert run.returncode == 1, run.stderr
    return next((folder / "runs").iterdir())


def test_export_of_a_run_exits_2_when_its_html_was_not_written(differed: Path,
                                                               tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(differed, tmp_path / "run"))
    (tmp_path / "a-file").write_text("")
    r = _difftest(tmp_path, "export", str(run_dir), "--html", "a-file/x.html")
    assert r.returncode == 2 and r.stdout.startswith("ac: DIFFER"), r.stdout + r.stderr
    assert "a-file/x.html: cannot write" in r.stderr


@pytest.mark.parametrize("flag, own", [("--html", "report.json"), ("--csv", "report.md"),
                                       ("--html", "diff.csv")])
def test_export_never_replaces_a_record_the_run_wrote(differed: Path, tmp_path: Path, flag: str,
                                                     own: str) -> None:
    """report.json holds what only the run knew (a sequential test's decision, for one): a
    report asked of `export` is refused there, before anything is judged, and the record stays."""
    run_dir = Path(shutil.copytree(differed, tmp_path / "run"))
    before = (run_dir / own).read_bytes()
    r = _difftest(tmp_path, "export", str(run_dir), flag, str(run_dir / own))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "a record the run itself wrote" in r.stderr and r.stdout == "", r.stderr
    assert (run_dir / own).read_bytes() == before


@pytest.mark.parametrize("flag", ["--junit", "--markdown", "--html"])
def test_check_exits_2_when_a_report_it_was_asked_for_was_not_written(tmp_path: Path,
                                                                       flag: str) -> None:
    (tmp_path / "difftest.toml").write_text(
        replay_arm("a", DATA / "agree_a.log") + replay_arm("c", DATA / "differ_b.log")
        + '[comparisons.ac]\narm_a = "a"\narm_b = "c"\n')
    (tmp_path / "a-file").write_text("")
    others = [f for f in ("--junit", "--markdown", "--html") if f != flag]
    r = _difftest(tmp_path, "check", "--run-root", "runs", "--no-progress", flag,
                  "a-file/report", others[0], "first", others[1], "second")
    assert r.returncode == 2, r.stdout + r.stderr  # the comparison differs: 1 would say so
    assert "FAIL" in r.stdout and "ac" in r.stdout
    assert "difftest: error: a-file/report: cannot write" in r.stderr
    assert (tmp_path / "first").is_file() and (tmp_path / "second").is_file()
    run_dir = next((tmp_path / "runs").iterdir())
    assert {"check.json", "junit.xml", "check.md", "check.html"} <= {
        p.name for p in run_dir.iterdir()}


@pytest.mark.parametrize("command, flag", [
    ("compare", "--csv"), ("compare", "--html"), ("check", "--junit"), ("check", "--markdown"),
    ("check", "--html")])
def test_a_report_path_that_names_a_folder_is_refused(tmp_path: Path, command: str,
                                                      flag: str) -> None:
    (tmp_path / "difftest.toml").write_text(
        replay_arm("a", DATA / "agree_a.log") + replay_arm("b", DATA / "agree_b.log")
        + '[comparisons.ab]\narm_a = "a"\narm_b = "b"\n')
    args = _traces("agree_b.log") if command == "compare" else ["--run-root", "runs"]
    r = _difftest(tmp_path, command, *args, flag, "out/")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "out/: names a folder" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()
    with pytest.raises(UsageError, match="out/: names a folder"):
        api.check_outputs("out/")


def test_an_unwritten_run_directory_output_raises_with_the_result(tmp_path: Path) -> None:
    """The library's side of the rule: NotWritten, after the others, carrying the result."""
    (tmp_path / "difftest.toml").write_text(replay_arm("a", DATA / "agree_a.log"))
    report = api.noise("a", noise_runs=2, config=tmp_path / "difftest.toml",
                       run_root=tmp_path / "runs", progress=False)
    saved = report.run_dir / outputs.NOISE_JSON
    assert json.loads(saved.read_text())["arm"] == "a"
    saved.unlink()
    saved.mkdir()  # in the way of the file
    with pytest.raises(outputs.NotWritten) as caught:
        outputs.write_noise(report)
    assert caught.value.result is report
    assert [p for p, _ in caught.value.failures] == [saved]
    assert "is a directory" in str(caught.value)
