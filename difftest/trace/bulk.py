"""The pure-Python reader's bulk path: in a block of complete lines, the `[spec-logits]` lines in
the producer's canonical spelling are found, checked and read with numpy passes over the
block's bytes, with no Python object per line or per number.

The canonical line is `[spec-logits] req=NAME pos=P row=R top=[ id:value id:value ... ]` with
single spaces between fields, any number of spaces between items and nothing after the `]`. A
line that starts like one but is not spelled exactly so, or holds a value the bulk path does
not read, is left to the field reader, which reads every spelling the format allows and names
what is wrong. The bulk path only ever takes lines the field reader would read to the same
values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftest.trace import grammar as g
from difftest.trace import numbers

_HEAD = g.TAG_LOGITS + b" req="
_SPACE, _COLON, _BRACKET, _CLOSE, _NEWLINE = 32, 58, 91, 93, 10
NAME_BYTES = 64  # a longer request name is left to the field reader
_CONTROL = np.zeros(256, dtype=bool)
_CONTROL[:33] = True  # whitespace and control bytes (the name ends at the first space)
_CONTROL[127] = True
_NOT_DIGIT = np.ones(256, dtype=bool)
_NOT_DIGIT[48:58] = False
POS_DIGITS = 13  # what the field reader's position bound allows, and an exact double
ROW_DIGITS = 10


@dataclass(frozen=True)
class LogitLines:
    """The lines of a block read in bulk, in line order."""

    index: np.ndarray  # int64: the line's index in the block
    names: list[bytes]  # each row's request name
    pos: np.ndarray  # int64
    row: np.ndarray  # int32
    width: np.ndarray  # int32: items in the row's top list
    digits: np.ndarray  # int8: most significant printed digits among the row's finite values
    ids: np.ndarray  # int32, the rows' items in order
    values: np.ndarray  # float64, equal to float() of each printed value


def line_bounds(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, newline) offsets of every line of a block that ends with a newline."""
    ends = np.flatnonzero(a == _NEWLINE)
    starts = np.empty_like(ends)
    if ends.size:
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    return starts, ends


def read_logit_lines(buf: bytes, a: np.ndarray, starts: np.ndarray,
                     ends: np.ndarray) -> LogitLines:
    """Read the canonical `[spec-logits]` lines among the block's lines (`a` views `buf`)."""
    line = _with_prefix(a, starts, ends, _HEAD)
    s_req, end = starts[line] + len(_HEAD), ends[line]
    # req=NAME: no whitespace or control byte, not starting with `[`
    e_req = _next_space(a, s_req, end, NAME_BYTES + 1)
    ok = (e_req > s_req) & (e_req < end) & (e_req - s_req <= NAME_BYTES)
    ok &= a[np.minimum(s_req, a.size - 1)] != _BRACKET
    ok &= ~_any_byte(a, s_req, np.where(ok, e_req, s_req), _CONTROL)
    # pos=P row=R: plain digits
    s_pos, e_pos, good = _int_field(a, e_req, b" pos=", POS_DIGITS, end)
    ok &= good
    s_row, e_row, good = _int_field(a, e_pos, b" row=", ROW_DIGITS, end)
    ok &= good
    # top=[ ... ]: the `]` ends the line
    ok &= _literal(a, e_row, b" top=[")
    s_top, e_top = e_row + 6, end - 1
    ok &= (e_top >= s_top) & (a[np.maximum(e_top, 0)] == _CLOSE)

    keep = np.flatnonzero(ok)
    line, s_req, e_req, s_top, e_top = (x[keep] for x in (line, s_req, e_req, s_top, e_top))
    pos = numbers.small_ints(a, s_pos[keep], e_pos[keep])
    row = numbers.small_ints(a, s_row[keep], e_row[keep])
    ok = (pos <= g.POS_LIMIT - 1) & (row <= g.INT32_MAX)

    items = _items(buf, s_top, e_top)
    ok &= items.row_ok
    rows = np.flatnonzero(ok)
    take = ok[items.row_of]
    width = np.bincount(items.row_of[take], minlength=len(ok))[rows].astype(np.int32)
    return LogitLines(
        index=line[rows], names=[buf[s:e] for s, e in zip(s_req[rows].tolist(),
                                                           e_req[rows].tolist(), strict=True)],
        pos=pos[rows], row=row[rows].astype(np.int32), width=width,
        digits=numbers.row_max(items.sig[take], width),
        ids=items.ids[take], values=items.values[take])


