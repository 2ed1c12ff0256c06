"""Activation capture at one step, and finding the first module whose output differs.

A runner asked for `DIFFTEST_CAPTURE=REQ:POS` hands, at that verify step only, each draft-forward
module's output in forward order to `Tracer.activation` (or `capture_line` + `save_dump`): one
`[spec-act]` summary line per module on the trace stream, and the tensor as `.npy` in
`DIFFTEST_CAPTURE_DIR` (bounded in size). `first_divergence` reads two such folders and names
the first module, in forward order, whose output differs beyond a tolerance while the module
before it agreed.

numpy only; runners convert their tensors to float32 numpy arrays first.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from difftest.core.atomic import write_bytes_atomic
from difftest.core.errors import UsageError

CAPTURE_ENV = "DIFFTEST_CAPTURE"
CAPTURE_DIR_ENV = "DIFFTEST_CAPTURE_DIR"
ACT_TAG = "[spec-act]"
MAX_DUMP_BYTES = 64 << 20  # per capture folder; past it a module's line says file=-
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_FILE_RE = re.compile(r"(\d{3})-([A-Za-z_][A-Za-z0-9_.]*)\.npy\Z")


def parse_at(text: str) -> tuple[str, int]:
    """`REQ:POS` (the verify step whose draft forward is captured)."""
    req, sep, pos = text.strip().rpartition(":")
    if not sep or not req or not pos.isdigit():
        raise UsageError(f"{CAPTURE_ENV}={text!r}: expected REQ:POS, e.g. r0:13")
    return req, int(pos)


def digest(arr: np.ndarray) -> str:
    """16 hex digits of the SHA-256 of the float32 bytes: equal hashes, bitwise equal tensors."""
    data = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
    return hashlib.sha256(data).hexdigest()[:16]


def capture_line(req: str, pos: int, index: int, module: str, arr: np.ndarray) -> str:
    """`[spec-act] req=%s pos=%d n=%d module=%s shape=AxB hash=%s absmax=%.9g sum=%.9g`."""
    if not _NAME_RE.match(module):
        raise ValueError(f"module name {module!r}: letters, digits, '_' and '.' only")
    a = np.asarray(arr, dtype=np.float32)
    shape = "x".join(str(d) for d in a.shape) or "1"
    absmax = float(np.abs(a).max()) if a.size else 0.0
    total = float(a.astype(np.float64).sum())
    return (f"{ACT_TAG} req={req} pos={pos} n={index} module={module} shape={shape} "
            f"hash={digest(a)} absmax={absmax:.9g} sum={total:.9g}")


def save_dump(folder: Path, index: int, module: str, arr: np.ndarray, used: int) -> int:
    """Write `NNN-module.npy` unless it would take the folder past MAX_DUMP_BYTES; returns the
    bytes used after (unchanged when skipped)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr, dtype=np.float32))
    data = buf.getvalue()
    if used + len(data) > MAX_DUMP_BYTES:
        return used
    folder.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(folder / f"{index:03d}-{module}.npy", data)
    return used + len(data)


@dataclass(frozen=True)
class Dump:
    index: int
    module: str
    array: np.ndarray


def read_dumps(folder: Path) -> list[Dump]:
    """A capture folder's tensors in forward order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a capture folder")
    out = []
    for path in sorted(folder.iterdir()):
        m = _FILE_RE.match(path.name)
        if m is None:
            continue
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not a readable .npy ({exc})") from None
        out.append(Dump(int(m.group(1)), m.group(2), arr))
    if not out:
        raise UsageError(f"{folder}: no NNN-module.npy dumps")
    return out


@dataclass(frozen=True)
class ModuleDiff:
    module: str
    shape: tuple[int, ...]
    max_abs_diff: float
    where: tuple[int, ...] | None  # index of the largest difference; None when none


@dataclass(frozen=True)
class Localization:
    """Per module in forward order its max |A - B|, and the first beyond `atol` (None: all agree)."""

    modules: tuple[ModuleDiff, ...]
    first: ModuleDiff | None
    atol: float
    rows: tuple[int, ...] = ()  # first axis indices (block rows) where the first one differs

    def describe(self) -> str:
        if self.first is None:
            return f"every captured module agrees within {self.atol:g}"
        before = self.modules[self.modules.index(self.first) - 1].module \
            if self.modules.index(self.first) else "the input"
        return (f"first differing module: {self.first.module} (max |diff| "
                f"{self.first.max_abs_diff:.3g} at index {list(self.first.where or ())}, rows "
                f"{list(self.rows)}, shape {list(self.first.shape)}); {before} agreed")


def first_divergence(a: list[Dump], b: list[Dump], atol: float = 0.0) -> Localization:
    """Walk both captures in forward order; the first module beyond `atol` is the answer (its
    predecessor in forward order agreed, or it would have been named)."""
    names_a = [d.module for d in a]
    names_b = [d.module for d in b]
    if names_a != names_b:
        raise UsageError("the two captures list different modules: "
                         f"{names_a[:3]}... vs {names_b[:3]}...")
    diffs: list[ModuleDiff] = []
    first: ModuleDiff | None = None
    rows: tuple[int, ...] = ()
    for da, db in zip(a, b, strict=True):
        if da.array.shape != db.array.shape:
            raise UsageError(f"module {da.module}: shapes {da.array.shape} and {db.array.shape}")
        d = np.abs(da.array.astype(np.float64) - db.array.astype(np.float64))
        big = float(d.max()) if d.size else 0.0
        where = tuple(int(i) for i in np.unravel_index(int(d.argmax()), d.shape)) \
            if d.size and big > 0 else None
        md = ModuleDiff(da.module, tuple(da.array.shape), big, where)
        diffs.append(md)
        if first is None and big > atol:
            first = md
            over = d > atol
            rows = tuple(int(i) for i in np.flatnonzero(over.reshape(over.shape[0], -1).any(1)))
    return Localization(tuple(diffs), first, atol, rows)
