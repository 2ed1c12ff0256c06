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
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from difftest.core.atomic import write_bytes_atomic
from difftest.core.errors import UsageError

CAPTURE_ENV = "DIFFTEST_CAPTURE"
CAPTURE_DIR_ENV = "DIFFTEST_CAPTURE_DIR"
ACT_TAG = "[spec-act]"
MAX_DUMP_BYTES = 64 << 20  # per capture folder; past it a module's line says file=-
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_FILE_RE = re.compile(r"(\d{3})-([A-Za-z_][A-Za-z0-9_.]*)\.npy\Z")
_REAL_KINDS = "fiu"  # numpy dtype kinds a dump may hold: float, signed and unsigned int


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


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """An .npy file's shape and dtype, checked against the file before anything is allocated:
    a real numeric dtype (a complex or object dump has no |A - B| localize can rank), and a
    shape whose bytes are the bytes the file holds (a header claiming 100 G elements in a
    200-byte file is refused here, not met as a MemoryError in np.load)."""
    from numpy.lib import format as npy

    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    with open(path, "rb") as fh:
        version = npy.read_magic(fh)
        if version not in readers:
            raise ValueError(f".npy format version {version[0]}.{version[1]}; dumps are 1.0 "
                             "or 2.0")
        shape, _, dtype = readers[version](fh)
        held = os.fstat(fh.fileno()).st_size - fh.tell()
    if dtype.hasobject or dtype.kind not in _REAL_KINDS:
        raise UsageError(f"{path}: dtype {dtype}: a dump holds real numbers (float, int); "
                         "a complex or other dtype has no |A - B| to localise by")
    need = math.prod(shape) * dtype.itemsize
    if need != held:
        raise UsageError(f"{path}: its header says shape {list(shape)} of {dtype} "
                         f"({need} bytes), the file holds {held} bytes after the header: "
                         "truncated or not a dump")
    return tuple(int(d) for d in shape), dtype


def read_dumps(folder: Path) -> list[Dump]:
    """A capture folder's tensors in forward order; each file's header is checked against its
    size and dtype before it is read (`_npy_header`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a capture folder")
    out = []
    for path in sorted(folder.iterdir()):
        m = _FILE_RE.match(path.name)
        if m is None:
            continue
        if not path.is_file():
            raise UsageError(f"{path}: not a regular file; a dump is an .npy file")
        try:
            _npy_header(path)
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise UsageError(f"{path}: not a readable .npy ({exc})") from None
        out.append(Dump(int(m.group(1)), m.group(2), arr))
    if not out:
        raise UsageError(f"{folder}: no NNN-module.npy dumps")
    return out


@dataclass(frozen=True)
class ModuleDiff:
    module: str
    shape: tuple[int, ...]
    max_abs_diff: float  # inf when a value is non-finite in one arm only (`abs_diff`)
    where: tuple[int, ...] | None  # index of the largest difference; None when none
    nonfinite: int = 0  # values non-finite in one arm only, or different non-finite values


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
        odd = (f", {self.first.nonfinite} value(s) non-finite in one arm only"
               if self.first.nonfinite else "")
        return (f"first differing module: {self.first.module} (max |diff| "
                f"{self.first.max_abs_diff:.3g}{odd} at index {list(self.first.where or ())}, rows "
                f"{list(self.rows)}, shape {list(self.first.shape)}); {before} agreed")


def abs_diff(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """|A - B| in float64, as `compare` takes non-finite values: the same non-finite value in
    both arms (equal infinities, two nans) is no difference, a non-finite value in one arm only
    (or two different ones) is an infinite one; and how many such values there are."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(x) & np.isfinite(y)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(x - y)
    if finite.all():
        return d, 0
    odd = ~finite & ~((x == y) | (np.isnan(x) & np.isnan(y)))
    d[~finite] = 0.0
    d[odd] = np.inf
    return d, int(odd.sum())


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
        d, odd = abs_diff(da.array, db.array)
        big = float(d.max()) if d.size else 0.0
        where = tuple(int(i) for i in np.unravel_index(int(d.argmax()), d.shape)) \
            if d.size and big > 0 else None
        md = ModuleDiff(da.module, tuple(da.array.shape), big, where, odd)
        diffs.append(md)
        if first is None and big > atol:
            first = md
            over = d > atol
            rows = tuple(int(i) for i in np.flatnonzero(over.reshape(over.shape[0], -1).any(1)))
    return Localization(tuple(diffs), first, atol, rows)
