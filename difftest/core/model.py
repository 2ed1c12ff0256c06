"""The parsed trace of one arm: plain dataclasses over numpy arrays.

Variable-length id lists (drafts, emits, propose `first`) are stored flat with an offsets array
(`ids[off[i]:off[i+1]]` belongs to event i), so a trace with millions of ids holds no per-token
Python objects. Request ids are interned: `requests[code]` is the name, arrays hold the code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from difftest.core.kinds import DraftingKind as DraftingKind  # declared by a trace; re-exported
from difftest.core.kinds import FindingKind as FindingKind


def ragged(ids: np.ndarray, offsets: np.ndarray, i: int) -> np.ndarray:
    """The i-th list of a flat (ids, offsets) pair."""
    return ids[offsets[i]:offsets[i + 1]]


@dataclass(frozen=True)
class Finding:
    """An invariant violation or a notable event, with the line that showed it."""

    path: str
    line: int
    kind: FindingKind
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"

    def to_json(self) -> dict[str, object]:
        """The form `audit` and `compare` reports give a finding."""
        return {"line": self.line, "kind": self.kind.value, "message": self.message}


@dataclass(frozen=True)
class Verifies:
    """One `[SPECTRACE]` line each: a verify of one request's drafted block.

    A verify with `k == 0` (an empty draft list, `ns == 1`) drafted nothing: it carries one
    emitted token of the stream but is not a drafted block."""

    req: np.ndarray  # int32 request code
    pos: np.ndarray  # int64
    k: np.ndarray  # int32
    ns: np.ndarray  # int32
    acc: np.ndarray  # int32
    draft_ids: np.ndarray  # int32, flat
    draft_off: np.ndarray  # int64, len n+1
    emit_ids: np.ndarray  # int32, flat
    emit_off: np.ndarray  # int64, len n+1
    line: np.ndarray  # int64 source line number (1-based)

    def __len__(self) -> int:
        return int(self.req.shape[0])

    def draft(self, i: int) -> np.ndarray:
        return ragged(self.draft_ids, self.draft_off, i)

    def emit(self, i: int) -> np.ndarray:
        return ragged(self.emit_ids, self.emit_off, i)


@dataclass(frozen=True)
class Proposes:
    """One `[spec-propose]` line each. `rows == 0` marks the `NO proposing rows` form."""

    rows: np.ndarray  # int32 (0 for the NO-proposing form)
    nqpr: np.ndarray  # int32 (-1 for the NO-proposing form)
    k: np.ndarray  # int32 drafts/row (-1 for the NO-proposing form)
    num_reqs: np.ndarray  # int32 (only for the NO-proposing form, else -1)
    first_ids: np.ndarray  # int32, flat
    first_off: np.ndarray  # int64, len n+1
    line: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def first(self, i: int) -> np.ndarray:
        return ragged(self.first_ids, self.first_off, i)

    @property
    def proposing(self) -> np.ndarray:
        """Mask of the steps that proposed something."""
        return self.rows > 0


_ROW_BLOCK = 1 << 14  # rows per pass of LogitRows' per-row reductions


@dataclass(frozen=True)
class LogitRows:
    """One `[spec-logits]` line each: top-K raw logits of one sampled block row.

    `top_ids`/`top_vals` are (n, K) with K the widest row seen; shorter rows are padded with
    id -1 and value nan, and `width` says how many entries each row really has. `top_vals` holds
    exactly what was printed, read as float64. `sig_digits` is the largest number of significant
    mantissa digits among the row's printed finite values (`2.87758` and `1.23457e+01` -> 6,
    `5.5` -> 2, `0` -> 1; 0 when none is finite): the longest over an arm's rows is a lower bound
    on the digits its format printed, from which a value's print resolution follows.
    """

    req: np.ndarray  # int32 request code
    pos: np.ndarray  # int64
    row: np.ndarray  # int32 (1..k)
    top_ids: np.ndarray  # int32 (n, K)
    top_vals: np.ndarray  # float64 (n, K)
    width: np.ndarray  # int32 (n,)
    line: np.ndarray  # int64
    sig_digits: np.ndarray  # int8 (n,)

    def __len__(self) -> int:
        return int(self.req.shape[0])

    @property
    def margins(self) -> np.ndarray:
        """Top-1 minus top-2 per row (nan where a row has fewer than two finite entries)."""
        if len(self) == 0 or self.top_vals.shape[1] < 2:
            return np.full(len(self), np.nan)
        with np.errstate(invalid="ignore"):
            m = self.top_vals[:, 0] - self.top_vals[:, 1]
        m[self.width < 2] = np.nan
        return np.asarray(m, dtype=np.float64)

    @cached_property
    def magnitudes(self) -> np.ndarray:
        """Per row: the largest |value| among its listed finite values (0 where it lists none).
        What the resolution of any set of rows is read from (`resolution`'s `magnitudes`):
        taken once per trace, a block of rows at a time."""
        n, k = self.top_vals.shape
        out = np.zeros(n)
        columns = np.arange(k)
        for start in range(0, n, _ROW_BLOCK):  # a block of rows: its temporaries stay small
            at = slice(start, start + _ROW_BLOCK)
            mag = np.abs(self.top_vals[at])
            keep = np.isfinite(mag)
            keep &= columns < self.width[at, None]
            mag = np.where(keep, mag, 0.0)
            block = out[at]
            for j in range(k):
                np.maximum(block, mag[:, j], out=block)
        return out

    @property
    def finite(self) -> np.ndarray:
        """Mask of rows whose listed values are all finite."""
        if len(self) == 0:
            return np.ones(0, dtype=bool)
        n, k = self.top_vals.shape
        out = np.ones(n, dtype=bool)
        columns = np.arange(k)
        for start in range(0, n, _ROW_BLOCK):  # a block of rows, a column of it at a time
            at = slice(start, start + _ROW_BLOCK)
            ok = np.isfinite(self.top_vals[at])
            ok |= columns >= self.width[at, None]
            block = out[at]
            for j in range(k):
                block &= ok[:, j]
        return out


@dataclass(frozen=True)
class Phases:
    """`[spec-phase]` (level 1) and `[spec-phase-dev]` (level 2) wall-clock segments, in ms."""

    pre: np.ndarray
    backbone: np.ndarray
    sample: np.ndarray
    logits: np.ndarray  # int64 element count
    line: np.ndarray
    dev_pre: np.ndarray
    dev_fwd: np.ndarray
    dev_select: np.ndarray
    dev_walk: np.ndarray
    dev_line: np.ndarray


@dataclass(frozen=True)
class Route:
    """A `[dflash-route]` line: which attention lane ran (`combined` counts the materialized one)."""

    line: int
    counters: dict[str, int]


@dataclass(frozen=True)
class SpecConfig:
    """What `[spec-config]` lines said the runner applied: key -> value, and the line each key
    was first given on (empty when the trace has no such line)."""

    values: Mapping[str, str] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SpecCoverage:
    """What a `[spec-coverage]` line said a run exercised (docs/trace-format.md): counters by
    key, and steps per verify width; `line` is where the trace said it (0: no such line)."""

    counts: Mapping[str, int] = field(default_factory=dict)
    widths: tuple[tuple[int, int], ...] = ()
    line: int = 0

    @property
    def present(self) -> bool:
        return self.line > 0

    def count(self, key: str) -> int:
        """A counter (`widths`: how many different widths), 0 when the runner did not print it."""
        if key == "widths":
            return sum(1 for _, n in self.widths if n > 0)
        return int(self.counts.get(key, 0))


@dataclass(frozen=True)
class Notice:
    """A request that outgrew the draft speculative context and stopped speculating."""

    line: int
    req: str
    text: str


@dataclass(frozen=True)
class ArmTrace:
    """Everything one arm's trace said, in the order of the data flow's first stage."""

    path: str
    requests: tuple[str, ...]
    verifies: Verifies
    proposes: Proposes
    logits: LogitRows
    phases: Phases
    routes: tuple[Route, ...] = ()
    notices: tuple[Notice, ...] = ()
    findings: tuple[Finding, ...] = ()
    lines_total: int = 0
    lines_skipped: int = 0  # other program output, counted and skipped
    # a line holds a `[spec-forced]` tag, wherever in the line and whatever the line is read as
    # (a teacher-forced arm's commits; read by difftest.core.force): the arm's trace shows
    # forcing (difftest.flow.roles)
    forced_lines: bool = False
    engine_errors: tuple[Finding, ...] = ()  # `vt: ...` failure lines
    truncated: bool = False
    drafting: DraftingKind | None = None  # from a `[spec-drafting]` header; None when absent
    config: SpecConfig = SpecConfig()  # from `[spec-config]` lines
    coverage: SpecCoverage = SpecCoverage()  # from the `[spec-coverage]` line

    @property
    def level(self) -> int:
        """The trace level the lines show: 3 with logits, 2 with device phases, else 1 (0: none)."""
        if len(self.logits):
            return 3
        if len(self.phases.dev_line):
            return 2
        if len(self.verifies) or len(self.proposes) or len(self.phases.line):
            return 1
        return 0

    def request_code(self, name: str) -> int | None:
        try:
            return self.requests.index(name)
        except ValueError:
            return None

    @property
    def has_drafts(self) -> bool:
        """True when the arm drafted at least one id (in a verify or a propose line)."""
        return bool(self.verifies.draft_ids.size or self.proposes.first_ids.size)


def same_drafts(a: ArmTrace, b: ArmTrace) -> bool:
    """Whether two traces say the same thing about drafting: the same requests, verifies,
    proposals and (bit for bit, nan equal to nan) block logits. Line numbers, timings and other
    program output are left out: they move between runs of identical code."""
    if a.requests != b.requests:
        return False
    va, vb = a.verifies, b.verifies
    pa, pb = a.proposes, b.proposes
    la, lb = a.logits, b.logits
    pairs = ((va.req, vb.req), (va.pos, vb.pos), (va.k, vb.k), (va.ns, vb.ns),
             (va.draft_ids, vb.draft_ids), (va.draft_off, vb.draft_off),
             (va.emit_ids, vb.emit_ids), (va.emit_off, vb.emit_off),
             (pa.rows, pb.rows), (pa.k, pb.k), (pa.first_ids, pb.first_ids),
             (pa.first_off, pb.first_off), (la.req, lb.req), (la.pos, lb.pos),
             (la.row, lb.row), (la.top_ids, lb.top_ids), (la.width, lb.width))
    if not all(np.array_equal(x, y) for x, y in pairs):
        return False
    return bool(np.array_equal(la.top_vals, lb.top_vals, equal_nan=True))


def same_reading(a: ArmTrace, b: ArmTrace) -> bool:
    """Whether two traces say the same thing in every line difftest reads: the drafts and block
    logits (`same_drafts`), what `[spec-config]`, `[dflash-route]` and `[spec-coverage]`
    state, and the drafting header. Line numbers, timings and other program output are left
    out: they do not show which configuration ran."""
    return (same_drafts(a, b) and dict(a.config.values) == dict(b.config.values)
            and [r.counters for r in a.routes] == [r.counters for r in b.routes]
            and dict(a.coverage.counts) == dict(b.coverage.counts)
            and a.coverage.widths == b.coverage.widths and a.drafting == b.drafting)
