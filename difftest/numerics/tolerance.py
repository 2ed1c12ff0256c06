"""When two traced logits count as different: numpy's `isclose` rule, the A/A noise floor, and the
resolution of the printed values, in one place.

A value `a` of arm A is close to `b` of arm B when `|a - b| <= max(atol + rtol * |b|, floor)`
(numpy's `isclose(a, b, rtol, atol)`, raised to the noise floor when one was measured). With
every tolerance zero the comparison is bitwise: any printed difference counts, and so does a
changed top list.

Printed values are rounded: each is within half a quantum of what the engine held, so a printed
difference `d` says the true one lies in `d ± (qa + qb) / 2`. Differences are first snapped to
the finer quantum's grid (the decimal subtraction `2.87758 - 2.87757` is 1.0000000000065e-05 in
float64, a rounding artefact of the check itself, not of the engine). Under a tolerance, a value
counts as different only when the whole interval lies above the bound; when the interval
straddles the bound the row is `unresolved`: reported, never counted as a difference, never
silently passed. Bitwise, any printed difference is a real one (equal values print equally).
At 9 or more significant digits the print names each float32 exactly: values are taken as those
float32s and there is no rounding interval at all.

Top lists that share no id have no value to compare: such a row is `disjoint`, a kind of its
own, counted as a logit difference but never given a size (no infinite difference).

Non-finite values are values: a nan or an infinity in one arm where the other holds a finite
value, or another non-finite value, is a difference under every tolerance and every floor (a
bound computed from a nan is nan, and no comparison with nan is true, so it is decided before any
bound is). The same non-finite value in both arms is equal, and counted apart so that a report
can name it.

Under a noise floor the bound has a size: values certainly above `NOISE_BAND` times it are
`beyond` the band and count whatever a count test says; only values between the bound and the
band are left to the count test of `difftest.numerics.noise`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftest.numerics.noise import NOISE_BAND
from difftest.numerics.resolution import lossless, snapped_difference, value_quanta, wide
from difftest.numerics.rows import row_all, row_any, row_count, row_max
from difftest.numerics.stats import PairedRows, match_ids


@dataclass(frozen=True)
class Tolerance:
    """How far two traced logits may be apart and still count as equal."""

    atol: float = 0.0
    rtol: float = 0.0
    floor: float = 0.0  # the A/A noise floor, when reruns of arm A were measured

    @property
    def bitwise(self) -> bool:
        return self.atol == 0.0 and self.rtol == 0.0 and self.floor == 0.0

    def bound(self, b: np.ndarray) -> np.ndarray:
        """The largest |a - b| still counted as equal, per reference value b. A bound past
        float64's range is infinite (nothing can differ, and the verdict says so): the honest
        value of a huge tolerance, so computed without an overflow warning."""
        with np.errstate(invalid="ignore", over="ignore"):
            bound: np.ndarray = np.maximum(self.atol + self.rtol * np.abs(b), self.floor)
        return bound

    def band(self, b: np.ndarray) -> np.ndarray:
        """The largest |a - b| a count test may still call noise: the bound times NOISE_BAND
        under a floor (without a floor there is no count test, and the band is the bound)."""
        bound = self.bound(b)
        if self.floor > 0:
            with np.errstate(over="ignore"):  # as in `bound`: past the range is infinite
                bound = bound * NOISE_BAND
        return bound

    def finer_than(self, quantum: float, digits: int) -> bool:
        """True when some value's bound is below its printed quantum: `atol` under the coarsest
        quantum and `rtol` under the relative quantum 10**(1 - digits)."""
        if self.bitwise:
            return False
        relative = 10.0 ** (1 - digits)
        return max(self.atol, self.floor) < quantum and self.rtol < relative

    def describe(self) -> str:
        parts = [f"atol {self.atol:g}"]
        if self.rtol:
            parts.append(f"rtol {self.rtol:g}")
        if self.floor:
            parts.append(f"floor {self.floor:.3g}")
        return ", ".join(parts)


@dataclass(frozen=True)
class RowDiffs:
    """Per paired row: the largest |a - b| over the shared ids (nan when there is none) and how
    the row was judged."""

    diff: np.ndarray  # float64; nan for disjoint rows
    differs: np.ndarray  # bool: a logit difference that counts (disjoint rows included)
    disjoint: np.ndarray  # bool: the top lists share no id
    unresolved: np.ndarray  # bool: a difference the printed resolution cannot decide
    one_quantum: np.ndarray  # bool: counted, but by no more than one quantum (bitwise only)
    # float64: the largest difference the print makes certain (`resolved_difference`; nan for
    # disjoint rows, inf for a value non-finite in one arm only)
    resolved: np.ndarray
    exceed: np.ndarray  # int: shared values certainly above the bound, per row
    values: np.ndarray  # int: shared values compared, per row
    # int: shared values certainly above the noise band, or non-finite in one arm only (they
    # count whatever a count test says)
    beyond: np.ndarray
    nonfinite_both: np.ndarray  # int: shared values non-finite and equal in both arms


def _exact(values: np.ndarray, digits: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The values as the engine held them, as far as the print allows, and their quanta.

    At 9 or more digits the text names one float32 exactly: its value is known, and so is any
    difference of two (float64 holds it exactly), so there is no rounding interval. With fewer
    digits each value is only known to half a quantum; unknown digits take the values as exact.
    """
    values = exact_values(values, digits)
    return values, value_quanta(values, digits)


