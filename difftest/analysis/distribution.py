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
  once), and the pair's increment is a sum over positions of g_t(a_t) - g_t(b_t) weighted by
  what the earlier pairs showed at each position (`_weights`). A prompt's draws are laid over
  every position any of them reached (`Draws`: where a stream starts and ends is compared
  too). Equal laws
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
stated (`DistributionTest.mde`), the TV held at every position at which an oracle witness's
bet would have been expected to reach 1/alpha with the pairs seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from difftest.analysis.findings import Origin, VerdictFinding, of_decision
from difftest.core.kinds import Instrument, VerdictKind
from difftest.core.errors import TraceError
from difftest.core.model import ArmTrace, Finding
from difftest.trace.sampled import VerifiedRows

# A token's witness is its count difference between the arms in standard deviations, divided
# by this and clipped to [-1, 1]: a difference of WITNESS_Z standard deviations is bet on fully.
WITNESS_Z = 2.0
MAX_BET = 0.5  # the largest fraction of wealth bet on one pair: bounds the loss of a bad witness
SHOWN_BREAKS = 3  # stream-breaking findings quoted per arm (the JSON counts them all)
MIN_PAIRS = 20  # fewer pairs bet on than this decide nothing: the witness has not learned yet


def prompt_of(request: str) -> str:
    """`r0~3` is draw 3 of prompt `r0`; a name without a `~DIGITS` suffix is its own prompt."""
    head, sep, tail = request.rpartition("~")
    return head if sep and head and tail.isdigit() else request


@dataclass(frozen=True)
class Draws:
    """One arm's draws: per prompt, a (draws, positions) matrix over every position any draw of
    that prompt reached in either arm, from the earliest start to the furthest end, and the
    absolute position of its first column. A draw's cells before its stream starts hold
    NOT_STARTED, after it ends ENDED: where a stream starts and how long it is have a law too,
    and a cut to the positions every draw reached would hide a difference in either (one short
    draw would hide every later position of every draw)."""

    tokens: Mapping[str, np.ndarray]
    start: Mapping[str, int]
    # per prompt, how many tokens each draw emitted (for the report)
    reach: Mapping[str, np.ndarray] = field(default_factory=dict)


MAX_TOKENS = "max_tokens"  # the `[spec-config]` key of a draw's token budget
NOT_STARTED = -2  # a cell before a draw's first traced position (token ids are >= 0)
ENDED = -1  # a cell after a draw's last traced token


def streams(trace: ArmTrace) -> dict[str, tuple[int, list[int]]]:
    """Each request's emitted stream from its verifies: (first position, tokens in order), cut
    to the `max_tokens` budget its `[spec-config]` states (an engine serving a budget emits a
    last verify whole and returns the budget: how far past it a verify reached is not part of
    the token law, and a draw that stopped short of it is)."""
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
    budget = _budget(trace)
    if budget is not None:
        _within_budget(trace, out, budget)
        out = {name: (first, toks[:budget]) for name, (first, toks) in out.items()}
    return out


def _within_budget(trace: ArmTrace, out: Mapping[str, tuple[int, list[int]]], budget: int
                   ) -> None:
    """Only the verify that crosses a stated budget may pass it: one that starts at or past it
    says the engine did not serve the budget its `[spec-config]` states (a TraceError at its
    line: what the budget would cut is not known to be a budget's overshoot)."""
    v = trace.verifies
    for i in range(len(v)):
        name = trace.requests[int(v.req[i])]
        first = out[name][0]
        if int(v.pos[i]) >= first + budget:
            raise TraceError(trace.path, int(v.line[i]), f"[SPECTRACE] req={name} "
                             f"pos={int(v.pos[i])}: starts past the budget max_tokens={budget} "
                             f"its [spec-config] states (the stream starts at {first}): an "
                             "engine serving that budget never verifies there")


