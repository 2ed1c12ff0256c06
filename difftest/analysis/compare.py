"""Token and logit differences of aligned blocks, with each flip explained by its margin.

A flip where both arms' top-1/top-2 margins are below `near_tie` is a near-tie: a perturbation
that small could move the argmax of a healthy runner too, so it is reported but does not fail a
`same` comparison. Every other flip is a hard `differ`. Logits are compared on the ids both top
lists share, under `difftest.numerics.tolerance`'s rule (numpy's isclose, raised to an A/A noise floor,
within the printed resolution); with every tolerance zero the comparison is bitwise and a changed
top list counts as well. With a noise floor, token flips count only when B flips significantly
more often than A flips against itself; those that do not are `noise-flip` rows. No count test
dismisses a difference larger than the floor times `NOISE_BAND`: a value certainly above that band,
or a flip whose margins say the logits moved by more (a flip needs a move of at least the mean of
its two margins), counts as it would without a floor. Every count is of the rows that were
judged: an unmatched or context-diverged row enters no test and no reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from collections.abc import Sequence
from typing import Any, TypedDict, Unpack
from enum import IntEnum, StrEnum

import numpy as np

from difftest.trace.align import Alignment, CoverageGap, EmitDivergence, align
from difftest.analysis.audit import DraftedBlocks
from difftest.core.errors import UsageError
from difftest.core.kinds import AlignMode, ArmSide, DraftingKind
from difftest.core.model import ArmTrace, Finding, LogitRows
from difftest.numerics.noise import (NOISE_BAND, ExcessTest, FlipTest, NoiseFloor, excess_test,
                            flip_test, request_flips, request_names)
from difftest.numerics.resolution import (LOSSLESS_DIGITS, Resolution, arm_digits, exact_in_half,
                                 resolution)
from difftest.numerics.stats import LogitStats, PairedRows, StatsPass
from difftest.core.rules import BARE, Rules
from difftest.core.thresholds import Dtype, trace_dtype
from difftest.numerics.tolerance import (PlainRows, RowDiffs, Tolerance, derived_near_tie,
                                         exact_values, finite_max, joined_rows, judge_matched,
                                         judge_plain, match_rows, no_rows, plain_rows)

class RowStatus(IntEnum):
    """What one compared row shows; stored as int8 in `RowTable.status`, spelt `.csv` in the
    CSV, JSON and HTML reports."""

    SAME = 0
    DIFFER = 1
    NEAR_TIE = 2
    UNMATCHED_A = 3
    UNMATCHED_B = 4
    DIVERGED = 5
    NOISE_FLIP = 6

    @property
    def csv(self) -> str:
        return _STATUS_CSV[self]


_STATUS_CSV = {RowStatus.SAME: "same", RowStatus.DIFFER: "differ",
               RowStatus.NEAR_TIE: "near-tie", RowStatus.UNMATCHED_A: "unmatched-a",
               RowStatus.UNMATCHED_B: "unmatched-b", RowStatus.DIVERGED: "context-diverged",
               RowStatus.NOISE_FLIP: "noise-flip"}
# the codes by their short names, and STATUS_NAMES[code], the CSV spelling, for array code
SAME, DIFFER, NEAR_TIE, UNMATCHED_A, UNMATCHED_B, DIVERGED, NOISE_FLIP = RowStatus
STATUS_NAMES = tuple(s.csv for s in RowStatus)


class DraftingSource(StrEnum):
    """Who said how the engine drafts: the comparison's config table (its `drafting` key), an
    override over it (--drafting, or the API's `drafting`), the traces' [spec-drafting]
    headers, or nobody (the default, block). Reports spell the config's "comparison"."""

    CONFIG = "comparison"
    FLAG = "flag"
    TRACES = "traces"
    DEFAULT = "default"
    # a teacher-forced B that drafted along A's drafted tokens: rows compare like a block's
    FORCED_ALONG = "teacher forcing: B drafted along A's drafted tokens"


class LogitJudgement(StrEnum):
    """How a row's logits were judged, as the CSV and HTML reports spell it."""

    NOT_COMPARED = ""  # no logits at this row, or a row that is not compared
    SAME = "same"
    DIFFER = "differ"
    UNRESOLVED = "unresolved"  # the printed resolution cannot say: neither same nor differ


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
    abs_logit_diff: np.ndarray  # max |A - B| over the shared top-k ids (nan: none shared)
    logit_differs: np.ndarray  # bool: above the tolerance (or, bitwise, a changed top list)
    # bool: a difference the printed resolution cannot place above or below the tolerance
    # (neither counted nor shown to agree)
    logit_unresolved: np.ndarray
    # the largest difference the print makes certain (difftest.numerics.tolerance.resolved_difference):
    # what a tolerance is judged by; nan where abs_logit_diff is
    resolved_logit_diff: np.ndarray
    # per arm: the margin between the two flipped tokens that the near-tie rule judges
    # (`flip_margins`; the top-1/top-2 margin where it is not known), nan where not traced
    flip_margin_a: np.ndarray
    flip_margin_b: np.ndarray

    def __len__(self) -> int:
        return int(self.req.shape[0])

    @property
    def compared(self) -> np.ndarray:
        """Mask of the rows that were compared (not unmatched, not context-diverged)."""
        return np.isin(self.status, (SAME, DIFFER, NEAR_TIE, NOISE_FLIP))

    def logit_judgement_codes(self, at: np.ndarray | None = None) -> np.ndarray:
        """Per row (of `at`, else of all): the index of its `LogitJudgement` (int8)."""
        sel = slice(None) if at is None else at
        status, diff = self.status[sel], self.abs_logit_diff[sel]
        differs, unresolved = self.logit_differs[sel], self.logit_unresolved[sel]
        compared = np.isin(status, (SAME, DIFFER, NEAR_TIE, NOISE_FLIP))
        out = np.zeros(status.shape[0], dtype=np.int8)
        out[compared & (~np.isnan(diff) | differs)] = 1
        out[unresolved] = 3
        out[differs] = 2
        return out

    def logit_judgements(self, at: np.ndarray | None = None) -> list[LogitJudgement]:
        """Per row (of `at`, else of all): same, differ, unresolved, or not compared."""
        kinds = list(LogitJudgement)
        return [kinds[i] for i in self.logit_judgement_codes(at).tolist()]


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

    token_a: int  # both arms drafted the row (a row one arm drafted is a draft-length difference)
    token_b: int
    margin_a: float | None
    margin_b: float | None


@dataclass(frozen=True)
class FirstLogitDifference(RowPlace):
    """The first compared row whose logits differ beyond atol (or were traced by one arm)."""

    abs_logit_diff: float | None


@dataclass(frozen=True)
class OneSided:
    """Only one arm traced block logits: tokens are compared, logits cannot be."""

    traced_by: ArmSide
    level_a: int
    level_b: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "traced_by", ArmSide(self.traced_by))  # refuses any other

    def sentence(self, names: tuple[str, str]) -> str:
        has, lacks = (0, 1) if self.traced_by is ArmSide.A else (1, 0)
        levels = (self.level_a, self.level_b)
        return (f"logits could not be compared: {names[has]} traced block logits (level "
                f"{levels[has]}) and {names[lacks]} did not (level {levels[lacks]}); only tokens "
                "were compared (set the same VT_SPEC_TRACE in both arms)")


