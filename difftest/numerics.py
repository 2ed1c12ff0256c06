"""What the logit instrument could see, in numbers and in the sentences a report shows: its
resolution, its tolerance and noise floor, its blind radius beside the token instrument's, and
the rows it could not judge.

The logit blind radius is the smallest logit perturbation the logit comparison could notice: the
largest of the tolerance's reach (`atol + rtol * max|b|`), the A/A noise floor and the printed
resolution. The token blind radius is half the smallest top-1/top-2 margin of the compared rows:
no perturbation below it can move a drafted token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftest.compare import Comparison, LogitFindings
from difftest.noise import FlipRule
from difftest.resolution import LOSSLESS_DIGITS


@dataclass(frozen=True)
class BlindRadius:
    """How large a wrong change must be before each instrument notices it (None: unknown or
    the instrument is off)."""

    tokens: float | None  # smallest compared margin / 2
    logits: float | None  # max(tolerance reach, noise floor, resolution)
    logit_rule: str  # which of the three decided: tolerance, floor, resolution, or ""
    logit_count: int = 1  # how many values must move past it (more than 1 under a noise floor)

    def to_json(self) -> dict[str, object]:
        return {"tokens": self.tokens, "logits": self.logits,
                "logits_from": self.logit_rule or None, "logit_values_needed": self.logit_count}

    def sentence(self) -> str:
        tok = "unknown (no margins traced)" if self.tokens is None else f"{self.tokens:.4g}"
        if self.logits is None:
            lg = "n/a (no logits compared)"
        else:
            lg = f"{self.logits:.3g} (its {self.logit_rule})"
            if self.logit_count > 1:
                lg += f" in at least {self.logit_count} values"
        return (f"blind radius: tokens {tok} (smallest compared margin / 2), logits {lg}: "
                "a wrong change smaller than these goes unseen by that instrument")


def blind_radius(cmp: Comparison) -> BlindRadius:
    r = cmp.rows
    rows = r.compared
    margins = np.concatenate([r.margin_a[rows], r.margin_b[rows]])
    margins = margins[np.isfinite(margins)]
    tokens = float(margins.min()) / 2 if margins.size else None
    lg = cmp.logits
    if lg is None or lg.not_compared is not None or not cmp.logit_rows_compared:
        return BlindRadius(tokens, None, "")
    tol = cmp.tolerance
    top = lg.max_abs_value or 0.0
    candidates = [(cmp.atol + cmp.rtol * top, "tolerance"),
                  (tol.floor, "noise floor"),
                  (lg.resolution or 0.0, "resolution")]
    value, rule = max(candidates, key=lambda c: c[0])
    needed = lg.excess.needed if lg.excess is not None else 1
    return BlindRadius(tokens, value, rule, needed)


def _q(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.0e}"


def logit_reasons(cmp: Comparison, names: tuple[str, str]) -> list[str]:
    """Sentences on the logit instrument's own limits: resolution, tolerance, floor, the rows it
    could not judge, and the flip test, each naming what to do where there is something to do."""
    lg = cmp.logits
    if lg is None:
        return []
    if lg.not_compared is not None:
        out = [lg.not_compared.sentence(names)]
    else:
        out = _resolution_reasons(cmp, lg, names)
    if lg.floor is not None:
        out.append(_floor_reason(cmp, lg))
    if lg.excess is not None and lg.excess.exceed:
        out.append(lg.excess.reason())
    if lg.flips is not None:
        if lg.flips.rule is FlipRule.EXACT_TEST:
            out.append(lg.flips.reason())
        elif lg.flips.flips_b:
            out.append(lg.flips.reason())
    if cmp.logit_rows_compared:
        out.append(blind_radius(cmp).sentence())
    return out


def _resolution_reasons(cmp: Comparison, lg: LogitFindings, names: tuple[str, str]
                        ) -> list[str]:
    out: list[str] = []
    tol = cmp.tolerance
    digits, quantum = lg.digits, lg.resolution
    if quantum is not None and digits is not None:
        coarse = max(((lg.resolution_a, names[0]), (lg.resolution_b, names[1])),
                     key=lambda x: x[0].quantum or 0.0)
        if tol.bitwise and digits < LOSSLESS_DIGITS:
            out.append(f"bitwise at {digits} significant digits: agreement means equal to within "
                       f"the printed resolution {_q(quantum)}, not bit-identical (print logits "
                       f"with %.9g for bit-identity)")
        if tol.finer_than(quantum, digits):
            out.append(f"the tolerance ({tol.describe()}) is finer than the logit resolution "
                       f"{_q(quantum)} of {coarse[1]} ({coarse[0].digits} significant digits): "
                       f"differences below {_q(quantum)} cannot be seen; print 9 significant "
                       f"digits (%.9g) or use a tolerance of at least {_q(quantum)}")
    if lg.rows_unresolved:
        out.append(f"{lg.rows_unresolved} logit row(s) differ by an amount the printed resolution "
                   f"{_q(quantum)} cannot place above or below the tolerance: not counted as "
                   "differences, not shown to agree either (print %.9g to decide)")
    if lg.rows_one_quantum:
        out.append(f"{lg.rows_one_quantum} logit row(s) differ by one printed quantum only (the "
                   f"last printed digit, at most {_q(quantum)}): real differences, of a true "
                   "size anywhere between 0 and two quanta")
    if lg.rows_disjoint:
        out.append(f"{lg.rows_disjoint} logit row(s) whose top-k lists share no id: counted as "
                   "logit differences, with no size (their values cannot be paired)")
    return out


def _floor_reason(cmp: Comparison, lg: LogitFindings) -> str:
    floor = lg.floor
    assert floor is not None
    if floor.zero:
        return (f"{floor.summary()}: the comparison is judged as strictly as without a floor")
    stats = lg.stats
    b_vs_a = "" if stats is None or stats.max_abs is None else \
        f"; B vs A max |diff| {stats.max_abs:.3g}"
    return (f"{floor.summary()}{b_vs_a}: a logit difference counts only above "
            f"max(atol + rtol*|b|, {floor.floor:.3g}), and only when B shows significantly more "
            "of them than its reruns would")


def numbers(cmp: Comparison | None) -> dict[str, object]:
    """The logit instrument's figures for the JSON report: numbers or null, never strings."""
    lg = cmp.logits if cmp is not None else None
    empty: dict[str, object] = {
        "rtol": cmp.rtol if cmp is not None else 0.0, "logit_stats": None,
        "logit_rows_disjoint": 0, "logit_rows_unresolved": 0, "logit_rows_one_quantum": 0,
        "logit_rows_within_noise": 0, "logits_not_compared": None, "noise_floor": None,
        "flip_test": None, "logit_excess_test": None,
        "blind_radius": blind_radius(cmp).to_json() if cmp is not None else None}
    if lg is None:
        return empty
    return empty | {
        "logit_stats": lg.stats.to_json() if lg.stats is not None else None,
        "logit_rows_disjoint": lg.rows_disjoint, "logit_rows_unresolved": lg.rows_unresolved,
        "logit_rows_one_quantum": lg.rows_one_quantum,
        "logit_rows_within_noise": lg.rows_within_noise,
        "logits_not_compared": None if lg.not_compared is None else
        {"traced_by": lg.not_compared.traced_by, "level_a": lg.not_compared.level_a,
         "level_b": lg.not_compared.level_b},
        "noise_floor": lg.floor.to_json() if lg.floor is not None else None,
        "flip_test": lg.flips.to_json() if lg.flips is not None else None,
        "logit_excess_test": lg.excess.to_json() if lg.excess is not None else None,
    }


def arm_resolutions(cmp: Comparison | None) -> tuple[dict[str, object], dict[str, object]]:
    """`logit_resolution` (the coarsest quantum compared) and `logit_digits` of each arm."""
    lg = cmp.logits if cmp is not None else None
    if lg is None:
        none: dict[str, object] = {"logit_resolution": None, "logit_digits": None}
        return none, dict(none)
    return tuple({"logit_resolution": r.quantum, "logit_digits": r.digits}  # type: ignore[return-value]
                 for r in (lg.resolution_a, lg.resolution_b))


def stats_line(cmp: Comparison | None) -> str | None:
    """The one line of logit statistics the table and markdown show (None: no logits)."""
    lg = cmp.logits if cmp is not None else None
    if lg is None or lg.stats is None:
        return None
    line = lg.stats.summary()
    if lg.floor is not None:
        line += f"; A/A floor {lg.floor.floor:.3g} ({lg.floor.runs} runs"
        line += ", bit-identical)" if lg.floor.zero and lg.floor.bit_identical else ")"
    return line
