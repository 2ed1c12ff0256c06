"""The kinds every stage speaks of: what a comparison expects, what it showed, and what that
means for its exit code. Plain enums, no numpy: the command line imports this module."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from difftest.errors import ExitCode


class Expect(StrEnum):
    """What a comparison expects of its arms' drafts."""

    SAME = "same"
    DIFFER = "differ"


class DraftingKind(StrEnum):
    """How a drafter makes a block's rows: all from one forward, or each from the previous row's
    token (declared by a `[spec-drafting] kind=...` header line, or by a comparison)."""

    BLOCK = "block"
    SEQUENTIAL = "sequential"


class VerdictKind(StrEnum):
    """What a comparison showed. Exit code, pass/fail and labels derive from it in `outcome`."""

    AGREE = "agree"
    DIFFER = "differ"
    UNINFORMATIVE = "uninformative"
    ARM_FAILED = "arm-failed"


@dataclass(frozen=True)
class Outcome:
    """Everything a verdict kind means under an expectation, decided in one place."""

    passed: bool
    exit_code: ExitCode
    label: str  # PASS, FAIL, UNINFORMATIVE, ARM-FAILED


def outcome(kind: VerdictKind, expect: Expect) -> Outcome:
    """The one mapping from (what was seen, what was expected) to pass/fail, exit code, label.

    A comparison passes when it saw what it expected (agree under `same`, differ under
    `differ`); uninformative and arm-failed never pass, whatever was expected."""
    if kind is VerdictKind.ARM_FAILED:
        return Outcome(False, ExitCode.ARM_FAILED, "ARM-FAILED")
    if kind is VerdictKind.UNINFORMATIVE:
        return Outcome(False, ExitCode.UNINFORMATIVE, "UNINFORMATIVE")
    passed = (kind is VerdictKind.AGREE) == (expect is Expect.SAME)
    return Outcome(passed, ExitCode.OK if passed else ExitCode.DIFFER, "PASS" if passed else "FAIL")
