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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from difftest.kinds import VerdictKind
from difftest.report.text import strip_ansi

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from difftest.compare import Comparison
    from difftest.gate import CheckResult, ProbeReport
    from difftest.pipeline import ArmOutcome, ComparisonReport

REPORT_HTML = "report.html"
CHECK_HTML = "check.html"

MAX_DIFF_ROWS = 50  # rows of the differing-rows table
MAX_MAP_REQUESTS = 6  # requests drawn in the step x row maps
MAX_MAP_STEPS = 600  # columns of a step x row map; longer requests are binned
HIST_BINS = 60

_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
        "form-action 'none'")
_COLOURS = {"a": "#1f77b4", "b": "#ff7f0e"}
_LINES = {"a": "-", "b": "--"}  # arm B dashed: identical arms still show both lines
# Status colours of the row map, by the priority a binned cell shows (the worst row wins).
_MAP_CLASSES = (("no block", "#ffffff"), ("same", "#cfe8cf"), ("unmatched", "#a6cee3"),
                ("context-diverged", "#b8b8b8"), ("near-tie", "#fdb863"), ("differ", "#d7191c"))

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
figcaption{color:#57606a;font-size:.9em}pre{background:#f6f8fa;padding:.6em;overflow:auto;
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
    v = rep.verdict
    cls = ("error" if v.verdict is VerdictKind.ARM_FAILED else
           "blind" if v.verdict.uninformative else "pass" if v.passed else "fail")
    word = "passed" if v.passed else "FAILED"
    return (f'<span class="verdict {cls}">{_e(v.verdict.upper())}</span> expect '
            f"<b>{_e(rep.spec.expect)}</b>; {word}, exit {int(v.exit_code)}")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]],
           numeric: Sequence[bool] | None = None) -> str:
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td class="n">{_e(c)}</td>' if numeric[i] else f"<td>{_e(c)}</td>"
        for i, c in enumerate(row)) + "</tr>\n" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"


def _arms_table(rep: ComparisonReport) -> str:
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
    table = _table(["arm", "level", "blocks", "distinct ids", "entropy bits", "constant",
                    "min margin", "trace", "exit", "seconds", "git sha"], rows,
                   [False, True, True, True, True, False, True, False, True, True, False])
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


def _encode(fig: Figure) -> str:
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "difftest", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _log_span(lo: float, hi: float) -> tuple[float, float]:
    """At least one decade around [lo, hi], so a log axis has ticks to read."""
    if hi < lo * 10:
        mid = np.sqrt(lo * hi)
        lo, hi = min(lo, mid / np.sqrt(10)), max(hi, mid * np.sqrt(10))
    return float(lo), float(hi)


def _log_bins(values: np.ndarray) -> np.ndarray:
    lo, hi = _log_span(float(values.min()), float(values.max()))
    return np.geomspace(lo, hi, HIST_BINS + 1)


