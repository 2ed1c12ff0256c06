"""The resolution of printed logits: digits per arm, quantum per value, coarsest over the rows."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import logits_line, verify_line
from difftest import api
from difftest.report import comparison
from difftest.core import model
from difftest.core.model import LogitRows
from difftest.numerics.resolution import LOSSLESS_DIGITS, Resolution, format_digits, quanta, resolution
from tests.swap import swapped

CONFIG = Path(__file__).parents[2] / "difftest" / "configs" / "default.toml"


@pytest.mark.parametrize("value, digits, quantum", [
    (2.87758, 6, 1e-5), (9.99999, 6, 1e-5), (10.0, 6, 1e-4), (-23.4567, 6, 1e-4),
    (0.0123457, 6, 1e-7), (2.87758123, 9, 1e-8), (123.456789, 9, 1e-6), (-1e-7, 6, 1e-12)])
def test_quantum_of_a_value(value: float, digits: int, quantum: float) -> None:
    assert quanta(np.array([value]), digits)[0] == pytest.approx(quantum, rel=1e-12)


def test_zero_and_non_finite_have_no_quantum() -> None:
    assert np.isnan(quanta(np.array([0.0, np.inf, np.nan, -np.inf]), 6)).all()


def test_arm_resolution_is_the_coarsest_compared_quantum() -> None:
    vals = np.array([[12.5, 3.25, np.nan], [2.87758, 1.5, 0.25], [123.457, 99.0, 5.0]])
    width = np.array([2, 3, 3])
    digits = np.array([3, 6, 6], dtype=np.int8)
    compared = np.array([True, True, False])
    r = resolution(vals, width, digits, compared)
    assert r.digits == 6 and not r.lossless
    assert r.quantum == pytest.approx(1e-4)  # 12.5 in [10, 100) at 6 digits; row 3 not compared
    assert resolution(vals, width, digits, np.ones(3, bool)).quantum == pytest.approx(1e-3)


def test_nine_digits_are_lossless_and_empty_is_unknown() -> None:
    vals = np.array([[2.87758123, 1.0]])
    r = resolution(vals, np.array([2]), np.array([LOSSLESS_DIGITS], dtype=np.int8),
                   np.array([True]))
    assert r.lossless and r.quantum == pytest.approx(1e-8)
    empty = resolution(np.zeros((0, 2)), np.zeros(0, int), np.zeros(0, np.int8), np.zeros(0, bool))
    assert empty.digits is None and empty.quantum is None
    assert not empty.lossless and not Resolution(8, 1e-7).lossless


def test_zero_and_non_finite_values_raise_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = quanta(np.array([0.0, -0.0, np.inf, np.nan, 5.0]), 6)
    assert np.isnan(q[:4]).all() and q[4] == pytest.approx(1e-5)


@pytest.mark.parametrize("shown, digits", [
    ([], None), ([0, 0], None), ([1], 6), ([1, 3], 6), ([6, 2], 6), ([9, 7], 9), ([0, 8], 8)])
def test_format_digits_never_below_six_and_none_without_a_printed_digit(
        shown: list[int], digits: int | None) -> None:
    assert format_digits(np.array(shown, dtype=np.int8)) == digits


def test_unlisted_columns_and_uncompared_rows_have_no_quantum() -> None:
    # row 0 lists one value; the 500.0 beside it is past its width and must not count
    vals = np.array([[2.5, 500.0, 900.0], [1.25, 3.5, 7.0]])
    width = np.array([1, 2])
    digits = np.array([6, 6], dtype=np.int8)
    r = resolution(vals, width, digits, np.array([True, True]))
    assert r == Resolution(6, pytest.approx(1e-5))
    # digits are known but no row is compared: no quantum, not a crash
    assert resolution(vals, width, digits, np.array([False, False])) == Resolution(6, None)


@pytest.mark.parametrize("digits", [1, 6, 9, 17])
def test_quanta_are_the_power_of_the_exact_exponent_to_the_bit(digits: int) -> None:
    """`quanta` works on table indices in place: the same doubles as its definition,
    `pow10(decimal_exponent(|v|) - digits + 1)`, at every power of ten, beside each, at the
    ends of the double range, and on values of every magnitude."""
    from difftest.numerics.resolution import _P10, decimal_exponent, pow10

    rng = np.random.default_rng(digits)
    spread = rng.normal(0, 1, 20_000) * 10.0 ** rng.integers(-320, 308, 20_000)
    values = np.concatenate([_P10, np.nextafter(_P10, 0), np.nextafter(_P10, np.inf), -_P10,
                             [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1.7976931348623157e308],
                             spread])
    got = quanta(values, digits)
    assert np.array_equal(got, pow10(decimal_exponent(np.abs(values)) - digits + 1),
                          equal_nan=True)


def _coarsest_by_definition(vals: np.ndarray, width: np.ndarray, digits: int,
                            compared: np.ndarray) -> float | None:
    """The definition `resolution` keeps: every listed, compared value's quantum, the largest."""
    listed = np.arange(vals.shape[1])[None, :] < width[:, None]
    q = quanta(vals[compared], digits)
    q = q[listed[compared] & ~np.isnan(q)]
    return float(q.max()) if q.size else None


