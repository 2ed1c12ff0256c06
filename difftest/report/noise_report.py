"""`difftest noise`: one arm's A/A floor as a terminal table or JSON."""

from __future__ import annotations

from difftest.core.jsonout import dumps
from difftest.flow.judge import NoiseReport
from difftest.analysis.threshold_notes import zero_floor_text


def render_json(report: NoiseReport) -> str:
    return dumps(report.to_json())


def render(report: NoiseReport, fmt: str = "table") -> str:
    """The floor as `difftest noise` prints it: "table" or "json"."""
    return render_json(report) if fmt == "json" else render_table(report)


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def render_table(report: NoiseReport) -> str:
    from tabulate import tabulate

    if report.floor is None:
        lines = [f"noise {report.arm}: ARM-FAILED ({report.runs} runs, exit "
                 f"{int(report.exit_code)})"]
        lines += [f"  - {f}" for f in report.failures]
        return "\n".join(lines + ["", f"run directory: {report.run_dir}"])
    f = report.floor
    lines = [f"noise {report.arm}: {f.summary()}"]
    if f.zero:
        lines.append("  - " + zero_floor_text(f.arm, f.runs))
    else:
        lines.append(f"  - with noise_runs, a logit difference of B counts only above "
                     f"max(atol + rtol*|b|, {f.floor:.3g}), and B's token flips only when they "
                     "are significantly more frequent (one-sided Fisher exact test, alpha 0.01)")
    if f.logit_stats is not None:
        lines.append("  - " + f.logit_stats.summary())
    rows = [[p.run_a + 1, p.run_b + 1, p.rows, p.flips, p.logit_rows, _g(p.max_abs),
             "yes" if p.identical else "no"] for p in f.pairs]
    lines += ["", tabulate(rows, headers=["run", "vs run", "rows", "token flips", "logit rows",
                                          "max |diff|", "identical"], tablefmt="simple")]
    return "\n".join(lines + ["", f"run directory: {report.run_dir}"])
