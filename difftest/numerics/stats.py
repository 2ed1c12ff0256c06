"""Statistics of the logit differences between paired block rows, with error bars.

Modelled on llama.cpp's KL-divergence mode (mean KLD with its standard error, same-top-token
rate, percentiles, and no claim of significance under 100 tokens), adapted to what a trace holds:
the top-K entries of each row, not the full vocabulary.

Definitions (a row pair is one (request, pos, row) traced by both arms; B is the reference, as
`b` is in numpy's `isclose(a, b)`):

- values: the ids both top lists hold; `max_abs`, `p99_abs` (numpy's default linear
  interpolation) and `mean_abs` are over every such (row, id) pair's `|a - b|` (on the grid
  of the finer printed quantum, as the tolerance takes it: `resolution.snapped_difference`),
  `max_rel` over `|a - b| / |b|` where `b != 0`. Pairs with a non-finite value in either arm
  are left out of the numbers and counted in `rows_nonfinite` (rows).
- `top1_agreement`: the fraction of row pairs whose first ids are equal, with a 95% Wilson score
  interval (it stays inside [0, 1] and keeps a width at 0 or n disagreements, where the normal
  approximation llama.cpp prints collapses to a zero-width interval).
- `topk_overlap`: the mean over row pairs of |shared ids| / min(width A, width B).
- `kl_mean`, `kl_mean_se`: KL(P_B || P_A) in nats, where P is the softmax of a row's values over
  the ids both lists hold. The rest of the vocabulary is not traced, so both distributions are
  renormalised over the shared ids: this is the divergence of the traced head only, zero exactly
  when the shared values agree up to a common shift (float rounding below zero is clamped to 0).
  Row pairs with no shared id are `rows_disjoint`: counted, never given a divergence.
- Standard errors of `kl_mean` and `topk_overlap`: where the rows' requests are known
  (`cluster`) and there are at least two, request-clustered: the delete-one-request jackknife
  of the mean (`difftest.numerics.clustered`, the estimator of the clustered rates), since the rows of
  one request share a context and move together (never below the independent-rows error: a
  design effect of at least 1, as the clustered rates take it). Beside it, the independent-rows error (the
  sample standard deviation over sqrt(rows), llama.cpp's formula), which is also the error
  given where no request is known. `kl_mean_ci`, `topk_overlap_ci`: 95% intervals, Student t at
  the requests less one (normal with independent rows), clipped to the quantity's range.
- Under `MIN_ROWS` row pairs every figure is still given, and `significant` is false.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from difftest.numerics.clustered import ClusterSums, t_quantile
from difftest.numerics.exact import exact_sum
from difftest.numerics.resolution import snapped_difference, value_quanta
from difftest.numerics.rows import row_any, row_count, row_max

MIN_ROWS = 100  # llama.cpp prints no KL statistics under 100 tokens
Z95 = 1.959963984540054  # two-sided 95% standard normal quantile
_BLOCK_ROWS = 1 << 15


@dataclass(frozen=True)
class PairedRows:
    """Top-k lists of paired rows: ids (n, K) padded with -1, values (n, K) padded with nan."""

    ids_a: np.ndarray
    vals_a: np.ndarray
    ids_b: np.ndarray
    vals_b: np.ndarray

    def __len__(self) -> int:
        return int(self.ids_a.shape[0])

    def widened(self) -> PairedRows:
        """Both arms padded to one width, so their columns line up."""
        width = max(self.ids_a.shape[1], self.ids_b.shape[1])

        def pad(ids: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            extra = width - ids.shape[1]
            if extra == 0:
                return ids, vals
            return (np.pad(ids, ((0, 0), (0, extra)), constant_values=-1),
                    np.pad(vals, ((0, 0), (0, extra)), constant_values=np.nan))

        ids_a, vals_a = pad(self.ids_a, self.vals_a)
        ids_b, vals_b = pad(self.ids_b, self.vals_b)
        return PairedRows(ids_a, vals_a, ids_b, vals_b)

    def block(self, at: slice) -> PairedRows:
        """Rows `at` (views)."""
        return PairedRows(self.ids_a[at], self.vals_a[at], self.ids_b[at], self.vals_b[at])

    def rows(self, which: np.ndarray) -> PairedRows:
        """The rows a boolean mask selects (copies)."""
        return PairedRows(self.ids_a[which], self.vals_a[which], self.ids_b[which],
                          self.vals_b[which])

    @classmethod
    def take(cls, ids_a: np.ndarray, vals_a: np.ndarray, ia: np.ndarray,
             ids_b: np.ndarray, vals_b: np.ndarray, ib: np.ndarray) -> PairedRows:
        """Rows `ia` of arm A beside rows `ib` of arm B."""
        return cls(ids_a[ia], vals_a[ia], ids_b[ib], vals_b[ib])


@dataclass(frozen=True)
class Interval:
    """A proportion and its two-sided 95% interval."""

    value: float
    low: float
    high: float
    method: str = "wilson"


@dataclass(frozen=True)
class LogitStats:
    """What the logits of paired rows show, with the uncertainty of each figure."""

    rows: int
    values: int
    rows_disjoint: int
    rows_nonfinite: int
    max_abs: float | None
    p99_abs: float | None
    mean_abs: float | None
    max_rel: float | None
    top1_same: int
    top1_agreement: Interval | None
    topk_overlap: float | None
    kl_rows: int
    kl_mean: float | None
    kl_mean_se: float | None
    kl_max: float | None
    significant: bool
    min_rows: int = MIN_ROWS
    topk_overlap_se: float | None = None
    kl_mean_se_rows: float | None = None  # as if every row were independent
    topk_overlap_se_rows: float | None = None
    requests: int = 0  # the requests the errors are clustered by (0: not clustered)
    kl_mean_ci: tuple[float, float] | None = None
    topk_overlap_ci: tuple[float, float] | None = None

    @property
    def clustered(self) -> bool:
        return self.requests >= 2

    def widened(self) -> list[str]:
        """Which of KL and top-k overlap clustering gave a larger error than independent rows."""
        out = []
        for name, se, rows in (("KL", self.kl_mean_se, self.kl_mean_se_rows),
                               ("top-k overlap", self.topk_overlap_se, self.topk_overlap_se_rows)):
            if self.clustered and se is not None and rows is not None and se > rows * (1 + 1e-9):
                out.append(name)
        return out

    def clustering_note(self) -> str | None:
        """Why an error is wider than the independent-rows one (None: none is)."""
        wide = self.widened()
        if not wide:
            return None
        parts = []
        for name, se, rows in (("KL", self.kl_mean_se, self.kl_mean_se_rows),
                               ("top-k overlap", self.topk_overlap_se, self.topk_overlap_se_rows)):
            if name in wide:
                parts.append(f"{name} ± {_g(se)}, not ± {_g(rows)}")
        return (f"logit statistics clustered by request ({self.requests} requests, {self.rows} "
                f"rows): {', '.join(parts)} as for independent rows: the rows of one request "
                "moved together, so they carry less evidence than as many independent rows")

    def to_json(self) -> dict[str, object]:
        t1 = self.top1_agreement
        return {
            "rows": self.rows, "values": self.values, "rows_disjoint": self.rows_disjoint,
            "rows_nonfinite": self.rows_nonfinite, "max_abs": self.max_abs,
            "p99_abs": self.p99_abs, "mean_abs": self.mean_abs, "max_rel": self.max_rel,
            "top1_agreement": None if t1 is None else t1.value,
            "top1_agreement_ci95": None if t1 is None else [t1.low, t1.high],
            "top1_agreement_method": None if t1 is None else t1.method,
            "topk_overlap": self.topk_overlap, "kl_rows": self.kl_rows, "kl_mean": self.kl_mean,
            "kl_mean_se": self.kl_mean_se, "kl_max": self.kl_max,
            "significant": self.significant, "min_rows": self.min_rows,
            "topk_overlap_se": self.topk_overlap_se,
            "kl_mean_ci95": None if self.kl_mean_ci is None else list(self.kl_mean_ci),
            "topk_overlap_ci95": (None if self.topk_overlap_ci is None
                                  else list(self.topk_overlap_ci)),
            "kl_mean_se_independent_rows": self.kl_mean_se_rows,
            "topk_overlap_se_independent_rows": self.topk_overlap_se_rows,
            "se_requests": self.requests,
            "se_method": ("delete-one-request jackknife (request-clustered)" if self.clustered
                          else "sample standard deviation over sqrt(rows) (independent rows)"),
        }

    def summary(self) -> str:
        """One line for the table and markdown reports."""
        if self.rows == 0:
            return "logit stats: no paired rows"
        parts = [f"{self.rows} row(s)", f"max |d| {_g(self.max_abs)}",
                 f"p99 {_g(self.p99_abs)}", f"mean {_g(self.mean_abs)}",
                 f"max rel {_g(self.max_rel)}"]
        t1 = self.top1_agreement
        if t1 is not None:
            parts.append(f"top-1 same {t1.value:.4f} [{t1.low:.4f}, {t1.high:.4f}]")
        if self.topk_overlap is not None:
            se = "" if self.topk_overlap_se is None else f" ± {_g(self.topk_overlap_se)}"
            parts.append(f"top-k overlap {self.topk_overlap:.4f}{se}")
        if self.kl_mean is not None:
            se = "" if self.kl_mean_se is None else f" ± {_g(self.kl_mean_se)}"
            parts.append(f"KL {_g(self.kl_mean)}{se}")
        if self.clustered and (self.kl_mean_se is not None or self.topk_overlap_se is not None):
            parts.append(f"errors clustered by request ({self.requests})")
        if self.rows_disjoint:
            parts.append(f"{self.rows_disjoint} disjoint")
        line = "logit stats: " + ", ".join(parts)
        if not self.significant:
            line += f" (not significant: under {self.min_rows} rows)"
        note = self.clustering_note()
        if note is not None:
            line += f"; {note}"
        return line


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def wilson(successes: int, n: int, z: float = Z95) -> Interval:
    """Wilson score interval of a binomial proportion (n >= 1)."""
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at 0 or n successes the bound on that side is exactly 0 or 1; rounding must not move it
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high)


class _Diffs:
    """The compared values' differences, in order: written into one buffer where the pass
    announced how many there can be (its pages touched only as it fills: the differences are
    never held twice, as blocks and joined), else kept as blocks and joined when asked for."""

    def __init__(self, capacity: int = 0) -> None:
        self._buffer: np.ndarray | None = np.empty(capacity) if capacity else None
        self._filled = 0
        self._blocks: list[np.ndarray] = []

    def add(self, block: np.ndarray) -> None:
        buffer, at = self._buffer, self._filled
        if buffer is not None and at + block.size <= buffer.size:
            buffer[at:at + block.size] = block
            self._filled += block.size
            return
        if buffer is not None:  # more than announced: blocks from here on
            self._blocks.append(buffer[:at].copy())
            self._buffer = None
        self._blocks.append(block)

    def joined(self) -> np.ndarray:
        """Every difference added, in order (`np.concatenate` of the blocks)."""
        if self._buffer is not None:
            out: np.ndarray = self._buffer[:self._filled]
        else:
            out = np.concatenate(self._blocks) if self._blocks else np.zeros(0)
        self._buffer, self._filled, self._blocks = None, 0, []
        return out


@dataclass
class _Acc:
    diffs: _Diffs
    rel_max: list[float]  # each block's largest relative difference (only the largest is told)
    kls: list[np.ndarray]
    kl_at: list[np.ndarray | range]  # the row of each KL value (a range: every row of a block)
    overlaps: list[np.ndarray]
    overlap_at: list[np.ndarray | range]
    top1: int = 0
    disjoint: int = 0
    nonfinite: int = 0


@dataclass(frozen=True)
class MeanError:
    """A mean of per-row values, its standard errors and its 95% interval."""

    se: float | None
    se_rows: float | None  # independent rows
    ci: tuple[float, float] | None
    requests: int  # clustered by this many requests (0: not clustered)
    mean: float | None = None  # the mean itself, correctly rounded (None: no value)


def mean_error(values: np.ndarray, cluster: np.ndarray | None,
               bounds: tuple[float, float]) -> MeanError:
    """The error of `values.mean()`: request-clustered (jackknife over requests) where at least
    two requests are known, else over independent rows; the interval clipped to `bounds`."""
    n = values.size
    if n < 2:
        return MeanError(None, None, None, 0, exact_sum(values) / n if n else None)
    mean = exact_sum(values) / n
    with np.errstate(over="ignore", invalid="ignore"):  # a spread past the range: inf or nan
        se_rows = math.sqrt(exact_sum((values - mean) ** 2) / (n - 1) / n)
    se, q, groups = se_rows, Z95, 0
    if cluster is not None:
        sums = ClusterSums.of(values, cluster)
        if sums.clusters >= 2:
            groups = sums.clusters
            # every row alike: no request can differ from another (the jackknife would only
            # show the rounding of its sums)
            # and never below the independent-rows error (a design effect of at least 1, as
            # for the clustered rates): few requests can make the jackknife small by chance
            # (an infinite value leaves no finite spread: nan, not the 0 of rows alike)
            se = (max(math.sqrt(sums.variance()), se_rows) if se_rows > 0
                  else math.nan if math.isnan(se_rows) else 0.0)
            q = t_quantile(0.975, groups - 1.0)
    ci = (max(bounds[0], mean - q * se), min(bounds[1], mean + q * se))
    return MeanError(se, se_rows, ci, groups, mean)


class RowBlocks(Protocol):
    """Paired rows handed over a block at a time (gathered only when asked for)."""

    def __len__(self) -> int: ...

    def block(self, at: slice) -> PairedRows: ...


def logit_stats(pairs: PairedRows | RowBlocks, min_rows: int = MIN_ROWS,
                digits: tuple[int | None, int | None] = (None, None),
                cluster: np.ndarray | None = None) -> LogitStats:
    """The statistics of the module docstring over every row pair; `digits` are the arms'
    printed significant digits, which put each difference on the grid the tolerance uses;
    `cluster` the request of each row pair, which the errors of KL and top-k overlap are
    clustered by."""
    taken = StatsPass()
    for start in range(0, len(pairs), _BLOCK_ROWS):
        p = pairs.block(slice(start, start + _BLOCK_ROWS))
        taken.add_pairs(p, digits)
    return taken.result(min_rows, cluster)


class StatsPass:
    """`logit_stats` taken a block of row pairs at a time, in order: from the pairs themselves
    (`add_pairs`), or from what a pass over the same rows already matched and differenced
    (`add_matched`: the tolerance's, `difftest.numerics.tolerance.MatchedRows`), so that the
    quanta and the matched ids of a comparison are computed once."""

    def __init__(self, values: int = 0) -> None:
        """`values`: how many compared values (shared ids) the pass can add at most, where
        known: their differences are then written into one buffer of that size."""
        self._acc = _Acc(_Diffs(values), [], [], [], [], [])
        self.rows = 0

    def add_pairs(self, p: PairedRows, digits: tuple[int | None, int | None]) -> None:
        """The next row pairs (values as the tolerance sees them); `digits` as `logit_stats`."""
        _accumulate(self._acc, p.ids_a, p.vals_a, p.ids_b, p.vals_b,
                    value_quanta(p.vals_a, digits[0]), value_quanta(p.vals_b, digits[1]),
                    self.rows)
        self.rows += len(p)

    def add_matched(self, ids_a: np.ndarray, va: np.ndarray, ids_b: np.ndarray,
                    shared: np.ndarray, vb: np.ndarray, d: np.ndarray) -> None:
        """The next row pairs as matched: A's ids and values (n, Ka), B's ids (n, Kb), which of
        A's entries B's list holds (`match_ids`), B's value for each of A's entries and their
        snapped difference (n, Ka). Taken `_BLOCK_ROWS` rows at a time, as `logit_stats` takes
        them (the temporaries of its KL stay small)."""
        for start in range(0, int(ids_a.shape[0]), _BLOCK_ROWS):
            at = slice(start, start + _BLOCK_ROWS)
            _accumulate_matched(self._acc, ids_a[at], va[at], ids_b[at], shared[at], vb[at],
                                d[at], self.rows)
            self.rows += int(ids_a[at].shape[0])

    def add_split(self, ids_a: np.ndarray, ids_b: np.ndarray, plain: np.ndarray,
                  plain_nonzero: bool, other: tuple[np.ndarray, ...]) -> None:
        """The next row pairs, of which those in `plain` have one top list in both arms
        (`difftest.numerics.tolerance.plain_rows`: every listed id shared with itself, the
        same values) and only the others were matched: A's ids (n, K) and B's of every row,
        whether a listed value of a plain row is not 0, and `other`, the others' A values,
        shared entries, B values and differences as `add_matched` takes them, in order. The
        same statistics as `add_matched` of every row: a plain row adds a difference of 0 per
        listed id, an overlap of 1 and a KL of 0."""
        _accumulate_split(self._acc, ids_a, ids_b, plain, plain_nonzero, other, self.rows)
        self.rows += int(ids_a.shape[0])

    def result(self, min_rows: int = MIN_ROWS, cluster: np.ndarray | None = None) -> LogitStats:
        """The statistics of every row pair added; `cluster` the request of each, in order."""
        return _finished(self._acc, self.rows, min_rows, cluster)


def _finished(acc: _Acc, n: int, min_rows: int, cluster: np.ndarray | None) -> LogitStats:
    d = acc.diffs.joined()
    # the maximum and the mean (summed in this order) before the percentile reorders `d` in place
    max_abs = float(d.max()) if d.size else None
    with np.errstate(over="ignore"):
        mean_abs = float(d.mean()) if d.size else None
        if mean_abs == math.inf and max_abs is not None and max_abs < math.inf:
            mean_abs = float((d / d.size).sum())  # the sum passed the range, the mean does not
    p99_abs = float(np.percentile(d, 99, overwrite_input=True)) if d.size else None
    kl = np.concatenate(acc.kls) if acc.kls else np.zeros(0)
    kl_at = _rows_of(acc.kl_at, n)
    ov = np.concatenate(acc.overlaps) if acc.overlaps else np.zeros(0)
    ov_at = _rows_of(acc.overlap_at, n)
    kl_err = mean_error(kl, None if cluster is None else cluster[kl_at], (0.0, math.inf))
    ov_err = mean_error(ov, None if cluster is None else cluster[ov_at], (0.0, 1.0))
    return LogitStats(
        rows=n, values=int(d.size), rows_disjoint=acc.disjoint, rows_nonfinite=acc.nonfinite,
        max_abs=max_abs, p99_abs=p99_abs, mean_abs=mean_abs,
        max_rel=float(np.max(acc.rel_max)) if acc.rel_max else None,
        top1_same=acc.top1, top1_agreement=wilson(acc.top1, n) if n else None,
        topk_overlap=ov_err.mean, kl_rows=int(kl.size), kl_mean=kl_err.mean,
        kl_mean_se=kl_err.se, kl_max=float(kl.max()) if kl.size else None,
        significant=n >= min_rows, min_rows=min_rows, topk_overlap_se=ov_err.se,
        kl_mean_se_rows=kl_err.se_rows, topk_overlap_se_rows=ov_err.se_rows,
        requests=max(kl_err.requests, ov_err.requests), kl_mean_ci=kl_err.ci,
        topk_overlap_ci=ov_err.ci)


def _rows_of(parts: list[np.ndarray | range], n: int) -> slice | np.ndarray:
    """The rows the values of `parts` belong to, in order: a slice where they are every row
    0..n-1 (a cluster's labels are then taken as they are, not gathered), else their indices."""
    if all(isinstance(p, range) for p in parts):
        ranges = [p for p in parts if isinstance(p, range)]
        if all(r.start == (ranges[i - 1].stop if i else 0) for i, r in enumerate(ranges)) \
                and (ranges[-1].stop if ranges else 0) == n:
            return slice(None)
    if not parts:
        return np.zeros(0, np.int64)
    return np.concatenate([np.arange(p.start, p.stop) if isinstance(p, range) else p
                           for p in parts])


def _accumulate(acc: _Acc, ids_a: np.ndarray, vals_a: np.ndarray, ids_b: np.ndarray,
                vals_b: np.ndarray, q_a: np.ndarray, q_b: np.ndarray, start: int = 0) -> None:
    shared, where = match_ids(ids_a, ids_b)  # (n, Ka): A's entry is in B's list, and where
    # B's value for each of A's shared ids
    at = (np.arange(len(ids_a))[:, None], where)
    vb, qb = vals_b[at], q_b[at]
    _accumulate_matched(acc, ids_a, vals_a, ids_b, shared, vb,
                        snapped_difference(vals_a, vb, q_a, qb), start)


def _accumulate_matched(acc: _Acc, ids_a: np.ndarray, va: np.ndarray, ids_b: np.ndarray,
                        shared: np.ndarray, vb: np.ndarray, d: np.ndarray, start: int) -> None:
    valid_a, valid_b = ids_a >= 0, ids_b >= 0
    count = row_count(shared)
    width = np.minimum(row_count(valid_a), row_count(valid_b))
    acc.top1 += int(np.sum(valid_a[:, 0] & (ids_a[:, 0] == ids_b[:, 0])))
    has_width = width > 0
    every = bool(has_width.all())  # the usual block: its rows as they are, not gathered
    acc.overlaps.append(count / width if every else count[has_width] / width[has_width])
    acc.overlap_at.append(range(start, start + width.size) if every
                          else start + np.flatnonzero(has_width))
    disjoint = count == 0
    acc.disjoint += int(disjoint.sum())
    finite = np.isfinite(va) & np.isfinite(vb)
    bad = row_any(shared & ~finite)
    acc.nonfinite += int(bad.sum())
    use = shared & finite
    acc.diffs.add(d[use])
    rel = _largest_relative(d, vb, use)
    if rel is not None:
        acc.rel_max.append(rel)
    # KL over the shared ids of rows with no non-finite shared value
    rows = ~disjoint & ~bad
    if rows.any():
        all_rows = bool(rows.all())  # the usual block: not gathered
        acc.kls.append(_kl(shared, va, vb) if all_rows else _kl(shared[rows], va[rows], vb[rows]))
        acc.kl_at.append(range(start, start + rows.size) if all_rows
                         else start + np.flatnonzero(rows))


def _largest_relative(d: np.ndarray, vb: np.ndarray, use: np.ndarray) -> float | None:
    """The largest d / |b| over the values `use`d where b is not 0 (None: no such value),
    divided where they are (each quotient is at least +0, so the zeros left elsewhere change no
    maximum)."""
    nz = use & (vb != 0)
    if not nz.any():
        return None
    rel = np.zeros(d.shape)
    np.divide(d, np.abs(vb), out=rel, where=nz)
    return float(rel.max())


def _kl(shared: np.ndarray, va: np.ndarray, vb: np.ndarray) -> np.ndarray:
    """Per row: KL(B || A) over the shared ids (each row shares one, none non-finite)."""
    a = np.where(shared, va, -np.inf)
    b = np.where(shared, vb, -np.inf)
    la = a - _logsumexp(a)
    lb = b - _logsumexp(b)
    with np.errstate(invalid="ignore"):
        terms = np.where(shared, np.exp(lb) * (lb - la), 0.0)
    out: np.ndarray = np.maximum(terms.sum(axis=1), 0.0)
    return out


def _accumulate_split(acc: _Acc, ids_a: np.ndarray, ids_b: np.ndarray, plain: np.ndarray,
                      plain_nonzero: bool, other: tuple[np.ndarray, ...], start: int) -> None:
    """`_accumulate_matched` of every row, the plain rows' part known without matching them
    (StatsPass.add_split): each value written where `_accumulate_matched` writes it, in the
    same order, so every figure is the same to the bit."""
    o_va, o_shared, o_vb, o_d = other
    rest = ~plain
    n, k = ids_a.shape
    valid_a = ids_a >= 0
    width = np.minimum(row_count(valid_a), row_count(ids_b >= 0))
    count = width.copy()  # a plain row shares each id it lists
    count[rest] = row_count(o_shared)
    acc.top1 += int(np.sum(valid_a[:, 0] & (ids_a[:, 0] == ids_b[:, 0])))
    has_width = width > 0
    every = bool(has_width.all())
    acc.overlaps.append(count / width if every else count[has_width] / width[has_width])
    acc.overlap_at.append(range(start, start + n) if every
                          else start + np.flatnonzero(has_width))
    disjoint = count == 0
    acc.disjoint += int(disjoint.sum())
    o_finite = np.isfinite(o_va) & np.isfinite(o_vb)
    bad = np.zeros(n, dtype=bool)
    bad[rest] = row_any(o_shared & ~o_finite)
    acc.nonfinite += int(bad.sum())
    o_use = o_shared & o_finite
    use = valid_a.copy()  # a plain row's listed values are finite and shared
    use[rest] = o_use
    d = np.zeros((n, k))  # and differ by +0.0
    d[rest] = o_d
    acc.diffs.add(d[use])
    rel = _largest_relative(o_d, o_vb, o_use)
    if rel is not None or plain_nonzero:  # a plain row's relative differences are all 0
        acc.rel_max.append(0.0 if rel is None else rel)
    rows = ~disjoint & ~bad
    if rows.any():
        kl = np.zeros(n)  # a plain row's two distributions are one
        o_rows = rows[rest]
        if o_rows.any():
            kl[np.flatnonzero(rest)[o_rows]] = _kl(o_shared[o_rows], o_va[o_rows], o_vb[o_rows])
        all_rows = bool(rows.all())
        acc.kls.append(kl if all_rows else kl[rows])
        acc.kl_at.append(range(start, start + n) if all_rows else start + np.flatnonzero(rows))


PAIRWISE_MAX = 256  # Ka x Kb up to which rows are matched entry by entry


def match_ids(ids_a: np.ndarray, ids_b: np.ndarray) -> tuple[npt.NDArray[np.bool_], np.ndarray]:
    """For each entry of A's (n, Ka) id rows: whether B's row holds that id (ids < 0 are
    padding), and the column of its first occurrence there (0 where absent).

    Narrow lists (Ka x Kb up to PAIRWISE_MAX) compare every pair of entries, a column of B's at
    a time; wider ones sort B's (row, id) keys once and search each A entry, memory linear in the
    values (a top-1024 trace would take a million comparisons a row)."""
    n, ka = ids_a.shape
    kb = ids_b.shape[1]
    if n == 0 or ka == 0 or kb == 0:
        return np.zeros((n, ka), dtype=bool), np.zeros((n, ka), dtype=np.intp)
    if ka * kb <= PAIRWISE_MAX:
        return _match_pairwise(ids_a, ids_b)
    return _match_sorted(ids_a, ids_b)


def _match_pairwise(ids_a: np.ndarray, ids_b: np.ndarray
                    ) -> tuple[npt.NDArray[np.bool_], np.ndarray]:
    """`match_ids` by comparing A's rows with each column of B's in turn, from the last to the
    first, so the first occurrence is written last (Kb passes over n x Ka entries)."""
    n, ka = ids_a.shape
    found = np.zeros((n, ka), dtype=bool)
    column = np.zeros((n, ka), dtype=np.intp)
    valid = ids_a >= 0  # padding matches nothing (B's cannot equal an id >= 0)
    hit = np.empty((n, ka), dtype=bool)
    for j in range(ids_b.shape[1] - 1, -1, -1):
        np.equal(ids_a, ids_b[:, j:j + 1], out=hit)
        hit &= valid
        found |= hit
        np.copyto(column, j, where=hit)
    return found, column


def _match_sorted(ids_a: np.ndarray, ids_b: np.ndarray
                  ) -> tuple[npt.NDArray[np.bool_], np.ndarray]:
    """`match_ids` by one sort of B's (row, id) keys and a binary search per A entry: time
    O(n K log(n K))."""
    n, ka = ids_a.shape
    kb = ids_b.shape[1]
    row = np.arange(n, dtype=np.int64)[:, None] << 32
    keys_b = np.where(ids_b >= 0, row | (ids_b.astype(np.int64) & 0xFFFFFFFF), -1).ravel()
    order = np.argsort(keys_b, kind="stable")  # equal keys keep B's order: first one found
    sorted_b = keys_b[order]
    keys_a = (row | (ids_a.astype(np.int64) & 0xFFFFFFFF)).ravel()
    pos = np.minimum(np.searchsorted(sorted_b, keys_a), sorted_b.size - 1)
    found = (sorted_b[pos] == keys_a) & (ids_a.ravel() >= 0)
    column = np.where(found, order[pos] % kb, 0)
    return found.reshape(n, ka), column.reshape(n, ka)


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp over (n, K) with -inf for absent entries (each row has one finite)."""
    top = row_max(x)[:, None]  # the sign of a zero maximum changes no value below
    out: np.ndarray = top + np.log(np.exp(x - top).sum(axis=1, keepdims=True))
    return out