@dataclass(frozen=True)
class LogitFindings:
    """What the logit comparison found beyond per-row differences: the statistics of the paired
    rows, each arm's printed resolution, the rows no tolerance could judge, and the A/A floor
    with the flip test when reruns of arm A were measured."""

    stats: LogitStats | None
    resolution_a: Resolution
    resolution_b: Resolution
    rows_disjoint: int  # paired rows whose top lists share no id
    rows_unresolved: int  # differences the printed resolution cannot decide
    rows_one_quantum: int  # bitwise differences of no more than one printed quantum
    not_compared: OneSided | None = None  # only one arm traced logits: none compared
    max_abs_value: float | None = None  # largest finite |b| compared (the reach of rtol)
    pairs: PairedRows | TakenRows | None = field(default=None, repr=False, compare=False)
    floor: NoiseFloor | None = None
    flips: FlipTest | None = None
    excess: ExcessTest | None = None  # how the values above the floor were judged
    rows_within_noise: int = 0  # rows above the floor, not significantly more than A's reruns
    values_nonfinite_both: int = 0  # compared values non-finite and equal in both arms
    rows_nonfinite_one: int = 0  # compared rows with a value non-finite in one arm only
    rows_beyond_band: int = 0  # rows with a value above the noise band: counted, no test asked
    flips_beyond_band: int = 0  # hard flips larger than the noise band: counted, no test asked
    # the request (index into Comparison.requests) of each of `pairs`' rows: what clustered
    # statistics group by
    pair_req: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def resolution(self) -> float | None:
        """The coarser of the two arms' quanta."""
        seen = [r.quantum for r in (self.resolution_a, self.resolution_b)
                if r.quantum is not None]
        return max(seen, default=None)

    @property
    def digits(self) -> int | None:
        """The fewer of the two arms' printed digits."""
        seen = [r.digits for r in (self.resolution_a, self.resolution_b) if r.digits is not None]
        return min(seen, default=None)


@dataclass(frozen=True)
class Comparison:
    """What differed between two arms, before any expectation is applied."""

    mode: AlignMode
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
    # the rules the rows were judged under, as applied: atol and rtol a dtype table's or a
    # thresholds file's, drafting the kind the rows were compared as. The one record of the
    # near-tie rule and the tolerance: the verdict, the instruments and the reports read it here
    rules: Rules = BARE
    coverage_gaps: tuple[CoverageGap, ...] = ()
    logits: LogitFindings | None = None  # None: no logits traced by either arm

    @property
    def tolerance(self) -> Tolerance:
        floor = self.logits.floor.floor if self.logits and self.logits.floor else 0.0
        return Tolerance(self.rules.atol, self.rules.rtol, floor)

    def row_near_tie(self) -> np.ndarray:
        """The near-tie threshold each row was judged with: `near_tie` everywhere, or derived
        per row from the tolerance (nan where B traced no logit there)."""
        if self.rules.near_tie is None:
            return derived_near_tie(self.tolerance, self.rows.logit_b)
        return np.full(self.rows.req.size, self.rules.near_tie, dtype=np.float64)
    drafting_source: DraftingSource = DraftingSource.DEFAULT
    # Blocks drafted to different lengths at the same (req, pos), and the rows only A / only B
    # drafted there (a draft-length difference, not a token flip).
    draft_length_blocks: int = 0
    # Aligned blocks where either arm drafted a row: the set draft-length differences are
    # counted over (a block one arm drafted with k=0 is here but not in blocks_compared).
    blocks_drafted: int = 0
    draft_length_rows_a: int = 0
    draft_length_rows_b: int = 0
    # Rows of compared blocks left out because an earlier row of a sequential block flipped.
    rows_context_diverged: int = 0
    # Each arm's parser findings: those that break its stream leave no verdict to give.
    findings_a: tuple[Finding, ...] = ()
    findings_b: tuple[Finding, ...] = ()
    # Unmatched steps at a position the other arm's stream never emitted (not acceptance: a step
    # lost from one trace or an extra one in the other), and their drafted rows.
    steps_lost_a: int = 0  # steps only A traced, where B's stream has no token
    steps_lost_b: int = 0
    rows_lost: int = 0
    unmatched_lost_a: int = 0  # of the unmatched blocks, those lost (the rest is acceptance)
    unmatched_lost_b: int = 0
    # the largest reference margin a near-tie row had (None: no flip was a near-tie)
    near_tie_admitted: float | None = None

    @property
    def drafting(self) -> DraftingKind:
        """How the rows were compared: block, or sequential (after a flip, a row ran on another
        token); `drafting_source` says who said so."""
        return self.rules.drafting or DraftingKind.BLOCK

    @property
    def near_tie_derived(self) -> bool:
        """The near-tie rule is derived per row from the tolerance (difftest.numerics.tolerance)."""
        return self.rules.near_tie is None

    @property
    def rows_noise_flip(self) -> int:
        """Hard flips the flip test judged as noise."""
        return int((self.rows.status == NOISE_FLIP).sum())

    @property
    def stream_breaks(self) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
        """Per arm, the findings after which its trace is no record of what the engine did."""
        return (tuple(f for f in self.findings_a if f.kind.breaks_stream),
                tuple(f for f in self.findings_b if f.kind.breaks_stream))

    def compared_blocks(self, side: ArmSide) -> tuple[DraftedBlocks, np.ndarray]:
        """The blocks that were compared, as one arm drafted them, and their rows' margins."""
        r = self.rows
        keep = r.compared  # compared rows were drafted by both arms
        tokens = (r.token_a if side == ArmSide.A else r.token_b)[keep].astype(np.int32)
        margins = (r.margin_a if side == ArmSide.A else r.margin_b)[keep]
        req, pos = r.req[keep], r.pos[keep]
        # a block starts at the first row and wherever (req, pos) changes; none when no row
        starts = np.flatnonzero(np.r_[tokens.size > 0, (req[1:] != req[:-1]) | (pos[1:] != pos[:-1])])
        offsets = np.append(starts, tokens.size)
        return DraftedBlocks("compared", tokens, offsets), margins


