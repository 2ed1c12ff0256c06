"""`difftest parse`: the parsed events of one trace as rows, in file order, streamed.

Each event kind is already in file order in its arrays; the kinds are merged by line number
lazily, so printing never holds more than one row per kind. The table prints a summary and the
first rows (all of them with `limit=None`, streamed in pages); JSON and CSV stream everything.
"""

from __future__ import annotations

import csv
import heapq
import io
import json
from collections.abc import Iterator
from itertools import islice
from typing import TextIO

from difftest.core.jsonout import dumps, json_safe
from difftest.core.model import ArmTrace
from difftest.report.cells import spreadsheet_safe

EVENT_COLUMNS = ("line", "kind", "req", "pos", "row", "k", "ns", "acc", "ids", "emit", "values")
_TEXT_COLUMNS = frozenset({"kind", "req", "ids", "emit", "values"})
TABLE_ROWS = 40  # rows the default table shows
PAGE_ROWS = 5000  # rows formatted at a time when streaming everything

Row = dict[str, object]


def _ids(values: list[int]) -> str:
    return " ".join(map(str, values))


def _verifies(trace: ArmTrace) -> Iterator[tuple[int, int, Row]]:
    v, req = trace.verifies, trace.requests
    draft, emit = v.draft_ids.tolist(), v.emit_ids.tolist()
    doff, eoff = v.draft_off.tolist(), v.emit_off.tolist()
    for i, (line, r, pos, k, ns, acc) in enumerate(zip(
            v.line.tolist(), v.req.tolist(), v.pos.tolist(), v.k.tolist(), v.ns.tolist(),
            v.acc.tolist(), strict=True)):
        yield line, 0, {"line": line, "kind": "verify", "req": req[r], "pos": pos, "k": k,
                        "ns": ns, "acc": acc, "ids": _ids(draft[doff[i]:doff[i + 1]]),
                        "emit": _ids(emit[eoff[i]:eoff[i + 1]])}


def _proposes(trace: ArmTrace) -> Iterator[tuple[int, int, Row]]:
    p = trace.proposes
    first, off = p.first_ids.tolist(), p.first_off.tolist()
    for i, (line, rows, nqpr, k, num) in enumerate(zip(
            p.line.tolist(), p.rows.tolist(), p.nqpr.tolist(), p.k.tolist(),
            p.num_reqs.tolist(), strict=True)):
        if rows == 0:
            yield line, 1, {"line": line, "kind": "no-propose", "values": f"num_reqs={num}"}
        else:
            yield line, 1, {"line": line, "kind": "propose", "k": k,
                            "ids": _ids(first[off[i]:off[i + 1]]),
                            "values": f"rows={rows} nqpr={nqpr}"}


def _logits(trace: ArmTrace, block: int = 4096) -> Iterator[tuple[int, int, Row]]:
    lg, req = trace.logits, trace.requests
    for start in range(0, len(lg), block):  # convert a block of rows at a time
        stop = min(start + block, len(lg))
        widths = lg.width[start:stop].tolist()
        for j, (line, r, pos, row, ids, vals) in enumerate(zip(
                lg.line[start:stop].tolist(), lg.req[start:stop].tolist(),
                lg.pos[start:stop].tolist(), lg.row[start:stop].tolist(),
                lg.top_ids[start:stop].tolist(), lg.top_vals[start:stop].tolist(), strict=True)):
            w = widths[j]
            # repr: the shortest text that reads back to the same float64, so no printed
            # digit is lost
            yield line, 2, {"line": line, "kind": "logits", "req": req[r], "pos": pos,
                            "row": row, "ids": _ids(ids[:w]),
                            "values": " ".join(map(repr, vals[:w]))}


def _phases(trace: ArmTrace) -> Iterator[tuple[int, int, Row]]:
    ph = trace.phases
    for line, pre, bb, sample, n in zip(ph.line.tolist(), ph.pre.tolist(),
                                        ph.backbone.tolist(), ph.sample.tolist(),
                                        ph.logits.tolist(), strict=True):
        yield line, 3, {"line": line, "kind": "phase",
                        "values": f"pre={pre:.2f} backbone={bb:.2f} sample={sample:.2f} "
                                  f"logits={n}"}


def _dev_phases(trace: ArmTrace) -> Iterator[tuple[int, int, Row]]:
    ph = trace.phases
    for line, pre, fwd, sel, walk in zip(ph.dev_line.tolist(), ph.dev_pre.tolist(),
                                         ph.dev_fwd.tolist(), ph.dev_select.tolist(),
                                         ph.dev_walk.tolist(), strict=True):
        yield line, 4, {"line": line, "kind": "phase-dev",
                        "values": f"pre={pre:.2f} fwd={fwd:.2f} select={sel:.2f} walk={walk:.2f}"}