def _budget(trace: ArmTrace) -> int | None:
    """The `max_tokens` a trace's `[spec-config]` states (None: none, or not a count)."""
    raw = trace.config.values.get(MAX_TOKENS, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def draws_of(traces: Sequence[ArmTrace]) -> dict[str, list[tuple[int, list[int]]]]:
    """Every run's streams of an arm, grouped by prompt, in run order then request order."""
    out: dict[str, list[tuple[int, list[int]]]] = {}
    for trace in traces:
        for name, stream in streams(trace).items():
            out.setdefault(prompt_of(name), []).append(stream)
    return out


def aligned(a: Mapping[str, list[tuple[int, list[int]]]],
            b: Mapping[str, list[tuple[int, list[int]]]]) -> tuple[Draws, Draws]:
    """Both arms' draws of the prompts both drew, each prompt over the positions from the
    earliest start to the furthest end of any of its draws in either arm (`Draws`)."""
    ta: dict[str, np.ndarray] = {}
    tb: dict[str, np.ndarray] = {}
    ra: dict[str, np.ndarray] = {}
    rb: dict[str, np.ndarray] = {}
    starts: dict[str, int] = {}
    for prompt in sorted(set(a) & set(b)):
        every = [*a[prompt], *b[prompt]]
        lo = min(s for s, _ in every)
        hi = max(s + len(t) for s, t in every)
        ta[prompt], tb[prompt] = _padded(a[prompt], lo, hi), _padded(b[prompt], lo, hi)
        ra[prompt] = np.array([len(t) for _, t in a[prompt]], dtype=np.int64)
        rb[prompt] = np.array([len(t) for _, t in b[prompt]], dtype=np.int64)
        starts[prompt] = lo
    return Draws(ta, starts, ra), Draws(tb, dict(starts), rb)


def _padded(draws: list[tuple[int, list[int]]], lo: int, hi: int) -> np.ndarray:
    out = np.full((len(draws), max(hi - lo, 0)), ENDED, dtype=np.int64)
    for i, (start, toks) in enumerate(draws):
        out[i, :start - lo] = NOT_STARTED
        out[i, start - lo:start - lo + len(toks)] = toks
    return out


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


@dataclass
class Mixture:
    """Several bettors on one sequence of pairs, each with its own witness, their wealth
    averaged: an average of test martingales is one, so Ville's bound holds for the mixture
    at every stopping time, and the mixture grows about as fast as its best bettor (less a
    factor of their number)."""

    bettors: tuple[Bettor, ...]
    peak: float = 1.0

    @property
    def wealth(self) -> float:
        return sum(b.wealth for b in self.bettors) / len(self.bettors)

    def add(self, xs: Sequence[float]) -> None:
        for b, x in zip(self.bettors, xs, strict=True):
            b.add(x)
        self.peak = max(self.peak, self.wealth)

    def crossed(self, alpha: float) -> bool:
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
    positions: int  # the most positions of a prompt (from its earliest start to furthest end)
    wealth: float  # at the last pair
    peak: float  # the highest wealth reached (the test's e-value)
    differ: bool
    excess_tv: tuple[float, ...]  # per position offset: cross-arm TV less the A/A floor
    raw_tv: tuple[float, ...]  # per position offset: TV of all A draws vs all B draws
    floor_tv: tuple[float, ...]  # per position offset: the within-arm (A/A, B/B) TV
    informative: int = 0  # the pairs bet on with a witness learned from earlier pairs
    reach_tv: float = 0.0  # TV of the arms' laws of draw length, averaged over prompts
    # the TV at every position this test finds with probability MDE_POWER, simulated on the
    # arms' own pooled laws with the same prompts, draws and positions (`simulated_mde`);
    # None: not simulated (the oracle figure `oracle_mde` stands in)
    simulated: float | None = None
    # some prompt's draws differ from each other in one arm at least: something was sampled
    varied: bool = True

    @property
    def mde(self) -> float:
        """The smallest TV held at every position this test finds with probability MDE_POWER:
        simulated where it was (`simulated_mde`), else the oracle figure, which the learned
        witness does not reach (only a bound from below)."""
        return self.simulated if self.simulated is not None else self.oracle_mde

    @property
    def oracle_mde(self) -> float:
        """The per-position TV an oracle witness would be expected to detect with the pairs that
        were bet on (`informative`: the first pair of all has no witness yet). With g =
        sign(pA - pB) at every position a pair's bet increment has mean TV and variance at most
        1/2; the best constant bet grows the log-wealth by about TV^2 per pair, so it reaches
        log(1/alpha) after n pairs at TV = sqrt(log(1/alpha) / n). The bet is capped at
        MAX_BET, so the log-wealth grows by at most log(1 + MAX_BET TV) a pair (Jensen): below
        TV = (alpha^(-1/n) - 1) / MAX_BET no witness reaches 1/alpha; the larger of the two is
        stated (1: nothing is detectable). An approximation that states the scale (the learned
        witness needs more), not a power computation: the measured power is in
        docs/statistics.md."""
        if self.informative == 0:
            return 1.0
        need = math.log(1.0 / self.alpha) / self.informative
        return min(1.0, max(math.sqrt(need), math.expm1(need) / MAX_BET))

    def to_json(self) -> dict[str, object]:
        return {"alpha": self.alpha, "pairs": self.pairs, "prompts": self.prompts,
                "positions": self.positions, "e_value": self.peak, "wealth": self.wealth,
                "differ": self.differ, "mde_tv": self.mde,
                "excess_tv": list(self.excess_tv), "raw_tv": list(self.raw_tv),
                "floor_tv": list(self.floor_tv),
                "informative_pairs": self.informative, "reach_tv": self.reach_tv}


def _class_witness(n_a: np.ndarray, n_b: np.ndarray) -> np.ndarray:
    """(nA - nB) / (WITNESS_Z sqrt(nA + nB + 1)), clipped to [-1, 1]."""
    out: np.ndarray = np.clip((n_a - n_b) / (WITNESS_Z * np.sqrt(n_a + n_b + 1.0)), -1.0, 1.0)
    return out


def _witness(classes: Sequence[tuple[np.ndarray, np.ndarray, bool]]) -> np.ndarray:
    """The witness of tokens, in [-1, 1]: the mean, over the classes that have seen an earlier
    pair, of each class's count witness. The classes: a token's counts at its position (the law
    there), at every position of the prompt (the unigram class: a sampler bug that moves mass to
    the tail, such as top-p on one model only, shows at every position at once), and at every
    position of every prompt (a prompt's first pair is bet on from what the other prompts
    taught: with one draw per prompt it is the only class that ever learns). Which classes
    count depends on the earlier pairs only, so the witness stays predictable."""
    used = [_class_witness(n_a, n_b) for n_a, n_b, seen in classes if seen]
    if not used:
        return np.zeros_like(classes[0][0])
    out: np.ndarray = np.mean(used, axis=0)
    return out


def distribution_test(a: Draws, b: Draws, alpha: float) -> DistributionTest:
    """The betting test over the prompts both arms drew, pairs taken round-robin over prompts
    (pair i of every prompt before pair i + 1 of any), and the per-position TVs. A pair's
    increment weighs its positions by what the earlier pairs showed there (`_weights`), so a
    difference at one position of many is not averaged away."""
    bettor = Mixture((Bettor(), Bettor()))
    prompts = sorted(a.tokens)
    ids = np.unique(np.concatenate([np.zeros(0, dtype=np.int64),
                                    *(m.ravel() for m in (*a.tokens.values(), *b.tokens.values()))]))
    every_a, every_b = np.zeros(ids.size), np.zeros(ids.size)  # every prompt, every position
    compact: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    for p in prompts:
        ta, tb = a.tokens[p], b.tokens[p]
        local, inv = np.unique(np.concatenate([ta.ravel(), tb.ravel()]), return_inverse=True)
        inv = inv.ravel()
        width = max(local.size, 1)
        compact[p] = (inv[:ta.size].reshape(ta.shape), inv[ta.size:].reshape(tb.shape),
                      np.zeros((ta.shape[1], width)), np.zeros((ta.shape[1], width)),
                      np.searchsorted(ids, local))
    pairs = informative = 0
    rounds = max((min(a.tokens[p].shape[0], b.tokens[p].shape[0]) for p in prompts), default=0)
    cols_of = {p: np.arange(a.tokens[p].shape[1]) for p in prompts}
    for i in range(rounds):
        for p in prompts:
            seq_a, seq_b, na, nb, to_global = compact[p]
            if i >= min(seq_a.shape[0], seq_b.shape[0]) or not seq_a.shape[1]:
                continue
            cols = cols_of[p]
            x, y = seq_a[i], seq_b[i]
            pa, pb = na.sum(axis=0), nb.sum(axis=0)  # the prompt's tokens at every position
            mine, anyone = i > 0, pairs > 0
            gx, gy = to_global[x], to_global[y]
            weights = _weights(na, nb, i)
            wx = _witness(((na[cols, x], nb[cols, x], mine), (pa[x], pb[x], mine),
                           (every_a[gx], every_b[gx], anyone)))
            wy = _witness(((na[cols, y], nb[cols, y], mine), (pa[y], pb[y], mine),
                           (every_a[gy], every_b[gy], anyone)))
            # the position class alone as well: a difference whose direction changes from
            # position to position cancels in the pooled classes, which the blend averages in
            px = _witness(((na[cols, x], nb[cols, x], mine),))
            py = _witness(((na[cols, y], nb[cols, y], mine),))
            bettor.add((float(np.dot(weights, wx - wy)) / 2.0,
                        float(np.dot(weights, px - py)) / 2.0))
            na[cols, x] += 1.0
            nb[cols, y] += 1.0
            np.add.at(every_a, gx, 1.0)
            np.add.at(every_b, gy, 1.0)
            informative += anyone
            pairs += 1
    horizon = max((a.tokens[p].shape[1] for p in prompts), default=0)
    excess, raw, floor = _tv_by_position(a, b, prompts, horizon)
    reach_tv = _reach_tv(a, b, prompts)
    varied = any(bool(np.any(m != m[:1])) for m in (*a.tokens.values(), *b.tokens.values()))
    return DistributionTest(alpha=alpha, pairs=pairs, prompts=len(prompts), positions=horizon,
                            wealth=bettor.wealth, peak=bettor.peak, differ=bettor.crossed(alpha),
                            excess_tv=excess, raw_tv=raw, floor_tv=floor,
                            informative=informative, reach_tv=reach_tv, varied=varied)


def _weights(na: np.ndarray, nb: np.ndarray, seen: int) -> np.ndarray:
    """Each position's share of a pair's increment, from the `seen` earlier pairs only (so the
    bet stays predictable and the increment in [-1, 1]): half spread evenly, half in proportion
    to the squared plug-in TV of the earlier pairs there. A difference at one position of many
    then carries a growing share of the bet instead of 1/positions of it."""
    positions = na.shape[0]
    even = np.full(positions, 1.0 / max(positions, 1))
    if seen == 0:
        return even
    shown = 0.5 * np.abs(na - nb).sum(axis=1) / seen
    mass = float(np.square(shown).sum())
    if mass <= 0.0:
        return even
    out: np.ndarray = 0.5 * even + 0.5 * np.square(shown) / mass
    return out


def _reach_tv(a: Draws, b: Draws, prompts: list[str]) -> float:
    """The TV between the arms' laws of how many tokens a draw emitted, averaged over prompts."""
    got = [tv(a.reach[p], b.reach[p]) for p in prompts if p in a.reach and p in b.reach]
    return float(np.mean(got)) if got else 0.0


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


MDE_POWER = 0.9  # the stated detectable TV is found at least this often (simulated)
MDE_REPS = 20  # simulated tests per TV tried
MDE_GRID = tuple(round(0.05 * i, 2) for i in range(1, 21))  # the TVs tried, 0.05 to 1
NEW_TOKEN = -3  # the simulated B's moved mass goes to an id neither arm drew


def simulated_mde(a: Draws, b: Draws, alpha: float, seed: int = 0) -> float | None:
    """The smallest TV d on MDE_GRID at which this test, on the same prompts, numbers of draws
    and positions, calls DIFFER in at least MDE_POWER of MDE_REPS simulated comparisons of
    the arms' pooled law P_t at each position against a law Q_t at TV d from it: mass d moved
    between the tokens the arms drew, its direction flipped from position to position
    (`_shifted`), so that no token gains over a prompt and the witness's pooled classes see
    next to nothing (mass moved to a token neither arm drew would be seen at once, and
    overstate the power). A position whose giving side holds less than d moves d to a token
    neither arm drew instead. Found by bisection over the
    grid (the power grows with d). None when even TV 1 is not found that often. Seeded, so a
    verdict's text is reproducible. The oracle formula (`DistributionTest.oracle_mde`) is
    only a bound from below."""
    prompts = sorted(a.tokens)
    laws = {p: _pooled(a.tokens[p], b.tokens[p]) for p in prompts}
    sizes = {p: (a.tokens[p].shape[0], b.tokens[p].shape[0]) for p in prompts}
    rng = np.random.default_rng(seed)

    def found(d: float) -> bool:
        shifted = {p: _shifted(rng, laws[p], d) for p in prompts}
        hits = 0
        for rep in range(MDE_REPS):
            sa = {p: _drawn(rng, laws[p], sizes[p][0]) for p in prompts}
            sb = {p: _drawn(rng, shifted[p], sizes[p][1]) for p in prompts}
            hits += distribution_test(Draws(sa, {}), Draws(sb, {}), alpha).differ
            if hits >= MDE_POWER * MDE_REPS or (rep + 1 - hits) > (1 - MDE_POWER) * MDE_REPS:
                break
        return hits >= MDE_POWER * MDE_REPS

    lo, hi = -1, len(MDE_GRID) - 1  # MDE_GRID[hi] found; nothing at or below lo tried found
    if not found(MDE_GRID[hi]):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if found(MDE_GRID[mid]):
            hi = mid
        else:
            lo = mid
    return MDE_GRID[hi]


def _pooled(ta: np.ndarray, tb: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per position, the ids both arms' draws hold there and their pooled frequencies."""
    both = np.concatenate([ta, tb], axis=0)
    out = []
    for t in range(both.shape[1]):
        ids, counts = np.unique(both[:, t], return_counts=True)
        out.append((ids, counts / counts.sum()))
    return out


def _shifted(rng: np.random.Generator, law: list[tuple[np.ndarray, np.ndarray]], d: float
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """One prompt's laws at TV d from `law` at every position: each id drawn into one of two
    sides once for the prompt, mass d moved from one side to the other in proportion to what
    each holds, in the opposite direction at every other position (so no id gains over the
    prompt, and the pooled witness classes see next to nothing: the hardest shape for them).
    Where the giving side holds less than d, or one side is empty, d goes to NEW_TOKEN."""
    every = np.unique(np.concatenate([ids for ids, _ in law])) if law else np.zeros(0)
    bit = dict(zip(every.tolist(), (rng.random(every.size) < 0.5).tolist(), strict=True))
    out = []
    for t, (ids, probs) in enumerate(law):
        side = np.array([bit[i] != bool(t % 2) for i in ids.tolist()], dtype=bool)
        give, take = float(probs[side].sum()), float(probs[~side].sum())
        if give >= d and take > 0.0:
            moved = probs.copy()
            moved[side] -= d * probs[side] / give
            moved[~side] += d * probs[~side] / take
            moved = np.clip(moved, 0.0, None)
            out.append((ids, moved / moved.sum()))
        else:
            out.append((np.append(ids, NEW_TOKEN), np.append(probs * (1.0 - d), d)))
    return out


def _drawn(rng: np.random.Generator, law: list[tuple[np.ndarray, np.ndarray]], n: int
           ) -> np.ndarray:
    """n draws, positions independent, from each position's law."""
    out = np.empty((n, len(law)), dtype=np.int64)
    for t, (ids, probs) in enumerate(law):
        out[:, t] = rng.choice(ids, size=n, p=probs)
    return out


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
    # drafts accepted whose traced p(x) is 0, or rejected whose p(x) >= q(x): a correct
    # verify accepts x with probability min(1, p(x)/q(x)), 0 or 1 there, so one is proof
    impossible: int = 0

    def to_json(self) -> dict[str, object]:
        return {"row": self.row, "tested": self.tested, "observed": self.observed,
                "expected": self.expected, "e_value": self.e_value, "flagged": self.flagged,
                "accepted_at_p_zero": self.impossible}


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
        ratio = rows.ratio[sel]
        impossible = int(((acc > 0) & (ratio <= 0.0)).sum()
                         + ((acc == 0) & (ratio >= 1.0)).sum())
        out.append(RowAcceptance(row=r + 1, tested=int(sel.sum()), observed=float(acc.mean()),
                                 expected=float(rows.overlap[sel].mean()), e_value=peak,
                                 flagged=impossible > 0 or any(b.crossed(level)
                                                               for b in (up, down, witnessed)),
                                 impossible=impossible))
    return tuple(out)


# -- the verdict's part --------------------------------------------------------------------------

@dataclass(frozen=True)
class SampledEvidence:
    """The distribution test and each arm's acceptance check (empty for an arm that drafted
    nothing or traced no `[spec-sample]` line)."""

    test: DistributionTest
    acceptance: Mapping[str, tuple[RowAcceptance, ...]]
    # per arm, the parser findings that break its stream (a line not read, a step out of
    # place, a step traced twice differently): such a trace is no record of what was drawn
    breaks: Mapping[str, tuple[Finding, ...]] = field(default_factory=dict)
    simulated: bool = False  # the MDE was simulated (`simulated_mde`), so None there means 1+

    def to_json(self) -> dict[str, object]:
        return {"distribution": self.test.to_json(),
                "acceptance": {arm: [r.to_json() for r in rows]
                               for arm, rows in self.acceptance.items()},
                "stream_breaks": {arm: len(found) for arm, found in self.breaks.items()}}


def sampled_kind(evidence: SampledEvidence) -> tuple[VerdictKind, list[str]]:
    """The kind a sampled comparison demands, and why: DIFFER when the distributions were shown
    to differ or an arm's verify accepts other than its traced overlap says; UNINFORMATIVE with
    fewer than MIN_PAIRS pairs bet on with a learned witness, or none that could reach 1/alpha;
    else AGREE with the smallest effect it could have seen."""
    test = evidence.test
    broken = [f"{arm}: {len(found)} trace finding(s) break the stream (a line not read, a step "
              "out of place, or a step traced twice differently), so neither a difference nor "
              "agreement in law stands: " + "; ".join(str(f) for f in found[:SHOWN_BREAKS])
              + (f" (and {len(found) - SHOWN_BREAKS} more)" if len(found) > SHOWN_BREAKS else "")
              for arm, found in evidence.breaks.items() if found]
    if broken:
        return VerdictKind.UNINFORMATIVE, broken
    reasons: list[str] = []
    for arm, rows in evidence.acceptance.items():
        for r in rows:
            if r.impossible:
                reasons.append(f"{arm}: row {r.row}: {r.impossible} draft(s) accepted whose "
                               "traced target probability p(x) is 0, or rejected whose p(x) is "
                               "at least q(x): a correct verify accepts x with probability "
                               "min(1, p(x)/q(x)), never at p(x) = 0 and always at p(x) >= q(x)")
            elif r.flagged:
                reasons.append(f"{arm}: row {r.row} accepted {r.observed:.3f} of {r.tested} "
                               f"tested drafts, its traced overlap sum(min(p, q)) expects "
                               f"{r.expected:.3f} (e-value {r.e_value:.3g}): the verify does not "
                               "accept what its own p and q say it should")
    if test.differ:
        worst = int(np.argmax(test.excess_tv)) if test.excess_tv else 0
        reasons.insert(0, f"the token distributions differ: e-value {test.peak:.3g} >= "
                          f"1/alpha = {1 / test.alpha:.3g} after {test.pairs} request pairs "
                          f"({test.prompts} prompts); largest excess TV "
                          f"{max(test.excess_tv, default=0.0):.3f} at position offset {worst}"
                          + (f"; the arms' draws differ in length (length TV "
                             f"{test.reach_tv:.2f})" if test.reach_tv > 0 else ""))
    if reasons:
        return VerdictKind.DIFFER, reasons
    if not test.varied:
        return VerdictKind.UNINFORMATIVE, [
            f"every draw of each of the {test.prompts} prompts is one and the same stream in "
            "both arms: nothing was sampled (did the temperature reach the sampler?), so a "
            "comparison of laws could not have failed"]
    if test.informative < MIN_PAIRS or test.mde >= 1.0 or (
            test.simulated is None and test.informative >= MIN_PAIRS and evidence.simulated):
        return VerdictKind.UNINFORMATIVE, [
            f"{test.informative} request pairs bet on with a learned witness, of {test.pairs}: "
            + (f"at least {MIN_PAIRS} are needed" if test.informative < MIN_PAIRS else
               f"with these draws not even a TV of 1 at every position is found in "
               f"{MDE_POWER:.0%} of simulated tests") + ": draw more (--samples, more runs)"]
    return VerdictKind.AGREE, [
        f"no difference shown at alpha {test.alpha:g}: e-value {test.peak:.3g} after "
        f"{test.pairs} request pairs ({test.prompts} prompts, up to {test.positions} positions "
        f"each, where each draw started and ended included; length TV {test.reach_tv:.2f}); "
        f"a TV of {test.mde:.2f} at every position (mass moved between drawn tokens, in a "
        f"direction that changes from position to position) would have been found in "
        f"{MDE_POWER:.0%} of simulated tests with these draws (a difference at fewer positions "
        "needs more)"]


def sampled_finding(evidence: SampledEvidence) -> VerdictFinding:
    """The distribution instrument's finding for `findings.decide`: the kind `sampled_kind`
    demands, with its reasons; the emitted stream could have failed, and the acceptance where
    an arm traced its tests."""
    kind, reasons = sampled_kind(evidence)
    could = (Instrument.EMITTED, *((Instrument.ACCEPTANCE,) if evidence.acceptance else ()))
    return of_decision(Origin.DISTRIBUTION, kind, reasons, could)


DEFAULT_ALPHA = 0.01  # a sampled comparison's level: the false-red rate it is held to


def judge_sampled(a: Sequence[ArmTrace], b: Sequence[ArmTrace],
                  samples: Mapping[str, Sequence[VerifiedRows]], alpha: float,
                  names: tuple[str, str] = ("A", "B")) -> SampledEvidence:
    """The evidence of one sampled comparison: arm A's and arm B's traces (every run of each),
    per arm the tested rows of its runs' `[spec-sample]` lines, and each arm's stream breaks."""
    breaks = {name: tuple(f for t in traces for f in t.findings if f.kind.breaks_stream)
              for name, traces in zip(names, (a, b), strict=True)}
    da, db = aligned(draws_of(a), draws_of(b))
    test = distribution_test(da, db, alpha)
    if not test.differ and test.informative >= MIN_PAIRS:
        test = replace(test, simulated=simulated_mde(da, db, alpha))
    acceptance: dict[str, tuple[RowAcceptance, ...]] = {}
    for arm, parts in samples.items():
        rows = VerifiedRows.joined(parts)
        if len(rows):
            acceptance[arm] = acceptance_check(rows, alpha)
    return SampledEvidence(test, acceptance, breaks,
                           simulated=not test.differ and test.informative >= MIN_PAIRS)
