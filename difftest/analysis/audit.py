"""Informativeness of one arm's trace: could a comparison through it ever have failed?

A token comparison is only as good as the variety of the drafts it compares: a fixture that drafts
one id everywhere agrees with itself whatever the attention computes. And a token comparison is
blind to any logit perturbation smaller than half the row's top-1/top-2 margin. This module
measures both, plus whether traced logits could serve as an instrument of their own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from difftest.config import AuditThresholds
from difftest.core.kinds import AuditVerdict
from difftest.core.model import ArmTrace
from difftest.numerics.resolution import resolution
from difftest.numerics.rows import row_all

__all__ = ["AuditThresholds", "TraceAudit", "audit_trace", "drafted_blocks", "entropy_bits"]


@dataclass
class DraftedBlocks:
    """The drafted blocks of one arm, one per proposing step of one request."""

    source: str  # "verify" ([SPECTRACE] draft lists) or "propose" (first row only)
    ids: np.ndarray  # int32, flat
    offsets: np.ndarray  # int64, len n+1

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def matrix(self) -> np.ndarray | None:
        """(n, k) when every block has the same k, else None."""
        lengths = self.lengths
        if len(self) == 0 or lengths.min() != lengths.max():
            return None
        return self.ids.reshape(len(self), int(lengths[0]))


def drafted_blocks(trace: ArmTrace) -> DraftedBlocks:
    """Blocks from the verify lines when present (every row, k=0 verifies left out), else from
    propose `first` lists."""
    if len(trace.verifies):
        # a verify with k=0 drafted nothing: it is no block
        lengths = np.diff(trace.verifies.draft_off)
        drafted = lengths[lengths > 0]
        offsets = np.zeros(drafted.size + 1, dtype=np.int64)
        np.cumsum(drafted, out=offsets[1:])
        return DraftedBlocks("verify", trace.verifies.draft_ids, offsets)
    p = trace.proposes
    keep = np.flatnonzero(p.proposing)
    lengths = np.diff(p.first_off)[keep]
    offsets = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = (np.concatenate([p.first(int(i)) for i in keep]) if len(keep)
           else np.zeros(0))  # cast below
    return DraftedBlocks("propose", ids.astype(np.int32), offsets)


def entropy_bits(ids: np.ndarray) -> float:
    """Shannon entropy of the empirical distribution of ids, in bits (0 for no or one id)."""
    return _entropy(id_counts(ids))


def _entropy(counts: np.ndarray) -> float:
    p = counts / counts.sum()
    return float(max(0.0, -(p * np.log2(p)).sum()))


_DENSE_IDS = 1 << 16  # ids below this (and 4 per id) are counted in bins of their own


def id_counts(ids: np.ndarray) -> np.ndarray:
    """How often each distinct id occurs, in the order of the sorted ids (`np.unique`'s
    counts): token ids, small and non-negative, are counted in bins of their own (no sort)."""
    ids = np.asarray(ids)
    if (ids.dtype.kind == "i" or ids.dtype.kind == "u" and ids.dtype.itemsize < 8) \
            and ids.ndim == 1 and ids.size:
        if int(ids.min()) >= 0 and int(ids.max()) < _DENSE_IDS + 4 * ids.size:
            counts = np.bincount(ids)
            out: np.ndarray = counts[counts > 0]
            return out
    _, counts = np.unique(ids, return_counts=True)
    return np.asarray(counts)


@dataclass
class TraceAudit:
    """What `difftest audit` reports for one trace; `verdict` is informative or uninformative."""

    path: str
    level: int
    requests: int
    blocks: int
    block_source: str
    distinct_ids: int
    entropy_bits: float
    row_entropy_bits: list[float]
    constant_blocks: bool  # every block is the same block
    uniform_blocks: int  # blocks that repeat one id at every row (`19 19 19`)
    acceptance_min: int | None
    acceptance_max: int | None
    acceptance_mean: float | None
    logit_rows: int
    nonfinite_rows: int
    min_margin: float | None
    median_margin: float | None
    blind_radius_min: float | None
    blind_radius_median: float | None
    logits_vary: bool
    logit_spread: float | None  # max - min of every finite traced logit
    tokens_informative: bool
    logits_informative: bool
    verdict: AuditVerdict
    reasons: list[str] = field(default_factory=list)
    token_blind_reasons: list[str] = field(default_factory=list)  # why tokens cannot fail
    logit_blind_reasons: list[str] = field(default_factory=list)  # why logits cannot fail
    findings: int = 0
    skipped_lines: int = 0
    logit_digits: int | None = None  # significant digits the logits are printed with
    logit_resolution: float | None = None  # coarsest quantum of the traced logits
    # the smallest logit change a comparison of this trace could see, without a tolerance:
    # its resolution (a comparison's tolerance or noise floor can only raise it)
    logit_blind_radius: float | None = None

    @property
    def informative(self) -> bool:
        return self.verdict is AuditVerdict.INFORMATIVE

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


@dataclass
class TokenMeasures:
    """How much a set of drafted blocks could show: the token half of an audit."""

    blocks: int
    distinct_ids: int
    entropy_bits: float
    row_entropy_bits: list[float]
    constant_blocks: bool
    uniform_blocks: int
    min_margin: float | None
    median_margin: float | None
    blind_radius_min: float | None
    blind_radius_median: float | None
    informative: bool
    reasons: list[str]
    blind_reasons: list[str]


def measure_tokens(blocks: DraftedBlocks, margins: np.ndarray | None,
                   th: AuditThresholds, what: str = "drafted") -> TokenMeasures:
    """Could a token comparison of these blocks fail? `margins` are the top-1/top-2 margins of
    the rows behind them (None when no logits were traced)."""
    n = len(blocks)
    counts = id_counts(blocks.ids)  # the distinct ids and their entropy from one count
    distinct = int(counts.size)
    pooled = _entropy(counts)
    mat = blocks.matrix()
    row_entropy = [entropy_bits(mat[:, r]) for r in range(mat.shape[1])] if mat is not None else []
    if mat is not None:
        constant = bool(np.all(mat == mat[0]))
        uniform = int(np.sum(row_all(mat == mat[:, :1])))
    else:
        # blocks of different lengths (or none) are never all the same block
        pieces = [blocks.ids[blocks.offsets[i]:blocks.offsets[i + 1]] for i in range(n)]
        constant = False
        uniform = sum(1 for p in pieces if np.unique(p).size <= 1)
    reasons: list[str] = []
    blind: list[str] = []
    if n == 0:
        reasons.append(f"no {what} blocks: nothing could be compared")
        blind.append(f"no {what} blocks")
    else:
        if distinct < th.min_distinct_ids:
            reasons.append(f"only {distinct} distinct {what} id(s) (need {th.min_distinct_ids}): "
                           "a token comparison compares a constant with a constant")
            blind.append(f"{distinct} distinct {what} id(s)")
        if constant and n > 1:
            block = blocks.ids[blocks.offsets[0]:blocks.offsets[1]].tolist()
            reasons.append(f"every block is the same block {block}: drafts do not depend on "
                           "the context")
            blind.append(f"every block is {block}")
        if pooled < th.min_entropy_bits:
            reasons.append(f"{what}-id entropy {pooled:.3f} bits is below "
                           f"{th.min_entropy_bits:g} bits")
            blind.append(f"{what}-id entropy {pooled:.3f} bits")
        if not blind:
            reasons.append(f"drafts vary: {distinct} distinct ids, entropy {pooled:.2f} bits")
    finite = margins[np.isfinite(margins)] if margins is not None else np.zeros(0)
    min_margin: float | None = None
    median_margin: float | None = None
    blind_min: float | None = None
    blind_median: float | None = None
    if finite.size:
        min_margin, median_margin = float(finite.min()), float(np.median(finite))
        blind_min, blind_median = min_margin / 2, median_margin / 2
        if blind_min > th.max_blind_radius:
            if not blind:
                reasons.append(
                    f"every block row has a top-1/top-2 margin of at least {_fmt(min_margin)}: "
                    f"no logit perturbation below {_fmt(blind_min)} could move a token "
                    f"(blind radius above {th.max_blind_radius:g})")
            blind.append(f"smallest blind radius {_fmt(blind_min)} above {th.max_blind_radius:g}")
        else:
            reasons.append(f"smallest margin {_fmt(min_margin)}: a perturbation of "
                           f"{_fmt(blind_min)} could flip a token (median blind radius "
                           f"{_fmt(blind_median)})")
    return TokenMeasures(n, distinct, pooled, row_entropy, constant, uniform, min_margin,
                         median_margin, blind_min, blind_median, not blind, reasons, blind)


def _spread(rows: np.ndarray) -> float | None:
    """The largest finite value less the smallest (None: none is finite), without gathering
    the finite values: a masked maximum and minimum. Where they are equal (every finite value
    one number, or zeros of either sign) the values are gathered and reduced as they were, so
    that the sign of a zero difference is theirs."""
    finite = np.isfinite(rows)
    if not finite.any():
        return None
    high = float(np.max(rows, where=finite, initial=-np.inf))
    low = float(np.min(rows, where=finite, initial=np.inf))
    if high == low:
        values = rows[finite]
        return float(values.max() - values.min())
    return high - low


_VARY_ROWS = 1 << 12  # rows compared with the first per pass of `_varies`


def _varies(rows: np.ndarray) -> bool:
    """`np.any(rows != rows[0])`, a few rows at a time: the first rows that differ answer."""
    first = rows[0]
    for start in range(0, rows.shape[0], _VARY_ROWS):
        if np.any(rows[start:start + _VARY_ROWS] != first):
            return True
    return False


def audit_trace(trace: ArmTrace, thresholds: AuditThresholds | None = None) -> TraceAudit:
    """Measure a trace's informativeness and explain the verdict in sentences."""
    th = thresholds or AuditThresholds()
    blocks = drafted_blocks(trace)
    lg = trace.logits
    finite = lg.finite
    tokens = measure_tokens(blocks, lg.margins[finite], th)  # empty without logits
    reasons: list[str] = []
    if len(blocks):
        src = "verify lines" if blocks.source == "verify" else "propose lines (first row only)"
        reasons.append(f"{len(blocks)} drafted blocks read from {src}")
    reasons += tokens.reasons

    v = trace.verifies
    acc_min = int(v.acc.min()) if len(v) else None
    acc_max = int(v.acc.max()) if len(v) else None
    acc_mean = float(v.acc.mean()) if len(v) else None
    if acc_max is not None and acc_max == 0:
        reasons.append("every verify rejected all drafts (acc=0): acceptance carries no signal")
    elif acc_min is not None and len(v) and bool(np.all(v.acc == v.k)):
        reasons.append("every verify accepted every draft: acceptance carries no signal")

    logits_vary = False
    spread = None
    logit_blind: list[str] = []
    if int(finite.sum()) >= 1:
        every = bool(finite.all())  # the usual trace: its rows as they are, not copied
        rows = lg.top_vals if every else lg.top_vals[finite]
        ids = lg.top_ids if every else lg.top_ids[finite]
        spread = _spread(rows)
        logits_vary = _varies(rows) or _varies(ids)
    if len(lg):
        nonfinite = int((~finite).sum())
        if nonfinite:
            reasons.append(f"{nonfinite} logit row(s) hold nan/inf and are left out")
        if logits_vary:
            reasons.append(f"{len(lg)} block-logit rows are traced and vary: an exact logit "
                           "comparison can see what tokens cannot")
        else:
            reasons.append("the traced block logits are all the same row: they carry no signal")
            logit_blind.append("the traced logits do not vary")
    else:
        reasons.append("no block logits traced (level < 3): only tokens can be compared")
        logit_blind.append("no block logits traced")

    res = (resolution(lg.top_vals, lg.width, lg.sig_digits, finite, lg.magnitudes) if len(lg)
           else None)
    if res is not None and res.quantum is not None:
        token_radius = ("unknown" if tokens.blind_radius_min is None
                        else _fmt(tokens.blind_radius_min))
        reasons.append(f"logit blind radius {res.quantum:.0e} (the printed resolution, "
                       f"{res.digits} significant digits): no logit change below it can show; "
                       f"token blind radius {token_radius}")

    informative = tokens.informative or logits_vary
    if informative and not tokens.informative:
        reasons.append("informative through the logits only: a token comparison alone would "
                       "have been blind")
    return TraceAudit(
        path=trace.path, level=trace.level, requests=len(trace.requests), blocks=len(blocks),
        block_source=blocks.source, distinct_ids=tokens.distinct_ids,
        entropy_bits=tokens.entropy_bits, row_entropy_bits=tokens.row_entropy_bits,
        constant_blocks=tokens.constant_blocks, uniform_blocks=tokens.uniform_blocks,
        acceptance_min=acc_min, acceptance_max=acc_max, acceptance_mean=acc_mean,
        logit_rows=len(lg), nonfinite_rows=int((~finite).sum()),
        min_margin=tokens.min_margin, median_margin=tokens.median_margin,
        blind_radius_min=tokens.blind_radius_min, blind_radius_median=tokens.blind_radius_median,
        logits_vary=logits_vary, logit_spread=spread, tokens_informative=tokens.informative,
        logits_informative=logits_vary,
        verdict=AuditVerdict.INFORMATIVE if informative else AuditVerdict.UNINFORMATIVE,
        reasons=reasons, token_blind_reasons=tokens.blind_reasons,
        logit_blind_reasons=logit_blind, findings=len(trace.findings),
        skipped_lines=trace.lines_skipped,
        logit_digits=res.digits if res is not None else None,
        logit_resolution=res.quantum if res is not None else None,
        logit_blind_radius=res.quantum if res is not None else None)
