"""Numbers read from a block's bytes in vectorised numpy passes, for the pure-Python reader's
bulk path: integers, `float()`-exact values and the printed digits of each, with no Python
object per number.

Exactness: a value printed with at most 15 significant digits and no exponent is m / 10**f with
m < 2**53 and f <= 15. Both are exact doubles, so one IEEE division is the correctly rounded
result, which is what `float()` returns for the text (Clinger's fast path; the compiled scanner
takes the same one). Every other spelling (exponents, longer mantissas, nan, inf) is read by
`float()` itself, one token at a time.
"""

from __future__ import annotations

import numpy as np

from difftest.trace import grammar as g

FAST_DIGITS = 15  # 10**15 < 2**53: every mantissa this long is an exact double
ID_DIGITS = 10  # an int32 id has at most 10 digits
_P10 = 10.0 ** np.arange(FAST_DIGITS + 1)  # exact: 10**15 < 2**53
_P10_INT = 10 ** np.arange(FAST_DIGITS + 1, dtype=np.int64)
_DIGIT_VALUE = np.where((np.arange(256) >= 48) & (np.arange(256) <= 57), np.arange(256) - 48, 0)
# _PLACE_VALUE[place << 8 | byte]: a digit byte's value at a decimal place, 0 for other bytes;
# the last row (place -1: past its token) is all zeros
_PLACE_VALUE = np.concatenate([_DIGIT_VALUE[None, :] * _P10[:, None],
                               np.zeros((1, 256))]).ravel()


def running_count(mask: np.ndarray) -> np.ndarray:
    """count[i] = how many of mask[:i] are set (size len(mask) + 1), for range counts."""
    count = np.zeros(mask.size + 1, dtype=np.int32)
    np.cumsum(mask, out=count[1:])
    return count


def mantissas(a: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              digit_count: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per token a[starts:ends] (sorted, disjoint): its digits read as one integer (float64,
    exact while it has at most 15 digits), how many digits it has, and how many follow its
    first dot (-1: no dot, -2: more than one dot). `digit_count` is running_count of digits."""
    ndig = digit_count[ends] - digit_count[starts]
    frac = np.full(starts.size, -1, dtype=np.int32)
    if not starts.size:
        return np.zeros(0), ndig, frac
    # A digit's place is the number of its token's digits after it: the token's count at its
    # end (spread over the token and whatever follows it up to the next token) minus the
    # running count. One lookup of (place, byte) in a
    # small table then gives each digit's value at its place.
    lo = int(starts[0])
    place = np.repeat(digit_count[ends], np.diff(starts, append=a.size))
    place -= digit_count[lo + 1:]
    # A digit past its token has place < 0: -1 is the table's all-zero last row. Places are
    # clipped at FAST_DIGITS, so a mantissa is exact only for tokens of at most FAST_DIGITS
    # digits: the only ones `values` reads by it (and ids have at most ID_DIGITS).
    np.clip(place, -1, FAST_DIGITS, out=place)
    place <<= 8
    place += a[lo:]
    mant = np.add.reduceat(_PLACE_VALUE[place], starts - lo)
    dots = np.flatnonzero(a == 46)
    if dots.size:
        dot_count = np.zeros(a.size + 1, dtype=np.int32)
        dot_count[dots + 1] = 1
        np.cumsum(dot_count, out=dot_count)
        ndot = dot_count[ends] - dot_count[starts]
        dotted = np.flatnonzero(ndot)
        first_dot = dots[dot_count[starts[dotted]]]
        frac[dotted] = digit_count[ends[dotted]] - digit_count[first_dot + 1]
        frac[ndot > 1] = -2
    return mant, ndig, frac


def values(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, mant: np.ndarray,
           ndig: np.ndarray, frac: np.ndarray, neg: np.ndarray,
           signed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, printed significant digits, read) of value tokens: the plain decimals
    (digits, at most one dot, a leading sign) by the exact fast path, the rest by `float()`;
    a token `float()` does not read as the field reader would is not read."""
    plain = (ends - starts == ndig + signed + (frac >= 0)) & (frac >= -1)
    fast = plain & (ndig >= 1) & (ndig <= FAST_DIGITS)
    out = np.where(fast, mant, 0.0) / _P10[np.clip(frac, 0, FAST_DIGITS)]
    out[neg] *= -1.0
    sig = np.searchsorted(_P10_INT, np.where(fast, mant, 0.0).astype(np.int64), side="right")
    np.maximum(sig, 1, out=sig)
    ok = np.ones(starts.size, dtype=bool)
    for t in np.flatnonzero(~fast).tolist():  # exponents, long mantissas, nan, inf
        raw = a[starts[t]:ends[t]].tobytes()
        value = g.float_item(raw)
        if value is None:
            ok[t] = False
        else:
            out[t] = value
            sig[t] = g.sig_digits(raw)
    sig[~np.isfinite(out)] = 0
    return out, sig, ok


def small_ints(a: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """int64 of short digit runs a[starts:ends] (at most 18 digits, all digits)."""
    out = np.zeros(starts.size, dtype=np.int64)
    if not starts.size:
        return out
    width = ends - starts
    for k in range(int(width.max())):
        live = width > k
        digit = a[np.where(live, starts + k, 0)].astype(np.int64) - 48
        out = np.where(live, out * 10 + digit, out)
    return out


def row_max(sig: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Per row, the largest of its items' digits (0 for a row without items), as int8."""
    out = np.zeros(widths.size, dtype=np.int8)
    filled = widths > 0
    if sig.size and filled.any():
        starts = (np.cumsum(widths) - widths)[filled]
        out[filled] = np.minimum(np.maximum.reduceat(sig, starts), 127)
    return out
