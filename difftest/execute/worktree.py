"""Git worktrees and cached builds for arms that name a `git_ref` (main vs branch).

A ref is checked out as a detached worktree in a cache directory outside the user's tree, so
that comparing "what is merged" with "the change under review" never touches the user's
working tree, index, HEAD or branches; only worktree metadata is written under `.git/worktrees`.
Each sha gets one worktree and at most one build per build command, shared by every process that
asks for it (an exclusive `flock` per sha serialises creation and build).

Layout under the cache directory, per repository (`<repo-key>` = readable name + short hash of
the repository's common git dir). An entry is one commit built one way: `<entry>` =
`<sha>-<recipe>`, where the recipe is a hash of the build argv and the build's environment
overrides, so two arms that build one commit differently never share (or overwrite) a tree:

    difftest-cache.json             the cache's own id, written once when difftest first uses it
    <repo-key>/repo.json            which repository this is (for `difftest cache`), and the id
    <repo-key>/<entry>.owner        marker: this entry was made by difftest for this cache (id)
    <repo-key>/<entry>/             the worktree, detached HEAD at <sha>
    <repo-key>/<entry>.lock         held while the worktree is created, verified or built
    <repo-key>/<entry>.build.log    stdout + stderr of the last build
    <repo-key>/<entry>.built        marker: the recipe that last succeeded, and the state of the
                                    tracked files right after the build
    <repo-key>/worktrees.lock       held around git's worktree metadata commands (add/remove)

A cached entry is used only when it is still what was built: HEAD at <sha> and the tracked files
exactly as the build left them (a runner that edited a tracked file makes it stale, and it is
checked out and built afresh). Only worktrees under the cache are ever unregistered: never a
user's own worktree, even one whose folder is briefly gone.

Pruning deletes only what difftest made: an entry whose `.owner` marker carries this cache's
id, that is a direct child of its repository folder (itself holding a `repo.json` with the id),
whose real path is inside the cache, and that is no link. Everything else is skipped, with why.

Two special refs: `HEAD` with uncommitted changes to tracked files is flagged `dirty` (they are
not tested); `WORKTREE` tests the working tree as it is, through a commit of its tracked files
made without touching the user's index, HEAD or branches.
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
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from difftest.core.errors import BuildError, GitError, UsageError
from difftest.core.procgroup import signal_group

STALE_AFTER_DAYS = 14.0  # a cached worktree nobody used for this long is removed by prune()
TAIL_LINES = 20  # build-log lines quoted in a BuildError

_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_ENTRY_RE = re.compile(r"^([0-9a-f]{40})-([0-9a-f]{12})$")
WORKTREE_REF = "WORKTREE"  # the working tree's tracked files as they are now

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
    dirty: bool | None = None  # for HEAD: the user's tree has uncommitted tracked changes


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


def _forget(r: _Repo, path: Path) -> None:
    """Unregister one worktree of ours whose folder is gone or broken (never `git worktree
    prune`, which would also forget a user's worktree whose folder is briefly absent)."""
    admin_root = r.common_dir / "worktrees"
    target = os.path.realpath(path)
    try:
        admins = list(admin_root.iterdir())
    except OSError:
        return
    for admin in admins:
        try:
            gitdir = (admin / "gitdir").read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if os.path.realpath(os.path.dirname(gitdir)) == target:
            shutil.rmtree(admin, ignore_errors=True)


def _forget_gone(r: _Repo, root: Path, what: str) -> None:
    """Forget our own worktrees whose folders were deleted."""
    top = os.path.realpath(root)
    for path in _registered_worktrees(r, what):
        if os.path.dirname(path) == top and not os.path.isdir(path):
            _forget(r, Path(path))


def _tree_state(path: Path, what: str) -> str:
    """A digest of the tracked files' state against HEAD (empty string: clean)."""
    status = _git(path, "status", "--porcelain=v1", "-z", "--untracked-files=no", what=what)
    if not status.stdout:
        return ""
    diff = _git(path, "diff", "--binary", "HEAD", what=what)
    return hashlib.sha256((status.stdout + "\0" + diff.stdout).encode()).hexdigest()


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
    """Serialise git worktree add/remove (and our own unregistering) for one repository.

    An admin dir that has no gitdir file yet is what a concurrent `git worktree add` looks like
    for a moment; nothing may forget it meanwhile.
    """
    return _locked(root / "worktrees.lock")


def _ensure_worktree(r: _Repo, root: Path, path: Path, sha: str, ref: str) -> bool:
    """Make path a worktree at sha, reusing a valid one; True when it was (re)created."""
    what = f"repository {str(r.path)!r} (ref {ref!r})"
    if _is_valid_worktree(r, path, sha, what):
        return False
    # Broken: directory gone, metadata stale, moved HEAD or a stray directory. Start afresh.
    _recreate(r, root, path, sha, what)
    return True


def _recreate(r: _Repo, root: Path, path: Path, sha: str, what: str) -> None:
    with _metadata_lock(root):
        _remove_path(path)
        _forget(r, path)
        _git(r.path, "worktree", "add", "--detach", str(path), sha, what=what)


# --------------------------------------------------------------------------------------------
# builds


def _read_marker(marker: Path) -> dict[str, object] | None:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("argv"), list) else None


