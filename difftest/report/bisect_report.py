"""What a bisect shows: the named commit (or range) with its confidence and diff stat, and every
tested commit with its verdicts, as a terminal table, markdown, JSON and HTML."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from difftest.bisect import BisectResult, Status
from difftest.core.jsonout import dumps
from difftest.report.text import md_fence, md_inline, strip_ansi

BISECT_JSON = "bisect.json"
BISECT_MD = "bisect.md"
BISECT_HTML = "bisect.html"


def _confidence(r: BisectResult) -> str:
    if r.confidence is None:
        return "-"
    if r.plan.flake_rate == 0:
        return (f"{r.confidence:.3g}, assuming deterministic arms (--flake-rate 0): each "
                "commit ran once, so a flaky run could not show")
    return (f"{r.confidence:.4f} (posterior under a flake rate of {r.plan.flake_rate:g}); "
            f"each decision wrong with probability <= {r.decision_error:.2g}, so the "
            f"{r.decisions} decisions made are all right with probability >= "
            f"{1 - r.error_bound:.4f} (stated: >= {1 - r.plan.error_rate:g})")


def to_dict(r: BisectResult) -> dict[str, Any]:
    p = r.plan
    return {
        "status": r.status.value, "exit_code": int(r.exit_code), "message": r.message,
        "run_dir": str(r.run_dir),
        "first_bad": None if r.first_bad is None else
        {"sha": r.first_bad.sha, "subject": r.first_bad.subject},
        "last_good": None if r.last_good is None else
        {"sha": r.last_good.sha, "subject": r.last_good.subject},
        "candidates": [{"sha": c.sha, "subject": c.subject} for c in r.candidates],
        "confidence": r.confidence, "decision_error": r.decision_error,
        "decisions": r.decisions, "error_bound": r.error_bound,
        "diff_stat": r.diff_stat, "arm_runs": r.arm_runs, "comparisons": r.comparisons,
        "notes": list(r.notes),
        "plan": {"comparison": p.comparison, "mode": p.mode.value, "arm_a": p.arm_a,
                 "arm_b": p.arm_b, "baseline": p.baseline, "repo": p.repo, "good": p.good,
                 "bad": p.bad, "commits": len(p.commits), "flake_rate": p.flake_rate,
                 "error_rate": p.error_rate, "max_runs": p.max_runs, "jobs": p.jobs,
                 "config": p.config},
        "tested": [{"index": t.commit.index, "sha": t.commit.sha, "subject": t.commit.subject,
                    "decision": t.decision.value, "good": t.tally.good, "bad": t.tally.bad,
                    "skip": t.tally.skip, "verdicts": list(t.verdicts),
                    "reasons": list(t.reasons), "run_dirs": list(t.run_dirs),
                    "first_run_at": t.first_run_at, "duration_s": t.duration_s}
                   for t in r.tested],
    }


def render_json(r: BisectResult) -> str:
    return dumps(to_dict(r))


def render(r: BisectResult, fmt: str = "table") -> str:
    """The bisect as `difftest bisect` prints it: "table", "json" or "markdown"."""
    if fmt == "json":
        return render_json(r)
    return render_markdown(r) if fmt == "markdown" else render_table(r)


def _rows(r: BisectResult) -> list[list[str]]:
    return [[f"#{t.commit.index}", t.commit.short, strip_ansi(t.commit.subject)[:60],
             t.decision.value, f"{t.tally.bad}/{t.tally.good}/{t.tally.skip}",
             ", ".join(dict.fromkeys(t.verdicts)), t.first_run_at,
             strip_ansi("; ".join(t.reasons))[:120]] for t in r.tested]


HEADERS = ["#", "commit", "subject", "decision", "bad/good/skip", "verdicts", "first run",
           "why skipped"]


def _summary(r: BisectResult) -> list[str]:
    p = r.plan
    runs = (f"{r.comparisons} comparison run(s), {r.arm_runs} arm run(s) over "
            f"{len(r.tested)} tested commit(s) of {len(p.commits)}")
    lines = [f"bisect {p.comparison} ({p.mode.value}): {r.status.value.upper()}",
             strip_ansi(r.message)]
    if r.status is not Status.UNCONFIRMED:
        lines.append(f"confidence: {_confidence(r)}")
    lines.append(runs)
    return lines


def render_table(r: BisectResult) -> str:
    from tabulate import tabulate

    out = _summary(r)
    if r.diff_stat:
        out += ["", r.diff_stat]
    out += ["", tabulate(_rows(r), headers=HEADERS)]
    out += [f"note: {strip_ansi(n)}" for n in r.notes]
    out.append(f"run directory: {r.run_dir}")
    return "\n".join(out)


def render_markdown(r: BisectResult) -> str:
    out = [f"# difftest bisect: {md_inline(r.plan.comparison)}", ""]
    out += [f"- {md_inline(line)}" for line in _summary(r)]
    if r.diff_stat:
        out += ["", "## What it changed", "", md_fence(r.diff_stat)]
    out += ["", "## Tested commits", "", "| " + " | ".join(HEADERS) + " |",
            "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(md_inline(c) for c in row) + " |" for row in _rows(r)]
    if r.notes:
        out += ["", "## Notes", ""] + [f"- {md_inline(n)}" for n in r.notes]
    out += ["", f"Run directory: `{md_inline(str(r.run_dir))}`", ""]
    return "\n".join(out)


_CSP = "default-src 'none'; style-src 'unsafe-inline'"


def _e(x: object) -> str:
    return html.escape(strip_ansi(str(x)))


def render_html(r: BisectResult) -> str:
    body = [f"<h1>difftest bisect: {_e(r.plan.comparison)}</h1>"]
    body += [f"<p>{_e(line)}</p>" for line in _summary(r)]
    if r.diff_stat:
        body.append(f"<pre>{_e(r.diff_stat)}</pre>")
    body.append("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in HEADERS) + "</tr>")
    body += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in _rows(r)]
    body.append("</table>")
    body += [f"<p>note: {_e(n)}</p>" for n in r.notes]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_CSP}\">"
            "<title>difftest bisect</title><style>body{font-family:sans-serif;margin:2em}"
            "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2em .5em}"
            "pre{background:#f6f8fa;padding:.6em}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_all(r: BisectResult) -> list[Path]:
    """bisect.json, bisect.md and bisect.html into the bisect's directory."""
    from difftest.core.atomic import write_text_atomic

    paths = []
    for name, text in ((BISECT_JSON, render_json(r) + "\n"), (BISECT_MD, render_markdown(r)),
                       (BISECT_HTML, render_html(r))):
        write_text_atomic(r.run_dir / name, text)
        paths.append(r.run_dir / name)
    return paths
