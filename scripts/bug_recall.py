"""How many of the bug corpus's classes difftest catches: every mutation of the reference
runner's corpus (docs/bugs.md) through the shipped comparison it belongs to, first on the
shipped inputs (what the default `check` sees), then on the sweep's generated inputs for the
state it lives in (difftest.flow.sweep); the controls through both, where none may differ (on
an input that did not reach the comparison's own states a control is UNINFORMATIVE, as any
agreement there is).

Arms run in this process (the runner's trace lines, exactly as its stderr carries them, written
to files) and are judged by the comparison's own judge (`judge_traces`: toggle, coverage,
audit, tokens, logits). A mutation living in the paged lane is planted in the paged arm.

    python scripts/bug_recall.py [--runner reference|hf|mlx] [--seeds 3] [--only NAME ...]
                                 [--json FILE]

Prints per mutation: on the shipped inputs how many runs were caught (DIFFER), uninformative
(UNINF: the state was not reached, or the mutation never acted) and agreed (AGREE: a miss); on
the sweep's inputs (those generated for the state the mutation needs, under each seed; for a
control, every class's) how many were caught, uninformative and agreed, each input that was
not caught (a control's: not agreed); and the kind each DIFFER was named.

`--runner hf` or `--runner mlx`: the records that runner carries (`--list-mutations`), each
through the runner's `rerun` comparison (configs/hf.toml, mlx.toml: A the correct run, B the
mutated one), first on the runner's default inputs, then on inputs generated to reach its state:
windows the queries pass (--sliding-window), rotations of the verify widths 2..5
(--draft-lens); a mutation that needs neither, and each control, on both. A control is judged
under its `judged_by` comparison's tolerance where the runner's config has one (transformers'
sdpa rounds an explicit mask otherwise than its causal flag), else bit for bit.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest.analysis.bugclass import classify  # noqa: E402
from difftest.config import ComparisonSpec, Config, load_config  # noqa: E402
from difftest.core.corpus import (MUTATION_ENV, CoverageClass, Lane, Mutation,  # noqa: E402
                                  Runner, carried_by)
from difftest.core.kinds import VerdictKind  # noqa: E402
from difftest.flow.evaluate import judge_planted  # noqa: E402
from difftest.flow.sweep import EosIds, eos_ids_of, inputs_for, needs_eos  # noqa: E402
from difftest.runners.reference.__main__ import options_of, parser  # noqa: E402
from difftest.runners.reference.runner import run  # noqa: E402

SHIPPED = ["--drafter", "dflash2", "--scalars", "on", "--fixture", "informative"]
ARMS = {"paged": ["--lane", "paged"], "materialized": ["--lane", "materialized"],
        "paged-split": ["--lane", "paged", "--attention-kernel", "split"]}


class Runs:
    """Runs of the reference runner, each once, written to trace files."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cache: dict[tuple[str, ...], tuple[Path, list[tuple[str, list[int]]]]] = {}

    def trace(self, argv: list[str]) -> tuple[Path, list[tuple[str, list[int]]]]:
        """The run's trace file, and its verifies in order (request, emitted ids)."""
        key = tuple(argv)
        if key not in self.cache:
            result = run(options_of(parser().parse_args(argv)), 3)
            path = self.folder / f"run{len(self.cache)}.log"
            path.write_text("".join(line + "\n" for line in result.lines))
            self.cache[key] = (path, [(r.req, list(r.emit)) for r in result.records])
        return self.cache[key]


def arms_for(m: Mutation, spec: ComparisonSpec) -> tuple[ComparisonSpec, str, str]:
    """The comparison as judged, A's arm and B's arm (B carries the mutation): a paged-lane
    mutation goes into the paged arm, every other into the comparison's B."""
    if m.lane is Lane.PAGED and spec.arm_b != "paged":
        return replace(spec, arm_a=spec.arm_b, arm_b=spec.arm_a), spec.arm_b, spec.arm_a
    return spec, spec.arm_a, spec.arm_b


