"""The pure-Python reader's bulk number conversion: all `id:value` pairs of a block of
`[spec-logits]` payloads in one numpy read, and the printed digits of each row, vectorised.

numpy reads the text with CPython's own correctly rounded reader, so values equal `float()`
exactly; a spelling it does not read is reported back as the pair that holds it, for the field
reader to name.
"""

from __future__ import annotations

import numpy as np

from difftest.trace import grammar as g


class NotNumbers(ValueError):
    """Some pair of the block is not `int:float` (the field reader finds which)."""


def read_pairs(joined: bytes, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids int32, values float64, per-row digits int8) of `joined`: the rows' `id:value`
    items in order, separated by spaces; `widths` says how many items each row has."""
    total = int(widths.sum())
    text = joined.replace(b":", b" ")
    try:
        flat = np.fromstring(text, dtype=np.float64, sep=" ") if text.strip() else np.zeros(0)
    except ValueError:  # numpy stops at the first spelling it cannot read
        flat = np.zeros(0)
    if flat.size != 2 * total:
        raise NotNumbers()
    pairs = flat.reshape(total, 2)
    ids = pairs[:, 0]
    bad = (ids < g.INT32_MIN) | (ids > g.INT32_MAX)
    if bad.any():
        raise NotNumbers()
    values = np.ascontiguousarray(pairs[:, 1])
    nan = np.flatnonzero(np.isnan(values))
    if nan.size:  # numpy drops the sign of `-nan`; float() keeps it
        a = np.frombuffer(joined, dtype=np.uint8)
        start = _value_starts(a)[nan]
        values[nan[a[start] == 45]] = -np.nan
    return ids.astype(np.int32), values, row_sig_digits(joined, widths, values)


def _value_starts(a: np.ndarray) -> np.ndarray:
    """Where each value of `id:value id:value ...` starts (the byte after each colon)."""
    return np.flatnonzero(a == 58) + 1


def row_sig_digits(joined: bytes, widths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row, the most significant mantissa digits among its finite values (int8), counted on
    the printed text: `joined` holds the rows' `id:value` items in order, separated by spaces,
    already read into `values`. Vectorised over the whole chunk; equal to `g.sig_digits` per
    item (the reference) and to the compiled scanner's count."""
    a = np.frombuffer(joined, dtype=np.uint8)
    sep = np.flatnonzero((a == 32) | (a == 58))
    after_colon = np.flatnonzero(a[sep] == 58)
    start = sep[after_colon] + 1
    end = np.append(sep, a.size)[after_colon + 1]
    n = start.size
    mant_end = end.copy()
    if n:
        exp_at = np.flatnonzero((a | 32) == 101)  # `e`/`E`: only values carry them
        if exp_at.size:
            owner = np.searchsorted(start, exp_at, side="right") - 1
            mant_end[owner[::-1]] = exp_at[::-1]  # the first `e` of a token wins
    lead = a[np.minimum(start, max(a.size - 1, 0))] if n else np.zeros(0, np.uint8)
    sign = ((lead == 45) | (lead == 43)).astype(np.int64)
    has_dot = (np.add.reduceat(a == 46, start).astype(np.int64) if n
               else np.zeros(0, np.int64))
    digits = mant_end - start - sign - has_dot
    # leading zeros (and the dot among them): walk only the tokens that start with one
    first = start + sign
    zeros = np.zeros(n, dtype=np.int64)
    active = np.flatnonzero(((a[np.minimum(first, max(a.size - 1, 0))] == 48)
                             | (a[np.minimum(first, max(a.size - 1, 0))] == 46))
                            & (first < mant_end)) if n else np.zeros(0, np.int64)
    at = first[active]
    while active.size:
        c = a[at]
        zero = c == 48
        zeros[active[zero]] += 1
        keep = (zero | (c == 46)) & (at + 1 < mant_end[active])
        active = active[keep]
        at = at[keep] + 1
    sig = np.maximum(digits - zeros, 1)
    sig[~np.isfinite(values)] = 0
    out = np.zeros(widths.size, dtype=np.int8)
    filled = widths > 0
    if n and filled.any():
        starts = (np.cumsum(widths) - widths)[filled]
        out[filled] = np.minimum(np.maximum.reduceat(sig, starts), 127)
    return out
