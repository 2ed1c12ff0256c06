"""Two traces whose logits lie near the largest double (the committed agree/differ pair, every
logit times 1.5e306) are judged and reported like any other pair: exit 1 for the token that
differs, every output written, and no warning on the way. Their request sums, squares and log
axes pass the doubles' range; the sums once stopped the analysis (fsum's intermediate
overflow) and the page's |diff| map (a colour scale whose end was infinite)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

from difftest import api
from difftest.core.errors import ExitCode
from difftest.report.comparison import render

DATA = Path(__file__).resolve().parent.parent / "data" / "compare"
SCALE = 1.5e306


def _scaled(source: Path, out: Path) -> Path:
    text = source.read_text()
    out.write_text(re.sub(r"(-?\d+):(-?[\d.]+)",
                          lambda m: f"{m.group(1)}:{float(m.group(2)) * SCALE:.6g}", text))
    return out


def test_logits_near_the_largest_double_are_judged_and_reported(tmp_path: Path) -> None:
    a = _scaled(DATA / "agree_a.log", tmp_path / "a.log")
    b = _scaled(DATA / "differ_b.log", tmp_path / "b.log")
    assert "e+30" in a.read_text()  # the scaling reached the logits
    csv, page = tmp_path / "rows.csv", tmp_path / "page.html"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = api.compare(traces=api.Traces(a, b), outputs=api.Outputs(csv, page))
        table, as_json = render(report, "table"), render(report, "json")
    assert report.exit_code is ExitCode.DIFFER
    assert "DIFFER" in table and json.loads(as_json)["verdict"] == "differ"
    assert csv.read_text().count("\n") > 1 and "<img" in page.read_text()
