"""Token and logit differences of aligned blocks, with each flip explained by its margin.

A flip where both arms' top-1/top-2 margins are below `near_tie` is a near-tie: a perturbation
that small could move the argmax of a healthy runner too, so it is reported but does not fail a
`same` comparison. Every other flip is a hard `differ`. Logits are compared on the ids both top
lists share; with `atol = 0` the comparison is bitwise and a changed top list counts as well.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import numpy as np

from difftest.audit import DraftedBlocks
from difftest.align import Alignment, CoverageGap, EmitDivergence, align
from difftest.errors import UsageError
from difftest.model import ArmTrace, LogitRows

# Row status codes; STATUS_NAMES[code] is the CSV spelling.
SAME, DIFFER, NEAR_TIE, UNMATCHED_A, UNMATCHED_B, DIVERGED = range(6)
STATUS_NAMES = ("same", "differ", "near-tie", "unmatched-a", "unmatched-b", "context-diverged")


@dataclass(frozen=True)
class RowTable:
    """One entry per block row (compared, unmatched or diverged); nan/-1 where unknown."""

    req: np.ndarray  # int64 index into Comparison.requests
    pos: np.ndarray
    row: np.ndarray  # 1..k
    token_a: np.ndarray  # int64; -1 with has_a False
    token_b: np.ndarray
    has_a: np.ndarray  # bool
    has_b: np.ndarray
    status: np.ndarray  # int8 code
    margin_a: np.ndarray  # float64, nan when no logits
    margin_b: np.ndarray
    logit_a: np.ndarray  # arm A's top-1 logit at that row
    logit_b: np.ndarray
    abs_logit_diff: np.ndarray  # max |A - B| over the shared top-k ids
    logit_differs: np.ndarray  # bool: above atol (or, bitwise, a changed top list)

    def __len__(self) -> int:
        return int(self.req.shape[0])

    @property
    def compared(self) -> np.ndarray:
        """Mask of the rows that were compared (not unmatched, not context-diverged)."""
        return np.isin(self.status, (SAME, DIFFER, NEAR_TIE))


@dataclass(frozen=True)
class RowPlace:
    """Where a block row is: request, position, row (1..k)."""

    req: str  # "" under ordinal alignment, where `pos` is the proposing step
    pos: int
    row: int

    @property
    def where(self) -> str:
        if self.req == "":
            return f"proposing step {self.pos} row {self.row}"
        return f"req {self.req} pos {self.pos} row {self.row}"


@dataclass(frozen=True)
class FirstDifference(RowPlace):
    """The first compared row with a hard token flip."""

    token_a: int  # -1 where that arm drafted no token at that row
    token_b: int
    margin_a: float | None
    margin_b: float | None


@dataclass(frozen=True)
class FirstLogitDifference(RowPlace):
    """The first compared row whose logits differ beyond atol (or were traced by one arm)."""

    abs_logit_diff: float | None


@dataclass(frozen=True)
class Comparison:
    """What differed between two arms, before any expectation is applied."""

    mode: str
    requests: tuple[str, ...]
    rows: RowTable
    blocks_compared: int
    blocks_differing: int  # blocks with at least one hard flip
    blocks_near_tie: int  # blocks whose only flips are near-ties
    blocks_logit_differing: int  # compared blocks with a logit difference above atol
    logit_rows_compared: int
    max_abs_logit_diff: float | None
    unmatched_a: int
    unmatched_b: int
    context_diverged: int
    first_difference: FirstDifference | None
    first_logit_difference: FirstLogitDifference | None
    divergences: tuple[EmitDivergence, ...]
    notes: tuple[str, ...] = ()
    near_tie: float = 0.0
    atol: float = 0.0
    coverage_gaps: tuple[CoverageGap, ...] = ()

    def compared_blocks(self, side: str = "a") -> tuple[DraftedBlocks, np.ndarray]:
        """The blocks that were compared, as one arm drafted them, and their rows' margins."""
        r = self.rows
        keep = r.compared & (r.has_a if side == "a" else r.has_b)
        tokens = (r.token_a if side == "a" else r.token_b)[keep].astype(np.int32)
        margins = (r.margin_a if side == "a" else r.margin_b)[keep]
        req, pos = r.req[keep], r.pos[keep]
        starts = np.flatnonzero(np.r_[True, (req[1:] != req[:-1]) | (pos[1:] != pos[:-1])]) \
            if tokens.size else np.zeros(0, np.int64)
        offsets = np.append(starts, tokens.size).astype(np.int64)
        return DraftedBlocks("compared", tokens, offsets), margins


