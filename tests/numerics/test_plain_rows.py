"""Plain rows (`tolerance.plain_rows`): a block whose rows partly have one top list in both arms
is judged, and its statistics taken, without matching those rows; every judgement and every
figure must be what matching every row gives, to the bit."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from difftest.analysis.compare import _judged_split
from difftest.numerics.resolution import WideDigits
from difftest.numerics.stats import LogitStats, PairedRows, StatsPass
from difftest.numerics.tolerance import (RowDiffs, Tolerance, exact_values, judge_matched,
                                         match_rows, plain_rows)

# values that stress each rule: zeros of both signs, ties, non-finite ones, a print that
# float32 rounds to 0 or to infinity, and ordinary logits
VALUES = st.sampled_from([0.0, -0.0, 1.5, -2.25, 3.0, 7.123456789, 1e-50, 1e300, np.inf,
                          -np.inf, np.nan, 12.5, 12.50001, -0.001, 1e-305, 1e308, -1e308,
                          1e-280, 2e300])
Digits = tuple[int | None, int | None]
IDS = st.sampled_from([-1, -1, 0, 1, 2, 3, 5, 8, 13, 2**31 - 1])


@st.composite
def blocks(draw: st.DrawFn) -> tuple[PairedRows, np.ndarray, Digits, Tolerance]:
    """Paired rows of one width, B's row mostly a copy of A's (a plain row when the copy is
    clean), else changed in one place; which rows the statistics keep; the print; a tolerance."""
    n = draw(st.integers(1, 24))
    k = draw(st.integers(1, 5))
    ids_a = np.array([[draw(IDS) for _ in range(k)] for _ in range(n)], dtype=np.int32)
    vals_a = np.array([[draw(VALUES) for _ in range(k)] for _ in range(n)])
    ids_b, vals_b = ids_a.copy(), vals_a.copy()
    for i in range(n):
        change = draw(st.sampled_from(["none", "none", "none", "value", "id", "swap", "pad"]))
        j = draw(st.integers(0, k - 1))
        if change == "value":
            vals_b[i, j] = draw(VALUES)
        elif change == "id":
            ids_b[i, j] = draw(IDS)
        elif change == "swap" and k > 1:
            ids_b[i] = np.roll(ids_b[i], 1)
            vals_b[i] = np.roll(vals_b[i], 1)
        elif change == "pad":
            ids_b[i, j], vals_b[i, j] = -1, np.nan
    kept = np.array([draw(st.booleans()) or draw(st.booleans()) for _ in range(n)])
    prints = st.sampled_from([None, 3, 6, 9, WideDigits(17), 17])
    digits = (draw(prints), draw(prints))
    tol = draw(st.sampled_from([Tolerance(), Tolerance(atol=1e-3), Tolerance(atol=0.5, rtol=0.1),
                                Tolerance(rtol=1e-6)]))
    return PairedRows(ids_a, vals_a, ids_b, vals_b), kept, digits, tol


def _matched_in_full(pairs: PairedRows, kept: np.ndarray, tol: Tolerance, digits: Digits,
                     stats: StatsPass) -> RowDiffs:
    """Every row matched: the analysis's path for a block without plain rows."""
    matched = match_rows(pairs, *digits)
    assert matched is not None
    ka = pairs.ids_a.shape[1]
    stats.add_matched(matched.ids_a[kept, :ka], matched.va[kept, :ka], matched.ids_b[kept],
                      matched.shared[kept, :ka], matched.vb[kept, :ka], matched.d[kept, :ka])
    return judge_matched(matched, tol)