@dataclass(frozen=True)
class _RowKeys:
    """A mixed-radix int64 key per (request, pos, row), sized to the data it keys.

    Positions and rows are keyed by value when `requests x (max pos + 1) x (max row + 1)` fits
    in 63 bits (always, for real traces), else by their rank among the values present."""

    pos_span: int
    row_span: int
    ranks: tuple[np.ndarray, np.ndarray] | None = None  # sorted pos and row values, by rank

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
        pos_values = np.unique(np.concatenate(all_pos))  # int64: `pos` and `row` are
        row_values = np.unique(np.concatenate(all_row))
        if requests * pos_values.size * row_values.size >= 2**63:
            raise UsageError(f"{requests} requests x {pos_values.size} positions x "
                             f"{row_values.size} rows cannot be keyed in 64 bits")
        return cls(pos_values.size, row_values.size, (pos_values, row_values))

    def __call__(self, req: np.ndarray, pos: np.ndarray, row: np.ndarray) -> np.ndarray:
        if self.ranks is not None:
            pos = np.searchsorted(self.ranks[0], pos)
            row = np.searchsorted(self.ranks[1], row)
        keys: np.ndarray = (req * self.pos_span + pos) * self.row_span + row  # int64: `req` is
        return keys


def _lookup(keys: np.ndarray, order: np.ndarray, want: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """For each wanted key: whether the arm traced that logit row, and its index where it did
    (`keys` is not empty: the arm traced logits)."""
    at = np.minimum(np.searchsorted(keys, want), keys.size - 1)
    return order[at], keys[at] == want


# A table of every key (one entry per possible key) where there are at most this many keys per
# logit row (plus a few): positions and rows of real traces are dense, so it is a few bytes per
# row, and a lookup is one read instead of a binary search.
_DENSE_KEYS_PER_ROW = 16
_DENSE_KEYS_MIN = 1 << 16


def _find_rows(trace: ArmTrace, req_map: np.ndarray, keys_of: _RowKeys, space: int,
               want: np.ndarray, tables: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """For each wanted key (all below `space`): the arm's logit row holding it (the first in
    the trace, where several do) and whether one does. Where the arm keys each row once and
    the keys are dense, a table indexed by key answers (the row where found; 0, read by no
    caller, where not); else the sorted keys are searched. `tables` keeps the table (every
    entry -1 again) for the next arm, which fills it instead of a fresh one."""
    lg = trace.logits
    keys = keys_of(req_map[lg.req], lg.pos, lg.row)
    if space <= _DENSE_KEYS_PER_ROW * keys.size + _DENSE_KEYS_MIN:
        index = np.arange(keys.size, dtype=np.int32 if keys.size < 2**31 else np.int64)
        kept = [t for t in tables if t.size == space and t.dtype == index.dtype]
        table = kept[0] if kept else np.full(space, -1, dtype=index.dtype)
        table[keys] = index
        found_at = None
        if np.array_equal(table[keys], index):  # no key twice: each names its one row
            at = table[want]
            found = at >= 0
            found_at = np.where(found, at, 0).astype(np.int64), found
        table[keys] = -1  # the only entries written
        tables[:] = [table]
        if found_at is not None:
            return found_at
    order = np.argsort(keys, kind="stable")  # equal keys keep the trace's order
    return _lookup(keys[order], order, want)


# Rows per block of the logit comparison: the temporaries of a block stay in memory the
# allocator already holds, instead of faulting in fresh pages for whole-trace temporaries.
_LOGIT_BLOCK_ROWS = 1 << 15


_JUDGED = ("diff", "differs", "disjoint", "unresolved", "one_quantum", "exceed", "values",
           "beyond", "nonfinite_both", "resolved")  # what a pair of rows' judgement keeps


@dataclass(frozen=True)
class _Judged:
    diff: np.ndarray
    differs: np.ndarray
    disjoint: np.ndarray
    unresolved: np.ndarray
    one_quantum: np.ndarray
    exceed: np.ndarray
    values: np.ndarray
    beyond: np.ndarray
    nonfinite_both: np.ndarray
    resolved: np.ndarray


def _row_logit_diffs(a: ArmTrace, ia: np.ndarray, b: ArmTrace, ib: np.ndarray,
                     tol: Tolerance, digits: tuple[int | None, int | None], keep: np.ndarray,
                     cluster: np.ndarray) -> tuple[_Judged, LogitStats]:
    """Per pair of logit rows: max |A - B| on shared ids, and whether that counts as differing;
    and the statistics of the pairs in `keep` (the compared rows', whose requests are
    `cluster`), taken in the same pass from the same matched ids, values and quanta."""
    la, lb = a.logits, b.logits
    # at most every kept pair's every entry of A is a compared value
    stats = StatsPass(int(np.count_nonzero(keep)) * la.top_ids.shape[1])
    joined: dict[str, np.ndarray] = {}  # each judgement's arrays, filled a block at a time

    def add(part: RowDiffs, at: slice) -> None:
        for name in _JUDGED:
            got = getattr(part, name)
            if name not in joined:  # the first block gives each array its type
                joined[name] = np.empty(ia.size, dtype=got.dtype)
            joined[name][at] = got

    for start in range(0, max(ia.size, 1), _LOGIT_BLOCK_ROWS):
        block = slice(start, start + _LOGIT_BLOCK_ROWS)
        pairs = PairedRows.take(la.top_ids, la.top_vals, ia[block], lb.top_ids, lb.top_vals,
                                ib[block])
        kept = keep[block]
        plain = plain_rows(pairs, *digits)
        if plain is not None:  # only the other rows matched
            add(_judged_split(pairs, plain, kept, tol, digits, stats), block)
            continue
        matched = match_rows(pairs, *digits)
        if matched is None:  # nothing to match: the statistics take the rows as they are
            if kept.any():
                stats.add_pairs(PairedRows(pairs.ids_a[kept], exact_values(
                    pairs.vals_a[kept], digits[0]), pairs.ids_b[kept], exact_values(
                    pairs.vals_b[kept], digits[1])), digits)
            add(no_rows(len(pairs)), block)
            continue
        # the statistics over A's own columns (the match is over both arms widened to one)
        rows = slice(None) if kept.all() else kept
        ka = pairs.ids_a.shape[1]
        stats.add_matched(matched.ids_a[rows, :ka], matched.va[rows, :ka], matched.ids_b[rows],
                          matched.shared[rows, :ka], matched.vb[rows, :ka],
                          matched.d[rows, :ka])
        add(judge_matched(matched, tol), block)
    return _Judged(**joined), stats.result(cluster=cluster)


def _judged_split(pairs: PairedRows, plain: PlainRows, kept: np.ndarray, tol: Tolerance,
                  digits: tuple[int | None, int | None], stats: StatsPass) -> RowDiffs:
    """The judgement of a block of row pairs some of which are plain (`plain_rows`): only the
    other rows are matched, and the statistics of the kept rows taken from both
    (`StatsPass.add_split`)."""
    rest = ~plain.rows
    matched = match_rows(pairs.rows(rest), *digits)  # None: every row is plain
    ka = pairs.ids_a.shape[1]
    if matched is None:
        empty = np.zeros((0, ka))
        other: tuple[np.ndarray, ...] = (empty, empty.astype(bool), empty, empty)
    else:
        at = kept[rest]
        other = (matched.va[at, :ka], matched.shared[at, :ka], matched.vb[at, :ka],
                 matched.d[at, :ka])
    stats.add_split(pairs.ids_a[kept], pairs.ids_b[kept], plain.rows[kept],
                    bool(plain.nonzero[kept & plain.rows].any()), other)
    return joined_rows(plain.rows, judge_plain(plain.listed[plain.rows]),
                       None if matched is None else judge_matched(matched, tol))


def distinct_sorted(x: np.ndarray) -> np.ndarray:
    """`np.unique(x)` of a 1-D array already in order: each value kept where it changes."""
    if x.size == 0:
        return x
    changes = np.empty(x.size, dtype=bool)
    changes[0] = True
    np.not_equal(x[1:], x[:-1], out=changes[1:])
    out: np.ndarray = x[changes]
    return out


def near_tie_rows(margin_a: np.ndarray, margin_b: np.ndarray,
                  near_tie: float | np.ndarray) -> np.ndarray:
    """The near-tie rule, the one place it is written: a flip at a row is a near-tie only when
    both arms' margins there are known and below `near_tie` (one value, or one per row when it
    is derived from the tolerance: `difftest.numerics.tolerance.derived_near_tie`). A flip where either
    margin is unknown is a hard difference. `compare` classifies flips with it and `verdict`
    asks it whether any compared row could still flip hard."""
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
    findings: LogitFindings | None = None
    unresolved: np.ndarray | None = None  # per row, as RowTable.logit_unresolved
    both: np.ndarray | None = None  # per row: both arms traced its logits (the pairs' rows)
    judged: _Judged | None = None  # per pair of logit rows (the rows in `both`)
    resolved: np.ndarray | None = None  # per row, as RowTable.resolved_logit_diff
    # per row and arm: that arm's logit of its own token minus its logit of the other arm's
    # token (the margin a flip between the two had to cross; see _flip_margins), nan where the
    # arm traced no logits there (None: no logits at all)
    flip_a: np.ndarray | None = None
    flip_b: np.ndarray | None = None
    # the logit line of each pair's rows (the rows in `both`) in arm A's and arm B's trace:
    # their top lists are gathered once, for the compared rows only (`_compared_stats`)
    line_a: np.ndarray | None = None
    line_b: np.ndarray | None = None
    # the statistics of the compared rows' pairs, taken in the judging pass (`_row_logit_diffs`)
    stats: LogitStats | None = None


Blocks = tuple[np.ndarray, np.ndarray]  # flat ids and their offsets


def _blocks(a: ArmTrace, b: ArmTrace, mode: AlignMode) -> tuple[Blocks, Blocks]:
    if mode is AlignMode.POSITION:
        return ((a.verifies.draft_ids, a.verifies.draft_off),
                (b.verifies.draft_ids, b.verifies.draft_off))
    return ((a.proposes.first_ids, a.proposes.first_off),
            (b.proposes.first_ids, b.proposes.first_off))


def _compared_rows(al: Alignment, blocks_a: Blocks, blocks_b: Blocks) -> _Rows:
    """One row per drafted position of each aligned block pair (the longer block's length)."""
    len_a = np.diff(blocks_a[1])[al.a_index]
    len_b = np.diff(blocks_b[1])[al.b_index]
    k = np.maximum(len_a, len_b)
    step = np.repeat(np.arange(len(al)), k)
    row = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)  # 0-based
    has_a = row < np.repeat(len_a, k)
    has_b = row < np.repeat(len_b, k)
    tok_a = np.full(row.size, -1)
    tok_b = np.full(row.size, -1)
    off_a = blocks_a[1][al.a_index][step] + row
    off_b = blocks_b[1][al.b_index][step] + row
    tok_a[has_a] = blocks_a[0][off_a[has_a]]
    tok_b[has_b] = blocks_b[0][off_b[has_b]]
    return _Rows(step, row, al.req[step], al.pos[step], has_a, has_b, tok_a, tok_b)


def _digits(trace: ArmTrace) -> int | None:
    """The arm's printed digits (difftest.numerics.resolution.arm_digits); lossless when its
    `[spec-config]` states a half-precision dtype and every printed value is a number of that
    dtype (a bf16 value printed at 9 digits often shows 7 or fewer, and would otherwise be read
    as a coarser print)."""
    digits = arm_digits(trace.logits.top_vals, trace.logits.sig_digits)
    if digits is None or digits >= LOSSLESS_DIGITS:
        return digits
    stated = trace_dtype(dict(trace.config.values))
    if stated is not None and stated[0] in (Dtype.FLOAT16, Dtype.BFLOAT16):
        listed = np.arange(trace.logits.top_vals.shape[1])[None, :] < trace.logits.width[:, None]
        if exact_in_half(trace.logits.top_vals[listed], stated[0].value):
            return LOSSLESS_DIGITS
    return digits


def _one_sided(a: ArmTrace, b: ArmTrace) -> OneSided | None:
    """Which arm alone traced logits (e.g. levels 3 and 1): they cannot be compared."""
    if bool(len(a.logits)) == bool(len(b.logits)):
        return None
    return OneSided(ArmSide.A if len(a.logits) else ArmSide.B, a.level, b.level)


def _row_logits(a: ArmTrace, b: ArmTrace, al: Alignment, rows: _Rows, tol: Tolerance,
                floor: NoiseFloor | None, compared: np.ndarray) -> _Logits:
    """Look up each compared row's logit lines in both arms (position mode only); `compared`:
    the rows that are compared (`compared_rows`), whose pairs the statistics are taken over."""
    n = rows.row.size
    margin_a, margin_b = np.full(n, np.nan), np.full(n, np.nan)
    logit_a, logit_b = np.full(n, np.nan), np.full(n, np.nan)
    abs_diff = np.full(n, np.nan)
    differs = np.zeros(n, dtype=bool)
    if al.mode is not AlignMode.POSITION or not (len(a.logits) or len(b.logits)):
        return _Logits(margin_a, margin_b, logit_a, logit_b, abs_diff, differs)
    one_sided = _one_sided(a, b)
    if one_sided is not None:
        none = Resolution(None, None)
        return _Logits(margin_a, margin_b, logit_a, logit_b, abs_diff, differs,
                       LogitFindings(None, none, none, 0, 0, 0, not_compared=one_sided,
                                     floor=floor))
    names = al.requests
    index = {name: i for i, name in enumerate(names)}
    map_a = np.array([index[name] for name in a.requests])  # both arms traced: not empty
    map_b = np.array([index[name] for name in b.requests])
    keys_of = _RowKeys.covering(len(names), a, b, pos=rows.pos, row=rows.row + 1)
    want = keys_of(rows.req, rows.pos, rows.row + 1)
    space = len(names) * keys_of.pos_span * keys_of.row_span  # every key is below it
    tables: list[np.ndarray] = []  # one table of keys, filled for each arm in turn
    la, sel_a = _find_rows(a, map_a, keys_of, space, want, tables)
    lb, sel_b = _find_rows(b, map_b, keys_of, space, want, tables)
    del tables
    margin_a[sel_a] = a.logits.margins[la[sel_a]]
    margin_b[sel_b] = b.logits.margins[lb[sel_b]]
    logit_a[sel_a] = a.logits.top_vals[la[sel_a], 0]
    logit_b[sel_b] = b.logits.top_vals[lb[sel_b], 0]
    both = sel_a & sel_b
    ia, ib = la[both], lb[both]
    digits = (_digits(a), _digits(b))
    keep = compared[both]
    judged, stats = _row_logit_diffs(a, ia, b, ib, tol, digits, keep, rows.req[both][keep])
    abs_diff[both] = judged.diff
    resolved = np.full(n, np.nan)
    resolved[both] = judged.resolved
    differs[both] = judged.differs
    # a row traced in one arm only is a difference in what was traced
    differs |= sel_a ^ sel_b
    unresolved = np.zeros(n, dtype=bool)
    unresolved[both] = judged.unresolved
    # the paired top lists and their statistics are taken in `compare`, over the rows that are
    # compared (`_compared_stats`); the counts too, over the rows that are judged
    findings = LogitFindings(
        stats=None, resolution_a=_resolution(a, ia, digits[0]),
        resolution_b=_resolution(b, ib, digits[1]),
        rows_disjoint=0, rows_unresolved=0, rows_one_quantum=0, floor=floor,
        pair_req=rows.req[both],
        max_abs_value=_largest_abs(b.logits.top_vals, ib))
    flip_a = _flip_margins(a, la, sel_a, rows.tok_a, rows.tok_b)
    flip_b = _flip_margins(b, lb, sel_b, rows.tok_b, rows.tok_a)
    return _Logits(margin_a, margin_b, logit_a, logit_b, abs_diff, differs, findings, unresolved,
                   both, judged, resolved, flip_a, flip_b, ia, ib, stats)


def _largest_abs(values: np.ndarray, lines: np.ndarray) -> float | None:
    """`finite_max(np.abs(values[lines]).ravel())`, the largest finite |value| of the lines
    (None: none is finite), a block of lines at a time: no copy of every line's values."""
    best = None
    for start in range(0, lines.size, _LOGIT_BLOCK_ROWS):
        top = finite_max(np.abs(values[lines[start:start + _LOGIT_BLOCK_ROWS]]).ravel())
        if top is not None and (best is None or top > best):
            best = top
    return best


def _flip_margins(arm: ArmTrace, at: np.ndarray, sel: np.ndarray, own: np.ndarray,
                  other: np.ndarray) -> np.ndarray:
    """Per row: |the arm's logit of its own token - its logit of the other arm's token|; where
    the other token is not in the arm's top list, its own value less the list's last (what the
    gap is at least); inf where its own token is not listed; nan where it traced no logits."""
    out = np.full(sel.size, np.nan)
    picked = np.flatnonzero(sel)
    for start in range(0, picked.size, _LOGIT_BLOCK_ROWS):  # the temporaries of a block only
        rows = picked[start:start + _LOGIT_BLOCK_ROWS]
        out[rows] = _flip_block(arm.logits, at[rows], own[rows], other[rows])
    return out


def _flip_block(lg: LogitRows, lines: np.ndarray, own_s: np.ndarray, other_s: np.ndarray
                ) -> np.ndarray:
    """`_flip_margins` of the rows whose logit lines are `lines` (each row's own and other
    token beside it)."""
    width = lg.width[lines]
    own_v = _value_of(lg.top_ids, lg.top_vals, lines, width, own_s)
    # where both arms drafted one token the other token's value is the own one's (the same
    # lookup): only the rows whose tokens differ look up the other, and read their list's last
    apart = np.flatnonzero(own_s != other_s)
    other_v = own_v.copy()
    below = np.full(own_v.size, np.nan)  # read only where the other token is unlisted
    if apart.size:
        other_v[apart] = _value_of(lg.top_ids, lg.top_vals, lines[apart], width[apart],
                                   other_s[apart])
        listed = np.arange(lg.top_vals.shape[1])[None, :] < width[apart][:, None]
        v = lg.top_vals[lines[apart]]
        last = np.min(np.where(listed & ~np.isnan(v), v, np.inf), axis=1)
        # the other token unlisted: its value is at most the last listed one, so the gap is at
        # least own - last (a lower bound; the logit comparison sees a larger drop as a
        # difference)
        with np.errstate(invalid="ignore"):
            below[apart] = np.where(np.isinf(last), np.nan, own_v[apart] - last)
    with np.errstate(invalid="ignore"):
        gap = np.where(np.isnan(other_v), below, np.abs(own_v - other_v))
    gap = np.where(np.isnan(own_v) | np.isnan(gap), np.inf, gap)
    # one listed entry: no margin is known at all (as for the top-1/top-2 margin)
    block: np.ndarray = np.where(width < 2, np.nan, gap)
    return block


def _value_of(top_ids: np.ndarray, top_vals: np.ndarray, lines: np.ndarray, width: np.ndarray,
              tokens: np.ndarray) -> np.ndarray:
    """Per line of `lines`: the value of the first listed entry holding the line's token (nan
    where none does), a column at a time from the last, so the first one is written last (the
    lines' ids read a column at a time, their values only where they hold the token: no
    (lines, K) copy of either)."""
    out = np.full(tokens.size, np.nan)
    hit = np.empty(tokens.size, dtype=bool)
    for j in range(top_ids.shape[1] - 1, -1, -1):
        np.equal(top_ids[lines, j], tokens, out=hit)
        hit &= j < width
        found = np.flatnonzero(hit)
        out[found] = top_vals[lines[found], j]
    return out


def _resolution(trace: ArmTrace, rows: np.ndarray, digits: int | None) -> Resolution:
    lg = trace.logits
    compared = np.zeros(len(lg), dtype=bool)
    compared[rows] = True
    return replace(resolution(lg.top_vals, lg.width, lg.sig_digits, compared, lg.magnitudes),
                   digits=digits)


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
            abs_logit_diff=_finite(lg.abs_diff[i]))
    return first, first_logit


