"""Traces whose logits lie near either end of the doubles' range are judged and reported like
any other pair. Near the largest double (the committed agree/differ pair, every logit times
1.5e306): exit 1 for the token that differs, every output written, and no warning on the way;
their request sums, squares and log axes pass the range, and once stopped the analysis (fsum's
intermediate overflow) and the page's |diff| map (a colour scale whose end was infinite).
Near the smallest (times 1e-200 and 1e-306): the logits are compared, their quanta being
subnormal at 1e-306 (1 / quantum is infinite, and every row was "not compared"), and the page
is drawn."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import pytest

from difftest import api
from difftest.core.errors import ExitCode
from difftest.report.comparison import render

DATA = Path(__file__).resolve().parent.parent / "data" / "compare"
SCALE = 1.5e306


def _scaled(source: Path, out: Path, scale: float = SCALE) -> Path:
    text = source.read_text()
    out.write_text(re.sub(r"(-?\d+):(-?[\d.]+)",
                          lambda m: f"{m.group(1)}:{float(m.group(2)) * scale:.6g}", text))
    return out


@pytest.mark.parametrize("scale", [SCALE, 1.9e307])
def test_logits_near_the_largest_double_are_judged_and_reported(tmp_path: Path,
                                                               scale: float) -> None:
    """At 1.9e307 the sum of the 21 rows' |diff| passes the range; their mean does not."""
    a = _scaled(DATA / "agree_a.log", tmp_path / "a.log", scale)
    b = _scaled(DATA / "differ_b.log", tmp_path / "b.log", scale)
    assert "e+30" in a.read_text()  # the scaling reached the logits
    csv, page = tmp_path / "rows.csv", tmp_path / "page.html"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = api.compare(traces=api.Traces(a, b), outputs=api.Outputs(csv, page))
        table, as_json = render(report, "table"), render(report, "json")
    assert report.exit_code is ExitCode.DIFFER
    assert "DIFFER" in table and json.loads(as_json)["verdict"] == "differ"
    assert csv.read_text().count("\n") > 1 and "<img" in page.read_text()
    assert report.comparison is not None and report.comparison.logits is not None
    stats = report.comparison.logits.stats
    assert stats is not None and stats.mean_abs is not None and stats.mean_abs < math.inf


@pytest.mark.parametrize("scale", [1e-200, 1e-306])
def test_logits_near_the_smallest_double_are_compared_and_drawn(tmp_path: Path,
                                                                scale: float) -> None:
    """At 1e-200 a log axis's span once underflowed to 0 (the page was not written); at 1e-306
    the quanta are subnormal."""
    same_a = _scaled(DATA / "agree_a.log", tmp_path / "a.log", scale)
    same_b = _scaled(DATA / "agree_b.log", tmp_path / "b.log", scale)
    differ_b = _scaled(DATA / "differ_b.log", tmp_path / "differ_b.log", scale)
    assert "e-" in same_a.read_text()
    page = tmp_path / "page.html"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = api.compare(traces=api.Traces(same_a, same_b))
        table = render(same, "table")
        differ = api.compare(traces=api.Traces(same_a, differ_b), outputs=api.Outputs(html=page))
    assert same.exit_code is ExitCode.OK
    assert "could have failed through: tokens, logits" in table
    assert "21 logit row(s) compared" in table and "max |d| 0," in table
    assert differ.exit_code is ExitCode.DIFFER and "<img" in page.read_text()


def _one_row_scaled(source: Path, out: Path, scale: float, row: int = 5) -> Path:
    lines = source.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith("[spec-logits]")][row]
    lines[at] = re.sub(r"(-?\d+):(-?[\d.]+)",
                       lambda m: f"{m.group(1)}:{float(m.group(2)) * scale:.6g}", lines[at])
    out.write_text("".join(lines))
    return out


def test_a_row_far_beyond_the_others_is_drawn(tmp_path: Path) -> None:
    """One row times 1e290 among ordinary ones: a log axis over some 290 decades, on which
    matplotlib's tick locator overflowed (the page was not written)."""
    a = _one_row_scaled(DATA / "agree_a.log", tmp_path / "a.log", 1e290)
    b = _one_row_scaled(DATA / "differ_b.log", tmp_path / "b.log", 1e290)
    page = tmp_path / "page.html"
    report = api.compare(traces=api.Traces(a, b), outputs=api.Outputs(html=page))
    assert report.exit_code is ExitCode.DIFFER and "<img" in page.read_text()


def test_a_long_request_name_is_shortened_in_the_figures(tmp_path: Path) -> None:
    """A 20,000-character request name: the tables give it whole, the figures' titles a
    shortened one (matplotlib draws each glyph; a 1 MiB name made a 230 MB page)."""
    name = "n" * 20_000
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text((DATA / "agree_a.log").read_text().replace("req=b ", f"req={name} "))
    b.write_text((DATA / "differ_b.log").read_text().replace("req=b ", f"req={name} "))
    page = tmp_path / "page.html"
    report = api.compare(traces=api.Traces(a, b), outputs=api.Outputs(html=page))
    assert report.exit_code is ExitCode.DIFFER and name in page.read_text()
    assert page.stat().st_size < 1_000_000
