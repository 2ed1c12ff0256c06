"""Coverage as evidence: what a comparison is about must have been exercised for an agreement to
mean anything. A paged-vs-materialized comparison whose inputs never put a drafted block across
a page boundary could not have failed on a page-boundary bug, however many tokens agreed.

A comparison's `toggle` names the settings it is about; `ABOUT` maps each to the state
(difftest.core.corpus.CoverageClass) it exercises, in this one place. `effect` says which verdict
kind the arms' `[spec-coverage]` lines demand, and why: uninformative when a class the toggle is
about was exercised by neither arm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from difftest.core.corpus import BY_NAME, BugKind, CoverageClass, Mutation
from difftest.core.kinds import VerdictKind
from difftest.core.model import SpecCoverage
from difftest.analysis.findings import Demand, Origin, VerdictFinding

_C = CoverageClass
# toggle setting -> the state a difference in it shows through (the one map; docs/switch.md)
ABOUT: Mapping[str, tuple[CoverageClass, ...]] = {
    "lane": (_C.PAGE_BOUNDARY, _C.PAGE_END, _C.PAGE_ORDER),
    "verify_kernel": (_C.VERIFY_WIDTHS,),
    "layer_masks": (_C.WINDOW_EDGE,),
    "prefix_cache": (_C.PREFIX_SHARED, _C.PREFIX_PARTIAL),
    "eos": (_C.EOS, _C.EOS_BONUS),
    # the hf and mlx runners' --sliding-window and --draft-lens
    "sliding_window": (_C.WINDOW_EDGE,),
    "draft_lens": (_C.VERIFY_WIDTHS,),
}
# toggle settings whose difference lives in the verify path: under teacher forcing B commits
# A's stream, so a difference there cannot show
VERIFY_PATH: tuple[str, ...] = ("verify_kernel", "draft_lens")


def about(toggle: Sequence[str]) -> tuple[CoverageClass, ...]:
    """The coverage classes a comparison with this toggle is about, each once, in toggle order."""
    return tuple(dict.fromkeys(c for key in toggle for c in ABOUT.get(key, ())))


@dataclass(frozen=True)
class CoverageRow:
    """One class in a comparison's coverage table: each arm's count (None: the arm printed no
    `[spec-coverage]` line) and whether the comparison is about it."""

    cls: CoverageClass
    count_a: int | None
    count_b: int | None
    demanded: bool

    @property
    def exercised(self) -> bool:
        return max(self.count_a or 0, self.count_b or 0) >= self.cls.needed


def table(toggle: Sequence[str], a: SpecCoverage, b: SpecCoverage,
          needs: Sequence[CoverageClass] = ()) -> tuple[CoverageRow, ...]:
    """Every class, with each arm's count; empty when neither arm printed a coverage line.
    `needs`: classes demanded besides the toggle's (a planted mutation's)."""
    if not a.present and not b.present:
        return ()
    wanted = set(about(toggle)) | set(needs)
    return tuple(CoverageRow(c, a.count(c.value) if a.present else None,
                             b.count(c.value) if b.present else None, c in wanted)
                 for c in CoverageClass)


def mutation_needs(*mutations: str | None) -> tuple[CoverageClass, ...]:
    """The state the corpus mutations act on, each class once (none for another name, or none
    at all): a mutation may be planted in either arm."""
    found = [BY_NAME.get(m or "") for m in mutations]
    return tuple(dict.fromkeys(c for m in found if m is not None for c in m.needs))


def finding(toggle: Sequence[str], a: SpecCoverage, b: SpecCoverage, names: tuple[str, str],
            mutation: str | None = None, mutation_a: str | None = None, forced: bool = False
            ) -> VerdictFinding | None:
    """What the coverage demands of the verdict (None: nothing), as a finding for
    `findings.decide`: no agreement when the toggle is about a class that neither arm exercised,
    since the comparison could not have failed on the bugs that live there (a difference found
    stands). With a corpus `mutation` planted in B (`mutation_a`: in A), its own state is
    demanded too, and an arm whose mutation never acted (`fired=0`) ran the correct program.
    Arms that print no coverage line (engines without one, or a plain run of the transformers
    and mlx runners) demand nothing of a mutation; of a toggle about a state they do, since
    nothing shows that state was reached. `forced`: the comparison is teacher-forced, which
    hides the verify path (a verify-or-state bug, a toggle about verify widths)."""
    kind, reasons = effect(toggle, a, b, names, mutation, mutation_a, forced)
    return None if kind is None else VerdictFinding(Origin.COVERAGE, Demand.NO_AGREEMENT, reasons)


def effect(toggle: Sequence[str], a: SpecCoverage, b: SpecCoverage, names: tuple[str, str],
           mutation: str | None = None, mutation_a: str | None = None, forced: bool = False
           ) -> tuple[VerdictKind | None, tuple[str, ...]]:
    """The kind the coverage demands of an agreement (None: no demand) and its reasons."""
    planted = [(BY_NAME.get(m or ""), cov, name)
               for m, cov, name in ((mutation_a, a, names[0]), (mutation, b, names[1]))]
    needs = mutation_needs(mutation_a, mutation)
    rows = [r for r in table(toggle, a, b, needs) if r.demanded]
    missing = [r for r in rows if not r.exercised]
    reasons = []
    for r in missing:
        keys = [k for k in toggle if r.cls in ABOUT.get(k, ())]
        acting = [m.name for m, _, _ in planted if m is not None and r.cls in m.needs]
        why = (f"toggle {', '.join(keys)!r} is" if keys
               else f"mutation {', '.join(acting)!r} acts only")
        reasons.append(
            f"coverage: {why} about {r.cls.label} ({r.cls.value}), which neither arm "
            f"exercised ({names[0]}: {_shown(r.count_a)}, {names[1]}: {_shown(r.count_b)}; "
            f"{r.cls.needed} needed): the comparison could not have failed on a bug that lives "
            "there")
    for m, cov, name in planted:
        if m is not None and not m.control and cov.present and cov.count("fired") == 0:
            reasons.append(f"coverage: mutation {m.name!r} never acted in {name} (fired=0): "
                           "it ran the correct program on these inputs")
    reasons += _unknown(toggle, a, b) + (_forced(toggle, planted) if forced else [])
    if not reasons:
        return None, ()
    return VerdictKind.UNINFORMATIVE, tuple(reasons)


def _shown(count: int | None) -> str:
    return "no [spec-coverage] line" if count is None else str(count)


def _unknown(toggle: Sequence[str], a: SpecCoverage, b: SpecCoverage) -> list[str]:
    """A toggle about a state, and neither arm counting it: nothing shows the inputs reached
    the state, so nothing shows the comparison could have failed there."""
    classes = about(toggle)
    if not classes or a.present or b.present:
        return []
    keys = [k for k in toggle if k in ABOUT]
    return [f"coverage unknown: toggle {', '.join(keys)!r} is about "
            f"{', '.join(c.label for c in classes)}, and neither arm prints [spec-coverage]: "
            "nothing shows the inputs reached that state (an engine can count it in that line, "
            "docs/trace-format.md)"]


def _forced(toggle: Sequence[str],
            planted: Sequence[tuple[Mutation | None, SpecCoverage, str]]) -> list[str]:
    """Under teacher forcing B commits A's stream: a bug or a setting that acts through what
    the verify commits cannot show."""
    out = []
    for m, _, name in planted:
        if m is not None and m.shows is BugKind.STATE:
            out.append(f"coverage: teacher forcing hides the verify path: mutation "
                       f"{m.name!r} in {name} changes what a verify commits, and "
                       "forced, B commits A's stream; compare it free")
    keys = [k for k in toggle if k in VERIFY_PATH]
    if keys:
        out.append(f"coverage: teacher forcing hides the verify path: toggle {', '.join(keys)!r} "
                   "is about verify widths, and forced, B commits A's stream; compare it free")
    return out
