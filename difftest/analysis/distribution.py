"""The distribution instrument of sampled decoding: do two arms emit the same distribution?

Under sampling, speculative decoding is lossless in distribution only: two correct arms emit
different tokens from different seeds, and a wrong sampler emits tokens that are each possible.
So the instrument compares, per prompt and per generated position, the law of the token there,
over many seeded draws (`NAME~J` requests, and runs) of each arm:

- **the decision: a two-sample test by betting** (an e-process; Shekhar and Ramdas, 2023, the
  dual of a confidence sequence). Draws are paired by prompt (draw i of A with draw i of B) and
  taken one pair at a time; for each pair a witness g_t, learned from the earlier pairs only,
  scores every position t of the pair's two streams: the mean of (nA - nB) / (2 sqrt(nA + nB +
  1)) (clipped to [-1, 1]) over the counts of token v at t so far and over its counts at every
  position of the prompt (the unigram class, where a bug that moves mass to the tail shows at
  once), and the pair's increment is the mean over positions of g_t(a_t) - g_t(b_t). Equal laws
  at every position make that increment mean zero whatever the witness, so the wealth prod(1 +
  lambda Z / 2) (lambda chosen from the earlier pairs only, aGRAPA) is a test martingale and, by
  Ville's inequality, reaches 1/alpha with probability at most alpha at any stopping time: runs
  may be added until it decides (`--until-decided`) with no correction for looking. A pair is
  one request's whole stream in each arm: positions of one request are never counted as
  independent evidence (the test is request-clustered);
- **the size: total-variation distance per position above an A/A floor**. The plug-in TV of two
  finite samples is biased upward by sampling alone; each arm's draws are split in two (draws
  from different seeds), and the TV across arms (A half vs B half) less the TV within arms (A
  half vs A half, B half vs B half), at equal sample sizes, is the excess TV: zero in
  expectation when the arms agree;
- **the acceptance check**: in each arm that traced `[spec-sample]` lines, per drafted row, the
  observed acceptance against the expected one, the traced overlap sum(min(p, q)) of each tested
  row. A correct verify accepts row i with probability exactly that overlap, so the running sum
  of (accepted - overlap) is a martingale; the same betting test, two-sided, at alpha / 3 per
  side and row (Bonferroni over the three tests and the rows), flags a verify that rejects what
  it should accept (or the reverse) even while the distribution test is undecided; and,
  conditioned on the drafted token x, accepted - min(1, p(x)/q(x)) weighted by a witness learned
  per class of q(x), which sees a verify whose acceptance depends on the token otherwise than
  p/q says (noise reuse).

Chosen over the mixture SPRT because mSPRT needs a parametric (Gaussian) model of the increment,
and a token law over a vocabulary has none that holds at the sample sizes of a run; the betting
test needs only bounded increments and is exact at every stopping time. The price: it learns its
witness as it goes, so its first pairs carry no power.

Green is not proof of equality: an undecided test ends AGREE with its minimum detectable effect
stated (`DistributionTest.mde`), the per-position TV at which an oracle witness's bet would
have been expected to reach 1/alpha with the pairs seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from difftest.analysis.findings import Origin, VerdictFinding, of_decision
from difftest.core.kinds import Instrument, VerdictKind
from difftest.core.model import ArmTrace
from difftest.trace.sampled import VerifiedRows

# A token's witness is its count difference between the arms in standard deviations, divided
# by this and clipped to [-1, 1]: a difference of WITNESS_Z standard deviations is bet on fully.
WITNESS_Z = 2.0
MAX_BET = 0.5  # the largest fraction of wealth bet on one pair: bounds the loss of a bad witness
MIN_PAIRS = 20  # fewer pairs than this decide nothing: the witness has not learned yet


def prompt_of(request: str) -> str:
    """`r0~3` is draw 3 of prompt `r0`; a name without a `~DIGITS` suffix is its own prompt."""
    head, sep, tail = request.rpartition("~")
    return head if sep and head and tail.isdigit() else request


@dataclass(frozen=True)
class Draws:
    """One arm's draws: per prompt, a (draws, positions) token matrix over the positions every
    draw of that prompt reached, and the absolute position of its first column."""

    tokens: Mapping[str, np.ndarray]
    start: Mapping[str, int]


def streams(trace: ArmTrace) -> dict[str, tuple[int, list[int]]]:
    """Each request's emitted stream from its verifies: (first position, tokens in order)."""
    v = trace.verifies
    out: dict[str, tuple[int, list[int]]] = {}
    order = np.lexsort((v.pos, v.req)) if len(v) else np.zeros(0, dtype=np.int64)
    for i in order.tolist():
        name = trace.requests[int(v.req[i])]
        pos = int(v.pos[i])
        emit = v.emit(i).tolist()
        if name not in out:
            out[name] = (pos, [])
        first, toks = out[name]
        if pos == first + len(toks):  # a repeat or a hole ends what can be used of the stream
            toks.extend(emit)
    return out


