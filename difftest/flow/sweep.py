"""`difftest sweep`: a comparison over inputs generated to reach the state its toggle is about.

A comparison's configured inputs may never put a drafted block across a page boundary, never
verify at a second width, never pass a window edge. The sweep adds reference-runner arguments
to both arms so that they do, each class aimed at the state its bugs need (the trigger): prompt
lengths that put a drafted block's last row at page_size * m - 1, m, m + 1 and each request's
block ending on a page's last slot; every verify width 1..k; window edges on both sides; several
requests per batch with shuffled page tables; shared prefixes ending before, on and after a page
boundary and inside a page; short blocks whose last drafted token can be accepted; end-of-sequence
ids a request commits inside a drafted block and as its bonus token; and reports, per boundary class, how many
inputs exercised it and how many differed. The arguments are the reference runner's
(`python -m difftest.runners.reference --help`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from difftest.analysis.coverage import about
from difftest.config import Config, ComparisonSpec
from difftest.core.corpus import CoverageClass
from difftest.core.errors import ExitCode
from difftest.core.kinds import DecodingMode, VerdictKind
from difftest.core.model import SpecCoverage

PAGE_SIZE = 16  # the reference runner's page (difftest.runners.reference.attention.PAGE_SIZE)
K = 4  # the reference runner's default drafted tokens per step: a drafted block is 1 + K rows
_C = CoverageClass


@dataclass(frozen=True)
class SweepInput:
    """Arguments added to both arms, and the boundary class they were made to reach."""

    cls: CoverageClass
    label: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class EosIds:
    """Ids a run of one input commits, by how some request first commits each: as an accepted
    drafted token (with it as EOS the request ends inside a drafted block) or as the verify's
    own token (the bonus: the request ends on it)."""

    drafted: tuple[int, ...] = ()
    bonus: tuple[int, ...] = ()


def eos_ids_of(steps: Sequence[tuple[str, Sequence[int]]], n: int = 3) -> EosIds:
    """The first `n` ids of each kind, from a run's verifies in order (request, emitted ids).
    A request's stream does not depend on the others', so with such an id as EOS the request
    that first committed it ends exactly there."""
    seen: dict[str, set[int]] = {}
    drafted: dict[int, None] = {}
    bonus: dict[int, None] = {}
    for req, emitted in steps:
        mine = seen.setdefault(req, set())
        for j, tok in enumerate(emitted):
            if int(tok) not in mine:
                mine.add(int(tok))
                (bonus if j == len(emitted) - 1 else drafted).setdefault(int(tok), None)
    return EosIds(tuple(list(drafted)[:n]), tuple(list(bonus)[:n]))


def _block_end(end: int, req: int = 0) -> tuple[str, tuple[str, ...]]:
    """The prompt length that puts the last row of request `req`'s first drafted block (the
    anchor at the prompt's end, then K drafted rows) at position `end`."""
    return f"r{req} block_end={end}", ("--prompt-len", str(end - K - req))