def after_first_flip(step: np.ndarray, flipped: np.ndarray) -> np.ndarray:
    """Rows that come after a flipped row of the same block (rows are grouped by block, in
    row order): in a sequential block they were drafted from another token."""
    if step.size == 0:
        return np.zeros(0, dtype=bool)
    before = np.cumsum(flipped) - flipped  # flips strictly before each row, over all blocks
    start = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    at_start = np.repeat(before[start], np.diff(np.r_[start, step.size]))
    after: np.ndarray = (before - at_start) > 0
    return after


def flip_margins(lg: _Logits) -> tuple[np.ndarray, np.ndarray]:
    """Per row and arm, the margin the near-tie rule judges a flip on: the gap between the two
    flipped tokens, or the top-1/top-2 margin where that gap was not computed."""
    return (lg.flip_a if lg.flip_a is not None else lg.margin_a,
            lg.flip_b if lg.flip_b is not None else lg.margin_b)


def compared_rows(rows: _Rows, drafting: DraftingKind) -> np.ndarray:
    """The rows `row_status` finds same, a near-tie flip or a hard flip, known before any logit
    is looked at: both arms drafted the row and, in a sequential block, no flip came before it
    (tests/analysis/test_compare_rows.py holds the two alike)."""
    both: np.ndarray = rows.has_a & rows.has_b
    if drafting is DraftingKind.SEQUENTIAL:
        both &= ~after_first_flip(rows.step, both & (rows.tok_a != rows.tok_b))
    return both


