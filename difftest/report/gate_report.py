"""Reports of `check` and `probe`: terminal lines, JSON, markdown for a pull request, JUnit XML."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from collections.abc import Sequence
import xml.etree.ElementTree as ET
from datetime import datetime, UTC

from difftest.core.errors import ArmFailure, ExitCode
from difftest.execute.records import ArmResult
from difftest.flow.judge import CheckResult
from difftest.flow.scoring import MutationResult, ProbeReport
from difftest.flow.sweep import SweepReport
from difftest.core.jsonout import dumps
from difftest.core.kinds import ProbeState, SweepState, VerdictKind
from difftest.flow.evaluate import ArmOutcome, ComparisonReport
from difftest.report.comparison import arm_failure_details, to_dict
from difftest.report.headline import differed, headline, report_differed
from difftest.report.text import md_code, md_inline, strip_ansi, xml_safe


def label(rep: ComparisonReport) -> str:
    """PASS, FAIL, UNINFORMATIVE or ARM-FAILED: the verdict read against its expectation."""
    return rep.verdict.label


def summary(rep: ComparisonReport) -> str:
    """The headline and what differed, on one line: `DIFFER (expect same): FAILED, exit 1;
    differed: logits in 30/30 blocks`."""
    return f"{headline(rep.verdict)}; {report_differed(rep)}"


# -- probe -------------------------------------------------------------------------------------

def probe_dict(p: ProbeReport) -> dict[str, object]:
    return {
        "comparison": p.comparison, "arm_a": p.arm_a, "arm_b": p.arm_b,
        "baseline": {"verdict": p.baseline.verdict.kind,
                     "exit_code": int(p.baseline.verdict.exit_code),
                     "reasons": p.baseline.verdict.reasons},
        "mutations": [{"name": m.name, "applied": m.applied, "killed": m.killed,
                       "killed_by": m.killed_by,
                       "measures": m.measures, "blocks_differing": m.blocks_differing,
                       "blocks_logit_differing": m.blocks_logit_differing,
                       "verdict": m.report.verdict.kind, "reasons": m.report.verdict.reasons}
                      for m in p.mutations],
        "mutation_score": p.mutation_score,
        "survivors": p.survivors,
        "not_applied": p.not_applied,
        "exit_code": int(p.exit_code),
        "notes": p.notes,
        "run_dir": str(p.baseline.run_dir) if p.baseline.run_dir else None,
    }


def probe_table(p: ProbeReport) -> str:
    from tabulate import tabulate

    head = (f"probe {p.comparison} ({p.arm_a} vs {p.arm_b} broken on purpose): mutation score "
            f"{p.mutation_score:.2f} ({sum(m.killed for m in p.mutations)}/{len(p.applied)} "
            f"killed), exit {int(p.exit_code)}")
    lines = [head, f"  baseline: {summary(p.baseline)}"]
    lines += [f"  - {n}" for n in p.notes]
    rows = [[m.name, m.result, m.killed_by or "-",
             m.blocks_differing, m.blocks_logit_differing, m.report.verdict.kind]
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
    return strip_ansi("\n".join(lines))


# -- check -------------------------------------------------------------------------------------

def check_dict(result: CheckResult) -> dict[str, object]:
    return {
        "config": str(result.config), "exit_code": int(result.exit_code),
        "run_dir": str(result.run_dir) if result.run_dir else None,
        "comparisons": [to_dict(r) for r in result.reports],
        "probes": {name: probe_dict(p) for name, p in result.probes.items()},
        "sweeps": [sw.to_json() for sw in result.sweeps],
    }


def sweep_lines(result: CheckResult) -> list[str]:
    """Each sweep's verdict and its table of states (difftest.flow.sweep), for check's
    terminal lines and check.md."""
    out: list[str] = []
    for sw in result.sweeps:
        state = {ExitCode.OK: SweepState.PASS, ExitCode.DIFFER: SweepState.FAIL,
                 ExitCode.UNINFORMATIVE: SweepState.UNINFORMATIVE}.get(sw.exit_code,
                                                                       SweepState.ARM_FAILED)
        out += ["", f"{state:<14} {sw.comparison + '/sweep':<20} " + sweep_summary(sw)]
        out += [f"{'':15}{line}" for line in sw.lines()[2:2 + len(sw.classes) + 1]]
    return out


def sweep_summary(sw: SweepReport) -> str:
    """One sentence: how many inputs ran, differed, and on which states no input passed with
    the state exercised (difftest.flow.sweep)."""
    missed = [c.cls.value for c in sw.classes if c.judged == 0]
    ran = len({o.input.args for o in sw.outcomes})
    differed = len({o.input.args for o in sw.outcomes if o.kind is VerdictKind.DIFFER})
    return (f"{ran} generated input(s) run, {differed} differed"
            + (f", {len({i.args for i in sw.unrun})} not run (budget spent)" if sw.unrun else "")
            + (f"; no input passed with it exercised: {', '.join(missed)}" if missed else "")
            + f"; exit {int(sw.exit_code)}")


def render_check_json(result: CheckResult) -> str:
    return dumps(check_dict(result))


def render_check(result: CheckResult, fmt: str = "table") -> str:
    """The gate as `difftest check` prints it: "table" (its terminal lines) or "json"."""
    return render_check_json(result) if fmt == "json" else check_lines(result)


def render_probe(p: ProbeReport, fmt: str = "table") -> str:
    """The probe as `difftest probe` prints it: "table" or "json"."""
    return dumps(probe_dict(p)) if fmt == "json" else probe_table(p)


def _failed_arms(rep: ComparisonReport) -> list[ArmFailure]:
    return [o.failure for o in (rep.arm_a, rep.arm_b) if o.failure is not None]


def arm_failure_lines(reports: Sequence[ComparisonReport]) -> list[str]:
    """Every arm failure of a gate once: a shared cause (a missing module) in one line naming
    its arms, any other failure once per arm with its stderr tail (arms are shared between
    comparisons, so a per-comparison list would repeat them)."""
    causes: dict[str, list[str]] = {}
    others: dict[str, ArmFailure] = {}
    for r in reports:
        for f in _failed_arms(r):
            if f.cause:
                arms = causes.setdefault(f.cause, [])
                if f.arm not in arms:
                    arms.append(f.arm)
            else:
                others.setdefault(f.arm, f)
    if not causes and not others:
        return []
    lines = ["", "arm failures (each arm's whole stderr is in the run directory):"]
    lines += [f"  {cause}: arm(s) {', '.join(arms)}" for cause, arms in causes.items()]
    for f in others.values():
        first, _, rest = str(f).partition("\n")
        lines += [f"  {first}"] + [f"    {x}" for x in rest.splitlines()]
    return lines


def warnings_of(rep: ComparisonReport) -> list[str]:
    """A verdict's warning reasons (first lines): what a green did not see, said wherever the
    verdict is summed up (check's terminal lines, check.md, check.html's summary)."""
    return [r.splitlines()[0] for r in rep.verdict.reasons if r.startswith("warning:")]


def check_lines(result: CheckResult) -> str:
    lines = []
    for r in result.reports:
        lines.append(f"{label(r):<14} {r.name:<20} {r.arm_a.name} vs {r.arm_b.name}: "
                     f"{summary(r)}")
        failed = _failed_arms(r)
        shown: list[str] = []
        if failed:
            lines.append(f"{'':15}arm(s) failed: {', '.join(f.arm for f in failed)} (below)")
        elif not r.verdict.passed:
            shown = [reason.splitlines()[0] for reason in r.verdict.reasons[-2:] if reason]
            lines += [f"{'':15}{reason}" for reason in shown]
        lines += [f"{'':15}{w}" for w in warnings_of(r) if w not in shown]
        p = result.probes.get(r.name)
        if p is not None:
            state = (ProbeState.PASS if p.exit_code == 0 else ProbeState.NOT_APPLIED
                     if p.not_applied else ProbeState.BLIND if p.survivors else ProbeState.FAIL)
            lines.append(f"{state:<14} {r.name + '/probe':<20} mutation score "
                         f"{p.mutation_score:.2f}" + (f"; survived: {', '.join(p.survivors)}"
                                                      if p.survivors else "")
                         + (f"; not applied: {', '.join(p.not_applied)}"
                            if p.not_applied else ""))
    lines += sweep_lines(result)
    lines += arm_failure_lines(result.reports)
    passed = sum(r.verdict.passed for r in result.reports)
    lines.append("")
    lines.append(f"{passed}/{len(result.reports)} comparison(s) passed; exit "
                 f"{int(result.exit_code)}" + (f"; run directory: {result.run_dir}"
                                              if result.run_dir else ""))
    return strip_ansi("\n".join(lines))


def _why(rep: ComparisonReport) -> str:
    """The decisive sentence of a verdict for a one-line cell, whole or not at all: an arm
    failure's first line, a failed expectation's stated reason, else the summary sentence."""
    reasons = [r.split("\n", 1)[0] for r in rep.verdict.reasons if r]
    if not reasons:
        return ""
    if rep.verdict.kind is VerdictKind.ARM_FAILED:
        return reasons[0]
    keys = ("could not have failed", "toggle may not reach", "first difference at",
            "emitted streams", "first logit difference", "never run by the other arm",
            "expected at least", "could have failed through", "would have been blind")
    for key in keys:
        for r in reasons:
            if key in r:
                return r
    return reasons[-1]


def check_markdown(result: CheckResult) -> str:
    """check.md: a table a pull request can take, then each failing comparison's reasons."""
    ok = result.exit_code == 0
    lines = [f"## difftest check: {'passed' if ok else 'FAILED'} (exit {int(result.exit_code)})",
             "", "| | comparison | arms | verdict | what differed | why |",
             "|---|---|---|---|---|---|"]
    for r in result.reports:
        head = headline(r.verdict)
        lines.append(f"| {label(r)} | {md_code(r.name)} | {md_code(r.arm_a.name)} vs "
                     f"{md_code(r.arm_b.name)} | **{head.observed}** {head.qualifier} | "
                     f"{', '.join(differed(r.comparison)) or '-'} | {md_inline(_why(r))} |")
    warned = [(r.name, w) for r in result.reports for w in warnings_of(r)]
    if warned:
        lines += ["", "### Warnings", ""]
        lines += [f"- {md_code(name)}: {md_inline(w)}" for name, w in warned]
    lines += _probes_markdown(result) + _sweeps_markdown(result)
    for r in result.reports:
        if r.verdict.passed:
            continue
        lines += ["", f"<details><summary>{md_inline(r.name)}: {headline(r.verdict)}</summary>",
                  ""]
        lines += [f"- {md_inline(x.splitlines()[0] if x else x)}" for x in r.verdict.reasons]
        lines += arm_failure_details(r, nested=True)
        lines += ["", "</details>"]
    shas = _shas(result.reports)
    if shas:
        lines += ["", "Commits: " + ", ".join(f"{md_code(n)} {md_code(s[:12])}"
                                             for n, s in shas.items())]
    if result.run_dir:
        lines += ["", f"Run directory: {md_code(str(result.run_dir))}"]
    return "\n".join(lines) + "\n"


