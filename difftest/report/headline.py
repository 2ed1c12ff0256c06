"""The words that head a comparison in every report, and what it saw differ.

One table maps a verdict kind, read under its expectation, to the words a reader sees first, so
the terminal table, markdown, JUnit and HTML say the same thing. The words name what was
observed and never read as a pass when the comparison failed: arms that drafted alike under
`expect = differ` are "NO DIFFERENCE", not "AGREE". A verdict kind missing from the table is
headed by its own name, so a new kind shows up in every report before it gets words of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from difftest.core.errors import ExitCode
from difftest.core.kinds import DecodingMode, Expect, VerdictKind

if TYPE_CHECKING:
    from difftest.analysis.compare import Comparison
    from difftest.analysis.verdict import Verdict
    from difftest.flow.evaluate import ComparisonReport

# What was observed, by verdict kind and expectation.
_OBSERVED: dict[VerdictKind, dict[Expect, str]] = {
    VerdictKind.AGREE: {Expect.SAME: "AGREE", Expect.DIFFER: "NO DIFFERENCE"},
    VerdictKind.DIFFER: {Expect.SAME: "DIFFER", Expect.DIFFER: "DIFFER"},
    VerdictKind.UNINFORMATIVE: {Expect.SAME: "UNINFORMATIVE", Expect.DIFFER: "UNINFORMATIVE"},
    VerdictKind.INERT: {Expect.SAME: "INERT", Expect.DIFFER: "INERT"},
    VerdictKind.ARM_FAILED: {Expect.SAME: "ARM-FAILED", Expect.DIFFER: "ARM-FAILED"},
}


class Tone(StrEnum):
    """The colour a report gives a verdict (the CSS class of the HTML badge)."""

    PASS = "pass"
    FAIL = "fail"
    BLIND = "blind"  # could not have failed: not a pass, not a measured failure
    ERROR = "error"  # nothing to judge: an arm failed


def observed(kind: VerdictKind, expect: Expect) -> str:
    """The words for what a comparison saw, read under what it expected."""
    return _OBSERVED.get(kind, {}).get(expect, kind.value.upper())


@dataclass(frozen=True)
class Headline:
    """The head of a comparison's report: observed words, expectation, result, exit code."""

    observed: str
    expect: Expect
    passed: bool
    exit_code: ExitCode

    @property
    def result(self) -> str:
        return "passed" if self.passed else "FAILED"

    @property
    def tone(self) -> Tone:
        if self.passed:
            return Tone.PASS
        if self.exit_code is ExitCode.ARM_FAILED:
            return Tone.ERROR
        if self.exit_code is ExitCode.DIFFER:
            return Tone.FAIL
        return Tone.BLIND  # exit 3 and any other code that is neither a pass nor a difference

    @property
    def qualifier(self) -> str:
        """What follows the observed words: `(expect differ): FAILED, exit 1`."""
        return f"(expect {self.expect.value}): {self.result}, exit {int(self.exit_code)}"

    def __str__(self) -> str:
        return f"{self.observed} {self.qualifier}"


def headline(verdict: Verdict) -> Headline:
    return Headline(observed(verdict.kind, verdict.expect), verdict.expect, verdict.passed,
                    verdict.exit_code)


def differed(c: Comparison | None) -> tuple[str, ...]:
    """Each instrument that saw a difference, with how much: `tokens in 2/7 blocks`,
    `logits in 30/30 blocks`, `draft lengths in 1/7 blocks`, ... (empty when none did)."""
    if c is None:
        return ()
    # each count over the set it was counted in: flips and logits over the blocks both arms
    # drafted, draft lengths over the blocks either arm drafted (one may have drafted none)
    out = [f"{what} in {count}/{n} blocks" for what, count, n in (
        ("tokens", c.blocks_differing, c.blocks_compared),
        ("near-tie flips", c.blocks_near_tie, c.blocks_compared),
        ("logits", c.blocks_logit_differing, c.blocks_compared),
        ("draft lengths", c.draft_length_blocks, c.blocks_drafted))
        if count]
    if c.divergences:
        out.append(f"emitted streams of {len(c.divergences)} request(s)")
    if c.coverage_gaps:
        out.append(f"stream lengths of {len(c.coverage_gaps)} request(s)")
    return tuple(out)


def report_differed(rep: ComparisonReport) -> str:
    """`differed_text` of a judged comparison; a sampled one's tokens differ from draw to draw,
    so it compares their laws instead (the verdict's reasons say what that found)."""
    if rep.comparison is None and rep.spec.rules.decoding is DecodingMode.SAMPLED and (
            rep.verdict.kind is not VerdictKind.ARM_FAILED):
        return "compared in distribution (decoding = sampled): the emitted tokens' laws"
    return differed_text(rep.comparison)


def differed_text(c: Comparison | None) -> str:
    """`differed: logits in 30/30 blocks`, `nothing differed in 30 blocks`, `nothing compared`."""
    if c is None:
        return "nothing compared"
    what = differed(c)
    if what:
        return "differed: " + ", ".join(what)
    return f"nothing differed in {c.blocks_compared} block(s)"


def verdict_tree(name: str, verdict: Verdict) -> list[str]:
    """`difftest explain`: the verdict, then each finding (the one that decides marked) with its
    reasons' first lines under it."""
    out = [f"{name}: {verdict.label} ({verdict.kind.value}, expect {verdict.expect.value})"]
    decides = max(verdict.findings, key=lambda f: f.demand.rank)
    for i, found in enumerate(verdict.findings):
        last = i == len(verdict.findings) - 1
        demand = found.demand.name.lower().replace("_", " ")
        out.append(f"{'`-' if last else '|-'} {found.origin.value}: {demand} -> "
                   f"{found.kind.value}" + (" (decides)" if found is decides else ""))
        for j, reason in enumerate(found.reasons):
            branch = "`-" if j == len(found.reasons) - 1 else "|-"
            out.append(f"{'   ' if last else '|  '}{branch} {reason.splitlines()[0]}")
    return out
