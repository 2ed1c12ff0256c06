"""Request-clustered statistics of rates: intervals, paired differences and minimum detectable
effects that do not pretend the rows of one request are independent.

The rows of one request share their context: when a context makes the drafter or the engine go
wrong, it does so on many of its rows at once. An interval that counts every row as an
independent draw is then too narrow, and a test built on it rejects a true null far more often
than its alpha says. Everything here treats the request as the unit of independence.

Method, chosen over a cluster bootstrap:

- a rate is a ratio of sums over requests, `p = sum(y_g) / sum(n_g)`; its variance is the
  delete-one-request jackknife, `V = (G - 1) / G * sum_g (p_-g - mean)^2` with `p_-g` the rate
  without request g (the CR3 cluster-robust variance). Like a cluster bootstrap it resamples
  requests, not rows, but in closed form: the same figure on every run and every machine, no
  seed, O(rows), cheap enough for the thousands of comparisons `scripts/calibrate_stats.py`
  simulates. Over the linearised sandwich (CR1, `G / (G - 1) * sum (y_g - p n_g)^2 / N^2`):
  the two coincide when every request has as many rows, and where requests differ in size
  (long prompts, early stops) the jackknife is usually the larger one, CR1 being known to
  run small there; CR1 remains the fallback where leaving a request out leaves an arm empty;
- the design effect `deff = V / (p (1 - p) / N)` (at least 1) turns the clustered variance into
  an effective number of independent rows `N / deff`, and a proportion's interval is Wilson's at
  that effective size: it stays inside [0, 1] and keeps a width at zero events, where the bare
  sandwich collapses to a point;
- a difference of two arms over the same requests (B - A) is paired by request: each
  request's contribution is differenced before squaring, so what the arms share cancels;
  quantiles are Student's t with the effective number of requests less one as degrees of
  freedom (`effective_clusters`): a spread carried by a few requests is trusted less than one
  carried by all, which keeps the intervals and the stated power honest when a few requests
  dominate (the calibration script measures how honest).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from difftest.core.proportion import wilson_bounds, z_quantile
from difftest.numerics.exact import exact_sum

POWER = 0.80  # the power a minimum detectable effect is stated at
CONFIDENCE = 0.95  # two-sided, for the intervals a report shows


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def chi2_median(df: float) -> float:
    """The median of a chi-square with df degrees of freedom (Wilson and Hilferty's cube-root
    approximation: 3.4% high at df = 1, 1.3% at 2, under 0.3% from 5)."""
    return df * (1.0 - 2.0 / (9.0 * df)) ** 3


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (bisection on the distribution function; df >= 1; cached, as a
    report asks for few distinct ones many times)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _sum_of_squares(u: np.ndarray) -> float:
    """Correctly rounded, so the figure is the same whatever order a CPU would add in; a square
    past the largest double is infinite, and so is the sum."""
    with np.errstate(over="ignore"):
        return exact_sum(u * u)


_DENSE_LABELS = 1 << 16  # labels below this (and 4 per row) are summed in bins of their own


@dataclass(frozen=True)
class ClusterSums:
    """Per request: the sum of a quantity (`y`) over its rows (`n` of them)."""

    y: np.ndarray  # float64 (G,)
    n: np.ndarray  # float64 (G,)

    @classmethod
    def of(cls, values: np.ndarray, cluster: np.ndarray) -> ClusterSums:
        """Sum per-row values by cluster label (any integer labels)."""
        labels = np.asarray(cluster)
        if (labels.dtype.kind == "i" or labels.dtype.kind == "u" and labels.dtype.itemsize < 8) \
                and labels.ndim == 1 and labels.size:
            low, high = int(labels.min()), int(labels.max())
            if low >= 0 and high < _DENSE_LABELS + 4 * labels.size:
                # small non-negative labels (request indices) are their own bins: the sums of
                # `np.unique`'s ranks below, added in the same row order, without its sort
                counts = np.bincount(labels)
                present = counts > 0
                y = np.bincount(labels, weights=np.asarray(values, dtype=np.float64),
                                minlength=counts.size)
                return cls(y[present], counts[present].astype(np.float64))
        labels, inverse = np.unique(labels, return_inverse=True)
        g = labels.size
        y = np.bincount(inverse, weights=np.asarray(values, dtype=np.float64), minlength=g)
        n = np.bincount(inverse, minlength=g).astype(np.float64)
        return cls(y, n)

    @classmethod
    def labelled(cls, values: np.ndarray, cluster: np.ndarray) -> tuple[np.ndarray, ClusterSums]:
        """`of`, with the sorted cluster labels its entries belong to."""
        labels = np.unique(np.asarray(cluster))
        return labels, cls.of(values, cluster)

    @property
    def clusters(self) -> int:
        return int(np.count_nonzero(self.n))

    @property
    def rows(self) -> int:
        return int(self.n.sum())

    @property
    def ratio(self) -> float:
        total = exact_sum(self.n)
        return exact_sum(self.y) / total if total else math.nan

    def variance(self) -> float:
        """Cluster-robust variance of the ratio: the delete-one-request jackknife (CR3); nan
        under two clusters."""
        if self.clusters < 2:
            return math.nan
        return _jackknife(self.leave_one_out())

    def leave_one_out(self) -> np.ndarray:
        """The ratio with each request left out in turn (requests with rows only); nan where
        leaving it out leaves no row."""
        keep = self.n > 0
        y, n = self.y[keep], self.n[keep]
        rest = exact_sum(self.n) - n
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            out: np.ndarray = (exact_sum(self.y) - y) / rest
        return out


def _jackknife(replicates: np.ndarray) -> float:
    """(G - 1) / G * sum (theta_-g - mean)^2, correctly rounded sums; nan if any is nan."""
    g = replicates.size
    if g < 2 or not np.all(np.isfinite(replicates)):
        return math.nan
    mean = exact_sum(replicates) / g
    with np.errstate(over="ignore"):  # a spread past the doubles' range is infinite
        return (g - 1) / g * _sum_of_squares(replicates - mean)


@dataclass(frozen=True)
class ClusteredRate:
    """A proportion over rows grouped by request, with its request-clustered interval beside
    the interval that treats every row as independent."""

    value: float
    low: float
    high: float
    naive_low: float
    naive_high: float
    rows: int
    clusters: int
    design_effect: float  # clustered variance / independent-rows variance, at least 1
    confidence: float = CONFIDENCE

    @property
    def effective_rows(self) -> float:
        return self.rows / self.design_effect

    @property
    def wider(self) -> bool:
        """Whether clustering widened the interval (rows of a request moved together)."""
        return (self.high - self.low) > (self.naive_high - self.naive_low) * (1 + 1e-9)

    def variance(self) -> float:
        """The clustered variance of the rate (design effect times the binomial one)."""
        p = self.value
        return self.design_effect * p * (1 - p) / self.rows if self.rows else math.nan

    def to_json(self) -> dict[str, object]:
        return {"value": self.value, "ci": [self.low, self.high],
                "ci_independent_rows": [self.naive_low, self.naive_high],
                "confidence": self.confidence, "rows": self.rows, "requests": self.clusters,
                "design_effect": self.design_effect, "effective_rows": self.effective_rows,
                "method": "Wilson at the request-clustered effective sample size"}

    def describe(self, name: str) -> str:
        head = (f"{name} {self.value:.4f}, {self.confidence:.0%} [{self.low:.4f}, "
                f"{self.high:.4f}] clustered by request ({self.clusters} requests, "
                f"{self.rows} rows)")
        if not self.wider:
            return head
        return (head + f", wider than [{self.naive_low:.4f}, {self.naive_high:.4f}] for "
                f"independent rows: the rows of one request moved together (design effect "
                f"{self.design_effect:.3g}), so they count as {self.effective_rows:.0f} "
                f"independent rows, not {self.rows}")


def clustered_rate(values: np.ndarray, cluster: np.ndarray,
                   confidence: float = CONFIDENCE) -> ClusteredRate | None:
    """The rate of true `values`, clustered by `cluster` (None: no rows). Under two clusters
    the design effect cannot be measured: every row is then taken to be one draw of one
    context, an effective size of one."""
    sums = ClusterSums.of(np.asarray(values, dtype=np.float64), cluster)
    return rate_of(sums, confidence)


def rate_of(sums: ClusterSums, confidence: float = CONFIDENCE) -> ClusteredRate | None:
    """`clustered_rate` from per-cluster sums."""
    n = sums.rows
    if n == 0:
        return None
    p = sums.ratio
    z = z_quantile(0.5 + confidence / 2)
    naive = p * (1 - p) / n
    if sums.clusters < 2:
        deff = float(n)
    elif naive > 0:
        deff = max(1.0, sums.variance() / naive)
    else:
        deff = 1.0  # no event (or all): no spread to measure; Wilson keeps a width
    low, high = wilson_bounds(p, n / deff, z)
    nlow, nhigh = wilson_bounds(p, float(n), z)
    return ClusteredRate(p, low, high, nlow, nhigh, n, sums.clusters, deff, confidence)


@dataclass(frozen=True)
class PairedDifference:
    """B - A of a ratio measured over the same requests in both arms."""

    a: float
    b: float
    se: float  # cluster-robust, paired by request
    var_a: float  # each arm's own clustered variance, as if the arms were independent samples
    var_b: float
    rows_b: float
    clusters: int
    binomial: bool = True  # the ratio is a proportion (its variance follows p (1 - p))
    # how many requests the spread really rests on (None: all of them); see `effective_clusters`
    effective: float | None = None

    @property
    def diff(self) -> float:
        return self.b - self.a

    @property
    def df(self) -> float:
        """Degrees of freedom of the t quantiles: the effective number of requests less one."""
        g = self.clusters if self.effective is None else min(self.effective, self.clusters)
        # rounded down to a tenth: a slightly larger quantile, and few distinct ones to compute
        return max(math.floor((g - 1.0) * 10) / 10, 1.0)

    @property
    def se_unpaired(self) -> float:
        return math.sqrt(self.var_a + self.var_b)

    def bounds(self, one_sided_alpha: float) -> tuple[float, float]:
        """The two one-sided (1 - alpha) bounds of B - A (a two-sided 1 - 2 alpha interval)."""
        q = t_quantile(1.0 - one_sided_alpha, self.df)
        return self.diff - q * self.se, self.diff + q * self.se

    def mde(self, one_sided_alpha: float, power: float = POWER, increase: bool = False
            ) -> float:
        """The smallest shift of B (a drop, or with `increase` a rise) that a one-sided test at
        alpha detects with `power`: `t_alpha * SE_0 + z_power * sqrt(1 + t_alpha^2 / (2 df)) *
        SE_1` (each variance scaled by df / median of chi-square(df)), SE_0 from the arms as
        seen and SE_1 with B's proportion moved by the shift (at B's design effect). Both are
        the independent-samples errors: pairing only narrows them when the arms share
        something, so the figure overstates the effect rather than promising too much."""
        qa = t_quantile(1.0 - one_sided_alpha, self.df)
        # the spread is estimated: the noncentral t's power, P(T' > q_a) ~ Phi((lambda - q_a) /
        # sqrt(1 + q_a^2 / (2 df))) (Johnson and Welch), solved for the noncentrality lambda
        qb = z_quantile(power) * math.sqrt(1.0 + qa * qa / (2.0 * self.df))
        # an estimated variance falls below the true one more often than above: scaled to be
        # median-unbiased, the promise holds in the typical comparison, not only on average
        scale = self.df / chi2_median(self.df)
        se0 = math.sqrt(scale) * self.se_unpaired
        delta = (qa + qb) * se0
        if not self.binomial:
            return delta
        spread = self.b * (1 - self.b) / self.rows_b
        deff = max(1.0, self.var_b / spread) if spread > 0 else 1.0
        for _ in range(100):
            moved = min(1.0, max(0.0, self.b + delta if increase else self.b - delta))
            se1 = math.sqrt(scale * (self.var_a + deff * moved * (1 - moved) / self.rows_b))
            new = qa * se0 + qb * se1
            if abs(new - delta) < 1e-12:
                break
            delta = new
        return delta


def _aligned(a: ClusterSums, la: np.ndarray, b: ClusterSums, lb: np.ndarray
             ) -> tuple[ClusterSums, ClusterSums]:
    """Both arms' sums over the union of their cluster labels (zero where an arm lacks one)."""
    labels = np.union1d(la, lb)
    out = []
    for s, lab in ((a, la), (b, lb)):
        y, n = np.zeros(labels.size), np.zeros(labels.size)
        at = np.searchsorted(labels, lab)
        y[at], n[at] = s.y, s.n
        out.append(ClusterSums(y, n))
    return out[0], out[1]


