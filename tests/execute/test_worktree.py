"""Worktrees and cached builds for git-ref arms, on real repositories made in tmp dirs."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from difftest.core.errors import BuildError, ExitCode, GitError, UsageError
from difftest.execute.worktree import Checkout, checkout_for, default_cache_dir, prune, resolve_ref
from conftest import git

REPO_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_PREFIX")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the user's git config and any hook environment out of these tests."""
    for var in REPO_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("DIFFTEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # a build run in the wrong directory lands here, not in the repo


def commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


class Repo:
    """A repository with main (2 commits), an annotated tag v1 and a branch `feature`."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        self.path = path
        self.c1 = commit_files(path, {"a.txt": "one\n", "keep.txt": "same\n",
                                              "docs/readme.txt": "docs\n"}, "first")
        git(path, "tag", "-a", "v1", "-m", "release 1")
        git(path, "checkout", "-q", "-b", "feature")
        self.feature = commit_files(path, {"a.txt": "feature\n", "new/b.txt": "b\n"}, "feature")
        git(path, "checkout", "-q", "main")
        self.c2 = commit_files(path, {"a.txt": "two\n"}, "second")


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "user-repo")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def counting_build(counter: Path, *extra: str, sleep_s: float = 0.0) -> list[str]:
    """A build that appends one line to `counter` (outside the worktree) per run."""
    code = textwrap.dedent(f"""
        import os, sys, time
        time.sleep({sleep_s})
        with open({str(counter)!r}, "a") as f:
            f.write(os.getcwd() + "\\n")
        with open("built.txt", "w") as f:
            f.write(open("a.txt").read() + os.environ.get("BUILD_FLAVOUR", "-"))
        print("compiled ok")
        print("a warning", file=sys.stderr)
    """)
    return [sys.executable, "-c", code, *extra]


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def registered(repo: Path) -> list[str]:
    out = git(repo, "worktree", "list", "--porcelain")
    return [os.path.realpath(line.split(" ", 1)[1]) for line in out.splitlines()
            if line.startswith("worktree ")]


def snapshot(repo: Path) -> dict[str, object]:
    """Everything of the user's checkout that difftest promises not to change."""
    files = {}
    for p in sorted(repo.rglob("*")):
        if ".git" not in p.relative_to(repo).parts and p.is_file():
            files[str(p.relative_to(repo))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return {
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "head": git(repo, "rev-parse", "HEAD"),
        "symbolic_head": git(repo, "symbolic-ref", "-q", "HEAD", check=False),
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "index": (repo / ".git" / "index").read_bytes(),
        "files": files,
    }


# ---------------------------------------------------------------------------------- refs


def test_resolve_ref_names_branch_tag_sha_and_relative(repo: Repo) -> None:
    assert resolve_ref(repo.path, "main") == repo.c2
    assert resolve_ref(repo.path, "feature") == repo.feature
    assert resolve_ref(repo.path, "v1") == repo.c1  # the annotated tag is peeled to its commit
    assert resolve_ref(repo.path, repo.c2) == repo.c2
    assert resolve_ref(repo.path, repo.c2[:8]) == repo.c2
    assert resolve_ref(repo.path, "HEAD~1") == repo.c1
    assert resolve_ref(repo.path / "docs", "main") == repo.c2  # from a subdirectory


@pytest.mark.parametrize("ref", ["no-such-branch", "-x", "", "main^{tree}", "v1:a.txt"])
def test_resolve_ref_rejects_what_is_not_a_commit(repo: Repo, ref: str) -> None:
    with pytest.raises(GitError) as err:
        resolve_ref(repo.path, ref)
    assert str(repo.path) in str(err.value)
    assert repr(ref) in str(err.value)
    assert err.value.exit_code == ExitCode.USAGE


def test_resolve_ref_names_the_reason(repo: Repo) -> None:
    with pytest.raises(GitError, match="starts with '-'"):
        resolve_ref(repo.path, "--output=x")
    with pytest.raises(GitError, match="empty git ref"):
        resolve_ref(repo.path, " ")


def test_resolve_ref_rejects_a_tree_sha(repo: Repo) -> None:
    tree = git(repo.path, "rev-parse", "main^{tree}")
    with pytest.raises(GitError, match="does not name a commit"):
        resolve_ref(repo.path, tree)


def test_not_a_repository_or_missing_dir(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError, match="not a git repository") as err:
        resolve_ref(plain, "main")
    assert str(plain) in str(err.value) and "'main'" in str(err.value)
    with pytest.raises(GitError, match="no such directory"):
        checkout_for(tmp_path / "missing", "main", None)


def test_git_missing_is_a_clear_error(repo: Repo, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(GitError, match="git is not installed") as err:
        checkout_for(repo.path, "main", None)
    assert str(repo.path) in str(err.value) and "'main'" in str(err.value)


# ---------------------------------------------------------------------------------- checkout


def test_checkouts_hold_each_commits_files(repo: Repo, cache: Path) -> None:
    main = checkout_for(repo.path, "main", None)
    feat = checkout_for(repo.path, "feature", None, cache_dir=cache)
    assert isinstance(main, Checkout)
    assert (main.sha, feat.sha) == (repo.c2, repo.feature)
    assert main.path != feat.path
    for co in (main, feat):
        assert co.path.is_relative_to(cache) and not co.path.is_relative_to(repo.path)
        assert co.path.name.startswith(co.sha + "-") and co.build_log is None and co.built_now is False
        assert git(co.path, "rev-parse", "HEAD") == co.sha
        assert git(co.path, "symbolic-ref", "-q", "HEAD", check=False) == ""  # detached
        tracked = git(co.path, "ls-files").splitlines()
        assert tracked == git(repo.path, "ls-tree", "-r", "--name-only", co.sha).splitlines()
        for name in tracked:
            assert (co.path / name).read_text() == git(repo.path, "show", f"{co.sha}:{name}") + "\n"
        assert git(co.path, "status", "--porcelain") == ""
    assert (main.path / "a.txt").read_text() == "two\n"
    assert (feat.path / "a.txt").read_text() == "feature\n"
    assert not (main.path / "new").exists()
    # asking again reuses the same worktree
    again = checkout_for(repo.path, "main", None)
    assert again.path == main.path
    assert registered(repo.path).count(os.path.realpath(main.path)) == 1


def test_repo_key_is_shared_by_linked_worktrees_and_differs_between_repos(
        repo: Repo, tmp_path: Path, cache: Path) -> None:
    linked = tmp_path / "linked"
    git(repo.path, "worktree", "add", "-q", str(linked), "feature")
    a = checkout_for(repo.path, "main", None)
    b = checkout_for(linked, "main", None)
    c = checkout_for(repo.path / "docs", "v1", None)
    assert a.path == b.path and c.path.parent == a.path.parent
    assert a.path.parent.name.startswith("user-repo-")
    other = Repo(tmp_path / "elsewhere" / "user-repo")  # same readable name, another repository
    d = checkout_for(other.path, "main", None)
    assert d.path.parent != a.path.parent and d.path.parent.name.startswith("user-repo-")


def test_cache_inside_the_users_tree_is_refused(repo: Repo) -> None:
    inside = repo.path / "cache"
    with pytest.raises(UsageError, match="inside the working tree"):
        checkout_for(repo.path, "feature", None, cache_dir=inside)
    assert not inside.exists()
    assert git(repo.path, "status", "--porcelain") == ""


def test_the_users_checkout_is_untouched(repo: Repo, tmp_path: Path) -> None:
    (repo.path / "a.txt").write_text("uncommitted edit\n")  # dirty tracked file
    (repo.path / "keep.txt").write_text("staged edit\n")
    git(repo.path, "add", "keep.txt")  # staged change
    (repo.path / "scratch.txt").write_text("untracked\n")  # untracked file
    git(repo.path, "checkout", "-q", "-b", "work")  # on a branch that is neither main nor feature
    before = snapshot(repo.path)
    assert "M  keep.txt" in str(before["status"]) and " M a.txt" in str(before["status"])

    counter = tmp_path / "count"
    for ref in ("main", "feature", "v1", "HEAD~1", "main"):
        checkout_for(repo.path, ref, counting_build(counter))
    stale = checkout_for(repo.path, "feature", None)
    git(repo.path, "worktree", "remove", "--force", str(stale.path))
    checkout_for(repo.path, "feature", counting_build(counter))
    prune(repo.path, max_age_days=0)

    assert snapshot(repo.path) == before


def test_a_pre_commit_hook_can_check_out_without_touching_the_commit(repo: Repo,
                                                                     tmp_path: Path) -> None:
    """Git gives hooks GIT_INDEX_FILE; a leak into `worktree add` would rewrite the commit."""
    hook = repo.path / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
              "from difftest.execute.worktree import checkout_for; "
              f"co = checkout_for({str(repo.path)!r}, 'v1', None); print(co.path)")
    hook.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"{script}\"\n")
    hook.chmod(0o755)
    (repo.path / "a.txt").write_text("committed by hook test\n")
    (repo.path / "c.txt").write_text("c\n")
    git(repo.path, "add", "c.txt")
    git(repo.path, "commit", "-q", "-a", "-m", "with hook")  # -a: hook sees a temporary index
    git(repo.path, "commit", "-q", "--allow-empty", "-m", "again")  # plain: hook sees .git/index

    assert git(repo.path, "show", "HEAD~1:a.txt") == "committed by hook test"
    assert git(repo.path, "show", "HEAD~1:c.txt") == "c"
    assert git(repo.path, "ls-tree", "-r", "--name-only", "HEAD").splitlines() == [
        "a.txt", "c.txt", "docs/readme.txt", "keep.txt"]
    assert git(repo.path, "status", "--porcelain") == ""
    wt = Path(os.environ["DIFFTEST_CACHE"]).glob(f"*/{repo.c1}-" + "?" * 12)
    assert [git(p, "rev-parse", "HEAD") for p in wt] == [repo.c1]


# ---------------------------------------------------------------------------------- builds


def test_build_runs_once_per_sha_and_argv(repo: Repo, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    first = checkout_for(repo.path, "feature", counting_build(counter),
                         env={"BUILD_FLAVOUR": "fast"}, timeout_s=60)
    assert first.built_now is True and runs(counter) == 1
    assert counter.read_text().splitlines() == [str(first.path)]  # cwd was the worktree
    assert (first.path / "built.txt").read_text() == "feature\nfast"  # env reached the build
    assert first.build_log == first.path.parent / f"{first.path.name}.build.log"
    log = first.build_log.read_text()
    assert "compiled ok" in log and "a warning" in log  # stdout and stderr both logged
    marker = first.path.parent / f"{first.path.name}.built"
    assert json.loads(marker.read_text())["argv"] == counting_build(counter)

    second = checkout_for(repo.path, "feature", counting_build(counter))
    assert second == Checkout(first.sha, first.path, first.build_log, False)
    assert runs(counter) == 1

    other_sha = checkout_for(repo.path, "main", counting_build(counter))
    assert other_sha.built_now is True and runs(counter) == 2

    changed = checkout_for(repo.path, "feature", counting_build(counter, "--release"))
    assert changed.built_now is True and runs(counter) == 3
    assert checkout_for(repo.path, "feature", counting_build(counter, "--release")).built_now \
        is False
    assert runs(counter) == 3
    assert checkout_for(repo.path, "feature", None).build_log is None  # no build asked for


def test_failed_build_raises_with_log_and_tail_and_retries(repo: Repo, tmp_path: Path) -> None:
    gate = tmp_path / "deps-installed"
    counter = tmp_path / "count"
    code = textwrap.dedent(f"""
        import os, sys
        open({str(counter)!r}, "a").write("x\\n")
        for i in range(30):
            print(f"line {{i}}", file=sys.stderr if i % 2 else sys.stdout, flush=True)
        sys.exit(0 if os.path.exists({str(gate)!r}) else 3)
    """)
    argv = [sys.executable, "-c", code]
    with pytest.raises(BuildError) as err:
        checkout_for(repo.path, "feature", argv)
    exc = err.value
    root = Path(os.environ["DIFFTEST_CACHE"]).resolve()
    log = next(root.glob(f"*/{repo.feature}-*.build.log"))
    assert exc.returncode == 3 and exc.arm == "feature"
    assert exc.exit_code == ExitCode.ARM_FAILED
    assert str(log) in str(exc) and "failed" in str(exc)
    tail = exc.stderr_tail.splitlines()
    assert len(tail) == 20 and tail[-1] == "line 29" and tail[0] == "line 10"
    assert not list(log.parent.glob(f"{repo.feature}-*.built"))

    with pytest.raises(BuildError):  # no marker was written, so the same argv runs again
        checkout_for(repo.path, "feature", argv)
    assert runs(counter) == 2
    gate.write_text("")
    ok = checkout_for(repo.path, "feature", argv)
    assert ok.built_now is True and runs(counter) == 3
    assert checkout_for(repo.path, "feature", argv).built_now is False and runs(counter) == 3


def test_build_that_cannot_start_is_a_build_error(repo: Repo, tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="could not start") as err:
        checkout_for(repo.path, "main", [str(tmp_path / "no-such-tool"), "all"])
    assert err.value.returncode is None and "build.log" in str(err.value)
    with pytest.raises(UsageError, match="argv list"):
        checkout_for(repo.path, "main", "make all")  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_build_timeout_kills_the_whole_process_group(repo: Repo, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(60)
    """)
    start = time.monotonic()
    with pytest.raises(BuildError, match="timed out after 1.5s") as err:
        checkout_for(repo.path, "main", [sys.executable, "-c", code], timeout_s=1.5)
    assert time.monotonic() - start < 20
    assert "started" in err.value.stderr_tail
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
    assert not list(Path(os.environ["DIFFTEST_CACHE"]).glob(f"*/{repo.c2}-*.built"))


# ---------------------------------------------------------------------------------- recovery


def test_deleted_worktree_dir_is_recreated_and_rebuilt(repo: Repo, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    first = checkout_for(repo.path, "feature", counting_build(counter))
    subprocess.run(["rm", "-rf", str(first.path)], check=True)
    again = checkout_for(repo.path, "feature", counting_build(counter))
    assert again.path == first.path and again.built_now is True and runs(counter) == 2
    assert (again.path / "a.txt").read_text() == "feature\n"
    assert git(again.path, "rev-parse", "HEAD") == repo.feature
    assert registered(repo.path).count(os.path.realpath(again.path)) == 1


def test_stale_metadata_is_pruned_and_recreated(repo: Repo) -> None:
    first = checkout_for(repo.path, "feature", None)
    admin = Path(git(first.path, "rev-parse", "--absolute-git-dir"))
    assert admin.parent.name == "worktrees"
    subprocess.run(["rm", "-rf", str(admin)], check=True)  # the directory stays, git forgot it
    assert git(first.path, "status", check=False) == ""
    again = checkout_for(repo.path, "feature", None)
    assert git(again.path, "rev-parse", "HEAD") == repo.feature
    assert git(again.path, "status", "--porcelain") == ""
    assert os.path.realpath(again.path) in registered(repo.path)


def test_checkout_prunes_registrations_of_deleted_worktrees(repo: Repo) -> None:
    """The opportunistic `git worktree prune`: a deleted entry is forgotten by the next call."""
    gone = checkout_for(repo.path, "feature", None)
    kept = checkout_for(repo.path, "main", None)
    subprocess.run(["rm", "-rf", str(gone.path)], check=True)
    assert os.path.realpath(gone.path) in registered(repo.path)
    assert checkout_for(repo.path, "main", None).path == kept.path  # reused, nothing recreated
    assert os.path.realpath(gone.path) not in registered(repo.path)


def test_worktree_moved_off_its_sha_is_recreated(repo: Repo, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    first = checkout_for(repo.path, "main", counting_build(counter))
    git(first.path, "checkout", "-q", "--detach", repo.c1)
    again = checkout_for(repo.path, "main", counting_build(counter))
    assert git(again.path, "rev-parse", "HEAD") == repo.c2
    assert (again.path / "a.txt").read_text() == "two\n"
    assert again.built_now is True and runs(counter) == 2


def test_a_copied_cache_entry_is_not_trusted(repo: Repo, tmp_path: Path) -> None:
    """A copy points at the original's git metadata; sharing it would mix two checkouts."""
    first = checkout_for(repo.path, "feature", None, cache_dir=tmp_path / "c1")
    subprocess.run(["cp", "-a", str(tmp_path / "c1"), str(tmp_path / "c2")], check=True)
    copy = checkout_for(repo.path, "feature", None, cache_dir=tmp_path / "c2")
    assert copy.path != first.path
    listed = registered(repo.path)
    assert os.path.realpath(first.path) in listed and os.path.realpath(copy.path) in listed
    admin = {git(p, "rev-parse", "--absolute-git-dir") for p in (first.path, copy.path)}
    assert len(admin) == 2
    assert git(copy.path, "status", "--porcelain") == ""


# ---------------------------------------------------------------------------------- concurrency


def test_two_threads_preparing_one_sha_share_one_worktree_and_build(repo: Repo,
                                                                    tmp_path: Path) -> None:
    counter = tmp_path / "count"
    argv = counting_build(counter, sleep_s=0.4)
    barrier = threading.Barrier(2)
    results: list[Checkout] = []
    errors: list[BaseException] = []

    def prepare() -> None:
        barrier.wait()
        try:
            results.append(checkout_for(repo.path, "feature", argv))
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(results) == 2 and results[0].path == results[1].path
    assert sorted(r.built_now for r in results) == [False, True]
    assert runs(counter) == 1
    assert registered(repo.path).count(os.path.realpath(results[0].path)) == 1


def test_two_processes_preparing_one_sha_share_one_build(repo: Repo, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    argv = counting_build(counter, sleep_s=0.4)
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
              "from difftest.execute.worktree import checkout_for; "
              f"co = checkout_for({str(repo.path)!r}, 'main', {argv!r}); print(co.built_now)")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(o[0].strip() for o in outs) == ["False", "True"]
    assert runs(counter) == 1


def test_threads_preparing_different_shas_do_not_break_each_other(repo: Repo,
                                                                  cache: Path) -> None:
    """Each checkout runs `git worktree prune`, which would delete another's half-made add."""
    shas = [commit_files(repo.path, {"n.txt": f"{i}\n"}, f"c{i}") for i in range(6)]
    for attempt in range(3):
        barrier = threading.Barrier(len(shas))
        errors: list[BaseException] = []

        def prepare(sha: str, barrier: threading.Barrier = barrier,
                    errors: list[BaseException] = errors) -> None:
            barrier.wait()
            try:
                checkout_for(repo.path, sha, None)
            except BaseException as exc:  # collected, asserted below
                errors.append(exc)

        threads = [threading.Thread(target=prepare, args=(sha,)) for sha in shas]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == [], f"attempt {attempt}"
        for sha in shas:
            assert git(next(cache.glob(f"*/{sha}-" + "?" * 12)), "rev-parse", "HEAD") == sha
        for sha in shas:
            git(repo.path, "worktree", "remove", "--force", str(next(cache.glob(f"*/{sha}-" + "?" * 12))))


# ---------------------------------------------------------------------------------- prune


def test_prune_removes_gone_and_old_entries_and_keeps_fresh_and_busy(repo: Repo,
                                                                    cache: Path) -> None:
    counter = cache.parent / "count"
    gone = checkout_for(repo.path, "feature", counting_build(counter))
    old = checkout_for(repo.path, "v1", counting_build(counter))
    fresh = checkout_for(repo.path, "main", counting_build(counter))
    subprocess.run(["rm", "-rf", str(gone.path)], check=True)
    month_ago = time.time() - 30 * 86400
    os.utime(old.path, (month_ago, month_ago))
    os.utime(fresh.path, (month_ago, month_ago))
    again = checkout_for(repo.path, "main", counting_build(counter))
    assert again.path == fresh.path and not again.built_now  # using it again renews it
    root = gone.path.parent

    # An entry whose lock another process holds is in use, old or not.
    third = Repo(cache.parent / "third")
    held = checkout_for(third.path, "main", None)
    os.utime(held.path, (month_ago, month_ago))
    fd = os.open(held.path.parent / f"{held.path.name}.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert prune(third.path) == []
    finally:
        os.close(fd)
    assert held.path.is_dir()

    removed = prune(repo.path)
    assert sorted(removed) == sorted([gone.path, old.path])
    for entry in (gone, old):
        assert not entry.path.exists()
        assert not list(root.glob(f"{entry.path.name}.*"))  # marker, log and lock gone too
        assert os.path.realpath(entry.path) not in registered(repo.path)
    assert fresh.path.is_dir() and os.path.realpath(fresh.path) in registered(repo.path)
    assert (root / f"{fresh.path.name}.built").exists()
    assert prune(repo.path) == []
    # a pruned entry comes back on demand
    assert checkout_for(repo.path, "v1", counting_build(counter)).built_now is True


def test_prune_of_a_repo_never_cached_is_empty(repo: Repo) -> None:
    assert prune(repo.path) == []


# ---------------------------------------------------------------------------------- cache dir


def test_default_cache_dir_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DIFFTEST_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.setenv("DIFFTEST_CACHE", "")
    assert default_cache_dir() == tmp_path / "xdg" / "difftest"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid per the XDG spec
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "difftest"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("DIFFTEST_CACHE")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "difftest"
