"""What the logit instrument could see, in numbers and in the sentences a report shows: its
resolution, its tolerance and noise floor, its blind radius beside the token instrument's, and
the rows it could not judge.

A blind radius is a promise: the largest change that could pass. For logits it is the tolerance's
reach (`atol + rtol * max|b|`), raised to the A/A floor and then to the noise band (NOISE_BAND
times that) where a floor decides, and widened by both arms' printed quanta wherever the print
is not lossless (a value is only known to half a quantum, so a printed difference can fall short
of the true one by a whole quantum of the coarser arm, twice); bitwise it is the resolution. For
tokens it is half the smallest top-1/top-2 margin of the compared rows (no smaller change moves a
drafted token), raised to `near_tie` (a flip between margins below it passes as a near-tie) and,
under a floor, to the noise band (smaller flips are left to the flip test).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftest.analysis.compare import Comparison, LogitFindings
from difftest.numerics.noise import NOISE_BAND, FlipRule
from difftest.numerics.resolution import lossless, wide


@dataclass(frozen=True)
class BlindRadius:
    """How large a wrong change must be before each instrument notices it (None: unknown or
    the instrument is off)."""

    tokens: float | None  # max(smallest compared margin / 2, near_tie, noise band)
    logits: float | None  # tolerance reach or noise band, widened by the print; or resolution
    logit_rule: str  # what decided: tolerance, noise band, resolution (+ print), or ""
    logit_count: int = 1  # how many values must move past it (one: the radius is a promise)
    token_rule: str = "smallest compared margin / 2"

    def to_json(self) -> dict[str, object]:
        return {"tokens": self.tokens, "logits": self.logits,
                "logits_from": self.logit_rule or None, "logit_values_needed": self.logit_count,
                "tokens_from": self.token_rule or None}

    def sentence(self) -> str:
        tok = ("unknown (no margins traced)" if self.tokens is None
               else f"{self.tokens:.4g} ({self.token_rule})")
        if self.logits is None:
            lg = "n/a (no logits compared)"
        else:
            lg = f"{self.logits:.3g} (its {self.logit_rule})"
            if self.logit_count > 1:
                lg += f" in at least {self.logit_count} values"
        return (f"blind radius: tokens {tok}, logits {lg}: a wrong change smaller than these "
                "goes unseen by that instrument")


def _token_radius(cmp: Comparison) -> tuple[float | None, str]:
    r = cmp.rows
    rows = r.compared
    margins = np.concatenate([r.margin_a[rows], r.margin_b[rows]])
    margins = margins[np.isfinite(margins)]
    if not margins.size:
        return None, ""
    candidates = [(float(margins.min()) / 2, "smallest compared margin / 2")]
    if cmp.rules.near_tie is not None:
        candidates.append((cmp.rules.near_tie, "near_tie"))
    else:  # a flip between margins below a row's derived bound passes
        ties = cmp.row_near_tie()[rows]
        ties = ties[np.isfinite(ties)]
        if ties.size:
            candidates.append((float(ties.max()), "largest derived near_tie, 2 x the row's "
                                                  "tolerance"))
    lg = cmp.logits
    if lg is not None and lg.flips is not None and lg.flips.rule is FlipRule.EXACT_TEST:
        floor = lg.floor.floor if lg.floor is not None else 0.0
        candidates.append((NOISE_BAND * floor, f"noise band, {NOISE_BAND:g} x the A/A floor"))
    return max(candidates, key=lambda c: c[0])


def blind_radius(cmp: Comparison) -> BlindRadius:
    tokens, token_rule = _token_radius(cmp)
    lg = cmp.logits
    if lg is None or lg.not_compared is not None or not cmp.logit_rows_compared:
        return BlindRadius(tokens, None, "", token_rule=token_rule)
    tol = cmp.tolerance
    quantum = lg.resolution or 0.0
    if tol.bitwise:  # any printed difference counts: blind below one quantum only
        return BlindRadius(tokens, quantum, "resolution", token_rule=token_rule)
    top = lg.max_abs_value or 0.0
    value, rule = max([(cmp.rules.atol + cmp.rules.rtol * top, "tolerance"), (tol.floor, "noise floor")],
                      key=lambda c: c[0])
    if lg.excess is not None and lg.excess.rule is FlipRule.EXACT_TEST and tol.floor > 0:
        value, rule = NOISE_BAND * value, f"noise band, {NOISE_BAND:g} x its {rule}"
    if quantum > value:  # equal prints hide up to a quantum
        value, rule = quantum, "resolution"
    if lg.rows_unresolved and quantum:
        # every other row printed a difference of 0, certainly within the bound, or counted;
        # an unresolved one may hide up to a quantum of each arm beyond the bound
        value, rule = value + 2 * quantum, f"{rule}, widened by two printed quanta"
    return BlindRadius(tokens, value, rule, token_rule=token_rule)


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
    out += _floor_reasons(cmp, lg)
    out += _flip_reasons(cmp, lg)
    if cmp.logit_rows_compared:
        out.append(blind_radius(cmp).sentence())
    return out


def _floor_reasons(cmp: Comparison, lg: LogitFindings) -> list[str]:
    """What A's measured noise floor made of the logit values: the floor itself, an excess of
    differences over it, and the rows beyond the noise band that count whatever the test says."""
    out: list[str] = []
    if lg.floor is not None:
        out.append(_floor_reason(cmp, lg))
    if lg.excess is not None and lg.excess.exceed:
        out.append(lg.excess.reason())
    if lg.rows_beyond_band:
        out.append(f"{lg.rows_beyond_band} logit row(s) differ beyond the noise band: counted "
                   "whatever the count test says")
    return out


def _flip_reasons(cmp: Comparison, lg: LogitFindings) -> list[str]:
    """What the flip test made of the hard flips (the top token changing): its result, the
    flips counted beyond the noise band, and those judged as noise."""
    out: list[str] = []
    if lg.flips is not None:
        if lg.flips.rule is FlipRule.EXACT_TEST:
            out.append(lg.flips.reason())
        elif lg.flips.flips_b:
            out.append(lg.flips.reason())
    if lg.flips_beyond_band:
        out.append(f"{lg.flips_beyond_band} hard flip(s) whose margins say the logits moved "
                   f"by more than the noise band: counted whatever the flip test says")
    if cmp.rows_noise_flip:
        out.append(f"{cmp.rows_noise_flip} hard flip(s) judged as noise (`noise-flip` rows): "
                   "within the noise band, and not significantly more often than A's reruns")
    return out


def _resolution_reasons(cmp: Comparison, lg: LogitFindings, names: tuple[str, str]
                        ) -> list[str]:
    """What the printed digits let the logit instrument see: the resolution against the
    tolerance, then the rows it could not judge whole."""
    out: list[str] = []
    if lg.resolution is not None and lg.digits is not None:
        out += _printed_digits_reasons(cmp, lg, names)
    return out + _unjudged_row_reasons(lg)


def _printed_digits_reasons(cmp: Comparison, lg: LogitFindings, names: tuple[str, str]
                            ) -> list[str]:
    """Where the printed resolution, not the engines, bounds what agreement means: a wider
    engine's values rounded, bitwise asked at fewer digits than bit identity needs, a
    tolerance finer than the resolution."""
    out: list[str] = []
    tol = cmp.tolerance
    digits, quantum = lg.digits, lg.resolution
    assert digits is not None and quantum is not None
    coarse = max(((lg.resolution_a, names[0]), (lg.resolution_b, names[1])),
                 key=lambda x: x[0].quantum or 0.0)
    for res, name in ((lg.resolution_a, names[0]), (lg.resolution_b, names[1])):
        if wide(res.digits):
            out.append(f"{name} prints values that are not float32 (a wider engine) with "
                       f"{res.digits} significant digits: they are rounded to the printed "
                       f"resolution {_q(res.quantum)}, not compared bit for bit (print "
                       "%.17g for that)")
    if tol.bitwise and not lossless(digits):
        out.append(f"bitwise at {digits} significant digits: agreement means equal to within "
                   f"the printed resolution {_q(quantum)}, not bit-identical (print logits "
                   f"with %.9g for bit-identity)")
    if tol.finer_than(quantum, digits):
        out.append(f"the tolerance ({tol.describe()}) is finer than the logit resolution "
                   f"{_q(quantum)} of {coarse[1]} ({coarse[0].digits} significant digits): "
                   f"differences below {_q(quantum)} cannot be seen; print 9 significant "
                   f"digits (%.9g) or use a tolerance of at least {_q(quantum)}")
    return out


def _unjudged_row_reasons(lg: LogitFindings) -> list[str]:
    """The logit rows the instrument could not judge whole (unresolved, one quantum apart,
    disjoint top-k lists, non-finite values), each counted and said how it was treated."""
    out: list[str] = []
    quantum = lg.resolution
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
    if lg.rows_nonfinite_one:
        out.append(f"{lg.rows_nonfinite_one} logit row(s) hold a non-finite value (nan or inf) in "
                   "one arm where the other holds another value: counted as logit differences "
                   "under every tolerance and floor")
    if lg.values_nonfinite_both:
        out.append(f"{lg.values_nonfinite_both} logit value(s) are the same non-finite value "
                   "(nan or inf) in both arms: equal, but no logit a comparison can measure")
    return out


def _floor_reason(cmp: Comparison, lg: LogitFindings) -> str:
    floor = lg.floor
    assert floor is not None
    if floor.zero:
        return (f"{floor.summary()}: the comparison is judged as strictly as without a floor")
    stats = lg.stats
    b_vs_a = "" if stats is None or stats.max_abs is None else \
        f"; B vs A max |diff| {stats.max_abs:.3g}"
    return (f"{floor.summary()}{b_vs_a}: a logit difference counts above {NOISE_BAND:g} x "
            f"max(atol + rtol*|b|, {floor.floor:.3g}) (the noise band: the multiplier "
            f"{NOISE_BAND:g} no rerun of A was measured to reach), and between the bound and the "
            "band only when B shows significantly more of them than its reruns would")


def numbers(cmp: Comparison | None) -> dict[str, object]:
    """The logit instrument's figures for the JSON report: numbers or null, never strings."""
    lg = cmp.logits if cmp is not None else None
    empty: dict[str, object] = {
        "rtol": cmp.rules.rtol if cmp is not None else 0.0, "logit_stats": None,
        "logit_rows_disjoint": 0, "logit_rows_unresolved": 0, "logit_rows_one_quantum": 0,
        "logit_rows_within_noise": 0, "logits_not_compared": None, "noise_floor": None,
        "flip_test": None, "logit_excess_test": None,
        "logit_rows_nonfinite_one": 0, "logit_values_nonfinite_both": 0,
        "logit_rows_beyond_band": 0, "flips_beyond_band": 0,
        "rows_noise_flip": cmp.rows_noise_flip if cmp is not None else 0,
        "noise_band_multiplier": NOISE_BAND,
        "blind_radius": blind_radius(cmp).to_json() if cmp is not None else None}
    if lg is None:
        return empty
    return empty | {
        "logit_stats": lg.stats.to_json() if lg.stats is not None else None,
        "logit_rows_disjoint": lg.rows_disjoint, "logit_rows_unresolved": lg.rows_unresolved,
        "logit_rows_one_quantum": lg.rows_one_quantum,
        "logit_rows_within_noise": lg.rows_within_noise,
        "logit_rows_nonfinite_one": lg.rows_nonfinite_one,
        "logit_values_nonfinite_both": lg.values_nonfinite_both,
        "logit_rows_beyond_band": lg.rows_beyond_band, "flips_beyond_band": lg.flips_beyond_band,
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