def resolved_difference(d: np.ndarray, half: np.ndarray) -> np.ndarray:
    """The part of a printed difference `d` that is certain: the true one is at least
    `d - (qa + qb) / 2`. A value counts against a tolerance only when this is above the bound:
    the gate's rule, and the one `difftest calibrate` sizes its probes by."""
    out: np.ndarray = d - half
    return out


@dataclass(frozen=True)
class MatchedRows:
    """Paired rows as `judge_rows` reads them, both arms widened to one width: the values as
    the engines held them and their quanta (`_exact`), which of A's entries B's list holds and
    where (`match_ids`), B's value and quantum for each of A's entries, and the snapped
    difference of the two (`snapped_difference`). The statistics read the same arrays
    (`difftest.numerics.stats.StatsPass.add_matched`), so each is computed once."""

    ids_a: np.ndarray
    va: np.ndarray
    qa: np.ndarray
    ids_b: np.ndarray
    vb_own: np.ndarray  # B's values and quanta in its own order
    qb_own: np.ndarray
    shared: np.ndarray  # bool (n, K): A's entry is in B's list
    vb: np.ndarray  # B's value and quantum for each of A's entries (its first where absent)
    qb: np.ndarray
    d: np.ndarray  # the snapped |a - b| of each of A's entries (meaningful where shared)

    def __len__(self) -> int:
        return int(self.ids_a.shape[0])


def match_rows(pairs: PairedRows, digits_a: int | None, digits_b: int | None
               ) -> MatchedRows | None:
    """`pairs` matched and differenced as `judge_rows` judges them; None where there is nothing
    to match (no rows, or top lists of width 0)."""
    pairs = pairs.widened()
    ids_a, va, ids_b, vb_list = pairs.ids_a, pairs.vals_a, pairs.ids_b, pairs.vals_b
    n = len(pairs)
    if n == 0 or ids_a.shape[1] == 0:
        return None
    shared, where = match_ids(ids_a, ids_b)  # linear in the values, not K x K per row
    va, qa = _exact(va, digits_a)
    # B's values and quanta once, in its own order; paired with A's by gathering (elementwise,
    # so the same values as computing them after the gather)
    vb_own, qb_own = _exact(vb_list, digits_b)
    # B's entry `where[i, j]` of row i, as one index into the flattened rows (a gather of
    # single elements, cheaper than numpy's two-index fancy indexing)
    paired = np.arange(n)[:, None] * vb_own.shape[1] + where
    vb, qb = vb_own.ravel()[paired], qb_own.ravel()[paired]
    return MatchedRows(ids_a, va, qa, ids_b, vb_own, qb_own, shared, vb, qb,
                       snapped_difference(va, vb, qa, qb))


def judge_rows(pairs: PairedRows, tol: Tolerance, digits_a: int | None,
               digits_b: int | None) -> RowDiffs:
    """Judge each paired row under `tol`; `digits_*` are the arms' printed significant digits
    (None: unknown, the values are taken as exact)."""
    matched = match_rows(pairs, digits_a, digits_b)
    return judge_matched(matched, tol) if matched is not None else no_rows(len(pairs))