def _probes_markdown(result: CheckResult) -> list[str]:
    """check.md's table of mutation probes (none without probes)."""
    if not result.probes:
        return []
    lines = ["", "### Mutation probes", "", "| comparison | mutation | result | killed by |",
             "|---|---|---|---|"]
    for name, p in result.probes.items():
        for m in p.mutations:
            lines.append(f"| {md_code(name)} | {md_code(m.name)} | "
                         f"{m.result if m.killed or not m.applied else f'**{m.result}**'} | "
                         f"{md_inline(m.killed_by or '-')} |")
        lines.append(f"| {md_code(name)} | score | **{p.mutation_score:.2f}** | |")
    return lines


def _sweeps_markdown(result: CheckResult) -> list[str]:
    """check.md's table of sweeps, a line for each sweep under it (none without sweeps)."""
    if not result.sweeps:
        return []
    lines = ["", "### Sweeps (inputs generated to reach each state)", "",
             "| comparison | state | inputs | exercised | differed | uninformative | "
             "not run |", "|---|---|---|---|---|---|---|"]
    for sw in result.sweeps:
        lines += [f"| {md_code(sw.comparison)} | {md_inline(c.cls.label)} ({md_code(c.cls.value)})"
                  f" | {c.inputs} | {c.covered if c.covered else '**0**'} | {c.differed} | "
                  f"{c.uninformative} | {c.not_run} |" for c in sw.classes]
    lines += [""] + [f"- {md_code(sw.comparison)}: {md_inline(sweep_summary(sw))}"
                     for sw in result.sweeps]
    return lines


