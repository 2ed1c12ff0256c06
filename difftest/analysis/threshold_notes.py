"""The sentences a report gives on where its thresholds came from: the derived near-tie rule
that applied, and what a zero noise floor means (a deterministic arm, judged bitwise)."""

from __future__ import annotations

from difftest.analysis.compare import Comparison
from difftest.numerics.noise import NoiseFloor
from difftest.numerics.tolerance import derived_rule_text


ZERO_FLOOR_ADVICE = ("to judge a float reordering against measured thresholds instead, run "
                     "`difftest calibrate -c NAME` (docs/thresholds.md)")


def zero_floor_text(arm: str, runs: int) -> str:
    """What a measured zero floor means for the comparison, and what to do about it."""
    return (f"noise floor of {arm} is zero over {runs} runs: the arm is deterministic (its "
            "reruns are bit-identical), so the floor raises no threshold and a reordering of "
            f"floats (another kernel, thread count or attention path) will be judged bitwise; "
            + ZERO_FLOOR_ADVICE)


def threshold_notes(cmp: Comparison, floor: NoiseFloor | None) -> list[str]:
    """The report's sentences on the near-tie rule that applied and on a zero noise floor."""
    notes = []
    tol = cmp.tolerance
    if cmp.near_tie_derived and not tol.bitwise:
        admitted = ("no flip was a near-tie" if cmp.near_tie_admitted is None else
                    f"largest margin admitted {cmp.near_tie_admitted:.4g}")
        notes.append(f"{derived_rule_text(tol)}; {admitted}")
    if floor is not None and floor.zero:
        notes.append(zero_floor_text(floor.arm, floor.runs))
    return notes
