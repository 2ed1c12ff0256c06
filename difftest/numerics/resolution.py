"""The logit instrument's own resolution: how finely a trace's printed values can tell two logits
apart.

`%g` drops trailing zeros, so one value's printed digits undercount the format's precision
(`5.5` may come from `%.6g` or `%.9g`). The format's digit count is inferred per arm as the
largest number of significant digits any of its values shows; each value's quantum (one unit in
the last printed digit) follows from that count and the value's exponent,
`10**(floor(log10|v|) - digits + 1)`. An arm's resolution is the coarsest quantum over the
values of the rows compared. Zero prints exactly and non-finite values have no quantum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Significant digits that round-trip every float32 exactly (FLT_DECIMAL_DIG).
LOSSLESS_DIGITS = 9
# Significant digits that round-trip every float64 exactly (DBL_DECIMAL_DIG).
DOUBLE_DIGITS = 17


class WideDigits(int):
    """The digit count of an arm whose printed values are not all float32 (a float64 engine):
    9 digits name no float32 there, they round a wider value, and only 17 are lossless."""


def wide(digits: int | None) -> bool:
    """The arm's values are wider than float32."""
    return isinstance(digits, WideDigits)


def lossless(digits: int | None) -> bool:
    """Equal text means equal values: 9 digits for float32 prints, 17 for wider ones."""
    if digits is None:
        return False
    return digits >= (DOUBLE_DIGITS if wide(digits) else LOSSLESS_DIGITS)
# The coarsest format a producer prints (`%.6g`, the first version of the line). A trace whose
# values all happen to be short (`5`, `4.25`) shows fewer digits than its format printed;
# inferring a coarser format from them would swallow real differences as rounding, so without
# evidence (below) the inference never goes below this.
MIN_FORMAT_DIGITS = 6
# Evidence that a print really is shorter (`%.4g`): values that are not short binary fractions
# (not a multiple of 2**-SHORT_BINARY_BITS: `12.34`, not `12.5` or `4.25`) yet show at most d < 6
# digits. A `%.6g` print of such a value shows d digits only when its last 6 - d digits are
# zero, about one time in 10**(6 - d); SHORT_PRINT_EVIDENCE of them all short would happen by
# chance about once in 10**8, so the arm is read at the d digits it shows (coarser, never finer
# than the print). Short binary fractions are what hand-written traces and half-precision
# engines print at any format, so they are no evidence either way.
SHORT_PRINT_EVIDENCE = 8
SHORT_BINARY_BITS = 10


@dataclass(frozen=True)
class Resolution:
    """One arm's logit resolution."""

    digits: int | None  # the format's significant digits (None: no finite non-zero value)
    quantum: float | None  # coarsest quantum over the compared values (None: none compared)

    @property
    def lossless(self) -> bool:
        """Printed with enough digits that equal text means equal values."""
        return lossless(self.digits)


# Every power of ten a double can hold, each the double nearest 10**k: Python's decimal reader
# rounds correctly, so `1e-05` here is the literal 1e-05 on every machine. `np.power(10.0, -5.0)`
# is not: its last bit follows the SIMD kernel numpy dispatches on the CPU at hand.
_P10_MIN, _P10_MAX = -340, 308
_P10 = np.array([float(f"1e{k}") for k in range(_P10_MIN, _P10_MAX + 1)])


def pow10(exponent: np.ndarray) -> np.ndarray:
    """10**e for integer-valued e (nan stays nan), the same double on every CPU."""
    e = np.asarray(exponent, dtype=np.float64)
    ok = np.isfinite(e)
    idx = np.clip(np.where(ok, e, 0.0), _P10_MIN, _P10_MAX).astype(np.int64) - _P10_MIN
    out: np.ndarray = np.where(ok, _P10[idx], np.nan)
    return out


def decimal_exponent(mag: np.ndarray) -> np.ndarray:
    """floor(log10 m) for positive finite m, exact: `np.log10` may land a hair under an integer
    for a power of ten on some SIMD paths, so the estimate is corrected against the exact table
    of powers. nan where m is 0, negative or not finite."""
    with np.errstate(divide="ignore", invalid="ignore"):
        good = (mag > 0) & np.isfinite(mag)
        e = np.floor(np.log10(np.where(good, mag, 1.0)))
        e = np.where(pow10(e) > mag, e - 1, e)
        e = np.where(pow10(e + 1) <= mag, e + 1, e)
    out: np.ndarray = np.where(good, e, np.nan)
    return out