def _shas(reports: Sequence[ComparisonReport]) -> dict[str, str]:
    """Each git-ref arm's sha, once per arm."""
    out: dict[str, str] = {}
    for r in reports:
        for o in (r.arm_a, r.arm_b):
            if o.result is not None and o.result.git_ref and o.result.git_sha:
                out.setdefault(o.name, o.result.git_sha)
    return out


def _arm_results(result: CheckResult) -> list[ArmResult]:
    seen: dict[str, ArmResult] = {}
    reps = list(result.reports) + [m.report for p in result.probes.values() for m in p.mutations]
    for r in reps:
        for o in (r.arm_a, r.arm_b):
            if o.result is not None:
                seen.setdefault(o.name, o.result)
    return list(seen.values())


def _seconds(*outcomes: ArmOutcome) -> float:
    """The wall time of arms that ran side by side: the longest of them."""
    return max((o.result.duration_s for o in outcomes if o.result is not None), default=0.0)


def junit_xml(result: CheckResult, hostname: str | None = None) -> str:
    """One testcase per comparison, per probed mutation and per sweep. A difference or an unmet
    expectation is a <failure>, an uninformative comparison a <failure type="uninformative">
    (never a pass), an arm that crashed, timed out or drafted nothing an <error>."""
    results = _arm_results(result)
    started = result.started_at or min((a.started_at for a in results), default="")
    suite = ET.Element("testsuite", name="difftest", tests="0", failures="0", errors="0",
                       skipped="0", time="0", timestamp=_timestamp(started),
                       hostname=xml_safe(hostname if hostname is not None else platform.node()))
    _properties(suite, result, results)
    cases = _Cases(suite, xml_safe(f"difftest.{result.config.stem}"))
    for r in result.reports:
        cases.add(r.name, _seconds(r.arm_a, r.arm_b), _comparison_outcome(r),
                  "\n".join(r.verdict.reasons))
        p = result.probes.get(r.name)
        if p is not None:
            for m in p.mutations:
                mv = m.report.verdict
                cases.add(f"{r.name}/probe/{m.name}", _seconds(m.report.arm_b),
                          _mutation_outcome(m, p),
                          f"killed by {m.killed_by}" if m.killed else "\n".join(mv.reasons))
    for sw in result.sweeps:
        cases.add(f"{sw.comparison}/sweep", 0.0, _sweep_outcome(sw), "\n".join(sw.lines()))
    counts = cases.counts
    total = (result.duration_s if result.duration_s is not None
             else sum(float(tc.get("time", "0")) for tc in suite.iter("testcase")))
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{total:.3f}")
    root = ET.Element("testsuites", name="difftest", tests=str(counts["tests"]),
                      failures=str(counts["failures"]), errors=str(counts["errors"]),
                      time=f"{total:.3f}")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# a testcase's failure or error: (element tag, type, message, body)