def row_status(rows: _Rows, lg: _Logits, near_tie: float | np.ndarray,
               drafting: DraftingKind) -> np.ndarray:
    """The status of each row of the paired blocks.

    A row both arms drafted is same, a near-tie flip or a hard flip; a row one arm drafted is
    unmatched on that side (a draft-length difference). In a sequential block, every row after
    the first flip (near-tie or hard) ran on another token: context-diverged, not compared."""
    both = rows.has_a & rows.has_b
    flipped = both & (rows.tok_a != rows.tok_b)
    status = np.full(rows.row.size, SAME, dtype=np.int8)
    status[flipped] = DIFFER
    # a near-tie is judged on the margin between the two flipped tokens in each arm, not on
    # the arm's top-1/top-2 margin: the other token may sit far below the second
    flip_a, flip_b = flip_margins(lg)
    status[flipped & near_tie_rows(flip_a, flip_b, near_tie)] = NEAR_TIE
    status[rows.has_a & ~rows.has_b] = UNMATCHED_A
    status[rows.has_b & ~rows.has_a] = UNMATCHED_B
    if drafting is DraftingKind.SEQUENTIAL:
        status[after_first_flip(rows.step, flipped)] = DIVERGED
    return status


class Context(TypedDict, total=False):
    """What the caller knows of a comparison besides its rules: the arms' steps already paired
    (a teacher-forced pair is aligned knowing B ran on A's stream), how the engine drafts
    (the rules' drafting, else the traces' headers, else block) and who said so (config, flag,
    traces or default)."""

    alignment: Alignment | None
    drafting: DraftingKind
    drafting_source: DraftingSource | str


