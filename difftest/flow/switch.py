"""Did the switch engage? A comparison of two arms that ran the same thing measures nothing,
however many blocks it compares: a misspelt variable, an ignored flag or a backend that fell back
makes a `same` gate certify a lane against itself. This module reads what each arm's output says
it ran (its effective configuration) and checks it against the comparison's `toggle` and each
arm's `evidence`; the verdict becomes INERT when the switch did not engage, and uninformative
when nothing shows whether it did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.core.evidence import Op, Rule
from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.core.kinds import Expect, VerdictKind
from difftest.core.model import ArmTrace

if TYPE_CHECKING:
    from difftest.execute.records import ArmResult

ROUTE_SOURCE = "[dflash-route]"
CONFIG_SOURCE = "[spec-config]"
RUN_SOURCE = "the run record"
# `[dflash-route]` counters of each lane: the paged pool (through the seam or the fused block
# kernel) and the materialized (`combined`) lane.
PAGED_COUNTERS = ("paged_seam", "block_kernel")
MATERIALIZED_COUNTERS = ("combined",)


@dataclass(frozen=True)
class Effective:
    """One arm's effective configuration: each setting's value and where it was read."""

    values: Mapping[str, str]
    sources: Mapping[str, str]
    counters: Mapping[str, int]  # `[dflash-route]` counters, summed over the trace's lines
    notes: tuple[str, ...] = ()  # the arm's output contradicting itself

    def shown(self, key: str) -> str:
        """`key=value (from where)`, or that the arm reports no such setting."""
        if key not in self.values:
            return f"no {key}"
        return f"{key}={self.values[key]} (from {self.sources[key]})"


def lane_of(counters: Mapping[str, int]) -> str | None:
    """The lane `[dflash-route]` counters show: paged, materialized, mixed, or None (no block
    read counted, or no route line)."""
    paged = sum(counters.get(c, 0) for c in PAGED_COUNTERS)
    materialized = sum(counters.get(c, 0) for c in MATERIALIZED_COUNTERS)
    if paged > 0 and materialized > 0:
        return "mixed"
    if paged > 0:
        return "paged"
    if materialized > 0:
        return "materialized"
    return None


def _counters_text(counters: Mapping[str, int]) -> str:
    shown = [c for c in (*PAGED_COUNTERS, *MATERIALIZED_COUNTERS) if c in counters]
    return " ".join(f"{c}={counters[c]}" for c in shown)


def effective(name: str, trace: ArmTrace, result: ArmResult | None = None) -> Effective:
    """What the arm's output says it ran: its `[spec-config]` settings, `lane` derived from the
    `[dflash-route]` counters (what counted wins over what was printed), and `commit` from the
    checkout difftest ran it in."""
    values = dict(trace.config.values)
    sources = {k: f"{CONFIG_SOURCE} line {trace.config.lines[k]}" for k in values}
    counters: dict[str, int] = {}
    for route in trace.routes:
        for key, value in route.counters.items():
            counters[key] = counters.get(key, 0) + value
    notes: list[str] = []
    lane = lane_of(counters)
    if lane is not None:
        said = values.get("lane")
        if said is not None and said != lane:
            notes.append(f"{name}: its {CONFIG_SOURCE} says lane={said}, but its {ROUTE_SOURCE} "
                         f"counters ({_counters_text(counters)}) show lane={lane}; the counters "
                         "are what ran")
        values["lane"] = lane
        sources["lane"] = f"{ROUTE_SOURCE} {_counters_text(counters)}"
    if result is not None and result.git_ref and result.git_sha and "commit" not in values:
        values["commit"] = result.git_sha
        sources["commit"] = RUN_SOURCE
    return Effective(values, sources, counters, tuple(notes))


@dataclass(frozen=True)
class Side:
    """One arm as the switch check sees it."""

    name: str
    trace: ArmTrace
    trace_path: Path | None = None
    result: ArmResult | None = None
    evidence: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class SwitchCheck:
    """The outcome: a verdict kind that replaces the comparison's (None: judged as usual) and
    the reasons, which name the setting, both values and the arm."""

    kind: VerdictKind | None
    reasons: tuple[str, ...]

    def finding(self, expect: Expect) -> VerdictFinding | None:
        """INERT when the switch did not engage. When nothing shows that it did, no pass may
        rest on the comparison, and under `differ` no failure either (the difference the
        comparison expects is the toggle's, which cannot be shown); a difference found under
        `same` is a difference whatever the arms ran, and stands."""
        if self.kind is None:
            return None
        if self.kind is VerdictKind.INERT:
            return VerdictFinding(Origin.SWITCH, Demand.INERT, self.reasons)
        return VerdictFinding(Origin.SWITCH, Demand.UNDECIDED if expect is Expect.DIFFER
                              else Demand.NO_AGREEMENT, self.reasons)


def _line_matches(path: Path | None, rule: Rule) -> bool:
    if path is None:
        return False
    pattern = rule.pattern
    try:
        with open(path, "rb") as fh:
            return any(pattern.search(line.rstrip(b"\n")) for line in fh)
    except OSError:
        return False


def _evidence_failures(side: Side, eff: Effective) -> list[str]:
    out: list[str] = []
    for rule in side.evidence:
        if rule.op is Op.MATCH:
            if not _line_matches(side.trace_path, rule):
                out.append(f"{side.name}: evidence `{rule.text}` is missing: no line of its "
                           "output matches")
            continue
        if rule.name in eff.values:
            seen, where = eff.values[rule.name], eff.sources[rule.name]
        elif rule.name in eff.counters:
            seen, where = str(eff.counters[rule.name]), f"{ROUTE_SOURCE} counter"
        else:
            out.append(f"{side.name}: evidence `{rule.text}` is missing: its output reports no "
                       f"setting or counter {rule.name!r}")
            continue
        if not rule.holds(seen):
            out.append(f"{side.name}: evidence `{rule.text}` is contradicted: it reports "
                       f"{rule.name}={seen} (from {where})")
    return out


def _launched_differently_as_one(a: Side, b: Side, ea: Effective, eb: Effective) -> str | None:
    """The effective configuration both arms report (as `k=v ...`) where difftest launched them
    differently (argv or env), else None."""
    if not (ea.values and eb.values and dict(ea.values) == dict(eb.values)):
        return None
    ra, rb = a.result, b.result
    if ra is None or rb is None or (ra.argv == rb.argv and ra.env_overrides == rb.env_overrides):
        return None
    return " ".join(f"{k}={v}" for k, v in sorted(ea.values.items()))


def check_switch(toggle: Sequence[str] | None, a: Side, b: Side) -> SwitchCheck:
    """INERT when a toggled setting reads the same in both arms, or one arm does not report it,
    or an arm's evidence is missing or contradicted; uninformative when a toggle is declared
    and neither arm reports any of its settings. Without a toggle, arms launched differently that
    report one effective configuration are INERT; with `toggle = []` (the switch has no
    trace-visible effect) the report says so instead."""
    ea, eb = (effective(s.name, s.trace, s.result) for s in (a, b))
    inert, blind, engaged = _toggled(toggle or (), (a, ea), (b, eb))
    for side, eff in ((a, ea), (b, eb)):
        inert += _evidence_failures(side, eff)
    notes = [*ea.notes, *eb.notes]
    if engaged and not inert:
        notes.append("the switch engaged: " + "; ".join(engaged))
    if not toggle:
        _untoggled(toggle, (a, ea), (b, eb), inert, notes)
    if inert:
        return SwitchCheck(VerdictKind.INERT, (*inert, *blind, *notes))
    if blind:
        return SwitchCheck(VerdictKind.UNINFORMATIVE, (*blind, *notes))
    return SwitchCheck(None, tuple(notes))


def _toggled(toggle: Sequence[str], one: tuple[Side, Effective], two: tuple[Side, Effective]
             ) -> tuple[list[str], list[str], list[str]]:
    """Each toggled setting as the arms report it: (inert, blind, engaged) lines."""
    (a, ea), (b, eb) = one, two
    inert: list[str] = []
    blind: list[str] = []
    engaged: list[str] = []
    for key in toggle:
        va, vb = ea.values.get(key), eb.values.get(key)
        if va is None and vb is None:
            where = f"{CONFIG_SOURCE} setting" + (
                f" or {ROUTE_SOURCE} counters" if key == "lane" else "")
            blind.append(f"toggle {key!r}: neither {a.name} nor {b.name} reports {key} (no "
                         f"{where}): the comparison cannot show that the switch engaged")
        elif va is None or vb is None:
            missing, other, eff = (a.name, b.name, eb) if va is None else (b.name, a.name, ea)
            inert.append(f"toggle {key!r}: {missing} reports no {key}, {other} reports "
                         f"{eff.shown(key)}: the switch cannot be shown to have engaged")
        elif va == vb:
            inert.append(f"toggle {key!r}: both arms report {key}={va} ({a.name}: "
                         f"{ea.sources[key]}; {b.name}: {eb.sources[key]}): the switch did not "
                         f"engage, so {a.name} was compared with itself")
        else:
            engaged.append(f"{key} {va} ({a.name}) -> {vb} ({b.name})")
    return inert, blind, engaged


def _untoggled(toggle: Sequence[str] | None, one: tuple[Side, Effective],
               two: tuple[Side, Effective], inert: list[str], notes: list[str]) -> None:
    """Without a toggle: arms launched differently that report one effective configuration are
    INERT (added to `inert`); with `toggle = []` a note says so (added to `notes`)."""
    (a, ea), (b, eb) = one, two
    same = _launched_differently_as_one(a, b, ea, eb)
    if same is not None and toggle is None:
        inert.append(f"{a.name} and {b.name} were launched differently but report the same "
                     f"effective configuration ({same}): nothing shows the difference "
                     "reached the runner. Declare the setting the comparison is about as "
                     "its `toggle`, or `toggle = []` where the switch has no "
                     "trace-visible effect")
    elif same is not None:
        notes.append(f"toggle = []: the comparison declares that its switch has no "
                     f"trace-visible effect; {a.name} and {b.name} were launched differently "
                     f"and report the same effective configuration ({same})")
