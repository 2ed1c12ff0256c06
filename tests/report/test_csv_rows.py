"""The CSV diff's compiled row writer (difftest/report/_csvrows.c) writes the bytes the Python
rows give: every float as format(x, ".9g"), whatever the value, and every block of rows the
same; without it the CSV is written in Python."""

from __future__ import annotations

import math
import os
import platform
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from difftest import api
from difftest.analysis.compare import STATUS_NAMES, LogitJudgement, RowTable
from difftest.report import comparison
from tests import c_builds

DATA = Path(__file__).parents[1] / "data" / "compare"
SOURCE = Path(__file__).resolve().parents[2] / "difftest" / "report" / "_csvrows.c"
needs_compiled = pytest.mark.skipif(not comparison.csv_fast_path_available(),
                                    reason="the compiled CSV writer is not built")
compiled: Any = comparison._csvrows


def ties() -> st.SearchStrategy[float]:
    """Doubles exactly halfway between two 9-digit decimals: 10-digit integers ending in 5
    (times powers of ten, still exact), and odd / 2**t whose decimal expansion has 10 digits."""
    integers = st.builds(lambda n, j, neg: (-1.0 if neg else 1.0) * float((10 * n + 5) * 10**j),
                         st.integers(10**8, 10**9 - 1), st.integers(0, 6), st.booleans())

    def dyadic(t: int, frac: float, neg: bool) -> float:
        lo, hi = -(-10**9 // 5**t), (10**10 - 1) // 5**t
        odd = lo + int(frac * (hi - lo))
        odd += 1 - odd % 2
        return (-1.0 if neg else 1.0) * odd / 2**t

    fractions = st.builds(dyadic, st.integers(1, 13), st.floats(0, 1), st.booleans())
    return st.one_of(integers, fractions)


EDGES = [0.0, -0.0, math.inf, -math.inf, 5e-324, -5e-324, 2.2250738585072014e-308,
         2.225073858507201e-308, 1.7976931348623157e308, -1.7976931348623157e308,
         1234567885.0, 1234567895.0, 123456788.5, 123456789.5, 999999999.5, 99999999.95,
         9.9999999949999, 9.999999995, 0.99902343750, 1e-5, 1e-4, 9.99999999e-5, 0.0001234567891,
         123456789.0, 1234567890.0, 1e9, 1e8, 1e16, 1e22, 1e23, 2.0**127, 2.0**128, 2.0**-60,
         2.0**-1074, 1e-22, 1e-23, 1e-300, 1e300, 0.1, 0.3, 2.87758, 8.10159, 1 / 3]


@needs_compiled
@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.floats(), st.floats(-1e40, 1e40), st.floats(-1e-15, 1e-15), ties()))
@example(math.nan)
def test_each_float_is_formatted_as_python_formats_it(x: float) -> None:
    text, _ = compiled.format_float(x)
    assert text == (b"" if math.isnan(x) else format(x, ".9g").encode()), x


@needs_compiled
def test_the_edges_and_the_powers_of_ten() -> None:
    values = list(EDGES)
    for k in range(-330, 310):
        p = float(f"1e{k}")
        values += [p, math.nextafter(p, 0.0), math.nextafter(p, math.inf)]
    values += [-x for x in values]
    wrong = [x for x in values if compiled.format_float(x)[0].decode() != format(x, ".9g")]
    assert not wrong, wrong[:5]


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(st.one_of(ties(), st.floats(1e-22, 1e49), st.floats(-1e49, -1e-22)))
@example(1e-22)
@example(-1e49)
@example(9.999999999999999e48)
def test_the_integer_path_formats_the_usual_range_and_the_ties(x: float) -> None:
    """What the tests above hold is the compiled integer path, not CPython's formatter that
    it falls back to: every double of magnitude 1e-22 to 1e49 (any logit or margin) and every
    halfway case takes that path."""
    assert compiled.format_float(x)[1], x