def quanta(values: np.ndarray, digits: int) -> np.ndarray:
    """One unit in the last of `digits` significant digits of each value; nan for 0 and
    non-finite values (they carry no rounding). Exact: the same double on every CPU."""
    # `pow10(decimal_exponent(|v|) - digits + 1)` in a few in-place passes over table indices
    # (the same double, to the bit: the same estimate, corrections and clipping; a quantum is
    # taken of every logit value, so the passes count)
    mag = np.abs(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        good = np.isfinite(mag)
        good &= mag > 0
        e = np.log10(mag, out=np.zeros_like(mag), where=good)
        at = np.floor(e, out=e).astype(np.int64)
    at -= _P10_MIN  # the index of 10**e in _P10 (e is 0 where the value has no quantum)
    at -= _P10[at] > mag
    at += _P10[np.minimum(at + 1, _P10.size - 1)] <= mag
    at -= digits - 1
    np.clip(at, 0, _P10.size - 1, out=at)
    out: np.ndarray = _P10[at]
    out[~good] = np.nan
    return out


def value_quanta(values: np.ndarray, digits: int | None) -> np.ndarray:
    """Each value's quantum as a comparison of printed values uses it: 0 where the print is
    exact (9 or more digits name one float32; unknown digits; zero; non-finite values)."""
    if digits is None or lossless(digits):
        return np.zeros_like(values)
    q = quanta(values, digits)
    out: np.ndarray = np.where(np.isnan(q), 0.0, q)
    return out


_SMALLEST_INVERTIBLE = 1.0 / float(np.finfo(np.float64).max)  # 1 / q is finite above it


def snapped_difference(a: np.ndarray, b: np.ndarray, qa: np.ndarray, qb: np.ndarray
                       ) -> np.ndarray:
    """|a - b| of two printed values on the grid of the finer of their quanta: the one
    definition of a logit difference, for the tolerance and the statistics alike. The decimal
    subtraction `2.87758 - 2.87757` is 1.0000000000065e-05 in float64, an artefact of the
    subtraction, not of the engines; on the grid it is 1e-05. When one value is exact (quantum
    0) there is no grid: the difference of 2.877574 and a printed 2.87757 lies anywhere in
    [0, 9e-06], and snapping its 4e-06 onto the printed grid (to 0) would call it equal; the
    printed value's half quantum is the tolerance's to account for. Near the ends of the
    doubles' range the grid still holds: a quantum under 1e-308 has no finite inverse, and is
    divided by instead; a difference whose count of quanta passes the largest double (a value
    near it beside a tiny one) is left as subtracted."""
    with np.errstate(invalid="ignore"):
        d: np.ndarray = np.abs(a - b)
    fine = np.minimum(qa, qb)
    with np.errstate(invalid="ignore", over="ignore"):
        grid = np.isfinite(fine) & (fine > 0) & np.isfinite(d)
        dq, qq = d[grid], fine[grid]
        # A quantum below 1 is 10**-k, which float64 does not hold exactly; dividing by the exact
        # integer 10**k gives the double nearest n * 10**-k (3.75, not 3.7500000000000004).
        inverse = (qq < 1) & (qq > _SMALLEST_INVERTIBLE)
        inv = np.round(1.0 / np.where(inverse, qq, 1.0))
        snapped = np.where(inverse, np.round(dq * inv) / inv, np.round(dq / qq) * qq)
        d[grid] = np.where(np.isfinite(snapped), snapped, dq)
    return d


def format_digits(sig_digits: np.ndarray, values: np.ndarray | None = None) -> int | None:
    """The significant digits an arm's format printed: the most any row shows; fewer than
    MIN_FORMAT_DIGITS only when `values` (the arm's printed values, any shape, nan padding
    ignored) hold SHORT_PRINT_EVIDENCE that the print is that short (None when no finite value
    was printed)."""
    if sig_digits.size == 0 or int(sig_digits.max()) <= 0:
        return None
    shown = int(sig_digits.max())
    if shown >= MIN_FORMAT_DIGITS:
        return shown
    if values is not None and _not_binary_short(values) >= SHORT_PRINT_EVIDENCE:
        return shown
    return MIN_FORMAT_DIGITS


def _not_binary_short(values: np.ndarray) -> int:
    """How many finite values are not a multiple of 2**-SHORT_BINARY_BITS (exact: scaling by a
    power of two and flooring round nothing)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    with np.errstate(over="ignore"):  # past the range: inf, a whole number as the value was
        scaled = v * float(1 << SHORT_BINARY_BITS)
    return int(np.count_nonzero(scaled != np.floor(scaled)))


def resolution(values: np.ndarray, width: np.ndarray, sig_digits: np.ndarray,
               compared: np.ndarray, magnitudes: np.ndarray | None = None) -> Resolution:
    """An arm's resolution from its top values (n, K), the entries per row, the significant
    digits each row printed (n,), and a mask of the rows compared (n,). `magnitudes`: each
    row's largest finite listed |value| (0 where none; `LogitRows.magnitudes`), when a trace
    already holds them: the largest over the compared rows is then read from them."""
    digits = format_digits(sig_digits, values)
    if digits is None:
        return Resolution(None, None)
    if magnitudes is not None:
        kept = magnitudes[compared]
        top = float(kept.max()) if kept.size else 0.0
        if top == 0.0:
            return Resolution(digits, None)
        return Resolution(digits, float(quanta(np.array([top]), digits)[0]))
    # A quantum grows with the magnitude (`quanta` is monotone in |v|), so the coarsest is the
    # quantum of the largest finite listed magnitude: one pass of max in row blocks, not a
    # logarithm of every value (0 and non-finite values have no quantum, as in `quanta`).
    top = 0.0
    columns = np.arange(values.shape[1])[None, :]
    for start in range(0, values.shape[0], RESOLUTION_BLOCK_ROWS):
        block = slice(start, start + RESOLUTION_BLOCK_ROWS)
        mag = np.abs(values[block])
        keep = (columns < width[block, None]) & compared[block, None] & np.isfinite(mag)
        if keep.any():
            top = max(top, float(mag[keep].max()))
    if top == 0.0:
        return Resolution(digits, None)
    return Resolution(digits, float(quanta(np.array([top]), digits)[0]))


RESOLUTION_BLOCK_ROWS = 1 << 16  # rows per pass of `resolution`: its temporaries stay small


def float32_prints(values: np.ndarray, digits: int) -> bool:
    """Whether every finite value is what `%.<digits>g` prints for some float32: the float32
    nearest it lies within half a printed quantum. A float64 engine's values mostly do not (a
    float32 step is ten to a hundred 9-digit quanta wide), so one that fails says the engine
    holds wider values than the print names."""
    # A threshold, not a quantum a difference is measured in: np.power's last bit does not
    # matter here (the slack is a millionth), so the exact table of `quanta` is not needed.
    # Zero has a half quantum of 0 and is a float32; nan and inf compare false and pass.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        off = np.abs(values - values.astype(np.float32).astype(np.float64))
        half = 0.5 * np.power(10.0, np.floor(np.log10(np.abs(values))) - (digits - 1))
        return not bool(np.any(off > half * (1 + 1e-6)))


# Rows read to tell a float32 print from a wider one: a wider engine's value is the print of a
# float32 about one time in ten, so a few rows settle it, and a whole trace would cost a pass
# over every value of every comparison.
FLOAT32_SAMPLE_ROWS = 1 << 12


def arm_digits(values: np.ndarray, sig_digits: np.ndarray) -> int | None:
    """An arm's printed digits as the comparison uses them: WideDigits where 9 or more digits
    print values that are not float32 (judged on the first FLOAT32_SAMPLE_ROWS rows)."""
    digits = format_digits(sig_digits, values)
    if digits is not None and digits >= LOSSLESS_DIGITS and not float32_prints(
            values[:FLOAT32_SAMPLE_ROWS], digits):
        return WideDigits(digits)
    return digits


def exact_in_half(values: np.ndarray, kind: str) -> bool:
    """Whether every finite value is exactly a float16 or bfloat16 number (`kind`). Such an
    arm's print names each value exactly whatever its digit count: a %.6g print moves a value by
    under 5e-6 of itself, far less than the dtype's spacing (2**-11 of itself for float16,
    2**-8 for bfloat16), so a printed value that is a number of the dtype is the one the engine
    held. Equality tests only: the same answer on every CPU."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return False
    with np.errstate(over="ignore"):
        as32 = v.astype(np.float32)
    if not np.array_equal(as32.astype(np.float64), v):
        return False
    if kind == "float16":
        with np.errstate(over="ignore"):
            return bool(np.array_equal(as32.astype(np.float16).astype(np.float32), as32))
    if kind == "bfloat16":
        return bool(np.all((as32.view(np.uint32) & np.uint32(0xFFFF)) == 0))
    return False
