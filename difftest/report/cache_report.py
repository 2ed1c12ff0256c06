"""`difftest cache list` as a table (one row per cached checkout), and what `cache prune` did."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from difftest.execute.worktree import CacheEntry, PruneResult


def render_table(entries: Sequence[CacheEntry], where: Path) -> str:
    """Repository, commit, build recipe, built or not, size and last use of each checkout."""
    from tabulate import tabulate

    if not entries:
        return f"no cached checkouts in {where}"
    rows = [(e.repo, e.sha[:12], e.recipe, "yes" if e.built else "no",
             f"{e.size_bytes / 1e6:.1f} MB",
             time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)), str(e.path))
            for e in entries]
    return str(tabulate(rows, headers=["repository", "commit", "recipe", "built", "size",
                                       "last used", "path"]))


def render_pruned(done: PruneResult) -> str:
    """Each checkout removed, each skipped with why, then the counts."""
    return "\n".join([*(f"removed {path}" for path in done.removed),
                      *(f"skipped {path}: {why}" for path, why in done.skipped),
                      f"{len(done.removed)} checkout(s) removed, {len(done.skipped)} skipped"])