def _write_marker(marker: Path, argv: list[str], state: str) -> None:
    """Atomically, so a crash never leaves a half-written marker that matches."""
    from difftest.core.atomic import write_text_atomic

    write_text_atomic(marker, json.dumps({"argv": argv, "state": state,
                                          "built_at": time.time()}) + "\n")


def recipe_key(argv: Sequence[str] | None, build_env: Mapping[str, str] | None) -> str:
    """12 hex digits naming how an entry is built: the argv and the build's env overrides."""
    recipe = {"argv": list(argv) if argv else None,
              "env": sorted((build_env or {}).items()) if argv else []}
    return hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:12]


def _log_tail(log: Path, n: int = TAIL_LINES) -> str:
    try:
        data = log.read_bytes()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the build and everything it started (it leads its own process group)."""
    signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _run_build(argv: list[str], cwd: Path, log: Path, ref: str, sha: str,
               env: Mapping[str, str] | None, timeout_s: float | None) -> None:
    """Run the build with its output in `log`; raise BuildError unless it exits 0."""
    def fail(message: str, rc: int | None) -> BuildError:
        return BuildError(arm=ref, message=message, returncode=rc, stderr_tail=_log_tail(log),
                          log_path=log)

    log.unlink(missing_ok=True)  # a link planted at the log's name is removed, never written through
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as out:
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


CACHE_MARKER = "difftest-cache.json"
OWNER_SUFFIX = ".owner"


def _read_json(path: Path) -> dict[str, object] | None:
    """A small JSON object from a regular file, never through a link; None if anything is off."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            data = json.loads(fh.read(65536).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def cache_id(base: Path, *, create: bool) -> str | None:
    """The id of the cache at `base` (its real path), made once by the first difftest that uses
    it; None where there is none (a folder difftest never used as its cache)."""
    marker = Path(os.path.realpath(base)) / CACHE_MARKER
    data = _read_json(marker)
    if data is not None and isinstance(data.get("cache_id"), str):
        return str(data["cache_id"])
    if not create:
        return None
    import secrets

    new = secrets.token_hex(16)
    text = json.dumps({"cache_id": new, "made_by": "difftest",
                       "what": "git checkouts difftest made; `difftest cache prune` removes "
                               "only entries carrying this id"}) + "\n"
    # Written whole under a private name, then linked into place: the link fails if another
    # first user landed its id first, and a reader never sees the marker empty (an exclusive
    # create followed by a write left a moment in which a second user read no id at all).
    tmp = marker.with_name(f".{CACHE_MARKER}.{new}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:  # exclusively: two first users agree on the one id that landed
            os.link(tmp, marker)
        except FileExistsError:
            return cache_id(base, create=False)
    finally:
        tmp.unlink(missing_ok=True)
    return new


def _write_owner(root: Path, entry: str, ident: str) -> None:
    """Mark `entry` as made by difftest for the cache with id `ident`."""
    marker = root / f"{entry}{OWNER_SUFFIX}"
    data = _read_json(marker)
    if data is not None and data.get("cache_id") == ident and data.get("entry") == entry:
        return
    from difftest.core.atomic import write_text_atomic

    write_text_atomic(marker, json.dumps({"cache_id": ident, "entry": entry}) + "\n")


def checkout_for(repo: Path, ref: str, build: Sequence[str] | None, *,
                 cache_dir: Path | None = None, env: Mapping[str, str] | None = None,
                 build_env: Mapping[str, str] | None = None,
                 timeout_s: float | None = None) -> Checkout:
    """Check `ref` out in the cache and build it, once per commit and build recipe.

    `build` is an argv list run without a shell in the worktree with os.environ | env; None or
    an empty list means no build. `build_env` (the overrides in env that are the arm's own) is
    part of the recipe. A failed or timed-out build raises BuildError and leaves no marker, so
    the next call builds again.
    """
    if isinstance(build, (str, bytes)):
        raise UsageError(f"build must be an argv list, not the string {build!r}")
    argv = [str(a) for a in build] if build else None
    r = _open_repo(repo, ref)
    what = f"repository {str(r.path)!r} (ref {ref!r})"
    dirty: bool | None = None
    if ref == WORKTREE_REF:
        sha = _snapshot(r, what)
    else:
        sha = _resolve(r, ref)
        if ref.strip() == "HEAD" and r.toplevel is not None:
            dirty = _tree_state(r.toplevel, what) != ""
    root = _cache_root(r, cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    ident = cache_id(root.parent, create=True)
    assert ident is not None
    _note_repo(root, r, ident)
    with _metadata_lock(root):
        _forget_gone(r, root, what)

    entry = f"{sha}-{recipe_key(argv, build_env)}"
    path = root / entry
    marker = root / f"{entry}.built"
    log = root / f"{entry}.build.log"
    with _locked(root / f"{entry}.lock"):
        if _ensure_worktree(r, root, path, sha, ref):
            marker.unlink(missing_ok=True)  # a fresh checkout has none of the old build outputs
        _write_owner(root, entry, ident)
        state = _tree_state(path, what)
        built = _read_marker(marker) if argv is not None else None
        expected = built.get("state") if built is not None and built.get("argv") == argv else ""
        if state != expected:
            # A build or runner edited tracked files since: this tree is not what was built.
            _recreate(r, root, path, sha, what)
            marker.unlink(missing_ok=True)
            built = None
        os.utime(path)  # "last used", for prune()'s age rule
        if argv is None:
            return Checkout(sha=sha, path=path, build_log=None, built_now=False, dirty=dirty)
        if built is not None and built.get("argv") == argv:
            return Checkout(sha=sha, path=path, build_log=log if log.exists() else None,
                            built_now=False, dirty=dirty)
        # Drop the old marker first: an interrupted build must not look like a finished one.
        marker.unlink(missing_ok=True)
        _run_build(argv, path, log, ref, sha, env, timeout_s)
        _write_marker(marker, argv, _tree_state(path, what))
        return Checkout(sha=sha, path=path, build_log=log, built_now=True, dirty=dirty)


def _snapshot(r: _Repo, what: str) -> str:
    """A commit of the working tree's tracked files (those in HEAD or the index) as they are
    now, parented on HEAD.

    Made with a private index, so the user's index, HEAD and branches are untouched; dated like
    HEAD, so the same edits give the same sha (and reuse the same cached build).
    """
    if r.toplevel is None:
        raise GitError(f"{what}: a bare repository has no working tree to snapshot")
    import tempfile

    head = _resolve(r, "HEAD")
    with tempfile.TemporaryDirectory(prefix="difftest-index-") as tmp:
        env = _clean_env({"GIT_INDEX_FILE": os.path.join(tmp, "index")})
        date = _git(r.toplevel, "log", "-1", "--format=%cI", head, what=what).stdout.strip()
        env.update({"GIT_AUTHOR_NAME": "difftest", "GIT_AUTHOR_EMAIL": "difftest@localhost",
                    "GIT_COMMITTER_NAME": "difftest", "GIT_COMMITTER_EMAIL": "difftest@localhost",
                    "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})

        def git(*args: str) -> str:
            proc = subprocess.run(["git", "-C", str(r.toplevel), *args], capture_output=True,
                                  text=True, env=env, stdin=subprocess.DEVNULL, check=False)
            if proc.returncode != 0:
                raise GitError(f"{what}: git {' '.join(args)} failed: {proc.stderr.strip()}")
            return proc.stdout.strip()

        # Start from the user's index (a file staged for the first time is tracked too), then
        # take every tracked file as the working tree has it.
        index = _git(r.toplevel, "rev-parse", "--git-path", "index", what=what).stdout.strip()
        index_path = Path(index) if os.path.isabs(index) else r.toplevel / index
        if index_path.is_file():
            shutil.copyfile(index_path, os.path.join(tmp, "index"))
        else:
            git("read-tree", head)
        git("add", "--update", "--", ".")
        tree = git("write-tree")
        if tree == git("rev-parse", f"{head}^{{tree}}"):
            return head  # nothing changed: test HEAD itself
        return git("commit-tree", tree, "-p", head, "-m", "difftest: working tree snapshot")


def _note_repo(root: Path, r: _Repo, ident: str) -> None:
    """Remember which repository a cache folder belongs to (for `difftest cache`), and which
    cache made it (for prune)."""
    note = root / "repo.json"
    data = _read_json(note)
    if data is None or data.get("cache_id") != ident:
        from difftest.core.atomic import write_text_atomic

        write_text_atomic(note, json.dumps({"repo": str(r.toplevel or r.path),
                                            "common_dir": str(r.common_dir),
                                            "cache_id": ident}) + "\n")


@dataclass(frozen=True)
class PruneResult:
    """What a prune removed, and what it left alone and why."""

    removed: tuple[Path, ...]
    skipped: tuple[tuple[Path, str], ...]


def _not_ours(base: str, folder: Path, entry: str, ident: str | None) -> str | None:
    """Why `folder/entry` is not a checkout difftest made for the cache at `base` (a real
    path), else None. Nothing here follows a link."""
    if ident is None:
        return f"the cache {base} has no {CACHE_MARKER}: difftest never made it"
    path = folder / entry
    if os.path.realpath(folder) != os.path.join(base, folder.name):
        return "its folder is not a direct child of the cache"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if st is not None and stat.S_ISLNK(st.st_mode):
        return "is a symbolic link (never followed)"
    if st is not None and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st is not None and os.path.dirname(os.path.realpath(path)) != os.path.join(base, folder.name):
        return "its real path is outside the cache"
    owner = _read_json(folder / f"{entry}{OWNER_SUFFIX}")
    if owner is None:
        return f"no {OWNER_SUFFIX} marker: not made by difftest (or by a version before markers)"
    if owner.get("cache_id") != ident or owner.get("entry") != entry:
        return f"its {OWNER_SUFFIX} marker belongs to another cache"
    return None


def _remove_entry(root: Path, entry: str, lock: Path | None) -> None:
    """The entry's folder and its side files (.built, .build.log, .owner), never a link's
    target."""
    _remove_path(root / entry)
    for leftover in root.glob(f"{entry}.*"):
        if leftover != lock and leftover.name != f"{entry}{OWNER_SUFFIX}":
            _remove_path(leftover)
    (root / f"{entry}{OWNER_SUFFIX}").unlink(missing_ok=True)  # last: a crash leaves it marked


def prune(repo: Path, cache_dir: Path | None = None, *,
          max_age_days: float = STALE_AFTER_DAYS) -> list[Path]:
    """Remove this repository's cache entries that are broken or unused for max_age_days.

    An entry is removed when git no longer lists its worktree, its directory is gone, or its
    directory was not used for max_age_days (then `git worktree remove --force`), and only when
    difftest made it (see `_not_ours`). Entries that another process holds locked are skipped.
    Returns the worktree paths removed.
    """
    return list(prune_repo(repo, cache_dir, max_age_days=max_age_days).removed)


def prune_repo(repo: Path, cache_dir: Path | None = None, *,
               max_age_days: float = STALE_AFTER_DAYS) -> PruneResult:
    """prune(), telling also what was skipped and why."""
    r = _open_repo(repo, "(prune)")
    what = f"repository {str(r.path)!r} (prune)"
    root = _cache_root(r, cache_dir)
    base = os.path.realpath(root.parent)
    ident = cache_id(root.parent, create=False)
    if not root.is_dir() or root.is_symlink():
        return PruneResult((), ())
    cutoff = time.time() - max_age_days * 86400.0
    removed: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    # Holding the metadata lock, no worktree of ours can be added meanwhile: the listing holds.
    with _metadata_lock(root):
        _forget_gone(r, root, what)
        registered = _registered_worktrees(r, what)
        entries = {p.name.split(".", 1)[0] for p in root.iterdir()}
        for entry in sorted(e for e in entries if _ENTRY_RE.match(e)):
            path = root / entry
            why = _not_ours(base, root, entry, ident)
            if why is not None:
                skipped.append((path, why))
                continue
            lock = root / f"{entry}.lock"
            with _locked(lock, blocking=False) as held:
                if not held:
                    skipped.append((path, "in use right now"))
                    continue
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
                _remove_entry(root, entry, lock)
                lock.unlink(missing_ok=True)  # still held: waiters see the inode change, retry
                removed.append(path)
    return PruneResult(tuple(removed), tuple(skipped))


@dataclass(frozen=True)
class CacheEntry:
    """One cached checkout, as `difftest cache list` shows it."""

    repo: str  # the repository it was checked out from ("?" when unknown)
    sha: str
    recipe: str
    path: Path
    built: bool
    last_used: float  # seconds since the epoch
    size_bytes: int


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def cache_repos(cache_dir: Path | None = None) -> dict[Path, str]:
    """Every repository folder in the cache, with the repository it belongs to."""
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    out: dict[Path, str] = {}
    if not base.is_dir():
        return out
    for folder in sorted(base.iterdir()):
        if folder.is_symlink() or not folder.is_dir():
            continue  # not ours
        note = _read_json(folder / "repo.json")
        if note is None:
            continue  # not ours
        out[folder] = str(note.get("repo", "?"))
    return out


def list_cache(cache_dir: Path | None = None) -> list[CacheEntry]:
    """Every entry difftest made in the cache, over all repositories."""
    entries: list[CacheEntry] = []
    for folder, repo in cache_repos(cache_dir).items():
        for path in sorted(folder.iterdir()):
            match = _ENTRY_RE.match(path.name)
            if match is None or not path.is_dir():
                continue
            entries.append(CacheEntry(
                repo=repo, sha=match.group(1), recipe=match.group(2), path=path,
                built=(folder / f"{path.name}.built").exists(),
                last_used=path.stat().st_mtime, size_bytes=_size(path)))
    return entries


def prune_cache(cache_dir: Path | None = None, *,
                max_age_days: float = STALE_AFTER_DAYS) -> PruneResult:
    """prune() for every repository folder difftest made in the cache; the entries of a
    repository that is gone are removed (their git metadata went with it), then the folder if
    nothing else is left in it. Nothing difftest did not make is touched: see `_not_ours`."""
    given = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    base = os.path.realpath(given)
    ident = cache_id(Path(base), create=False)
    removed: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    if not os.path.isdir(base):
        return PruneResult((), ())
    if ident is None:
        return PruneResult((), ((given, f"no {CACHE_MARKER} here: not a difftest cache, "
                                         "nothing removed"),))
    for folder in sorted(Path(base).iterdir()):
        done = _prune_folder(base, folder, ident, max_age_days)
        removed += done.removed
        skipped += done.skipped
    return PruneResult(tuple(removed), tuple(skipped))


def _prune_folder(base: str, folder: Path, ident: str, max_age_days: float) -> PruneResult:
    """One folder of the cache: pruned only if its repo.json carries this cache's id (a link
    is never followed, a stray file never read), by its repository's own prune while that
    repository is there, else as the folder of a repository that is gone."""
    if folder.is_symlink():
        return PruneResult((), ((folder, "is a symbolic link (never followed)"),))
    if not folder.is_dir():
        return PruneResult((), ())
    note = _read_json(folder / "repo.json")
    if note is None or note.get("cache_id") != ident:
        return PruneResult((), ((folder, "no repo.json with this cache's id: not made by "
                                         "difftest"),))
    repo = str(note.get("repo", "?"))
    if repo != "?" and Path(repo).is_dir():
        try:
            r = _open_repo(Path(repo), "(prune)")
        except (GitError, UsageError) as exc:
            return PruneResult((), ((folder, f"its repository {repo} cannot be read: {exc}"),))
        if r.key != folder.name:
            return PruneResult((), ((folder, f"repo.json names {repo}, whose cache folder is "
                                             f"{r.key}"),))
        return prune_repo(Path(repo), Path(base), max_age_days=max_age_days)
    return _prune_gone(base, folder, repo, ident)


def _prune_gone(base: str, folder: Path, repo: str, ident: str) -> PruneResult:
    """The folder of a repository that is gone: every entry difftest made removed (their git
    metadata went with the repository), then the folder, unless something that is not
    difftest's is left in it."""
    removed: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for entry in sorted(p.name for p in folder.iterdir() if _ENTRY_RE.match(p.name)):
        why = _not_ours(base, folder, entry, ident)
        if why is not None:
            skipped.append((folder / entry, why))
            continue
        _remove_entry(folder, entry, None)
        removed.append(folder / entry)
    left = [p for p in folder.iterdir()
            if p.name not in ("repo.json", "worktrees.lock") and not p.name.endswith(".lock")]
    if left:
        skipped.append((folder, f"repository {repo} is gone, but {len(left)} item(s) that "
                                "are not difftest's remain: folder kept"))
        return PruneResult(tuple(removed), tuple(skipped))
    for p in folder.iterdir():
        _remove_path(p)
    folder.rmdir()
    return PruneResult(tuple(removed), tuple(skipped))
