"""Run directories and the file names arms get inside them."""

from __future__ import annotations

import errno
import re
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from difftest.core.errors import UsageError
from difftest.execute.records import META_NAME

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
MAX_STEM = 100  # file names stay far below NAME_MAX (255) with any suffix added


def safe_name(name: str) -> str:
    """A file-name form of an arm name: only [A-Za-z0-9._+-], never empty or a dot name."""
    return _UNSAFE.sub("_", name).strip(".")[:MAX_STEM].strip(".") or "arm"


def capture_stems(names: Iterable[str]) -> list[str]:
    """One distinct file stem per arm (case-insensitively, for case-folding filesystems)."""
    taken: set[str] = set()
    out: list[str] = []
    for name in names:
        stem = safe_name(name)
        base, n = stem, 2
        while stem.lower() in taken or stem == Path(META_NAME).stem:
            stem, n = f"{base}-{n}", n + 1
        taken.add(stem.lower())
        out.append(stem)
    return out


def _root_problem(root: Path, exc: OSError) -> UsageError:
    if root.is_symlink() and not root.exists():
        why = "is a dangling symbolic link"
    elif root.exists() and not root.is_dir():
        why = "is not a directory"
    elif exc.errno == errno.ENOSPC:
        why = "the disk is full"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "is not writable"
    else:
        why = exc.strerror or str(exc)
    for parent in root.parents:
        if parent.exists() and not parent.is_dir():
            why = f"{parent} is not a directory"
            break
    return UsageError(f"run root {root}: cannot create a run directory there: {why} "
                      "(use --run-root DIR)")


def new_run_dir(root: Path | None = None, label: str = "") -> Path:
    """A fresh run directory; the random suffix keeps two runs in the same second apart."""
    root = Path(root) if root is not None else Path("traces") / "runs"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _root_problem(root, exc) from None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    suffix = f"-{safe_name(label)}" if label else ""
    for _ in range(100):
        path = root / f"{stamp}-{secrets.token_hex(3)}{suffix}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise _root_problem(root, exc) from None
        return path
    raise UsageError(f"cannot create a run directory under {root}")
