"""Which kind of bug a difference looks like, read from the two signals a trace carries.

Greedy verify is lossless: drafts never change the committed stream, only how much of it each
step accepts. So a drafter bug leaves the committed stream equal and moves drafts (and with them
acceptance); a verify-path or state bug changes the committed stream while acceptance may look
healthy; an acceptance bug moves acceptance where both arms drafted the same tokens from the same
context. `classify` finds where each instrument first parted and names the kind
(difftest.core.corpus.BugKind), in this one place; the reports print it for a DIFFER.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.core.corpus import BugKind
from difftest.core.model import ArmTrace

Step = tuple[tuple[int, ...], tuple[int, ...]]  # (drafted ids, emitted ids) of one verify


@dataclass(frozen=True)
class Parted:
    """Where one instrument first parted: request and position, and what each arm had there."""

    req: str
    pos: int
    a: str
    b: str

    @property
    def where(self) -> str:
        return f"{self.req} pos {self.pos}"


@dataclass(frozen=True)
class BugClass:
    """The kind a difference looks like and the first place each instrument parted (None: it
    did not part)."""

    kind: BugKind | None  # None: only the logits differed
    drafts: Parted | None
    committed: Parted | None
    acceptance: Parted | None

    @property
    def sentence(self) -> str:
        return _SENTENCES[self.kind]

    def parted(self) -> list[tuple[str, Parted | None]]:
        return [("drafts", self.drafts), ("committed stream", self.committed),
                ("acceptance", self.acceptance)]


_SENTENCES = {
    BugKind.DRAFTER: "drafter: the drafts differ, the committed stream is equal",
    BugKind.STATE: "verify path or state: the committed stream differs",
    BugKind.ACCEPTANCE: "acceptance path: acceptance moved where both arms drafted the same "
                        "tokens",
    None: "logits only: no drafted, committed or accepted token moved",
}


def _steps(trace: ArmTrace) -> dict[str, dict[int, Step]]:
    v = trace.verifies
    out: dict[str, dict[int, Step]] = {}
    for i in range(len(v)):
        req = trace.requests[int(v.req[i])]
        out.setdefault(req, {})[int(v.pos[i])] = (tuple(int(x) for x in v.draft(i)),
                                                  tuple(int(x) for x in v.emit(i)))
    return out


def _ids(ids: tuple[int, ...] | np.ndarray) -> str:
    return "[" + " ".join(map(str, ids if isinstance(ids, tuple) else ids.tolist())) + "]"


def _committed(req: str, sa: dict[int, Step], sb: dict[int, Step], longest: int = 0
               ) -> Parted | None:
    """The first position where the request's committed streams differ: a different token where
    both have one, or one stream ending (fewer tokens over fewer steps, or a token short at a
    last step that came before `longest`, the most steps any request took) where the other
    goes on."""
    def stream(steps: dict[int, Step]) -> dict[int, int]:
        return {p + j: tok for p, (_, emit) in steps.items() for j, tok in enumerate(emit)}

    ta, tb = stream(sa), stream(sb)
    for p in sorted(set(ta) & set(tb)):
        if ta[p] != tb[p]:
            return Parted(req, p, str(ta[p]), str(tb[p]))
    # the same drafts verified at the same place, one arm's tokens a prefix of the other's and
    # that arm's request never stepping again: its stream ended where the other's went on
    for pos in sorted(set(sa) & set(sb)):
        (da, ea), (db, eb) = sa[pos], sb[pos]
        if da != db or len(ea) == len(eb):
            continue
        short, steps = (ea, sa) if len(ea) < len(eb) else (eb, sb)
        if max(steps) == pos and len(steps) < longest:
            end = pos + len(short)
            went_on = str((eb if short is ea else ea)[len(short)])
            return Parted(req, end, "ended" if short is ea else went_on,
                          "ended" if short is eb else went_on)
    if len(sa) != len(sb) and (len(ta) - len(tb)) * (len(sa) - len(sb)) > 0:
        end = min(max(ta, default=-1), max(tb, default=-1)) + 1
        a_ended = len(ta) < len(tb)
        went = str((tb if a_ended else ta).get(end, "-"))
        return Parted(req, end, "ended" if a_ended else went, went if a_ended else "ended")
    return None


def classify(a: ArmTrace, b: ArmTrace) -> BugClass:
    """Name the kind of a difference between two arms' traces (compared at equal request and
    position, as the aligner does)."""
    pairs = _pairs(a, b)
    return _classify_steps(a, b) if pairs is None else _classify_flat(a, b, pairs)


def _classify_steps(a: ArmTrace, b: ArmTrace) -> BugClass:
    """`classify` step by step: the reference, and the reading of traces whose steps repeat a
    position or overlap."""
    steps_a, steps_b = _steps(a), _steps(b)
    longest = max((len(x) for x in (*steps_a.values(), *steps_b.values())), default=0)
    drafts: list[tuple[int, str, Parted]] = []
    accept: list[tuple[int, str, Parted, bool]] = []
    committed: list[tuple[int, str, Parted]] = []
    for req in sorted(set(steps_a) & set(steps_b)):
        sa, sb = steps_a[req], steps_b[req]
        for pos in sorted(set(sa) & set(sb)):
            (da, ea), (db, eb) = sa[pos], sb[pos]
            if da != db:
                drafts.append((pos, req, Parted(req, pos, _ids(da), _ids(db))))
            if len(ea) != len(eb):
                accept.append((pos, req, Parted(req, pos, f"ns={len(ea)}", f"ns={len(eb)}"),
                               da == db))
        found = _committed(req, sa, sb, longest)
        if found is not None:
            committed.append((found.pos, req, found))
    first_d = min(drafts, key=lambda x: x[:2], default=None)
    first_a = min(accept, key=lambda x: x[:2], default=None)
    first_c = min(committed, key=lambda x: x[:2], default=None)
    kind: BugKind | None = None
    if first_c is not None:
        kind = BugKind.STATE
    elif first_a is not None and first_a[3] and (first_d is None or first_a[:2] <= first_d[:2]):
        kind = BugKind.ACCEPTANCE
    elif first_d is not None:
        kind = BugKind.DRAFTER
    elif first_a is not None:
        kind = BugKind.ACCEPTANCE
    return BugClass(kind, first_d[2] if first_d else None, first_c[2] if first_c else None,
                    first_a[2] if first_a else None)


def acceptance_moved(a: ArmTrace, b: ArmTrace) -> Parted | None:
    """The first step both arms verified at one request and position with the same drafted
    tokens but emitted differently, before their committed streams parted: under greedy verify
    the same block from the same context is accepted the same, so this is a difference of the
    verify or acceptance path that token and logit comparisons at aligned rows cannot see."""
    pairs = _pairs(a, b)
    return _acceptance_moved_steps(a, b) if pairs is None else _acceptance_moved_flat(a, b, pairs)


def _acceptance_moved_steps(a: ArmTrace, b: ArmTrace) -> Parted | None:
    """`acceptance_moved` step by step (as `_classify_steps`)."""
    steps_a, steps_b = _steps(a), _steps(b)
    found: list[tuple[int, str, Parted]] = []
    for req in sorted(set(steps_a) & set(steps_b)):
        sa, sb = steps_a[req], steps_b[req]
        parted = _committed(req, sa, sb)
        for pos in sorted(set(sa) & set(sb)):
            if parted is not None and pos >= parted.pos:
                break
            (da, ea), (db, eb) = sa[pos], sb[pos]
            if da == db and ea != eb:
                found.append((pos, req, Parted(req, pos, f"emit {_ids(ea)}", f"emit {_ids(eb)}")))
                break
    first = min(found, key=lambda x: x[:2], default=None)
    return first[2] if first else None


def verify_finding(a: ArmTrace, b: ArmTrace, names: tuple[str, str]) -> VerdictFinding | None:
    """A difference found by the verify of identical blocks (None: none, or sampled decoding,
    where acceptance is drawn and may differ by chance)."""
    if "temperature" in a.config.values or "temperature" in b.config.values:
        return None
    moved = acceptance_moved(a, b)
    if moved is None:
        return None
    return VerdictFinding(Origin.VERIFY, Demand.DIFFER, (
        f"acceptance: at {moved.where} both arms drafted the same tokens from the same context "
        f"and emitted differently ({names[0]}: {moved.a}, {names[1]}: {moved.b}): greedy "
        "verify accepts the same block the same way, so the verify or acceptance path differs",))


# -- the same reading over flat arrays ------------------------------------------------------------
# Both arms' steps sorted by (request, position) once; matched steps and committed-stream tokens
# found by one search over integer keys; every comparison an array pass. It reads what the
# step-by-step functions above read, for traces whose steps neither repeat a position nor overlap
# inside a request (each stream position emitted once): the others keep the step-by-step code.


@dataclass(frozen=True)
class _Arm:
    req: np.ndarray  # int64: the request's rank among both arms' names, per step
    pos: np.ndarray  # int64, per step, sorted by (req, pos)
    step: np.ndarray  # the step's index in the trace's verifies
    ns: np.ndarray  # int64: emitted tokens per step
    count: np.ndarray  # steps per request rank
    s_req: np.ndarray  # the committed stream, one entry per emitted token: request rank,
    s_pos: np.ndarray  # position,
    s_tok: np.ndarray  # token (sorted by (req, pos), each position once)


def _arm(trace: ArmTrace, rank: np.ndarray, ranks: int) -> _Arm | None:
    v = trace.verifies
    req = rank[v.req].astype(np.int64) if len(v) else np.zeros(0, dtype=np.int64)
    pos = v.pos.astype(np.int64)
    order = np.lexsort((pos, req))
    req, pos = req[order], pos[order]
    ns = np.diff(v.emit_off)[order].astype(np.int64)
    same_req = req[1:] == req[:-1]
    if np.any(same_req & (pos[:-1] + np.maximum(ns[:-1], 1) > pos[1:])):
        return None  # a position repeated, or two steps' emits overlapping: step by step
    at, within = _gather(v.emit_off[order], ns)
    step_of = np.repeat(np.arange(len(ns)), ns)
    return _Arm(req, pos, order, ns, np.bincount(req, minlength=ranks), req[step_of],
                pos[step_of] + within, v.emit_ids[at].astype(np.int64))


def _gather(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flat indices of ragged slices `starts[i]:starts[i] + lengths[i]`, in order, and each
    one's place within its slice."""
    total = int(lengths.sum())
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    within = np.arange(total, dtype=np.int64) - first
    return np.repeat(starts.astype(np.int64), lengths) + within, within


