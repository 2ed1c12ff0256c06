"""The one process-group killer: every child difftest starts leads its own group, and ending it
means TERM to the whole group, a grace period, then KILL to whatever is left.
"""

from __future__ import annotations

import os
import signal
import time

KILL_GRACE_S = 2.0
POLL_S = 0.02


def signal_group(pgid: int, sig: int) -> bool:
    """Send sig to the group; False when nobody in it could receive it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Is any process left in the group (a zombie waiting for init counts, briefly)?"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone is there, we just may not signal it
    return True


def end_group(pgid: int, grace_s: float = KILL_GRACE_S) -> bool:
    """TERM the group, wait up to grace_s for it to empty, then KILL; True when it emptied."""
    if not signal_group(pgid, signal.SIGTERM):
        return True
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(POLL_S)
    signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(POLL_S)
    return not group_alive(pgid)


def processes_with_env(marker: bytes) -> list[int]:
    """Pids of our user's processes whose environment holds `marker` (e.g. b"K=V").

    An arm's daemon that called setsid() has left its process group, but not the environment it
    was started with: that is how we find it.
    """
    found: list[int] = []
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                found.append(int(entry))
    return sorted(found)
