"""The figures of report.html are drawn with fewer matplotlib objects and passes than its
defaults take, and show the same: a log axis's unlabelled minor ticks are marks where and as
matplotlib draws them, its labels are plain text (no math parser), one draw prints the bytes
savefig prints, a map column's position is that of its first block, each acceptance
difference is its own mark, and titles set at the top are where matplotlib would put them."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.artist import getp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _column_positions_by_loop(pos: np.ndarray, step: np.ndarray, col: np.ndarray,
                              cols: int) -> np.ndarray:
    out = np.full(cols, -1, dtype=np.int64)
    for c in range(cols):
        here = np.flatnonzero(col == c)
        if here.size:
            first = here[step[here] == step[here].min()][0]
            out[c] = int(pos[first])
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10**6)), max_size=60),
       st.integers(1, 8))
def test_each_map_column_shows_the_position_of_its_first_block(
        blocks: list[tuple[int, int]], cols: int) -> None:
    step = np.array([s for s, _ in blocks], dtype=np.int64)
    pos = np.array([p for _, p in blocks], dtype=np.int64)
    steps = int(step.max()) + 1 if blocks else 1
    col = (step * cols) // steps
    assert np.array_equal(html._column_positions(pos, step, col, cols),
                          _column_positions_by_loop(pos, step, col, cols))


def test_each_acceptance_difference_is_marked_in_its_decisions_colour(
        reports: list[ComparisonReport], monkeypatch: pytest.MonkeyPatch) -> None:
    """Per draft position j, B - A at (j, diff) in the colour of its decision, with its interval
    where it has one; no line joins the positions."""
    import dataclasses

    from difftest.analysis.acceptance import AcceptanceCounts, measure_counts
    from difftest.config import AcceptanceGate
    from difftest.core.kinds import VerdictKind

    rng = np.random.default_rng(3)
    labels = np.repeat([f"r{i}" for i in range(12)], 20)
    k = np.full(labels.size, 6)
    counts = [AcceptanceCounts(labels, k, rng.binomial(6, p, labels.size)) for p in (0.6, 0.5)]
    measured = measure_counts(*counts, ("a", "b"), AcceptanceGate(0.1, 0.01))
    assert measured is not None
    kinds = [None, VerdictKind.AGREE, VerdictKind.DIFFER, VerdictKind.UNINFORMATIVE]
    deltas = tuple(dataclasses.replace(d, decision=kinds[i % 4],
                                       **({"low": None, "high": None} if i == 4 else {}))
                   for i, d in enumerate(measured.deltas))
    rep = dataclasses.replace(reports[0], acceptance=dataclasses.replace(measured, deltas=deltas))
    fig = _drawn(lambda: html.acceptance_figure(rep), monkeypatch)
    colours = {None: "#555555", VerdictKind.AGREE: "#1a7f37", VerdictKind.DIFFER: "#cf222e",
               VerdictKind.UNINFORMATIVE: "#9a6700"}
    want_marks = {(d.j, round(d.diff, 12), colours[d.decision]) for d in deltas}
    want_bars = {(d.j, round(d.low, 12), round(d.high, 12)) for d in deltas if d.low is not None}
    marks, bars = set(), set()
    for container in fig.axes[1].containers:
        line, _, columns = container.lines
        assert line.get_linestyle() == "None" or len(line.get_xdata()) == 1
        marks |= {(int(x), round(float(y), 12), line.get_color())
                  for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)}
        for col in columns:
            bars |= {(int(seg[0][0]), round(float(seg[0][1]), 12), round(float(seg[1][1]), 12))
                     for seg in col.get_segments()}
    assert marks == want_marks and len(deltas) == 6
    assert bars == want_bars


def test_titles_placed_at_the_top_are_where_matplotlib_would_place_them(
        reports: list[ComparisonReport], monkeypatch: pytest.MonkeyPatch) -> None:
    """The maps' and the logit figure's titles are set at y=1 (matplotlib then skips measuring
    each axes for ticks above it): no tick is there, so the figure is the same."""
    from matplotlib.axes import Axes

    placed = [f() for rep in reports for f in _makers(rep)[3:]]
    set_title = Axes.set_title

    def auto(self: Axes, label: str, *args: Any, y: float | None = None, **kw: Any) -> Any:
        return set_title(self, label, *args, **kw)

    monkeypatch.setattr(Axes, "set_title", auto)
    assert placed == [f() for rep in reports for f in _makers(rep)[3:]]
    assert sum(p is not None for p in placed) >= 6


@functools.cache
def _agreeing() -> ComparisonReport:
    return _report("agree_a.log", "agree_b.log")


def _map_requests_by_loop(req: np.ndarray, bad: np.ndarray, most: int) -> list[int]:
    order: list[int] = []
    for q in [*req[bad].tolist(), *np.unique(req).tolist()]:
        if q not in order:
            order.append(q)
    return order[:most]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.booleans()), max_size=80))
def test_the_maps_draw_the_requests_that_differ_first_then_the_rest(
        rows: list[tuple[int, bool]]) -> None:
    import dataclasses

    from difftest.analysis.compare import DIFFER, SAME

    base = _agreeing().comparison
    assert base is not None
    req = np.array([q for q, _ in rows], dtype=np.int64)
    bad = np.array([b for _, b in rows], dtype=bool)
    n = req.size
    table = dataclasses.replace(base.rows, req=req, status=np.where(bad, DIFFER, SAME).astype(
        np.int8), logit_differs=np.zeros(n, dtype=bool))
    c = dataclasses.replace(base, rows=table, requests=tuple(f"r{i}" for i in range(10)))
    assert html._map_requests(c) == _map_requests_by_loop(req, bad, html.MAX_MAP_REQUESTS)