@dataclass(frozen=True)
class _RowKeys:
    """A mixed-radix int64 key per (request, pos, row), sized to the data it keys.

    Positions and rows are keyed by value when `requests x (max pos + 1) x (max row + 1)` fits
    in 63 bits (always, for real traces), else by their rank among the values present."""

    pos_span: int
    row_span: int
    pos_values: np.ndarray | None = None  # sorted values, when keyed by rank
    row_values: np.ndarray | None = None

    @classmethod
    def covering(cls, requests: int, *traces: ArmTrace, pos: np.ndarray,
                 row: np.ndarray) -> _RowKeys:
        all_pos = [pos, *(t.logits.pos for t in traces)]
        all_row = [row, *(t.logits.row for t in traces)]

        def top(arrays: list[np.ndarray]) -> int:
            return max((int(a.max()) for a in arrays if a.size), default=0)

        pos_span, row_span = top(all_pos) + 1, top(all_row) + 1
        if max(requests, 1) * pos_span * row_span < 2**63:
            return cls(pos_span, row_span)
        pos_values = np.unique(np.concatenate(all_pos).astype(np.int64))
        row_values = np.unique(np.concatenate(all_row).astype(np.int64))
        if max(requests, 1) * pos_values.size * row_values.size >= 2**63:
            raise UsageError(f"{requests} requests x {pos_values.size} positions x "
                             f"{row_values.size} rows cannot be keyed in 64 bits")
        return cls(pos_values.size, row_values.size, pos_values, row_values)

    def __call__(self, req: np.ndarray, pos: np.ndarray, row: np.ndarray) -> np.ndarray:
        if self.pos_values is not None and self.row_values is not None:
            pos = np.searchsorted(self.pos_values, pos)
            row = np.searchsorted(self.row_values, row)
        return ((req.astype(np.int64) * self.pos_span + pos.astype(np.int64)) * self.row_span
                + row.astype(np.int64))


def _logit_index(trace: ArmTrace, req_map: np.ndarray,
                 keys_of: _RowKeys) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (request, pos, row) keys of an arm's logit rows and the row index for each."""
    lg = trace.logits
    if not len(lg):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys = keys_of(req_map[lg.req], lg.pos, lg.row)
    order = np.argsort(keys, kind="stable")
    return keys[order], order


