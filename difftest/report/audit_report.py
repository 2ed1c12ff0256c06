"""`difftest audit`: one trace's informativeness as a table or JSON."""

from __future__ import annotations

from difftest.core.jsonout import dumps

from difftest.analysis.audit import TraceAudit
from difftest.core.model import ArmTrace


def _num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def audit_dict(result: TraceAudit, trace: ArmTrace) -> dict[str, object]:
    data = result.to_dict()
    data["findings"] = [f.to_json() for f in trace.findings]
    return data


def render_json(result: TraceAudit, trace: ArmTrace) -> str:
    return dumps(audit_dict(result, trace))


def render(result: TraceAudit, trace: ArmTrace, fmt: str = "table") -> str:
    """The audit as `difftest audit` prints it: "table" or "json"."""
    return (render_json if fmt == "json" else render_table)(result, trace)


def render_table(result: TraceAudit, trace: ArmTrace) -> str:
    from tabulate import tabulate

    r = result
    acc = ("-" if r.acceptance_min is None else
           f"{r.acceptance_min}..{r.acceptance_max} (mean {r.acceptance_mean:.2f})")
    rows = [
        ("trace", f"{r.path} (level {r.level}, {r.requests} request(s))"),
        ("blocks", f"{r.blocks} (from {r.block_source} lines)"),
        ("distinct drafted ids", r.distinct_ids),
        ("entropy (bits)", f"{r.entropy_bits:.3f}"),
        ("entropy per row (bits)", " ".join(f"{e:.2f}" for e in r.row_entropy_bits) or "-"),
        ("constant blocks", "yes" if r.constant_blocks else "no"),
        ("blocks of one repeated id", r.uniform_blocks),
        ("accepted per verify", acc),
        ("logit rows", f"{r.logit_rows} ({r.nonfinite_rows} non-finite)"),
        ("margin min / median", f"{_num(r.min_margin)} / {_num(r.median_margin)}"),
        ("blind radius min / median",
         f"{_num(r.blind_radius_min)} / {_num(r.blind_radius_median)}"),
        ("logit blind radius", "-" if r.logit_blind_radius is None else
         f"{r.logit_blind_radius:.0e} (resolution, {r.logit_digits} significant digits)"),
        ("token comparison", "can fail" if r.tokens_informative else "blind"),
        ("logit comparison", "can fail" if r.logits_informative else
         ("not traced" if not r.logit_rows else "blind")),
    ]
    lines = [f"verdict: {r.verdict.upper()}"]
    lines += [f"  - {reason}" for reason in r.reasons]
    lines += ["", tabulate(rows, tablefmt="simple")]
    if trace.findings:
        lines += ["", f"findings ({len(trace.findings)}):"]
        lines += [f"  {f}" for f in trace.findings[:50]]
        if len(trace.findings) > 50:
            lines.append(f"  ... {len(trace.findings) - 50} more (see --format json)")
    if trace.lines_skipped:
        lines.append(f"({trace.lines_skipped} other line(s) on the stream skipped)")
    return "\n".join(lines)
