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
from difftest.model import ArmTrace

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
    """Blocks from the verify lines when present (every row), else from propose `first` lists."""
    if len(trace.verifies):
        return DraftedBlocks("verify", trace.verifies.draft_ids, trace.verifies.draft_off)
    p = trace.proposes
    keep = np.flatnonzero(p.proposing)
    lengths = np.diff(p.first_off)[keep]
    offsets = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = (np.concatenate([p.first(int(i)) for i in keep]) if len(keep)
           else np.zeros(0, dtype=np.int32))
    return DraftedBlocks("propose", ids.astype(np.int32), offsets)


def entropy_bits(ids: np.ndarray) -> float:
    """Shannon entropy of the empirical distribution of ids, in bits (0 for no or one id)."""
    if ids.size == 0:
        return 0.0
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    return float(max(0.0, -(p * np.log2(p)).sum()))


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
    tokens_informative: bool
    logits_informative: bool
    verdict: str
    reasons: list[str] = field(default_factory=list)
    token_blind_reasons: list[str] = field(default_factory=list)  # why tokens cannot fail
    logit_blind_reasons: list[str] = field(default_factory=list)  # why logits cannot fail
    findings: int = 0
    skipped_lines: int = 0

    @property
    def informative(self) -> bool:
        return self.verdict == "informative"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def audit_trace(trace: ArmTrace, thresholds: AuditThresholds | None = None) -> TraceAudit:
    """Measure a trace's informativeness and explain the verdict in sentences."""
    th = thresholds or AuditThresholds()
    blocks = drafted_blocks(trace)
    reasons: list[str] = []
    n = len(blocks)
    distinct = int(np.unique(blocks.ids).size)
    pooled = entropy_bits(blocks.ids)
    mat = blocks.matrix()
    row_entropy = [entropy_bits(mat[:, r]) for r in range(mat.shape[1])] if mat is not None else []
    if mat is not None:
        constant = bool(np.all(mat == mat[0]))
        uniform = int(np.sum(np.all(mat == mat[:, :1], axis=1)))
    else:
        first = blocks.ids[blocks.offsets[0]:blocks.offsets[1]] if n else None
        constant = n > 0 and all(
            np.array_equal(blocks.ids[blocks.offsets[i]:blocks.offsets[i + 1]], first)
            for i in range(n))
        uniform = sum(
            1 for i in range(n)
            if np.unique(blocks.ids[blocks.offsets[i]:blocks.offsets[i + 1]]).size <= 1)

    v = trace.verifies
    acc_min = int(v.acc.min()) if len(v) else None
    acc_max = int(v.acc.max()) if len(v) else None
    acc_mean = float(v.acc.mean()) if len(v) else None

    lg = trace.logits
    finite = lg.finite
    margins = lg.margins[finite] if len(lg) else np.zeros(0)
    margins = margins[np.isfinite(margins)]
    min_margin = float(margins.min()) if margins.size else None
    median_margin = float(np.median(margins)) if margins.size else None
    logits_vary = False
    if int(finite.sum()) >= 2:
        rows = lg.top_vals[finite]
        ids = lg.top_ids[finite]
        with np.errstate(invalid="ignore"):
            logits_vary = bool(np.any(rows != rows[0]) or np.any(ids != ids[0]))

    # -- tokens ---------------------------------------------------------------------------------
    tokens_ok = True
    token_blind: list[str] = []
    logit_blind: list[str] = []
    if n == 0:
        tokens_ok = False
        reasons.append("the trace holds no drafted blocks: nothing could be compared")
        token_blind.append("no drafted blocks")
    else:
        src = "verify lines" if blocks.source == "verify" else "propose lines (first row only)"
        reasons.append(f"{n} drafted blocks read from {src}")
        if distinct < th.min_distinct_ids:
            tokens_ok = False
            reasons.append(f"only {distinct} distinct drafted id(s) (need {th.min_distinct_ids}): "
                           "a token comparison compares a constant with a constant")
            token_blind.append(f"{distinct} distinct drafted id(s)")
        if constant and n > 1:
            tokens_ok = False
            block = blocks.ids[blocks.offsets[0]:blocks.offsets[1]].tolist()
            reasons.append(f"every block is the same block {block}: drafts do not depend on "
                           "the context")
            token_blind.append(f"every block is {block}")
        if pooled < th.min_entropy_bits:
            tokens_ok = False
            reasons.append(f"drafted-id entropy {pooled:.3f} bits is below "
                           f"{th.min_entropy_bits:g} bits")
            token_blind.append(f"drafted-id entropy {pooled:.3f} bits")
        if tokens_ok:
            reasons.append(f"drafts vary: {distinct} distinct ids, entropy {pooled:.2f} bits")
    if acc_max is not None and acc_max == 0:
        reasons.append("every verify rejected all drafts (acc=0): acceptance carries no signal")
    elif acc_min is not None and len(v) and bool(np.all(v.acc == v.k)):
        reasons.append("every verify accepted every draft: acceptance carries no signal")

    # -- logits ---------------------------------------------------------------------------------
    logits_ok = False
    blind_min = blind_median = None
    if len(lg):
        nonfinite = int((~finite).sum())
        if nonfinite:
            reasons.append(f"{nonfinite} logit row(s) hold nan/inf and are left out")
        if min_margin is not None and median_margin is not None:
            blind_min, blind_median = min_margin / 2, median_margin / 2
            if blind_min > th.max_blind_radius:
                token_blind.append(f"smallest blind radius {_fmt(blind_min)} above "
                                   f"{th.max_blind_radius:g}")
                if tokens_ok:
                    reasons.append(
                        f"every block row has a top-1/top-2 margin of at least {_fmt(min_margin)}: "
                        f"no logit perturbation below {_fmt(blind_min)} could move a token "
                        f"(blind radius above {th.max_blind_radius:g})")
                tokens_ok = False
            else:
                reasons.append(f"smallest margin {_fmt(min_margin)}: a perturbation of "
                               f"{_fmt(blind_min)} could flip a token (median blind radius "
                               f"{_fmt(blind_median)})")
        logits_ok = logits_vary
        if logits_vary:
            reasons.append(f"{len(lg)} block-logit rows are traced and vary: an exact logit "
                           "comparison can see what tokens cannot")
        else:
            reasons.append("the traced block logits are all the same row: they carry no signal")
            logit_blind.append("the traced logits do not vary")
    else:
        reasons.append("no block logits traced (level < 3): only tokens can be compared")
        logit_blind.append("no block logits traced")

    informative = tokens_ok or logits_ok
    if informative and not tokens_ok:
        reasons.append("informative through the logits only: a token comparison alone would "
                       "have been blind")
    verdict = "informative" if informative else "uninformative"
    return TraceAudit(
        path=trace.path, level=trace.level, requests=len(trace.requests), blocks=n,
        block_source=blocks.source, distinct_ids=distinct, entropy_bits=pooled,
        row_entropy_bits=row_entropy, constant_blocks=bool(constant), uniform_blocks=uniform,
        acceptance_min=acc_min, acceptance_max=acc_max, acceptance_mean=acc_mean,
        logit_rows=len(lg), nonfinite_rows=int((~finite).sum()) if len(lg) else 0,
        min_margin=min_margin, median_margin=median_margin, blind_radius_min=blind_min,
        blind_radius_median=blind_median, logits_vary=logits_vary,
        tokens_informative=tokens_ok, logits_informative=logits_ok, verdict=verdict,
        reasons=reasons, token_blind_reasons=token_blind, logit_blind_reasons=logit_blind, findings=len(trace.findings), skipped_lines=trace.lines_skipped)