def compare(a: ArmTrace, b: ArmTrace, rules: Rules = BARE, *, floor: NoiseFloor | None = None,
            **context: Unpack[Context]) -> Comparison:
    """Compare every aligned block row under `rules` (its near_tie, atol and rtol as applied);
    nothing here knows what was expected. `floor` is arm A's A/A noise floor, when its reruns
    were measured. A `near_tie` of None derives it per row from the tolerance
    (`difftest.core.thresholds`)."""
    unknown = sorted(set(context) - set(Context.__annotations__))
    if unknown:  # a rule passed loose (near_tie=...) belongs in `rules`
        raise TypeError(f"compare() got unexpected keyword argument(s): {', '.join(unknown)}")
    al = context.get("alignment") or align(a, b)
    drafting = context.get("drafting") or rules.drafting or DraftingKind.BLOCK
    drafting_source = DraftingSource(context.get("drafting_source", DraftingSource.DEFAULT))
    if rules.drafting is not drafting:
        rules = replace(rules, drafting=drafting)  # the kind the rows are compared as
    near_tie, atol, rtol = rules.near_tie, rules.atol, rules.rtol
    blocks_a, blocks_b = _blocks(a, b, al.mode)
    rows = _compared_rows(al, blocks_a, blocks_b)
    tol = Tolerance(atol, rtol, floor.floor if floor is not None else 0.0)
    # only compared rows count: a diverged row's logits ran on another token, and an unmatched
    # row's logits exist in one arm only because its token does
    compared = compared_rows(rows, drafting)
    lg = _row_logits(a, b, al, rows, tol, floor, compared)

    tie = derived_near_tie(tol, lg.logit_b) if near_tie is None else near_tie
    status = row_status(rows, lg, tie, drafting)
    lg = replace(lg, differs=lg.differs & compared)
    findings = _judged_counts(lg.findings, lg, compared)
    if floor is not None:
        lg, findings = _against_floor(lg, findings, floor, compared)
        status, findings = _flips_against_floor(status, lg, findings, floor, rows.req,
                                                request_names(al.requests, rows.req))
    findings = _compared_stats(a, b, findings, lg, compared)
    # the pairs' judgement is counted: let it go before the table is built and ordered
    lg = replace(lg, judged=None)
    admitted = lg.margin_b[status == NEAR_TIE]

    def blocks(mask: np.ndarray) -> np.ndarray:
        """The aligned blocks with at least one row in `mask`."""
        return distinct_sorted(rows.step[mask])  # rows come block by block

    hard = blocks(status == DIFFER)
    soft = np.setdiff1d(blocks(status == NEAR_TIE), hard)

    first, first_logit = _first_differences(al.requests, rows, lg, status)
    table = _with_uncompared(
        RowTable(req=rows.req, pos=rows.pos, row=rows.row + 1,  # int64 from the alignment
                 token_a=rows.tok_a, token_b=rows.tok_b, has_a=rows.has_a, has_b=rows.has_b,
                 status=status, margin_a=lg.margin_a, margin_b=lg.margin_b,
                 logit_a=lg.logit_a, logit_b=lg.logit_b, abs_logit_diff=lg.abs_diff,
                 logit_differs=lg.differs,
                 logit_unresolved=(lg.unresolved if lg.unresolved is not None
                                   else np.zeros(rows.row.size, dtype=bool)) & compared,
                 resolved_logit_diff=(lg.resolved if lg.resolved is not None
                                      else np.full(rows.row.size, np.nan)),
                 flip_margin_a=flip_margins(lg)[0], flip_margin_b=flip_margins(lg)[1]),
        a, b, al, blocks_a, blocks_b)
    return Comparison(
        mode=al.mode, requests=al.requests, rows=table,
        blocks_compared=blocks(rows.has_a & rows.has_b).size,
        blocks_differing=hard.size, blocks_near_tie=soft.size,
        blocks_logit_differing=blocks(lg.differs).size, logit_rows_compared=int(
            (compared & ~np.isnan(lg.abs_diff)).sum()),
        max_abs_logit_diff=(findings.stats.max_abs if findings is not None
                            and findings.stats is not None else None),
        unmatched_a=int(al.unmatched_a.size), unmatched_b=int(al.unmatched_b.size),
        context_diverged=int(al.diverged_a.size), first_difference=first,
        first_logit_difference=first_logit, divergences=al.divergences, notes=al.notes,
        rules=rules, coverage_gaps=al.coverage_gaps,
        near_tie_admitted=float(admitted.max()) if admitted.size else None,
        logits=findings, drafting_source=drafting_source,
        draft_length_blocks=blocks((status == UNMATCHED_A) | (status == UNMATCHED_B)).size,
        blocks_drafted=blocks(np.ones(rows.step.size, dtype=bool)).size,
        draft_length_rows_a=int((status == UNMATCHED_A).sum()),
        draft_length_rows_b=int((status == UNMATCHED_B).sum()),
        rows_context_diverged=int((status == DIVERGED).sum()),
        findings_a=a.findings, findings_b=b.findings,
        steps_lost_a=int(al.lost_a.size), steps_lost_b=int(al.lost_b.size),
        rows_lost=_lost_rows(al, blocks_a, blocks_b),
        unmatched_lost_a=int(np.isin(al.unmatched_a, al.lost_a).sum()),
        unmatched_lost_b=int(np.isin(al.unmatched_b, al.lost_b).sum()))


