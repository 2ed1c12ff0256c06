"""`difftest sweep`: a comparison over inputs generated to reach the state its toggle is about.

A comparison's configured inputs may never put a drafted block across a page boundary, never
verify at a second width, never pass a window edge. The sweep adds reference-runner arguments
to both arms so that they do: prompt lengths at page_size * m - 1, m, m + 1; every verify width
1..k; window edges on both sides; several requests per batch with shuffled page tables; shared
prefixes ending on, before and after a page boundary; and reports, per boundary class, how many
inputs exercised it and how many differed. The arguments are the reference runner's
(`python -m difftest.runners.reference --help`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from difftest.analysis.coverage import about
from difftest.config import Config, ComparisonSpec
from difftest.core.corpus import CoverageClass
from difftest.core.errors import ExitCode
from difftest.core.kinds import VerdictKind
from difftest.core.model import SpecCoverage

PAGE_SIZE = 16  # the reference runner's page (difftest.runners.reference.attention.PAGE_SIZE)
K = 4  # the reference runner's default drafted tokens per step
_C = CoverageClass


@dataclass(frozen=True)
class SweepInput:
    """Arguments added to both arms, and the boundary class they were made to reach."""

    cls: CoverageClass
    label: str
    args: tuple[str, ...]


def _around(m: int) -> tuple[int, int, int]:
    return (PAGE_SIZE * m - 1, PAGE_SIZE * m, PAGE_SIZE * m + 1)


def inputs_for(classes: Sequence[CoverageClass], seeds: Sequence[int] = (0,),
               eos_ids: Sequence[int] = ()) -> tuple[SweepInput, ...]:
    """The generated inputs for these classes, each under every seed. EOS inputs need ids the
    runs commit (`eos_ids`, read from a run of the configured input)."""
    made: list[tuple[CoverageClass, str, tuple[str, ...]]] = []
    for cls in dict.fromkeys(classes):
        if cls is _C.PAGE_BOUNDARY:
            made += [(cls, f"prompt_len={n}", ("--prompt-len", str(n)))
                     for n in (*_around(1), *_around(2))]
        elif cls is _C.PAGE_ORDER:
            made += [(cls, f"requests={r} prompt_len=20", ("--requests", str(r),
                                                           "--prompt-len", "20"))
                     for r in (2, 3, 4)]
        elif cls is _C.VERIFY_WIDTHS:  # every width 1 + (1..k), in rotated orders
            lens = list(range(1, K + 1))
            made += [(cls, f"draft_lens={','.join(map(str, o))}",
                      ("--draft-lens", ",".join(map(str, o))))
                     for o in (lens[i:] + lens[:i] for i in range(K))]
        elif cls is _C.WINDOW_EDGE:
            made += [(cls, f"window={w}", ("--layer-masks", f"full,sliding:{w}"))
                     for w in (7, 8, 9, *_around(1))]
        elif cls is _C.PREFIX_SHARED:
            made += [(cls, f"shared_prefix={n}", ("--prompt-len", "40", "--shared-prefix", str(n)))
                     for n in (*_around(1), *_around(2))]
        elif cls is _C.EOS:
            made += [(cls, f"eos_id={i}", ("--eos-id", str(i))) for i in eos_ids]
        elif cls in (_C.REJECTION, _C.FULL_ACCEPT):
            made += [(cls, f"draft_lens={d}", ("--draft-lens", d)) for d in ("1", "1,2", "4")]
        elif cls is _C.BATCH:
            made += [(cls, f"requests={r}", ("--requests", str(r))) for r in (2, 3, 4)]
    return tuple(SweepInput(cls, f"{label} seed={s}", (*args, "--seed", str(s)))
                 for (cls, label, args), s in itertools.product(made, seeds))


def eos_ids_of(streams: Sequence[Sequence[int]], n: int = 6) -> tuple[int, ...]:
    """Ids a run committed past its first tokens (so a request ends mid-run at them)."""
    seen: dict[int, None] = {}
    for ids in streams:
        for tok in ids[3:]:
            seen.setdefault(int(tok), None)
    return tuple(list(seen)[:n])


def with_args(config: Config, spec: ComparisonSpec, args: Sequence[str]) -> Config:
    """The config with `args` appended to both arms of the comparison."""
    arms = dict(config.arms)
    for name in (spec.arm_a, spec.arm_b):
        arms[name] = replace(arms[name], command=(*arms[name].command, *args))
    return replace(config, arms=arms)


@dataclass(frozen=True)
class InputOutcome:
    """One input's verdict, and whether the arms exercised the class it was made for."""

    input: SweepInput
    kind: VerdictKind
    covered: bool


