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


def _ids(ids: tuple[int, ...]) -> str:
    return "[" + " ".join(map(str, ids)) + "]"


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