def _made(cls: CoverageClass, eos: EosIds) -> list[tuple[str, tuple[str, ...]]]:
    """One class's inputs (label, arguments), each aimed at the state the class counts."""
    ends = [PAGE_SIZE * m - 1 for m in (1, 2)]  # a page's last slot
    if cls is _C.PAGE_BOUNDARY:  # the block ends on the last slot, crosses it by one, by two
        return [_block_end(e + d) for e in ends for d in (0, 1, 2)]
    if cls is _C.PAGE_END:  # each request's first block in turn ends on the last slot
        return [_block_end(e, r) for e in ends for r in (0, 1, 2)]
    if cls is _C.PAGE_ORDER:
        return [(f"requests={r} prompt_len=20", ("--requests", str(r), "--prompt-len", "20"))
                for r in (2, 3, 4)]
    if cls is _C.VERIFY_WIDTHS:  # every width 1 + (1..k), in rotated orders
        lens = list(range(1, K + 1))
        return [(f"draft_lens={','.join(map(str, o))}", ("--draft-lens", ",".join(map(str, o))))
                for o in (lens[i:] + lens[:i] for i in range(K))]
    if cls is _C.WINDOW_EDGE:
        return [(f"window={w}", ("--layer-masks", f"full,sliding:{w}"))
                for w in (7, 8, 9, 15, 16, 17)]
    if cls is _C.PREFIX_SHARED:  # prefixes ending before, on and after a page boundary
        return [_prefix(e + d) for e in ends for d in (0, 1, 2)]
    if cls is _C.PREFIX_PARTIAL:  # prefixes ending inside a page: filling all but one of its
        # slots, one of them, half of them
        return [_prefix(e + d) for e in ends for d in (0, 2, PAGE_SIZE // 2 + 1)]
    if cls is _C.EOS:  # a request ending inside a drafted block, and on its bonus token
        return [_eos(i) for i in (*eos.drafted, *eos.bonus)]
    if cls is _C.EOS_BONUS:
        return [_eos(i) for i in eos.bonus]
    if cls is _C.REJECTION:  # long blocks: some drafted token is rejected
        return [(f"draft_lens={d}", ("--draft-lens", d)) for d in ("1", "1,2", "4")]
    if cls is _C.FULL_ACCEPT:  # short blocks, so that acceptance reaches the last drafted slot
        return [(f"draft_lens={d}", ("--draft-lens", d)) for d in ("1", "1,2", "1,3")]
    return [(f"requests={r}", ("--requests", str(r))) for r in (2, 3, 4)]  # BATCH


def _prefix(n: int) -> tuple[str, tuple[str, ...]]:
    return f"shared_prefix={n}", ("--prompt-len", "40", "--shared-prefix", str(n))


def _eos(i: int) -> tuple[str, tuple[str, ...]]:
    return f"eos_id={i}", ("--eos-id", str(i))


def inputs_for(classes: Sequence[CoverageClass], seeds: Sequence[int] = (0,),
               eos: Mapping[int, EosIds] | None = None) -> tuple[SweepInput, ...]:
    """The generated inputs for these classes, each under every seed. EOS inputs need ids the
    run of that seed commits (`eos[seed]`, read from a run of it: `eos_ids_of`); a seed
    without them gets none. Two classes may share an input (the same arguments)."""
    return tuple(SweepInput(cls, f"{label} seed={s}", (*args, "--seed", str(s)))
                 for cls in dict.fromkeys(classes) for s in seeds
                 for label, args in _made(cls, (eos or {}).get(s, EosIds())))


def needs_eos(classes: Sequence[CoverageClass]) -> bool:
    """Whether these classes' inputs need ids read from a run first (`eos_ids_of`)."""
    return bool({_C.EOS, _C.EOS_BONUS} & set(classes))


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
    not_run: int = 0


def covered(cls: CoverageClass, a: SpecCoverage, b: SpecCoverage) -> bool:
    return max(a.count(cls.value), b.count(cls.value)) >= cls.needed


def summarize(outcomes: Sequence[InputOutcome], asked: Sequence[CoverageClass] = (),
              unrun: Sequence[SweepInput] = ()) -> tuple[ClassSummary, ...]:
    """Per class (those `asked` first, an asked class without inputs included): its inputs
    run, how many exercised it, differed, were uninformative, and its inputs not run."""
    out = []
    for cls in dict.fromkeys([*asked, *(o.input.cls for o in outcomes)]):
        mine = [o for o in outcomes if o.input.cls is cls]
        out.append(ClassSummary(cls, len(mine), sum(o.covered for o in mine),
                                sum(o.kind is VerdictKind.DIFFER for o in mine),
                                sum(o.kind.uninformative for o in mine),
                                sum(i.cls is cls for i in unrun)))
    return tuple(out)


def sweep_classes(spec: ComparisonSpec) -> tuple[CoverageClass, ...]:
    """What the sweep of a comparison generates inputs for: what its toggle is about, else the
    page boundaries (the state every paged runner has)."""
    return about(spec.rules.toggle or ()) or (_C.PAGE_BOUNDARY,)


def sweepable(spec: ComparisonSpec) -> bool:
    """Whether `check` sweeps this comparison: its toggle is about some state and it decodes
    greedily (a sampled comparison is judged in distribution, not per generated input)."""
    return bool(about(spec.rules.toggle or ())) and \
        spec.rules.decoding is DecodingMode.GREEDY


def interleaved(inputs: Sequence[SweepInput]) -> tuple[SweepInput, ...]:
    """The inputs taking turns by class (the first of each class, then the second, ...), so
    that a budget spent early still leaves each class tried."""
    by_class: dict[CoverageClass, list[SweepInput]] = {}
    for item in inputs:
        by_class.setdefault(item.cls, []).append(item)
    rows = list(by_class.values())
    return tuple(row[i] for i in range(max(map(len, rows), default=0))
                 for row in rows if i < len(row))


Judge = Callable[[SweepInput], tuple[VerdictKind, SpecCoverage, SpecCoverage]]


def run_sweep(inputs: Sequence[SweepInput], judge: Judge,
              deadline: Callable[[], bool] = lambda: False
              ) -> tuple[tuple[InputOutcome, ...], tuple[SweepInput, ...]]:
    """Judge each input (`judge` runs the comparison on it), recording whether its class was
    exercised; an input made for two classes (the same arguments) is judged once. Once
    `deadline()` says the budget is spent no further input is started: those are returned
    second, not run."""
    out = []
    unrun = []
    judged: dict[tuple[str, ...], tuple[VerdictKind, SpecCoverage, SpecCoverage]] = {}
    for item in inputs:
        if item.args not in judged:
            if deadline():
                unrun.append(item)
                continue
            judged[item.args] = judge(item)
        kind, a, b = judged[item.args]
        out.append(InputOutcome(item, kind, covered(item.cls, a, b)))
    return tuple(out), tuple(unrun)


@dataclass(frozen=True)
class SweepReport:
    """A sweep of one comparison: each input's outcome, and per class what was covered."""

    comparison: str
    outcomes: tuple[InputOutcome, ...]
    asked: tuple[CoverageClass, ...] = ()  # the classes inputs were generated for
    unrun: tuple[SweepInput, ...] = ()  # not started: the budget was spent

    @property
    def classes(self) -> tuple[ClassSummary, ...]:
        return summarize(self.outcomes, self.asked, self.unrun)

    @property
    def exit_code(self) -> ExitCode:
        """1 when any input differed; 3 when a class was exercised by no input run (or had
        none); else 0."""
        if any(o.kind is VerdictKind.DIFFER for o in self.outcomes):
            return ExitCode.DIFFER
        if any(o.kind is VerdictKind.ARM_FAILED for o in self.outcomes):
            return ExitCode.ARM_FAILED
        if not self.outcomes or any(c.covered == 0 for c in self.classes):
            return ExitCode.UNINFORMATIVE
        return ExitCode.OK

    def lines(self) -> list[str]:
        out = [f"sweep {self.comparison}: exit {int(self.exit_code)}", "",
               f"{'state':56s} {'inputs':>6s} {'exercised':>9s} {'differed':>8s} {'uninf.':>6s}"
               f" {'not run':>7s}"]
        out += [f"{c.cls.label + ' (' + c.cls.value + ')':56s} {c.inputs:6d} {c.covered:9d} "
                f"{c.differed:8d} {c.uninformative:6d} {c.not_run:7d}" for c in self.classes]
        out += ["", "inputs:"]
        out += [f"  {o.input.label:32s} {o.kind.value:14s} "
                f"{'exercised' if o.covered else 'NOT exercised'} {o.input.cls.value}"
                for o in self.outcomes]
        out += [f"  {i.label:32s} {'not run':14s} (budget spent) {i.cls.value}"
                for i in self.unrun]
        return out

    def to_json(self) -> dict[str, object]:
        return {"comparison": self.comparison, "exit_code": int(self.exit_code),
                "classes": [{"class": c.cls.value, "label": c.cls.label, "inputs": c.inputs,
                             "exercised": c.covered, "differed": c.differed,
                             "uninformative": c.uninformative, "not_run": c.not_run}
                            for c in self.classes],
                "inputs": [{"input": o.input.label, "class": o.input.cls.value,
                            "args": list(o.input.args), "verdict": o.kind.value,
                            "exercised": o.covered} for o in self.outcomes],
                "not_run": [{"input": i.label, "class": i.cls.value, "args": list(i.args)}
                            for i in self.unrun]}