_Outcome = tuple[str, str, str, str]


def _properties(suite: ET.Element, result: CheckResult, results: Sequence[ArmResult]) -> None:
    """The suite's properties: the config, the run directory and each git arm's ref and
    commit, so a CI page links a failure to what ran."""
    props = ET.SubElement(suite, "properties")

    def prop(name: str, value: object) -> None:
        ET.SubElement(props, "property", name=xml_safe(name), value=xml_safe(str(value)))

    prop("config", result.config)
    if result.run_dir is not None:
        prop("run_dir", result.run_dir)
    for arm in results:
        if arm.git_sha:
            prop(f"arm.{arm.name}.git_sha", arm.git_sha)
        if arm.git_ref:
            prop(f"arm.{arm.name}.git_ref", arm.git_ref)


@dataclass
class _Cases:
    """The suite's testcases as they are added, and the counts its header carries."""

    suite: ET.Element
    classname: str
    counts: dict[str, int] = field(
        default_factory=lambda: {"tests": 0, "failures": 0, "errors": 0})

    def add(self, name: str, seconds: float, outcome: _Outcome | None, out: str) -> None:
        self.counts["tests"] += 1
        tc = ET.SubElement(self.suite, "testcase", classname=self.classname,
                           name=xml_safe(name), time=f"{seconds:.3f}")
        if outcome is not None:
            tag, kind, message, body = outcome
            self.counts["failures" if tag == "failure" else "errors"] += 1
            # CI pages render the message as markdown: runner text in it stays text
            el = ET.SubElement(tc, tag, type=kind, message=xml_safe(md_inline(message)))
            el.text = xml_safe(body)
        ET.SubElement(tc, "system-out").text = xml_safe(out)


