"""The CSV diff joins its rows itself, with the csv module quoting only the texts: every line is
what the csv module would write for the same cells."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest import api
from difftest.report import comparison
from difftest.report.comparison import csv_text

DATA = Path(__file__).parents[1] / "data" / "compare"


def test_the_csv_is_what_the_csv_module_writes_for_its_cells(tmp_path: Path) -> None:
    again = tmp_path / "hostile-again.log"  # request ids with quotes, commas and formulas
    again.write_text((DATA / "hostile.log").read_text() + "[spec-config] build=second\n")
    for a, b in ((DATA / "hostile.log", again), (DATA / "agree_a.log", DATA / "shift_b.log")):
        text = csv_text(api.compare_traces(a, b))
        cells = list(csv.reader(io.StringIO(text)))
        assert len(cells) > 5 and all(len(row) == 12 for row in cells)
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(cells)
        assert text == out.getvalue()
    assert '"\'=HYPERLINK(""http://evil.example/x"",""click"")"' in csv_text(
        api.compare_traces(DATA / "hostile.log", again))


def test_the_csv_written_in_blocks_of_rows_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    rep = api.compare_traces(DATA / "agree_a.log", DATA / "shift_b.log")
    whole = csv_text(rep)
    for rows in (1, 2, 3, 7):
        monkeypatch.setattr(comparison, "CSV_BLOCK_ROWS", rows)
        assert csv_text(rep) == whole, rows


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, -0.0, 1.5, 2.87758, 1e-300, -7.0, math.nan,
                                           math.inf, -math.inf]),
                          st.sampled_from([0.0, -0.0, 1.5, 2.87758, math.nan, -math.inf]),
                          st.booleans()), max_size=20))
def test_cells_taken_from_the_other_arm_are_those_formatted(rows: list[tuple[float, float,
                                                                             bool]]) -> None:
    """B's margin or logit cell is A's where the two doubles have the same bits (a zero's sign
    included), else formatted: the cells formatting every value gives."""
    a = np.array([x for x, _, _ in rows], dtype=np.float64)
    b = np.array([x if same else y for x, y, same in rows], dtype=np.float64)
    cells_a = comparison._float_cells(a)
    assert comparison._float_cells_as(b, a, cells_a) == comparison._float_cells(b)
