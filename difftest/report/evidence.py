"""What a comparison's arms exercised and, for a difference, which kind of bug it looks like:
the rows and sentences every report format prints (terminal, markdown, HTML, JSON), computed
once here from the arms' traces (difftest.analysis.coverage, difftest.analysis.bugclass)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from difftest.analysis.bugclass import BugClass, classify
from difftest.analysis.coverage import CoverageRow, mutation_needs, table
from difftest.core.kinds import ArmSide, VerdictKind

if TYPE_CHECKING:
    from difftest.flow.evaluate import ComparisonReport

COVERAGE_HEADERS = ("state", "counter", "needed", "about", "arm a", "arm b")


def coverage_rows(rep: ComparisonReport) -> tuple[CoverageRow, ...]:
    """Each coverage class with both arms' counts; empty when neither arm printed a
    `[spec-coverage]` line."""
    a, b = rep.arm_a.trace, rep.arm_b.trace
    if a is None or b is None:
        return ()
    return table(rep.spec.rules.toggle or (), a.coverage, b.coverage,
                 mutation_needs(a.config.values.get("mutation"),
                                b.config.values.get("mutation")))


def coverage_cells(rep: ComparisonReport) -> tuple[list[str], list[list[str]]]:
    """(headers with the arms' names, one row of text cells per class)."""
    headers = [*COVERAGE_HEADERS[:4], rep.arm_a.name, rep.arm_b.name]
    rows = [[r.cls.label, r.cls.value, str(r.cls.needed),
             ("yes, exercised" if r.exercised else "yes, NOT exercised") if r.demanded else "-",
             "-" if r.count_a is None else str(r.count_a),
             "-" if r.count_b is None else str(r.count_b)] for r in coverage_rows(rep)]
    return headers, rows


def bug_class(rep: ComparisonReport) -> BugClass | None:
    """The kind of a DIFFER (None for any other verdict, without both traces, or for a sampled
    comparison: its arms' tokens differ draw by draw, so where they first part names no bug)."""
    a, b = rep.arm_a.trace, rep.arm_b.trace
    if rep.verdict.kind is not VerdictKind.DIFFER or a is None or b is None \
            or rep.sampled is not None:
        return None
    return classify(a, b)


def bug_class_lines(rep: ComparisonReport) -> list[str]:
    """The bug class as plain sentences: its kind, then where each instrument first parted."""
    found = bug_class(rep)
    if found is None:
        return []
    names = (rep.arm_a.name, rep.arm_b.name)
    out = [f"bug class: {found.sentence}"]
    for what, parted in found.parted():
        if parted is None:
            out.append(f"  {what}: did not part")
        else:
            out.append(f"  {what}: first parted at {parted.where} "
                       f"({names[0]}: {parted.a}, {names[1]}: {parted.b})")
    return out


def bug_class_json(rep: ComparisonReport) -> dict[str, object] | None:
    found = bug_class(rep)
    if found is None:
        return None
    return {"kind": found.kind.value if found.kind else None, "sentence": found.sentence,
            **{what.replace(" ", "_"): None if p is None else
               {"req": p.req, "pos": p.pos, ArmSide.A.value: p.a, ArmSide.B.value: p.b}
               for what, p in found.parted()}}


def coverage_json(rep: ComparisonReport) -> list[dict[str, object]]:
    return [{"class": r.cls.value, "label": r.cls.label, "needed": r.cls.needed,
             "about": r.demanded, "exercised": r.exercised,
             ArmSide.A.value: r.count_a, ArmSide.B.value: r.count_b}
            for r in coverage_rows(rep)]
