"""`difftest cache prune` deletes only checkouts difftest made for this cache: a folder of user
data with planted `repo.json` files, a planted entry, a link to elsewhere, a marker copied from
another cache: all are skipped, said so with a reason, and left as they were."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git
from difftest.execute.worktree import checkout_for, prune_cache

TESTS = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(TESTS.parent)}
SHA_RECIPE = "a" * 40 + "-" + "b" * 12


def _prune(cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "difftest", "cache", "prune", "--all", "--cache",
                           str(cache), *extra], env=ENV, capture_output=True, text=True,
                          timeout=120, check=False)


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = ("link:" + os.readlink(p) if p.is_symlink()
                                             else p.read_text() if p.is_file() else "dir")
    return out


def _repo(tmp: Path) -> Path:
    repo = tmp / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_text("1\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-qm", "one")
    return repo


def _user_data(root: Path, repo: Path | None) -> None:
    """A folder of someone's files that happens to look like a cache."""
    for name, target in (("photos", "/nonexistent/repo"), ("work", str(repo or "/x"))):
        folder = root / name
        (folder / SHA_RECIPE).mkdir(parents=True)
        (folder / SHA_RECIPE / "thesis.tex").write_text("years of work\n")
        (folder / "repo.json").write_text(json.dumps({"repo": target}))
        (folder / "notes.txt").write_text("mine\n")


def test_prune_of_a_user_folder_with_planted_repo_json_removes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "home"
    _user_data(data, _repo(tmp_path))
    before = _snapshot(data)
    r = _prune(data)
    assert r.returncode == 0, r.stderr
    assert _snapshot(data) == before
    assert "0 checkout(s) removed" in r.stdout
    assert "not a difftest cache, nothing removed" in r.stdout


def test_prune_removes_only_its_own_entries_from_a_real_cache(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    cache = tmp_path / "cache"
    mine = checkout_for(repo, "main", None, cache_dir=cache)
    folder = mine.path.parent
    # planted beside difftest's own: user data that looks like a cache, a look-alike entry
    # without a marker, an entry that is a link to the user's files, a marker from elsewhere
    _user_data(cache, None)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    (folder / SHA_RECIPE).mkdir()
    (folder / SHA_RECIPE / "x").write_text("planted\n")
    linked = "c" * 40 + "-" + "d" * 12
    (folder / linked).symlink_to(outside)
    (folder / f"{linked}.owner").write_text((folder / f"{mine.path.name}.owner").read_text()
                                            .replace(mine.path.name, linked))
    foreign = "e" * 40 + "-" + "f" * 12
    (folder / foreign).mkdir()
    (folder / f"{foreign}.owner").write_text(json.dumps({"cache_id": "0" * 32,
                                                         "entry": foreign}))
    kept = {p: _snapshot(p) for p in (cache / "photos", cache / "work", outside)}
    r = _prune(cache)
    assert r.returncode == 0, r.stderr
    assert f"removed {mine.path}" in r.stdout and "1 checkout(s) removed" in r.stdout
    assert not mine.path.exists()
    assert {p: _snapshot(p) for p in kept} == kept
    assert (folder / SHA_RECIPE / "x").read_text() == "planted\n"
    assert (folder / linked).is_symlink() and (folder / foreign).is_dir()
    said = r.stdout
    assert f"skipped {cache / 'photos'}: no repo.json with this cache's id" in said
    assert f"skipped {folder / SHA_RECIPE}: no .owner marker" in said
    assert f"skipped {folder / linked}: is a symbolic link" in said
    assert f"skipped {folder / foreign}: its .owner marker belongs to another cache" in said


def test_a_gone_repositorys_folder_loses_only_difftests_entries(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    cache = tmp_path / "cache"
    mine = checkout_for(repo, "main", None, cache_dir=cache)
    folder = mine.path.parent
    (folder / "my-notes.txt").write_text("mine\n")
    shutil.rmtree(repo)
    done = prune_cache(cache, max_age_days=0)
    assert done.removed == (mine.path,) and not mine.path.exists()
    assert (folder / "my-notes.txt").read_text() == "mine\n"
    assert any("folder kept" in why for _, why in done.skipped)
    (folder / "my-notes.txt").unlink()
    assert prune_cache(cache, max_age_days=0).removed == () and not folder.exists()


def test_a_copied_cache_is_not_the_same_cache(tmp_path: Path) -> None:
    """The id is the cache's own: markers copied with a cache into another folder do not
    make that folder's entries prunable through a marker-less copy of the root."""
    repo = _repo(tmp_path)
    cache = tmp_path / "cache"
    checkout_for(repo, "main", None, cache_dir=cache)
    copy = tmp_path / "copy"
    shutil.copytree(cache, copy, symlinks=True)
    (copy / "difftest-cache.json").unlink()
    before = _snapshot(copy)
    assert prune_cache(copy, max_age_days=0).removed == ()
    assert _snapshot(copy) == before


@pytest.mark.parametrize("kind", ["link", "file"])
def test_the_cache_marker_must_be_a_regular_file(tmp_path: Path, kind: str) -> None:
    repo = _repo(tmp_path)
    cache = tmp_path / "cache"
    mine = checkout_for(repo, "main", None, cache_dir=cache)
    marker = cache / "difftest-cache.json"
    if kind == "link":
        real = tmp_path / "elsewhere.json"
        marker.rename(real)
        marker.symlink_to(real)
    done = prune_cache(cache, max_age_days=0)
    if kind == "link":
        assert done.removed == () and mine.path.is_dir()
    else:
        assert done.removed == (mine.path,)


def test_a_link_planted_at_a_build_log_is_never_written_through(tmp_path: Path) -> None:
    from difftest.execute.worktree import recipe_key

    repo = _repo(tmp_path)
    cache = tmp_path / "cache"
    first = checkout_for(repo, "main", None, cache_dir=cache)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    build = [PY, "-c", "print('built')"]
    log = first.path.parent / f"{first.sha}-{recipe_key(build, None)}.build.log"
    log.symlink_to(victim)
    done = checkout_for(repo, "main", build, cache_dir=cache)
    assert victim.read_text() == "precious\n"
    assert done.build_log == log and not log.is_symlink() and "built" in log.read_text()


def test_first_users_racing_for_the_cache_id_all_read_the_one_that_landed(tmp_path: Path) -> None:
    # An exclusive create followed by a write let a second first user read an empty marker
    # (no id): 176 of 300 four-thread races here before the marker was linked into place whole.
    import threading

    from difftest.execute.worktree import cache_id

    for trial in range(100):
        base = tmp_path / str(trial)
        base.mkdir()
        barrier = threading.Barrier(4)
        got: list[str | None] = []

        def first_use(where: Path = base, wait: threading.Barrier = barrier,
                      into: list[str | None] = got) -> None:
            wait.wait()
            into.append(cache_id(where, create=True))

        threads = [threading.Thread(target=first_use) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert None not in got and len(set(got)) == 1, (trial, got)
        assert not [p for p in base.iterdir() if p.name.endswith(".tmp")]