def _others(trace: ArmTrace) -> Iterator[tuple[int, int, Row]]:
    rows: list[tuple[int, int, Row]] = []
    for r in trace.routes:
        rows.append((r.line, 5, {"line": r.line, "kind": "route",
                                 "values": " ".join(f"{k}={v}" for k, v in r.counters.items())}))
    for n in trace.notices:
        rows.append((n.line, 5, {"line": n.line, "kind": "outgrown", "req": n.req,
                                 "values": n.text}))
    for e in trace.engine_errors:
        rows.append((e.line, 5, {"line": e.line, "kind": "engine-error", "values": e.message}))
    rows.sort(key=lambda x: (x[0], x[1]))
    return iter(rows)


def iter_events(trace: ArmTrace) -> Iterator[Row]:
    """One dict per event, in file order, produced lazily."""
    merged = heapq.merge(_verifies(trace), _proposes(trace), _logits(trace), _phases(trace),
                         _dev_phases(trace), _others(trace), key=lambda x: (x[0], x[1]))
    return (row for _, _, row in merged)


def event_rows(trace: ArmTrace) -> list[Row]:
    """Every event as a list (small traces and tests; large ones stream `iter_events`)."""
    return list(iter_events(trace))


def event_count(trace: ArmTrace) -> int:
    return (len(trace.verifies) + len(trace.proposes) + len(trace.logits)
            + len(trace.phases.line) + len(trace.phases.dev_line) + len(trace.routes)
            + len(trace.notices) + len(trace.engine_errors))


def summary(trace: ArmTrace) -> dict[str, object]:
    return {
        "path": trace.path, "level": trace.level, "requests": list(trace.requests),
        "lines": trace.lines_total, "skipped_lines": trace.lines_skipped,
        "verifies": len(trace.verifies), "proposes": len(trace.proposes),
        "logit_rows": len(trace.logits), "phases": len(trace.phases.line),
        "device_phases": len(trace.phases.dev_line), "routes": len(trace.routes),
        "notices": len(trace.notices), "engine_errors": len(trace.engine_errors),
        "truncated": trace.truncated,
        "drafting": trace.drafting.value if trace.drafting is not None else None,
        "findings": [f.to_json() for f in trace.findings],
    } | ({"config": dict(trace.config.values)} if trace.config.values else {})


def write_json(trace: ArmTrace, out: TextIO) -> None:
    """`{"summary": ..., "events": [...]}`, the events written as they are produced."""
    head = dumps({"summary": summary(trace), "events": []})
    out.write(head[: head.rindex("[") + 1])
    n_events = 0
    for row in iter_events(trace):
        out.write(",\n    " if n_events else "\n    ")
        out.write(json.dumps(json_safe(row), allow_nan=False))
        n_events += 1
    out.write("\n  ]\n}\n" if n_events else "]\n}\n")


def render_json(trace: ArmTrace) -> str:
    buf = io.StringIO()
    write_json(trace, buf)
    return buf.getvalue().rstrip("\n")


def write_csv(trace: ArmTrace, out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EVENT_COLUMNS)
    for row in iter_events(trace):
        cells = []
        for column in EVENT_COLUMNS:
            value = row.get(column, "")
            # every text cell: id lists that start with a minus sign, request ids and free text
            if column in _TEXT_COLUMNS:
                value = spreadsheet_safe(str(value))
            cells.append(value)
        writer.writerow(cells)


def iter_csv(trace: ArmTrace) -> Iterator[str]:
    buf = io.StringIO()
    write_csv(trace, buf)
    yield buf.getvalue()


def write_table(trace: ArmTrace, out: TextIO, limit: int | None = TABLE_ROWS) -> None:
    """The summary, then the first `limit` events (all with None, streamed a page at a time:
    column widths follow each page), then the findings."""
    from tabulate import tabulate

    s = summary(trace)
    head = tabulate([(k, v) for k, v in s.items() if k not in ("findings", "requests")]
                    + [("requests", ", ".join(trace.requests))], tablefmt="plain")
    out.write(head + "\n\n")
    events = iter_events(trace)
    total = event_count(trace)
    shown = 0
    while limit is None or shown < limit:
        size = PAGE_ROWS if limit is None else min(PAGE_ROWS, limit - shown)
        page = [[r.get(c, "") for c in EVENT_COLUMNS] for r in islice(events, size)]
        if not page:
            break
        out.write(tabulate(page, headers=EVENT_COLUMNS if shown == 0 else (),
                           tablefmt="simple") + "\n")
        shown += len(page)
    if shown < total:
        out.write(f"... {total - shown} more events (--rows all, or --format csv|json for "
                  "every event)\n")
    if trace.findings:
        out.write("\nfindings:\n" + "".join(f"  {f}\n" for f in trace.findings))


def render_table(trace: ArmTrace, limit: int | None = None) -> str:
    buf = io.StringIO()
    write_table(trace, buf, limit)
    return buf.getvalue().rstrip("\n")


def write(trace: ArmTrace, out: TextIO, fmt: str = "table", limit: int | None = TABLE_ROWS
          ) -> None:
    """The trace as `difftest parse` writes it: "table" (its first `limit` events), "json" or
    "csv" (every event)."""
    if fmt == "json":
        write_json(trace, out)
    elif fmt == "csv":
        write_csv(trace, out)
    else:
        write_table(trace, out, limit)
