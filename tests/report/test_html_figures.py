"""The figures of report.html are drawn with fewer matplotlib objects and passes than its
defaults take, and show the same: a log axis's unlabelled minor ticks are marks where and as
matplotlib draws them, its labels are plain text (no math parser), and one draw prints the
bytes savefig prints."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.artist import getp
import numpy as np
import pytest

from difftest import api
from difftest.flow.evaluate import ComparisonReport
from difftest.report import html

COMPARE = Path(__file__).parents[1] / "data" / "compare"
CONFIG = Path(__file__).parents[2] / "difftest" / "configs" / "default.toml"


def _report(a: str, b: str) -> ComparisonReport:
    return api.compare_traces(COMPARE / a, COMPARE / b, config=CONFIG)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[ComparisonReport]:
    """An agreeing pair, a differing one, a blind one, and one whose margins span many decades
    (a margin of 1e-7 in one row)."""
    wide = tmp_path_factory.mktemp("wide") / "wide_b.log"
    text = (COMPARE / "differ_b.log").read_text()
    line = next(x for x in text.splitlines() if x.startswith("[spec-logits]"))
    head, _, top = line.partition("top=[ ")
    first, second = top.split()[:2]
    tied = f"{second.split(':')[0]}:{float(first.split(':')[1]) - 1e-7:.9g}"
    wide.write_text(text.replace(line, f"{head}top=[ {first} {tied} {' '.join(top.split()[2:])}"))
    return [_report("agree_a.log", "agree_b.log"), _report("agree_a.log", "differ_b.log"),
            _report("degenerate_a.log", "degenerate_b.log"),
            api.compare_traces(COMPARE / "agree_a.log", wide, config=CONFIG)]


def _makers(rep: ComparisonReport) -> list[Callable[[], object]]:
    c = rep.comparison
    out: list[Callable[[], object]] = [lambda: html.margin_figure(rep),
                                       lambda: html.accepted_figure(rep),
                                       lambda: html.blindness_figure(rep)]
    if c is not None:
        out += [lambda: html.row_map_figure(c, ""), lambda: html.logit_diff_figure(rep, c)]
    return out


def _drawn(make: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The matplotlib figure `make` would encode (None where it draws none)."""
    caught: list[Any] = []
    monkeypatch.setattr(html, "_encode", lambda fig: caught.append(fig) or "")
    make()
    monkeypatch.undo()
    return caught[0] if caught else None


def _log_axes(fig: Any) -> list[Any]:
    return [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) if axis.get_scale() == "log"]


def test_minor_log_ticks_are_marks_where_and_as_matplotlib_draws_them(
        reports: list[ComparisonReport], monkeypatch: pytest.MonkeyPatch) -> None:
    compared = {"marks": 0, "kept": 0}
    for rep in reports:
        for make in _makers(rep):
            ours, theirs = _drawn(make, monkeypatch), _drawn(make, monkeypatch)
            if ours is None:
                continue
            html._log_axes_for_print(ours)
            ours.draw_without_rendering()
            theirs.draw_without_rendering()  # matplotlib's own ticks, laid out
            for mine, their in zip(_log_axes(ours), _log_axes(theirs), strict=True):
                lo, hi = sorted(their.get_view_interval())
                assert sorted(mine.get_view_interval()) == [lo, hi]
                locs = np.asarray(their.get_minorticklocs())
                locs = locs[(locs >= lo * (1 - 1e-9)) & (locs <= hi * (1 + 1e-9))]
                marks = [a for a in mine.axes.get_children()
                         if isinstance(a, matplotlib.lines.Line2D) and a.get_linestyle() == "None"
                         and a.get_marker() in (2, 3, 0, 1)]  # TICKLEFT/RIGHT/UP/DOWN
                if not marks:  # a decade or less: matplotlib's own minor ticks, labelled
                    assert np.log10(hi / lo) <= 1 + 1e-9
                    compared["kept"] += 1
                    continue
                (line,) = marks
                x = mine is mine.axes.xaxis
                drawn = np.asarray(line.get_xdata() if x else line.get_ydata(), dtype=float)
                assert np.array_equal(np.sort(drawn), np.sort(locs)), (drawn, locs)
                tick = their.get_minor_ticks(1)[0]
                shown = tick.tick1line if tick.tick1line.get_visible() else tick.tick2line
                for prop in ("marker", "markersize", "markeredgewidth", "color",
                             "markeredgecolor"):
                    assert getp(line, prop) == getp(shown, prop), prop
                across = line.get_ydata() if x else line.get_xdata()
                assert set(np.asarray(across).tolist()) <= {
                    float((shown.get_ydata() if x else shown.get_xdata())[0])}
                assert mine.get_minor_locator().tick_values(lo, hi) == []
                compared["marks"] += 1
    assert compared["marks"] >= 3 and compared["kept"] >= 1, compared


def test_log_tick_labels_need_no_math_parser(reports: list[ComparisonReport],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.mathtext import MathTextParser

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("mathtext parsed")

    monkeypatch.setattr(MathTextParser, "parse", refuse)
    for rep in reports:
        assert html.figures(rep)


def test_one_draw_prints_what_savefig_prints(reports: list[ComparisonReport],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """savefig draws a figure with a constrained layout twice (once without output); the
    single draw lays it out the same. Drawn twice over, the bytes are the same too."""
    printed = 0
    for rep in reports:
        for make in _makers(rep):
            fig = _drawn(make, monkeypatch)
            if fig is None:
                continue
            html._log_axes_for_print(fig)
            buf = io.BytesIO()
            with matplotlib.rc_context({"svg.hashsalt": "difftest", "svg.fonttype": "path"}):
                fig.savefig(buf, format="svg", metadata={"Date": None})
            assert html._svg(_drawn(make, monkeypatch)) == buf.getvalue()
            printed += 1
    assert printed >= 10
