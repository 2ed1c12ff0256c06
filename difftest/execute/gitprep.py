"""Where an arm runs: its own working directory (and that tree's HEAD), or a checkout of its
`git_ref` prepared (and built) by `difftest.execute.worktree`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from difftest.config import ArmSpec
from difftest.core.errors import ArmFailedError, BuildError, DifftestError
from difftest.core.gitinfo import git_head, git_toplevel


@dataclass(frozen=True)
class Placement:
    """Where and at what commit an arm runs, or why it cannot."""

    cwd: Path
    git_sha: str | None = None
    build_log: str | None = None
    error: str | None = None
    dirty: bool | None = None
    warning: str | None = None


def local_placement(spec: ArmSpec, heads: dict[Path, str | None]) -> Placement:
    """An arm without git_ref runs in its cwd; its sha is that tree's HEAD (looked up once)."""
    cwd = Path(spec.cwd) if spec.cwd is not None else Path.cwd()
    if not cwd.is_absolute():
        cwd = Path.cwd() / cwd
    if cwd not in heads:
        heads[cwd] = git_head(cwd)
    return Placement(cwd=cwd, git_sha=heads[cwd])


def git_placement(spec: ArmSpec, cache_dir: Path | None) -> Placement:
    """Check the arm's ref out (and build it) in the cache; failures become the arm's error."""
    from difftest.execute import worktree

    cwd = Path.cwd()
    repo = Path(spec.repo) if spec.repo is not None else (git_toplevel(cwd) or cwd)
    try:
        checkout = worktree.checkout_for(repo, spec.git_ref or "", spec.build,
                                         cache_dir=cache_dir, env={**os.environ, **spec.env},
                                         build_env=spec.env, timeout_s=spec.timeout_s)
    except DifftestError as exc:
        text = str(exc)
        if isinstance(exc, ArmFailedError):
            # worktree names the ref as the "arm"; the arm's own name is added by failure().
            text = text.removeprefix(f"arm {exc.arm!r}: ")
        log = exc.log_path if isinstance(exc, BuildError) else None
        return Placement(cwd=cwd, error=f"git ref {spec.git_ref!r}: {text}",
                         build_log=str(log) if log else None)
    except OSError as exc:
        return Placement(cwd=cwd, error=f"cannot prepare the checkout of {spec.git_ref!r}: {exc}")
    warning = None
    if checkout.dirty:
        warning = (f"git_ref {spec.git_ref!r}: the working tree has uncommitted changes to "
                   "tracked files; they are not tested (use git_ref = \"WORKTREE\" to test them)")
    return Placement(cwd=Path(checkout.path) / (spec.cwd or ""), git_sha=checkout.sha,
                     build_log=str(checkout.build_log) if checkout.build_log else None,
                     dirty=checkout.dirty, warning=warning)