@dataclass(frozen=True)
class PlainRows:
    """The rows of paired rows whose two top lists are one list (`plain_rows`)."""

    rows: np.ndarray  # (n,) bool
    listed: np.ndarray  # (n, K) bool: the ids listed (>= 0), of every row
    nonzero: np.ndarray  # (n,) bool: a listed value is not 0 as the engine held it


_PLAIN_SMALLEST, _PLAIN_LARGEST = 1e-280, 1e300


def plain_rows(pairs: PairedRows, digits_a: int | None, digits_b: int | None
               ) -> PlainRows | None:
    """The rows whose two top lists are one list: the same ids and the same printed values
    (bit for bit) in both arms, at least one id listed and none twice, every listed value 0
    or of a size from 1e-280 to 1e300 and the same number as each arm's print holds it
    (`exact_values`). Each listed
    entry is then shared with itself and differs by +0.0, so such a row's judgement
    (`judge_plain`) and statistics (`StatsPass.add_split`) are known without matching it; most
    rows of a comparison that agrees are such rows. None where no row can be one (lists of
    other widths) or none is."""
    ids_a, va, ids_b, vb = pairs.ids_a, pairs.vals_a, pairs.ids_b, pairs.vals_b
    if ids_a.shape != ids_b.shape or ids_a.shape[1] == 0:
        return None
    va, vb = np.ascontiguousarray(va, dtype=np.float64), np.ascontiguousarray(vb, np.float64)
    same = row_all(ids_a == ids_b) & row_all(va.view(np.int64) == vb.view(np.int64))
    if not same.any():
        return None
    listed = ids_a >= 0
    held = np.ascontiguousarray(exact_values(va, digits_a))
    size = np.abs(held)
    # a value of a size where the general path's arithmetic is known to give the same numbers
    # (tests/numerics/test_plain_rows.py; near the doubles' ends its log-softmax overflows and
    # its quanta are subnormal): a row holding 1e-305 or +-1e308 is matched, as before
    fine = (size == 0) | ((size >= _PLAIN_SMALLEST) & (size <= _PLAIN_LARGEST))
    if digits_b != digits_a or wide(digits_b) != wide(digits_a):
        # printed otherwise: the same text must be the same number under both prints
        held_b = np.ascontiguousarray(exact_values(va, digits_b))
        fine &= held.view(np.int64) == held_b.view(np.int64)
    ordered = np.sort(ids_a, axis=1)
    twice = row_any((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0))
    rows = same & row_any(listed) & row_all(fine | ~listed) & ~twice
    return PlainRows(rows, listed, row_any(listed & (held != 0))) if rows.any() else None


def judge_plain(listed: np.ndarray) -> RowDiffs:
    """`judge_matched` of plain rows (`plain_rows`; `listed`, their listed ids): every listed
    value shared and equal, so nothing differs, is unresolved or non-finite, under a bitwise
    tolerance or not."""
    n = listed.shape[0]
    z = np.zeros(n, dtype=bool)
    zi = np.zeros(n, dtype=np.int64)
    return RowDiffs(np.zeros(n), z, z.copy(), z.copy(), z.copy(), np.zeros(n), zi,
                    row_count(listed), zi.copy(), zi.copy())


def joined_rows(plain: np.ndarray, of_plain: RowDiffs, of_rest: RowDiffs | None) -> RowDiffs:
    """One judgement of every row from the plain rows' (`plain`) and the other rows', in
    order."""
    if of_rest is None:
        return of_plain
    parts = {}
    for name in RowDiffs.__dataclass_fields__:
        here, there = getattr(of_plain, name), getattr(of_rest, name)
        out = np.empty(plain.size, dtype=np.result_type(here, there))
        out[plain] = here
        out[~plain] = there
        parts[name] = out
    return RowDiffs(**parts)


def no_rows(n: int) -> RowDiffs:
    """The judgement of `n` rows with nothing to match (top lists of width 0)."""
    z = np.zeros(n, dtype=bool)
    zi = np.zeros(n, dtype=np.int64)
    return RowDiffs(np.full(n, np.nan), z, z.copy(), z.copy(), z.copy(), np.full(n, np.nan),
                    zi, zi.copy(), zi.copy(), zi.copy())


