"""The line of commits a bisect walks: the first-parent history from the good end to the bad
end, with each commit's subject, and the diff stat of what is finally named."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from difftest.core.errors import GitError, UsageError
from difftest.execute.worktree import _clean_env, resolve_ref

_SEP = "\x1f"


@dataclass(frozen=True)
class Commit:
    """One commit of the line, by its position (0 is the good end)."""

    index: int
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


def _git(repo: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=_clean_env(), check=False)
    except OSError as exc:
        raise GitError(f"repository {str(repo)!r}: cannot run git: {exc}") from None
    if proc.returncode != 0:
        detail = proc.stderr.strip() or f"exit code {proc.returncode}"
        raise GitError(f"repository {str(repo)!r}: git {' '.join(args)} failed: {detail}")
    return proc.stdout


def commit_line(repo: Path, good: str, bad: str) -> list[Commit]:
    """The good end, then every first-parent commit up to the bad end, oldest first."""
    good_sha, bad_sha = resolve_ref(repo, good), resolve_ref(repo, bad)
    if good_sha == bad_sha:
        raise UsageError(f"--good {good!r} and --bad {bad!r} name the same commit "
                         f"{good_sha[:10]}: there is nothing between them to search")
    proc = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good_sha,
                           bad_sha], capture_output=True, env=_clean_env(), check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise UsageError(f"--good {good!r} ({good_sha[:10]}) is not an ancestor of --bad "
                         f"{bad!r} ({bad_sha[:10]}): a bisect walks from an older good commit "
                         "to a newer bad one")
    out = _git(repo, "log", "--first-parent", "--reverse", f"--format=%H{_SEP}%P{_SEP}%s",
               f"{good_sha}..{bad_sha}")
    rows = [line.split(_SEP, 2) for line in out.splitlines() if line]
    if not rows or (rows[0][1].split() or [""])[0] != good_sha:
        raise UsageError(f"--good {good!r} ({good_sha[:10]}) is not on the first-parent "
                         f"history of --bad {bad!r}: name a commit of that line as the good "
                         "end (a merge commit, not a commit of the merged branch)")
    head = _git(repo, "log", "-1", "--format=%s", good_sha).rstrip("\n")
    line = [Commit(0, good_sha, head)]
    line += [Commit(i, sha, subject) for i, (sha, _parents, subject) in enumerate(rows, 1)]
    return line


def diff_stat(repo: Path, old: str, new: str) -> str:
    """`git diff --stat old new`: what the named commit (or range) changed."""
    return _git(repo, "diff", "--stat", old, new).rstrip("\n")
