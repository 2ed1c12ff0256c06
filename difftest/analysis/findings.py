"""The one place a verdict's kind is decided. Each instrument (the drafted tokens and logits,
the acceptance gate, the sequential test, the same-quantity check, the switch check, teacher
forcing, ...) reports what it found as a `VerdictFinding`: which instrument, what it demands
(`Demand`), and why. `decide` takes the strongest demand, in this order of precedence:

    arm failed > not what was asked > inert > undecided > differ > no agreement > agree

- **arm failed**: an arm produced nothing to judge.
- **not what was asked**: what ran is not the comparison asked for (teacher forcing not
  followed): uninformative, whatever else was seen.
- **inert**: the switch the comparison is about did not engage (its toggle reads the same in
  both arms, or an arm's evidence is missing).
- **undecided**: nothing can stand, not even a difference: uninformative (the switch cannot be
  shown to have engaged, under `expect = differ`, where a difference would be the pass).
- **differ**: a difference found (tokens, logits, the acceptance gate, the sequential test).
- **no agreement**: an agreement cannot stand but a difference would: uninformative over an
  agreement (the traces are not the same quantity, an instrument was blind, a stream is broken,
  the acceptance test did not decide, the switch cannot be shown to have engaged under
  `expect = same`, a sequential run judged again on its first round, neither arm exercised
  the state the comparison's toggle is about).
- **agree**: an instrument that could have failed did not.

A new instrument adds one finding (and, where none fits, one `Demand` at its rank); nothing
else rewrites a kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum, StrEnum

from difftest.core.kinds import Instrument, VerdictKind


class Origin(StrEnum):
    """Which instrument (or check) a finding comes from."""

    ARMS = "arms"  # an arm failed or printed nothing to compare
    DRAFTS = "drafts"  # the drafted tokens and traced logits, compared
    ACCEPTANCE = "acceptance"  # the fixed-sample acceptance gate
    SEQUENTIAL = "sequential"  # --until-decided's sequential test
    QUANTITY = "quantity"  # both arms traced the same quantity
    SWITCH = "switch"  # the comparison's toggle and evidence engaged
    COVERAGE = "coverage"  # the state the toggle is about was exercised (analysis.coverage)
    VERIFY = "verify"  # identical blocks verified alike (analysis.bugclass)
    TEACHER_FORCING = "teacher-forcing"  # B replayed A's stream
    REJUDGE = "rejudge"  # a past run judged again
    RATES = "rates"  # near-tie flips and in-tolerance logit rows against the benign rate
    ROLES = "roles"  # each arm ran forced, faulted or mutated only in its role
    DISTRIBUTION = "distribution"  # sampled decoding: the arms' token laws and acceptance
    SWEEP = "sweep"  # a generated input reached the arms it was made for (flow.sweep)


class Demand(Enum):
    """What a finding asks of the verdict: its rank (higher wins) and the kind it gives."""

    AGREE = (0, VerdictKind.AGREE)
    NO_AGREEMENT = (1, VerdictKind.UNINFORMATIVE)
    DIFFER = (2, VerdictKind.DIFFER)
    UNDECIDED = (3, VerdictKind.UNINFORMATIVE)
    INERT = (4, VerdictKind.INERT)
    NOT_WHAT_WAS_ASKED = (5, VerdictKind.UNINFORMATIVE)
    ARM_FAILED = (6, VerdictKind.ARM_FAILED)

    @property
    def rank(self) -> int:
        return int(self.value[0])

    @property
    def kind(self) -> VerdictKind:
        kind: VerdictKind = self.value[1]
        return kind

    @classmethod
    def of_kind(cls, kind: VerdictKind) -> Demand:
        """The weakest demand that gives `kind` (a verdict made from a kind alone)."""
        return min((d for d in cls if d.kind is kind), key=lambda d: d.rank)


@dataclass(frozen=True)
class VerdictFinding:
    """What one instrument found: its demand, its reasons (the sentences it contributes) and
    the instruments it shows could have failed (`Verdict.instruments` is their union)."""

    origin: Origin
    demand: Demand
    reasons: tuple[str, ...] = ()
    could_fail: tuple[Instrument, ...] = ()

    @property
    def kind(self) -> VerdictKind:
        return self.demand.kind


def decide(findings: Iterable[VerdictFinding]) -> VerdictKind:
    """The verdict kind: the strongest demand among the findings (uninformative where there is
    none: nothing was found that could have failed)."""
    strongest = max((f.demand for f in findings), key=lambda d: d.rank,
                    default=Demand.NO_AGREEMENT)
    return strongest.kind


def instruments_of(findings: Iterable[VerdictFinding]) -> tuple[Instrument, ...]:
    """The instruments that could have failed, in the order the findings name them."""
    return tuple(i for f in findings for i in f.could_fail)


def of_decision(origin: Origin, decision: VerdictKind, reasons: Iterable[str] = (),
                could: tuple[Instrument, ...] = ()) -> VerdictFinding:
    """A finding from an instrument that decides agree, differ or uninformative on its own (the
    acceptance gate, the sequential test): a difference is a difference, an undecided test
    leaves no agreement standing."""
    demand = {VerdictKind.AGREE: Demand.AGREE, VerdictKind.DIFFER: Demand.DIFFER}.get(
        decision, Demand.NO_AGREEMENT)
    return VerdictFinding(origin, demand, tuple(reasons), could)