def judge_matched(m: MatchedRows, tol: Tolerance) -> RowDiffs:
    """`judge_rows` of rows already matched (`match_rows`); `m` is left as it was."""
    ids_a, va, qa, ids_b, shared, vb, qb = m.ids_a, m.va, m.qa, m.ids_b, m.shared, m.vb, m.qb
    n = len(m)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(va) & np.isfinite(vb)
        # equal infinities are equal although inf - inf is nan; so are two nans
        same_nonfinite = ~finite & ((va == vb) | (np.isnan(va) & np.isnan(vb)))
        mismatch = shared & ~finite & ~same_nonfinite
        d = m.d.copy()  # the statistics read the snapped differences as they are
        d[same_nonfinite] = 0.0
        d[~finite & ~same_nonfinite] = np.inf  # as far apart as values get
    nonfinite_both = row_count(shared & same_nonfinite)
    half = (qa + qb) / 2
    row_diff = row_max(np.where(shared, d, 0.0))
    disjoint = ~row_any(shared)
    row_diff = np.where(disjoint, np.nan, row_diff)
    with np.errstate(invalid="ignore"):
        # a non-finite value has no quantum: its difference is 0 (the same) or inf (not)
        lower = np.where(finite, resolved_difference(d, half), d)
    row_resolved = np.maximum(row_max(np.where(shared, lower, -np.inf)), 0.0)
    row_resolved = np.where(disjoint, np.nan, row_resolved)
    # an id one arm lists and the other does not: the other's value is at most its last listed
    # one, so a listed value above that by more than the bound is a certain difference too
    # (ids below 0 are matched by no rule, as in match_ids: left out)
    same_list = row_all(ids_a == ids_b)
    dropped, dropped_by = _drops(m, tol, ~same_list)
    # what the print makes certain, whatever the tolerance (calibrate sizes probes by it)
    # (+ 0.0: a certain move of -0.0, from a listed -0.0, is 0; which zero np.fmax keeps of two
    # depends on the kernel numpy picks for the array's length and alignment)
    row_resolved = np.fmax(row_resolved, dropped_by) + 0.0
    values = row_count(shared)
    if tol.bitwise:
        over = shared & (d > 0)
        any_over = row_any(over)
        differs = any_over | ~same_list | disjoint
        coarse = np.maximum(qa, qb)
        one_q = any_over & ~row_any(over & (d > coarse * (1 + 1e-9)))
        counted = row_count(over)
        return RowDiffs(row_diff, differs, disjoint, np.zeros(n, dtype=bool), one_q & same_list,
                        row_resolved, counted, values, counted.copy(), nonfinite_both)
    # a non-finite reference has a bound of nan or inf: such values are decided by `mismatch`
    with np.errstate(invalid="ignore"):
        bound = tol.bound(vb)
        certain = shared & ((lower > bound) | mismatch)
        beyond = shared & ((lower > tol.band(vb)) | mismatch)
        # equal prints are equal: the blindness below the resolution is reported once, as a
        # tolerance finer than the resolution, not as every unchanged value
        possible = shared & finite & (d > 0) & (d + half > bound)
    differs = row_any(certain) | disjoint | dropped
    unresolved = row_any(possible) & ~differs
    # a dropped id makes its row differ (like a disjoint row); the counts stay over the shared
    # values, so the excess test's count is out of the values it counts
    return RowDiffs(row_diff, differs, disjoint, unresolved, np.zeros(n, dtype=bool),
                    row_resolved, row_count(certain), values, row_count(beyond),
                    nonfinite_both)


