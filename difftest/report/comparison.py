"""One comparison's report: the JSON contract, a terminal table, markdown, and the CSV diff."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.compare import DIFFER, NEAR_TIE, STATUS_NAMES, RowTable
from difftest.errors import UsageError
from difftest.jsonout import dumps
from difftest.numerics import arm_resolutions, numbers, stats_line
from difftest.pipeline import ArmOutcome, ComparisonReport
from difftest.report.cells import spreadsheet_safe

if TYPE_CHECKING:
    import pandas as pd

CSV_COLUMNS = ("req", "pos", "row", "token_a", "token_b", "status", "margin_a", "margin_b",
               "logit_a", "logit_b", "abs_logit_diff")


def _finite(x: float | None) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return x


def arm_dict(o: ArmOutcome) -> dict[str, object]:
    au = o.audit
    d: dict[str, object] = {
        "name": o.name, "trace": str(o.trace_path),
        "blocks": au.blocks if au else None,
        "distinct_ids": au.distinct_ids if au else None,
        "entropy_bits": au.entropy_bits if au else None,
        "constant_blocks": au.constant_blocks if au else None,
        "min_margin": _finite(au.min_margin) if au else None,
        "informative": au.informative if au else None,
        "tokens_informative": au.tokens_informative if au else None,
        "logits_informative": au.logits_informative if au else None,
        "level": au.level if au else None,
        "findings": len(o.trace.findings) if o.trace else None,
    }
    if o.result is not None:
        r = o.result
        d.update({"exit_code": r.returncode, "timed_out": r.timed_out,
                  "duration_s": r.duration_s, "git_sha": r.git_sha})
    if o.failure is not None:
        d["failure"] = str(o.failure)
    if o.trace is not None and o.trace.routes:
        d["route"] = o.trace.routes[-1].counters
    return d


def to_dict(rep: ComparisonReport) -> dict[str, object]:
    """The JSON report; keys documented in ARCHITECTURE.md are a contract."""
    c = rep.comparison
    v = rep.verdict
    arms = [arm_dict(rep.arm_a), arm_dict(rep.arm_b)]
    for arm, res in zip(arms, arm_resolutions(c), strict=True):
        arm.update(res)
    return {
        "comparison": rep.name,
        "verdict": v.verdict,
        "exit_code": int(v.exit_code),
        "expect": rep.spec.expect,
        "passed": v.passed,
        "instruments": v.instruments,
        "arms": arms,
        "blocks_compared": c.blocks_compared if c else 0,
        "blocks_differing": c.blocks_differing if c else 0,
        "blocks_near_tie": c.blocks_near_tie if c else 0,
        "blocks_logit_differing": c.blocks_logit_differing if c else 0,
        "logit_rows_compared": c.logit_rows_compared if c else 0,
        "max_abs_logit_diff": c.max_abs_logit_diff if c else None,
        "unmatched": {"a": c.unmatched_a if c else 0, "b": c.unmatched_b if c else 0},
        "context_diverged": c.context_diverged if c else 0,
        "drafting": c.drafting.value if c else None,
        "drafting_from": c.drafting_source if c else None,
        "rows_context_diverged": c.rows_context_diverged if c else 0,
        "draft_length_differences": {
            "blocks": c.draft_length_blocks if c else 0,
            "rows_a": c.draft_length_rows_a if c else 0,
            "rows_b": c.draft_length_rows_b if c else 0},
        "coverage_gaps": [asdict(g) for g in c.coverage_gaps] if c else [],
        "first_difference": asdict(c.first_difference) if c and c.first_difference else None,
        "first_logit_difference": asdict(c.first_logit_difference)
        if c and c.first_logit_difference else None,
        "divergences": [asdict(d) for d in c.divergences] if c else [],
        "alignment": c.mode if c else None,
        "near_tie": rep.spec.near_tie,
        "atol": rep.spec.atol,
        "min_differing": rep.spec.min_differing,
        "reasons": v.reasons,
        "run_dir": str(rep.run_dir) if rep.run_dir else None,
        **numbers(c),
    }


def render_json(rep: ComparisonReport) -> str:
    return dumps(to_dict(rep))


def _num(x: object, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _arm_rows(rep: ComparisonReport) -> list[list[object]]:
    rows = []
    for o in (rep.arm_a, rep.arm_b):
        d = arm_dict(o)
        state = ("failed" if o.failure else
                 ("informative" if d["informative"] else "uninformative"))
        rows.append([o.name, d["blocks"], d["distinct_ids"], _num(d["entropy_bits"], 3),
                     {True: "yes", False: "no", None: "-"}[d["constant_blocks"]],  # type: ignore[index]
                     _num(d["min_margin"]), state])
    return rows


ARM_HEADERS = ["arm", "blocks", "distinct ids", "entropy bits", "constant", "min margin", "trace"]


def render_table(rep: ComparisonReport, max_rows: int = 12) -> str:
    from tabulate import tabulate

    v = rep.verdict
    c = rep.comparison
    head = (f"{rep.name}: {v.verdict.upper()} (expect {rep.spec.expect}; "
            f"{'passed' if v.passed else 'FAILED'}, exit {int(v.exit_code)})")
    out = [head] + [f"  - {r}" for r in v.reasons]
    line = stats_line(c)
    out += [f"  {line}"] if line else []
    out += ["", tabulate(_arm_rows(rep), headers=ARM_HEADERS, tablefmt="simple")]
    if c is not None:
        rows = c.rows
        idx = [i for i in range(len(rows)) if rows.status[i] in (DIFFER, NEAR_TIE)
               or rows.logit_differs[i]][:max_rows]
        if idx:
            table = [[c.requests[int(rows.req[i])], int(rows.pos[i]), int(rows.row[i]),
                      _tok(rows, "a", i), _tok(rows, "b", i), _status(int(rows.status[i])),
                      _num(_finite(float(rows.margin_a[i]))), _num(_finite(float(rows.margin_b[i]))),
                      _num(_finite(float(rows.abs_logit_diff[i])))] for i in idx]
            out += ["", "differences (first rows; all of them in the CSV export):",
                    tabulate(table, headers=["req", "pos", "row", "token a", "token b", "status",
                                             "margin a", "margin b", "|logit diff|"],
                             tablefmt="simple")]
    if rep.run_dir:
        out += ["", f"run directory: {rep.run_dir}"]
    return "\n".join(out)


def _status(code: int) -> str:
    return STATUS_NAMES[code]


def _tok(rows: RowTable, side: str, i: int) -> object:
    has = rows.has_a[i] if side == "a" else rows.has_b[i]
    return int(rows.token_a[i] if side == "a" else rows.token_b[i]) if has else "-"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(rep: ComparisonReport) -> str:
    v = rep.verdict
    icon = v.label.replace("-", " ")
    lines = [f"### difftest `{_md_escape(rep.name)}`: **{v.verdict}** ({icon}, exit "
             f"{int(v.exit_code)})", "",
             f"`{_md_escape(rep.arm_a.name)}` vs `{_md_escape(rep.arm_b.name)}`, "
             f"expect **{rep.spec.expect}**", ""]
    lines += [f"- {_md_escape(r)}" for r in v.reasons]
    line = stats_line(rep.comparison)
    lines += ["", _md_escape(line)] if line else []
    lines += ["", "| " + " | ".join(ARM_HEADERS) + " |",
              "|" + "---|" * len(ARM_HEADERS)]
    for row in _arm_rows(rep):
        lines.append("| " + " | ".join(_md_escape(str(x)) for x in row) + " |")
    return "\n".join(lines) + "\n"


def csv_frame(rep: ComparisonReport) -> pd.DataFrame:
    """The CSV diff contract as a DataFrame: one row per block row, empty where unknown."""
    import numpy as np
    import pandas as pd

    c = rep.comparison
    assert c is not None
    r = c.rows
    reqs = np.array([spreadsheet_safe(n) for n in c.requests], dtype=object)
    frame = pd.DataFrame({
        "req": reqs[r.req] if len(r) else np.zeros(0, dtype=object),
        "pos": r.pos, "row": r.row,
        "token_a": pd.array(np.where(r.has_a, r.token_a, 0), dtype="Int64"),
        "token_b": pd.array(np.where(r.has_b, r.token_b, 0), dtype="Int64"),
        "status": np.array(STATUS_NAMES, dtype=object)[r.status] if len(r)
        else np.zeros(0, dtype=object),
        "margin_a": r.margin_a, "margin_b": r.margin_b, "logit_a": r.logit_a,
        "logit_b": r.logit_b, "abs_logit_diff": r.abs_logit_diff,
    }, columns=list(CSV_COLUMNS))
    frame.loc[~r.has_a, "token_a"] = pd.NA
    frame.loc[~r.has_b, "token_b"] = pd.NA
    return frame


def write_csv(rep: ComparisonReport, path: Path) -> None:
    """Write the CSV diff atomically (exclusive temp file beside it, then rename)."""
    from difftest.atomic import write_with

    frame = csv_frame(rep)
    try:
        write_with(Path(path), lambda fh: frame.to_csv(fh, index=False, na_rep="",
                                                       float_format="%.9g"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write CSV: {exc.strerror or exc}") from None
