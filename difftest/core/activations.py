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

import dataclasses
import hashlib
import io
import math
import os
import re
from dataclasses import dataclass
from enum import Enum
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
# `localize --baseline`: a module is beyond its background when RMS |A - B| exceeds this many
# times RMS |A - B0|. Measured (scripts/localize_background.py, docs/localize.md): upstream of
# a planted fault B reproduces B0 to the bit (ratio 1 exactly), and the smallest planted fault
# moves its own module's ratio to 1.003; 1.001 sits between, a third of the way up.
BACKGROUND_FACTOR = 1.001
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
    path: Path | None = None  # the file it was read from, for messages


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
        out.append(Dump(int(m.group(1)), m.group(2), arr, path))
    if not out:
        raise UsageError(f"{folder}: no NNN-module.npy dumps")
    return out


class LocalizeOutcome(Enum):
    """What a walk over two captures (and a baseline's) found."""

    FIRST = "first"  # a first module named: beyond atol (its predecessor agreed), or beyond
    #                  its background by the factor (every module before it within theirs)
    AGREE = "agree"  # every module within atol
    WHOLE_MODEL = "whole-model"  # the first captured module already differs: no boundary to
    #                              name (a whole-model background, or a fault in that module)
    BACKGROUND = "background"  # every module within the factor of its background
    BASELINE_IS_B = "baseline-is-b"  # the baseline's capture is B's to the byte at every
    #                                   module: it measures no background apart from B (exit 3)


@dataclass(frozen=True)
class ModuleDiff:
    module: str
    shape: tuple[int, ...]
    max_abs_diff: float  # inf when a value is non-finite in one arm only (`abs_diff`)
    where: tuple[int, ...] | None  # index of the largest difference; None when none
    nonfinite: int = 0  # values non-finite in one arm only, or different non-finite values
    rms: float = 0.0  # root mean square of |A - B| over the module's output
    background: float | None = None  # the same of |A - B0| (None: no baseline)

    @property
    def ratio(self) -> float | None:
        """RMS |A - B| over RMS |A - B0|: scale-free, so one factor serves every module (a
        module bitwise equal in A and B0 has no background: any difference is infinitely
        beyond it). None without a baseline."""
        if self.background is None:
            return None
        if self.background > 0:
            return self.rms / self.background
        return math.inf if self.rms > 0 else 1.0


@dataclass(frozen=True)
class Localization:
    """Per module in forward order its max |A - B| (and, against a baseline B0, its RMS and
    that of |A - B0|), the outcome and the first module it names (None unless FIRST)."""

    modules: tuple[ModuleDiff, ...]
    first: ModuleDiff | None
    atol: float
    rows: tuple[int, ...] = ()  # first axis indices (block rows) where the first one differs
    outcome: LocalizeOutcome | None = None  # None: derived from `first` (FIRST or AGREE)
    factor: float | None = None  # against a baseline: how far beyond its background

    def __post_init__(self) -> None:
        if self.outcome is None:
            object.__setattr__(self, "outcome", LocalizeOutcome.AGREE if self.first is None
                               else LocalizeOutcome.FIRST)

    @property
    def start(self) -> ModuleDiff | None:
        """Where the difference starts: the first module named, or for WHOLE_MODEL the first
        captured one (named as where it starts, never as the cause)."""
        if self.outcome is LocalizeOutcome.WHOLE_MODEL:
            return self.modules[0]
        return self.first

    @property
    def differs(self) -> bool:
        """Whether a module differs beyond what the walk accepts (exit 1)."""
        return self.outcome in (LocalizeOutcome.FIRST, LocalizeOutcome.WHOLE_MODEL)

    def describe(self) -> str:
        first, mods = self.first, self.modules
        if self.outcome is LocalizeOutcome.BASELINE_IS_B:
            return (f"the baseline's capture is byte-identical to B's at every one of the "
                    f"{len(mods)} captured modules: it measures no background apart from B, so "
                    "nothing is localised against it. Either the baseline is B under another "
                    "name (a baseline must be a run that differs from B only by benign "
                    "numerics, e.g. another dtype), or B's change reaches no captured module "
                    "(localise without --baseline to see A against B)")
        if self.outcome is LocalizeOutcome.WHOLE_MODEL:
            over = sum(m.max_abs_diff > self.atol for m in mods)
            every = ("every captured module differs" if over == len(mods)
                     else f"{over} of {len(mods)} captured modules differ")
            return (f"{every} beyond {self.atol:g}, from the first one ({mods[0].module}, max "
                    f"|diff| {mods[0].max_abs_diff:.3g}) on: a difference of the whole model (a "
                    "dtype or kernel change looks like this, and so does a fault in that first "
                    "module); no module is named as the cause. Localise against a known-good arm "
                    "that differs from A only in the harmless change: --baseline ARM")
        if self.outcome is LocalizeOutcome.BACKGROUND:
            top = max(mods, key=lambda m: m.ratio or 0.0)
            return (f"every captured module is within {self.factor:g} x its background "
                    f"(RMS |A - B| over RMS |A - B0|; the largest, {top.ratio or 0.0:.4g}, at "
                    f"{top.module})")
        if first is None:
            return f"every captured module agrees within {self.atol:g}"
        at = mods.index(first)
        odd = f", {first.nonfinite} value(s) non-finite in one arm only" if first.nonfinite else ""
        where = (f"max |diff| {first.max_abs_diff:.3g}{odd} at index {list(first.where or ())}, "
                 f"rows {list(self.rows)}, shape {list(first.shape)}")
        if self.factor is not None:
            return (f"first module beyond its background: {first.module} (RMS |A - B| "
                    f"{first.rms:.3g} is {first.ratio:.4g} x its background RMS |A - B0| "
                    f"{first.background or 0.0:.3g}, factor {self.factor:g}; {where}); every "
                    "module before it within its background")
        before = mods[at - 1].module if at else "the input"
        return f"first differing module: {first.module} ({where}); {before} agreed"


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


