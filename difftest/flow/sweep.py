"""`difftest sweep`: a comparison over inputs generated to reach the state its toggle is about.

A comparison's configured inputs may never put a drafted block across a page boundary, never
verify at a second width, never pass a window edge. The sweep adds reference-runner arguments
to both arms so that they do: prompt lengths at page_size * m - 1, m, m + 1; every verify width
1..k; window edges on both sides; several requests per batch with shuffled page tables; shared
prefixes ending on, before and after a page boundary; and reports, per boundary class, how many
inputs exercised it and how many differed. The arguments are the reference runner's
(`python -m difftest.runners.reference --help`).

Each input is judged as the comparison is, under its `expect`; an input the arms cannot be
shown to have received (their `[spec-config]` does not report its settings, or a trace reads
the same as for another input) is uninformative. A class counts as judged only through inputs
that met the expectation with it exercised: inert and uninformative inputs judge nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from difftest.analysis.coverage import about, table
from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.analysis.verdict import Verdict
from difftest.config import Config, ComparisonSpec
from difftest.core.corpus import CoverageClass
from difftest.core.errors import ExitCode, worst
from difftest.core.kinds import Expect, VerdictKind
from difftest.core.model import ArmTrace, SpecCoverage, same_reading

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
class InputRun:
    """One input judged as the comparison is: its verdict, and each arm's name and trace
    (None: the arm left none to read)."""

    verdict: Verdict
    names: tuple[str, str]
    a: ArmTrace | None
    b: ArmTrace | None


@dataclass(frozen=True)
class InputOutcome:
    """One input's verdict (with what showed the input never reached an arm joined in), and
    whether the arms exercised the class it was made for."""

    input: SweepInput
    verdict: Verdict
    covered: bool

    @property
    def kind(self) -> VerdictKind:
        return self.verdict.kind

    @property
    def judged(self) -> bool:
        """The input met the comparison's expectation with its class exercised: what makes a
        class exercised and judged (an uninformative or inert input never does)."""
        return self.covered and self.verdict.passed


@dataclass(frozen=True)
class ClassSummary:
    cls: CoverageClass
    inputs: int
    covered: int
    differed: int
    uninformative: int
    judged: int  # inputs that met the expectation with the class exercised


def covered(cls: CoverageClass, a: SpecCoverage, b: SpecCoverage) -> bool:
    """The comparison's own coverage rule (`analysis.coverage.table`): each arm's count, the
    class exercised when an arm reached it (a lane without pages counts none of them)."""
    return any(r.exercised for r in table((), a, b, (cls,)) if r.cls is cls)


# generated argument -> the `[spec-config]` key the reference runner reports it under
# (difftest.runners.reference.runner.applied)
REPORTED = {"--seed": "seed", "--requests": "requests", "--prompt-len": "prompt_len",
            "--draft-lens": "draft_lens", "--layer-masks": "layer_masks", "--eos-id": "eos_id",
            "--shared-prefix": "shared_prefix"}


def _settings(args: Sequence[str]) -> dict[str, str]:
    """The `[spec-config]` values an input's arguments set (the last of a repeated one)."""
    return {REPORTED[k]: v for k, v in zip(args, args[1:], strict=False) if k in REPORTED}


def _arms(run: InputRun) -> tuple[tuple[str, ArmTrace | None], tuple[str, ArmTrace | None]]:
    return (run.names[0], run.a), (run.names[1], run.b)


def _contradicted(args: tuple[str, ...], run: InputRun) -> list[str]:
    """A setting the input set that an arm's `[spec-config]` does not report, or reports with
    another value (the reference runner reports each: docs/trace-format.md)."""
    out = []
    for name, trace in _arms(run):
        if trace is None:
            continue
        for key, value in _settings(args).items():
            got = trace.config.values.get(key)
            if got is None:
                out.append(f"sweep: {name}'s [spec-config] does not report {key} (the input "
                           f"set {key}={value}): nothing shows the generated arguments reached it")
            elif got != value:
                out.append(f"sweep: {name}'s [spec-config] (line "
                           f"{trace.config.lines.get(key, 0)}) says {key}={got}, the input set "
                           f"{key}={value}: the generated arguments did not reach it")
    return out


