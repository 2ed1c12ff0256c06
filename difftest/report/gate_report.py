"""Reports of `check` and `probe`: terminal lines, JSON, markdown for a pull request, JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from difftest.gate import CheckResult, ProbeReport
from difftest.jsonout import dumps
from difftest.kinds import VerdictKind
from difftest.pipeline import ComparisonReport
from difftest.report.comparison import to_dict


def _label(rep: ComparisonReport) -> str:
    return rep.verdict.label


def _counts(rep: ComparisonReport) -> str:
    c = rep.comparison
    if c is None:
        return "-"
    return f"{c.blocks_differing}/{c.blocks_compared}"


# -- probe -------------------------------------------------------------------------------------

def probe_dict(p: ProbeReport) -> dict[str, object]:
    return {
        "comparison": p.comparison, "arm_a": p.arm_a, "arm_b": p.arm_b,
        "baseline": {"verdict": p.baseline.verdict.verdict,
                     "exit_code": int(p.baseline.verdict.exit_code),
                     "reasons": p.baseline.verdict.reasons},
        "mutations": [{"name": m.name, "killed": m.killed, "killed_by": m.killed_by,
                       "measures": m.measures, "blocks_differing": m.blocks_differing,
                       "blocks_logit_differing": m.blocks_logit_differing,
                       "verdict": m.report.verdict.verdict, "reasons": m.report.verdict.reasons}
                      for m in p.mutations],
        "mutation_score": p.mutation_score,
        "survivors": p.survivors,
        "exit_code": int(p.exit_code),
        "notes": p.notes,
        "run_dir": str(p.baseline.run_dir) if p.baseline.run_dir else None,
    }


def probe_table(p: ProbeReport) -> str:
    from tabulate import tabulate

    head = (f"probe {p.comparison} ({p.arm_a} vs {p.arm_b} broken on purpose): mutation score "
            f"{p.mutation_score:.2f} ({sum(m.killed for m in p.mutations)}/{len(p.mutations)} "
            f"killed), exit {int(p.exit_code)}")
    lines = [head, f"  baseline: {p.baseline.verdict.verdict} ({_counts(p.baseline)} blocks differ)"]
    lines += [f"  - {n}" for n in p.notes]
    rows = [[m.name, "killed" if m.killed else "SURVIVED", m.killed_by or "-",
             m.blocks_differing, m.blocks_logit_differing, m.report.verdict.verdict]
            for m in p.mutations]
    lines += ["", tabulate(rows, headers=["mutation", "result", "killed by", "blocks differing",
                                          "logit-differing blocks", "verdict"],
                           tablefmt="simple")]
    if p.survivors:
        lines += ["", f"the comparison is blind to: {', '.join(p.survivors)}"]
        for m in p.mutations:
            if not m.killed:
                lines += [f"  {m.name}: " + "; ".join(m.report.verdict.reasons[-1:])]
    if p.baseline.run_dir:
        lines += ["", f"run directory: {p.baseline.run_dir}"]
    return "\n".join(lines)


# -- check -------------------------------------------------------------------------------------

def check_dict(result: CheckResult) -> dict[str, object]:
    return {
        "config": str(result.config), "exit_code": int(result.exit_code),
        "run_dir": str(result.run_dir) if result.run_dir else None,
        "comparisons": [to_dict(r) for r in result.reports],
        "probes": {name: probe_dict(p) for name, p in result.probes.items()},
    }


def render_check_json(result: CheckResult) -> str:
    return dumps(check_dict(result))


def check_lines(result: CheckResult) -> str:
    lines = []
    for r in result.reports:
        lines.append(f"{_label(r):<14} {r.name:<20} {r.arm_a.name} vs {r.arm_b.name}, expect "
                     f"{r.spec.expect}: {r.verdict.verdict} ({_counts(r)} blocks differ)")
        if not r.verdict.passed:
            lines += [f"{'':15}{reason}" for reason in r.verdict.reasons[-2:]]
        p = result.probes.get(r.name)
        if p is not None:
            state = "PASS" if p.exit_code == 0 else ("BLIND" if p.survivors else "FAIL")
            lines.append(f"{state:<14} {r.name + '/probe':<20} mutation score "
                         f"{p.mutation_score:.2f}" + (f"; survived: {', '.join(p.survivors)}"
                                                      if p.survivors else ""))
    passed = sum(r.verdict.passed for r in result.reports)
    lines.append("")
    lines.append(f"{passed}/{len(result.reports)} comparison(s) passed; exit "
                 f"{int(result.exit_code)}" + (f"; run directory: {result.run_dir}"
                                              if result.run_dir else ""))
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def check_markdown(result: CheckResult) -> str:
    ok = result.exit_code == 0
    lines = [f"## difftest check: {'passed' if ok else 'FAILED'} (exit {int(result.exit_code)})",
             "", "| | comparison | arms | expect | verdict | blocks differing | why |",
             "|---|---|---|---|---|---|---|"]
    for r in result.reports:
        why = r.verdict.reasons[-1] if r.verdict.reasons else ""
        lines.append(f"| {_label(r)} | `{_md(r.name)}` | `{_md(r.arm_a.name)}` vs "
                     f"`{_md(r.arm_b.name)}` | {r.spec.expect} | **{r.verdict.verdict}** | "
                     f"{_counts(r)} | {_md(why)} |")
    if result.probes:
        lines += ["", "### Mutation probes", "", "| comparison | mutation | result | killed by |",
                  "|---|---|---|---|"]
        for name, p in result.probes.items():
            for m in p.mutations:
                lines.append(f"| `{_md(name)}` | `{_md(m.name)}` | "
                             f"{'killed' if m.killed else '**SURVIVED**'} | {m.killed_by or '-'} |")
            lines.append(f"| `{_md(name)}` | score | **{p.mutation_score:.2f}** | |")
    failing = [r for r in result.reports if not r.verdict.passed]
    for r in failing:
        lines += ["", f"<details><summary>{_md(r.name)}: {r.verdict.verdict}</summary>", ""]
        lines += [f"- {_md(x)}" for x in r.verdict.reasons]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def junit_xml(result: CheckResult) -> str:
    """One testcase per comparison (and per probed mutation); uninformative is a failure."""
    suite = ET.Element("testsuite", name="difftest", tests="0", failures="0", errors="0")
    failures = 0
    tests = 0

    def case(name: str, seconds: float, failure: tuple[str, str, str] | None, out: str) -> None:
        nonlocal failures, tests
        tests += 1
        tc = ET.SubElement(suite, "testcase", classname=f"difftest.{result.config.stem}",
                           name=name, time=f"{seconds:.3f}")
        if failure is not None:
            failures += 1
            kind, message, body = failure
            el = ET.SubElement(tc, "failure", type=kind, message=message)
            el.text = body
        so = ET.SubElement(tc, "system-out")
        so.text = out

    for r in result.reports:
        v = r.verdict
        reasons = "\n".join(v.reasons)
        seconds = max((o.result.duration_s for o in (r.arm_a, r.arm_b) if o.result), default=0.0)
        fail = None
        if not v.passed:
            kind = (str(v.verdict) if v.verdict is not VerdictKind.AGREE else "expectation")
            prefix = ("UNINFORMATIVE (not a pass): the comparison could not have failed"
                      if v.verdict is VerdictKind.UNINFORMATIVE
                      else f"{v.verdict}, expected {r.spec.expect}")
            fail = (kind, prefix, reasons)
        case(r.name, seconds, fail, reasons)
        p = result.probes.get(r.name)
        if p is not None:
            for m in p.mutations:
                mf = None if m.killed else (
                    "survived", f"mutation {m.name} survived: the comparison is blind to it",
                    "\n".join(m.report.verdict.reasons))
                case(f"{r.name}/probe/{m.name}", 0.0, mf,
                     f"killed by {m.killed_by}" if m.killed else "survived")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    root = ET.Element("testsuites", tests=str(tests), failures=str(failures))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
