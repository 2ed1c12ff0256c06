"""Isolation that cannot alias: git-ref arms on real repositories, real builds, real runners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from difftest.cli import app
from difftest.config import ArmSpec
from difftest.execute import run_arms
from difftest.execute.worktree import checkout_for, list_cache

PY = sys.executable


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DIFFTEST_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "engine"
    path.mkdir()
    (path / "run.py").write_text(
        "import pathlib, sys\n"
        "print(pathlib.Path('built.txt').read_text() if pathlib.Path('built.txt').exists() "
        "else 'unbuilt', pathlib.Path('src.txt').read_text().strip())\n"
        "if len(sys.argv) > 1:\n"
        "    pathlib.Path('src.txt').write_text('edited by the runner\\n')\n")
    (path / "src.txt").write_text("original\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", ".")
    git(path, "-c", "user.name=t", "-c", "user.email=t@x.invalid", "commit", "-q", "-m", "one")
    return path


def _build(flavour: str) -> tuple[str, ...]:
    return (PY, "-c", f"open('built.txt', 'w').write('{flavour}')")


def test_same_ref_different_builds_never_share_a_tree(repo: Path, tmp_path: Path) -> None:
    specs = [ArmSpec("debug", (PY, "run.py"), git_ref="main", repo=repo, build=_build("debug")),
             ArmSpec("release", (PY, "run.py"), git_ref="main", repo=repo,
                     build=_build("release")),
             ArmSpec("env-a", (PY, "run.py"), git_ref="main", repo=repo, env={"OPT": "a"},
                     build=(PY, "-c", "import os; open('built.txt','w').write(os.environ['OPT'])")),
             ArmSpec("env-b", (PY, "run.py"), git_ref="main", repo=repo, env={"OPT": "b"},
                     build=(PY, "-c", "import os; open('built.txt','w').write(os.environ['OPT'])"))]
    results = run_arms(specs, tmp_path / "run", progress=False)
    said = {n: r.stdout_path.read_text().split()[0] for n, r in results.items()}
    assert said == {"debug": "debug", "release": "release", "env-a": "a", "env-b": "b"}
    assert len({r.cwd for r in results.values()}) == 4


def test_a_tree_the_runner_edited_is_not_reused(repo: Path, tmp_path: Path) -> None:
    spec = ArmSpec("edits", (PY, "run.py", "--edit"), git_ref="main", repo=repo,
                   build=_build("b"))
    first = run_arms([spec], tmp_path / "r1", progress=False)["edits"]
    assert first.stdout_path.read_text().split() == ["b", "original"]
    second = run_arms([spec], tmp_path / "r2", progress=False)["edits"]
    assert second.stdout_path.read_text().split() == ["b", "original"], \
        "the cached tree still held the runner's edit"
    assert second.cwd == first.cwd
    assert git(Path(second.cwd), "status", "--porcelain", "--untracked-files=no") != ""  # edited again


def test_an_unchanged_cached_build_is_reused(repo: Path, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    build = (PY, "-c", f"open({str(counter)!r}, 'a').write('x'); open('built.txt','w').write('b')")
    for _ in range(2):
        checkout_for(repo, "main", build)
    assert counter.read_text() == "x"


def test_the_users_own_worktree_is_never_unregistered(repo: Path, tmp_path: Path) -> None:
    mine = tmp_path / "my-worktree"
    git(repo, "worktree", "add", "-q", "--detach", str(mine), "main")
    aside = tmp_path / "moved-aside"
    mine.rename(aside)  # e.g. a tool that swaps the folder for a moment
    try:
        checkout_for(repo, "main", None)
        run_arms([ArmSpec("x", (PY, "run.py"), git_ref="main", repo=repo)], tmp_path / "run",
                 progress=False)
    finally:
        aside.rename(mine)
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {mine}" in listed
    assert git(mine, "status", "--porcelain") == ""


def test_head_with_uncommitted_edits_warns_and_is_recorded_dirty(
        repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "src.txt").write_text("uncommitted\n")
    spec = ArmSpec("head", (PY, "run.py"), git_ref="HEAD", repo=repo)
    res = run_arms([spec], tmp_path / "run", progress=False)["head"]
    assert res.stdout_path.read_text().split() == ["unbuilt", "original"]  # HEAD, not the edit
    assert res.git_dirty is True
    assert "uncommitted changes" in capsys.readouterr().err
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["arms"]["head"]["git_dirty"] is True
    git(repo, "checkout", "--", "src.txt")
    clean = run_arms([spec], tmp_path / "run2", progress=False)["head"]
    assert clean.git_dirty is False


def test_worktree_ref_tests_the_edits_and_leaves_the_users_state_alone(
        repo: Path, tmp_path: Path) -> None:
    (repo / "src.txt").write_text("being committed\n")
    (repo / "untracked.txt").write_text("not part of it\n")
    git(repo, "add", "untracked.txt")  # staged but not tracked in HEAD: still included
    (repo / "untracked2.txt").write_text("never added\n")
    index_before = (repo / ".git" / "index").read_bytes()
    head_before = git(repo, "rev-parse", "HEAD")
    status_before = git(repo, "status", "--porcelain")
    spec = ArmSpec("wt", (PY, "run.py"), git_ref="WORKTREE", repo=repo)
    res = run_arms([spec], tmp_path / "run", progress=False)["wt"]
    assert res.ok, res.failure()
    assert res.stdout_path.read_text().split() == ["unbuilt", "being", "committed"]
    assert res.git_sha != head_before
    assert git(repo, "rev-parse", f"{res.git_sha}^") == head_before
    cwd = Path(res.cwd)
    assert (cwd / "untracked.txt").exists() and not (cwd / "untracked2.txt").exists()
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert git(repo, "rev-parse", "HEAD") == head_before
    assert git(repo, "status", "--porcelain") == status_before
    again = run_arms([spec], tmp_path / "run2", progress=False)["wt"]
    assert again.git_sha == res.git_sha  # same edits, same snapshot, same cached tree


def test_cache_list_and_prune(repo: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    checkout_for(repo, "main", _build("x"))
    checkout_for(repo, "main", None)
    cache = Path(os.environ["DIFFTEST_CACHE"])
    (cache / "not-ours").mkdir()
    listed = runner.invoke(app, ["cache", "list", "--cache", str(cache)])
    assert listed.exit_code == 0, listed.output
    sha = git(repo, "rev-parse", "HEAD")
    assert listed.output.count(f" {sha[:12]} ") == 2 and str(repo) in listed.output
    assert len(list_cache(cache)) == 2
    kept = runner.invoke(app, ["cache", "prune", "--cache", str(cache)])
    assert kept.exit_code == 0 and "0 checkout(s) removed" in kept.output
    gone = runner.invoke(app, ["cache", "prune", "--all", "--cache", str(cache)])
    assert gone.exit_code == 0 and "2 checkout(s) removed" in gone.output, gone.output
    assert list_cache(cache) == [] and (cache / "not-ours").is_dir()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