@dataclass(frozen=True)
class _Items:
    row_ok: np.ndarray  # bool per row: every item read
    row_of: np.ndarray  # the row of each item
    ids: np.ndarray
    values: np.ndarray
    sig: np.ndarray


def _items(buf: bytes, s_top: np.ndarray, e_top: np.ndarray) -> _Items:
    """The `id:value` items between each row's `[` and `]`: spaces between items, one colon
    inside each, an int32 id and a value `float()` reads."""
    nrows = s_top.size
    # the payloads with their `]`, joined into one compact array: every pass below runs over
    # the payload bytes only
    p = np.frombuffer(b"".join([buf[s:e] for s, e in zip(s_top.tolist(), (e_top + 1).tolist(),
                                                          strict=True)]), dtype=np.uint8)
    length = e_top + 1 - s_top
    e_top = np.cumsum(length) - 1  # each row's `]` in p
    s_top = e_top + 1 - length
    closes = np.flatnonzero(p == _CLOSE)
    row_ok = np.ones(nrows, dtype=bool)
    if closes.size != nrows:  # a `]` inside a top list: the field reader names it
        inner = closes[~np.isin(closes, e_top, assume_unique=True)]
        row_ok[np.searchsorted(s_top, inner, side="right") - 1] = False
    body = (p != _SPACE) & (p != _COLON) & (p != _CLOSE)
    edge = np.diff(body.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    t_start, t_end = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    t_row = np.searchsorted(s_top, t_start, side="right") - 1
    per_row = np.bincount(t_row, minlength=nrows)
    row_ok &= per_row % 2 == 0
    # one colon per item: a colon before an id or on its own (`[ :1:2 ]`, `[ : ]`) is no item
    colons = np.flatnonzero(p == _COLON)
    row_ok &= np.bincount(np.searchsorted(s_top, colons, side="right") - 1,
                          minlength=nrows) == per_row // 2
    first = np.cumsum(per_row) - per_row
    is_id = (np.arange(t_start.size) - first[t_row]) % 2 == 0
    is_id &= (per_row % 2 == 0)[t_row]  # rows with an odd count are refused whole
    i_tok = np.flatnonzero(is_id)
    v_tok = i_tok + 1
    # id:value, tight around one colon; a space or the `]` after the value
    after = p[t_end[v_tok]]
    tight = ((p[t_end[i_tok]] == _COLON) & (t_start[v_tok] == t_end[i_tok] + 1)
             & ((after == _SPACE) | (after == _CLOSE)))
    row_of = t_row[i_tok]

    digit_count = numbers.running_count((p - np.uint8(48)) < 10)
    mant, ndig, frac = numbers.mantissas(p, t_start, t_end, digit_count)
    first_byte = p[t_start]
    neg = first_byte == 45
    signed = neg | (first_byte == 43)
    length = t_end - t_start
    ids = mant[i_tok]
    ids[neg[i_tok]] *= -1
    id_ok = ((length[i_tok] == ndig[i_tok] + signed[i_tok]) & (ndig[i_tok] >= 1)
             & (ndig[i_tok] <= numbers.ID_DIGITS) & (ids >= g.INT32_MIN) & (ids <= g.INT32_MAX))
    values, sig, value_ok = numbers.values(
        p, t_start[v_tok], t_end[v_tok], mant[v_tok], ndig[v_tok], frac[v_tok],
        neg[v_tok], signed[v_tok])
    bad_rows = row_of[~(tight & id_ok & value_ok)]
    row_ok[bad_rows] = False
    return _Items(row_ok, row_of, np.where(id_ok, ids, 0).astype(np.int32), values, sig)


def tagged_lines(buf: bytes, a: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Indices of the lines that start with a known tag or hold one past their start (a
    misplaced tag: the field reader names it). Per tag, occurrences are looked up one by one
    only when the block holds more of them than lines that start with it."""
    lead = np.flatnonzero(a[starts] == _BRACKET)
    found = []
    for tag in g.KNOWN_TAGS:
        at_start = lead[_with_prefix(a, starts[lead], ends[lead], tag)]
        found.append(at_start)
        if buf.count(tag) > at_start.size:
            occurrences = []
            at = buf.find(tag)
            while at >= 0:
                occurrences.append(at)
                at = buf.find(tag, at + 1)
            where = np.asarray(occurrences, dtype=np.int64)
            line = np.searchsorted(starts, where, side="right") - 1
            found.append(line[where != starts[line]])
    return np.concatenate(found)


def marked_lines(buf: bytes, starts: np.ndarray) -> np.ndarray:
    """Indices of the lines holding an engine-error or notice prefix anywhere (behind a
    launcher's or logger's prefix, or an unknown one: the field reader tells them apart)."""
    found = []
    for marker in (g.ENGINE_ERROR_PREFIX, g.NOTICE_PREFIX):
        at = buf.find(marker)
        while at >= 0:
            found.append(at)
            at = buf.find(marker, at + 1)
    if not found:
        return np.zeros(0, dtype=np.int64)
    where = np.asarray(found, dtype=np.int64)
    return np.unique(np.searchsorted(starts, where, side="right") - 1)


def _with_prefix(a: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 prefix: bytes) -> np.ndarray:
    """Indices of the lines that start with `prefix`."""
    cand = np.flatnonzero((ends - starts >= len(prefix)) & (a[starts] == prefix[0]))
    at = starts[cand]
    for k in range(1, len(prefix)):
        hit = a[at + k] == prefix[k]
        cand, at = cand[hit], at[hit]
    return cand


def _literal(a: np.ndarray, at: np.ndarray, text: bytes) -> np.ndarray:
    """Per offset, whether `text` is spelled there (offsets near the end never match)."""
    ok = at + len(text) <= a.size
    safe = np.where(ok, at, 0)
    for k, ch in enumerate(text):
        ok &= a[safe + k] == ch
    return ok


def _next_space(a: np.ndarray, at: np.ndarray, end: np.ndarray, most: int) -> np.ndarray:
    """Per offset, the first space at or after it, looking at most `most` bytes and never
    past `end` (the line's newline); `end` when there is none so near."""
    found = end.copy()
    live = np.flatnonzero(at < end)
    for k in range(most):
        if not live.size:
            break
        pos = at[live] + k
        inside = pos < end[live]
        hit = inside & (a[np.where(inside, pos, 0)] == _SPACE)
        found[live[hit]] = pos[hit]
        live = live[inside & ~hit]
    return found


def _int_field(a: np.ndarray, at: np.ndarray, name: bytes,
               max_digits: int, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """` name=DIGITS` at each offset: (value start, value end, spelled so)."""
    start = np.minimum(at + len(name), end)
    stop = _next_space(a, start, end, max_digits + 1)
    n = stop - start
    ok = _literal(a, at, name) & (n >= 1) & (n <= max_digits) & (stop < end)
    ok &= ~_any_byte(a, start, np.where(ok, stop, start), _NOT_DIGIT)
    return start, stop, ok


def _any_byte(a: np.ndarray, start: np.ndarray, stop: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Per range a[start:stop] (short), whether any of its bytes is marked in `table`."""
    found = np.zeros(start.size, dtype=bool)
    width = stop - start
    for k in range(int(width.max()) if width.size else 0):
        live = width > k
        found |= live & table[a[np.where(live, start + k, 0)]]
    return found
