"""Mutation check of difftest's own suite: break each guarded piece of code on purpose, run the
tests that guard it, and report whether they went red. A mutation that stays green is a gate
that cannot fail.

These are the mutations no tool generates: whole statements or operands dropped, a condition
replaced by `False`, an import added, values swapped, and code outside the modules
scripts/mutation_score.py mutates (cli, cells, grammar, pipeline, report). Pairs mutmut generates
itself (`return False` -> `return True` in gate._killed) are left to it.

Works on a scratch copy of HEAD (git archive), never on the working tree.
Usage: python scripts/mutation_check.py [ID ...]     (IDs like P1 A3 G2; default: all)
       python scripts/mutation_check.py --anchors    (only: does every anchor still match?)
The suite runs the anchor check (tests/test_mutation_anchors.py); the full run is for when a
gate or the code it guards changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (id and name, file, original text, mutated text, tests that must go red)
M = [
 ("S1 a non-finite value in one arm within any bound", "difftest/numerics/tolerance.py",
  "        certain = shared & ((lower > bound) | mismatch)",
  "        certain = shared & (lower > bound)", "tests/analysis/test_false_passes.py"),
 ("S2 no noise band", "difftest/analysis/compare.py",
  "        noise_only = keep & j.differs & ~j.disjoint & (j.exceed > 0) & ~beyond",
  "        noise_only = keep & j.differs & ~j.disjoint & (j.exceed > 0)",
  "tests/analysis/test_false_passes.py"),
 ("S3 flips of any size left to the flip test", "difftest/analysis/compare.py",
  "        status[hard & ~big] = NOISE_FLIP", "        status[hard] = NOISE_FLIP",
  "tests/analysis/test_false_passes.py"),
 ("S4 floor measured with block rules", "difftest/analysis/floor.py",
  "compare(traces[i], traces[j], drafting=drafting)", "compare(traces[i], traces[j])",
  "tests/analysis/test_false_passes.py"),
 ("S5 lost steps are acceptance", "difftest/trace/align.py",
  "    missing = ~_among(step_keys(codes, pos), emitted.sorted_keys()) & (pos < ends[codes])",
  "    missing = np.zeros(pos.size, dtype=bool)", "tests/analysis/test_false_passes.py"),
 ("S6 float64 prints read as float32", "difftest/numerics/resolution.py",
  "    if digits is not None and digits >= LOSSLESS_DIGITS and not float32_prints(",
  "    if False and not float32_prints(", "tests/analysis/test_false_passes.py"),
 ("S7 self-comparison by content allowed", "difftest/flow/evaluate.py",
  "        if by_content and os.path.getsize(", "        if False and os.path.getsize(",
  "tests/analysis/test_false_passes.py"),
 ("S8 traceback exits 1", "difftest/cli/errors.py",
  "        return \"\".join(traceback.format_exception(exc)).rstrip(), ExitCode.USAGE",
  "        return \"\".join(traceback.format_exception(exc)).rstrip(), ExitCode.DIFFER",
  "tests/analysis/test_false_passes.py"),
 ("S9 token radius ignores near_tie", "difftest/analysis/logit_instrument.py",
  "        candidates.append((cmp.rules.near_tie, \"near_tie\"))",
  "        candidates.append((0.0, \"near_tie\"))",
  "tests/analysis/test_false_passes.py"),
 ("S10 radius not widened for unresolved rows", "difftest/analysis/logit_instrument.py",
  "    if lg.rows_unresolved and quantum:", "    if False:", "tests/analysis/test_false_passes.py"),
 ("S14 noise flips not drawn", "difftest/report/html.py",
  "    prio[[SAME, UNMATCHED_A, UNMATCHED_B, DIVERGED, NEAR_TIE, NOISE_FLIP, DIFFER]] = [\n"
  "        1, 2, 2, 3, 4, 5, 6]",
  "    prio[[SAME, UNMATCHED_A, UNMATCHED_B, DIVERGED, NEAR_TIE, DIFFER]] = [\n"
  "        1, 2, 2, 3, 4, 6]", "tests/analysis/test_false_passes.py"),
 ("S11 disjoint rows counted beyond the judged rows", "difftest/analysis/compare.py",
  "    return replace(findings, rows_disjoint=int((j.disjoint & keep).sum()),",
  "    return replace(findings, rows_disjoint=int(j.disjoint.sum()),",
  "tests/analysis/test_false_passes.py"),
 ("S12 excess counted beyond the judged rows", "difftest/analysis/compare.py",
  "excess_test(int(j.exceed[keep & ~j.disjoint].sum())",
  "excess_test(int(j.exceed[~j.disjoint].sum())", "tests/analysis/test_false_passes.py"),
 ("S13 near-ties counted as strict flips", "difftest/analysis/compare.py",
  "    test = flip_test(int(hard.sum()), int(counted.sum())",
  "    test = flip_test(int((hard | near).sum()), int(counted.sum())",
  "tests/analysis/test_false_passes.py"),
 ("P1 int field check off", "difftest/trace/grammar.py",
  "    if not _INT_RE.match(raw):\n        raise FieldError(f\"field {name}: expected an integer",
  "    if False:\n        raise FieldError(f\"field {name}: expected an integer",
  "tests/trace/test_trace.py"),
 ("P3 truncated line raises", "difftest/trace/parser.py",
  "            if exc.line != lineno or isinstance(exc, NoTraceLines):\n                raise",
  "            if True:\n                raise", "tests/trace/test_trace.py"),
 ("P4 acc invariant off", "difftest/trace/parser.py",
  "if acc != max(ns - 1, 0) and not all_taken:", "if False:", "tests/trace/test_trace.py"),
 ("P5 pos continuity off", "difftest/trace/parser.py",
  "(pos[1:] != nxt[:-1])", "(pos[1:] != pos[1:])", "tests/trace/test_trace.py"),
 ("P6 narrower rows not padded", "difftest/trace/parser.py",
  "        top_vals[rows, cols] = vals\n", "", "tests/trace/test_trace.py"),
 ("P7 number reader failure ignored", "difftest/trace/numbers.py",
  "        if value is None:\n            ok[t] = False",
  "        if False:\n            ok[t] = False", "tests/trace/test_trace.py"),
 ("P9 sig digits count leading zeros", "difftest/trace/numbers.py",
  "    sig = np.searchsorted(_P10_INT, np.where(fast, mant, 0.0).astype(np.int64), side=\"right\")",
  "    sig = ndig.astype(np.int64)", "tests/trace/test_trace.py"),
 ("P10 contradicting drafting headers pass", "difftest/trace/parser.py",
  "if self.drafting is not None and kind is not self.drafting:", "if False:",
  "tests/trace/test_trace.py"),
 ("P11 unbounded integers reach int()", "difftest/trace/grammar.py",
  "    return int(raw) if digits <= MAX_INT_DIGITS else None", "    return int(raw)",
  "tests/trace/test_trace.py"),
 ("P12 a file without trace lines passes", "difftest/trace/parser.py",
  "    if trace.level == 0:\n        raise NoTraceLines", "    if False:\n        raise NoTraceLines",
  "tests/trace/test_trace.py tests/test_cli.py"),
 ("P13 bulk values lose their sign", "difftest/trace/numbers.py",
  "    out[neg] *= -1.0", "    pass", "tests/trace/test_trace.py"),
 ("P14 requests numbered by reader, not by line", "difftest/trace/parser.py",
  "        self._order_requests(verifies, logits)\n", "", "tests/trace/test_trace.py"),
 ("P15 no cap on one line", "difftest/trace/parser.py",
  "            if pending_len > MAX_LINE_BYTES:\n                raise _LineTooLong",
  "            if False:\n                raise _LineTooLong", "tests/trace/test_trace.py"),
 ("A1 constant-blocks check off", "difftest/analysis/audit.py",
  "if constant and n > 1:", "if False:", "tests/analysis/test_audit.py"),
 ("A2 logits_vary always true", "difftest/analysis/audit.py",
  "logits_vary = _varies(rows) or _varies(ids)", "logits_vary = True",
  "tests/analysis/test_audit.py"),
 ("A3 blind radius ignored", "difftest/analysis/audit.py",
  "if blind_min > th.max_blind_radius:", "if False:", "tests/analysis/test_audit.py"),
 ("A4 entropy threshold off", "difftest/analysis/audit.py",
  "if pooled < th.min_entropy_bits:", "if False:", "tests/analysis/test_audit.py"),
 ("C1 --help imports numpy", "difftest/cli/__init__.py",
  "import typer\n", "import typer\nimport numpy\n", "tests/test_cli.py"),
 ("C2 csv escaping off", "difftest/report/cells.py",
  "if text and text.startswith(FORMULA_START):", "if False:", "tests/test_cli.py"),
 ("G1 severity order", "difftest/core/errors.py",
  "ExitCode.DIFFER: 2,\n            ExitCode.UNINFORMATIVE: 1", "ExitCode.DIFFER: 1,\n            ExitCode.UNINFORMATIVE: 2",
  "tests/flow/test_gate.py::test_worst_orders_by_severity"),
 ("G2 uninformative counts as killed", "difftest/flow/scoring.py",
  '        return v.kind is VerdictKind.DIFFER\n',
  '        return v.kind in (VerdictKind.DIFFER, VerdictKind.UNINFORMATIVE)\n',
  "tests/flow/test_gate.py::test_probe_on_the_degenerate_fixture_is_blind"),
 ("G3 junit: uninformative passes", "difftest/report/gate_report.py",
  "    if not v.passed:\n        kind", "    if not v.passed and v.kind != 'uninformative':\n        kind",
  "tests/flow/test_gate.py::test_check_fails_with_the_right_exit_codes"),
 ("G5 differ probes judged as same", "difftest/flow/scoring.py",
  "    return not v.passed  # a", "    return v.kind == 'differ'  # a",
  "tests/flow/test_gate.py::test_probes_of_a_differ_comparison_are_judged_by_its_expectation"),
 ("G6 self-comparison runs once", "difftest/flow/plan.py",
  "    if spec.arm_a != spec.arm_b:\n        return spec", "    if True:\n        return spec",
  "tests/flow/test_gate.py::test_check_runs_an_arm_compared_with_itself_twice"),
 ("V3 coverage gaps ignored", "difftest/analysis/verdict.py",
  "or cmp.divergences\n          or cmp.coverage_gaps or cmp.draft_length_blocks or cmp.steps_lost_a",
  "or cmp.divergences\n          or cmp.draft_length_blocks or cmp.steps_lost_a",
  "tests/analysis/test_verdict.py"),
 ("V4 compared blocks not measured", "difftest/analysis/verdict.py",
  "            blind += [r for r in measured.blind_reasons if r not in blind]", "            pass",
  "tests/analysis/test_verdict.py"),
 ("V5 near_tie never blinds tokens", "difftest/analysis/verdict.py",
  "if known.any() and near_tie_rows(", "if False and near_tie_rows(", "tests/analysis/test_verdict.py"),
 ("K1 disjoint top lists within atol", "difftest/numerics/tolerance.py",
  "    differs = row_any(certain) | disjoint", "    differs = row_any(certain)",
  "tests/numerics/test_tolerance.py"),
 ("K2 logit keys ignore the request", "difftest/analysis/compare.py",
  "keys: np.ndarray = (req * self.pos_span", "keys: np.ndarray = (0 * self.pos_span",
  "tests/analysis/test_compare.py"),
 ("H1 engine errors ignored", "difftest/flow/evaluate.py",
  "                      _health_failure(name, trace))", "                      None)",
  "tests/flow/test_pipeline.py"),
 ("V6 step budgets not tolerated", "difftest/trace/align.py",
  "(steps_a[i] == steps_b[i] or names[i] in outgrown)", "(names[i] in outgrown)",
  "tests/analysis/test_verdict.py"),
 ("V7 outgrown requests not exempt", "difftest/trace/align.py",
  "(steps_a[i] == steps_b[i] or names[i] in outgrown)", "(steps_a[i] == steps_b[i])",
  "tests/analysis/test_verdict.py"),
 ("V8 near_tie blinds differ comparisons", "difftest/analysis/verdict.py",
  "if not blind and expect is Expect.SAME and bool(", "if not blind and bool(",
  "tests/analysis/test_verdict.py"),
 ("K3 equal infinities differ", "difftest/numerics/tolerance.py",
  "        d[same_nonfinite] = 0.0", "        pass", "tests/analysis/test_compare.py"),
 ("N1 rtol ignored", "difftest/numerics/tolerance.py",
  "self.atol + self.rtol * np.abs(b)", "self.atol + 0 * np.abs(b)", "tests/numerics/test_tolerance.py"),
 ("N2 rounding interval ignored", "difftest/numerics/tolerance.py",
  "    out: np.ndarray = d - half\n", "    out: np.ndarray = d\n",
  "tests/numerics/test_tolerance.py"),
 ("N3 p99 is p95", "difftest/numerics/stats.py",
  "np.percentile(d, 99, ", "np.percentile(d, 95, ", "tests/numerics/test_stats.py"),
 ("N4 KL direction swapped", "difftest/numerics/stats.py",
  "np.exp(lb) * (lb - la)", "np.exp(la) * (la - lb)", "tests/numerics/test_stats.py"),
 ("N5 zero floor not strict", "difftest/numerics/noise.py",
  "    if floor.zero:\n        return FlipTest(", "    if False:\n        return FlipTest(",
  "tests/numerics/test_noise.py"),
 ("N6 every value above the floor counts", "difftest/numerics/noise.py",
  "p, p <= alpha, FlipRule.EXACT_TEST,\n", "p, True, FlipRule.EXACT_TEST,\n",
  "tests/test_numerics_cli.py::test_values_above_a_floor_count_only_when_a_rerun_would_not_show_them"),
 ("N7 one-sided logits compared", "difftest/analysis/compare.py",
  "    if one_sided is not None:", "    if False:",
  "tests/test_numerics_cli.py::test_a_level_three_trace_against_a_level_one_trace_compares_tokens"),
 ("P8 cut trace line at a field boundary passes", "difftest/trace/parser.py",
  'if line.lstrip().startswith(b"["):', "if False:", "tests/flow/test_pipeline.py"),
 ("K4 value keys past 63 bits", "difftest/analysis/compare.py",
  "        if max(requests, 1) * pos_span * row_span < 2**63:", "        if True:",
  "tests/analysis/test_compare.py"),
 ("V1 agree without an instrument", "difftest/analysis/verdict.py",
  "elif cmp.blocks_compared and inst.names:", "elif cmp.blocks_compared:",
  "tests/flow/test_gate.py::test_probe_on_the_degenerate_fixture_is_blind"),
 ("V2 logit differences ignored", "difftest/analysis/verdict.py",
  "elif (cmp.blocks_differing or cmp.blocks_logit_differing or cmp.divergences",
  "elif (cmp.blocks_differing or cmp.divergences",
  "tests/flow/test_gate.py::test_probe_on_the_degenerate_fixture_at_level_3_kills_through_logits"),
 ("D1 sequential rows after a flip compared", "difftest/analysis/compare.py",
  "        status[after_first_flip(rows.step, flipped)] = DIVERGED", "        pass",
  "tests/analysis/test_drafting.py"),
 ("D2 a row one arm drafted is a flip", "difftest/analysis/compare.py",
  "    status[rows.has_a & ~rows.has_b] = UNMATCHED_A",
  "    status[rows.has_a & ~rows.has_b] = DIFFER", "tests/analysis/test_drafting.py"),
 ("D3 draft length passes same", "difftest/analysis/verdict.py",
  "or cmp.coverage_gaps or cmp.draft_length_blocks or", "or cmp.coverage_gaps or",
  "tests/analysis/test_drafting.py"),
 ("D4 k=0 steps paired", "difftest/trace/align.py",
  "    pair = drafted_a[a_idx] | drafted_b[b_idx]", "    pair = drafted_a[a_idx] | True",
  "tests/analysis/test_drafting.py"),
 ("D5 k=0 steps unmatched", "difftest/trace/align.py",
  "    unmatched_a = unmatched_a[drafted_a[unmatched_a]]", "    pass", "tests/analysis/test_drafting.py"),
 ("D6 k=0 steps audited as blocks", "difftest/analysis/audit.py",
  "        drafted = lengths[lengths > 0]", "        drafted = lengths", "tests/analysis/test_drafting.py"),
 ("D7 contradicting headers pass", "difftest/flow/evaluate.py",
  "    if len(kinds) > 1:", "    if False:", "tests/analysis/test_drafting.py"),
 ("E1 emitter acc = ns", "difftest/emit.py",
  "spectrace(name, pos, k, ns, acc, draft, emit)",
  "spectrace(name, pos, k, ns, ns, draft, emit)", "tests/test_emit.py"),
 ("E2 emitter ties by the higher id", "difftest/emit.py",
  "    order = np.lexsort((cand, -key[cand], np.isnan(row[cand])))[:k]",
  "    order = np.lexsort((-cand, -key[cand], np.isnan(row[cand])))[:k]", "tests/test_emit.py"),
 ("E3 logits printed with 6 digits", "difftest/emit.py",
  '    pairs = "".join(f"{int(i)}:{float(v):.9g} " for i, v in top)',
  '    pairs = "".join(f"{int(i)}:{float(v):.6g} " for i, v in top)', "tests/test_emit.py"),
 ("T1 hf adapter drops the first emitted token", "difftest/adapters/hf.py",
  "            emitted = input_ids[0, cur_len:].tolist()",
  "            emitted = input_ids[0, cur_len + 1:].tolist()", "tests/runners/test_hf.py"),
 ("T2 hf mutation not applied", "difftest/runners/hf/models.py",
  "        route_masked_attention(draft, MUTATED_ATTN, options.mutation,\n"
  "                               window=options.sliding_window, seen=seen)",
  "        pass", "tests/runners/test_hf.py"),
]


def drifted(root: Path = REPO) -> list[str]:
    """Every entry whose code to mutate is no longer in its file exactly once."""
    out = []
    for name, path, old, _new, _tests in M:
        full = root / path
        found = full.read_text().count(old) if full.exists() else 0
        if found != 1:
            out.append(f"{name}: the code to mutate is in {path} {found} times, not once")
    return out


def main() -> int:
    only = sys.argv[1:]
    if only == ["--anchors"]:
        stale = drifted()
        print("\n".join(stale) or f"all {len(M)} anchors match")
        return 1 if stale else 0
    stale = drifted()
    if stale:
        sys.exit("update this script:\n" + "\n".join(stale))
    survivors = 0
    with tempfile.TemporaryDirectory(prefix="difftest-mut-") as root:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
        env = os.environ | {"PYTHONPATH": root}
        for name, path, old, new, tests in M:
            if only and name.split()[0] not in only:
                continue
            full = Path(root) / path
            src = full.read_text()
            if src.count(old) != 1:
                sys.exit(f"{name}: the code to mutate is no longer in {path} (found "
                         f"{src.count(old)} times): update this script")
            full.write_text(src.replace(old, new))
            try:
                r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p",
                                    "no:cacheprovider", *tests.split()],
                                   cwd=root, capture_output=True, text=True, env=env)
            finally:
                full.write_text(src)
            lines = [line for line in r.stdout.splitlines() if line.strip()]
            failed = [line.split("::")[-1].split(" ")[0] for line in lines
                      if line.startswith("FAILED")]
            survivors += r.returncode == 0
            print(f"{name:40} {'RED' if r.returncode else 'STILL GREEN'} {failed[:3]} | "
                  f"{lines[-1] if lines else ''}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
