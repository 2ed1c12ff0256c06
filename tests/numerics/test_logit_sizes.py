"""One size per name across the outputs: a 6-digit arm against a 9-digit one. The JSON's
`max_abs_logit_diff` and `logit_stats.max_abs` are one figure (differences on the grid of the
finer printed quantum, none when one side is exact, as the tolerance takes them), and a row
the printed resolution cannot judge is marked `unresolved` in the CSV and the HTML instead of
looking equal."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import difftest
from difftest.flow.evaluate import ComparisonReport
from difftest.report.comparison import csv_text, to_dict
from difftest.report.html import render_comparison

SIX = ("[spec-logits] req=r pos=1 row=1 top=[ 5:2.87761 6:1.5 ]\n"
       "[spec-logits] req=r pos=1 row=2 top=[ 7:3.25 8:1.25 ]\n"
       "[SPECTRACE] req=r pos=1 k=2 ns=1 acc=0 draft=[ 5 7 ] emit=[ 9 ]\n")
NINE = SIX.replace("5:2.87761 ", "5:2.87757945 ")  # %.9g of a float32


def _report(tmp_path: Path, atol: float) -> ComparisonReport:
    a, b = tmp_path / "six.log", tmp_path / "nine.log"
    a.write_text(SIX)
    b.write_text(NINE)
    return difftest.compare_traces(a, b, atol=atol)


def test_max_abs_logit_diff_and_the_statistics_give_one_size(tmp_path: Path) -> None:
    # The 9-digit print names one float32 exactly (2.8775794506...); against the 6-digit
    # 2.87761 the difference is 3.0549e-05, known to the printed half quantum (5e-06): with one
    # side exact there is no grid to snap to, and both outputs give the same figure.
    data = to_dict(_report(tmp_path, atol=2.7e-5))
    assert data["max_abs_logit_diff"] == 3.0549392699974476e-05
    assert data["logit_stats"]["max_abs"] == 3.0549392699974476e-05  # type: ignore[index]


def test_an_unresolved_row_is_marked_in_the_csv_and_the_html(tmp_path: Path) -> None:
    """|d| = 3.05e-05 +- 5e-06 against atol 2.7e-05: above or below, the print cannot say."""
    rep = _report(tmp_path, atol=2.7e-5)
    assert to_dict(rep)["logit_rows_unresolved"] == 1
    rows = list(csv.DictReader(io.StringIO(csv_text(rep))))
    assert [(r["row"], r["status"], r["abs_logit_diff"], r["logits"]) for r in rows] == [
        ("1", "same", "3.05493927e-05", "unresolved"), ("2", "same", "0", "same")]
    html = render_comparison(rep)
    assert "Logit-only differences: 1 row(s)" in html and "Token flips: none" in html
    assert ('<tr class="logit"><td>r</td><td class="n">1</td><td class="n">1</td>'
            '<td class="n">5</td><td class="n">5</td><td>same</td><td>unresolved</td>') in html


def test_a_resolved_difference_is_marked_differ(tmp_path: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(csv_text(_report(tmp_path, atol=1e-6)))))
    assert [r["logits"] for r in rows] == ["differ", "same"]


def test_a_row_with_a_nan_in_one_arm_keeps_its_finite_difference_in_the_size(
        tmp_path: Path) -> None:
    """The row differs without a finite size (nan against a number), but its other shared id
    moved by 0.25: the largest difference is infinite (JSON: null, with the reason; the table
    and the CSV: inf), and the statistics keep the largest finite one, 0.25."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(SIX.replace("5:2.87761 6:1.5", "5:2.5 6:nan"))
    b.write_text(SIX.replace("5:2.87761 6:1.5", "5:2.25 6:1"))
    data = to_dict(difftest.compare_traces(a, b))
    assert data["max_abs_logit_diff"] is None
    assert "differ without a finite size" in str(data["max_abs_logit_diff_unsized"])
    assert data["logit_stats"]["max_abs"] == 0.25  # type: ignore[index]