def _same_modules(a: list[Dump], b: list[Dump], what: str = "the two captures") -> None:
    names_a = [d.module for d in a]
    names_b = [d.module for d in b]
    if names_a != names_b:
        raise UsageError(f"{what} list different modules: {names_a[:3]}... vs {names_b[:3]}...")
    for da, db in zip(a, b, strict=True):
        if da.array.shape != db.array.shape:
            raise UsageError(f"module {da.module}: shapes {da.array.shape} and {db.array.shape}")


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two dumps hold the same bytes (dtype, shape and every bit, nans included)."""
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _module_diff(da: Dump, db: Dump) -> tuple[ModuleDiff, np.ndarray]:
    d, odd = abs_diff(da.array, db.array)
    big = float(d.max()) if d.size else 0.0
    where = tuple(int(i) for i in np.unravel_index(int(d.argmax()), d.shape)) \
        if d.size and big > 0 else None
    with np.errstate(over="ignore"):  # an RMS beyond float64 is inf, said where it matters
        rms = float(np.sqrt(np.mean(np.square(d)))) if d.size else 0.0
    return ModuleDiff(da.module, tuple(da.array.shape), big, where, odd, rms), d


def _rows(over: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.flatnonzero(over.reshape(over.shape[0], -1).any(1))) \
        if over.ndim else ((0,) if bool(over) else ())


def first_divergence(a: list[Dump], b: list[Dump], atol: float = 0.0) -> Localization:
    """Walk both captures in forward order; the first module beyond `atol` is the answer (its
    predecessor in forward order agreed, or it would have been named). When the first captured
    module already differs nothing before it agreed: the outcome is WHOLE_MODEL, naming none
    (a bf16 draft against a float32 one differs from its embeddings on, wherever a fault is)."""
    _same_modules(a, b)
    diffs: list[ModuleDiff] = []
    first: ModuleDiff | None = None
    rows: tuple[int, ...] = ()
    for da, db in zip(a, b, strict=True):
        md, d = _module_diff(da, db)
        diffs.append(md)
        if first is None and md.max_abs_diff > atol:
            first, rows = md, _rows(d > atol)
    if first is not None and first is diffs[0]:
        return Localization(tuple(diffs), None, atol, rows, LocalizeOutcome.WHOLE_MODEL)
    return Localization(tuple(diffs), first, atol, rows)


def _finite_background(b0: list[Dump], backgrounds: list[ModuleDiff]) -> None:
    """Refuse a baseline whose background |A - B0| is not finite at some module: a value
    non-finite in B0 where A's is finite (or another non-finite value), or an RMS beyond
    float64. Such a background would excuse any difference of B there (its ratio 0 or nan), and
    judging B there without it would blame B for the baseline's values: neither localises."""
    bad = []
    for dump, back in zip(b0, backgrounds, strict=True):
        where = dump.path if dump.path is not None else dump.module
        if back.nonfinite:
            bad.append(f"{dump.module} ({where}: {back.nonfinite} value(s) non-finite in the "
                       "baseline or A but not alike in both)")
        elif not math.isfinite(back.rms):
            bad.append(f"{dump.module} ({where}: RMS |A - B0| is {back.rms}, beyond float64)")
    if bad:
        raise UsageError(f"the baseline's background |A - B0| is not finite at {len(bad)} "
                         f"module(s): {'; '.join(bad)}. A non-finite background cannot excuse a "
                         "difference; a known-good baseline is finite where A is: give one whose "
                         "capture is")