def paired_difference(a: ClusterSums, labels_a: np.ndarray, b: ClusterSums,
                      labels_b: np.ndarray, binomial: bool = True) -> PairedDifference | None:
    """B's ratio minus A's, paired by cluster label (None: a side with no rows, or under two
    clusters). With `binomial`, each arm's unpaired variance is at least the binomial one: a
    rate with no spread between requests is still a sample."""
    sa, sb = _aligned(a, labels_a, b, labels_b)
    na, nb = float(sa.n.sum()), float(sb.n.sum())
    g = int(np.count_nonzero(sa.n + sb.n))
    if na == 0 or nb == 0 or g < 2:
        return None
    pa, pb = sa.ratio, sb.ratio
    both = (sa.n + sb.n) > 0
    # values past the doubles' range give an infinite or nan spread, not a warning
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rep = ((exact_sum(sb.y) - sb.y[both]) / (nb - sb.n[both])
               - (exact_sum(sa.y) - sa.y[both]) / (na - sa.n[both]))
        var = _jackknife(rep)
        if math.isfinite(var):
            terms = rep - exact_sum(rep) / rep.size
        else:  # an arm with all its rows in one request: linearised (CR1)
            terms = (sb.y - pb * sb.n) / nb - (sa.y - pa * sa.n) / na
            var = g / (g - 1) * _sum_of_squares(terms)

    def alone(s: ClusterSums, p: float, n: float) -> float:
        v = s.variance() if s.clusters >= 2 else math.inf
        v = math.inf if math.isnan(v) else v
        return max(v, p * (1 - p) / n) if binomial else v

    return PairedDifference(pa, pb, math.sqrt(var), alone(sa, pa, na), alone(sb, pb, nb), nb, g,
                            binomial, effective_clusters(terms))


