"""One self-contained HTML page per comparison (`report.html`) or gate (`check.html`).

A reviewer would rather look than read: where in the run the arms parted, how close the flips
were to ties, how the logit differences sit against the tolerance. The page opens from a CI
artifact with no network: styles inline, figures as SVG data URIs, no script and no font from
anywhere (a Content-Security-Policy says so to the browser). Figures are drawn by matplotlib,
imported only here; every figure is binned first, so its cost does not grow with the rows of a
200 MB trace (an image or one path per series, never one element per row).
"""

from __future__ import annotations

import base64
import html
import io
import platform
from dataclasses import dataclass, replace
from datetime import datetime, UTC
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from difftest.core.kinds import ArmSide, VerdictKind
from difftest.report.headline import Tone, differed, headline, report_differed
from difftest.report.evidence import bug_class_lines, coverage_cells
from difftest.report.text import strip_ansi

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from difftest.core.activations import Localization
    from difftest.analysis.compare import Comparison
    from difftest.flow.judge import CheckResult
    from difftest.flow.scoring import ProbeReport
    from difftest.flow.sweep import SweepReport
    from difftest.flow.localize import SavedLocalization
    from difftest.flow.evaluate import ArmOutcome, ComparisonReport

REPORT_HTML = "report.html"
CHECK_HTML = "check.html"

MAX_DIFF_ROWS = 50  # rows of the differing-rows table
MAX_MAP_REQUESTS = 6  # requests drawn in the step x row maps
MAX_MAP_STEPS = 600  # columns of a step x row map; longer requests are binned
HIST_BINS = 60
# The range of positive values a log-scaled figure draws; values beyond it (an infinite |diff|
# too) are drawn at its ends. matplotlib's log axes fail near the doubles' ends (10 ** log10
# of the largest double overflows, and a range whose largest value is under 2.2e-287 is taken
# for a single point), and its log tick locator overflows on a span of about 270 decades
# (one row scaled by 1e270 among ordinary ones), so the window is 240 decades. The numbers the
# page prints are the values themselves.
_DRAWN_MIN, _DRAWN_MAX = 1e-120, 1e120

_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
        "form-action 'none'")