def _bits(x: object) -> object:
    """A value compared to the bit: arrays by dtype, shape and bytes, floats by their bits (any
    nan as one)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f":  # a nan's sign and payload show in no output: one nan
            x = np.where(np.isnan(x), np.nan, x)
        return (x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, float):
        return ("nan",) if math.isnan(x) else np.float64(x).tobytes()
    if isinstance(x, tuple):
        return tuple(_bits(v) for v in x)
    if hasattr(x, "__dataclass_fields__"):
        return {f.name: _bits(getattr(x, f.name)) for f in fields(x)}  # type: ignore[arg-type]
    return x


def _plain_by_definition(pairs: PairedRows, digits: Digits) -> list[bool]:
    """Each row's plainness read off its entries one at a time (plain_rows's docstring)."""
    out = []
    for i in range(len(pairs)):
        same = (pairs.ids_a[i].tolist() == pairs.ids_b[i].tolist()
                and pairs.vals_a[i].tobytes() == pairs.vals_b[i].tobytes())
        listed = [j for j, t in enumerate(pairs.ids_a[i].tolist()) if t >= 0]
        held = [exact_values(pairs.vals_a[i], d) for d in digits]
        out.append(same and bool(listed)
                   and len({int(pairs.ids_a[i, j]) for j in listed}) == len(listed)
                   and all((held[0][j] == 0 or 1e-280 <= abs(float(held[0][j])) <= 1e300)
                           and held[0][j].tobytes() == held[1][j].tobytes() for j in listed))
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the statistics of 1e300 overflow
@settings(max_examples=400, deadline=None)
@given(blocks())
def test_plain_rows_are_judged_as_matching_every_row_judges_them(
        block: tuple[PairedRows, np.ndarray, Digits, Tolerance]) -> None:
    pairs, kept, digits, tol = block
    plain = plain_rows(pairs, *digits)
    want_plain = _plain_by_definition(pairs, digits)
    assert (plain.rows.tolist() if plain is not None else [False] * len(pairs)) == want_plain
    event("some rows plain, some not" if plain is not None and not plain.rows.all()
          else "every row plain" if plain is not None else "no row plain")
    if plain is None:
        return
    cluster = np.arange(int(kept.sum())) % 3
    full, split = StatsPass(pairs.ids_a.size), StatsPass(pairs.ids_a.size)
    want = _matched_in_full(pairs, kept, tol, digits, full)
    got = _judged_split(pairs, plain, kept, tol, digits, split)
    assert _bits(got) == _bits(want)
    assert _outcome(split, cluster) == _outcome(full, cluster)


def _outcome(taken: StatsPass, cluster: np.ndarray) -> object:
    """The statistics to the bit, or the error they end in (values near the largest double
    overflow the jackknife's sums: an error of the general path, which plain rows must keep)."""
    try:
        stats: LogitStats = taken.result(cluster=cluster)
    except (OverflowError, ValueError) as exc:
        return type(exc)
    return _bits(stats)


def test_a_row_is_plain_only_when_nothing_can_differ() -> None:
    """One list in both arms, listed ids distinct and their values finite as held: plain. An id
    listed twice, a value float32 makes infinite, a row listing nothing, other prints: not."""
    ids = np.array([[3, 1, -1], [3, 3, -1], [4, 2, 1], [-1, -1, -1]], dtype=np.int32)
    vals = np.array([[2.0, 1.0, np.nan], [2.0, 1.0, np.nan], [1e300, 1.0, 0.5],
                     [np.nan, np.nan, np.nan]])
    pairs = PairedRows(ids, vals, ids.copy(), vals.copy())
    plain = plain_rows(pairs, 9, 9)
    assert plain is not None and plain.rows.tolist() == [True, False, False, False]
    # printed otherwise: 9 digits hold 1.0 and 2.0 as float32 does, 6 digits as printed
    assert plain_rows(pairs, 9, 6) is not None
    odd = PairedRows(ids[:1], vals[:1] + 1e-9, ids[:1].copy(), vals[:1] + 1e-9)
    assert plain_rows(odd, 9, 6) is None  # but 2.000000001 is not a float32: 9 digits move it
    changed = PairedRows(ids, vals, ids.copy(), vals + 1e-9)
    assert plain_rows(changed, 9, 9) is None
