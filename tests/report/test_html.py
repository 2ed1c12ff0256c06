"""report.html and check.html: self-contained, drawn, and loaded in a real browser."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.config import ComparisonSpec
from difftest.flow.evaluate import judge_traces
from difftest.report import html

from browser import probe, screenshot
from conftest import REPLAY

DATA = Path(__file__).parents[1] / "data"
REPO = Path(__file__).resolve().parents[2]


def _self_contained(text: str) -> None:
    """No script, no external reference of any kind; the policy forbids them anyway."""
    assert "<script" not in text.lower()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    for ref in re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", text):
        # inline figures, and links to a section of the same page
        assert ref.startswith("data:image/svg+xml;base64,") or re.fullmatch(r"#c\d+", ref), ref
    assert "url(" not in text and "@import" not in text and "@font-face" not in text


@pytest.fixture(scope="module")
def default_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's main job, run for real: both attention lanes of the reference runner."""
    root = tmp_path_factory.mktemp("runs")
    done = subprocess.run([sys.executable, "-m", "difftest", "compare", "--arm-a", "paged",
                           "--arm-b", "materialized", "--run-root", str(root), "--no-progress"],
                          capture_output=True, text=True, cwd=REPO, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = root.iterdir()
    page = run_dir / "report.html"
    assert page.exists(), sorted(p.name for p in run_dir.iterdir())
    return page


def test_default_compare_leaves_a_self_contained_report_with_four_figures(
        default_report: Path) -> None:
    text = default_report.read_text(encoding="utf-8")
    _self_contained(text)
    assert text.index("AGREE") < text.index("<h2>Arms</h2>") < text.index("<h2>Figures</h2>")
    assert len(re.findall(r"<img ", text)) >= 4
    for title in ("Top-1/top-2 margins per arm", "Where the arms parted",
                  "Logit differences against the tolerance", "Accepted lengths per arm"):
        assert f'alt="{title}' in text


def test_chromium_loads_the_report_with_no_failed_request_and_drawn_figures(
        default_report: Path, tmp_path: Path) -> None:
    seen = probe(default_report, tmp_path)
    assert seen["errors"] == [] and seen["violations"] == [], seen
    assert seen["scripts"] == 0
    assert all(r.startswith("data:") for r in seen["resources"]), seen["resources"]
    assert len(seen["images"]) >= 4
    for img in seen["images"]:
        assert img["complete"] and img["naturalWidth"] > 0 and img["naturalHeight"] > 0, img
        assert img["width"] > 100 and img["height"] > 100, img


def test_chromium_screenshot_shows_the_page(default_report: Path, tmp_path: Path) -> None:
    from PIL import Image

    png = screenshot(default_report, tmp_path / "report.png", tmp_path)
    with Image.open(png) as im:
        assert im.size == (1200, 2600)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    # a blank or failed page is one or two colours; the report has text, badges and plots
    assert colours is not None and len(colours) > 50


def test_a_blocked_reference_is_caught_by_the_probe(default_report: Path,
                                                    tmp_path: Path) -> None:
    """The probe would see a report that reached out: the policy blocks and reports it."""
    bad = tmp_path / "bad.html"
    bad.write_text(default_report.read_text(encoding="utf-8").replace(
        "</body>", '<img alt="x" src="https://example.invalid/x.png"></body>'), encoding="utf-8")
    seen = probe(bad, tmp_path)
    assert seen["violations"] or seen["errors"], seen


def test_differing_traces_show_the_first_difference_and_the_flips(tmp_path: Path) -> None:
    base = (DATA / "two_requests_level3.log").read_text()
    changed = base.replace("draft=[ 3790 2978 978 ]", "draft=[ 3790 2978 979 ]", 1)
    assert changed != base
    b = tmp_path / "b.log"
    b.write_text(changed)
    rep = judge_traces(DATA / "two_requests_level3.log", b,
                       ComparisonSpec(name="x<script>", arm_a="a", arm_b="b"))
    assert rep.verdict.kind == "differ"
    text = html.render_comparison(rep)
    _self_contained(text)
    assert "x&lt;script&gt;" in text
    assert "<h2>First difference</h2>" in text and "Token flips: 1 row(s)" in text


def test_check_html_has_one_section_per_comparison_and_probe(tmp_path: Path) -> None:
    from difftest.config import load_config
    from planned import run_check

    cfg = load_config(REPO / "difftest" / "configs" / "default.toml")
    # the lanes replay the reference runner's captures of them, under the environment and
    # evidence the config gives them (tests/data/shipped/, scripts/capture_replay_traces.py)
    cfg = dataclasses.replace(cfg, arms={**cfg.arms, **{
        name: cfg.arm(name).with_changes(command=(
            sys.executable, "-c", REPLAY, str(DATA / "shipped" / f"{name}.log")))
        for name in ("paged", "materialized")}})
    result = run_check(cfg, ["lanes"], run_root=tmp_path, progress=False, probes=False)
    text = html.render_check(result)
    _self_contained(text)
    assert text.count("<section>") == 1
    assert "difftest check: passed" in text