@dataclass(frozen=True)
class Departure:
    """Where B first departs from the baseline B0 (its first module not B0's to the byte), and
    the triangle A, B, B0 there: the RMS of each pair's difference."""

    module: str
    path: Path | None  # B's dump of that module, for messages
    a_b: float  # RMS |A - B|
    a_b0: float  # RMS |A - B0|: the background
    b_b0: float  # RMS |B - B0|: the change under test, where it starts

    @property
    def ratio(self) -> float:
        return self.a_b / self.a_b0 if self.a_b0 > 0 else math.inf

    @property
    def margin(self) -> float:
        """RMS |A - B| over the shorter of the other two sides: below 1, |A - B| is the
        shortest side of the triangle A, B, B0."""
        short = min(self.a_b0, self.b_b0)
        return self.a_b / short if short > 0 else math.inf

    @property
    def baseline_apart(self) -> bool:
        """Whether |A - B| is the shortest side: B sits by A and the baseline apart from both,
        so B lacks the baseline's difference from A. A change under test independent of the
        background adds to it (|A - B|^2 ~ |A - B0|^2 + |B - B0|^2); making |A - B| the
        shortest side takes one correlated with the background by more than 1/2, i.e. one
        that undoes the harmless change rather than adding to it."""
        return self.margin < 1


def departure(a: list[Dump], b: list[Dump], b0: list[Dump]) -> Departure | None:
    """The first module, in forward order, whose output in B is not B0's to the byte (None: B is
    B0 at every module). Where the baseline is B's background (B and B0 compute alike up to the
    change under test), that is where the change starts: a fresh perturbation there, not yet
    mixed with anything downstream."""
    for da, db, d0 in zip(a, b, b0, strict=True):
        if not _same_bytes(db.array, d0.array):
            return Departure(da.module, db.path, _module_diff(da, db)[0].rms,
                             _module_diff(da, d0)[0].rms, _module_diff(db, d0)[0].rms)
    return None


def _tracks_b(start: Departure | None) -> None:
    """Refuse a baseline that is no background for B: where B first departs from it, |A - B| is
    the shortest side of the triangle A, B, B0 (B sits by A, the baseline apart from both: another
    model, input or setting than B's). Against it, every module of B would look within its
    background (ratios far below 1), whatever B computed."""
    if start is None or not start.baseline_apart:
        return
    where = start.module if start.path is None else f"{start.module} ({start.path})"
    raise UsageError(
        f"the baseline is no background for B: where B first departs from it, at {where}, B is "
        f"nearer to A (RMS |A - B| {start.a_b:.3g}) than the baseline is to either (RMS |A - B0| "
        f"{start.a_b0:.3g}, RMS |B - B0| {start.b_b0:.3g}): B lacks the baseline's difference "
        "from A, so the baseline computes something B does not (another model, input or "
        "setting), not the harmless change B carries. A background differs from A only in the "
        "harmless change and computes as B does up to the change under test: give one that does")


def against_background(a: list[Dump], b: list[Dump], b0: list[Dump], factor: float,
                       atol: float = 0.0) -> Localization:
    """Walk A, B and a baseline B0 (a known-good arm that differs from A only in the harmless
    change) in forward order: the first module whose RMS |A - B| exceeds `factor` times its own
    background, RMS |A - B0|, is the answer; every module before it was within its background.
    `atol` is kept for the record (the figure's line)."""
    _same_modules(a, b)
    _same_modules(a, b0, "the capture of A and the baseline's")
    if all(_same_bytes(db.array, d0.array) for db, d0 in zip(b, b0, strict=True)):
        # B's own capture again: its background is |A - B| itself, which would excuse
        # every module whatever B computed
        same = (_module_diff(da, db)[0] for da, db in zip(a, b, strict=True))
        return Localization(tuple(dataclasses.replace(m, background=m.rms) for m in same),
                            None, atol, (), LocalizeOutcome.BASELINE_IS_B, factor)
    backgrounds = [_module_diff(da, d0) for da, d0 in zip(a, b0, strict=True)]
    _finite_background(b0, [back for back, _ in backgrounds])
    _tracks_b(departure(a, b, b0))
    diffs: list[ModuleDiff] = []
    first: ModuleDiff | None = None
    rows: tuple[int, ...] = ()
    for da, db, (back, e) in zip(a, b, backgrounds, strict=True):
        md, d = _module_diff(da, db)
        md = dataclasses.replace(md, background=back.rms)
        diffs.append(md)
        if first is None and (md.ratio or 0.0) > factor:
            first = md
            if d.ndim:  # the rows whose own RMS is beyond their background's
                flat, flat0 = d.reshape(d.shape[0], -1), e.reshape(e.shape[0], -1)
                rb = np.sqrt(np.mean(np.square(flat), axis=1))
                r0 = np.sqrt(np.mean(np.square(flat0), axis=1))
                rows = _rows(rb > factor * r0)
    return Localization(tuple(diffs), first, atol, rows,
                        LocalizeOutcome.BACKGROUND if first is None else LocalizeOutcome.FIRST,
                        factor)
