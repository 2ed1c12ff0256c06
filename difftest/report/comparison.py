"""One comparison's report: the JSON contract, a terminal table, markdown, and the CSV diff."""

from __future__ import annotations

import csv
import importlib
import io
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from difftest.analysis.compare import (DIFFER, NEAR_TIE, STATUS_NAMES, Comparison, LogitJudgement,
                                       RowTable)
from difftest.core.errors import UsageError
from difftest.core.atomic import write_with
from difftest.core.jsonout import dumps
from difftest.core.kinds import ArmSide
from difftest.analysis.logit_instrument import arm_resolutions, numbers, stats_line
from difftest.flow.evaluate import ArmOutcome, ComparisonReport
from difftest.report.cells import spreadsheet_safe
from difftest.report.evidence import bug_class_json, bug_class_lines, coverage_cells, coverage_json
from difftest.report.headline import headline, report_differed
from difftest.report.text import md_code, md_fence, md_inline, strip_ansi

if TYPE_CHECKING:  # the localisations a run saved: loaded by whoever reads them
    from difftest.flow.localize import SavedLocalization

_csvrows: Any
try:
    _csvrows = importlib.import_module("difftest.report._csvrows")
except ImportError:  # built without a compiler: the rows are joined in Python
    _csvrows = None

CSV_BLOCK_ROWS = 1 << 16  # rows whose cells the CSV writer holds at once
CSV_COLUMNS = ("req", "pos", "row", "token_a", "token_b", "status", "margin_a", "margin_b",
               "logit_a", "logit_b", "abs_logit_diff", "logits")


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
        "trace_findings": [f.to_json() for f in o.trace.findings] if o.trace else [],
        "stream_breaks": sum(f.kind.breaks_stream for f in o.trace.findings) if o.trace else 0,
    }
    if o.result is not None:
        r = o.result
        d.update({"exit_code": r.returncode, "timed_out": r.timed_out,
                  "duration_s": r.duration_s, "git_sha": r.git_sha})
    if o.failure is not None:
        d["failure"] = str(o.failure)
    if o.trace is not None and o.trace.routes:
        d["route"] = o.trace.routes[-1].counters
    if o.trace is not None and o.trace.config.values:  # what the runner said it applied
        d["spec_config"] = dict(o.trace.config.values)
    return d


def _max_abs_logit_diff(c: Comparison | None) -> dict[str, object]:
    """The largest |logit difference|: null where a compared row differs without a finite
    size (a nan or inf in one arm; the CSV and the table say inf), with the reason beside it,
    since JSON holds no infinity."""
    if c is None:
        return {"max_abs_logit_diff": None}
    unsized = c.logits.rows_nonfinite_one if c.logits is not None else 0
    if not unsized:
        return {"max_abs_logit_diff": c.max_abs_logit_diff}
    return {"max_abs_logit_diff": None,
            "max_abs_logit_diff_unsized": f"{unsized} compared row(s) differ without a finite "
                                          "size (a nan or inf in one arm): the largest "
                                          "difference is infinite"}