def _judged_counts(findings: LogitFindings | None, lg: _Logits, compared: np.ndarray
                   ) -> LogitFindings | None:
    """The per-row counts of the logit judgement, over the compared rows only."""
    j = lg.judged
    if findings is None or j is None or lg.both is None:
        return findings
    keep = compared[lg.both]
    return replace(findings, rows_disjoint=int((j.disjoint & keep).sum()),
                   rows_one_quantum=int((j.one_quantum & keep).sum()),
                   values_nonfinite_both=int(j.nonfinite_both[keep].sum()),
                   # a shared value non-finite in one arm only is the one way to an infinite
                   # row difference (finite values print finite differences)
                   rows_nonfinite_one=int((np.isposinf(j.diff) & keep).sum()))


def _against_floor(lg: _Logits, findings: LogitFindings | None, floor: NoiseFloor,
                   compared: np.ndarray) -> tuple[_Logits, LogitFindings | None]:
    """Judge the compared rows' logit values above the floor: a row with a value beyond the
    noise band counts; the rest count only when the excess test says B is no rerun of A."""
    j = lg.judged
    if findings is None or j is None or lg.both is None:
        return lg, findings
    keep = compared[lg.both]
    excess = excess_test(int(j.exceed[keep & ~j.disjoint].sum()), int(j.values[keep].sum()),
                         floor)
    beyond = keep & (j.beyond > 0)
    within = 0
    differs = lg.differs.copy()
    if not excess.counts:
        noise_only = keep & j.differs & ~j.disjoint & (j.exceed > 0) & ~beyond
        within = int(noise_only.sum())
        rows = np.flatnonzero(lg.both)[noise_only]
        differs[rows] = False
    return replace(lg, differs=differs), replace(
        findings, excess=excess, rows_within_noise=within,
        rows_beyond_band=int((beyond & ~j.disjoint).sum()))


def flip_size(margin_a: np.ndarray, margin_b: np.ndarray) -> np.ndarray:
    """The least logit move a flip needs (nan where a margin is unknown): A ranked its token
    above B's by at least margin_a, B ranked them the other way by at least margin_b, so the
    two logits moved apart by margin_a + margin_b and one of them by at least half of that."""
    size: np.ndarray = (margin_a + margin_b) / 2
    return size


def _flips_against_floor(status: np.ndarray, lg: _Logits, findings: LogitFindings | None,
                         floor: NoiseFloor, req: np.ndarray, names: Sequence[str]
                         ) -> tuple[np.ndarray, LogitFindings]:
    """Judge the hard flips against A's flips over its reruns: those larger than the noise band
    count whatever any test says; the others only when B flips significantly more often than A
    (by the request-clustered test where both sides' flips are known per request, else the
    exact test)."""
    hard = status == DIFFER
    near = status == NEAR_TIE
    counted = np.isin(status, (SAME, DIFFER, NEAR_TIE))
    with np.errstate(invalid="ignore"):
        big = hard & (flip_size(lg.margin_a, lg.margin_b) > NOISE_BAND * floor.floor)
    flipped = hard | near
    test = flip_test(int(hard.sum()), int(counted.sum()), floor, near_ties=int(near.sum()),
                     by_request_b=request_flips(req[counted], names, flipped[counted]))
    status = status.copy()
    if not test.counts:
        status[hard & ~big] = NOISE_FLIP
    if findings is None:
        none = Resolution(None, None)
        findings = LogitFindings(None, none, none, 0, 0, 0, floor=floor)
    return status, replace(findings, flips=test, flips_beyond_band=int(big.sum()))


def _lost_rows(al: Alignment, blocks_a: Blocks, blocks_b: Blocks) -> int:
    """The drafted rows of the lost steps: none of them could be compared."""
    return int(np.diff(blocks_a[1])[al.lost_a].sum() + np.diff(blocks_b[1])[al.lost_b].sum())


def _compared_stats(a: ArmTrace, b: ArmTrace, findings: LogitFindings | None, lg: _Logits,
                    compared: np.ndarray) -> LogitFindings | None:
    """The compared rows' paired top lists and their statistics. Their `max_abs` is the
    comparison's `max_abs_logit_diff`: one figure, one definition."""
    if findings is None or lg.line_a is None or lg.line_b is None or lg.both is None:
        return findings
    keep = compared[lg.both]
    digits = (findings.resolution_a.digits, findings.resolution_b.digits)
    taken = TakenRows(a.logits, lg.line_a[keep], b.logits, lg.line_b[keep], digits)
    pair_req = findings.pair_req[keep] if findings.pair_req is not None else None
    # the statistics were taken a block at a time in the judging pass; the top lists are kept
    # for the rates and the floor, gathered when they first read them
    stats = lg.stats
    assert stats is not None and stats.rows == keep.sum()
    unresolved = lg.unresolved if lg.unresolved is not None else np.zeros(0, dtype=bool)
    return replace(findings, pairs=taken, pair_req=pair_req, stats=stats,
                   rows_unresolved=int((unresolved & compared).sum()))


