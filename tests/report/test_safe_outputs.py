"""Attacks on difftest's output paths, as root in a CI container would meet them: a device
node, FIFO, socket, directory or link at a report path; a report path that is one of the run's
own inputs; a configured name that climbs out of the run directory. Every one is refused with
exit 2 and the thing at the path is left exactly as it was."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from conftest import Ran, cli_in
from difftest.config import name_problem

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data" / "compare"
PY = sys.executable
ONE_BLOCK = ("import sys; print('[SPECTRACE] req=r pos=3 k=2 ns=3 acc=2 draft=[ 5 6 ] "
             "emit=[ 5 6 7 ]', file=sys.stderr)")


def _config(comparison: str = "ab") -> str:
    return (f'[arms.a]\ncommand = [{json.dumps(PY)}, "-c", {json.dumps(ONE_BLOCK)}]\n'
            f'[arms.b]\ncommand = [{json.dumps(PY)}, "-c", {json.dumps(ONE_BLOCK)}]\n'
            f'[comparisons.{json.dumps(comparison)}]\narm_a = "a"\narm_b = "b"\n')


def _difftest(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    """`difftest ARGS` from `cwd`, in this process (conftest.cli_in)."""
    return cli_in(cwd, *args, env=env)


def _chardev(path: Path) -> None:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "keep").write_text("mine\n")


def _link(path: Path) -> None:
    path.symlink_to(path.parent / "victim")


NODES: dict[str, tuple[Callable[[Path], None], Callable[[int], bool]]] = {
    "character device": (_chardev, stat.S_ISCHR),
    "FIFO": (_fifo, stat.S_ISFIFO),
    "socket": (_socket, stat.S_ISSOCK),
    "directory": (_folder, stat.S_ISDIR),
    "symbolic link": (_link, stat.S_ISLNK),
}


def _plant(tmp_path: Path, kind: str) -> tuple[Path, os.stat_result]:
    target = tmp_path / "out" / "target"
    target.parent.mkdir()
    NODES[kind][0](target)
    return target, os.lstat(target)


def _untouched(target: Path, before: os.stat_result, kind: str) -> None:
    after = os.lstat(target)
    assert NODES[kind][1](after.st_mode), f"{kind} at {target} was replaced"
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert sorted(p.name for p in target.parent.iterdir()) == ["target"], "temp files left"
    assert not (target.parent / "victim").exists()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")


@pytest.mark.parametrize("kind", list(NODES))
@pytest.mark.parametrize("flag", ["--csv", "--html"])
def test_compare_outputs_onto_special_files_are_refused(tmp_path: Path, kind: str,
                                                        flag: str) -> None:
    if kind == "character device" and os.geteuid() != 0:
        pytest.skip("mknod of a device needs root")
    target, before = _plant(tmp_path, kind)
    r = _difftest(tmp_path, "compare", "--trace-a", str(DATA / "agree_a.log"), "--trace-b",
                  str(DATA / "agree_b.log"), flag, str(target))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{target}: is a {kind}" in r.stderr and "Traceback" not in r.stderr
    _untouched(target, before, kind)


@pytest.mark.parametrize("kind", ["character device", "FIFO", "directory", "symbolic link"])
@pytest.mark.parametrize("flag", ["--junit", "--markdown", "--html"])
def test_check_outputs_onto_special_files_are_refused_before_any_arm_runs(
        tmp_path: Path, kind: str, flag: str) -> None:
    if kind == "character device" and os.geteuid() != 0:
        pytest.skip("mknod of a device needs root")
    (tmp_path / "difftest.toml").write_text(_config())
    target, before = _plant(tmp_path, kind)
    r = _difftest(tmp_path, "check", "--run-root", "runs", "--no-progress", flag, str(target))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{target}: is a {kind}" in r.stderr
    assert not (tmp_path / "runs").exists(), "the arms ran although the output was refused"
    _untouched(target, before, kind)


@needs_root
def test_the_machines_own_dev_null_is_never_replaced(tmp_path: Path) -> None:
    before = os.lstat("/dev/null")
    r = _difftest(tmp_path, "compare", "--trace-a", str(DATA / "agree_a.log"), "--trace-b",
                  str(DATA / "agree_b.log"), "--csv", "/dev/null")
    assert r.returncode == 2 and "is a character device" in r.stderr
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    assert not [p for p in os.listdir("/dev") if p.startswith(".null.")]


def test_dash_is_not_taken_for_a_file_name(tmp_path: Path) -> None:
    r = _difftest(tmp_path, "compare", "--trace-a", str(DATA / "agree_a.log"), "--trace-b",
                  str(DATA / "agree_b.log"), "--csv", "-")
    assert r.returncode == 2 and "standard output" in r.stderr
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("how", ["same path", "hard link", "through a linked folder"])
def test_csv_onto_an_input_trace_is_refused(tmp_path: Path, how: str) -> None:
    trace = tmp_path / "a.log"
    trace.write_bytes((DATA / "agree_a.log").read_bytes())
    target = trace
    if how == "hard link":
        target = tmp_path / "also.csv"
        os.link(trace, target)
    elif how == "through a linked folder":
        (tmp_path / "alias").symlink_to(tmp_path)
        target = tmp_path / "alias" / "a.log"
    for flag in ("--csv", "--html"):
        r = _difftest(tmp_path, "compare", "--trace-a", str(trace), "--trace-b",
                      str(DATA / "agree_b.log"), flag, str(target))
        assert r.returncode == 2, r.stdout + r.stderr
        assert "a file this run reads" in r.stderr
        assert trace.read_bytes() == (DATA / "agree_a.log").read_bytes()


def _a_run(tmp_path: Path) -> Path:
    (tmp_path / "difftest.toml").write_text(_config())
    r = _difftest(tmp_path, "compare", "-c", "ab", "--run-root", "runs", "--no-progress")
    assert r.returncode == 0, r.stderr
    return next((tmp_path / "runs").iterdir())


def test_export_never_overwrites_the_runs_captures_or_meta(tmp_path: Path) -> None:
    run = _a_run(tmp_path)
    kept = {p.name: p.read_bytes() for p in run.iterdir()
            if p.suffix in (".stderr", ".stdout") or p.name == "meta.json"}
    assert {"a.stderr", "b.stdout", "meta.json"} <= set(kept)
    for name in kept:
        for flag in ("--csv", "--html"):
            r = _difftest(tmp_path, "export", str(run), flag, str(run / name))
            assert r.returncode == 2, (name, flag, r.stdout + r.stderr)
            assert "a file this run reads" in r.stderr
    assert {n: (run / n).read_bytes() for n in kept} == kept
    # a new file in the run directory is fine
    r = _difftest(tmp_path, "export", str(run), "--csv", str(run / "mine.csv"))
    assert r.returncode == 0 and (run / "mine.csv").read_text().startswith("req,pos,row")


@pytest.mark.parametrize("name", ["../../../outside", "a/b", "..", "x\\y", "tab\there",
                                  "n" * 101])
def test_comparison_names_that_could_leave_the_run_directory_are_refused(
        tmp_path: Path, name: str) -> None:
    (tmp_path / "difftest.toml").write_text(_config(name))
    r = _difftest(tmp_path, "check", "--run-root", "runs", "--no-progress")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "difftest.toml" in r.stderr and "[comparisons." in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "outside").exists() and not list(tmp_path.rglob("diff-*.csv"))


@pytest.mark.parametrize("table", ["arms", "mutations"])
def test_arm_and_mutation_names_are_checked_where_the_config_is_read(tmp_path: Path,
                                                                     table: str) -> None:
    extra = ('[arms."../up"]\ncommand = ["x"]\n' if table == "arms"
             else '[mutations."../up"]\nenv = { X = "1" }\n')
    (tmp_path / "difftest.toml").write_text(_config() + extra)
    r = _difftest(tmp_path, "check", "--run-root", "runs", "--no-progress")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"[{table}.../up]" in r.stderr and "path separator" in r.stderr


def test_step_summary_goes_only_to_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "difftest.toml").write_text(_config())
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    r = _difftest(tmp_path, "check", "--run-root", "runs", "--no-progress",
                  env={"GITHUB_STEP_SUMMARY": str(fifo)})
    assert r.returncode == 0, r.stderr  # a summary that cannot be written is a warning
    assert "cannot append to GITHUB_STEP_SUMMARY" in r.stderr and "FIFO" in r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    summary = tmp_path / "real-summary.md"
    summary.write_text("earlier step\n")
    r = _difftest(tmp_path, "check", "--run-root", "runs", "--no-progress",
                  env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.returncode == 0 and summary.read_text().startswith("earlier step\n## difftest check")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
@example(".")
@example("../x")
@example("a/../../b")
def test_fuzz_an_accepted_name_never_leaves_the_run_directory(name: str) -> None:
    run = "/runs/r1"
    if name_problem(name) is None:
        for made in (f"diff-{name}.csv", f"{name}.stderr", name):
            assert os.path.dirname(os.path.normpath(os.path.join(run, made))) == run, name
        assert not any(ord(c) < 32 for c in name)


def test_compare_never_writes_over_the_config_it_read(tmp_path: Path) -> None:
    (tmp_path / "difftest.toml").write_text(_config())
    before = (tmp_path / "difftest.toml").read_text()
    r = _difftest(tmp_path, "compare", "-c", "ab", "--run-root", "runs", "--no-progress",
                  "--csv", "difftest.toml")
    assert r.returncode == 2 and "a file this run reads" in r.stderr, r.stdout + r.stderr
    assert (tmp_path / "difftest.toml").read_text() == before