def _sweep_outcome(sw: SweepReport) -> _Outcome | None:
    """A sweep as a testcase: an arm that failed an <error>; an input that differed or a state
    no input reached a <failure>."""
    table = "\n".join(sw.lines())
    if sw.exit_code is ExitCode.ARM_FAILED:
        return ("error", str(VerdictKind.ARM_FAILED), sweep_summary(sw), table)
    if sw.exit_code is not ExitCode.OK:
        kind = "differ" if sw.exit_code is ExitCode.DIFFER else "uninformative"
        return ("failure", kind, sweep_summary(sw), table)
    return None


def _comparison_outcome(r: ComparisonReport) -> _Outcome | None:
    """A comparison as a testcase: an arm that failed is an <error>; a difference, an unmet
    expectation, an inert switch or an uninformative comparison a <failure> (never a pass)."""
    v = r.verdict
    reasons = "\n".join(v.reasons)
    if v.kind is VerdictKind.ARM_FAILED:
        return ("error", str(VerdictKind.ARM_FAILED), v.reasons[0].split("\n", 1)[0] if v.reasons
                else "an arm failed", reasons)
    if not v.passed:
        kind = str(v.kind) if v.kind is not VerdictKind.AGREE else "expectation"
        message = (f"{summary(r)}. The comparison could not have failed"
                   if v.kind is VerdictKind.UNINFORMATIVE
                   else f"{summary(r)}. The arms did not run what the comparison is about: "
                        + (v.reasons[0] if v.reasons else "")
                   if v.kind is VerdictKind.INERT
                   else f"{summary(r)}. {_why(r)}")
        return ("failure", kind, message, reasons)
    return None


def _mutation_outcome(m: MutationResult, p: ProbeReport) -> _Outcome | None:
    """A probed mutation as a testcase: killed passes; a mutated arm that failed or a mutation
    that never reached the runner is an <error>, a survivor a <failure>."""
    mv = m.report.verdict
    if mv.kind is VerdictKind.ARM_FAILED:
        return ("error", str(VerdictKind.ARM_FAILED), f"mutated arm failed: "
                f"{mv.reasons[0].split(chr(10), 1)[0] if mv.reasons else ''}",
                "\n".join(mv.reasons))
    if not m.applied:
        return ("error", "not-applied",
                f"mutation {m.name} did not reach the runner: the mutated arm printed "
                "exactly what the baseline printed", "\n".join(p.notes))
    if not m.killed:
        return ("failure", "survived",
                f"mutation {m.name} survived: the comparison is blind to it",
                "\n".join(mv.reasons))
    return None


def _timestamp(iso: str) -> str:
    """ISO 8601 to the second, as JUnit readers expect (`2026-12-03T07:41:02`, UTC)."""
    if not iso:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S")
