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

Each input is judged as the comparison is, under its `expect`; an input the arms cannot be
shown to have received (their `[spec-config]` does not report its settings, or a trace reads
the same as for another input) is uninformative. A class counts as judged only through inputs
that met the expectation with it exercised: inert and uninformative inputs judge nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from difftest.analysis.coverage import about, table
from difftest.analysis.findings import Demand, Origin, VerdictFinding
from difftest.analysis.verdict import Verdict
from difftest.config import Config, ComparisonSpec
from difftest.core.corpus import CoverageClass
from difftest.core.errors import ExitCode, worst
from difftest.core.kinds import DecodingMode, Expect, VerdictKind
from difftest.core.model import ArmTrace, SpecCoverage, same_reading

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
    if cls is _C.EOS:  # a request ending inside a drafted block, and on its bonus token
        return [_eos(i) for i in (*eos.drafted, *eos.bonus)]
    if cls is _C.EOS_BONUS:
        return [_eos(i) for i in eos.bonus]
    if cls in (_C.PAGE_BOUNDARY, _C.PAGE_END, _C.PAGE_ORDER, _C.PREFIX_SHARED,
               _C.PREFIX_PARTIAL):
        return _paged(cls)
    return _drafted(cls)


def _paged(cls: CoverageClass) -> list[tuple[str, tuple[str, ...]]]:
    """The inputs of a class about the page table: blocks, requests and shared prefixes placed
    at a page's edges."""
    ends = [PAGE_SIZE * m - 1 for m in (1, 2)]  # a page's last slot
    if cls is _C.PAGE_BOUNDARY:  # the block ends on the last slot, crosses it by one, by two
        return [_block_end(e + d) for e in ends for d in (0, 1, 2)]
    if cls is _C.PAGE_END:  # each request's first block in turn ends on the last slot
        return [_block_end(e, r) for e in ends for r in (0, 1, 2)]
    if cls is _C.PAGE_ORDER:
        return [(f"requests={r} prompt_len=20", ("--requests", str(r), "--prompt-len", "20"))
                for r in (2, 3, 4)]
    if cls is _C.PREFIX_SHARED:  # prefixes ending before, on and after a page boundary
        return [_prefix(e + d) for e in ends for d in (0, 1, 2)]
    # PREFIX_PARTIAL: prefixes ending inside a page: filling all but one of its slots, one of
    # them, half of them
    return [_prefix(e + d) for e in ends for d in (0, 2, PAGE_SIZE // 2 + 1)]


def _drafted(cls: CoverageClass) -> list[tuple[str, tuple[str, ...]]]:
    """The inputs of a class about drafted blocks: their widths, windows, lengths, batches."""
    if cls is _C.VERIFY_WIDTHS:  # every width 1 + (1..k), in rotated orders
        lens = list(range(1, K + 1))
        return [(f"draft_lens={','.join(map(str, o))}", ("--draft-lens", ",".join(map(str, o))))
                for o in (lens[i:] + lens[:i] for i in range(K))]
    if cls is _C.WINDOW_EDGE:
        return [(f"window={w}", ("--layer-masks", f"full,sliding:{w}"))
                for w in (7, 8, 9, 15, 16, 17)]
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
    not_run: int = 0  # inputs not started: the budget was spent


def covered(cls: CoverageClass, a: SpecCoverage, b: SpecCoverage) -> bool:
    """The comparison's own coverage rule (`analysis.coverage.table`): each arm's count, the
    class exercised when an arm reached it (a lane without pages counts none of them)."""
    return any(r.exercised for r in table((), a, b, (cls,)) if r.cls is cls)


# generated argument -> the `[spec-config]` key the reference runner reports it under
# (difftest.runners.reference.setup.applied)
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


def summarize(outcomes: Sequence[InputOutcome], asked: Sequence[CoverageClass] = (),
              unrun: Sequence[SweepInput] = ()) -> tuple[ClassSummary, ...]:
    """Per class (those `asked` first, an asked class without inputs included): its inputs
    run, how many exercised it, differed, were uninformative, passed, and its inputs not run."""
    out = []
    for cls in dict.fromkeys([*asked, *(o.input.cls for o in outcomes)]):
        mine = [o for o in outcomes if o.input.cls is cls]
        out.append(ClassSummary(cls, len(mine), sum(o.covered for o in mine),
                                sum(o.kind is VerdictKind.DIFFER for o in mine),
                                sum(o.kind.uninformative for o in mine),
                                sum(o.judged for o in mine),
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


Judge = Callable[[SweepInput], InputRun]


def run_sweep(inputs: Sequence[SweepInput], judge: Judge,
              deadline: Callable[[], bool] = lambda: False
              ) -> tuple[tuple[InputOutcome, ...], tuple[SweepInput, ...]]:
    """Judge each input (`judge` runs the comparison on it), recording whether its class was
    exercised; an input made for two classes (the same arguments) is judged once. An input that
    cannot be shown to have reached its arms (`unreached`) has that joined to its verdict as a
    finding: no agreement may rest on it, and under `expect = differ` no difference either (the
    comparison's one rule, `findings.decide`, says what remains). Once `deadline()` says the
    budget is spent no further input is started: those are returned second, not run."""
    runs: dict[tuple[str, ...], InputRun] = {}
    unrun = []
    for item in inputs:
        if item.args not in runs:
            if deadline():
                unrun.append(item)
                continue
            runs[item.args] = judge(item)
    why = unreached(runs)
    out = []
    for item in inputs:
        if item.args not in runs:
            continue
        run = runs[item.args]
        verdict = run.verdict
        if item.args in why:
            verdict = verdict.joined(VerdictFinding(
                Origin.SWEEP, Demand.UNDECIDED if verdict.expect is Expect.DIFFER
                else Demand.NO_AGREEMENT, why[item.args]), last=why[item.args])
        none = SpecCoverage()
        out.append(InputOutcome(item, verdict, covered(
            item.cls, run.a.coverage if run.a else none, run.b.coverage if run.b else none)))
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
        """Each input's exit code under the comparison's expectation (`Verdict.exit_code`),
        the worst of them as check takes it (`core.errors.worst`): 1 when an input failed its
        expectation (differed under `same`, agreed under `differ`). An uninformative or inert
        input proves nothing either way; 3 when a class has no input that met the expectation
        with the class exercised (so when no input was informative, or none was run)."""
        codes = [o.verdict.exit_code for o in self.outcomes if not o.kind.uninformative]
        codes += [ExitCode.UNINFORMATIVE for c in self.classes if c.judged == 0]
        return worst(codes) if self.outcomes else ExitCode.UNINFORMATIVE

    def lines(self) -> list[str]:
        out = [f"sweep {self.comparison}: exit {int(self.exit_code)}", "",
               f"{'state':56s} {'inputs':>6s} {'exercised':>9s} {'passed':>6s} "
               f"{'differed':>8s} {'uninf.':>6s} {'not run':>7s}"]
        out += [f"{c.cls.label + ' (' + c.cls.value + ')':56s} {c.inputs:6d} {c.covered:9d} "
                f"{c.judged:6d} {c.differed:8d} {c.uninformative:6d} {c.not_run:7d}"
                for c in self.classes]
        out += ["", "passed: inputs that met the comparison's expectation with the state "
                "exercised (a state none passed on leaves the sweep uninformative, exit 3)",
                "", "inputs:"]
        for o in self.outcomes:
            out.append(f"  {o.input.label:32s} {o.kind.value:14s} {o.verdict.label:13s} "
                       f"{'exercised' if o.covered else 'NOT exercised'} {o.input.cls.value}")
            out += [f"      {r}" for f in o.verdict.findings if f.origin is Origin.SWEEP
                    for r in f.reasons]
        out += [f"  {i.label:32s} {'not run':14s} (budget spent) {i.cls.value}"
                for i in self.unrun]
        return out

    def to_json(self) -> dict[str, object]:
        return {"comparison": self.comparison, "exit_code": int(self.exit_code),
                "classes": [{"class": c.cls.value, "label": c.cls.label, "inputs": c.inputs,
                             "exercised": c.covered, "passed": c.judged,
                             "differed": c.differed, "uninformative": c.uninformative,
                             "not_run": c.not_run} for c in self.classes],
                "inputs": [{"input": o.input.label, "class": o.input.cls.value,
                            "args": list(o.input.args), "verdict": o.kind.value,
                            "exercised": o.covered} for o in self.outcomes],
                "not_run": [{"input": i.label, "class": i.cls.value, "args": list(i.args)}
                            for i in self.unrun]}