def judge(runs: Runs, m: Mutation, spec: ComparisonSpec, extra: tuple[str, ...],
          config: Config) -> tuple[VerdictKind, str | None]:
    judged, a, b = arms_for(m, spec)
    pa, _ = runs.trace([*SHIPPED, *ARMS[a], *extra])
    pb, _ = runs.trace([*SHIPPED, *ARMS[b], *extra, "--mutation", m.name])
    # what each capture's launch asked for (difftest.flow.roles): B is the mutated arm
    report = judge_planted(pa, pb, judged, config, (None, m.name))
    kind = report.verdict.kind
    named = None
    if kind is VerdictKind.DIFFER and report.arm_a.trace and report.arm_b.trace:
        found = classify(report.arm_a.trace, report.arm_b.trace).kind
        named = found.value if found else "logits-only"
    return kind, named


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", choices=[r.value for r in Runner], default=Runner.REFERENCE.value,
                    help="whose corpus records (default: the reference runner's)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per input (default 3)")
    ap.add_argument("--only", nargs="*", default=None, help="these mutations only")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = ap.parse_args()
    if args.seeds < 1:
        ap.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.runner != Runner.REFERENCE.value:
        rows = engine_recall(Runner(args.runner), tuple(range(args.seeds)), args.only)
    else:
        rows = reference_recall(tuple(range(args.seeds)), args.only)
    _summary(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def reference_recall(seeds: tuple[int, ...], only: list[str] | None) -> list[dict[str, object]]:
    """The reference runner's records through their shipped comparisons (see the docstring)."""
    config = load_config(ROOT / "configs" / "default.toml")
    chosen = [m for m in carried_by(Runner.REFERENCE) if only is None or m.name in only]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = Runs(Path(tmp))
        eos: dict[int, EosIds] = {}
        for m in chosen:
            spec = config.comparison(m.judged_by)
            shipped = Counter[str]()
            names = Counter[str]()
            for s in seeds:
                kind, named = judge(runs, m, spec, ("--seed", str(s)), config)
                shipped[kind.value] += 1
                if named:
                    names[named] += 1
            # a bug: the inputs aimed at the state it needs; a control: every kind of input
            classes = (m.needs or (CoverageClass.PAGE_BOUNDARY,) if not m.control
                       else tuple(CoverageClass))
            if needs_eos(classes) and not eos:  # ids each seed's run commits (the paged arm)
                eos = {s: eos_ids_of(runs.trace([*SHIPPED, *ARMS["paged"], "--seed", str(s)])[1])
                       for s in seeds}
            # each distinct argument list once (two classes may share an input)
            items = list({i.args: i for i in inputs_for(classes, seeds, eos)}.values())
            swept = Counter[str]()
            missed = []  # a bug's inputs not caught, a control's not agreed
            for item in items:
                kind, named = judge(runs, m, spec, item.args, config)
                swept[kind.value] += 1
                if named:
                    names[named] += 1
                if kind is not (VerdictKind.AGREE if m.control else VerdictKind.DIFFER):
                    missed.append(f"{item.label} ({item.cls.value}): {kind.value}")
            rows.append(_row(m, m.judged_by, shipped, swept, len(items), names, missed))
            print(_line(rows[-1]), flush=True)
    return rows


def _row(m: Mutation, comparison: str, shipped: Counter[str], swept: Counter[str], inputs: int,
         names: Counter[str], missed: list[str]) -> dict[str, object]:
    return {"mutation": m.name, "class": m.bug_class, "control": m.control,
            "expect": m.shows.value if m.shows else "agree", "comparison": comparison,
            "shipped": dict(shipped), "swept": dict(swept), "inputs": inputs,
            "named": dict(names), "missed": missed}


# The hf and mlx runners' generated inputs: windows the queries pass (prompts of 8+ ids and 16
# new ones put queries 8..24 positions past the first key), and each rotation of the drafted
# lengths 1..4 (verify widths 2..5).
WINDOWS = (2, 3, 4, 6, 8, 12)
ROTATIONS = ("1,2,3,4", "2,3,4,1", "3,4,1,2", "4,1,2,3")


def engine_inputs(m: Mutation) -> list[tuple[str, CoverageClass, tuple[str, ...]]]:
    """(label, class, runner arguments) of the inputs that reach the state `m` needs (a
    control, or a bug that needs none: every input)."""
    windows = [(f"window={w}", CoverageClass.WINDOW_EDGE, ("--sliding-window", str(w)))
               for w in WINDOWS]
    widths = [(f"draft_lens={r}", CoverageClass.VERIFY_WIDTHS, ("--draft-lens", r))
              for r in ROTATIONS]
    if m.control or not m.needs:
        return windows + widths
    return [*(windows if CoverageClass.WINDOW_EDGE in m.needs else []),
            *(widths if CoverageClass.VERIFY_WIDTHS in m.needs else [])]


class EngineRuns:
    """Runs of the hf or mlx runner's command line in this process (its trace lines as its
    stderr carries them, written to files), each once."""

    def __init__(self, runner: Runner, folder: Path) -> None:
        import importlib

        self.main = importlib.import_module(f"difftest.runners.{runner.value}.__main__").main
        self.base = (["--drafter", "assisted", "--attn", "sdpa", "--threads", "1"]
                     if runner is Runner.HF else ["--attn", "sdpa"])
        self.folder = folder
        self.cache: dict[tuple[str, ...], Path] = {}

    def trace(self, args: tuple[str, ...], mutation: str | None) -> Path:
        key = (*args, f"mutation={mutation}")
        if key not in self.cache:
            err, out = io.StringIO(), io.StringIO()
            saved = {k: os.environ.get(k) for k in (MUTATION_ENV, "VT_SPEC_TRACE")}
            os.environ["VT_SPEC_TRACE"] = "3"
            os.environ.pop(MUTATION_ENV, None)
            if mutation:
                os.environ[MUTATION_ENV] = mutation
            try:
                with redirect_stderr(err), redirect_stdout(out):
                    code = self.main([*self.base, *args])
            finally:
                for k, v in saved.items():
                    os.environ.pop(k, None)
                    if v is not None:
                        os.environ[k] = v
            if code != 0:
                raise SystemExit(f"{' '.join(key)}: exit {code}: {err.getvalue()[-500:]}")
            path = self.folder / f"run{len(self.cache)}.log"
            path.write_text(err.getvalue())
            self.cache[key] = path
        return self.cache[key]


def engine_recall(runner: Runner, seeds: tuple[int, ...], only: list[str] | None
                  ) -> list[dict[str, object]]:
    """Each record `runner` carries through its `rerun` comparison (see the docstring)."""
    config = load_config(ROOT / "difftest" / "configs" / f"{runner.value}.toml")
    rerun = config.comparison("rerun")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = EngineRuns(runner, Path(tmp))
        for m in carried_by(runner):
            if only is not None and m.name not in only:
                continue
            tolerance = (m.judged_by if m.control and m.judged_by in config.comparisons
                         else None)
            shipped, swept, names = Counter[str](), Counter[str](), Counter[str]()
            missed: list[str] = []
            inputs = [("default", None, ())] + [(label, cls, args) for label, cls, args
                                               in engine_inputs(m)]
            for s in seeds:
                for label, cls, extra in inputs:
                    args = ("--seed", str(s), *extra)
                    report = judge_planted(runs.trace(args, None), runs.trace(args, m.name),
                                           rerun, config, (None, m.name), tolerance)
                    kind = report.verdict.kind
                    (shipped if cls is None else swept)[kind.value] += 1
                    if kind is VerdictKind.DIFFER and report.arm_a.trace and report.arm_b.trace:
                        found = classify(report.arm_a.trace, report.arm_b.trace).kind
                        names[found.value if found else "logits-only"] += 1
                    if cls is not None and kind is not (VerdictKind.AGREE if m.control
                                                        else VerdictKind.DIFFER):
                        missed.append(f"seed {s} {label} ({cls.value}): {kind.value}")
            rows.append(_row(m, tolerance or rerun.name, shipped, swept,
                             len(seeds) * (len(inputs) - 1), names, missed))
            print(_line(rows[-1]), flush=True)
    return rows




def _line(r: dict[str, object]) -> str:
    sh, sw, missed = r["shipped"], r["swept"], r["missed"]
    assert isinstance(sh, dict) and isinstance(sw, dict) and isinstance(missed, list)
    return (f"{r['mutation']:28s} shipped: differ {sh.get('differ', 0)} uninf "
            f"{sh.get('uninformative', 0) + sh.get('inert', 0)} agree {sh.get('agree', 0)} | "
            f"sweep: differ {sw.get('differ', 0)}/{r['inputs']} uninf "
            f"{sw.get('uninformative', 0) + sw.get('inert', 0)} agree {sw.get('agree', 0)} | "
            f"expect {r['expect']}, named {r['named']}"
            + "".join(f"\n    missed: {x}" for x in missed))


def _summary(rows: list[dict[str, object]]) -> None:
    bugs = [r for r in rows if not r["control"]]
    controls = [r for r in rows if r["control"]]

    def n(r: dict[str, object], part: str, kind: str) -> int:
        d = r[part]
        assert isinstance(d, dict)
        return int(d.get(kind, 0))

    print()
    print("| mutation | class | shipped inputs: caught / uninformative / agreed | sweep: caught "
          "(controls: agreed) / inputs | named as |")
    print("|---|---|---|---|---|")
    for r in rows:
        sh = (f"{n(r, 'shipped', 'differ')} / "
              f"{n(r, 'shipped', 'uninformative') + n(r, 'shipped', 'inert')} / "
              f"{n(r, 'shipped', 'agree')}")
        named = r["named"]
        assert isinstance(named, dict)
        shown = ", ".join(f"{k} {v}" for k, v in sorted(named.items())) or "-"
        swept = n(r, "swept", "agree" if r["control"] else "differ")
        print(f"| `{r['mutation']}` | {r['class']} | {sh} | {swept} / {r['inputs']} | {shown} |")
    caught = sum(n(r, "swept", "differ") for r in bugs)
    total = sum(int(str(r["inputs"])) for r in bugs)
    false_red = sum(n(r, p, "differ") for r in controls for p in ("shipped", "swept"))
    agreed = sum(n(r, p, "agree") for r in controls for p in ("shipped", "swept"))
    runs = sum(int(str(r["inputs"])) + sum(n(r, "shipped", k.value) for k in VerdictKind)
               for r in controls)
    missed_unreached = sum(n(r, "shipped", "agree") for r in bugs)
    print()
    uninf = sum(n(r, p, k) for r in controls for p in ("shipped", "swept")
                for k in ("uninformative", "inert"))
    print(f"sweep: {caught}/{total} mutated inputs caught; controls: {agreed}/{runs} AGREE, "
          f"{uninf} UNINFORMATIVE (the comparison's own states not reached on that input), "
          f"{false_red} false red(s); "
          f"shipped inputs: {missed_unreached} AGREE on a bug")


if __name__ == "__main__":
    sys.exit(main())
