"""Pair two arms' drafted blocks by (request, pos), and find where their contexts diverged.

With a lossless verify both arms emit the same tokens, but different drafts are accepted
differently, so the arms visit different positions: a position only one arm visited is
*unmatched*, not a difference. Once a request's emitted streams differ, every later step ran on
a different context and is *context-diverged*: comparing its drafts would blame the drafter for
what the context did.

Acceptance explains an unmatched step only where the other arm emitted that position from a
step that began earlier (it accepted its way past). A step (drafting or not) at a position the
other arm's stream never emitted, before that stream's end, is *lost* from the other trace (or
extra in this one): a difference, not acceptance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from difftest.core.kinds import AlignMode
from difftest.core.model import ArmTrace

POS_BITS = 40  # positions below 2**40; requests below 2**23 in a composite int64 key


@dataclass(frozen=True)
class EmitDivergence:
    """The first position at which a request's emitted streams differ."""

    req: str
    position: int  # absolute token position of the first differing emitted token
    token_a: int
    token_b: int


@dataclass(frozen=True)
class CoverageGap:
    """A request one arm never traced (end None), or whose streams end apart after a different
    number of steps."""

    req: str
    end_a: int | None  # the position after the last emitted token; None: never traced
    end_b: int | None
    steps_a: int
    steps_b: int


@dataclass(frozen=True)
class Alignment:
    """Which blocks of A and B are compared, and which are not and why.

    `a_index`/`b_index` index the arms' verify lines (or, in ordinal mode, their proposing
    steps); `req`/`pos` name the pair. Unmatched and diverged steps keep their own index arrays.
    """

    mode: AlignMode  # keyed by (req, pos), or by proposing-step order
    requests: tuple[str, ...]  # unified names; `req` arrays index this list
    req: np.ndarray
    pos: np.ndarray
    a_index: np.ndarray
    b_index: np.ndarray
    unmatched_a: np.ndarray  # verify indices of A with no B step at that (req, pos)
    unmatched_b: np.ndarray
    diverged_a: np.ndarray  # matched steps left out: their context had diverged (A indices)
    diverged_b: np.ndarray
    divergences: tuple[EmitDivergence, ...] = ()
    notes: tuple[str, ...] = ()
    # requests whose emitted streams end at different positions (or that one arm lacks): steps
    # past the shorter arm's end are not explained by acceptance, they were never run
    coverage_gaps: tuple[CoverageGap, ...] = ()
    # the steps (verify indices of A / of B, drafting or not) at positions the other arm's
    # stream never emitted, before its end
    lost_a: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lost_b: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return int(self.a_index.shape[0])