@contextmanager
def block_rows(n: int) -> Iterator[None]:
    was = comparison.CSV_BLOCK_ROWS
    comparison.CSV_BLOCK_ROWS = n
    try:
        yield
    finally:
        comparison.CSV_BLOCK_ROWS = was


FLOATS = st.one_of(st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1234567885.0]),
                   st.floats(), st.floats(-100, 100))
ROW = st.tuples(st.integers(0, 2), st.integers(-2**63, 2**63 - 1), st.integers(-5, 10**6),
                st.integers(-1, 2**40), st.integers(-2**63, 2**63 - 1), st.booleans(),
                st.booleans(), st.integers(0, len(STATUS_NAMES) - 1), FLOATS, FLOATS, FLOATS,
                FLOATS, FLOATS, st.booleans(), st.booleans(), st.booleans(), st.booleans())


def row_table(rows: list[tuple[Any, ...]]) -> RowTable:
    """Rows of generated cells; B's margin and logit are A's (same bits) where a flag says so."""
    col = list(zip(*rows, strict=True)) if rows else [()] * 17

    def a(i: int, dtype: Any) -> np.ndarray:
        return np.array(col[i], dtype=dtype)

    margin_a, logit_a = a(8, np.float64), a(10, np.float64)
    margin_b = np.where(a(13, bool), margin_a, a(9, np.float64))
    logit_b = np.where(a(14, bool), logit_a, a(11, np.float64))
    n = len(rows)
    return RowTable(req=a(0, np.int64), pos=a(1, np.int64), row=a(2, np.int64),
                    token_a=a(3, np.int64), token_b=a(4, np.int64), has_a=a(5, bool),
                    has_b=a(6, bool), status=a(7, np.int8), margin_a=margin_a, margin_b=margin_b,
                    logit_a=logit_a, logit_b=logit_b, abs_logit_diff=a(12, np.float64),
                    logit_differs=a(15, bool), logit_unresolved=a(16, bool),
                    resolved_logit_diff=np.full(n, np.nan), flip_margin_a=np.full(n, np.nan),
                    flip_margin_b=np.full(n, np.nan))


def both_writers(r: RowTable) -> tuple[bytes, bytes]:
    names = comparison._csv_cells(["req,0", "r\u00e9q \"1\"", "=cmd"])
    status = comparison._csv_cells(list(STATUS_NAMES))
    judgement = comparison._csv_cells([k.value for k in LogitJudgement])
    codes = r.logit_judgement_codes()
    py = "".join(comparison._csv_blocks_py(r, names, status, judgement, codes)).encode()
    return b"".join(comparison._csv_blocks_compiled(r, names, status, judgement, codes)), py


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(ROW, max_size=40), st.integers(1, 50))
def test_the_compiled_rows_are_the_python_rows(rows: list[tuple[Any, ...]], block: int) -> None:
    with block_rows(block):
        got, want = both_writers(row_table(rows))
    assert got == want


@needs_compiled
def test_the_compiled_rows_of_committed_pairs_are_the_python_rows(tmp_path: Path) -> None:
    pairs = [(DATA / "agree_a.log", DATA / b) for b in ("agree_b.log", "differ_b.log",
                                                        "shift_b.log")]
    again = tmp_path / "hostile-again.log"  # request ids with quotes, commas and formulas
    again.write_text((DATA / "hostile.log").read_text() + "[spec-config] build=second\n")
    pairs.append((DATA / "hostile.log", again))
    for a, b in pairs:
        rep = api.compare_traces(a, b)
        assert comparison.csv_text(rep) == comparison.csv_text(rep, pure=True), (a, b)
        assert len(comparison.csv_text(rep).splitlines()) > 1


def test_ci_has_the_compiled_writer() -> None:
    """CI installs the package from source with a C compiler (.ci/run): the writer must be
    built there, where a failed optional build would otherwise only skip the tests above."""
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("outside CI a build without a compiler is allowed")
    assert comparison.csv_fast_path_available()