def to_dict(rep: ComparisonReport) -> dict[str, object]:
    """The JSON report; keys documented in ARCHITECTURE.md are a contract."""
    c = rep.comparison
    v = rep.verdict
    arms = [arm_dict(rep.arm_a), arm_dict(rep.arm_b)]
    for arm, res in zip(arms, arm_resolutions(c), strict=True):
        arm.update(res)
    return {
        "comparison": rep.name,
        "verdict": v.kind,
        "exit_code": int(v.exit_code),
        "expect": rep.spec.rules.expect,
        "passed": v.passed,
        "instruments": v.instruments,
        "arms": arms,
        "blocks_compared": c.blocks_compared if c else 0,
        "blocks_differing": c.blocks_differing if c else 0,
        "blocks_near_tie": c.blocks_near_tie if c else 0,
        "blocks_logit_differing": c.blocks_logit_differing if c else 0,
        "logit_rows_compared": c.logit_rows_compared if c else 0,
        **_max_abs_logit_diff(c),
        "unmatched": {ArmSide.A: c.unmatched_a if c else 0, ArmSide.B: c.unmatched_b if c else 0},
        "steps_lost": {ArmSide.A: c.steps_lost_a if c else 0,
                       ArmSide.B: c.steps_lost_b if c else 0,
                       "rows": c.rows_lost if c else 0},
        "context_diverged": c.context_diverged if c else 0,
        "drafting": c.drafting.value if c else None,
        "drafting_from": c.drafting_source if c else None,
        "rows_context_diverged": c.rows_context_diverged if c else 0,
        "draft_length_differences": {
            "blocks": c.draft_length_blocks if c else 0,
            "of_blocks": c.blocks_drafted if c else 0,  # either arm drafted (the denominator)
            "rows_a": c.draft_length_rows_a if c else 0,
            "rows_b": c.draft_length_rows_b if c else 0},
        "coverage_gaps": [asdict(g) for g in c.coverage_gaps] if c else [],
        "first_difference": asdict(c.first_difference) if c and c.first_difference else None,
        "first_logit_difference": asdict(c.first_logit_difference)
        if c and c.first_logit_difference else None,
        "divergences": [asdict(d) for d in c.divergences] if c else [],
        "alignment": c.mode if c else None,
        # the effective values: atol from a dtype table or a thresholds file; a near_tie derived
        # per row is no one number (null) unless the comparison is bitwise, where it is 0
        "near_tie": (rep.rules.near_tie if rep.rules.near_tie is not None
                     else 0.0 if c is None or c.tolerance.bitwise else None),
        "atol": rep.rules.atol,
        "min_differing": rep.rules.min_differing,
        "reasons": v.reasons,
        "run_dir": str(rep.run_dir) if rep.run_dir else None,
        **numbers(c),
        # only under teacher forcing: B followed A's stream, and each arm's acceptance on it
        **({"teacher_forcing": rep.forcing.to_json()} if rep.forcing is not None else {}),
        "acceptance": rep.acceptance.to_json() if rep.acceptance is not None else None,
        "rates": rep.rates.to_json() if rep.rates is not None else None,
        # only where a rate was judged against a benign one, or near_tie hides rows
        **({"benign_rates": rep.benign_rates.to_json()} if rep.benign_rates is not None and (
            rep.benign_rates.tests or rep.benign_rates.blind_share is not None) else {}),
        # only under --until-decided: the runs, every look and the decision boundary
        **({"sequential": rep.sequential.to_json()} if rep.sequential is not None else {}),
        # only under decoding = "sampled": the token laws' test and the acceptance check
        **({"sampled": rep.sampled.to_json()} if rep.sampled is not None else {}),
        # only where an arm printed `[spec-coverage]`: each state and both arms' counts
        **({"coverage": cov} if (cov := coverage_json(rep)) else {}),
        # only for a DIFFER: which kind of bug it looks like, where each instrument parted
        **({"bug_class": found} if (found := bug_class_json(rep)) is not None else {}),
    }


def render_json(rep: ComparisonReport) -> str:
    return dumps(to_dict(rep))