def _lookup(keys: np.ndarray, order: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Logit row index for each wanted key, -1 where that arm traced none."""
    if keys.size == 0 or want.size == 0:
        return np.full(want.shape, -1, dtype=np.int64)
    at = np.searchsorted(keys, want)
    at_c = np.minimum(at, keys.size - 1)
    found = keys[at_c] == want
    return np.where(found, order[at_c], -1)


# Rows per block of the logit comparison: the temporaries of a block stay in memory the
# allocator already holds, instead of faulting in fresh pages for whole-trace temporaries.
_LOGIT_BLOCK_ROWS = 1 << 16


def _row_logit_diffs(la: LogitRows, ia: np.ndarray, lb: LogitRows, ib: np.ndarray,
                     atol: float) -> tuple[np.ndarray, np.ndarray]:
    """Per pair of logit rows: max |A - B| on shared ids, and whether that counts as differing."""
    n = ia.size
    diff = np.full(n, np.nan)
    differs = np.zeros(n, dtype=bool)
    for start in range(0, n, _LOGIT_BLOCK_ROWS):
        block = slice(start, start + _LOGIT_BLOCK_ROWS)
        diff[block], differs[block] = _block_logit_diffs(la, ia[block], lb, ib[block], atol)
    return diff, differs


def _block_logit_diffs(la: LogitRows, ia: np.ndarray, lb: LogitRows, ib: np.ndarray,
                       atol: float) -> tuple[np.ndarray, np.ndarray]:
    n = ia.size
    diff = np.full(n, np.nan)
    width = max(la.top_ids.shape[1], lb.top_ids.shape[1])

    def widen(ids: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if ids.shape[1] == width:
            return ids, vals
        pad = width - ids.shape[1]
        return (np.pad(ids, ((0, 0), (0, pad)), constant_values=-1),
                np.pad(vals, ((0, 0), (0, pad)), constant_values=np.nan))

    ids_a, vals_a = widen(la.top_ids[ia], la.top_vals[ia])
    ids_b, vals_b = widen(lb.top_ids[ib], lb.top_vals[ib])
    same_ids = np.all(ids_a == ids_b, axis=1)
    with np.errstate(invalid="ignore"):
        d = np.abs(vals_a - vals_b)
    d[vals_a == vals_b] = 0.0  # equal infinities are equal, although inf - inf is nan
    undefined = np.isnan(d)
    if undefined.any():
        # nan in both arms (or padding in both) is equal; nan in one arm only is as far apart
        # as values get
        both = np.isnan(vals_a) & np.isnan(vals_b)
        d[undefined] = np.where(both[undefined], 0.0, np.inf)
    diff[same_ids] = d[same_ids].max(axis=1)
    moved = np.flatnonzero(~same_ids)
    if moved.size:
        # Top lists differ: compare the values of the ids both lists hold.
        sa, sb = ids_a[moved], ids_b[moved]
        eq = (sa[:, :, None] == sb[:, None, :]) & (sa[:, :, None] >= 0)
        va = np.broadcast_to(vals_a[moved][:, :, None], eq.shape)
        vb = np.broadcast_to(vals_b[moved][:, None, :], eq.shape)
        with np.errstate(invalid="ignore"):
            dd = np.where((np.isnan(va) & np.isnan(vb)) | (va == vb), 0.0, np.abs(va - vb))
            dd = np.where(np.isnan(dd), np.inf, dd)
        shared = np.where(eq, dd, -1.0).reshape(moved.size, -1).max(axis=1)
        # lists with no id in common are as far apart as lists get, whatever atol allows
        diff[moved] = np.where(shared >= 0, shared, np.inf)
    differs = np.nan_to_num(diff, nan=0.0) > atol
    if atol == 0.0:
        differs |= ~same_ids
    return diff, differs


def near_tie_rows(margin_a: np.ndarray, margin_b: np.ndarray, near_tie: float) -> np.ndarray:
    """The near-tie rule, the one place it is written: a flip at a row is a near-tie only when
    both arms' margins there are known and below `near_tie`. A flip where either margin is
    unknown is a hard difference. `compare` classifies flips with it and `verdict` asks it
    whether any compared row could still flip hard."""
    with np.errstate(invalid="ignore"):
        return (margin_a < near_tie) & (margin_b < near_tie)


@dataclass(frozen=True)
class _Rows:
    """The compared rows of aligned blocks, before any logit is looked at."""

    step: np.ndarray  # index of the aligned block each row belongs to
    row: np.ndarray  # 0-based
    req: np.ndarray
    pos: np.ndarray
    has_a: np.ndarray
    has_b: np.ndarray
    tok_a: np.ndarray
    tok_b: np.ndarray


@dataclass(frozen=True)
class _Logits:
    """Per compared row: margins, top-1 logits and the logit difference of the two arms."""

    margin_a: np.ndarray
    margin_b: np.ndarray
    logit_a: np.ndarray
    logit_b: np.ndarray
    abs_diff: np.ndarray
    differs: np.ndarray
    rows_compared: int


Blocks = tuple[np.ndarray, np.ndarray]  # flat ids and their offsets


def _blocks(a: ArmTrace, b: ArmTrace, mode: str) -> tuple[Blocks, Blocks]:
    if mode == "position":
        return ((a.verifies.draft_ids, a.verifies.draft_off),
                (b.verifies.draft_ids, b.verifies.draft_off))
    return ((a.proposes.first_ids, a.proposes.first_off),
            (b.proposes.first_ids, b.proposes.first_off))


def _compared_rows(al: Alignment, blocks_a: Blocks, blocks_b: Blocks) -> _Rows:
    """One row per drafted position of each aligned block pair (the longer block's length)."""
    len_a = np.diff(blocks_a[1])[al.a_index] if len(al) else np.zeros(0, np.int64)
    len_b = np.diff(blocks_b[1])[al.b_index] if len(al) else np.zeros(0, np.int64)
    k = np.maximum(len_a, len_b)
    step = np.repeat(np.arange(len(al)), k)
    row = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)  # 0-based
    has_a = row < np.repeat(len_a, k)
    has_b = row < np.repeat(len_b, k)
    tok_a = np.full(row.size, -1, dtype=np.int64)
    tok_b = np.full(row.size, -1, dtype=np.int64)
    off_a = blocks_a[1][al.a_index][step] + row if row.size else row
    off_b = blocks_b[1][al.b_index][step] + row if row.size else row
    tok_a[has_a] = blocks_a[0][off_a[has_a]]
    tok_b[has_b] = blocks_b[0][off_b[has_b]]
    return _Rows(step, row, al.req[step], al.pos[step], has_a, has_b, tok_a, tok_b)


def _row_logits(a: ArmTrace, b: ArmTrace, al: Alignment, rows: _Rows, atol: float) -> _Logits:
    """Look up each compared row's logit lines in both arms (position mode only)."""
    n = rows.row.size
    margin_a, margin_b = np.full(n, np.nan), np.full(n, np.nan)
    logit_a, logit_b = np.full(n, np.nan), np.full(n, np.nan)
    abs_diff = np.full(n, np.nan)
    differs = np.zeros(n, dtype=bool)
    if al.mode != "position" or not (len(a.logits) or len(b.logits)):
        return _Logits(margin_a, margin_b, logit_a, logit_b, abs_diff, differs, 0)
    names = al.requests
    index = {name: i for i, name in enumerate(names)}
    map_a = np.array([index[name] for name in a.requests], dtype=np.int64)
    map_b = np.array([index[name] for name in b.requests], dtype=np.int64)
    keys_of = _RowKeys.covering(len(names), a, b, pos=rows.pos, row=rows.row + 1)
    want = keys_of(rows.req, rows.pos, rows.row + 1)
    la = _lookup(*_logit_index(a, map_a, keys_of), want)
    lb = _lookup(*_logit_index(b, map_b, keys_of), want)
    sel_a, sel_b = la >= 0, lb >= 0
    margin_a[sel_a] = a.logits.margins[la[sel_a]]
    margin_b[sel_b] = b.logits.margins[lb[sel_b]]
    logit_a[sel_a] = a.logits.top_vals[la[sel_a], 0]
    logit_b[sel_b] = b.logits.top_vals[lb[sel_b], 0]
    both = sel_a & sel_b
    d, dif = _row_logit_diffs(a.logits, la[both], b.logits, lb[both], atol)
    abs_diff[both] = d
    differs[both] = dif
    # a row traced in one arm only is a difference in what was traced
    differs |= sel_a ^ sel_b
    return _Logits(margin_a, margin_b, logit_a, logit_b, abs_diff, differs, int(both.sum()))


def _first_differences(names: tuple[str, ...], rows: _Rows, lg: _Logits, status: np.ndarray
                       ) -> tuple[FirstDifference | None, FirstLogitDifference | None]:
    first = first_logit = None
    hard_rows = np.flatnonzero(status == DIFFER)
    if hard_rows.size:
        i = int(hard_rows[0])
        first = FirstDifference(
            req=names[int(rows.req[i])], pos=int(rows.pos[i]), row=int(rows.row[i]) + 1,
            token_a=int(rows.tok_a[i]), token_b=int(rows.tok_b[i]),
            margin_a=_opt(lg.margin_a[i]), margin_b=_opt(lg.margin_b[i]))
    logit_rows = np.flatnonzero(lg.differs)
    if logit_rows.size:
        i = int(logit_rows[0])
        first_logit = FirstLogitDifference(
            req=names[int(rows.req[i])], pos=int(rows.pos[i]), row=int(rows.row[i]) + 1,
            abs_logit_diff=_opt(lg.abs_diff[i]))
    return first, first_logit


def compare(a: ArmTrace, b: ArmTrace, *, near_tie: float = 0.0, atol: float = 0.0,
            alignment: Alignment | None = None) -> Comparison:
    """Compare every aligned block row; nothing here knows what was expected."""
    al = alignment or align(a, b)
    blocks_a, blocks_b = _blocks(a, b, al.mode)
    rows = _compared_rows(al, blocks_a, blocks_b)
    lg = _row_logits(a, b, al, rows, atol)

    status = np.full(rows.row.size, SAME, dtype=np.int8)
    flipped = (rows.tok_a != rows.tok_b) | (rows.has_a != rows.has_b)
    status[flipped] = DIFFER
    status[flipped & near_tie_rows(lg.margin_a, lg.margin_b, near_tie)] = NEAR_TIE

    hard = np.zeros(len(al), dtype=bool)
    soft = np.zeros(len(al), dtype=bool)
    ldiff = np.zeros(len(al), dtype=bool)
    hard[rows.step[status == DIFFER]] = True
    soft[rows.step[status == NEAR_TIE]] = True
    ldiff[rows.step[lg.differs]] = True
    soft &= ~hard

    first, first_logit = _first_differences(al.requests, rows, lg, status)
    table = _with_uncompared(
        RowTable(req=rows.req.astype(np.int64), pos=rows.pos.astype(np.int64), row=rows.row + 1,
                 token_a=rows.tok_a, token_b=rows.tok_b, has_a=rows.has_a, has_b=rows.has_b,
                 status=status, margin_a=lg.margin_a, margin_b=lg.margin_b,
                 logit_a=lg.logit_a, logit_b=lg.logit_b, abs_logit_diff=lg.abs_diff,
                 logit_differs=lg.differs),
        a, b, al, blocks_a, blocks_b)
    measured = lg.abs_diff[~np.isnan(lg.abs_diff)]  # inf (nan in one arm only) is the largest
    return Comparison(
        mode=al.mode, requests=al.requests, rows=table, blocks_compared=len(al),
        blocks_differing=int(hard.sum()), blocks_near_tie=int(soft.sum()),
        blocks_logit_differing=int(ldiff.sum()), logit_rows_compared=lg.rows_compared,
        max_abs_logit_diff=float(measured.max()) if measured.size else None,
        unmatched_a=int(al.unmatched_a.size), unmatched_b=int(al.unmatched_b.size),
        context_diverged=int(al.diverged_a.size), first_difference=first,
        first_logit_difference=first_logit, divergences=al.divergences, notes=al.notes,
        near_tie=near_tie, atol=atol, coverage_gaps=al.coverage_gaps)


def _opt(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _with_uncompared(rows: RowTable, a: ArmTrace, b: ArmTrace, al: Alignment,
                     blocks_a: tuple[np.ndarray, np.ndarray],
                     blocks_b: tuple[np.ndarray, np.ndarray]) -> RowTable:
    """Append the rows of unmatched and diverged steps, so the export accounts for every block."""
    index = {n: i for i, n in enumerate(al.requests)}
    parts = [rows]

    def block_rows(trace: ArmTrace, blocks: tuple[np.ndarray, np.ndarray], steps: np.ndarray,
                   side: str, status: int) -> RowTable | None:
        if steps.size == 0:
            return None
        ids, off = blocks
        lengths = np.diff(off)[steps]
        step = np.repeat(np.arange(steps.size), lengths)
        r = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        tokens = ids[off[steps][step] + r].astype(np.int64)
        if al.mode == "position":
            rmap = np.array([index[n] for n in trace.requests], dtype=np.int64)
            req = rmap[trace.verifies.req[steps]][step]
            pos = trace.verifies.pos[steps][step]
        else:
            # the ordinal among proposing steps, as for the compared rows, not the line index
            ordinal = np.searchsorted(np.flatnonzero(trace.proposes.proposing), steps)
            req = np.zeros(step.size, np.int64)
            pos = ordinal[step].astype(np.int64)
        n = r.size
        none = np.full(n, -1, dtype=np.int64)
        nan = np.full(n, np.nan)
        is_a = side == "a"
        return RowTable(req=req, pos=pos, row=r + 1,
                        token_a=tokens if is_a else none, token_b=none if is_a else tokens,
                        has_a=np.full(n, is_a), has_b=np.full(n, not is_a),
                        status=np.full(n, status, dtype=np.int8), margin_a=nan, margin_b=nan.copy(),
                        logit_a=nan.copy(), logit_b=nan.copy(), abs_logit_diff=nan.copy(),
                        logit_differs=np.zeros(n, dtype=bool))

    for t, blocks, steps, side, status in (
            (a, blocks_a, al.unmatched_a, "a", UNMATCHED_A),
            (b, blocks_b, al.unmatched_b, "b", UNMATCHED_B)):
        part = block_rows(t, blocks, steps, side, status)
        if part is not None:
            parts.append(part)
    if al.diverged_a.size:
        da = block_rows(a, blocks_a, al.diverged_a, "a", DIVERGED)
        db = block_rows(b, blocks_b, al.diverged_b, "b", DIVERGED)
        if da is not None and db is not None and len(da) == len(db):
            # same (req, pos) pairs in the same order: show both tokens on one row
            parts.append(replace(da, token_b=db.token_b, has_b=db.has_b))
        else:
            parts.extend(p for p in (da, db) if p is not None)
    if len(parts) > 1:
        rows = RowTable(**{name: np.concatenate([getattr(p, name) for p in parts])
                           for name in RowTable.__dataclass_fields__})
    order = np.lexsort((rows.row, rows.pos, rows.req))
    return RowTable(**{name: getattr(rows, name)[order] for name in RowTable.__dataclass_fields__})
