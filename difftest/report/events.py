"""`difftest parse`: the parsed events of one trace as rows, in file order."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

from difftest.jsonout import dumps
from difftest.model import ArmTrace
from difftest.report.cells import spreadsheet_safe

if TYPE_CHECKING:
    import numpy as np

EVENT_COLUMNS = ("line", "kind", "req", "pos", "row", "k", "ns", "acc", "ids", "emit", "values")
_TEXT_COLUMNS = frozenset({"kind", "req", "ids", "emit", "values"})


def _ids(a: np.ndarray) -> str:
    return " ".join(str(int(x)) for x in a)


def event_rows(trace: ArmTrace) -> list[dict[str, object]]:
    """One dict per event, sorted by source line."""
    rows: list[dict[str, object]] = []
    req = trace.requests
    v = trace.verifies
    for i in range(len(v)):
        rows.append({"line": int(v.line[i]), "kind": "verify", "req": req[v.req[i]],
                     "pos": int(v.pos[i]), "k": int(v.k[i]), "ns": int(v.ns[i]),
                     "acc": int(v.acc[i]), "ids": _ids(v.draft(i)), "emit": _ids(v.emit(i))})
    p = trace.proposes
    for i in range(len(p)):
        if p.rows[i] == 0:
            rows.append({"line": int(p.line[i]), "kind": "no-propose",
                         "values": f"num_reqs={int(p.num_reqs[i])}"})
        else:
            rows.append({"line": int(p.line[i]), "kind": "propose", "k": int(p.k[i]),
                         "ids": _ids(p.first(i)),
                         "values": f"rows={int(p.rows[i])} nqpr={int(p.nqpr[i])}"})
    lg = trace.logits
    for i in range(len(lg)):
        w = int(lg.width[i])
        rows.append({"line": int(lg.line[i]), "kind": "logits", "req": req[lg.req[i]],
                     "pos": int(lg.pos[i]), "row": int(lg.row[i]), "ids": _ids(lg.top_ids[i, :w]),
                     "values": " ".join(f"{x:.6g}" for x in lg.top_vals[i, :w].tolist())})
    ph = trace.phases
    for i in range(len(ph.line)):
        rows.append({"line": int(ph.line[i]), "kind": "phase",
                     "values": f"pre={ph.pre[i]:.2f} backbone={ph.backbone[i]:.2f} "
                               f"sample={ph.sample[i]:.2f} logits={int(ph.logits[i])}"})
    for i in range(len(ph.dev_line)):
        rows.append({"line": int(ph.dev_line[i]), "kind": "phase-dev",
                     "values": f"pre={ph.dev_pre[i]:.2f} fwd={ph.dev_fwd[i]:.2f} "
                               f"select={ph.dev_select[i]:.2f} walk={ph.dev_walk[i]:.2f}"})
    for r in trace.routes:
        rows.append({"line": r.line, "kind": "route",
                     "values": " ".join(f"{k}={v}" for k, v in r.counters.items())})
    for n in trace.notices:
        rows.append({"line": n.line, "kind": "outgrown", "req": n.req, "values": n.text})
    for e in trace.engine_errors:
        rows.append({"line": e.line, "kind": "engine-error", "values": e.message})
    rows.sort(key=lambda r: r["line"])  # type: ignore[arg-type, return-value]
    return rows


def summary(trace: ArmTrace) -> dict[str, object]:
    return {
        "path": trace.path, "level": trace.level, "requests": list(trace.requests),
        "lines": trace.lines_total, "skipped_lines": trace.lines_skipped,
        "verifies": len(trace.verifies), "proposes": len(trace.proposes),
        "logit_rows": len(trace.logits), "phases": len(trace.phases.line),
        "device_phases": len(trace.phases.dev_line), "routes": len(trace.routes),
        "notices": len(trace.notices), "engine_errors": len(trace.engine_errors),
        "truncated": trace.truncated,
        "findings": [{"line": f.line, "kind": f.kind, "message": f.message}
                     for f in trace.findings],
    }


def render_json(trace: ArmTrace) -> str:
    return dumps({"summary": summary(trace), "events": event_rows(trace)})


def iter_csv(trace: ArmTrace) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(EVENT_COLUMNS)
    for row in event_rows(trace):
        cells = []
        for column in EVENT_COLUMNS:
            value = row.get(column, "")
            # every text cell: id lists that start with a minus sign, request ids and free text
            if column in _TEXT_COLUMNS:
                value = spreadsheet_safe(str(value))
            cells.append(value)
        writer.writerow(cells)
    yield buf.getvalue()


def render_table(trace: ArmTrace) -> str:
    from tabulate import tabulate

    s = summary(trace)
    head = tabulate([(k, v) for k, v in s.items() if k not in ("findings", "requests")]
                    + [("requests", ", ".join(trace.requests))], tablefmt="plain")
    rows = event_rows(trace)
    body = tabulate([[r.get(c, "") for c in EVENT_COLUMNS] for r in rows],
                    headers=EVENT_COLUMNS, tablefmt="simple")
    out = [head, "", body]
    if trace.findings:
        out += ["", "findings:"] + [f"  {f}" for f in trace.findings]
    return "\n".join(out)