@pytest.mark.parametrize("seed", range(4))
def test_the_coarsest_quantum_is_that_of_every_value_over_many_blocks(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`resolution` reads only the largest magnitude: the same quantum, to the bit, as the
    quantum of every value, with zeros, non-finite values, unlisted columns, uncompared rows and
    values at powers of ten (where a quantum steps), over several row blocks."""
    from difftest.numerics import resolution as module

    monkeypatch.setattr(module, "RESOLUTION_BLOCK_ROWS", 7)
    rng = np.random.default_rng(seed)
    n, k = 61, 5
    vals = rng.normal(0, 10, (n, k)) * 10.0 ** rng.integers(-3, 4, (n, k))
    vals[rng.random((n, k)) < 0.1] = 0.0
    vals[rng.random((n, k)) < 0.05] = np.nan
    vals[rng.random((n, k)) < 0.05] = -np.inf
    vals[3, 0] = 1000.0  # a power of ten
    vals[4, 4] = 1e6  # the largest, but past row 4's width
    width = rng.integers(1, k, n)
    width[4] = 3
    compared = rng.random(n) < 0.8
    compared[[3, 4]] = True
    digits = np.full(n, 6, dtype=np.int8)
    got = module.resolution(vals, width, digits, compared)
    assert got.digits == 6
    assert got.quantum == _coarsest_by_definition(vals, width, 6, compared)  # bit for bit
    nothing = np.zeros((n, k))
    assert module.resolution(nothing, width, digits, compared) == Resolution(6, None)


@pytest.mark.parametrize("digits", [6, 7, 9])
def test_quanta_are_the_decimal_literals_on_every_cpu(digits: int) -> None:
    # The quantum reaches users as logit_resolution and is compared exactly in reports: it must be
    # the double nearest 10**k (what `1e-05` reads as), not whatever the SIMD power kernel yields.
    exps = np.arange(-30, 30)
    values = np.array([float(f"{m}e{e}") for m in ("1", "2.5", "9.999999") for e in exps])
    want = np.array([float(f"1e{e - digits + 1}") for _ in range(3) for e in exps])
    got = quanta(values, digits)
    assert np.array_equal(got, want)


def test_decimal_exponent_is_exact_at_powers_of_ten() -> None:
    from difftest.numerics.resolution import decimal_exponent
    p = np.array([float(f"1e{k}") for k in range(-300, 300)])
    assert np.array_equal(decimal_exponent(p), np.arange(-300, 300, dtype=float))
    below = np.nextafter(p, 0.0)
    assert np.array_equal(decimal_exponent(below), np.arange(-301, 299, dtype=float))


def _short_print(values: list[float], digits: int) -> tuple[np.ndarray, np.ndarray]:
    """Values as a `%.<digits>g` print leaves them (one per row) and the digits each shows."""
    printed = [float(f"{v:.{digits}g}") for v in values]
    shown = [len(f"{v:.{digits}g}".lstrip("-").split("e")[0].replace(".", "").lstrip("0")
                 .rstrip("0")) or 1 for v in values]
    return np.array(printed)[:, None], np.array(shown, dtype=np.int8)


def test_a_shorter_print_is_read_at_the_digits_it_shows_on_evidence() -> None:
    """A `%.4g` print of ordinary logits: no value shows more than 4 digits and many are not
    short binary fractions, which a `%.6g` print would almost never leave so; the resolution
    is the print's 1e-2 at 12.34, never the 1e-4 six digits would claim."""
    logits = [12.3441, 12.3362, 10.0173, 9.00411, 11.7729, 8.41923, 13.0561, 12.9017, 7.30214]
    vals, shown = _short_print(logits, 4)
    assert int(shown.max()) == 4
    assert format_digits(shown, vals) == 4
    r = resolution(vals, np.ones(len(logits), dtype=int), shown, np.ones(len(logits), bool))
    assert r == Resolution(4, pytest.approx(1e-2, rel=1e-12))
    # seven such values are not yet evidence: the format is not read below six digits
    assert format_digits(shown[:7], vals[:7]) == 6


def test_short_binary_fractions_are_no_evidence_of_a_short_print() -> None:
    """`12.5`, `4.25`, `5`: what hand-written traces and half-precision engines print at any
    format; however many there are, the format stays at six digits."""
    vals = np.array([[12.5, 4.25, 5.0, -3.75, 0.125, 100.0, 2.5, 7.0, 9.5, 1.0625]])
    shown = np.array([5], dtype=np.int8)
    assert format_digits(shown, vals) == 6
    assert format_digits(shown) == 6



@pytest.mark.parametrize("pure", ["1", "0"])
def test_a_compare_of_percent_4g_traces_states_the_prints_resolution(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: str) -> None:
    """Each reader's digit counts, end to end: a `%.4g` trace pair is compared at 1e-2 (values
    near 12), and the report says so, not 1e-04."""
    monkeypatch.setenv("DIFFTEST_PURE_PARSER", pure)
    rng = np.random.default_rng(7)
    lines = []
    for s in range(6):
        lines.append(verify_line("r0", s, [3, 4], [50 + s]))
        for row, top in ((1, 3), (2, 4)):
            vals = sorted((float(x) for x in 8.0 + 5.0 * rng.random(3)), reverse=True)
            cells = [(top, f"{vals[0]:.4g}")] + [(90 + i, f"{v:.4g}")
                                                 for i, v in enumerate(vals[1:])]
            lines.append(logits_line("r0", s, row, cells))
    (tmp_path / "a.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.log").write_text("\n".join(lines) + "\nanother run\n")
    rep = api.compare_traces(tmp_path / "a.log", tmp_path / "b.log", config=CONFIG)
    assert rep.comparison is not None and rep.comparison.logits is not None
    assert rep.comparison.logits.resolution_a == Resolution(4, 1e-2)
    assert rep.comparison.logits.resolution_b == Resolution(4, 1e-2)
    text = comparison.render_table(rep)
    assert "printed resolution 1e-02" in text and "1e-04" not in text


@pytest.mark.parametrize("block", [1, 3, 1 << 14])
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_resolution_read_from_row_magnitudes_is_the_one_read_from_the_values(
        block: int, seed: int) -> None:
    """`LogitRows.magnitudes` (each row's largest finite listed |value|, a column at a time)
    give any set of rows the resolution a pass over their values gives."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(0, 30)), int(rng.integers(1, 6))
    pool = np.array([0.0, -0.0, 1.5, -2.25, 12.345, -987.6, 3e-7, np.nan, np.inf, -np.inf])
    values = rng.choice(pool, size=(n, k))
    width = rng.integers(0, k + 1, size=n).astype(np.int32)
    sig = rng.integers(0, 9, size=n).astype(np.int8)
    lg = LogitRows(np.zeros(n, np.int32), np.zeros(n, np.int64), np.ones(n, np.int32),
                   np.zeros((n, k), np.int32), values, width, np.zeros(n, np.int64), sig)
    compared = rng.integers(0, 2, size=n).astype(bool)
    want = resolution(values, width, sig, compared)
    with swapped(model, _ROW_BLOCK=block):  # rows taken a block at a time
        magnitudes = lg.magnitudes
    assert resolution(values, width, sig, compared, magnitudes) == want


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(-1e6, 1e6),
       st.sampled_from([4, 6, 8]), st.sampled_from([1e-306, 1e-300, 1.0, 1e300]))
def test_a_difference_of_printed_values_is_finite_at_every_scale(
        a: float, step: float, digits: int, scale: float) -> None:
    """Two printed values anywhere in the doubles' range, subnormal quanta included, differ by
    a finite amount on the grid (not nan, which the report reads as "not compared"), and equal
    values by +0.0; without a warning."""
    from difftest.numerics.resolution import snapped_difference, value_quanta

    with np.errstate(over="ignore"):  # drawn past the range: skipped below
        x = np.array([a, a, a * scale, float(np.float64(a) + np.float64(step) * scale)])
        y = np.array([a, a * (1 + 1e-3), a * scale, a * scale])
    if not np.isfinite(x).all() or not np.isfinite(y).all():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qa, qb = value_quanta(x, digits), value_quanta(y, digits)
        d = snapped_difference(x, y, qa, qb)
    assert np.isfinite(d).all() and (d >= 0).all()
    assert d[0] == 0.0 and d[2] == 0.0
