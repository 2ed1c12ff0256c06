"""The one place that asks git where a working tree's top is and what it has checked out.

A leaf module (it imports nothing of difftest) so the config loader and the arm runner share it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def _git_line(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                             timeout=10, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and text else None


def git_head(cwd: Path) -> str | None:
    """The sha checked out in cwd's repository, None outside one."""
    return _git_line(cwd, "rev-parse", "--verify", "-q", "HEAD")


def git_toplevel(cwd: Path) -> Path | None:
    """The top of the working tree holding cwd, None outside one."""
    top = _git_line(cwd, "rev-parse", "--show-toplevel")
    return Path(top) if top else None
