"""Same quantity on both sides: before two traces are judged, check that they traced comparable
things. Arms that traced different requests, at different levels, with top lists of different
widths, blocks of different shapes, different drafting kinds or ids from disjoint ranges would be
compared only where they happen to overlap, and the overlap may be nothing that matters; each
mismatch is named, and it keeps an agreement from standing (`finding`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.core.model import ArmTrace


def _names(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" (and {len(items) - limit} more)" if len(items) > limit else "")


def _nqpr(t: ArmTrace) -> set[int]:
    p = t.proposes
    return set(np.unique(p.nqpr[p.proposing]).tolist())


def _ids(t: ArmTrace) -> np.ndarray:
    return np.concatenate([t.verifies.draft_ids, t.proposes.first_ids]).astype(np.int64)


def mismatches(a: ArmTrace, b: ArmTrace, names: tuple[str, str]) -> list[str]:
    """What the two traces did not trace alike, one sentence each (empty: the same quantity)."""
    na, nb = names
    out: list[str] = []
    only_a = [r for r in a.requests if r not in set(b.requests)]
    only_b = [r for r in b.requests if r not in set(a.requests)]
    if only_a or only_b:
        parts = ([f"{len(only_a)} only in {na} ({_names(only_a)})"] if only_a else []) + (
            [f"{len(only_b)} only in {nb} ({_names(only_b)})"] if only_b else [])
        out.append("not the same request set: " + ", ".join(parts)
                   + "; the arms were not given the same work")
    if a.level != b.level:
        out.append(f"not the same trace level: {na} traced level {a.level}, {nb} level {b.level} "
                   "(is VT_SPEC_TRACE set alike in both arms?)")
    if len(a.logits) and len(b.logits):
        wa, wb = int(a.logits.width.max()), int(b.logits.width.max())
        if wa != wb:
            out.append(f"not the same top-k width: {na} lists {wa} logits per row, {nb} {wb}")
    qa, qb = _nqpr(a), _nqpr(b)
    if len(qa) == 1 and len(qb) == 1 and qa != qb:
        out.append(f"not the same rows per block: {na} proposes nqpr={qa.pop()}, {nb} "
                   f"nqpr={qb.pop()}")
    if (a.drafting is None) != (b.drafting is None):
        said, silent = (na, nb) if a.drafting is not None else (nb, na)
        kind = (a.drafting or b.drafting)
        assert kind is not None
        out.append(f"not the same drafting declaration: {said} declares {kind.value} drafting, "
                   f"{silent} declares none")
    ia, ib = _ids(a), _ids(b)
    if ia.size and ib.size and (int(ia.max()) < int(ib.min()) or int(ib.max()) < int(ia.min())):
        out.append(f"not the same id range: {na} drafted ids {int(ia.min())}..{int(ia.max())}, "
                   f"{nb} {int(ib.min())}..{int(ib.max())}, which do not overlap (another "
                   "vocabulary or tokenizer?)")
    return out


def finding(a: ArmTrace, b: ArmTrace, names: tuple[str, str]) -> VerdictFinding | None:
    """The mismatches as a finding (None: the same quantity): an agreement over mismatched
    traces is no agreement; a difference found where they overlap stands."""
    mismatched = mismatches(a, b, names)
    return VerdictFinding(Origin.QUANTITY, Demand.NO_AGREEMENT, tuple(mismatched)) \
        if mismatched else None
