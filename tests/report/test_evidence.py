"""The bug class of a DIFFER and each arm's coverage, in the terminal, markdown, HTML and JSON
reports."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.config import ComparisonSpec
from difftest.core.rules import Rules
from difftest.flow.evaluate import judge_traces
from difftest.report import comparison, html
from conftest import verify_line

COVERAGE = "[spec-coverage] blocks=2 page_size={ps} page_cross={pc} page_order=0 widths=4:2\n"


def _report(tmp_path: Path, b_steps: list[tuple[int, list[int], list[int]]], cross: int = 1):
    a_steps = [(10, [1, 2, 3], [1, 2, 9]), (13, [4, 5, 6], [4, 7])]
    for name, steps, cov in (("a", a_steps, COVERAGE.format(ps=16, pc=cross)),
                             ("b", b_steps, COVERAGE.format(ps=0, pc=0))):
        lane = "paged" if name == "a" else "materialized"
        (tmp_path / f"{name}.log").write_text(
            f"[spec-config] lane={lane}\n" + "".join(verify_line("r0", p, d, e) + "\n"
                                                     for p, d, e in steps) + cov)
    spec = ComparisonSpec("lanes", "a", "b", Rules(toggle=("lane",)))
    return judge_traces(tmp_path / "a.log", tmp_path / "b.log", spec)


def test_a_state_bug_is_named_in_every_format(tmp_path: Path) -> None:
    rep = _report(tmp_path, [(10, [1, 2, 3], [1, 2, 9]), (13, [4, 5, 6], [4, 8])])
    sentence = "bug class: verify path or state: the committed stream differs"
    where = "committed stream: first parted at r0 pos 14 (a: 7, b: 8)"
    assert sentence in comparison.render_table(rep) and where in comparison.render_table(rep)
    md = comparison.render_markdown(rep)
    assert f"**{sentence}**" in md and f"- {where}" in md
    page = html.render_comparison(rep)
    assert "<h2>Bug class</h2>" in page and sentence in page and where in page
    assert json.loads(comparison.render_json(rep))["bug_class"]["kind"] == "verify-or-state"


def test_a_drafter_bug_is_named_and_the_coverage_table_shows_both_arms(tmp_path: Path) -> None:
    rep = _report(tmp_path, [(10, [1, 2, 3], [1, 2, 9]), (13, [4, 6, 6], [4, 7])])
    text = comparison.render_table(rep)
    assert "bug class: drafter: the drafts differ, the committed stream is equal" in text
    assert "coverage (what each arm exercised" in text
    row = [line for line in text.splitlines() if line.startswith("page boundary inside")][0]
    assert row.split()[-4:] == ["yes,", "exercised", "1", "0"]
    md = comparison.render_markdown(rep)
    assert "| page boundary inside a drafted block | page_cross | 1 | yes, exercised | 1 | 0 |" in md
    assert "<h2>Coverage</h2>" in html.render_comparison(rep)
    cov = json.loads(comparison.render_json(rep))["coverage"]
    assert cov[0] == {"class": "page_cross", "label": "page boundary inside a drafted block",
                      "needed": 1, "about": True, "exercised": True, "a": 1, "b": 0}


def test_an_agreement_names_no_class_and_without_coverage_it_is_uninformative(
        tmp_path: Path) -> None:
    rep = _report(tmp_path, [(10, [1, 2, 3], [1, 2, 9]), (13, [4, 5, 6], [4, 7])], cross=0)
    text = comparison.render_table(rep)
    assert "bug class" not in text and "UNINFORMATIVE" in text
    assert "yes, NOT exercised" in text
    assert "bug_class" not in json.loads(comparison.render_json(rep))
