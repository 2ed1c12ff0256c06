"""How many of the bug corpus's classes difftest catches: every mutation of the reference
runner's corpus (docs/bugs.md) through the shipped comparison it belongs to, first on the
shipped inputs (what the default `check` sees), then on the sweep's generated inputs for the
state it lives in (difftest.flow.sweep); the controls through both, where none may differ (on
an input that did not reach the comparison's own states a control is UNINFORMATIVE, as any
agreement there is).

Arms run in this process (the runner's trace lines, exactly as its stderr carries them, written
to files) and are judged by the comparison's own judge (`judge_traces`: toggle, coverage,
audit, tokens, logits). A mutation living in the paged lane is planted in the paged arm.

    python scripts/bug_recall.py [--seeds 3] [--only NAME ...] [--json FILE]

Prints per mutation: on the shipped inputs how many runs were caught (DIFFER), uninformative
(UNINF: the state was not reached, or the mutation never acted) and agreed (AGREE: a miss); on
the sweep's inputs (those generated for the state the mutation needs, under each seed; for a
control, every class's) how many were caught, uninformative and agreed, each input that was
not caught (a control's: not agreed); and the kind each DIFFER was named.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest.analysis.bugclass import classify  # noqa: E402
from difftest.config import ComparisonSpec, Config, load_config  # noqa: E402
from difftest.core.corpus import CORPUS, CoverageClass, Lane, Mutation  # noqa: E402
from difftest.core.kinds import VerdictKind  # noqa: E402
from difftest.flow.evaluate import judge_traces  # noqa: E402
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
    mutated = config.arm(b).with_changes(env={**config.arm(b).env, "DIFFTEST_MUTATION": m.name})
    report = judge_traces(pa, pb, judged, arms={a: config.arm(a), b: mutated})
    kind = report.verdict.kind
    named = None
    if kind is VerdictKind.DIFFER and report.arm_a.trace and report.arm_b.trace:
        found = classify(report.arm_a.trace, report.arm_b.trace).kind
        named = found.value if found else "logits-only"
    return kind, named


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per input (default 3)")
    ap.add_argument("--only", nargs="*", default=None, help="these mutations only")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = ap.parse_args()
    config = load_config(ROOT / "configs" / "default.toml")
    seeds = tuple(range(args.seeds))
    chosen = [m for m in CORPUS if args.only is None or m.name in args.only]
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
            rows.append({"mutation": m.name, "class": m.bug_class, "control": m.control,
                         "expect": m.shows.value if m.shows else "agree",
                         "comparison": m.judged_by, "shipped": dict(shipped),
                         "swept": dict(swept), "inputs": len(items), "named": dict(names),
                         "missed": missed})
            print(_line(rows[-1]), flush=True)
    _summary(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


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