_COLOURS = {ArmSide.A: "#1f77b4", ArmSide.B: "#ff7f0e"}
_LINES = {ArmSide.A: "-", ArmSide.B: "--"}  # arm B dashed: identical arms still show both lines
# Status colours of the row map, by the priority a binned cell shows (the worst row wins).
_MAP_CLASSES = (("no block", "#ffffff"), ("same", "#cfe8cf"), ("unmatched", "#a6cee3"),
                ("context-diverged", "#b8b8b8"), ("near-tie", "#fdb863"),
                ("noise-flip", "#e08a9a"), ("differ", "#d7191c"))

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1100px;padding:1.2em;color:#1b1b1b;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.25em;margin:1.4em 0 .4em;border-bottom:1px solid
#ddd}h3{font-size:1.05em;margin:1.1em 0 .3em}
.verdict{display:inline-block;padding:.15em .6em;border-radius:.3em;font-weight:600;color:#fff}
.pass{background:#1a7f37}.fail{background:#cf222e}.blind{background:#9a6700}.error{background:#6e40c9}
table{border-collapse:collapse;margin:.4em 0;font-size:.92em}
th,td{border:1px solid #d0d7de;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:.8em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#57606a;font-size:.9em}
tr.flip td{background:#ffebe9}tr.flip td:first-child{border-left:4px solid #cf222e}
tr.logit td:first-child{border-left:4px solid #8250df}h4{margin:.9em 0 .2em;font-size:1em}
h4.flip{color:#cf222e}h4.logit{color:#8250df}
table.summary td{vertical-align:middle}table.summary td:last-child{white-space:nowrap}
tr.row-pass td{background:#dafbe1}
tr.row-fail td{background:#ffebe9}tr.row-blind td{background:#fff8c5}
tr.row-error td{background:#fbefff}
details{border:1px solid #d0d7de;border-radius:.4em;margin:.6em 0;padding:.3em .8em}
details>summary{cursor:pointer;font-size:1.05em;padding:.2em 0}
pre{background:#f6f8fa;padding:.6em;overflow:auto;
font-size:.85em}.muted{color:#57606a}code{font-size:.92em}
"""


@dataclass(frozen=True)
class Figure_:
    """One drawn figure: what it shows, and the SVG as a data URI."""

    title: str
    caption: str
    uri: str


# -- page --------------------------------------------------------------------------------------

def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style></head>\n"
            f"<body>\n{body}\n<p class=\"muted\">written by difftest {_version()} on "
            f"{html.escape(platform.node())} at "
            f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}</p>\n"
            "</body></html>\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("difftest")
    except PackageNotFoundError:
        return "(not installed)"


def _e(x: object) -> str:
    return html.escape(strip_ansi(str(x)))


def _num(x: object, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _badge(rep: ComparisonReport) -> str:
    head = headline(rep.verdict)
    return (f'<span class="verdict {head.tone.value}">{_e(head.observed)}</span> '
            f"{_e(head.qualifier)}; {_e(report_differed(rep))}")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]],
           numeric: Sequence[bool] | None = None) -> str:
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td class="n">{_e(c)}</td>' if numeric[i] else f"<td>{_e(c)}</td>"
        for i, c in enumerate(row)) + "</tr>\n" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"


def _arms_table(rep: ComparisonReport) -> str:
    from difftest.report.comparison import ACCEPTED_HEADER, acceptance_cells

    accepted = acceptance_cells(rep)
    rows = []
    for o in (rep.arm_a, rep.arm_b):
        au, r = o.audit, o.result
        state = ("failed" if o.failure else "-" if au is None else
                 "informative" if au.informative else "uninformative")
        rows.append([o.name, au.level if au else "-", au.blocks if au else "-",
                     au.distinct_ids if au else "-",
                     _num(au.entropy_bits, 3) if au else "-",
                     ("yes" if au.constant_blocks else "no") if au else "-",
                     _num(au.min_margin) if au else "-", state,
                     r.returncode if r and r.returncode is not None else "-",
                     f"{r.duration_s:.1f}" if r else "-",
                     (r.git_sha or "")[:12] or "-" if r else "-"])
    heads = ["arm", "level", "blocks", "distinct ids", "entropy bits", "constant",
             "min margin", "trace", "exit", "seconds", "git sha"]
    numeric = [False, True, True, True, True, False, True, False, True, True, False]
    if accepted is not None:  # under teacher forcing: B's would-be acceptance beside A's
        rows = [row + [cell] for row, cell in zip(rows, accepted, strict=True)]
        heads, numeric = heads + [ACCEPTED_HEADER], numeric + [False]
    table = _table(heads, rows, numeric)
    fails = ""
    for o in (rep.arm_a, rep.arm_b):
        f = o.failure
        if f is not None:
            tail = f.stderr_tail
            message = str(replace(f, stderr_tail=""))
            fails += f"<p><b>{_e(o.name)}</b>: {_e(message)}</p>"
            if tail:
                fails += f"<pre>{_e(tail)}</pre>"
    return table + fails


# -- figures -----------------------------------------------------------------------------------

def _new_figure(width: float, height: float,
                layout: Literal["constrained"] | None = "constrained") -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout=layout)


def _svg(fig: Figure) -> bytes:
    """The figure as SVG, deterministic (no date, fixed ids), text as paths. Printed by the SVG
    canvas directly: savefig would first draw the whole figure once more, without output, for
    a constrained layout, which the one draw lays out anyway (the bytes are the same)."""
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    _log_axes_for_print(fig)
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "difftest", "svg.fonttype": "path"}):
        # print_svg has no annotations in matplotlib's stubs
        FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None})  # type: ignore[no-untyped-call]
    return buf.getvalue()


def _encode(fig: Figure) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(_svg(fig)).decode("ascii")


def _log_axes_for_print(fig: Figure) -> None:
    """Every log axis of `fig`, once its view is final: tick labels as plain text (`1e−03`)
    instead of mathtext (`$10^{-3}$`, a math parser run per label), and the unlabelled minor
    ticks as one line of tick marks instead of a Tick object each (two lines and two texts, a
    few milliseconds apiece): the same marks at the places matplotlib would put them (the
    axis's minor locator, within the view), drawn as its own minor tick draws them. Where an
    axis spans a decade or less matplotlib labels some minor ticks, and its own ticks stay (a
    few)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogFormatter, NullLocator

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            axis.set_major_formatter(LogFormatter())
            axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
            lo, hi = sorted(axis.get_view_interval())
            if not 0 < lo < hi or np.log10(hi / lo) <= 1:
                continue
            locs = np.asarray(axis.get_minorticklocs(), dtype=np.float64)
            a, b = np.log10(lo), np.log10(hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.log10(locs)
            locs = locs[(t >= a - (b - a) * 1e-10) & (t <= b + (b - a) * 1e-10)]
            tick = axis.get_minor_ticks(1)[0]  # what each mark would be: its style and place
            x = axis is ax.xaxis
            for line in (tick.tick1line, tick.tick2line):
                if not line.get_visible():
                    continue
                place = np.asarray(line.get_ydata() if x else line.get_xdata(), dtype=np.float64)
                across = np.full(locs.size, place[0])
                marks = Line2D(locs if x else across, across if x else locs)
                marks.update_from(line)
                marks.set_transform(line.get_transform())
                marks.set_zorder(axis.get_zorder())
                ax.add_artist(marks)
                marks.set_clip_on(False)
            axis.set_minor_locator(NullLocator())


def _log_span(lo: float, hi: float) -> tuple[float, float]:
    """At least one decade around [lo, hi] (each within the drawn range), so a log axis has
    ticks to read."""
    lo, hi = _drawn_at(lo), _drawn_at(hi)
    if hi < lo * 10:
        mid = np.sqrt(lo * hi)  # a normal double: the drawn range is 240 decades
        lo, hi = min(lo, mid / np.sqrt(10)), max(hi, mid * np.sqrt(10))
    return float(lo), float(hi)


def _shortened(name: str, most: int = 60) -> str:
    """A request name as a figure's title shows it: matplotlib draws every glyph of a title,
    and a 1 MiB name made a 230 MB page. The page's tables give names whole."""
    return name if len(name) <= most else name[:most - 1] + "…"


def _drawn_at(value: float) -> float:
    """A value as a log-scaled figure places it (a line at a threshold, an axis's end): within
    `_DRAWN_MIN.._DRAWN_MAX`."""
    return min(max(value, _DRAWN_MIN), _DRAWN_MAX)


def _drawn(values: np.ndarray) -> np.ndarray:
    """Positive values as a log-scaled figure draws them: within `_DRAWN_MIN.._DRAWN_MAX`."""
    drawn: np.ndarray = np.clip(values, _DRAWN_MIN, _DRAWN_MAX)
    return drawn


def _log_bins(values: np.ndarray) -> np.ndarray:
    values = _drawn(values)
    lo, hi = _log_span(float(values.min()), float(values.max()))
    return np.geomspace(lo, hi, HIST_BINS + 1)


def _log_histogram(values: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """np.histogram on log-spaced bins, counted on equal bins of log10 (numpy's fast path for
    uniform bins, instead of a search per value)."""
    logs = np.log10(_drawn(values))
    counts, _ = np.histogram(logs, bins=bins.size - 1,
                             range=(float(np.log10(bins[0])), float(np.log10(bins[-1]))))
    return counts


def margin_figure(rep: ComparisonReport) -> Figure_ | None:
    """Per arm: the top-1/top-2 margins of every traced row, with near_tie and the blind radius."""
    series = []
    for side, o in ((ArmSide.A, rep.arm_a), (ArmSide.B, rep.arm_b)):
        if o.trace is None or not len(o.trace.logits):
            continue
        m = o.trace.logits.margins
        m = m[np.isfinite(m)]
        if m.size:
            series.append((side, o, m))
    if not series:
        return None
    fig = _new_figure(9, 3.4)
    ax = fig.subplots()
    positive = np.concatenate([m[m > 0] for _, _, m in series])
    ties = {side: int((m <= 0).sum()) for side, _, m in series}
    if positive.size:
        bins = _log_bins(positive)
        for side, o, m in series:
            counts = _log_histogram(m[m > 0], bins)
            au = o.audit
            radius = (f", smallest blind radius {au.blind_radius_min:.3g}"
                      if au is not None and au.blind_radius_min is not None else "")
            tie = f", {ties[side]} exact ties" if ties[side] else ""
            ax.stairs(counts, bins, color=_COLOURS[side], linewidth=1.6,
                      linestyle=_LINES[side], label=f"{o.name} ({m.size} rows{radius}{tie})")
        ax.set_xscale("log")
    near_tie = rep.rules.near_tie or 0.0  # None: derived per row, no one line to draw
    if near_tie > 0:
        ax.axvline(_drawn_at(near_tie), color="#d7191c", linestyle="--", linewidth=1.2,
                   label=f"near_tie = {near_tie:g} (flips below it are near-ties)")
    threshold = 2 * rep.thresholds.max_blind_radius
    ax.axvline(_drawn_at(threshold), color="#555555", linestyle=":", linewidth=1.2,
               label=f"margin {threshold:g} = blind radius {rep.thresholds.max_blind_radius:g} "
                     "(audit limit)")
    for side, o, _ in series:
        au = o.audit
        if au is not None and au.min_margin is not None and au.min_margin > 0:
            ax.axvline(_drawn_at(au.min_margin), color=_COLOURS[side], linestyle="-.", linewidth=0.9)
    ax.set_xlabel("top-1 minus top-2 logit (margin; a perturbation below margin/2 cannot flip "
                  "the row)")
    ax.set_ylabel("rows")
    fig.legend(fontsize=8, loc="outside lower center", ncol=2, frameon=False)
    return Figure_("Top-1/top-2 margins per arm",
                   "Each arm's margins on a log axis. Dash-dotted: each arm's smallest margin "
                   "(twice its smallest blind radius). Rows left of near_tie may flip as "
                   "near-ties.", _encode(fig))


def accepted_figure(rep: ComparisonReport) -> Figure_ | None:
    """Per arm: how many drafted tokens each verify accepted."""
    series = [(side, o, o.trace.verifies.acc) for side, o in ((ArmSide.A, rep.arm_a),
                                                                 (ArmSide.B, rep.arm_b))
              if o.trace is not None and len(o.trace.verifies)]
    if not series:
        return None
    top = max(int(acc.max()) for _, _, acc in series)
    x = np.arange(top + 1)
    width = 0.8 / len(series)
    fig = _new_figure(9, 3.0)
    ax = fig.subplots()
    for i, (side, o, acc) in enumerate(series):
        counts = np.bincount(acc.astype(np.int64), minlength=top + 1)
        ax.bar(x + (i - (len(series) - 1) / 2) * width, counts, width=width,
               color=_COLOURS[side], label=f"{o.name} ({acc.size} verifies, mean "
                                           f"{float(acc.mean()):.2f})")
    ax.set_xticks(x)
    ax.set_xlabel("accepted drafted tokens per verify")
    ax.set_ylabel("verifies")
    fig.legend(fontsize=8, loc="outside upper center", ncol=len(series), frameon=False)
    return Figure_("Accepted lengths per arm",
                   "Different drafts get different acceptance: a shift here moves the positions "
                   "the arms visit.", _encode(fig))


def acceptance_figure(rep: ComparisonReport) -> Figure_ | None:
    """Per draft position j: each arm's share of verifies that accepted at least j drafts with
    its request-clustered 95% interval, and B - A with its bounds against the gate's margin."""
    acc = rep.acceptance
    if acc is None or not acc.deltas:
        return None
    fig = _new_figure(9, 3.4)
    left, right = fig.subplots(1, 2)
    js = np.array([d.j for d in acc.deltas])
    for i, (side, arm) in enumerate(((ArmSide.A, acc.arm_a), (ArmSide.B, acc.arm_b))):
        rates = [r for r in arm.positions]
        value = np.array([np.nan if r is None else r.value for r in rates])
        low = np.array([np.nan if r is None else r.value - r.low for r in rates])
        high = np.array([np.nan if r is None else r.high - r.value for r in rates])
        length = "" if arm.mean_length is None else f", mean length {arm.mean_length:.2f}"
        left.errorbar(js + (i - 0.5) * 0.12, value, yerr=np.vstack([low, high]), capsize=3,
                      color=_COLOURS[side], linestyle=_LINES[side], marker="o",
                      label=f"{arm.name} ({arm.verifies} verifies, {arm.requests} requests"
                            f"{length})")
    left.set_xticks(js)
    left.set_ylim(-0.02, 1.02)
    left.set_xlabel("draft position j")
    left.set_ylabel("verifies accepting >= j drafts")
    left.legend(fontsize=7, loc="upper right")
    diff = np.array([d.diff for d in acc.deltas])
    known = np.array([d.low is not None for d in acc.deltas])
    lo = np.array([d.diff - d.low if d.low is not None else 0.0 for d in acc.deltas])
    hi = np.array([d.high - d.diff if d.high is not None else 0.0 for d in acc.deltas])
    colours = {None: "#555555", VerdictKind.AGREE: "#1a7f37", VerdictKind.DIFFER: "#cf222e",
               VerdictKind.UNINFORMATIVE: "#9a6700"}
    decisions = [d.decision for d in acc.deltas]
    # one errorbar per decision and kind of bound, not one per position: the same marks with
    # a fraction of the artists (no line joins the points)
    for decision in dict.fromkeys(decisions):
        of = np.array([x is decision for x in decisions])
        for at, bounds in ((of & known, True), (of & ~known, False)):
            if at.any():
                right.errorbar(js[at], diff[at], yerr=np.vstack([lo[at], hi[at]]) if bounds
                               else None, capsize=3, marker="s", linestyle="none",
                               color=colours[decision])
    right.axhline(0.0, color="#999999", linewidth=0.8)
    level = f"{1 - 2 * acc.one_sided_alpha:.4g}"
    if acc.gate is not None:
        right.axhline(-acc.gate.max_drop, color="#d7191c", linestyle="--", linewidth=1.2,
                      label=f"-max_drop = {-acc.gate.max_drop:g}")
        right.legend(fontsize=7, loc="lower right")
    right.set_xticks(js)
    right.set_xlabel("draft position j")
    right.set_ylabel(f"B - A ({level} interval)")
    verdict = "" if acc.verdict is None else f" Gate: {acc.verdict.value}."
    return Figure_("Acceptance per draft position",
                   "Left: the share of verifies that accepted at least j drafts, per arm, with "
                   "95% intervals clustered by request (a request's verifies share a context). "
                   f"Right: B - A per position with its {level} interval, paired by request "
                   "(green: within the margin, red: a drop beyond it, amber: undecided)."
                   + verdict, _encode(fig))


def logit_diff_figure(rep: ComparisonReport, c: Comparison) -> Figure_ | None:
    """|logit difference| of every compared row against atol (and the noise floor if measured)."""
    r = c.rows
    d = r.abs_logit_diff[r.compared]
    d = d[~np.isnan(d)]
    if not d.size:
        return None
    zeros = int((d == 0).sum())
    inf = int(np.isinf(d).sum())
    positive = d[(d > 0) & np.isfinite(d)]
    fig = _new_figure(9, 3.2)
    ax = fig.subplots()
    summary = f"{d.size} compared rows: {zeros} bit-identical"
    if inf:
        summary += f", {inf} with no shared id or nan in one arm"
    if positive.size:
        bins = _log_bins(positive)
        counts = _log_histogram(positive, bins)
        ax.stairs(counts, bins, color="#6a3d9a", linewidth=1.6, fill=True, alpha=0.45,
                  label=f"{positive.size} rows with |diff| > 0 (max {positive.max():.3g})")
        ax.set_xscale("log")
        ax.set_xlim(bins[0], bins[-1])
    else:
        ax.text(0.5, 0.5, f"all {d.size - inf} finite compared rows are bit-identical",
                ha="center", va="center", transform=ax.transAxes, fontsize=11)
        ax.set_xscale("log")
        ax.set_xlim(1e-8, 1.0)
        ax.set_yticks([])
    if rep.spec.rules.atol > 0:
        ax.axvline(_drawn_at(rep.spec.rules.atol), color="#d7191c", linestyle="--", linewidth=1.3,
                   label=f"atol = {rep.spec.rules.atol:g}")
    else:
        ax.plot([], [], " ", label="atol = 0: bitwise, any |diff| > 0 differs")
    floor = _noise_floor(c)
    if floor is not None and floor > 0:
        ax.axvline(_drawn_at(floor), color="#1a7f37", linestyle=":", linewidth=1.3,
                   label=f"noise floor = {floor:.3g}")
    from difftest.analysis.logit_instrument import blind_radius

    radius = blind_radius(c)
    if radius.logits is not None and radius.logits > 0:
        ax.axvline(_drawn_at(radius.logits), color="#555555", linestyle="-.", linewidth=1.1,
                   label=f"blind radius = {radius.logits:.3g} (its {radius.logit_rule}): a "
                         "change below it goes unseen")
    ax.set_xlabel("max |logit A - logit B| over the shared top-k ids of a row")
    ax.set_ylabel("rows")
    ax.set_title(summary, fontsize=9, y=1.0)
    fig.legend(fontsize=8, loc="outside lower center", ncol=2, frameon=False)
    return Figure_("Logit differences against the tolerance",
                   "Per compared row, on a log axis (bit-identical rows cannot be drawn there "
                   "and are counted in the title).", _encode(fig))


def _noise_floor(c: Comparison) -> float | None:
    """The A/A noise floor, when reruns of arm A measured one."""
    if c.logits is None or c.logits.floor is None:
        return None
    return c.logits.floor.floor


def _map_requests(c: Comparison) -> list[int]:
    """The requests to draw: those with differences first (in order of appearance), then the
    rest, at most MAX_MAP_REQUESTS."""
    from difftest.analysis.compare import DIFFER, DIVERGED, NEAR_TIE, NOISE_FLIP

    r = c.rows
    bad = np.isin(r.status, (DIFFER, NEAR_TIE, NOISE_FLIP, DIVERGED)) | r.logit_differs
    differing, first = np.unique(r.req[bad], return_index=True)
    order = [int(q) for q in differing[np.argsort(first)][:MAX_MAP_REQUESTS]]
    seen = set(order)
    order += [q for q in _requests_present(c).tolist() if q not in seen]
    return order[:MAX_MAP_REQUESTS]


def _requests_present(c: Comparison) -> np.ndarray:
    """The codes of the requests that have rows, ascending."""
    return np.flatnonzero(np.bincount(c.rows.req, minlength=len(c.requests)))


def row_map_figure(c: Comparison, blind: str = "") -> Figure_ | None:
    """Per request, a step x row map of row status and (with logits) of |logit difference|.

    Long requests are binned to MAX_MAP_STEPS columns; a binned cell shows its worst row (any
    difference beats agreement) and its largest |diff|, so no difference is hidden by binning.
    `blind`: why the comparison could not have failed, written across each status panel so an
    all-green map is not read as agreement that means something."""
    from matplotlib.colors import ListedColormap, LogNorm
    from matplotlib.patches import Patch

    from difftest.analysis.compare import (DIFFER, DIVERGED, NEAR_TIE, NOISE_FLIP, SAME, STATUS_NAMES,
                                  UNMATCHED_A, UNMATCHED_B)

    r = c.rows
    if not len(r):
        return None
    # every status has its class (the index into _MAP_CLASSES): a status without one is a bug
    prio = np.full(len(STATUS_NAMES), -1, dtype=np.int8)
    prio[[SAME, UNMATCHED_A, UNMATCHED_B, DIVERGED, NEAR_TIE, NOISE_FLIP, DIFFER]] = [
        1, 2, 2, 3, 4, 5, 6]
    assert (prio >= 0).all(), "a row status without a map class"
    # step = index of the (req, pos) block within its request, whichever arm visited it
    new_step = np.r_[True, (r.req[1:] != r.req[:-1]) | (r.pos[1:] != r.pos[:-1])]
    step = np.cumsum(new_step) - 1
    requests = _map_requests(c)
    with_logits = bool(np.isfinite(r.abs_logit_diff).any() | np.isinf(r.abs_logit_diff).any())
    diffs = r.abs_logit_diff
    positive = diffs[(diffs > 0) & np.isfinite(diffs)]
    panels = 2 if with_logits else 1
    k = int(r.row.max())
    # laid out by hand: constrained layout costs more than drawing a map of many panels
    panel_h = 0.4 + 0.04 * min(k, 16)
    foot = 0.95 if with_logits else 0.55  # room for the x label and the |diff| legend
    height = 0.55 + foot + len(requests) * panels * (panel_h + 0.5)
    fig = _new_figure(10, height, layout=None)
    fig.subplots_adjust(left=0.06, right=0.9 if with_logits else 0.98, top=1 - 0.55 / height,
                        bottom=foot / height, hspace=0.5 / panel_h)
    axes = fig.subplots(len(requests) * panels, 1, squeeze=False)[:, 0]
    cmap = ListedColormap([colour for _, colour in _MAP_CLASSES])
    dcmap = _diff_cmap()
    lo, hi = (_log_span(float(positive.min()), float(positive.max())) if positive.size
              else (1e-6, 1.0))
    norm = LogNorm(vmin=lo, vmax=hi)
    image = None
    for n, req in enumerate(requests):
        sel = np.flatnonzero(r.req == req)
        s = step[sel] - step[sel].min()
        steps = int(s.max()) + 1
        cols = min(steps, MAX_MAP_STEPS)
        col = (s * cols) // steps
        row = r.row[sel].astype(np.int64) - 1
        grid = np.zeros((k, cols), dtype=np.int8)
        np.maximum.at(grid, (row, col), prio[r.status[sel]])
        name = _shortened(c.requests[req]) or "(ordinal)"
        binned = f", {steps} steps in {cols} columns" if cols < steps else f", {steps} steps"
        ax = axes[n * panels]
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(_MAP_CLASSES) - 0.5, aspect="auto",
                  interpolation="nearest", extent=(-0.5, cols - 0.5, k + 0.5, 0.5))
        ax.set_ylabel("row")
        ax.set_title(f"request {name}: row status{binned}", fontsize=9, loc="left", y=1.0)
        ax.tick_params(labelsize=7)
        block_pos = _column_positions(r.pos[sel], s, col, cols)
        _position_ticks(ax, block_pos)
        if blind:
            ax.text(0.5, 0.5, blind, transform=ax.transAxes, ha="center", va="center",
                    fontsize=9, color="#9a6700", fontweight="bold",
                    bbox={"boxstyle": "round,pad=0.3", "fc": "#fff8c5", "ec": "#9a6700"})
        first = _first_place(c, req)
        hit = (np.flatnonzero((r.pos[sel] == first[0]) & (r.row[sel] == first[1]))
               if first is not None else np.zeros(0, np.int64))
        # a token flip is marked on the status map, a logit difference on the |diff| map
        on_status = first is not None and (first[2] == "first token flip" or not with_logits)
        if first is not None and hit.size and on_status:
            _mark_first(ax, int(col[hit[0]]), first, k)
        if with_logits:
            d = diffs[sel]
            dgrid = np.full((k, cols), -1.0)
            known = ~np.isnan(d)
            val = np.where(d > 0, _drawn(d), d)  # an infinite |diff| too; 0 stays 0
            np.maximum.at(dgrid, (row[known], col[known]), val[known])
            ax2 = axes[n * panels + 1]
            shown = np.ma.masked_array(np.where(dgrid == 0, lo * 1e-3, dgrid), mask=dgrid < 0)
            image = ax2.imshow(shown, cmap=dcmap,
                               norm=norm, aspect="auto", interpolation="nearest",
                               extent=(-0.5, cols - 0.5, k + 0.5, 0.5))
            ax2.set_ylabel("row")
            _position_ticks(ax2, block_pos)
            ax2.set_title(f"request {name}: |logit difference| (grey: bit-identical, white: "
                          "not compared" + ("" if positive.size else "; no row differs")
                          + ")", fontsize=9, loc="left", y=1.0)
            ax2.tick_params(labelsize=7)
            if first is not None and hit.size and not on_status:
                _mark_first(ax2, int(col[hit[0]]), first, k)
    axes[-1].set_xlabel("block position pos (the request's token count before the block; one "
                        "column per block, binned when long)")
    fig.legend(handles=[Patch(facecolor=colour, edgecolor="#999999", label=label)
                        for label, colour in _MAP_CLASSES], loc="upper center",
               ncol=len(_MAP_CLASSES), fontsize=8, frameon=False)
    if image is not None and positive.size:
        bar = fig.add_axes((0.92, (foot + 0.3) / height, 0.015, 1 - (foot + 1.0) / height))
        fig.colorbar(image, cax=bar, extend="both")
        _label_colorbar(bar, c, norm)
    if with_logits:
        fig.legend(handles=_diff_legend(c), loc="lower center", ncol=4, fontsize=8,
                   frameon=False)
    drawn = len(requests)
    total = int(_requests_present(c).size)
    more = f" ({total - drawn} more request(s) not drawn)" if total > drawn else ""
    return Figure_("Where the arms parted: step x row maps",
                   f"{drawn} of {total} request(s), those with differences first{more}. "
                   "Columns are the blocks of a request in position order; a binned column "
                   "shows its worst row.", _encode(fig))


def _column_positions(pos: np.ndarray, step: np.ndarray, col: np.ndarray,
                      cols: int) -> np.ndarray:
    """The block position `pos` of each map column (its first block, when binned): of the rows
    at the smallest step of their column, the first one's."""
    out = np.full(cols, -1, dtype=np.int64)
    first = np.full(cols, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, col, step)
    at_first = np.flatnonzero(step == first[col])
    shown, where = np.unique(col[at_first], return_index=True)
    out[shown] = pos[at_first[where]]
    return out


def _position_ticks(ax: Any, block_pos: np.ndarray, most: int = 12) -> None:
    """Label columns by the block position they show, at most `most` labels."""
    cols = block_pos.size
    ticks = np.unique(np.linspace(0, cols - 1, min(most, cols)).round().astype(np.int64))
    ticks = ticks[block_pos[ticks] >= 0]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(int(block_pos[t])) for t in ticks])


def _first_place(c: Comparison, req: int) -> tuple[int, int, str] | None:
    """(pos, row, what) of the first difference, when it is in this request."""
    f = c.first_difference or (c.first_logit_difference if c.blocks_logit_differing else None)
    if f is None or c.requests[req] != f.req:
        return None
    what = "first token flip" if c.first_difference else "first logit difference"
    return f.pos, f.row, what


def _mark_first(ax: Any, column: int, first: tuple[int, int, str], k: int) -> None:
    pos, row, what = first
    for edge, width in (("#ffffff", 3.2), ("#000000", 1.6)):  # a halo: seen on any colour
        ax.plot([column], [row], marker="o", markersize=11, markerfacecolor="none",
                markeredgecolor=edge, markeredgewidth=width, clip_on=False)
    ax.annotate(f"{what}: pos {pos} row {row}", xy=(column, row), xytext=(6, 0),
                textcoords="offset points", fontsize=8, va="center", ha="left",
                bbox={"boxstyle": "round,pad=0.2", "fc": "#ffffff", "ec": "#000000", "lw": 0.6})


def _label_colorbar(bar: Any, c: Comparison, norm: Any) -> None:
    """Name both triangles and draw the tolerance and noise floor where they fall on the bar."""
    bar.set_ylabel("|logit difference|", fontsize=8)
    bar.tick_params(labelsize=7)
    # beside the triangles, which extend past both ends of the bar
    bar.text(1.6, 1.03, "over", transform=bar.transAxes, ha="left", va="center", fontsize=7,
             color="#d7191c")
    bar.text(1.6, -0.03, "under", transform=bar.transAxes, ha="left", va="center", fontsize=7,
             color="#555555")
    lo, hi = norm.vmin, norm.vmax
    floor = _noise_floor(c)
    for value, label, colour in ((c.rules.atol, "atol", "#d7191c"), (floor, "floor", "#1a7f37")):
        if value is not None and value > 0 and lo <= value <= hi:
            bar.axhline(value, color=colour, linewidth=2)
            bar.text(-0.3, value, label, transform=bar.get_yaxis_transform(), ha="right",
                     va="center", fontsize=7, color=colour)


def _diff_legend(c: Comparison) -> list[Any]:
    """What every colour of a |logit difference| panel means, and the lines on its bar."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    out: list[Any] = [
        Patch(facecolor="#d9d9d9", edgecolor="#999999", label="under (grey): bit-identical"),
        Patch(facecolor="#d7191c", edgecolor="#999999",
              label="over (red): nan in one arm, or no shared id"),
        Patch(facecolor="#ffffff", edgecolor="#999999", label="white: not compared")]
    if c.rules.atol > 0:
        out.append(Line2D([], [], color="#d7191c", linewidth=2,
                          label=f"atol {c.rules.atol:g} on the bar: above it a row differs"))
    else:
        out.append(Patch(facecolor="none", edgecolor="none",
                         label="atol 0: every colour above grey differs"))
    floor = _noise_floor(c)
    if floor is not None and floor > 0:
        out.append(Line2D([], [], color="#1a7f37", linewidth=2,
                          label=f"noise floor {floor:.3g} on the bar"))
    return out


def _diff_cmap() -> Any:
    from matplotlib import colormaps

    # under: bit-identical; over: nan in one arm only, or no shared id; bad: not compared
    return colormaps["viridis"].with_extremes(under="#d9d9d9", over="#d7191c", bad="#ffffff")


def _block_measures(o: ArmOutcome) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per verify step of one arm, in file order: distinct ids in its block, distinct ids
    drafted so far, whether the block repeats the step before's, and its smallest top-1/top-2
    margin (nan where no logits were traced)."""
    assert o.trace is not None
    v = o.trace.verifies
    n = len(v)
    k = np.diff(v.draft_off)
    block = np.repeat(np.arange(n), k)
    pairs = np.unique(np.stack([block, v.draft_ids.astype(np.int64)]), axis=1)
    distinct = np.bincount(pairs[0], minlength=n)
    _, first_seen = np.unique(v.draft_ids, return_index=True)
    so_far = np.cumsum(np.bincount(block[first_seen], minlength=n)) if n else np.zeros(0)
    same = np.zeros(n, dtype=bool)
    ids = v.draft_ids
    for i in range(1, n):
        a0, a1, b0, b1 = v.draft_off[i - 1], v.draft_off[i], v.draft_off[i], v.draft_off[i + 1]
        same[i] = a1 - a0 == b1 - b0 and b1 > b0 and bool(np.array_equal(ids[a0:a1], ids[b0:b1]))
    margin = np.full(n, np.nan)
    lg = o.trace.logits
    if len(lg):
        span = int(max(int(lg.pos.max()), int(v.pos.max()) if n else 0)) + 1
        keys = lg.req.astype(np.int64) * span + lg.pos
        uniq, inverse = np.unique(keys, return_inverse=True)
        least = np.full(uniq.size, np.inf)
        m = lg.margins
        ok = np.isfinite(m)
        np.minimum.at(least, inverse[ok], m[ok])
        vkeys = v.req.astype(np.int64) * span + v.pos
        at = np.clip(np.searchsorted(uniq, vkeys), 0, max(uniq.size - 1, 0))
        hit = (uniq[at] == vkeys) & np.isfinite(least[at])
        margin[hit] = least[at][hit]
    return distinct, so_far, same, margin


def blindness_figure(rep: ComparisonReport) -> Figure_ | None:
    """Why a comparison could not have failed, step by step: how many distinct ids each block
    drafted (blocks that repeat the step before marked) and how far each block's top-1 stood
    above its runner-up, against the margin the audit asks for."""
    arms = [(side, o) for side, o in ((ArmSide.A, rep.arm_a), (ArmSide.B, rep.arm_b))
            if o.trace is not None and len(o.trace.verifies)]
    if not arms:
        return None
    fig = _new_figure(9, 5.2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    any_margin = False
    for side, o in arms:
        distinct, so_far, same, margin = _block_measures(o)
        x = np.arange(distinct.size)
        top.step(x, so_far, where="post", color=_COLOURS[side], linestyle=_LINES[side],
                 linewidth=1.4, label=f"{o.name}: distinct ids drafted so far")
        top.plot(x, distinct, ".", color=_COLOURS[side], markersize=4,
                 label=f"{o.name}: distinct ids in the block")
        if same.any():
            top.plot(x[same], distinct[same], "x", color="#d7191c", markersize=7,
                     label=f"{o.name}: block identical to the step before "
                           f"({int(same.sum())} of {same.size})")
        if np.isfinite(margin).any():
            any_margin = True
            bottom.plot(x, margin, ".", color=_COLOURS[side], markersize=4,
                        label=f"{o.name}: smallest top-1/top-2 margin of the block")
    top.set_ylabel("distinct ids")
    top.set_ylim(bottom=0)
    need = 2 * rep.thresholds.max_blind_radius
    if any_margin:
        bottom.set_yscale("log")
        bottom.axhline(need, color="#555555", linestyle=":", linewidth=1.2,
                       label=f"margin {need:g}: above it, no change smaller than the audit's "
                             f"blind radius {rep.thresholds.max_blind_radius:g} can flip a token")
    else:
        bottom.text(0.5, 0.5, "no block logits traced (level < 3): margins unknown, so a wrong "
                    "change could hide in any of them", ha="center", va="center",
                    transform=bottom.transAxes, fontsize=9)
        bottom.set_yticks([])
    bottom.set_ylabel("margin")
    bottom.set_xlabel("verify step of the arm, in trace order")
    fig.legend(fontsize=7.5, loc="outside lower center", ncol=2, frameon=False)
    return Figure_("Why this comparison could not have failed",
                   "Per verify step: distinct drafted ids (per block and so far) and the "
                   "smallest margin of each block. Few distinct ids, repeated blocks or margins "
                   "far above the dotted line leave nothing a wrong arm could change visibly.",
                   _encode(fig))


def sampled_figure(rep: ComparisonReport) -> Figure_ | None:
    """decoding = "sampled": per position the TV of the arms' token laws above the A/A floor
    (and the raw TV and the floor), and per drafted row each arm's observed acceptance against
    the acceptance its traced overlap sum(min(p, q)) expects."""
    ev = rep.sampled
    if ev is None or not ev.test.positions:
        return None
    fig = _new_figure(9, 3.4)
    left, right = fig.subplots(1, 2)
    t = np.arange(ev.test.positions)
    left.bar(t, ev.test.excess_tv, color=_COLOURS[ArmSide.B], label="excess TV (B vs A - floor)")
    left.plot(t, ev.test.raw_tv, "o-", color="#555", ms=3, lw=1, label="raw TV")
    left.plot(t, ev.test.floor_tv, "--", color="#999", lw=1, label="A/A floor")
    left.axhline(ev.test.mde, color="#c33", lw=0.8, ls=":", label=f"MDE {ev.test.mde:.2f}")
    left.set_xlabel("position (from the first compared token)")
    left.set_ylabel("total variation")
    left.legend(fontsize=7, frameon=False)
    shown = False
    for side, name in ((ArmSide.A, rep.arm_a.name), (ArmSide.B, rep.arm_b.name)):
        rows = ev.acceptance.get(name, ())
        if not rows:
            continue
        shown = True
        r = np.array([x.row for x in rows])
        right.plot(r, [x.observed for x in rows], "o-", color=_COLOURS[side], ms=4,
                   label=f"{name} observed")
        right.plot(r, [x.expected for x in rows], "x--", color=_COLOURS[side], ms=5,
                   label=f"{name} expected (overlap)")
        for x in rows:
            if x.flagged:
                right.annotate("flagged", (x.row, x.observed), fontsize=7, color="#c33")
    if shown:
        right.set_xlabel("drafted row")
        right.set_ylabel("acceptance when tested")
        right.legend(fontsize=7, frameon=False)
    else:
        right.set_axis_off()
        right.text(0.5, 0.5, "no [spec-sample] lines", ha="center", va="center", fontsize=8)
    return Figure_("Token laws and acceptance (sampled decoding)",
                   f"Left: per position, the TV between the arms' token laws less the A/A floor "
                   f"(e-value {ev.test.peak:.3g} after {ev.test.pairs} request pairs; 1/alpha = "
                   f"{1 / ev.test.alpha:.3g} decides). Right: a correct verify accepts a row as "
                   "often as its overlap sum(min(p, q)) says.", _encode(fig))


def figures(rep: ComparisonReport) -> list[Figure_]:
    """Every figure the comparison has data for, in reading order (for an uninformative one,
    first the figure that shows why)."""
    out: list[Figure_ | None] = []
    if rep.verdict.kind is VerdictKind.UNINFORMATIVE:
        out.append(blindness_figure(rep))
    out.append(margin_figure(rep))
    c = rep.comparison
    if c is not None:
        blind = ("the comparison could not have failed: agreement here shows nothing"
                 if rep.verdict.kind is VerdictKind.UNINFORMATIVE and not differed(c) else "")
        out += [row_map_figure(c, blind), logit_diff_figure(rep, c)]
    out += [accepted_figure(rep), acceptance_figure(rep), sampled_figure(rep)]
    return [f for f in out if f is not None]


def _localization_drawing(loc: Localization) -> Figure:
    """Per module in forward order its max |A - B| (log scale; exact zeros at the bottom), the
    tolerance as a line and the first module beyond it marked."""
    diffs = np.array([m.max_abs_diff for m in loc.modules], dtype=np.float64)
    finite = diffs[np.isfinite(diffs)]  # inf (a value non-finite in one arm) drawn at the top
    diffs = np.where(np.isinf(diffs), (float(finite.max()) if finite.size else 1.0) * 10, diffs)
    positive = diffs[diffs > 0]
    floor = float(positive.min()) / 10 if positive.size else 1e-12
    if loc.atol > 0:
        floor = min(floor, loc.atol / 10)
    shown = np.where(diffs > 0, diffs, floor)
    x = np.arange(diffs.size)
    fig = _new_figure(9, 3.2)
    ax = fig.subplots()
    ax.step(x, shown, where="mid", color=_COLOURS[ArmSide.A], lw=1.2, label="max |A - B| per module")
    ax.set_yscale("log")
    if loc.atol > 0:
        ax.axhline(loc.atol, color="#555555", ls=":", lw=1, label=f"tolerance {loc.atol:g}")
    if loc.first is not None:
        i = loc.modules.index(loc.first)
        ax.axvline(i, color="#d7191c", lw=1, ls="--")
        ax.plot([i], [shown[i]], "o", color="#d7191c", label=f"first: {loc.first.module}")
    ax.set_xlabel("module, in forward order")
    ax.set_ylabel("max |A - B| (0 drawn at the bottom)")
    ax.set_xlim(-0.5, max(diffs.size - 0.5, 0.5))
    fig.legend(fontsize=8, loc="outside upper center", ncol=3, frameon=False)
    return fig


def localization_figure(loc: Localization) -> Figure_:
    """The per-module figure of one localisation, for the page."""
    return Figure_("Max |A - B| per module, in forward order",
                   "Modules before the first marked one agree within the tolerance; from it on, "
                   "its difference flows on.", _encode(_localization_drawing(loc)))


def localization_svg(loc: Localization) -> bytes:
    """The same figure as an SVG file's bytes (`difftest localize` writes it beside its
    captures)."""
    return _svg(_localization_drawing(loc))


def _localization_section(saved: Sequence[SavedLocalization], h2: str) -> list[str]:
    out: list[str] = []
    for s in saved:
        req, pos = s.at
        fig = localization_figure(s.localization)
        out += [f"<{h2}>Localisation at {_e(req)}:{pos}</{h2}>",
                f"<p>{_e(s.localization.describe())}</p>",
                f'<figure><img alt="{_e(fig.title)}" src="{fig.uri}">'
                f"<figcaption><b>{_e(fig.title)}.</b> {_e(fig.caption)} Captures and every "
                f"module in <code>{_e(s.folder)}</code>.</figcaption></figure>"]
    return out


# -- sections ----------------------------------------------------------------------------------

def _first_difference(rep: ComparisonReport, c: Comparison) -> str:
    f = c.first_difference or c.first_logit_difference
    if f is None:
        return "<p>No row differs.</p>"
    kind = "first token difference" if c.first_difference else "first logit difference"
    req, pos, row = f.req, f.pos, f.row
    parts = [f"<p>The {kind} is at {_e(f.where)}.</p>"]
    rows = []
    tokens = ((c.first_difference.token_a, c.first_difference.token_b) if c.first_difference
              else (None, None))
    for o, token in zip((rep.arm_a, rep.arm_b), tokens, strict=True):
        top = _top_list(o, req, pos, row)
        drafted = (str(token) if token is not None and token >= 0 else "-") \
            if c.first_difference else _drafted(o, req, pos, row)
        rows.append([o.name, drafted, top])
    parts.append(_table(["arm", "drafted", "top-k logits at that row (id:value)"], rows))
    return "".join(parts)


def _drafted(o: ArmOutcome, req: str, pos: int, row: int) -> str:
    t = o.trace
    if t is None:
        return "-"
    code = t.request_code(req) if req else None
    if code is None:
        return "-"
    v = t.verifies
    hit = np.flatnonzero((v.req == code) & (v.pos == pos))
    if hit.size:
        draft = v.draft(int(hit[0]))
        return str(int(draft[row - 1])) if row - 1 < draft.size else "-"
    return "-"


def _top_list(o: ArmOutcome, req: str, pos: int, row: int) -> str:
    t = o.trace
    if t is None or not len(t.logits):
        return "not traced"
    code = t.request_code(req)
    lg = t.logits
    hit = np.flatnonzero((lg.req == code) & (lg.pos == pos) & (lg.row == row))
    if not hit.size:
        return "not traced"
    i = int(hit[0])
    w = int(lg.width[i])
    return "  ".join(f"{int(lg.top_ids[i, j])}:{float(lg.top_vals[i, j]):.6g}" for j in range(w))


def _row_cells(c: Comparison, i: int, judged: Mapping[int, object]) -> list[object]:
    from difftest.analysis.compare import STATUS_NAMES

    r = c.rows
    return [c.requests[int(r.req[i])], int(r.pos[i]), int(r.row[i]),
            int(r.token_a[i]) if r.has_a[i] else "-", int(r.token_b[i]) if r.has_b[i] else "-",
            STATUS_NAMES[int(r.status[i])], getattr(judged[i], "value", "") or "-",
            _num(float(r.margin_a[i])), _num(float(r.margin_b[i])),
            _num(float(r.abs_logit_diff[i]))]


_ROW_HEADERS = ["req", "pos", "row", "token a", "token b", "status", "logits",
                "margin a", "margin b", "|logit diff|"]
_ROW_NUMERIC = [False, True, True, True, True, False, False, True, True, True]


def _row_table(c: Comparison, idx: np.ndarray, cls: str) -> str:
    judged = dict(zip(idx.tolist(), c.rows.logit_judgements(idx), strict=True))  # shown rows only
    head = "".join(f"<th>{_e(h)}</th>" for h in _ROW_HEADERS)
    body = "".join(f'<tr class="{cls}">' + "".join(
        f'<td class="n">{_e(x)}</td>' if _ROW_NUMERIC[j] else f"<td>{_e(x)}</td>"
        for j, x in enumerate(_row_cells(c, int(i), judged))) + "</tr>\n" for i in idx)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"


def _differing_rows(c: Comparison) -> str:
    """Token flips first, in their own table, then the rows whose tokens agree and whose logits
    differ (or cannot be told apart at the printed resolution)."""
    from difftest.analysis.compare import DIFFER, NEAR_TIE, NOISE_FLIP

    r = c.rows
    flips = np.flatnonzero(np.isin(r.status, (DIFFER, NEAR_TIE, NOISE_FLIP)))
    # an unresolved row is shown too: its logits are not shown to agree
    logit_only = np.flatnonzero((r.logit_differs | r.logit_unresolved)
                                & ~np.isin(r.status, (DIFFER, NEAR_TIE, NOISE_FLIP)))
    if not flips.size and not logit_only.size:
        return "<p>No row differs.</p>"
    out = []
    for idx, title, cls, what in (
            (flips, "Token flips", "flip", "the arms drafted different tokens"),
            (logit_only, "Logit-only differences", "logit",
             "same token, logits differ or cannot be told apart")):
        if not idx.size:  # a heading in the flip's colour over no row would say otherwise
            out.append(f'<h4 class="muted">{title}: none</h4>')
            continue
        shown = idx[:MAX_DIFF_ROWS]
        more = (f"; the first {shown.size} are shown, all of them are in the CSV export"
                if idx.size > shown.size else "")
        out.append(f'<h4 class="{cls}">{title}: {idx.size} row(s)</h4>'
                   f'<p class="muted">{_e(what)}{_e(more)}.</p>')
        if shown.size:
            out.append(_row_table(c, shown, cls))
    return "\n".join(out)


def comparison_section(rep: ComparisonReport, level: int = 1,
                       localized: Sequence[SavedLocalization] = ()) -> str:
    """The body of one comparison: verdict and reasons, arms, figures, first difference, rows,
    and the run's localisations (`difftest localize`)."""
    h, h2 = f"h{level}", f"h{level + 1}"
    v = rep.verdict
    out = [f"<section><{h}>difftest <code>{_e(rep.name)}</code>: {_e(rep.arm_a.name)} vs "
           f"{_e(rep.arm_b.name)}</{h}>", f"<p>{_badge(rep)}</p>", "<ul>"]
    out += [f"<li>{_e(reason.splitlines()[0] if reason else reason)}</li>" for reason in v.reasons]
    out += ["</ul>", f"<{h2}>Arms</{h2}>", _arms_table(rep)]
    found = bug_class_lines(rep)
    if found:
        out += [f"<{h2}>Bug class</{h2}>", f"<p><b>{_e(found[0])}</b></p>", "<ul>"]
        out += [f"<li>{_e(x.strip())}</li>" for x in found[1:]] + ["</ul>"]
    headers, cov = coverage_cells(rep)
    if cov:
        out += [f"<{h2}>Coverage</{h2}>",
                "<p class=\"muted\">What each arm exercised; <i>about</i>: the state the "
                "comparison's toggle is about.</p>",
                _table(headers, cov, [False, False, True, False, True, True])]
    c = rep.comparison
    figs = figures(rep)
    if figs:
        out.append(f"<{h2}>Figures</{h2}>")
    for fig in figs:
        out.append(f'<figure><img alt="{_e(fig.title)}" src="{fig.uri}">'
                   f"<figcaption><b>{_e(fig.title)}.</b> {_e(fig.caption)}</figcaption></figure>")
    if c is not None:
        if not any(np.isfinite(o.trace.logits.top_vals).any() for o in (rep.arm_a, rep.arm_b)
                   if o.trace is not None and len(o.trace.logits)):
            out.append("<p class=\"muted\">No block logits traced (level &lt; 3): no margin or "
                       "logit-difference figure.</p>")
        out += [f"<{h2}>First difference</{h2}>", _first_difference(rep, c),
                f"<{h2}>Differing rows</{h2}>", _differing_rows(c)]
    out += _localization_section(localized, h2)
    if rep.run_dir:
        out.append(f"<p>Run directory: <code>{_e(rep.run_dir)}</code></p>")
    out.append("</section>")
    return "\n".join(out)


def render_comparison(rep: ComparisonReport,
                      localized: Sequence[SavedLocalization] = ()) -> str:
    return _page(f"difftest {rep.name}: {rep.verdict.kind}",
                 comparison_section(rep, localized=localized))


def _probe_section(p: ProbeReport) -> str:
    rows = [[m.name, m.result, m.killed_by or "-",
             m.blocks_differing, m.blocks_logit_differing, m.report.verdict.kind]
            for m in p.mutations]
    notes = "".join(f"<li>{_e(n)}</li>" for n in p.notes)
    return (f"<section><h2>Probe <code>{_e(p.comparison)}</code>: mutation score "
            f"{p.mutation_score:.2f}, exit {int(p.exit_code)}</h2>"
            f"<p>{_e(p.arm_a)} vs {_e(p.arm_b)} broken on purpose.</p>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + _table(["mutation", "result", "killed by", "blocks differing",
                      "logit-differing blocks", "verdict"], rows,
                     [False, False, False, True, True, False]) + "</section>")


def _probe_cell(p: ProbeReport | None) -> str:
    if p is None:
        return "-"
    killed = sum(m.killed for m in p.mutations)
    return f"{p.mutation_score:.2f} ({killed}/{len(p.applied)} killed)"


def _seconds(rep: ComparisonReport) -> float | None:
    times = [o.result.duration_s for o in (rep.arm_a, rep.arm_b) if o.result is not None]
    return max(times) if times else None


def _summary_table(result: CheckResult) -> str:
    """One coloured row per comparison, linking to its section: verdict, what could have failed,
    what differed, the probe's score and the arms' time."""
    rows = []
    for n, r in enumerate(result.reports):
        head = headline(r.verdict)
        p = result.probes.get(r.name)
        tone = head.tone if p is None or p.exit_code == 0 or not head.passed else Tone.BLIND
        seconds = _seconds(r)
        cells = [f'<span class="verdict {head.tone.value}">{_e(head.observed)}</span>',
                 f'<a href="#c{n}"><code>{_e(r.name)}</code></a>',
                 f"{_e(r.arm_a.name)} vs {_e(r.arm_b.name)}", _e(head.qualifier),
                 _e(", ".join(r.verdict.instruments) or "none"),
                 _e(", ".join(differed(r.comparison)) or ("-" if r.comparison else
                                                           "nothing compared")),
                 _e(_probe_cell(p)), "-" if seconds is None else f"{seconds:.1f} s"]
        rows.append(f'<tr class="row-{tone.value}">' + "".join(f"<td>{c}</td>" for c in cells)
                    + "</tr>")
    heads = ["verdict", "comparison", "arms", "expectation", "could have failed through",
             "differed", "probe score", "time"]
    from difftest.report.gate_report import warnings_of

    warned = [f"<li><code>{_e(r.name)}</code>: {_e(w)}</li>" for r in result.reports
              for w in warnings_of(r)]
    listed = ('\n<ul class="warnings">' + "".join(warned) + "</ul>") if warned else ""
    return ('<table class="summary"><thead><tr>' + "".join(f"<th>{h}</th>" for h in heads)
            + "</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>" + listed)


def render_check(result: CheckResult) -> str:
    """check.html: a coloured summary linking to one section per comparison (and its probe);
    sections of comparisons that passed are folded, failures open."""
    code = int(result.exit_code)
    ok = code == 0
    took = (f", {result.duration_s:.1f} s in all" if result.duration_s is not None else "")
    started = f", started {result.started_at}" if result.started_at else ""
    passed = sum(r.verdict.passed for r in result.reports)
    body = [f'<h1><span class="verdict {"pass" if ok else "fail"}">difftest check: '
            f"{'passed' if ok else 'FAILED'}</span> exit {code}</h1>",
            f"<p>{passed}/{len(result.reports)} comparison(s) passed; config "
            f"<code>{_e(result.config)}</code>{_e(started)}{_e(took)}.</p>",
            _summary_table(result)]
    for n, r in enumerate(result.reports):
        p = result.probes.get(r.name)
        inner = comparison_section(r, level=2) + (_probe_section(p) if p is not None else "")
        fine = r.verdict.passed and (p is None or p.exit_code == 0)
        head = headline(r.verdict)
        body.append(f'<details id="c{n}"{"" if fine else " open"}><summary>'
                    f'<span class="verdict {head.tone.value}">{_e(head.observed)}</span> '
                    f"<code>{_e(r.name)}</code> {_e(head.qualifier)}</summary>\n{inner}\n"
                    "</details>")
    body += [_sweep_section(sw) for sw in result.sweeps]
    if result.run_dir:
        body.append(f"<p>Run directory: <code>{_e(result.run_dir)}</code></p>")
    return _page("difftest check", "\n".join(body))


def _sweep_section(sw: SweepReport) -> str:
    """A sweep of `check` (difftest.flow.sweep): per state, its generated inputs and what they
    showed."""
    from difftest.report.gate_report import sweep_summary

    rows = [[f"{c.cls.label} ({c.cls.value})", c.inputs, c.covered, c.differed,
             c.uninformative, c.not_run] for c in sw.classes]
    return (f"<section><h2>Sweep <code>{_e(sw.comparison)}</code></h2>"
            f"<p>{_e(sweep_summary(sw))}</p>"
            + _table(["state", "inputs", "exercised", "differed", "uninformative", "not run"],
                     rows, [False, True, True, True, True, True]) + "</section>")


def write_html(path: Path, text: str) -> None:
    """Atomically, like every report file."""
    from difftest.core.atomic import write_text_atomic

    write_text_atomic(Path(path), text)