def _same_lists(ids_a: np.ndarray, off_a: np.ndarray, sa: np.ndarray, ids_b: np.ndarray,
                off_b: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """Per pair (sa[i], sb[i]): whether A's i-th list equals B's."""
    la, lb = off_a[sa + 1] - off_a[sa], off_b[sb + 1] - off_b[sb]
    same = la == lb
    length = np.where(same, la, 0)
    at_a, within = _gather(off_a[sa], length)
    at_b = np.repeat(off_b[sb].astype(np.int64), length) + within
    unequal = np.bincount(np.repeat(np.arange(len(sa)), length),
                          weights=ids_a[at_a] != ids_b[at_b], minlength=len(sa))
    out: np.ndarray = same & (unequal == 0)
    return out


def _keys(req: np.ndarray, pos: np.ndarray, low: int, span: int) -> np.ndarray:
    out: np.ndarray = req * span + (pos - low)
    return out


@dataclass(frozen=True)
class _Pairs:
    """Both arms read together: their requests' names by rank, the matched steps."""

    names: list[str]
    a: _Arm
    b: _Arm
    ia: np.ndarray  # matched steps, indices into a's and b's sorted steps, by (req, pos)
    ib: np.ndarray
    same_drafts: np.ndarray
    same_emits: np.ndarray
    low: int
    span: int


def _pairs(ta: ArmTrace, tb: ArmTrace) -> _Pairs | None:
    names = sorted(set(ta.requests) | set(tb.requests))
    where = {name: i for i, name in enumerate(names)}
    rank_a = np.array([where[n] for n in ta.requests], dtype=np.int64)
    rank_b = np.array([where[n] for n in tb.requests], dtype=np.int64)
    a, b = _arm(ta, rank_a, len(names)), _arm(tb, rank_b, len(names))
    if a is None or b is None:
        return None
    ends = [x for arm in (a, b) for x in (arm.pos, arm.pos + arm.ns)]
    low = min((int(x.min()) for x in ends if x.size), default=0)
    high = max((int(x.max()) for x in ends if x.size), default=0)
    span = high - low + 2
    if span * max(len(names), 1) >= 2 ** 62:
        return None  # positions too far apart for one integer key
    _, ia, ib = np.intersect1d(_keys(a.req, a.pos, low, span), _keys(b.req, b.pos, low, span),
                               assume_unique=True, return_indices=True)
    va, vb = ta.verifies, tb.verifies
    sa, sb = a.step[ia], b.step[ib]
    return _Pairs(names, a, b, ia, ib,
                  _same_lists(va.draft_ids, va.draft_off, sa, vb.draft_ids, vb.draft_off, sb),
                  _same_lists(va.emit_ids, va.emit_off, sa, vb.emit_ids, vb.emit_off, sb),
                  low, span)


def _first(req: np.ndarray, pos: np.ndarray) -> int | None:
    """The index of the smallest (pos, req), None when there is none."""
    if not req.size:
        return None
    return int(np.lexsort((req, pos))[0])


_NONE = np.iinfo(np.int64).max


def _committed_flat(p: _Pairs, longest: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                       np.ndarray]:
    """Per request rank, as `_committed`: where the committed streams first part (_NONE where
    they do not) and by which rule (1, 2, 3); for rule 1 the differing entry of A's stream, for
    rule 2 the matched step."""
    a, b, ranks = p.a, p.b, len(p.names)
    part = np.full(ranks, _NONE, dtype=np.int64)
    rule = np.zeros(ranks, dtype=np.int8)
    at = np.zeros(ranks, dtype=np.int64)
    # 1: a different token at a position both streams hold
    _, sa, sb = np.intersect1d(_keys(a.s_req, a.s_pos, p.low, p.span),
                               _keys(b.s_req, b.s_pos, p.low, p.span), assume_unique=True,
                               return_indices=True)
    differ = sa[a.s_tok[sa] != b.s_tok[sb]]
    reqs, first = np.unique(a.s_req[differ], return_index=True)
    part[reqs], rule[reqs], at[reqs] = a.s_pos[differ[first]], 1, differ[first]
    # 2: the same drafts at a step, one arm's emit shorter, at that arm's last step of a request
    # that took fewer steps than the longest
    if longest:
        na, nb = a.ns[p.ia], b.ns[p.ib]
        req, pos = a.req[p.ia], a.pos[p.ia]
        last_a, last_b = _last_of(a.req, a.pos, ranks, _NONE), _last_of(b.req, b.pos, ranks, _NONE)
        short_a = na < nb
        short_last = np.where(short_a, last_a[req], last_b[req]) == pos
        short_count = np.where(short_a, a.count[req], b.count[req])
        cand = np.flatnonzero(p.same_drafts & (na != nb) & short_last & (short_count < longest)
                              & (rule[req] == 0))
        reqs, first = np.unique(req[cand], return_index=True)
        step = cand[first]
        part[reqs] = pos[step] + np.minimum(na[step], nb[step])
        rule[reqs], at[reqs] = 2, step
    # 3: fewer steps and fewer tokens, the stream ending where the other goes on
    both = (a.count > 0) & (b.count > 0) & (rule == 0)
    tok_a = np.bincount(a.s_req, minlength=ranks)
    tok_b = np.bincount(b.s_req, minlength=ranks)
    cand = both & (a.count != b.count) & ((tok_a - tok_b) * (a.count - b.count) > 0)
    end = np.minimum(_last_of(a.s_req, a.s_pos, ranks, -1),
                     _last_of(b.s_req, b.s_pos, ranks, -1)) + 1
    part[cand], rule[cand] = end[cand], 3
    return part, rule, at, tok_a < tok_b


def _last_of(req: np.ndarray, pos: np.ndarray, ranks: int, none: int) -> np.ndarray:
    """Per request rank, the last of its (sorted) positions; `none` where it has none."""
    out = np.full(ranks, none, dtype=np.int64)
    last = np.flatnonzero(np.append(req[1:] != req[:-1], True)) if req.size else req
    out[req[last]] = pos[last]
    return out


def _classify_flat(ta: ArmTrace, tb: ArmTrace, p: _Pairs) -> BugClass:
    a, b = p.a, p.b
    longest = max(int(a.count.max(initial=0)), int(b.count.max(initial=0)))
    req, pos = a.req[p.ia], a.pos[p.ia]
    step_a, step_b = a.step[p.ia], b.step[p.ib]
    na, nb = a.ns[p.ia], b.ns[p.ib]
    drafts: Parted | None = None
    accept: Parted | None = None
    committed: Parted | None = None
    accept_same = False
    cand = np.flatnonzero(~p.same_drafts)
    k = _first(req[cand], pos[cand])
    first_d = None if k is None else (int(pos[cand[k]]), int(req[cand[k]]))
    if k is not None:
        i = cand[k]
        drafts = Parted(p.names[req[i]], int(pos[i]), _ids(ta.verifies.draft(step_a[i])),
                        _ids(tb.verifies.draft(step_b[i])))
    cand = np.flatnonzero(na != nb)
    k = _first(req[cand], pos[cand])
    first_a = None if k is None else (int(pos[cand[k]]), int(req[cand[k]]))
    if k is not None:
        i = cand[k]
        accept = Parted(p.names[req[i]], int(pos[i]), f"ns={na[i]}", f"ns={nb[i]}")
        accept_same = bool(p.same_drafts[i])
    part, rule, at, a_short = _committed_flat(p, longest)
    ranks = np.flatnonzero(rule)
    k = _first(ranks, part[ranks])
    if k is not None:
        committed = _parted(ta, tb, p, int(ranks[k]), part, rule, at, a_short)
    kind: BugKind | None = None
    if committed is not None:
        kind = BugKind.STATE
    elif first_a is not None and accept_same and (first_d is None or first_a <= first_d):
        kind = BugKind.ACCEPTANCE
    elif first_d is not None:
        kind = BugKind.DRAFTER
    elif first_a is not None:
        kind = BugKind.ACCEPTANCE
    return BugClass(kind, drafts, committed, accept)


def _parted(ta: ArmTrace, tb: ArmTrace, p: _Pairs, r: int, part: np.ndarray, rule: np.ndarray,
            at: np.ndarray, a_short: np.ndarray) -> Parted:
    """Where request rank `r`'s committed streams part, in `_committed`'s words."""
    a, b, name, where = p.a, p.b, p.names[r], int(part[r])
    if rule[r] == 1:
        i = int(at[r])
        j = int(np.searchsorted(_keys(b.s_req, b.s_pos, p.low, p.span),
                                _keys(a.s_req[i], a.s_pos[i], p.low, p.span)))
        return Parted(name, where, str(a.s_tok[i]), str(b.s_tok[j]))
    if rule[r] == 2:
        i = int(at[r])
        ea = ta.verifies.emit(a.step[p.ia[i]])
        eb = tb.verifies.emit(b.step[p.ib[i]])
        if len(ea) < len(eb):
            return Parted(name, where, "ended", str(eb[len(ea)]))
        return Parted(name, where, str(ea[len(eb)]), "ended")
    longer = b if a_short[r] else a
    keys = _keys(longer.s_req, longer.s_pos, p.low, p.span)
    j = int(np.searchsorted(keys, r * p.span + (where - p.low)))
    went = str(longer.s_tok[j]) if j < keys.size and keys[j] == r * p.span + (where - p.low) \
        else "-"
    return Parted(name, where, "ended" if a_short[r] else went, went if a_short[r] else "ended")


def _acceptance_moved_flat(ta: ArmTrace, tb: ArmTrace, p: _Pairs) -> Parted | None:
    part, _, _, _ = _committed_flat(p, 0)
    req, pos = p.a.req[p.ia], p.a.pos[p.ia]
    cand = np.flatnonzero(p.same_drafts & ~p.same_emits & (pos < part[req]))
    k = _first(req[cand], pos[cand])
    if k is None:
        return None
    i = cand[k]
    return Parted(p.names[req[i]], int(pos[i]),
                  f"emit {_ids(ta.verifies.emit(p.a.step[p.ia[i]]))}",
                  f"emit {_ids(tb.verifies.emit(p.b.step[p.ib[i]]))}")