def _num(x: object, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def acceptance_cells(rep: ComparisonReport) -> tuple[str, str] | None:
    """Under teacher forcing, each arm's mean accepted drafts per step on A's contexts: A's as
    it ran, B's as it would have accepted (None without forcing: the column is left out)."""
    f = rep.forcing
    if f is None:
        return None
    b = _num(f.acceptance_b, 3)
    return _num(f.acceptance_a, 3), (f"{b} (would have)" if f.acceptance_b is not None else b)


def _arm_rows(rep: ComparisonReport) -> list[list[object]]:
    rows: list[list[object]] = []
    accepted = acceptance_cells(rep)
    for n, o in enumerate((rep.arm_a, rep.arm_b)):
        d = arm_dict(o)
        state = ("failed" if o.failure else
                 ("informative" if d["informative"] else "uninformative"))
        rows.append([o.name, _num(d["blocks"]), _num(d["distinct_ids"]),
                     _num(d["entropy_bits"], 3),
                     {True: "yes", False: "no", None: "-"}[d["constant_blocks"]],  # type: ignore[index]
                     _num(d["min_margin"]), state, *([accepted[n]] if accepted else [])])
    return rows


ARM_HEADERS = ["arm", "blocks", "distinct ids", "entropy bits", "constant", "min margin", "trace"]
ACCEPTED_HEADER = "accepted/step"  # only under teacher forcing


def arm_headers(rep: ComparisonReport) -> list[str]:
    return ARM_HEADERS + ([ACCEPTED_HEADER] if rep.forcing is not None else [])


MD_MODULES_AROUND = 3  # modules shown before and after the first differing one in report.md


def localization_markdown(saved: Sequence[SavedLocalization]) -> list[str]:
    """A section per localisation of the run (`difftest localize`): the first differing module
    and the modules around it; every module is in its folder's localize.md."""
    out: list[str] = []
    for s in saved:
        loc = s.localization
        req, pos = s.at
        out += ["", f"#### Localisation at {md_code(req)}:{pos}", "", md_inline(loc.describe()),
                ""]
        if loc.first is not None:
            at = loc.modules.index(loc.first)
            lo, hi = max(0, at - MD_MODULES_AROUND), min(len(loc.modules), at + MD_MODULES_AROUND + 1)
            out += ["| # | module | max \\|diff\\| |", "|---|---|---|"]
            for i in range(lo, hi):
                m = loc.modules[i]
                name = md_code(m.module) + (" **first**" if m is loc.first else "")
                out.append(f"| {i} | {name} | {_num(m.max_abs_diff, 3)} |")
            out.append("")
        against = (f"each against its background (factor {loc.factor:g})"
                   if loc.factor is not None else f"within {loc.atol:g}")
        out.append(f"{len(loc.modules)} modules compared {against}; all of them, and "
                   f"the figure, in {md_code(str(s.folder))}.")
    return out


def render_table(rep: ComparisonReport, max_rows: int = 12) -> str:
    from tabulate import tabulate

    v = rep.verdict
    c = rep.comparison
    out = [f"{rep.name}: {headline(v)}", f"  {report_differed(rep)}"]
    out += [f"  {x}" for x in bug_class_lines(rep)]
    out += [f"  - {r}" for r in v.reasons]
    line = stats_line(c)
    out += [f"  {line}"] if line else []
    out += ["", tabulate(_arm_rows(rep), headers=arm_headers(rep), tablefmt="simple")]
    headers, cov = coverage_cells(rep)
    if cov:
        out += ["", "coverage (what each arm exercised; `about`: what the toggle is about):",
                tabulate(cov, headers=headers, tablefmt="simple")]
    if c is not None:
        rows = c.rows
        idx = _differing_indices(rep)[:max_rows].tolist()  # one vectorised pass, not a loop
        if idx:
            table = [[c.requests[int(rows.req[i])], int(rows.pos[i]), int(rows.row[i]),
                      _tok(rows, ArmSide.A, i), _tok(rows, ArmSide.B, i), _status(int(rows.status[i])),
                      _num(_finite(float(rows.margin_a[i]))), _num(_finite(float(rows.margin_b[i]))),
                      _num(_finite(float(rows.abs_logit_diff[i])))] for i in idx]
            out += ["", "differences (first rows; all of them in the CSV export):",
                    tabulate(table, headers=["req", "pos", "row", "token a", "token b", "status",
                                             "margin a", "margin b", "|logit diff|"],
                             tablefmt="simple")]
    if rep.run_dir:
        out += ["", f"run directory: {rep.run_dir}"]
    return strip_ansi("\n".join(out))  # arm stderr and request ids reach the terminal


def _status(code: int) -> str:
    return STATUS_NAMES[code]


def _tok(rows: RowTable, side: ArmSide, i: int) -> object:
    has = rows.has_a[i] if side == ArmSide.A else rows.has_b[i]
    return int(rows.token_a[i] if side == ArmSide.A else rows.token_b[i]) if has else "-"


MAX_MD_ROWS = 10  # differing rows in report.md
STDERR_LINES = 20  # lines of a failed arm's stderr in report.md


def _differing_indices(rep: ComparisonReport) -> np.ndarray:
    c = rep.comparison
    if c is None:
        return np.zeros(0, np.int64)
    r = c.rows
    return np.flatnonzero(np.isin(r.status, (DIFFER, NEAR_TIE)) | r.logit_differs)


def arm_failure_details(rep: ComparisonReport, nested: bool = False) -> list[str]:
    """Each failed arm's stderr tail, fenced inside <details> (markdown lines)."""
    out: list[str] = []
    for o in (rep.arm_a, rep.arm_b):
        f = o.failure
        tail = f.stderr_tail if f is not None else ""
        if not tail:
            continue
        tail = "\n".join(tail.splitlines()[-STDERR_LINES:])
        out += ["", f"<details><summary>stderr of {md_inline(o.name)} (last lines)</summary>",
                "", md_fence(tail), "", "</details>"]
    return out


def render_markdown(rep: ComparisonReport,
                    localized: Sequence[SavedLocalization] = ()) -> str:
    """report.md: what a pull-request comment needs, with nothing the runner printed able to
    become markup. `localized`: the run's `difftest localize` results, a section each."""
    v = rep.verdict
    head = headline(v)
    lines = [f"### difftest {md_code(rep.name)}: **{head.observed}** {head.qualifier}", "",
             f"{md_code(rep.arm_a.name)} vs {md_code(rep.arm_b.name)}: "
             f"{report_differed(rep)}", ""]
    found = bug_class_lines(rep)
    if found:
        lines += [f"**{md_inline(found[0])}**", ""]
        lines += [f"- {md_inline(x.strip())}" for x in found[1:]] + [""]
    lines += [f"- {md_inline(r.splitlines()[0] if r else r)}" for r in v.reasons]
    line = stats_line(rep.comparison)
    lines += ["", md_inline(line)] if line else []
    shas = [o.result.git_sha if o.result is not None and o.result.git_ref else None
            for o in (rep.arm_a, rep.arm_b)]
    headers = arm_headers(rep) + (["git sha"] if any(shas) else [])
    lines += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row, sha in zip(_arm_rows(rep), shas, strict=True):
        cells = [md_inline(str(x)) for x in row]
        if any(shas):
            cells.append(md_code(sha[:12]) if sha else "-")
        lines.append("| " + " | ".join(cells) + " |")
    headers, cov = coverage_cells(rep)
    if cov:
        lines += ["", "Coverage (what each arm exercised):", "",
                  "| " + " | ".join(md_inline(h) for h in headers) + " |",
                  "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(md_inline(x) if x else "" for x in row) + " |"
                  for row in cov]
    idx = _differing_indices(rep)
    c = rep.comparison
    if c is not None and idx.size:
        r = c.rows
        shown = idx[:MAX_MD_ROWS]
        lines += ["", f"Differing rows: {idx.size}" + (f" (first {shown.size} shown; all of them "
                                                      "in diff.csv)" if idx.size > shown.size
                                                      else ""), "",
                  "| req | pos | row | token a | token b | status | margin a | margin b | "
                  "\\|logit diff\\| |", "|---|---|---|---|---|---|---|---|---|"]
        for i in shown:
            cells = [md_code(c.requests[int(r.req[i])]), str(int(r.pos[i])), str(int(r.row[i])),
                     str(_tok(r, ArmSide.A, int(i))), str(_tok(r, ArmSide.B, int(i))),
                     _status(int(r.status[i])), _num(_finite(float(r.margin_a[i]))),
                     _num(_finite(float(r.margin_b[i]))),
                     _num(_finite(float(r.abs_logit_diff[i])))]
            lines.append("| " + " | ".join(cells) + " |")
    lines += arm_failure_details(rep)
    lines += localization_markdown(localized)
    if rep.run_dir:
        lines += ["", f"Run directory: {md_code(str(rep.run_dir))}"]
    return "\n".join(lines) + "\n"


def _float_cells(values: np.ndarray) -> list[str]:
    return ["" if x != x else f"{x:.9g}" for x in values.tolist()]


def _float_cells_as(values: np.ndarray, other: np.ndarray, other_cells: list[str]) -> list[str]:
    """`_float_cells(values)`, taking `other`'s cell (`other_cells`) where a value has the same
    bits as `other`'s (the same double prints the same text): an arm's margins and top-1 logits
    are mostly the other arm's, so most of them are not formatted twice."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    same = values.view(np.int64) == np.ascontiguousarray(other, dtype=np.float64).view(np.int64)
    return [cell if equal else "" if x != x else f"{x:.9g}"
            for x, equal, cell in zip(values.tolist(), same.tolist(), other_cells, strict=True)]


def _token_cells(values: np.ndarray, has: np.ndarray) -> list[str]:
    return [str(t) if h else "" for t, h in zip(values.tolist(), has.tolist(), strict=True)]


def _csv_cells(texts: Sequence[str]) -> list[str]:
    """Each text as the csv module writes it in a row of several cells (quoted where it holds
    the delimiter, a quote or a line break)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    cells = []
    for text in texts:
        out.seek(0)
        out.truncate()
        writer.writerow([text, ""])
        cells.append(out.getvalue()[:-2])  # less the "," and the empty cell's line end
    return cells


def csv_fast_path_available() -> bool:
    """True when the compiled row writer (difftest/report/_csvrows.c) was built and imports; the
    CSV is the same without it, written in Python."""
    return _csvrows is not None


def _csv_blocks_py(r: RowTable, names: list[str], status: list[str], judgement: list[str],
                   codes: np.ndarray) -> Iterator[str]:
    """The rows' text, a block of rows at a time, joined in Python: the reference for the
    compiled writer, and what runs without it."""
    diff = np.asarray(r.abs_logit_diff)
    for start in range(0, len(r), CSV_BLOCK_ROWS):
        at = slice(start, start + CSV_BLOCK_ROWS)
        margin_a, logit_a = _float_cells(r.margin_a[at]), _float_cells(r.logit_a[at])
        columns = [
            [names[i] for i in r.req[at].tolist()], [str(x) for x in r.pos[at].tolist()],
            [str(x) for x in r.row[at].tolist()], _token_cells(r.token_a[at], r.has_a[at]),
            _token_cells(r.token_b[at], r.has_b[at]), [status[s] for s in r.status[at].tolist()],
            margin_a, _float_cells_as(r.margin_b[at], r.margin_a[at], margin_a),
            logit_a, _float_cells_as(r.logit_b[at], r.logit_a[at], logit_a),
            _float_cells(diff[at]), [judgement[i] for i in codes[at].tolist()],
        ]
        yield "\n".join(map(",".join, zip(*columns, strict=True))) + "\n"


def _csv_blocks_compiled(r: RowTable, names: list[str], status: list[str], judgement: list[str],
                         codes: np.ndarray) -> Iterator[bytes]:
    """The same text as `_csv_blocks_py`, each block of rows written by the compiled writer
    into one buffer (a cell per column kind: texts by code, integers, integers where an arm
    drafted, floats as format(x, ".9g"), B's float cells taken from A's where the bits match)."""
    k = _csvrows

    def ints(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.int64)

    def floats(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float64)

    def texts(cells: list[str]) -> tuple[bytes, ...]:
        return tuple(c.encode("utf-8") for c in cells)

    columns = (
        (k.TEXT, ints(r.req), texts(names)), (k.INT, ints(r.pos)), (k.INT, ints(r.row)),
        (k.INT_HAS, ints(r.token_a), np.ascontiguousarray(r.has_a, dtype=np.bool_)),
        (k.INT_HAS, ints(r.token_b), np.ascontiguousarray(r.has_b, dtype=np.bool_)),
        (k.TEXT, ints(r.status), texts(status)),
        (k.FLOAT, floats(r.margin_a)), (k.FLOAT_AS, floats(r.margin_b), 6),
        (k.FLOAT, floats(r.logit_a)), (k.FLOAT_AS, floats(r.logit_b), 8),
        (k.FLOAT, floats(r.abs_logit_diff)), (k.TEXT, ints(codes), texts(judgement)),
    )
    for start in range(0, len(r), CSV_BLOCK_ROWS):
        yield k.rows(columns, start, min(start + CSV_BLOCK_ROWS, len(r)))


def csv_chunks(rep: ComparisonReport, *, pure: bool = False) -> Iterator[bytes]:
    """The CSV diff contract, as UTF-8 a block of rows at a time: one row per block row, empty
    cells where a value is unknown, text cells that a spreadsheet would evaluate prefixed with
    a quote. The csv module, not pandas: a small diff should not pay for importing a data-frame
    library. The csv module quotes the few texts (request names, status and judgement names)
    once each; the cells of numbers need no quoting, so each row is joined as is, by the
    compiled writer where it was built (and `pure` is false), else in Python: the same bytes."""
    c = rep.comparison
    assert c is not None
    r = c.rows
    names = _csv_cells([spreadsheet_safe(n) for n in c.requests])
    status = _csv_cells([STATUS_NAMES[s] for s in range(len(STATUS_NAMES))])
    judgement = _csv_cells([k.value for k in LogitJudgement])
    codes = r.logit_judgement_codes()
    yield (",".join(_csv_cells(CSV_COLUMNS)) + "\n").encode("utf-8")
    if not pure and csv_fast_path_available():
        yield from _csv_blocks_compiled(r, names, status, judgement, codes)
    else:
        yield from (block.encode("utf-8")
                    for block in _csv_blocks_py(r, names, status, judgement, codes))


def csv_text(rep: ComparisonReport, *, pure: bool = False) -> str:
    """The whole CSV diff (`csv_chunks`) as one text."""
    return b"".join(csv_chunks(rep, pure=pure)).decode("utf-8")


def write_csv(rep: ComparisonReport, path: Path, *, reads: Iterable[Path] = (),
              inside: Path | None = None) -> None:
    """Write the CSV diff atomically, a block of rows at a time, through a temp file created
    exclusively beside it (a link planted at any name there is never followed; see
    difftest.core.atomic for what else is refused): the old file stays whole if anything fails."""
    path = Path(path)

    def write(fh: IO[bytes]) -> None:
        for chunk in csv_chunks(rep):
            fh.write(chunk)

    try:
        write_with(path, write, reads=reads, inside=inside)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write CSV: {exc.strerror or exc}") from None


def render(rep: ComparisonReport, fmt: str = "table") -> str:
    """The report as `difftest compare` and `export` print it: "table", "json" or "markdown"
    (markdown with the run's saved localisations, a section each)."""
    if fmt == "json":
        return render_json(rep)
    if fmt == "markdown":
        from difftest.flow.localize import saved_localizations

        return render_markdown(rep, saved_localizations(rep.run_dir) if rep.run_dir else ())
    return render_table(rep)
