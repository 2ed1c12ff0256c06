"""The one place a verdict's kind is decided: `findings.decide` takes the strongest demand, in
the order of precedence its module and docs/ARCHITECTURE.md state, and nothing else in the
package sets a verdict's kind."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from difftest.analysis import findings
from difftest.analysis.findings import Demand, Origin, VerdictFinding, decide
from difftest.analysis.sequential import Design, Look, SequentialResult, fold
from difftest.analysis.verdict import Verdict
from difftest.core.kinds import Expect, Instrument, VerdictKind

ROOT = Path(__file__).resolve().parents[2]
STATED = re.compile(r"arm failed > not what was asked > inert > undecided > differ > "
                    r"no agreement > agree")
# the words each demand goes by in the stated order
WORDS = {Demand.ARM_FAILED: "arm failed", Demand.NOT_WHAT_WAS_ASKED: "not what was asked",
         Demand.INERT: "inert", Demand.UNDECIDED: "undecided", Demand.DIFFER: "differ",
         Demand.NO_AGREEMENT: "no agreement", Demand.AGREE: "agree"}


def _found(demand: Demand, *could: Instrument) -> VerdictFinding:
    return VerdictFinding(Origin.DRAFTS, demand, (demand.name,), could)


def test_the_stated_order_is_the_order_decide_applies() -> None:
    ranked = sorted(Demand, key=lambda d: d.rank, reverse=True)
    stated = " > ".join(WORDS[d] for d in ranked)
    assert STATED.fullmatch(stated), stated
    for text in (findings.__doc__ or "",
                 (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")):
        assert STATED.search(" ".join(text.split())), "the stated order is not quoted"


@pytest.mark.parametrize("pair", list(itertools.combinations(Demand, 2)))
def test_the_stronger_demand_wins_in_any_order(pair: tuple[Demand, Demand]) -> None:
    strong = max(pair, key=lambda d: d.rank)
    for order in (pair, pair[::-1]):
        assert decide([_found(d) for d in order]) is strong.kind


def test_no_finding_is_uninformative_and_a_lone_finding_gives_its_kind() -> None:
    assert decide([]) is VerdictKind.UNINFORMATIVE
    for demand in Demand:
        assert decide([_found(demand)]) is demand.kind


def test_joining_a_finding_decides_again_and_keeps_what_could_fail() -> None:
    agree = Verdict.of([_found(Demand.AGREE, Instrument.TOKENS)], Expect.SAME, ("tokens agree",))
    assert (agree.kind, agree.instruments) == (VerdictKind.AGREE, (Instrument.TOKENS,))
    no = agree.joined(VerdictFinding(Origin.QUANTITY, Demand.NO_AGREEMENT, ("q",)),
                      first=["q"], last=["after"])
    assert no.kind is VerdictKind.UNINFORMATIVE and no.reasons == ("q", "tokens agree", "after")
    assert no.instruments == (Instrument.TOKENS,) and len(no.findings) == 2
    # a verdict made from a kind alone weighs it as a finding
    plain = Verdict(VerdictKind.DIFFER, Expect.SAME)
    assert plain.joined(VerdictFinding(Origin.QUANTITY, Demand.NO_AGREEMENT)).kind is \
        VerdictKind.DIFFER


def test_a_sequential_difference_does_not_outrank_an_inert_switch() -> None:
    """The sequential test takes the fixed-sample gate's place, and ranks where the gate does:
    a drop measured between arms whose switch did not engage leaves the verdict INERT."""
    design = Design(0.1, 0.01, 4)
    drop = SequentialResult(design, (Look(2, (10, 10), 2, (), VerdictKind.DIFFER),))
    inert = Verdict.of([_found(Demand.AGREE, Instrument.TOKENS),
                        VerdictFinding(Origin.SWITCH, Demand.INERT, ("toggle",))],
                       Expect.SAME, ("toggle",))
    assert fold(inert, drop).kind is VerdictKind.INERT
    blind = Verdict.of([_found(Demand.DIFFER, Instrument.TOKENS),
                        VerdictFinding(Origin.SWITCH, Demand.UNDECIDED, ("no toggle",))],
                       Expect.DIFFER, ())
    assert fold(blind, drop).kind is VerdictKind.UNINFORMATIVE


def kind_assignments(package: Path) -> list[str]:
    """Where a verdict's kind is set other than by `decide`: `replace(..., kind=...)` or a
    `Verdict(...)` built from a kind, outside analysis/verdict.py's `Verdict.of`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name | ast.Attribute):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) != \
                    "dataclasses":
                continue  # a method (`inspect.Parameter.replace`), not a record's copy
            where = f"{path.relative_to(package.parent)}:{node.lineno}"
            if name == "replace" and any(k.arg == "kind" for k in node.keywords) and not (
                    path.name == "verdict.py" and "decide" in ast.unparse(node)):
                found.append(f"{where}: replace(..., kind=...)")
            if name == "Verdict" and not (path.name == "verdict.py"
                                          and "decide" in ast.unparse(node)):
                found.append(f"{where}: Verdict(...) from a kind")
    return found


def test_only_decide_sets_a_verdicts_kind() -> None:
    found = kind_assignments(ROOT / "difftest")
    assert not found, "a verdict's kind is set outside findings.decide:\n" + "\n".join(found)


def test_the_check_sees_a_kind_rewritten_elsewhere(tmp_path: Path) -> None:
    package = tmp_path / "difftest"
    (package / "flow").mkdir(parents=True)
    (package / "flow" / "evaluate.py").write_text(
        "v = replace(v, kind=VerdictKind.UNINFORMATIVE)\nw = Verdict(VerdictKind.AGREE, e)\n")
    assert [f.split(": ", 1)[1] for f in kind_assignments(package)] == [
        "replace(..., kind=...)", "Verdict(...) from a kind"]