@dataclass(frozen=True)
class ClassSummary:
    cls: CoverageClass
    inputs: int
    covered: int
    differed: int
    uninformative: int


def covered(cls: CoverageClass, a: SpecCoverage, b: SpecCoverage) -> bool:
    return max(a.count(cls.value), b.count(cls.value)) >= cls.needed


def summarize(outcomes: Sequence[InputOutcome]) -> tuple[ClassSummary, ...]:
    out = []
    for cls in dict.fromkeys(o.input.cls for o in outcomes):
        mine = [o for o in outcomes if o.input.cls is cls]
        out.append(ClassSummary(cls, len(mine), sum(o.covered for o in mine),
                                sum(o.kind is VerdictKind.DIFFER for o in mine),
                                sum(o.kind.uninformative for o in mine)))
    return tuple(out)


def sweep_classes(spec: ComparisonSpec) -> tuple[CoverageClass, ...]:
    """What the sweep of a comparison generates inputs for: what its toggle is about, else the
    page boundaries (the state every paged runner has)."""
    return about(spec.rules.toggle or ()) or (_C.PAGE_BOUNDARY,)


Judge = Callable[[SweepInput], tuple[VerdictKind, SpecCoverage, SpecCoverage]]


def run_sweep(inputs: Sequence[SweepInput], judge: Judge) -> tuple[InputOutcome, ...]:
    """Judge each input (`judge` runs the comparison on it), recording whether its class was
    exercised."""
    out = []
    for item in inputs:
        kind, a, b = judge(item)
        out.append(InputOutcome(item, kind, covered(item.cls, a, b)))
    return tuple(out)


@dataclass(frozen=True)
class SweepReport:
    """A sweep of one comparison: each input's outcome, and per class what was covered."""

    comparison: str
    outcomes: tuple[InputOutcome, ...]

    @property
    def classes(self) -> tuple[ClassSummary, ...]:
        return summarize(self.outcomes)

    @property
    def exit_code(self) -> ExitCode:
        """1 when any input differed; 3 when a class was exercised by no input; else 0."""
        if any(o.kind is VerdictKind.DIFFER for o in self.outcomes):
            return ExitCode.DIFFER
        if any(o.kind is VerdictKind.ARM_FAILED for o in self.outcomes):
            return ExitCode.ARM_FAILED
        if not self.outcomes or any(c.covered == 0 for c in self.classes):
            return ExitCode.UNINFORMATIVE
        return ExitCode.OK

    def lines(self) -> list[str]:
        out = [f"sweep {self.comparison}: exit {int(self.exit_code)}", "",
               f"{'state':52s} {'inputs':>6s} {'exercised':>9s} {'differed':>8s} {'uninf.':>6s}"]
        out += [f"{c.cls.label + ' (' + c.cls.value + ')':52s} {c.inputs:6d} {c.covered:9d} "
                f"{c.differed:8d} {c.uninformative:6d}" for c in self.classes]
        out += ["", "inputs:"]
        out += [f"  {o.input.label:32s} {o.kind.value:14s} "
                f"{'exercised' if o.covered else 'NOT exercised'} {o.input.cls.value}"
                for o in self.outcomes]
        return out
