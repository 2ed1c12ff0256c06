"""Git worktrees and cached builds for arms that name a `git_ref` (main vs branch).

A ref is checked out as a detached worktree in a cache directory outside the user's tree, so
that comparing "what is merged" with "the change under review" never touches the user's
working tree, index, HEAD or branches; only worktree metadata is written under `.git/worktrees`.
Each sha gets one worktree and at most one build per build command, shared by every process that
asks for it (an exclusive `flock` per sha serialises creation and build).

Layout under the cache directory, per repository (`<repo-key>` = readable name + short hash of
the repository's common git dir):

    <repo-key>/<sha>/            the worktree, detached HEAD at <sha>
    <repo-key>/<sha>.lock        held while the worktree is created or built
    <repo-key>/<sha>.build.log   stdout + stderr of the last build
    <repo-key>/<sha>.built       marker: the build argv that last succeeded here
    <repo-key>/worktrees.lock    held around git's worktree metadata commands (prune/add/remove)
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from difftest.errors import BuildError, GitError, UsageError

STALE_AFTER_DAYS = 14.0  # a cached worktree nobody used for this long is removed by prune()
TAIL_LINES = 20  # build-log lines quoted in a BuildError

_SHA_RE = re.compile(r"^[0-9a-f]{40}$")

# Variables that point git at a particular repository, index or object store. Git sets several
# of them for hooks (a pre-commit hook sees GIT_INDEX_FILE), and a leaked GIT_INDEX_FILE would
# make `worktree add` write the new checkout's index over the commit being made. Git clears the
# same list (`git rev-parse --local-env-vars`) before it enters a submodule. GIT_CONFIG_PARAMETERS
# and GIT_CONFIG_COUNT carry the user's `-c` options and are kept, as git keeps them.
_REPO_ENV_VARS = frozenset({
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_OBJECT_DIRECTORY", "GIT_DIR",
    "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX", "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
})


@dataclass(frozen=True)
class Checkout:
    """A ref checked out (and maybe built) where an arm can run with it as working directory."""

    sha: str  # full 40-hex sha the ref resolved to
    path: Path  # the worktree directory (detached HEAD at sha)
    build_log: Path | None  # where the build output went (None when no build)
    built_now: bool  # False when the cached build was reused


def default_cache_dir() -> Path:
    """$DIFFTEST_CACHE, else $XDG_CACHE_HOME/difftest, else ~/.cache/difftest."""
    explicit = os.environ.get("DIFFTEST_CACHE", "")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "difftest"
    return Path.home() / ".cache" / "difftest"


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without the variables that would redirect git to another repo or index."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV_VARS}
    if extra:
        env.update(extra)
    return env


def _git(cwd: Path, *args: str, what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git without a shell; turn a missing git or (with check) a failure into GitError."""
    try:
        proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=_clean_env(), check=False)
    except FileNotFoundError:
        raise GitError(f"{what}: git is not installed or not on PATH") from None
    except OSError as exc:
        raise GitError(f"{what}: could not run git: {exc}") from None
    if check and proc.returncode != 0:
        detail = proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}"
        raise GitError(f"{what}: git {' '.join(args)} failed: {detail}")
    return proc


@dataclass(frozen=True)
class _Repo:
    """Where a repository's shared git data lives, and the cache key derived from it."""

    path: Path  # the path the caller gave, absolute
    common_dir: Path  # realpath of the common git dir (shared by all its worktrees)
    toplevel: Path | None  # realpath of the working tree the caller named; None when bare

    @property
    def key(self) -> str:
        name = self.common_dir.name
        if name == ".git":
            name = self.common_dir.parent.name
        elif name.endswith(".git"):
            name = name[: -len(".git")]
        name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:40] or "repo"
        digest = hashlib.sha256(str(self.common_dir).encode()).hexdigest()[:12]
        return f"{name}-{digest}"


def _open_repo(repo: Path, ref: str) -> _Repo:
    """Check that `repo` is a git repository difftest can use, and locate its git dirs."""
    where = f"repository {str(repo)!r} (ref {ref!r})"
    path = Path(os.path.abspath(Path(repo).expanduser()))
    if not path.is_dir():
        raise GitError(f"{where}: no such directory")
    proc = _git(path, "rev-parse", "--is-bare-repository", "--git-common-dir", what=where,
                check=False)
    if proc.returncode != 0:
        detail = proc.stderr.strip().splitlines()
        reason = detail[-1] if detail else f"exit code {proc.returncode}"
        raise GitError(f"{where}: not a git repository ({reason})")
    lines = proc.stdout.splitlines()
    bare = lines[0].strip() == "true"
    common = Path(os.path.realpath(path / lines[1].strip()))
    toplevel = None
    if not bare:
        top = _git(path, "rev-parse", "--show-toplevel", what=where, check=False)
        if top.returncode == 0 and top.stdout.strip():
            toplevel = Path(os.path.realpath(top.stdout.strip()))
    return _Repo(path=path, common_dir=common, toplevel=toplevel)