def _log_histogram(values: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """np.histogram on log-spaced bins, counted on equal bins of log10 (numpy's fast path for
    uniform bins, instead of a search per value)."""
    logs = np.log10(values)
    counts, _ = np.histogram(logs, bins=bins.size - 1,
                             range=(float(np.log10(bins[0])), float(np.log10(bins[-1]))))
    return counts


def margin_figure(rep: ComparisonReport) -> Figure_ | None:
    """Per arm: the top-1/top-2 margins of every traced row, with near_tie and the blind radius."""
    series = []
    for side, o in (("a", rep.arm_a), ("b", rep.arm_b)):
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
    near_tie = rep.spec.near_tie or 0.0  # None: derived per row, no one line to draw
    if near_tie > 0:
        ax.axvline(near_tie, color="#d7191c", linestyle="--", linewidth=1.2,
                   label=f"near_tie = {near_tie:g} (flips below it are near-ties)")
    threshold = 2 * rep.thresholds.max_blind_radius
    ax.axvline(threshold, color="#555555", linestyle=":", linewidth=1.2,
               label=f"margin {threshold:g} = blind radius {rep.thresholds.max_blind_radius:g} "
                     "(audit limit)")
    for side, o, _ in series:
        au = o.audit
        if au is not None and au.min_margin is not None and au.min_margin > 0:
            ax.axvline(au.min_margin, color=_COLOURS[side], linestyle="-.", linewidth=0.9)
    ax.set_xlabel("top-1 minus top-2 logit (margin; a perturbation below margin/2 cannot flip "
                  "the row)")
    ax.set_ylabel("rows")
    ax.legend(fontsize=8, loc="best")
    return Figure_("Top-1/top-2 margins per arm",
                   "Each arm's margins on a log axis. Dash-dotted: each arm's smallest margin "
                   "(twice its smallest blind radius). Rows left of near_tie may flip as "
                   "near-ties.", _encode(fig))


def accepted_figure(rep: ComparisonReport) -> Figure_ | None:
    """Per arm: how many drafted tokens each verify accepted."""
    series = [(side, o, o.trace.verifies.acc) for side, o in (("a", rep.arm_a), ("b", rep.arm_b))
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
    if rep.spec.atol > 0:
        ax.axvline(rep.spec.atol, color="#d7191c", linestyle="--", linewidth=1.3,
                   label=f"atol = {rep.spec.atol:g}")
    else:
        ax.plot([], [], " ", label="atol = 0: bitwise, any |diff| > 0 differs")
    floor = _noise_floor(c)
    if floor is not None and floor > 0:
        ax.axvline(floor, color="#1a7f37", linestyle=":", linewidth=1.3,
                   label=f"noise floor = {floor:.3g}")
    ax.set_xlabel("max |logit A - logit B| over the shared top-k ids of a row")
    ax.set_ylabel("rows")
    ax.set_title(summary, fontsize=9)
    ax.legend(fontsize=8)
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
    from difftest.compare import DIFFER, DIVERGED, NEAR_TIE

    r = c.rows
    bad = np.isin(r.status, (DIFFER, NEAR_TIE, DIVERGED)) | r.logit_differs
    order: list[int] = []
    for req in r.req[bad]:
        if int(req) not in order:
            order.append(int(req))
            if len(order) == MAX_MAP_REQUESTS:
                return order
    for req in np.unique(r.req):
        if int(req) not in order:
            order.append(int(req))
            if len(order) == MAX_MAP_REQUESTS:
                break
    return order


def row_map_figure(c: Comparison) -> Figure_ | None:
    """Per request, a step x row map of row status and (with logits) of |logit difference|.

    Long requests are binned to MAX_MAP_STEPS columns; a binned cell shows its worst row (any
    difference beats agreement) and its largest |diff|, so no difference is hidden by binning."""
    from matplotlib.colors import ListedColormap, LogNorm
    from matplotlib.patches import Patch

    from difftest.compare import DIFFER, DIVERGED, NEAR_TIE, SAME, UNMATCHED_A, UNMATCHED_B

    r = c.rows
    if not len(r):
        return None
    prio = np.zeros(6, dtype=np.int8)
    prio[[SAME, UNMATCHED_A, UNMATCHED_B, DIVERGED, NEAR_TIE, DIFFER]] = [1, 2, 2, 3, 4, 5]
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
    height = 1.1 + len(requests) * panels * (panel_h + 0.5)
    fig = _new_figure(10, height, layout=None)
    fig.subplots_adjust(left=0.06, right=0.9 if with_logits else 0.98, top=1 - 0.55 / height,
                        bottom=0.55 / height, hspace=0.5 / panel_h)
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
        name = c.requests[req] or "(ordinal)"
        binned = f", {steps} steps in {cols} columns" if cols < steps else f", {steps} steps"
        ax = axes[n * panels]
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(_MAP_CLASSES) - 0.5, aspect="auto",
                  interpolation="nearest", extent=(-0.5, cols - 0.5, k + 0.5, 0.5))
        ax.set_ylabel("row")
        ax.set_title(f"request {name}: row status{binned}", fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        if with_logits:
            d = diffs[sel]
            dgrid = np.full((k, cols), -1.0)
            known = ~np.isnan(d)
            val = np.where(np.isinf(d), np.float64(np.finfo(np.float64).max), d)
            np.maximum.at(dgrid, (row[known], col[known]), val[known])
            ax2 = axes[n * panels + 1]
            shown = np.ma.masked_array(np.where(dgrid == 0, lo * 1e-3, dgrid), mask=dgrid < 0)
            image = ax2.imshow(shown, cmap=dcmap,
                               norm=norm, aspect="auto", interpolation="nearest",
                               extent=(-0.5, cols - 0.5, k + 0.5, 0.5))
            ax2.set_ylabel("row")
            ax2.set_title(f"request {name}: |logit difference| (grey: bit-identical, white: "
                          "not compared" + ("" if positive.size else "; no row differs")
                          + ")", fontsize=9, loc="left")
            ax2.tick_params(labelsize=7)
    axes[-1].set_xlabel("step within the request (column = block; binned when long)")
    fig.legend(handles=[Patch(facecolor=colour, edgecolor="#999999", label=label)
                        for label, colour in _MAP_CLASSES], loc="upper center",
               ncol=len(_MAP_CLASSES), fontsize=8, frameon=False)
    if image is not None and positive.size:
        bar = fig.add_axes((0.92, 0.55 / height, 0.015, 1 - 1.1 / height))
        fig.colorbar(image, cax=bar, label="|diff|", extend="both")
    drawn = len(requests)
    total = int(np.unique(r.req).size)
    more = f" ({total - drawn} more request(s) not drawn)" if total > drawn else ""
    return Figure_("Where the arms parted: step x row maps",
                   f"{drawn} of {total} request(s), those with differences first{more}. "
                   "Columns are the blocks of a request in position order; a binned column "
                   "shows its worst row.", _encode(fig))


def _diff_cmap() -> Any:
    from matplotlib import colormaps

    # under: bit-identical; over: nan in one arm only, or no shared id; bad: not compared
    return colormaps["viridis"].with_extremes(under="#d9d9d9", over="#d7191c", bad="#ffffff")


def figures(rep: ComparisonReport) -> list[Figure_]:
    """Every figure the comparison has data for, in reading order."""
    out: list[Figure_ | None] = [margin_figure(rep)]
    c = rep.comparison
    if c is not None:
        out += [row_map_figure(c), logit_diff_figure(rep, c)]
    out.append(accepted_figure(rep))
    return [f for f in out if f is not None]


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


def _differing_rows(c: Comparison) -> str:
    from difftest.compare import DIFFER, NEAR_TIE, STATUS_NAMES

    r = c.rows
    # an unresolved row is shown too: its logits are not shown to agree
    mask = np.isin(r.status, (DIFFER, NEAR_TIE)) | r.logit_differs | r.logit_unresolved
    idx = np.flatnonzero(mask)
    if not idx.size:
        return "<p>No row differs.</p>"
    shown = idx[:MAX_DIFF_ROWS]
    judged = r.logit_judgements()
    rows = [[c.requests[int(r.req[i])], int(r.pos[i]), int(r.row[i]),
             int(r.token_a[i]) if r.has_a[i] else "-", int(r.token_b[i]) if r.has_b[i] else "-",
             STATUS_NAMES[int(r.status[i])], judged[i].value or "-",
             _num(float(r.margin_a[i])), _num(float(r.margin_b[i])),
             _num(float(r.abs_logit_diff[i]))] for i in shown]
    note = (f"<p>{idx.size} differing or unresolved row(s); the first {shown.size} are shown, "
            "all of them are in the CSV export.</p>" if idx.size > shown.size else
            f"<p>{idx.size} differing or unresolved row(s).</p>")
    return note + _table(["req", "pos", "row", "token a", "token b", "status", "logits",
                          "margin a", "margin b", "|logit diff|"], rows,
                         [False, True, True, True, True, False, False, True, True, True])


def comparison_section(rep: ComparisonReport, level: int = 1) -> str:
    """The body of one comparison: verdict and reasons, arms, figures, first difference, rows."""
    h, h2 = f"h{level}", f"h{level + 1}"
    v = rep.verdict
    out = [f"<section><{h}>difftest <code>{_e(rep.name)}</code>: {_e(rep.arm_a.name)} vs "
           f"{_e(rep.arm_b.name)}</{h}>", f"<p>{_badge(rep)}</p>", "<ul>"]
    out += [f"<li>{_e(reason.splitlines()[0] if reason else reason)}</li>" for reason in v.reasons]
    out += ["</ul>", f"<{h2}>Arms</{h2}>", _arms_table(rep)]
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
    if rep.run_dir:
        out.append(f"<p>Run directory: <code>{_e(rep.run_dir)}</code></p>")
    out.append("</section>")
    return "\n".join(out)


def render_comparison(rep: ComparisonReport) -> str:
    return _page(f"difftest {rep.name}: {rep.verdict.verdict}", comparison_section(rep))


def _probe_section(p: ProbeReport) -> str:
    rows = [[m.name, m.result, m.killed_by or "-",
             m.blocks_differing, m.blocks_logit_differing, m.report.verdict.verdict]
            for m in p.mutations]
    notes = "".join(f"<li>{_e(n)}</li>" for n in p.notes)
    return (f"<section><h2>Probe <code>{_e(p.comparison)}</code>: mutation score "
            f"{p.mutation_score:.2f}, exit {int(p.exit_code)}</h2>"
            f"<p>{_e(p.arm_a)} vs {_e(p.arm_b)} broken on purpose.</p>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + _table(["mutation", "result", "killed by", "blocks differing",
                      "logit-differing blocks", "verdict"], rows,
                     [False, False, False, True, True, False]) + "</section>")


def render_check(result: CheckResult) -> str:
    """check.html: a summary table, then one section per comparison and per probe."""
    from difftest.report.gate_report import label

    ok = int(result.exit_code) == 0
    rows = [[label(r), r.name, f"{r.arm_a.name} vs {r.arm_b.name}", r.spec.expect,
             r.verdict.verdict] for r in result.reports]
    body = [f"<h1>difftest check: {'passed' if ok else 'FAILED'} (exit "
            f"{int(result.exit_code)})</h1>",
            f"<p>config <code>{_e(result.config)}</code></p>",
            _table(["", "comparison", "arms", "expect", "verdict"], rows)]
    for r in result.reports:
        body.append(comparison_section(r, level=2))
        p = result.probes.get(r.name)
        if p is not None:
            body.append(_probe_section(p))
    if result.run_dir:
        body.append(f"<p>Run directory: <code>{_e(result.run_dir)}</code></p>")
    return _page("difftest check", "\n".join(body))


def write_html(path: Path, text: str) -> None:
    """Atomically, like every report file."""
    from difftest.execute import write_text_atomic

    write_text_atomic(Path(path), text)
