"""The kinds every stage speaks of: what a comparison expects, what it showed, and what that
means for its exit code. Plain enums, no numpy: the command line imports this module."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from difftest.core.errors import ExitCode


class Expect(StrEnum):
    """What a comparison expects of its arms' drafts."""

    SAME = "same"
    DIFFER = "differ"


class DecodingMode(StrEnum):
    """How a comparison's arms decode: greedily, compared token for token and logit for logit,
    or by sampling, compared in distribution over many seeded draws (the arms' tokens differ
    from draw to draw even when both are correct)."""

    GREEDY = "greedy"
    SAMPLED = "sampled"


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
    # the arms did not run what the comparison is about: its toggle reads the same in both,
    # or an arm's evidence is missing or contradicted (uninformative's family: exit 3)
    INERT = "inert"
    ARM_FAILED = "arm-failed"

    @property
    def uninformative(self) -> bool:
        """The family that says nothing about the claim: never a pass, never a difference."""
        return self in (VerdictKind.UNINFORMATIVE, VerdictKind.INERT)


class FindingKind(StrEnum):
    """What a parser finding is about. `breaks_stream` is the one rule for which of them leave
    a trace that no verdict may rest on."""

    INVARIANT = "invariant"  # a line contradicts itself or the format
    DISCONTINUITY = "discontinuity"  # a verify's pos is not where the request's last one led
    MISPLACED_TAG = "misplaced-tag"  # a tag not at the start of its line: the line was not read
    CONFLICTING_REPEAT = "conflicting-repeat"  # one step or logit row traced twice, differently
    REPEAT = "repeat"  # one step or logit row traced twice, identically
    TRUNCATED = "truncated"
    NO_FINAL_NEWLINE = "no-final-newline"
    NON_FINITE = "non-finite"
    OUTGROWN = "outgrown"
    ENGINE_ERROR = "engine-error"

    @property
    def breaks_stream(self) -> bool:
        """The trace's stream has a hole or contradicts itself here: what was compared may not
        be what the engine did, so a comparison through it can neither agree nor differ."""
        return self in _BREAKS_STREAM


_BREAKS_STREAM = frozenset({FindingKind.DISCONTINUITY, FindingKind.MISPLACED_TAG,
                            FindingKind.CONFLICTING_REPEAT})


@dataclass(frozen=True)
class Outcome:
    """Everything a verdict kind means under an expectation, decided in one place."""

    passed: bool
    exit_code: ExitCode
    label: str  # PASS, FAIL, UNINFORMATIVE, ARM-FAILED


def outcome(kind: VerdictKind, expect: Expect) -> Outcome:
    """The one mapping from (what was seen, what was expected) to pass/fail, exit code, label.

    A comparison passes when it saw what it expected (agree under `same`, differ under
    `differ`); uninformative, inert and arm-failed never pass, whatever was expected."""
    if kind is VerdictKind.ARM_FAILED:
        return Outcome(False, ExitCode.ARM_FAILED, "ARM-FAILED")
    if kind is VerdictKind.UNINFORMATIVE:
        return Outcome(False, ExitCode.UNINFORMATIVE, "UNINFORMATIVE")
    if kind is VerdictKind.INERT:
        return Outcome(False, ExitCode.UNINFORMATIVE, "INERT")
    passed = (kind is VerdictKind.AGREE) == (expect is Expect.SAME)
    return Outcome(passed, ExitCode.OK if passed else ExitCode.DIFFER, "PASS" if passed else "FAIL")


class Instrument(StrEnum):
    """What shows a difference between two arms: the drafted tokens, the traced logits, the
    emitted stream, the acceptance per draft position (when gated)."""

    TOKENS = "tokens"
    LOGITS = "logits"
    EMITTED = "emitted"
    ACCEPTANCE = "acceptance"


class ArmSide(StrEnum):
    """Which arm of a comparison, as reports spell it: JSON keys (`unmatched`, `steps_lost`),
    `traced_by`, the CSV's token columns, capture folders (`capture-a`)."""

    A = "a"
    B = "b"


class ProbeResult(StrEnum):
    """What one mutation did to the comparison it probes, as every report labels it."""

    KILLED = "killed"  # the comparison went red
    SURVIVED = "SURVIVED"  # it stayed green: blind to this kind of change
    NOT_APPLIED = "NOT-APPLIED"  # the mutated arm printed what the baseline printed


class ProbeState(StrEnum):
    """A probe's line in check's report: every mutation killed, one never applied, one
    survived, or the probe itself failed (an arm or the set-up)."""

    PASS = "PASS"
    NOT_APPLIED = "NOT-APPLIED"
    BLIND = "BLIND"
    FAIL = "FAIL"


class SweepState(StrEnum):
    """A sweep's line in check's report, from its exit code."""

    PASS = "PASS"
    FAIL = "FAIL"
    UNINFORMATIVE = "UNINFORMATIVE"
    ARM_FAILED = "ARM-FAILED"


class KilledBy(StrEnum):
    """What caught a probe's mutation: an instrument, the expectation of a `differ` comparison
    (the difference it expects went away), or the mutated arm failing."""

    TOKENS = "tokens"
    LOGITS = "logits"
    EMITTED = "emitted"
    ACCEPTANCE = "acceptance"  # a sampled verify's acceptance against its traced p and q
    EXPECTATION = "expectation"
    ARM_FAILED = "arm-failed"


class AlignMode(StrEnum):
    """How the arms' steps were paired: by (request, position) from their verify lines, or by
    proposing-step order when either arm lacks verifies."""

    POSITION = "position"
    ORDINAL = "ordinal"


class AuditVerdict(StrEnum):
    """What `difftest audit` says of one trace: could a comparison through it ever fail?"""

    INFORMATIVE = "informative"
    UNINFORMATIVE = "uninformative"