def _repeated(args: tuple[str, ...], runs: Mapping[tuple[str, ...], InputRun]) -> list[str]:
    """An arm whose trace reads the same (`same_reading`) as for an input with other
    arguments: it ran one input however many were generated."""
    out = []
    for side, (name, mine) in enumerate(_arms(runs[args])):
        same = [other for other, run in runs.items() if other != args and mine is not None
                and (theirs := _arms(run)[side][1]) is not None and same_reading(mine, theirs)]
        if same:
            out.append(f"sweep: {name}'s trace reads the same as for the input "
                       f"{' '.join(same[0])}: nothing shows the generated arguments reached it")
    return out


def unreached(runs: Mapping[tuple[str, ...], InputRun]) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Why each input (by its arguments) cannot be shown to have reached its arms
    (`_contradicted`, `_repeated`); inputs without such a reason are absent."""
    out = {args: (*_contradicted(args, run), *_repeated(args, runs))
           for args, run in runs.items()}
    return {k: v for k, v in out.items() if v}


def summarize(outcomes: Sequence[InputOutcome]) -> tuple[ClassSummary, ...]:
    out = []
    for cls in dict.fromkeys(o.input.cls for o in outcomes):
        mine = [o for o in outcomes if o.input.cls is cls]
        out.append(ClassSummary(cls, len(mine), sum(o.covered for o in mine),
                                sum(o.kind is VerdictKind.DIFFER for o in mine),
                                sum(o.kind.uninformative for o in mine),
                                sum(o.judged for o in mine)))
    return tuple(out)


def sweep_classes(spec: ComparisonSpec) -> tuple[CoverageClass, ...]:
    """What the sweep of a comparison generates inputs for: what its toggle is about, else the
    page boundaries (the state every paged runner has)."""
    return about(spec.rules.toggle or ()) or (_C.PAGE_BOUNDARY,)


Judge = Callable[[SweepInput], InputRun]


def run_sweep(inputs: Sequence[SweepInput], judge: Judge) -> tuple[InputOutcome, ...]:
    """Judge each input (`judge` runs the comparison on it), recording whether its class was
    exercised; an input that cannot be shown to have reached its arms (`unreached`) has that
    joined to its verdict as a finding: no agreement may rest on it, and under `expect =
    differ` no difference either (the comparison's one rule, `findings.decide`, says what
    remains)."""
    runs: dict[tuple[str, ...], InputRun] = {}
    for item in inputs:
        if item.args not in runs:
            runs[item.args] = judge(item)
    why = unreached(runs)
    out = []
    for item in inputs:
        run = runs[item.args]
        verdict = run.verdict
        if item.args in why:
            verdict = verdict.joined(VerdictFinding(
                Origin.SWEEP, Demand.UNDECIDED if verdict.expect is Expect.DIFFER
                else Demand.NO_AGREEMENT, why[item.args]), last=why[item.args])
        none = SpecCoverage()
        out.append(InputOutcome(item, verdict, covered(
            item.cls, run.a.coverage if run.a else none, run.b.coverage if run.b else none)))
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
        """Each input's exit code under the comparison's expectation (`Verdict.exit_code`),
        the worst of them as check takes it (`core.errors.worst`): 1 when an input failed its
        expectation (differed under `same`, agreed under `differ`). An uninformative or inert
        input proves nothing either way; 3 when a class has no input that met the expectation
        with the class exercised (so when no input was informative)."""
        codes = [o.verdict.exit_code for o in self.outcomes if not o.kind.uninformative]
        codes += [ExitCode.UNINFORMATIVE for c in self.classes if c.judged == 0]
        return worst(codes) if self.outcomes else ExitCode.UNINFORMATIVE

    def lines(self) -> list[str]:
        out = [f"sweep {self.comparison}: exit {int(self.exit_code)}", "",
               f"{'state':52s} {'inputs':>6s} {'exercised':>9s} {'passed':>6s} "
               f"{'differed':>8s} {'uninf.':>6s}"]
        out += [f"{c.cls.label + ' (' + c.cls.value + ')':52s} {c.inputs:6d} {c.covered:9d} "
                f"{c.judged:6d} {c.differed:8d} {c.uninformative:6d}" for c in self.classes]
        out += ["", "passed: inputs that met the comparison's expectation with the state "
                "exercised (a state none passed on leaves the sweep uninformative, exit 3)",
                "", "inputs:"]
        for o in self.outcomes:
            out.append(f"  {o.input.label:32s} {o.kind.value:14s} {o.verdict.label:13s} "
                       f"{'exercised' if o.covered else 'NOT exercised'} {o.input.cls.value}")
            out += [f"      {r}" for f in o.verdict.findings if f.origin is Origin.SWEEP
                    for r in f.reasons]
        return out
