"""report.html and check.html lead the eye: token flips before logit-only rows, maps labelled by
position with the first difference marked, every colour explained, a figure that shows why an
uninformative comparison was blind, and a check page that opens with a coloured summary."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from browser import probe, screenshot
from difftest import api
from difftest.flow.judge import CheckResult
from difftest.flow.evaluate import ComparisonReport
from difftest.report import html

COMPARE = Path(__file__).parents[1] / "data" / "compare"
CONFIG = Path(__file__).parents[2] / "difftest" / "configs" / "default.toml"


def _report(a: str, b: str, **kw: object) -> ComparisonReport:
    return api.compare_traces(COMPARE / a, COMPARE / b, config=CONFIG, **kw)  # type: ignore[arg-type]


def _rows(text: str, cls: str) -> list[list[str]]:
    return [re.findall(r"<td[^>]*>(.*?)</td>", row)
            for row in re.findall(rf'<tr class="{cls}">(.*?)</tr>', text)]


def test_token_flips_come_first_apart_from_logit_only_rows(tmp_path: Path) -> None:
    # two token flips (differ_b) and, earlier in the file, one row whose logits alone differ
    both = tmp_path / "both_b.log"
    both.write_text((COMPARE / "differ_b.log").read_text().replace(
        "pos=5 row=2 top=[ 12:7.124", "pos=5 row=2 top=[ 12:7.125"))
    rep = api.compare_traces(COMPARE / "agree_a.log", both, config=CONFIG)
    text = html.render_comparison(rep)
    assert text.index("Token flips: 2 row(s)") < text.index("Logit-only differences: 1 row(s)")
    flips, logit = _rows(text, "flip"), _rows(text, "logit")
    assert [(r[0], r[1], r[2], r[5]) for r in flips] == [("a", "8", "2", "differ"),
                                                        ("b", "7", "3", "differ")]
    assert [(r[0], r[1], r[2], r[5], r[6]) for r in logit] == [("a", "5", "2", "same", "differ")]
    assert text.index('<tr class="flip">') < text.index('<tr class="logit">')
    c = rep.comparison
    assert c is not None
    assert len(flips) + len(logit) == int((c.rows.logit_differs | c.rows.logit_unresolved
                                           | np.isin(c.rows.status, (1, 2, 6))).sum())


def test_map_columns_carry_block_positions_and_the_first_difference_is_found() -> None:
    # three blocks at pos 5, 9, 12 binned into two columns: each column shows its first block
    positions = html._column_positions(np.array([5, 5, 9, 12]), np.array([0, 0, 1, 2]),
                                       np.array([0, 0, 0, 1]), 2)
    assert positions.tolist() == [5, 12]
    rep = _report("agree_a.log", "differ_b.log")
    c = rep.comparison
    assert c is not None
    b = c.requests.index("b")
    assert html._first_place(c, b) == (7, 3, "first token flip")
    assert html._first_place(c, c.requests.index("a")) is None
    logits = _report("agree_a.log", "logitonly_b.log").comparison
    assert logits is not None and logits.first_difference is None
    f = logits.first_logit_difference
    assert f is not None
    assert html._first_place(logits, logits.requests.index(f.req)) == (
        f.pos, f.row, "first logit difference")


def test_every_colour_of_the_difference_panels_is_named() -> None:
    strict = _report("agree_a.log", "differ_b.log").comparison
    loose = _report("agree_a.log", "shift_b.log", near_tie=0.05, atol=0.02).comparison
    assert strict is not None and loose is not None
    labels = [h.get_label() for h in html._diff_legend(strict)]
    assert labels[:3] == ["under (grey): bit-identical",
                          "over (red): nan in one arm, or no shared id", "white: not compared"]
    assert "atol 0: every colour above grey differs" in labels
    assert "atol 0.02 on the bar: above it a row differs" in [
        h.get_label() for h in html._diff_legend(loose)]


def _check(*reps: ComparisonReport) -> CheckResult:
    return CheckResult(Path("difftest.toml"), None, reps, {}, "2026-12-03T00:00:00+00:00", 4.25)


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    """The pages the tests below read, each rendered once: report.html of a pass, a differ and
    an uninformative comparison, and check.html of the three (in that order)."""
    reps = {"pass": _report("agree_a.log", "agree_b.log"),
            "differ": _report("agree_a.log", "differ_b.log"),
            "uninformative": _report("degenerate_a.log", "degenerate_b.log")}
    return {**{name: html.render_comparison(rep) for name, rep in reps.items()},
            "check": html.render_check(_check(*reps.values()))}


def test_an_uninformative_comparison_shows_why_first(pages: dict[str, str]) -> None:
    blind = pages["uninformative"]
    titles = re.findall(r'<img alt="([^"]*)"', blind)
    assert titles[0] == "Why this comparison could not have failed"
    agree = pages["pass"]
    assert "Why this comparison could not have failed" not in agree
    o = _report("degenerate_a.log", "degenerate_b.log").arm_a
    distinct, so_far, same, margin = html._block_measures(o)
    assert distinct.tolist() == [1] * 6 and so_far.tolist() == [1] * 6
    assert same.tolist() == [False] + [True] * 5  # every block repeats [19, 19, 19]
    assert np.isnan(margin).all()  # level 1: no logits, margins unknown
    varied = html._block_measures(_report("agree_a.log", "agree_b.log").arm_a)
    assert varied[0].tolist()[:2] == [3, 3] and not varied[2].any()
    assert np.isfinite(varied[3]).all()


def test_check_html_opens_with_a_linked_coloured_summary_and_folds_what_passed(
        pages: dict[str, str]) -> None:
    text = pages["check"]
    assert "<script" not in text.lower()
    summary = text[text.index('<table class="summary">'):text.index("</table>")]
    assert text.index('<table class="summary">') < text.index("<details")
    rows = re.findall(r'<tr class="row-(\w+)">(.*?)</tr>', summary)
    assert [tone for tone, _ in rows] == ["pass", "fail", "blind"]
    assert [re.search(r'href="#(c\d)"', row).group(1) for _, row in rows] == ["c0", "c1", "c2"]  # type: ignore[union-attr]
    assert "tokens in 2/7 blocks, logits in 2/7 blocks" in rows[1][1]
    assert "started 2026-12-03T00:00:00+00:00, 4.2 s in all" in text
    assert re.search(r'<details id="c0"><summary>', text)  # passed: folded
    assert re.search(r'<details id="c1" open><summary>', text)  # failed: open
    assert re.search(r'<details id="c2" open><summary>', text)


def test_chromium_draws_a_pass_a_differ_an_uninformative_and_a_check_page(
        pages: dict[str, str], tmp_path: Path) -> None:
    from PIL import Image

    for name, text in pages.items():
        page = tmp_path / f"{name}.html"
        page.write_text(text, encoding="utf-8")
        seen = probe(page, tmp_path)
        assert seen["errors"] == [] and seen["violations"] == [] and seen["scripts"] == 0, seen
        assert seen["images"] and all(i["complete"] and i["naturalWidth"] > 0
                                      for i in seen["images"]), seen
        png = screenshot(page, tmp_path / f"{name}.png", tmp_path, size=(1200, 1300))
        with Image.open(png) as im:
            colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50, name


@pytest.mark.parametrize("section, flag", [("c0", ""), ("c1", " open")])
def test_details_sections_hold_the_whole_comparison(pages: dict[str, str], section: str,
                                                    flag: str) -> None:
    """A folded section (the pass) and an open one (the differ) of the check page."""
    body = re.search(rf'<details id="{section}"{flag}>(.*?)</details>', pages["check"], re.S)
    assert body is not None and "<h3>Arms</h3>" in body.group(1)