@dataclass(frozen=True)
class TakenRows:
    """Logit lines `ia` of arm A beside lines `ib` of arm B: the paired top lists (`PairedRows`'
    arrays, each gathered when first read, and blocks of them gathered when asked for); at 9+
    digits the values float32-exact, as the tolerance sees them. The rates read only the ids,
    so the values of a whole comparison are gathered only where a noise floor pools them."""

    a: LogitRows
    ia: np.ndarray
    b: LogitRows
    ib: np.ndarray
    digits: tuple[int | None, int | None]

    def __len__(self) -> int:
        return int(self.ia.size)

    def block(self, at: slice) -> PairedRows:
        ia, ib = self.ia[at], self.ib[at]
        return PairedRows(self.a.top_ids[ia], exact_values(self.a.top_vals[ia], self.digits[0]),
                          self.b.top_ids[ib], exact_values(self.b.top_vals[ib], self.digits[1]))

    @cached_property
    def ids_a(self) -> np.ndarray:
        out: np.ndarray = self.a.top_ids[self.ia]
        return out

    @cached_property
    def vals_a(self) -> np.ndarray:
        return exact_values(self.a.top_vals[self.ia], self.digits[0])

    @cached_property
    def ids_b(self) -> np.ndarray:
        out: np.ndarray = self.b.top_ids[self.ib]
        return out

    @cached_property
    def vals_b(self) -> np.ndarray:
        return exact_values(self.b.top_vals[self.ib], self.digits[1])

    def widened(self) -> PairedRows:
        return PairedRows(self.ids_a, self.vals_a, self.ids_b, self.vals_b).widened()

    def first_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Each pair's first id in A's list and in B's (`ids_a[:, 0]`, `ids_b[:, 0]`), without
        gathering the whole lists."""
        first_a: np.ndarray = self.a.top_ids[self.ia, 0]
        first_b: np.ndarray = self.b.top_ids[self.ib, 0]
        return first_a, first_b


def _opt(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _finite(x: float) -> float | None:
    """A size only where there is one: a nan against a number, or top lists sharing no id,
    differ without a finite size."""
    return float(x) if np.isfinite(x) else None


def _with_uncompared(rows: RowTable, a: ArmTrace, b: ArmTrace, al: Alignment,
                     blocks_a: tuple[np.ndarray, np.ndarray],
                     blocks_b: tuple[np.ndarray, np.ndarray]) -> RowTable:
    """Append the rows of unmatched and diverged steps, so the export accounts for every block."""
    index = {n: i for i, n in enumerate(al.requests)}
    parts = [rows]

    def block_rows(trace: ArmTrace, blocks: tuple[np.ndarray, np.ndarray], steps: np.ndarray,
                   is_a: bool, status: int) -> RowTable:
        ids, off = blocks
        lengths = np.diff(off)[steps]
        step = np.repeat(np.arange(steps.size), lengths)
        r = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        tokens = ids[off[steps][step] + r].astype(np.int64)
        if al.mode is AlignMode.POSITION:
            rmap = np.array([index[n] for n in trace.requests], dtype=np.int64)
            req = rmap[trace.verifies.req[steps]][step]
            pos = trace.verifies.pos[steps][step]
        else:
            # the ordinal among proposing steps, as for the compared rows, not the line index
            ordinal = np.searchsorted(np.flatnonzero(trace.proposes.proposing), steps)
            req = np.zeros(step.size, np.int64)
            pos = ordinal[step]
        n = r.size
        none = np.full(n, -1)
        nan = np.full(n, np.nan)
        return RowTable(req=req, pos=pos, row=r + 1,
                        token_a=tokens if is_a else none, token_b=none if is_a else tokens,
                        has_a=np.full(n, is_a), has_b=np.full(n, not is_a),
                        status=np.full(n, status, dtype=np.int8), margin_a=nan, margin_b=nan.copy(),
                        logit_a=nan.copy(), logit_b=nan.copy(), abs_logit_diff=nan.copy(),
                        logit_differs=np.zeros(n, dtype=bool),
                        logit_unresolved=np.zeros(n, dtype=bool),
                        resolved_logit_diff=nan.copy(), flip_margin_a=nan.copy(),
                        flip_margin_b=nan.copy())

    parts += [block_rows(a, blocks_a, al.unmatched_a, True, UNMATCHED_A),
              block_rows(b, blocks_b, al.unmatched_b, False, UNMATCHED_B)]
    # diverged steps are pairs at the same (req, pos), in the same order
    da = block_rows(a, blocks_a, al.diverged_a, True, DIVERGED)
    db = block_rows(b, blocks_b, al.diverged_b, False, DIVERGED)
    if len(da) == len(db):  # drafts of one length: show both tokens on one row
        parts.append(replace(da, token_b=db.token_b, has_b=db.has_b))
    else:
        parts += [da, db]
    fields = RowTable.__dataclass_fields__
    if any(len(p) for p in parts[1:]):
        rows = RowTable(**{name: np.concatenate([getattr(p, name) for p in parts])
                           for name in fields})
    else:  # the compared rows alone: not copied, only given the types joining would give
        rows = RowTable(**{name: _as(getattr(rows, name),
                                     np.result_type(*[getattr(p, name) for p in parts]))
                           for name in fields})
    order = _block_order(rows.req, rows.pos, rows.row)
    if order is None:
        order = np.lexsort((rows.row, rows.pos, rows.req))
    if np.array_equal(order, np.arange(order.size)):
        return rows  # in order already
    return RowTable(**{name: getattr(rows, name)[order] for name in fields})


def _block_order(req: np.ndarray, pos: np.ndarray, row: np.ndarray) -> np.ndarray | None:
    """`np.lexsort((row, pos, req))` of a table whose rows come a block at a time: where each
    (req, pos) is one run of rows in row order, the runs are sorted (a key per block, not per
    row) and each keeps its rows. None where that does not hold (a key in two runs, or rows out
    of order within one): the rows must then be sorted themselves."""
    n = req.size
    if n == 0:
        return np.zeros(0, dtype=np.intp)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = (req[1:] != req[:-1]) | (pos[1:] != pos[:-1])
    if np.any((row[1:] < row[:-1]) & ~new[1:]):
        return None
    starts = np.flatnonzero(new)
    lengths = np.diff(np.append(starts, n))
    runs = np.lexsort((pos[starts], req[starts]))
    run_req, run_pos = req[starts][runs], pos[starts][runs]
    if np.any((run_req[1:] == run_req[:-1]) & (run_pos[1:] == run_pos[:-1])):
        return None
    length = lengths[runs]
    order: np.ndarray = np.repeat(starts[runs] - (np.cumsum(length) - length), length) \
        + np.arange(n)
    return order


def _as(x: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    return x if x.dtype == dtype else x.astype(dtype)