def draws_of(traces: Sequence[ArmTrace]) -> dict[str, list[tuple[int, list[int]]]]:
    """Every run's streams of an arm, grouped by prompt, in run order then request order."""
    out: dict[str, list[tuple[int, list[int]]]] = {}
    for trace in traces:
        for name, stream in streams(trace).items():
            out.setdefault(prompt_of(name), []).append(stream)
    return out


def aligned(a: Mapping[str, list[tuple[int, list[int]]]],
            b: Mapping[str, list[tuple[int, list[int]]]]) -> tuple[Draws, Draws]:
    """Both arms' draws cut to the positions every draw of a prompt reached, in both arms;
    prompts only one arm has, or with no common position, are left out."""
    ta: dict[str, np.ndarray] = {}
    tb: dict[str, np.ndarray] = {}
    starts: dict[str, int] = {}
    for prompt in sorted(set(a) & set(b)):
        every = [*a[prompt], *b[prompt]]
        lo = max(s for s, _ in every)
        hi = min(s + len(t) for s, t in every)
        if hi <= lo:
            continue
        ta[prompt] = np.array([t[lo - s:hi - s] for s, t in a[prompt]], dtype=np.int64)
        tb[prompt] = np.array([t[lo - s:hi - s] for s, t in b[prompt]], dtype=np.int64)
        starts[prompt] = lo
    return Draws(ta, starts), Draws(tb, dict(starts))


# -- the betting test ----------------------------------------------------------------------------

@dataclass
class Bettor:
    """aGRAPA (Waudby-Smith and Ramdas, 2023): bet lambda = mean / (variance + mean^2) of the
    earlier increments, clipped to [0, MAX_BET]; the wealth is prod(1 + lambda x), x in [-1, 1]."""

    wealth: float = 1.0
    peak: float = 1.0
    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def bet(self) -> float:
        mean = self.total / (self.n + 1)  # a prior pseudo-observation at 0
        second = (self.squares + 0.25) / (self.n + 1)  # ... of variance 1/4
        variance = max(second - mean * mean, 1e-12)
        return min(max(mean / (variance + mean * mean), 0.0), MAX_BET)

    def add(self, x: float) -> None:
        self.wealth *= 1.0 + self.bet() * x
        self.peak = max(self.peak, self.wealth)
        self.n += 1
        self.total += x
        self.squares += x * x

    def crossed(self, alpha: float) -> bool:
        """Ville: under the null the wealth ever reaches 1/alpha with probability <= alpha."""
        return self.peak >= 1.0 / alpha


def tv(a: np.ndarray, b: np.ndarray) -> float:
    """Total variation between the empirical laws of two token samples."""
    if not a.size or not b.size:
        return 0.0
    values, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    ca = np.bincount(inverse[:a.size], minlength=values.size) / a.size
    cb = np.bincount(inverse[a.size:], minlength=values.size) / b.size
    return 0.5 * float(np.abs(ca - cb).sum())