def resolve_ref(repo: Path, ref: str) -> str:
    """The full sha of the commit `ref` names in `repo` (branch, tag, sha, `HEAD~1`, ...)."""
    return _resolve(_open_repo(repo, ref), ref)


def _resolve(r: _Repo, ref: str) -> str:
    where = f"repository {str(r.path)!r}"
    if not isinstance(ref, str) or not ref.strip():
        raise GitError(f"{where}: empty git ref {ref!r}")
    if ref.startswith("-"):
        raise GitError(f"{where}: git ref {ref!r} starts with '-' (not a ref name)")
    proc = _git(r.path, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}",
                what=f"{where} (ref {ref!r})", check=False)
    sha = proc.stdout.strip()
    if proc.returncode != 0 or not _SHA_RE.match(sha):
        raise GitError(f"{where}: ref {ref!r} does not name a commit")
    return sha


# --------------------------------------------------------------------------------------------
# locking


@contextmanager
def _locked(lock_path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive flock on lock_path; yields False (not held) when non-blocking and busy.

    flock conflicts between two open() calls of one file even inside one process, so this
    serialises threads as well as processes. prune() deletes lock files while holding them, so
    after acquiring we check that the path still names the file we locked, else start over.
    """
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) and not blocking:
                    yield False
                    return
                raise
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock_path))
            except FileNotFoundError:
                same = False
            if not same:
                continue  # the finally below closes fd, which drops the lock
            yield True
            return
        finally:
            os.close(fd)


# --------------------------------------------------------------------------------------------
# worktrees


def _registered_worktrees(r: _Repo, what: str) -> set[str]:
    """Realpaths of every worktree git knows for this repository."""
    proc = _git(r.path, "worktree", "list", "--porcelain", what=what)
    out: set[str] = set()
    for line in proc.stdout.splitlines():
        if line.startswith("worktree "):
            out.add(os.path.realpath(line[len("worktree "):]))
    return out


def _is_valid_worktree(r: _Repo, path: Path, sha: str, what: str) -> bool:
    """True when path is a worktree this repository lists (not a copy of one), at `sha`."""
    if not path.is_dir() or path.is_symlink() or not (path / ".git").is_file():
        return False
    proc = _git(path, "rev-parse", "--verify", "--quiet", "HEAD", what=what, check=False)
    if proc.returncode != 0 or proc.stdout.strip() != sha:
        return False
    return os.path.realpath(path) in _registered_worktrees(r, what)


def _remove_path(path: Path) -> None:
    """Remove a file, link or directory tree; a missing path is fine."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path)


def _metadata_lock(root: Path) -> AbstractContextManager[bool]:
    """Serialise git worktree prune/add/remove for one repository.

    `git worktree prune` deletes an admin dir that has no gitdir file yet, which is what a
    concurrent `git worktree add` of another sha looks like for a moment; the add then fails.
    """
    return _locked(root / "worktrees.lock")


def _ensure_worktree(r: _Repo, root: Path, path: Path, sha: str, ref: str) -> bool:
    """Make path a worktree at sha, reusing a valid one; True when it was (re)created."""
    what = f"repository {str(r.path)!r} (ref {ref!r})"
    if _is_valid_worktree(r, path, sha, what):
        return False
    # Broken: directory gone, metadata stale, moved HEAD or a stray directory. Start afresh.
    with _metadata_lock(root):
        _remove_path(path)
        _git(r.path, "worktree", "prune", what=what)
        _git(r.path, "worktree", "add", "--detach", str(path), sha, what=what)
    return True


# --------------------------------------------------------------------------------------------
# builds


def _read_marker(marker: Path) -> list[str] | None:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    argv = data.get("argv") if isinstance(data, dict) else None
    return argv if isinstance(argv, list) else None


def _write_marker(marker: Path, argv: list[str]) -> None:
    """Write the marker atomically, so a crash never leaves a half-written one that matches."""
    tmp = marker.with_name(f"{marker.name}.tmp.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps({"argv": argv, "built_at": time.time()}) + "\n", encoding="utf-8")
    os.replace(tmp, marker)


def _log_tail(log: Path, n: int = TAIL_LINES) -> str:
    try:
        data = log.read_bytes()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the build and everything it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _run_build(argv: list[str], cwd: Path, log: Path, ref: str, sha: str,
               env: Mapping[str, str] | None, timeout_s: float | None) -> None:
    """Run the build with its output in `log`; raise BuildError unless it exits 0."""
    def fail(message: str, rc: int | None) -> BuildError:
        return BuildError(arm=ref, message=message, returncode=rc, stderr_tail=_log_tail(log),
                          log_path=log)

    with open(log, "wb") as out:
        out.write(f"# difftest build of {sha} in {cwd}: {argv}\n".encode())
        out.flush()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=_clean_env(env), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            out.write(f"# could not start: {exc}\n".encode())
            out.close()
            raise fail(f"build {argv} could not start ({exc.strerror or exc}); log: {log}",
                       None) from None
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out.write(f"# killed after {timeout_s:g}s\n".encode())
            out.close()
            raise fail(f"build {argv} timed out after {timeout_s:g}s; log: {log}", None) from None
        finally:
            if proc.poll() is None:  # interrupted (e.g. KeyboardInterrupt): leave no build behind
                _kill_group(proc)
    if rc != 0:
        raise fail(f"build {argv} failed; log: {log}", rc)


# --------------------------------------------------------------------------------------------
# public entry points


def _cache_root(r: _Repo, cache_dir: Path | None) -> Path:
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    base = Path(os.path.realpath(base))
    if r.toplevel is not None and (base == r.toplevel or r.toplevel in base.parents):
        raise UsageError(
            f"the difftest cache {str(base)!r} is inside the working tree {str(r.toplevel)!r}; "
            "set DIFFTEST_CACHE to a directory outside it")
    return base / r.key


def checkout_for(repo: Path, ref: str, build: Sequence[str] | None, *,
                 cache_dir: Path | None = None, env: Mapping[str, str] | None = None,
                 timeout_s: float | None = None) -> Checkout:
    """Check `ref` out in the cache (reusing a valid worktree) and build it once per build argv.

    `build` is an argv list run without a shell in the worktree with os.environ | env; None or
    an empty list means no build. A failed or timed-out build raises BuildError and leaves no
    marker, so the next call builds again.
    """
    if isinstance(build, (str, bytes)):
        raise UsageError(f"build must be an argv list, not the string {build!r}")
    argv = [str(a) for a in build] if build else None
    r = _open_repo(repo, ref)
    sha = _resolve(r, ref)
    root = _cache_root(r, cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    # Cheap and safe: forget worktrees whose directories are gone (ours or anyone's).
    with _metadata_lock(root):
        _git(r.path, "worktree", "prune", what=f"repository {str(r.path)!r} (ref {ref!r})")

    path = root / sha
    marker = root / f"{sha}.built"
    log = root / f"{sha}.build.log"
    with _locked(root / f"{sha}.lock"):
        if _ensure_worktree(r, root, path, sha, ref):
            marker.unlink(missing_ok=True)  # a fresh checkout has none of the old build outputs
        os.utime(path)  # "last used", for prune()'s age rule
        if argv is None:
            return Checkout(sha=sha, path=path, build_log=None, built_now=False)
        if _read_marker(marker) == argv:
            return Checkout(sha=sha, path=path, build_log=log if log.exists() else None,
                            built_now=False)
        # Drop the old marker first: an interrupted build must not look like a finished one.
        marker.unlink(missing_ok=True)
        _run_build(argv, path, log, ref, sha, env, timeout_s)
        _write_marker(marker, argv)
        return Checkout(sha=sha, path=path, build_log=log, built_now=True)


def prune(repo: Path, cache_dir: Path | None = None, *,
          max_age_days: float = STALE_AFTER_DAYS) -> list[Path]:
    """Remove this repository's cache entries that are broken or unused for max_age_days.

    An entry is removed when git no longer lists its worktree, its directory is gone, or its
    directory was not used for max_age_days (then `git worktree remove --force`). Entries that
    another process holds locked are skipped. Returns the worktree paths removed.
    """
    r = _open_repo(repo, "(prune)")
    what = f"repository {str(r.path)!r} (prune)"
    root = _cache_root(r, cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - max_age_days * 86400.0
    removed: list[Path] = []
    # Holding the metadata lock, no worktree of ours can be added meanwhile: the listing holds.
    with _metadata_lock(root):
        _git(r.path, "worktree", "prune", what=what)
        registered = _registered_worktrees(r, what)
        shas = {p.name.split(".", 1)[0] for p in root.iterdir()}
        for sha in sorted(s for s in shas if _SHA_RE.match(s)):
            path = root / sha
            lock = root / f"{sha}.lock"
            with _locked(lock, blocking=False) as held:
                if not held:
                    continue  # in use right now
                live = (path.is_dir() and not path.is_symlink()
                        and os.path.realpath(path) in registered)
                if live:
                    try:
                        used = path.stat().st_mtime
                    except OSError:
                        used = 0.0
                    if used >= cutoff:
                        continue
                    _git(r.path, "worktree", "remove", "--force", str(path), what=what)
                _remove_path(path)
                for leftover in root.glob(f"{sha}.*"):
                    if leftover != lock:
                        _remove_path(leftover)
                lock.unlink(missing_ok=True)  # still held: waiters see the inode change, retry
                removed.append(path)
    return removed
