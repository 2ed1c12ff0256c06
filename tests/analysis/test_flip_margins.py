"""The flip margin of each row, looked up a column at a time, is the one its definition gives
row by row; the distinct blocks of rows in block order are numpy's unique ones; the paired top
lists gathered when first read are those gathered at once; the largest value of lines read a
block at a time is the one of them all."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.analysis import compare as compare_module
from difftest.analysis.compare import TakenRows, _flip_margins, distinct_sorted
from difftest.core.model import LogitRows
from difftest.numerics.tolerance import finite_max
from tests.swap import swapped


def _definition(ids: list[int], vals: list[float], width: int, own: int, other: int) -> float:
    """`_flip_margins` of one row, as its docstring says."""
    def value_of(token: int) -> float:
        return next((vals[j] for j in range(width) if ids[j] == token), math.nan)

    if width < 2:
        return math.nan
    own_v, other_v = value_of(own), value_of(other)
    if math.isnan(own_v):
        return math.inf
    if math.isnan(other_v):
        last = min((v for v in vals[:width] if not math.isnan(v)), default=math.inf)
        gap = math.nan if math.isinf(last) else own_v - last
    else:
        gap = abs(own_v - other_v)  # nan for two equal infinities
    return math.inf if math.isnan(gap) else gap


@pytest.mark.parametrize("block", [1, 3, 1 << 15])
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_flip_margins_are_their_definition_row_by_row(block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines, k = int(rng.integers(1, 12)), int(rng.integers(1, 6))
    pool = np.array([0.0, 1.0, 2.5, -3.0, 7.25, np.nan, np.inf, -np.inf])
    width = rng.integers(0, k + 1, size=lines)
    ids = rng.integers(0, 6, size=(lines, k)).astype(np.int32)
    vals = -np.sort(-rng.choice(pool, size=(lines, k)), axis=1)
    ids[np.arange(k)[None, :] >= width[:, None]] = -1
    arm: Any = SimpleNamespace(logits=SimpleNamespace(top_ids=ids, top_vals=vals, width=width))
    n = int(rng.integers(1, 20))
    at = rng.integers(0, lines, size=n)
    sel = rng.integers(0, 4, size=n) > 0
    own = rng.integers(-1, 6, size=n)
    other = np.where(rng.integers(0, 2, size=n) > 0, own, rng.integers(-1, 6, size=n))
    with swapped(compare_module, _LOGIT_BLOCK_ROWS=block):  # rows taken a block at a time
        got = _flip_margins(arm, at, sel, own, other)
    for i in range(n):
        want = (_definition(ids[at[i]].tolist(), vals[at[i]].tolist(), int(width[at[i]]),
                            int(own[i]), int(other[i])) if sel[i] else math.nan)
        assert (math.isnan(want) and math.isnan(got[i])) or got[i] == want, (i, got[i], want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=40), st.integers(0, 2**32 - 1))
def test_distinct_blocks_of_sorted_rows_are_numpys_unique(steps: list[int], seed: int) -> None:
    step = np.sort(np.array(steps, dtype=np.int64))
    mask = np.random.default_rng(seed).integers(0, 2, size=step.size).astype(bool)
    got, want = distinct_sorted(step[mask]), np.unique(step[mask])
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([None, 6, 9]))
def test_taken_rows_read_whole_are_the_rows_gathered_at_once(seed: int,
                                                             digits: int | None) -> None:
    """A comparison's paired top lists gather each array when first read: the arrays a
    gather of every row at once gives, widened alike."""
    rng = np.random.default_rng(seed)

    def arm(n: int, k: int) -> LogitRows:
        vals = rng.choice(np.array([1.25, -3.5, 5.123456789, np.nan]), size=(n, k))
        return LogitRows(np.zeros(n, np.int32), np.zeros(n, np.int64), np.ones(n, np.int32),
                         rng.integers(-1, 9, size=(n, k)).astype(np.int32), vals,
                         np.full(n, k, np.int32), np.zeros(n, np.int64), np.zeros(n, np.int8))

    a, b = arm(7, int(rng.integers(1, 4))), arm(5, int(rng.integers(1, 4)))
    m = int(rng.integers(0, 10))
    taken = TakenRows(a, rng.integers(0, 7, size=m), b, rng.integers(0, 5, size=m),
                      (digits, 6))
    whole = taken.block(slice(None))
    for name in ("ids_a", "vals_a", "ids_b", "vals_b"):
        assert np.array_equal(getattr(taken, name), getattr(whole, name), equal_nan=True)
    first_a, first_b = taken.first_ids()
    assert first_a.tolist() == whole.ids_a[:, 0].tolist()
    assert first_b.tolist() == whole.ids_b[:, 0].tolist()
    wide, want = taken.widened(), whole.widened()
    for name in ("ids_a", "vals_a", "ids_b", "vals_b"):
        assert np.array_equal(getattr(wide, name), getattr(want, name), equal_nan=True)


@pytest.mark.parametrize("block", [1, 2, 3, 1 << 15])
@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_largest_value_of_lines_read_in_blocks_is_the_one_of_them_all(
        block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.choice(np.array([0.0, -0.0, 1.5, -7.25, np.nan, np.inf, -np.inf]),
                        size=(int(rng.integers(1, 9)), int(rng.integers(1, 4))))
    lines = rng.integers(0, values.shape[0], size=int(rng.integers(0, 12)))
    with swapped(compare_module, _LOGIT_BLOCK_ROWS=block):
        got = compare_module._largest_abs(values, lines)
    assert got == finite_max(np.abs(values[lines]).ravel())


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_logit_rows_found_by_table_are_those_the_sorted_search_finds(seed: int,
                                                                     twice: bool) -> None:
    """Where every key names one row the table of keys answers, elsewhere the sorted keys are
    searched: the same row (the first of the trace) wherever one is found."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    req, pos = rng.integers(0, 3, size=n), rng.integers(0, 9, size=n)
    row = rng.integers(1, 5, size=n)
    if not twice:  # each (req, pos, row) once
        _, first = np.unique(np.stack([req, pos, row]), axis=1, return_index=True)
        req, pos, row = req[first], pos[first], row[first]
    arm: Any = SimpleNamespace(logits=SimpleNamespace(req=req, pos=pos, row=row))
    keys_of = compare_module._RowKeys(9, 5)
    space = 3 * 9 * 5
    want = rng.integers(0, space, size=int(rng.integers(0, 40)))
    tables: list[np.ndarray] = []
    got = compare_module._find_rows(arm, np.arange(3), keys_of, space, want, tables)
    # the table is left as found for the next arm: every entry -1 again
    assert all((t == -1).all() for t in tables)
    again = compare_module._find_rows(arm, np.arange(3), keys_of, space, want, tables)
    assert again[1].tolist() == got[1].tolist()
    assert again[0][got[1]].tolist() == got[0][got[1]].tolist()
    with swapped(compare_module, _DENSE_KEYS_PER_ROW=0, _DENSE_KEYS_MIN=0):
        searched = compare_module._find_rows(arm, np.arange(3), keys_of, space, want, [])
    keys = keys_of(req, pos, row)
    assert got[1].tolist() == searched[1].tolist() == np.isin(want, keys).tolist()
    assert got[0][got[1]].tolist() == searched[0][got[1]].tolist()
    assert all(keys[i] == k and not (keys[:i] == k).any()
               for i, k in zip(got[0][got[1]].tolist(), want[got[1]].tolist(), strict=True))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(1, 4),
                          st.booleans()), max_size=12))
def test_a_table_of_blocks_is_ordered_as_its_rows_sorted(blocks: list[tuple[int, int, int,
                                                                             bool]]) -> None:
    """Blocks of rows sorted by their (req, pos) keys, each keeping its rows: the order of
    np.lexsort over every row, or no order where that cannot hold (a key twice, rows out of
    order in a block)."""
    req: list[int] = []
    pos: list[int] = []
    row: list[int] = []
    for r, p, k, backwards in blocks:
        rows = list(range(1, k + 1))
        row += rows[::-1] if backwards else rows
        req += [r] * k
        pos += [p] * k
    a, b, c = (np.array(x, dtype=np.int64) for x in (req, pos, row))
    order = compare_module._block_order(a, b, c)
    want = np.lexsort((c, b, a))
    keys = [(r, p) for r, p, _, _ in blocks]
    if order is None:
        assert len(set(keys)) < len(keys) or any(bw and k > 1 for _, _, k, bw in blocks)
    else:
        assert order.tolist() == want.tolist()