@dataclass(frozen=True)
class DistributionTest:
    """What the betting test and the TV estimate found."""

    alpha: float
    pairs: int
    prompts: int
    positions: int  # the longest common horizon over prompts
    wealth: float  # at the last pair
    peak: float  # the highest wealth reached (the test's e-value)
    differ: bool
    excess_tv: tuple[float, ...]  # per position offset: cross-arm TV less the A/A floor
    raw_tv: tuple[float, ...]  # per position offset: TV of all A draws vs all B draws
    floor_tv: tuple[float, ...]  # per position offset: the within-arm (A/A, B/B) TV

    @property
    def mde(self) -> float:
        """The per-position TV an oracle witness would be expected to detect with these pairs.
        With g = sign(pA - pB) at every position a pair's bet increment has mean TV and
        variance at most 1/2; the best constant bet grows the log-wealth by about TV^2 per pair,
        so it reaches log(1/alpha) after n pairs at TV = sqrt(log(1/alpha) / n). An
        approximation that states the scale (the learned witness needs more), not a power
        computation: the measured power is in docs/statistics.md."""
        if self.pairs == 0:
            return 1.0
        return min(1.0, math.sqrt(math.log(1.0 / self.alpha) / self.pairs))

    def to_json(self) -> dict[str, object]:
        return {"alpha": self.alpha, "pairs": self.pairs, "prompts": self.prompts,
                "positions": self.positions, "e_value": self.peak, "wealth": self.wealth,
                "differ": self.differ, "mde_tv": self.mde,
                "excess_tv": list(self.excess_tv), "raw_tv": list(self.raw_tv),
                "floor_tv": list(self.floor_tv)}


def _witness(at_a: np.ndarray, at_b: np.ndarray, all_a: np.ndarray, all_b: np.ndarray
             ) -> np.ndarray:
    """The witness of tokens, in [-1, 1]: (nA - nB) / (WITNESS_Z sqrt(nA + nB + 1)) clipped,
    half from their counts at their position (the law there), half from their counts at every
    position of the prompt (the n-gram class of one token: a sampler bug that moves mass to the
    tail, such as top-p on one model only, shows at every position at once, and is learned from
    all of them)."""
    here = np.clip((at_a - at_b) / (WITNESS_Z * np.sqrt(at_a + at_b + 1.0)), -1.0, 1.0)
    pooled = np.clip((all_a - all_b) / (WITNESS_Z * np.sqrt(all_a + all_b + 1.0)), -1.0, 1.0)
    out: np.ndarray = 0.5 * (here + pooled)
    return out


def distribution_test(a: Draws, b: Draws, alpha: float) -> DistributionTest:
    """The betting test over the prompts both arms drew, pairs taken round-robin over prompts
    (pair i of every prompt before pair i + 1 of any), and the per-position TVs."""
    bettor = Bettor()
    prompts = sorted(a.tokens)
    compact: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    for p in prompts:
        ta, tb = a.tokens[p], b.tokens[p]
        _, inv = np.unique(np.concatenate([ta.ravel(), tb.ravel()]), return_inverse=True)
        width = int(inv.max()) + 1 if inv.size else 1
        ia = inv[:ta.size].reshape(ta.shape)
        ib = inv[ta.size:].reshape(tb.shape)
        length = ta.shape[1]
        compact[p] = (ia, ib, np.zeros((length, width)), np.zeros((length, width)))
    pairs = 0
    rounds = max((min(a.tokens[p].shape[0], b.tokens[p].shape[0]) for p in prompts), default=0)
    cols_of = {p: np.arange(a.tokens[p].shape[1]) for p in prompts}
    for i in range(rounds):
        for p in prompts:
            seq_a, seq_b, na, nb = compact[p]
            if i >= min(seq_a.shape[0], seq_b.shape[0]):
                continue
            cols = cols_of[p]
            x, y = seq_a[i], seq_b[i]
            pa, pb = na.sum(axis=0), nb.sum(axis=0)  # the prompt's tokens at every position
            bettor.add(float(np.mean(_witness(na[cols, x], nb[cols, x], pa[x], pb[x])
                                     - _witness(na[cols, y], nb[cols, y], pa[y], pb[y]))) / 2.0)
            na[cols, x] += 1.0
            nb[cols, y] += 1.0
            pairs += 1
    horizon = max((a.tokens[p].shape[1] for p in prompts), default=0)
    excess, raw, floor = _tv_by_position(a, b, prompts, horizon)
    return DistributionTest(alpha=alpha, pairs=pairs, prompts=len(prompts), positions=horizon,
                            wealth=bettor.wealth, peak=bettor.peak, differ=bettor.crossed(alpha),
                            excess_tv=excess, raw_tv=raw, floor_tv=floor)


