"""Small synthetic traces for judging tests: steps of drafted blocks with their block logits,
printed as a producer would print them, and the library path that judges two of them (parse,
audit, compare, verdict) without a subprocess."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from difftest.analysis.audit import AuditThresholds, audit_trace
from difftest.config import ComparisonSpec
from difftest.core.kinds import DraftingKind, Expect
from difftest.flow.evaluate import ArmOutcome, ComparisonReport, evaluate
from difftest.trace import parse_lines

Top = tuple[tuple[int, float], ...]  # (id, logit), highest first


@dataclass(frozen=True)
class Step:
    """One verify step of one request: its block rows' top lists (row j's top-1 id is the
    drafted token), how many drafts were accepted, and the bonus token."""

    req: str
    pos: int
    rows: tuple[Top, ...]
    acc: int = 0
    bonus: int = 7

    @property
    def draft(self) -> list[int]:
        return [top[0][0] for top in self.rows]

    @property
    def emit(self) -> list[int]:
        return [*self.draft[:self.acc], self.bonus]


def value_text(x: float, digits: int) -> str:
    """A logit as `%.<digits>g` prints it (nan, inf and -inf as C spells them)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def step_lines(step: Step, digits: int = 9, level: int = 3) -> list[str]:
    emit = step.emit
    out = [f"[SPECTRACE] req={step.req} pos={step.pos} k={len(step.rows)} ns={len(emit)} "
           f"acc={len(emit) - 1} draft=[ {''.join(f'{i} ' for i in step.draft)}] "
           f"emit=[ {''.join(f'{i} ' for i in emit)}]"]
    if level >= 3:
        for j, top in enumerate(step.rows, start=1):
            cells = " ".join(f"{i}:{value_text(v, digits)}" for i, v in top)
            out.append(f"[spec-logits] req={step.req} pos={step.pos} row={j} top=[ {cells} ]")
    return out


def trace_lines(steps: Sequence[Step], digits: int = 9, level: int = 3,
                drafting: DraftingKind | None = None) -> list[str]:
    head = [f"[spec-drafting] kind={drafting.value}"] if drafting is not None else []
    return head + [line for s in steps for line in step_lines(s, digits, level)]


def chain(req: str, blocks: Sequence[tuple[Top, ...]], acc: Sequence[int] | None = None,
          start: int = 0, bonus: int = 7) -> list[Step]:
    """Consecutive steps of one request: each step's pos follows the last one's emitted count."""
    steps, pos = [], start
    for i, rows in enumerate(blocks):
        a = acc[i] if acc is not None else 0
        steps.append(Step(req, pos, tuple(rows), a, bonus))
        pos += a + 1
    return steps


def shifted(step: Step, row: int, delta: float, entry: int = 0) -> Step:
    """The step with one logit of one row (0-based) moved by `delta` (the top list is kept in
    order by the caller's choice of delta)."""
    rows = list(step.rows)
    top = list(rows[row])
    i, v = top[entry]
    top[entry] = (i, v + delta)
    rows[row] = tuple(top)
    return replace(step, rows=tuple(rows))


def outcome(name: str, lines: Sequence[str], th: AuditThresholds) -> ArmOutcome:
    trace = parse_lines(list(lines), path=name)
    return ArmOutcome(name, Path(name), None, trace, audit_trace(trace, th))


def judged(a: Sequence[str], b: Sequence[str], *, reruns: Sequence[Sequence[str]] = (),
           atol: float = 0.0, rtol: float = 0.0, near_tie: float | None = 0.0,
           drafting: DraftingKind | None = None, expect: Expect = Expect.SAME
           ) -> ComparisonReport:
    """Judge arm B against arm A (and A's reruns, for a noise floor) as `compare` does."""
    th = AuditThresholds()
    spec = ComparisonSpec(name="t", arm_a="a", arm_b="b", atol=atol, rtol=rtol,
                          near_tie=near_tie, drafting=drafting, expect=expect,
                          noise_runs=len(reruns) + 1 if reruns else 0)
    outs = [outcome(f"a#run{i + 2}", r, th) for i, r in enumerate(reruns)]
    return evaluate(spec, outcome("a", a, th), outcome("b", b, th), th, reruns_of_a=outs)


def f32(x: float) -> float:
    """The float32 nearest x, as a float (what a float32 engine holds and %.9g names)."""
    import numpy as np

    return float(np.float32(x))


def blocks(n: int, k: int, seed: int = 0, *, width: int = 4, low: float = 8.0,
           margin: float = 0.25) -> list[tuple[Top, ...]]:
    """n blocks of k rows: distinct ids per row, float32 values highest first, every margin at
    least `margin`, top-1 logits spread over [low, low + 4)."""
    import random

    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        rows = []
        for _ in range(k):
            ids = rnd.sample(range(100, 400), width)
            v = low + rnd.random() * 4
            top = [(ids[0], f32(v))]
            for i in ids[1:]:
                v -= margin + rnd.random()
                top.append((i, f32(v)))
            rows.append(tuple(top))
        out.append(tuple(rows))
    return out