def _drops(m: MatchedRows, tol: Tolerance, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether either arm lists an entry the other dropped (`_dropped`), and the
    largest certain move of such an entry (nan where none is dropped). Only `rows` (n,) are
    looked at: a row whose two lists are one list (the same ids in the same columns) shares
    every entry, so it drops none, and most rows of a comparison are such rows."""
    n = len(m)
    dropped = np.zeros(n, dtype=bool)
    by = np.full(n, np.nan)
    at = np.flatnonzero(rows)
    if at.size:
        ids_a, ids_b = m.ids_a[at], m.ids_b[at]
        arm_a, arm_b = (m.va[at], m.qa[at]), (m.vb_own[at], m.qb_own[at])
        shared_b, _ = match_ids(ids_b, ids_a)
        drop_a, drop_a_by = _dropped(arm_a, m.shared[at] | (ids_a < 0), arm_b, tol)
        drop_b, drop_b_by = _dropped(arm_b, shared_b | (ids_b < 0), arm_a, tol)
        dropped[at] = row_any(drop_a) | row_any(drop_b)
        by[at] = np.fmax(drop_a_by, drop_b_by)
    return dropped, by


def _dropped(arm: tuple[np.ndarray, np.ndarray], shared: np.ndarray,
             other: tuple[np.ndarray, np.ndarray], tol: Tolerance
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per entry of one arm's rows (values, quanta): listed there, absent from the other arm's
    list, and above the other's last listed value by more than the bound (at the larger of the
    two values) plus half of each row's coarsest quantum. Top lists are sorted, so an absent id
    lies at or below the last listed value: such an entry certainly moved by more than the
    tolerance allows. Also, per row, the largest such certain move (`resolved_difference` of
    the excess; nan where no entry is dropped)."""
    vals, quanta = arm
    o_vals, o_quanta = other
    with np.errstate(invalid="ignore", all="ignore"):
        finite = np.isfinite(o_vals)
        has = finite.any(axis=1)
        last = np.full(o_vals.shape[0], np.inf)
        last[has] = np.min(np.where(finite, o_vals, np.inf)[has], axis=1)

        def coarsest(q: np.ndarray) -> np.ndarray:
            return np.asarray(np.max(np.where(np.isfinite(q), q, 0.0), axis=1, initial=0.0))

        half = ((coarsest(quanta) + coarsest(o_quanta)) / 2)[:, None]
        excess = vals - last[:, None]
        ref = np.maximum(np.abs(vals), np.abs(last[:, None]))
        eligible = ~shared & np.isfinite(vals) & np.isfinite(excess)
        lower = resolved_difference(excess, half)
        dropped = np.asarray(eligible & (lower > tol.bound(ref)), dtype=bool)
        by = np.where(eligible, lower, np.nan)
        row_by = np.full(vals.shape[0], np.nan)
        some = eligible.any(axis=1)
        row_by[some] = np.nanmax(by[some], axis=1)
    return dropped, row_by


def finite_max(diff: np.ndarray) -> float | None:
    """The largest finite row difference, or None: JSON never gets a string for a number."""
    finite = diff[np.isfinite(diff)]
    return float(finite.max()) if finite.size else None


def exact_values(values: np.ndarray, digits: int | None) -> np.ndarray:
    """The values as `judge_rows` sees them (float32-exact at 9 or more digits)."""
    if lossless(digits) and not wide(digits):
        with np.errstate(over="ignore"):  # a print beyond float32's range is its infinity
            values = values.astype(np.float32).astype(np.float64)
    return values


# -- the derived near-tie rule (difftest.core.thresholds documents it) ------------------------------

NEAR_TIE_FACTOR = 2.0  # two values each within the tolerance of the reference swap only then


def derived_near_tie(tol: Tolerance, top1_b: np.ndarray) -> np.ndarray:
    """Per row: the margin below which a flip is a near-tie, 2 * the tolerance's bound at arm B's
    top-1 logit (nan where B traced no logits there: no near-tie without a margin). All zero
    under a bitwise tolerance, so no flip is excused."""
    top = np.asarray(top1_b, dtype=np.float64)
    if tol.bitwise:
        return np.where(np.isnan(top), np.nan, 0.0)
    out: np.ndarray = NEAR_TIE_FACTOR * tol.bound(top)
    return out


def derived_rule_text(tol: Tolerance) -> str:
    """The derived rule in words, with the values it used."""
    bound = "atol + rtol*|top-1 of B|" + (f", raised to the floor {tol.floor:.3g}"
                                            if tol.floor else "")
    return (f"near_tie derived per row: a flip is a near-tie when both margins are below "
            f"2*({bound}) = 2*({tol.atol:g} + {tol.rtol:g}*|top-1|)")