# where the squares of every term, their sum and its square stay normal doubles
_SQUARED_SAFELY = (1e-145, 1e145)


def effective_clusters(terms: np.ndarray) -> float | None:
    """`(sum w)^2 / sum w^2` over the requests' squared contributions `w` to the variance
    (Carter, Schnepel and Steigerwald's effective number of clusters): G when every request
    contributes alike, near 1 when one request carries the spread. The t quantiles take it, less
    one, as their degrees of freedom, so a spread that rests on a few requests is not trusted
    like one that rests on all of them. None where nothing spreads."""
    with np.errstate(over="ignore", under="ignore"):
        w = terms * terms
        total = exact_sum(w)
        if total <= 0.0 or not math.isfinite(total):
            return None
        if not _SQUARED_SAFELY[0] <= float(w.max()) <= _SQUARED_SAFELY[1]:
            # w * w would leave the normal doubles (inf, or subnormal digits lost): the ratio
            # is the same of w / max w, whose squares are at most 1
            w = w / w.max()
            total = exact_sum(w)
        return total * total / exact_sum(w * w)


def mde_zero_events(effective_rows: float, power: float = POWER) -> float:
    """The smallest event rate that shows at least one event with `power`, when any event
    counts (a strict rule): 1 - (1 - power)^(1 / effective rows)."""
    if effective_rows <= 0:
        return 1.0
    return float(1.0 - (1.0 - power) ** (1.0 / effective_rows))


def mde_two_sample(rate: ClusteredRate, alpha: float, power: float = POWER,
                   increase: bool = False) -> float:
    """The smallest drop (or with `increase`, rise) of a rate that a one-sided test at alpha
    would detect with `power` against another sample the size and clustering of this one (as
    `PairedDifference.mde`). A rate at 0 or 1 has no spread to scale: the zero-event rule
    gives its detectable change instead."""
    p = rate.value
    if p <= 0.0 or p >= 1.0:
        return mde_zero_events(rate.effective_rows, power)
    v = rate.variance()
    same = PairedDifference(p, p, 0.0, v, v, float(rate.rows), rate.clusters)
    return same.mde(alpha, power, increase)