def test_without_the_compiled_writer_the_csv_is_written_in_python(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = api.compare_traces(DATA / "agree_a.log", DATA / "shift_b.log")
    want = comparison.csv_text(rep)
    python_blocks = comparison._csv_blocks_py
    calls: list[int] = []

    def counted(*args: Any) -> Iterator[str]:
        calls.append(1)
        return python_blocks(*args)

    monkeypatch.setattr(comparison, "_csv_blocks_py", counted)
    monkeypatch.setattr(comparison, "_csvrows", None)  # as if built without a compiler
    assert not comparison.csv_fast_path_available()
    assert comparison.csv_text(rep) == want
    comparison.write_csv(rep, tmp_path / "diff.csv")
    assert (tmp_path / "diff.csv").read_text(encoding="utf-8") == want
    assert len(calls) == 2


@needs_compiled
@pytest.mark.parametrize("columns, error", [
    (((0, np.zeros(3, np.int32), (b"x",)),), TypeError),  # int32 codes
    (((3, np.zeros(2)),), ValueError),  # fewer values than rows
    (((0, np.array([0, 1, 2], np.int64), (b"x",)),), IndexError),  # no cell 1
    (((0, np.zeros(3, np.int64), ("x",)),), TypeError),  # a str cell
    (((4, np.zeros(3), 0),), ValueError),  # FLOAT_AS of itself
    (((2, np.zeros(3, np.int64), np.zeros(3, np.int64)),), TypeError),  # an int mask
    (((9, np.zeros(3)),), ValueError),  # no such kind
    ((), ValueError),
])
def test_bad_columns_raise(columns: tuple[Any, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        compiled.rows(columns, 0, 3)


@pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="builds the writer with gcc")
@pytest.mark.parametrize("flags", [(), ("-U__SIZEOF_INT128__",)])
def test_each_build_writes_the_same_text(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """Built without warnings under -Wall -Wextra, and where the compiler has no 128-bit
    integers (every float then goes to CPython's formatter) the text is the same."""
    module = c_builds.built(SOURCE, "_csvrows", tmp_path, "-Wall", "-Wextra", "-Werror", *flags)
    rng = np.random.default_rng(5)
    values = np.concatenate([np.array(EDGES), rng.standard_normal(2000) * 10.0 ** rng.integers(
        -25, 25, 2000), np.frombuffer(rng.bytes(8 * 2000), np.float64)])
    wrong = [x for x in values.tolist()
             if module.format_float(x)[0] != (b"" if x != x else format(x, ".9g").encode())]
    assert not wrong, wrong[:5]
    assert all(module.format_float(x)[1] == (not flags) for x in (1.5, 2.87758, 1e-10))
    text = module.rows(((3, values), (4, values[::-1].copy(), 0)), 0, values.size)
    assert text == "".join(f"{comparison._float_cells(np.array([x]))[0]},"
                           f"{comparison._float_cells(np.array([y]))[0]}\n"
                           for x, y in zip(values.tolist(), values[::-1].tolist(),
                                           strict=True)).encode()


@needs_compiled
def test_one_long_name_sizes_its_own_rows_only() -> None:
    """A block of 65,536 rows, one of them naming a request of 1 MiB: the buffer holds each
    text cell at its own length (sized by the longest one per row, it asked for 64 GiB)."""
    codes = np.zeros(65_536, np.int64)
    codes[-1] = 1
    names = (b"r0", b"n" * 2**20)
    text = compiled.rows(((0, codes, names), (1, np.arange(65_536, dtype=np.int64))), 0, 65_536)
    assert len(text) == 65_535 * 3 + 2**20 + 1 + sum(len(str(i)) + 1 for i in range(65_536))
    assert text.endswith(b"n" * 2**20 + b",65535\n") and text.startswith(b"r0,0\nr0,1\n")