def _tv_by_position(a: Draws, b: Draws, prompts: list[str], horizon: int
                    ) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per position offset, averaged over the prompts that reach it: the cross-half TV less the
    within-half TV (halves: even and odd draws), the whole-sample TV, and the within-half TV."""
    excess, raw, floor = [], [], []
    for t in range(horizon):
        e, r, f = [], [], []
        for p in prompts:
            ta, tb = a.tokens[p], b.tokens[p]
            if t >= ta.shape[1] or ta.shape[0] < 2 or tb.shape[0] < 2:
                continue
            a0, a1, b0, b1 = ta[0::2, t], ta[1::2, t], tb[0::2, t], tb[1::2, t]
            within = (tv(a0, a1) + tv(b0, b1)) / 2
            cross = (tv(a0, b1) + tv(a1, b0)) / 2
            e.append(cross - within)
            f.append(within)
            r.append(tv(ta[:, t], tb[:, t]))
        excess.append(float(np.mean(e)) if e else 0.0)
        raw.append(float(np.mean(r)) if r else 0.0)
        floor.append(float(np.mean(f)) if f else 0.0)
    return tuple(excess), tuple(raw), tuple(floor)


# -- expected against observed acceptance ---------------------------------------------------------

@dataclass(frozen=True)
class RowAcceptance:
    """One drafted row index of one arm: how often it was accepted when tested, how often the
    traced overlap says it should have been, and the two-sided betting test of the difference."""

    row: int  # 1-based, as `[spec-logits]` rows are numbered
    tested: int
    observed: float
    expected: float
    e_value: float  # the larger side's peak wealth
    flagged: bool

    def to_json(self) -> dict[str, object]:
        return {"row": self.row, "tested": self.tested, "observed": self.observed,
                "expected": self.expected, "e_value": self.e_value, "flagged": self.flagged}


Q_BINS = np.array([0.25, 0.5, 0.75])  # the witness's classes of q(x): how sure the draft was


def acceptance_check(rows: VerifiedRows, alpha: float) -> tuple[RowAcceptance, ...]:
    """Per row index, in trace order, three betting tests at alpha / 3 per row (Bonferroni
    over the tests and rows): accepted - overlap, each side (a verify that accepts less, or
    more, than sum(min(p, q)) says), and accepted - min(1, p(x)/q(x)) weighted by a witness
    learned per class of q(x) from the earlier rows (a verify whose acceptance depends on the
    drafted token otherwise than p/q says, as when it reuses the uniform that drew the token:
    draft-favoured tokens accepted more, tail tokens less, the average nearly unchanged). Each
    increment is in [-1, 1] and mean zero for a correct verify, whatever was drafted."""
    found = sorted(set(rows.index.tolist()))
    level = alpha / (3 * max(len(found), 1))
    out = []
    for r in found:
        sel = rows.index == r
        acc = rows.accepted[sel].astype(np.float64)
        up, down, witnessed = Bettor(), Bettor(), Bettor()
        sums = np.zeros(Q_BINS.size + 1)
        counts = np.zeros(Q_BINS.size + 1)
        bins = np.searchsorted(Q_BINS, rows.q[sel], side="right")
        for d, e, b in zip((acc - rows.overlap[sel]).tolist(), (acc - rows.ratio[sel]).tolist(),
                           bins.tolist(), strict=True):
            up.add(d)
            down.add(-d)
            w = sums[b] / (abs(sums[b]) + math.sqrt(counts[b]) + 1.0)
            witnessed.add(w * e)
            sums[b] += e
            counts[b] += 1
        peak = max(up.peak, down.peak, witnessed.peak)
        out.append(RowAcceptance(row=r + 1, tested=int(sel.sum()), observed=float(acc.mean()),
                                 expected=float(rows.overlap[sel].mean()), e_value=peak,
                                 flagged=any(b.crossed(level) for b in (up, down, witnessed))))
    return tuple(out)


# -- the verdict's part --------------------------------------------------------------------------

@dataclass(frozen=True)
class SampledEvidence:
    """The distribution test and each arm's acceptance check (empty for an arm that drafted
    nothing or traced no `[spec-sample]` line)."""

    test: DistributionTest
    acceptance: Mapping[str, tuple[RowAcceptance, ...]]

    def to_json(self) -> dict[str, object]:
        return {"distribution": self.test.to_json(),
                "acceptance": {arm: [r.to_json() for r in rows]
                               for arm, rows in self.acceptance.items()}}


def sampled_kind(evidence: SampledEvidence) -> tuple[VerdictKind, list[str]]:
    """The kind a sampled comparison demands, and why: DIFFER when the distributions were shown
    to differ or an arm's verify accepts other than its traced overlap says; UNINFORMATIVE with
    fewer than MIN_PAIRS pairs; else AGREE with the smallest effect it could have seen."""
    test = evidence.test
    reasons: list[str] = []
    for arm, rows in evidence.acceptance.items():
        for r in rows:
            if r.flagged:
                reasons.append(f"{arm}: row {r.row} accepted {r.observed:.3f} of {r.tested} "
                               f"tested drafts, its traced overlap sum(min(p, q)) expects "
                               f"{r.expected:.3f} (e-value {r.e_value:.3g}): the verify does not "
                               "accept what its own p and q say it should")
    if test.differ:
        worst = int(np.argmax(test.excess_tv)) if test.excess_tv else 0
        reasons.insert(0, f"the token distributions differ: e-value {test.peak:.3g} >= "
                          f"1/alpha = {1 / test.alpha:.3g} after {test.pairs} request pairs "
                          f"({test.prompts} prompts); largest excess TV "
                          f"{max(test.excess_tv, default=0.0):.3f} at position offset {worst}")
    if reasons:
        return VerdictKind.DIFFER, reasons
    if test.pairs < MIN_PAIRS:
        return VerdictKind.UNINFORMATIVE, [
            f"{test.pairs} request pairs over positions both arms reached (at least "
            f"{MIN_PAIRS} are needed): draw more (--samples, more runs)"]
    return VerdictKind.AGREE, [
        f"no difference shown at alpha {test.alpha:g}: e-value {test.peak:.3g} after "
        f"{test.pairs} request pairs ({test.prompts} prompts, {test.positions} positions); "
        f"smallest per-position TV this could detect about {test.mde:.2f}"]


def sampled_finding(evidence: SampledEvidence) -> VerdictFinding:
    """The distribution instrument's finding for `findings.decide`: the kind `sampled_kind`
    demands, with its reasons; the emitted stream could have failed, and the acceptance where
    an arm traced its tests."""
    kind, reasons = sampled_kind(evidence)
    could = (Instrument.EMITTED, *((Instrument.ACCEPTANCE,) if evidence.acceptance else ()))
    return of_decision(Origin.DISTRIBUTION, kind, reasons, could)


DEFAULT_ALPHA = 0.01  # a sampled comparison's level: the false-red rate it is held to


def judge_sampled(a: Sequence[ArmTrace], b: Sequence[ArmTrace],
                  samples: Mapping[str, Sequence[VerifiedRows]], alpha: float) -> SampledEvidence:
    """The evidence of one sampled comparison: arm A's and arm B's traces (every run of each),
    and per arm the tested rows of its runs' `[spec-sample]` lines."""
    da, db = aligned(draws_of(a), draws_of(b))
    test = distribution_test(da, db, alpha)
    acceptance: dict[str, tuple[RowAcceptance, ...]] = {}
    for arm, parts in samples.items():
        rows = VerifiedRows.joined(parts)
        if len(rows):
            acceptance[arm] = acceptance_check(rows, alpha)
    return SampledEvidence(test, acceptance)