def _unified_codes(a: ArmTrace, b: ArmTrace) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One request numbering for both arms (A's order first): code maps per arm."""
    names = list(a.requests)
    index = {n: i for i, n in enumerate(names)}
    for n in b.requests:
        if n not in index:
            index[n] = len(names)
            names.append(n)
    map_a = np.array([index[n] for n in a.requests], dtype=np.int64)
    map_b = np.array([index[n] for n in b.requests], dtype=np.int64)
    return names, map_a, map_b


def step_keys(req_codes: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """A sortable int64 key per (request, pos)."""
    if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= 1 << POS_BITS):
        raise ValueError("positions outside 0..2**40 cannot be keyed")
    return (req_codes.astype(np.int64) << POS_BITS) | pos.astype(np.int64)


def _emitted(trace: ArmTrace, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every emitted token of an arm keyed by (request, absolute position), from its verifies."""
    v = trace.verifies
    owner = np.repeat(np.arange(len(v)), np.diff(v.emit_off))
    within = np.arange(v.emit_ids.size) - v.emit_off[:-1][owner]
    return step_keys(codes[owner], v.pos[owner] + within), v.emit_ids


@dataclass(frozen=True)
class _Stream:
    """An arm's emitted tokens keyed by (request, absolute position), as `_emitted` gives them."""

    keys: np.ndarray
    tokens: np.ndarray

    @cached_property
    def ordered(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The keys sorted and where each came from, where that needs no sort of the keys: a
        stream emits each position once and a request's positions in order, so its keys
        grouped by request (a radix sort of the few request codes) are sorted already. None
        where they are not (a position emitted twice, or out of order)."""
        keys = self.keys
        if keys.size == 0:
            return keys, np.zeros(0, dtype=np.intp)
        req = keys >> POS_BITS
        if int(req.max()) >= 1 << 15:
            return None
        order = np.argsort(req.astype(np.int16), kind="stable")
        grouped = keys[order]
        if not bool(np.all(grouped[1:] > grouped[:-1])):
            return None
        return grouped, order

    def sorted_keys(self) -> np.ndarray:
        """`np.sort(self.keys)`."""
        return self.ordered[0] if self.ordered is not None else np.sort(self.keys)


def _stream(trace: ArmTrace, codes: np.ndarray) -> _Stream:
    return _Stream(*_emitted(trace, codes))


def _emitted_in_both(a: _Stream, b: _Stream) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`np.intersect1d(a.keys, b.keys, return_indices=True)`: by binary search in the other's
    keys where both streams' keys are had in order without sorting them (each distinct)."""
    ordered_a, ordered_b = a.ordered, b.ordered
    if ordered_a is None or ordered_b is None:
        common, ia, ib = np.intersect1d(a.keys, b.keys, return_indices=True)
        return common, ia, ib
    (keys_a, from_a), (keys_b, from_b) = ordered_a, ordered_b
    xa = np.flatnonzero(_among(keys_a, keys_b))
    common = keys_a[xa]
    return common, from_a[xa], from_b[np.searchsorted(keys_b, common)]


def _divergences(sa: _Stream, sb: _Stream, names: list[str]) -> list[EmitDivergence]:
    """Per request, the first position at which both arms emitted a token and the tokens differ."""
    ta, tb = sa.tokens, sb.tokens
    common, ia, ib = _emitted_in_both(sa, sb)
    differ = np.flatnonzero(ta[ia] != tb[ib])  # `common` is sorted: request, then position
    reqs = common[differ] >> POS_BITS
    _, first = np.unique(reqs, return_index=True)
    out = []
    for j in differ[first].tolist():
        key = int(common[j])
        out.append(EmitDivergence(names[key >> POS_BITS], key & ((1 << POS_BITS) - 1),
                                  int(ta[ia[j]]), int(tb[ib[j]])))
    return out


def _stream_ends(trace: ArmTrace, codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per unified request: the position after its last emitted token, and how many verify
    steps it ran (0: never traced)."""
    steps = np.bincount(codes, minlength=n)
    ends = np.zeros_like(steps)
    v = trace.verifies
    np.maximum.at(ends, codes, v.pos + np.diff(v.emit_off))
    return ends, steps


def _coverage_gaps(a: ArmTrace, ca: np.ndarray, b: ArmTrace, cb: np.ndarray,
                   names: list[str]) -> tuple[CoverageGap, ...]:
    """Requests one arm never traced, or whose streams end apart after a different number of
    steps. A runner with a token budget ends both streams at one position; one with a step
    budget runs both for the same number of steps; an arm that stopped early does neither.
    A request that outgrew the draft context stops speculating wherever it got to."""
    ends_a, steps_a = _stream_ends(a, ca, len(names))
    ends_b, steps_b = _stream_ends(b, cb, len(names))
    outgrown = {n.req for t in (a, b) for n in t.notices}
    gaps: list[CoverageGap] = []
    traced_a, traced_b = steps_a > 0, steps_b > 0
    for i in np.flatnonzero((ends_a != ends_b) | (traced_a != traced_b)).tolist():
        both = traced_a[i] and traced_b[i]
        if both and (steps_a[i] == steps_b[i] or names[i] in outgrown):
            continue
        gaps.append(CoverageGap(req=names[i], end_a=int(ends_a[i]) if traced_a[i] else None,
                                end_b=int(ends_b[i]) if traced_b[i] else None,
                                steps_a=int(steps_a[i]), steps_b=int(steps_b[i])))
    return tuple(gaps)


def _among(keys: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """`np.isin(keys, pool)` for a sorted pool: one binary search per key, no sort of both."""
    if pool.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    at = np.minimum(np.searchsorted(pool, keys), pool.size - 1)
    found: np.ndarray = pool[at] == keys
    return found


def _lost(trace: ArmTrace, codes: np.ndarray, other: ArmTrace, other_codes: np.ndarray,
          n: int, emitted: _Stream) -> np.ndarray:
    """The steps of `trace` (drafting or not) at positions `other` never emitted (`emitted`,
    its stream), before the end of its stream. Acceptance moves where steps start, never which
    positions a stream emits: both arms emit every position of a request up to its end."""
    ends, _ = _stream_ends(other, other_codes, n)
    pos = trace.verifies.pos
    missing = ~_among(step_keys(codes, pos), emitted.sorted_keys()) & (pos < ends[codes])
    lost: np.ndarray = np.flatnonzero(missing)
    return lost


def align(a: ArmTrace, b: ArmTrace, *, forced: bool = False) -> Alignment:
    """Pair the arms' steps; fall back to proposing-step ordinals when either lacks verifies.

    `forced`: B ran teacher-forced on A's committed stream (checked by difftest.core.force before),
    so its contexts are A's whatever it would have emitted: no step is context-diverged."""
    if len(a.verifies) and len(b.verifies):
        return _align_positions(a, b, forced)
    return _align_ordinals(a, b)


def _align_positions(a: ArmTrace, b: ArmTrace, forced: bool = False) -> Alignment:
    names, map_a, map_b = _unified_codes(a, b)
    ca = map_a[a.verifies.req]
    cb = map_b[b.verifies.req]
    ka = step_keys(ca, a.verifies.pos)
    kb = step_keys(cb, b.verifies.pos)
    # A (request, pos) verified twice is the parser's finding (a harmless identical repeat, or
    # a conflicting one that leaves no verdict); of the copies, the last is paired.
    # last occurrence wins: reverse, unique keeps the first of the reversed
    ua, ia_rev = np.unique(ka[::-1], return_index=True)
    ub, ib_rev = np.unique(kb[::-1], return_index=True)
    ia_all = ka.size - 1 - ia_rev
    ib_all = kb.size - 1 - ib_rev
    common, xa, xb = np.intersect1d(ua, ub, return_indices=True)
    a_idx = ia_all[xa]
    b_idx = ib_all[xb]
    unmatched_a = np.sort(ia_all[~np.isin(ua, common)])
    unmatched_b = np.sort(ib_all[~np.isin(ub, common)])
    # A verify that drafted nothing (k=0) carries the emitted stream (divergences and coverage
    # read every verify) but is no block: not paired, not unmatched. One arm's k=0 against the
    # other's draft stays paired: its rows are a draft-length difference.
    drafted_a = np.diff(a.verifies.draft_off) > 0
    drafted_b = np.diff(b.verifies.draft_off) > 0
    pair = drafted_a[a_idx] | drafted_b[b_idx]
    common, a_idx, b_idx = common[pair], a_idx[pair], b_idx[pair]
    unmatched_a = unmatched_a[drafted_a[unmatched_a]]
    unmatched_b = unmatched_b[drafted_b[unmatched_b]]

    stream_a, stream_b = _stream(a, ca), _stream(b, cb)  # each read once, by both uses
    divergences = [] if forced else _divergences(stream_a, stream_b, names)
    diverged = np.zeros(common.size, dtype=bool)
    req_of = common >> POS_BITS
    pos_of = common & ((1 << POS_BITS) - 1)
    for d in divergences:
        # A step at pos P read context [0, P): it diverged when P is past the differing token.
        diverged |= (req_of == names.index(d.req)) & (pos_of > d.position)
    keep = ~diverged
    order = np.argsort(a.verifies.line[a_idx[keep]])  # line numbers are unique
    d_order = np.argsort(a_idx[diverged])  # pairs stay pairs
    return Alignment(
        mode=AlignMode.POSITION, requests=tuple(names), coverage_gaps=_coverage_gaps(a, ca, b, cb, names),
        req=req_of[keep][order], pos=pos_of[keep][order],
        a_index=a_idx[keep][order], b_index=b_idx[keep][order],
        unmatched_a=unmatched_a, unmatched_b=unmatched_b,
        diverged_a=a_idx[diverged][d_order], diverged_b=b_idx[diverged][d_order],
        divergences=tuple(divergences),
        lost_a=_lost(a, ca, b, cb, len(names), stream_b),
        lost_b=_lost(b, cb, a, ca, len(names), stream_a))


def _align_ordinals(a: ArmTrace, b: ArmTrace) -> Alignment:
    pa = np.flatnonzero(a.proposes.proposing)
    pb = np.flatnonzero(b.proposes.proposing)
    n = min(pa.size, pb.size)
    notes = ["no [SPECTRACE] lines in both arms: blocks are paired by the order of the "
             "proposing steps, which is only sound for a single request, and only the first "
             "proposing row of each step is known"]
    return Alignment(
        mode=AlignMode.ORDINAL, requests=("",), req=np.zeros(n, np.int64), pos=np.arange(n, dtype=np.int64),
        a_index=pa[:n], b_index=pb[:n], unmatched_a=pa[n:], unmatched_b=pb[n:],
        diverged_a=np.zeros(0, np.int64), diverged_b=np.zeros(0, np.int64), notes=tuple(notes))
