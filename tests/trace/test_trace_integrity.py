"""A trace whose stream has a hole or contradicts itself is no record of what its engine did:
a tag line with a prefix (not read), a verify at the wrong pos, a step or logit row traced twice
differently. Each is a parser finding, the same from both readers, and reaches the verdict and
the reports of `compare`; identical repeats are harmless and said to be."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest import api
from difftest.analysis.audit import audit_trace
from difftest.analysis.compare import compare
from difftest.core.rules import Rules
from difftest.core.errors import ExitCode
from difftest.core.kinds import FindingKind, VerdictKind
from difftest.core.model import ArmTrace
from difftest.report.comparison import to_dict
from difftest.trace import fast_path_available, parse_text, parse_trace
from difftest.analysis.verdict import Verdict, judge

DATA = Path(__file__).parents[1] / "data" / "compare"
NAMES = ("paged", "materialized")
READERS = [pytest.param(True, id="pure"),
           pytest.param(False, id="compiled", marks=pytest.mark.skipif(
               not fast_path_available(), reason="the compiled scanner is not built"))]

NOT_READ = ("is not at the start of the line, nor behind a known prefix (`srun -l`'s `N: `, "
            "`[rankN]:`, a timestamp, a logger's `LEVEL name:`), so the line was not read "
            "(another prefix, indentation, or another process writing into the same line); "
            "remove the prefix, or give the arm a `line_prefix` pattern that matches it")
UNKNOWN = "node7| "  # a prefix no launcher or logger difftest knows prints
BREAKS = ("materialized: {n} trace finding(s) break the stream (a line not read, a step out of "
          "place, or a step traced twice differently): ")
NO_VERDICT = ("no verdict: the trace of materialized is not a whole record of what the engine "
              "did (see the findings above), so what was compared may be the gap; fix the trace "
              "and compare again")
VERIFY = "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 3 ] emit=[ 4 ]"


def _agree_b() -> str:
    return (DATA / "agree_b.log").read_text()


def _judge(b_text: str) -> tuple[ArmTrace, Verdict]:
    a = parse_trace(DATA / "agree_a.log")
    b = parse_text(b_text, "b.log")
    cmp = compare(a, b)
    return b, judge(cmp, audit_trace(a), audit_trace(b), names=NAMES)


@pytest.mark.parametrize("pure", READERS)
@pytest.mark.parametrize(("line", "what"), [
    (UNKNOWN + VERIFY, "'[SPECTRACE]'"),
    ("  " + VERIFY, "'[SPECTRACE]'"),
    ("step 3 done[spec-logits] req=a pos=1 row=1 top=[ 3:1.5 4:1 ]", "'[spec-logits]'"),
    ("[graph-dispatch] batch=2 [spec-phase] pre=0.1ms backbone=0.2ms sample=0.3ms logits=8",
     "'[spec-phase]'"),
    ("  vt: propose_drafts_block: out of memory", "'vt:'"),
    (UNKNOWN + "vllm.cpp: request r has outgrown the draft speculative context", "'vllm.cpp: request'"),
])
def test_a_tag_past_the_start_of_a_line_is_a_finding_not_noise(line: str, what: str,
                                                                pure: bool) -> None:
    t = parse_text(f"{VERIFY}\n{line}\nINFO 3 tokens/s\n  plain indented output\n", "t.log",
                   pure=pure)
    assert [(f.line, f.kind, f.message) for f in t.findings] == [
        (2, FindingKind.MISPLACED_TAG, f"{what} {NOT_READ}")]
    assert str(t.findings[0]).startswith("t.log:2: ")
    assert (t.lines_skipped, len(t.verifies), len(t.logits), len(t.engine_errors)) == (2, 1, 0, 0)


@pytest.mark.parametrize("pure", READERS)
def test_lines_that_only_look_prefixed_stay_program_output(pure: bool) -> None:
    t = parse_text("INFO dvt: not a prefix\n3 tokens [done]\n  [spec-logits\n"
                   "0: plain\n[x] [y]\n", pure=pure)
    assert (t.findings, t.lines_skipped) == ((), 5)


def test_a_prefixed_verify_leaves_no_verdict() -> None:
    b, v = _judge(_agree_b().replace("[SPECTRACE] req=a pos=8", UNKNOWN + "[SPECTRACE] req=a pos=8"))
    assert (v.kind, v.exit_code, v.passed) == (VerdictKind.UNINFORMATIVE,
                                                  ExitCode.UNINFORMATIVE, False)
    assert v.reasons[0] == (
        BREAKS.format(n=2) + f"b.log:17: '[SPECTRACE]' {NOT_READ}; b.log:28: [SPECTRACE] req=a: "
        "pos=9, but the previous verify (line 7) leads to pos=8")
    # the step whose line was not read is one materialized's stream never emitted: lost
    assert any(r.startswith("1 step(s) only in paged at positions materialized's stream never "
                            "emitted") for r in v.reasons), v.reasons
    assert v.reasons[-1] == NO_VERDICT


def test_a_verify_at_the_wrong_pos_is_no_silent_unmatched_step() -> None:
    _, v = _judge(_agree_b().replace("[SPECTRACE] req=b pos=9", "[SPECTRACE] req=b pos=3"))
    assert v.kind is VerdictKind.UNINFORMATIVE
    assert v.reasons[0] == BREAKS.format(n=2) + (
        "b.log:21: [SPECTRACE] req=b: pos=3, but the previous verify (line 11) leads to pos=9; "
        "b.log:32: [SPECTRACE] req=b: pos=10, but the previous verify (line 21) leads to pos=4")
    assert v.reasons[-1] == NO_VERDICT


def test_stream_breaks_also_leave_no_differ_verdict() -> None:
    """Under `expect = differ` a count of differing blocks from a broken stream passes nothing."""
    a = parse_trace(DATA / "agree_a.log")
    b = parse_text((DATA / "differ_b.log").read_text().replace(
        "[SPECTRACE] req=b pos=9", "[SPECTRACE] req=b pos=3"), "b.log")
    cmp = compare(a, b, Rules(near_tie=0.0, expect="differ"))  # type: ignore[arg-type]
    assert cmp.blocks_differing > 0
    v = judge(cmp, audit_trace(a), audit_trace(b), names=NAMES)
    assert (v.kind, v.passed) == (VerdictKind.UNINFORMATIVE, False)


def test_a_step_verified_twice_identically_is_harmless_and_said_to_be() -> None:
    line = "[SPECTRACE] req=b pos=9 k=3 ns=1 acc=0 draft=[ 7 8 9 ] emit=[ 10 ]"
    b, v = _judge(_agree_b().replace(line, f"{line}\n{line}"))
    assert [(f.line, f.kind.value, f.message) for f in b.findings] == [
        (22, "repeat", "[SPECTRACE] req=b pos=9: verified again (first at line 21), "
                       "identically: harmless, one of them is compared")]
    assert (v.kind, v.passed) == (VerdictKind.AGREE, True)
    assert v.reasons[-1] == ("materialized: 1 other trace finding(s) (repeat), none of which "
                             "breaks the stream (listed in the JSON report)")


def test_a_step_verified_twice_differently_leaves_no_verdict() -> None:
    """The last copy agrees with the other arm and the first does not: neither may decide."""
    line = "[SPECTRACE] req=b pos=9 k=3 ns=1 acc=0 draft=[ 7 8 9 ] emit=[ 10 ]"
    other = "[SPECTRACE] req=b pos=9 k=3 ns=1 acc=0 draft=[ 7 8 99 ] emit=[ 10 ]"
    for text in (f"{other}\n{line}", f"{line}\n{other}"):
        b, v = _judge(_agree_b().replace(line, text))
        assert v.kind is VerdictKind.UNINFORMATIVE
        assert v.reasons[0] == BREAKS.format(n=1) + (
            "b.log:22: [SPECTRACE] req=b pos=9: verified again (first at line 21) with a "
            "different draft or emit: which one the engine acted on is unknown, so no verdict "
            "can rest on this step")


def test_a_logit_row_traced_twice_differently_leaves_no_verdict() -> None:
    row = "[spec-logits] req=b pos=9 row=2 top=[ 8:5.1 18:5.07 123:4 124:3.5 ]"
    assert row in _agree_b()
    same, v = _judge(_agree_b().replace(row, f"{row}\n{row}"))
    assert [(f.line, f.kind, f.message) for f in same.findings] == [
        (20, FindingKind.REPEAT, "[spec-logits] req=b pos=9 row=2: traced again (first at line "
         "19), identically: harmless, one of them is compared")]
    assert v.kind is VerdictKind.AGREE
    # the first copy (the one compared) agrees with the other arm; the second does not
    _, v = _judge(_agree_b().replace(row, f"{row}\n{row.replace('8:5.1 ', '8:5.2 ')}"))
    assert v.kind is VerdictKind.UNINFORMATIVE
    assert v.reasons[0] == BREAKS.format(n=1) + (
        "b.log:20: [spec-logits] req=b pos=9 row=2: traced again (first at line 19) with a "
        "different top list: which one the engine computed is unknown, so no verdict can rest "
        "on this row")


def test_compare_json_lists_each_arms_findings_as_audit_does(tmp_path: Path) -> None:
    b = tmp_path / "b.log"
    b.write_text(_agree_b().replace("[SPECTRACE] req=a pos=8", UNKNOWN + "[SPECTRACE] req=a pos=8"))
    report = api.compare_traces(DATA / "agree_a.log", b)
    data = to_dict(report)
    assert (data["verdict"], data["exit_code"]) == ("uninformative", 3)
    arm_a, arm_b = data["arms"]  # type: ignore[misc]
    assert (arm_a["trace_findings"], arm_a["stream_breaks"]) == ([], 0)
    assert arm_b["findings"] == 2 and arm_b["stream_breaks"] == 2
    assert arm_b["trace_findings"] == [
        {"line": 17, "kind": "misplaced-tag", "message": f"'[SPECTRACE]' {NOT_READ}"},
        {"line": 28, "kind": "discontinuity",
         "message": "[SPECTRACE] req=a: pos=9, but the previous verify (line 7) leads to pos=8"}]
    # `audit` gives the same records
    assert to_dict(report)["arms"][1]["trace_findings"] == [  # type: ignore[index]
        f.to_json() for f in api.audit(b).trace.findings]


def test_many_breaks_in_both_arms_are_quoted_three_at_a_time_and_counted() -> None:
    """Four lines not read in each arm: three quoted, the fourth counted, both arms named."""
    lines = [f"[SPECTRACE] req=a pos={p}" for p in (8, 9)] + \
        [f"[SPECTRACE] req=b pos={p}" for p in (9, 10)]
    a_text, b_text = (DATA / "agree_a.log").read_text(), _agree_b()
    for head in lines:
        a_text, b_text = a_text.replace(head, UNKNOWN + head), b_text.replace(head, UNKNOWN + head)
    a, b = parse_text(a_text, "a.log"), parse_text(b_text, "b.log")
    v = judge(compare(a, b), audit_trace(a), audit_trace(b), names=NAMES)
    for reason, name, arm in zip(v.reasons[:2], NAMES, (a, b), strict=True):
        breaks = [f for f in arm.findings if f.kind.breaks_stream]
        assert len(breaks) > 4
        assert reason == (f"{name}: {len(breaks)} trace finding(s) break the stream (a line not "
                          "read, a step out of place, or a step traced twice differently): "
                          + "; ".join(str(f) for f in breaks[:3])
                          + f" (and {len(breaks) - 3} more)")
    assert v.reasons[-1] == NO_VERDICT.replace("materialized", "paged and materialized")


def test_exactly_three_breaks_are_quoted_without_a_count() -> None:
    b_text = _agree_b()
    for head in ("[SPECTRACE] req=a pos=8", "[spec-logits] req=b pos=9 row=2"):
        b_text = b_text.replace(head, UNKNOWN + head)
    b = parse_text(b_text, "b.log")
    breaks = [f for f in b.findings if f.kind.breaks_stream]
    assert len(breaks) == 3, breaks  # two lines not read, one step out of place
    _, v = _judge(b_text)
    assert v.reasons[0] == BREAKS.format(n=3) + "; ".join(str(f) for f in breaks)


def test_other_findings_are_counted_by_kind_and_only_those_that_leave_the_stream_whole() -> None:
    line = "[SPECTRACE] req=b pos=9 k=3 ns=1 acc=0 draft=[ 7 8 9 ] emit=[ 10 ]"
    text = _agree_b().replace(line, f"{line}\n{line}") + "vt: scratch buffer too small\n" + \
        "[spec-logits] req=z pos=1 row=0 top=[ 1:1 ]"  # row 0, one entry, no final newline
    b, v = _judge(text)
    kinds = sorted({f.kind.value for f in b.findings})
    assert kinds == ["invariant", "repeat", "truncated"]
    assert v.reasons[-1] == (f"materialized: {len(b.findings)} other trace finding(s) "
                             "(invariant, repeat, truncated), none of which breaks the "
                             "stream (listed in the JSON report)")


def test_a_draft_length_difference_alone_is_a_token_flip_that_counts() -> None:
    """One step where B drafted one token more: a difference under `same`, and under `differ`
    the one flip `min_differing = 1` asks for."""
    line = "[SPECTRACE] req=b pos=9 k=3 ns=1 acc=0 draft=[ 7 8 9 ] emit=[ 10 ]"
    longer = "[SPECTRACE] req=b pos=9 k=4 ns=1 acc=0 draft=[ 7 8 9 5 ] emit=[ 10 ]"
    a = parse_trace(DATA / "agree_a.log")
    b = parse_text(_agree_b().replace(line, longer), "b.log")
    cmp = compare(a, b)
    assert (cmp.blocks_differing, cmp.blocks_near_tie, cmp.draft_length_blocks) == (0, 0, 1)
    same = judge(cmp, audit_trace(a), audit_trace(b), names=NAMES)
    assert (same.kind, same.exit_code) == (VerdictKind.DIFFER, ExitCode.DIFFER)
    expecting = compare(a, b, Rules(near_tie=0.0, expect="differ",  # type: ignore[arg-type]
                                    min_differing=1))
    differ = judge(expecting, audit_trace(a), audit_trace(b), names=NAMES)
    assert (differ.kind, differ.passed) == (VerdictKind.DIFFER, True)


@pytest.mark.parametrize("pure", READERS)
def test_repeats_are_found_across_requests_positions_and_rows(pure: bool) -> None:
    """Only a copy of the same (request, pos, row) is a repeat: rows of other requests,
    positions or row numbers with the same values are not, and a third copy names the first."""
    rows = ["[spec-logits] req=a pos=1 row=1 top=[ 3:2 4:1 ]",
            "[spec-logits] req=b pos=1 row=1 top=[ 3:2 4:1 ]",
            "[spec-logits] req=a pos=2 row=1 top=[ 3:2 4:1 ]",
            "[spec-logits] req=a pos=1 row=2 top=[ 3:2 4:1 ]",
            "[spec-logits] req=a pos=1 row=1 top=[ 3:2 4:1 ]",
            "[spec-logits] req=a pos=1 row=1 top=[ 3:2 4:0.5 ]"]
    t = parse_text("\n".join(rows) + "\n", "t.log", pure=pure)
    assert [(f.line, f.kind.value) for f in t.findings] == [
        (5, "repeat"), (6, "conflicting-repeat")]
    assert all("(first at line 1)" in f.message for f in t.findings)
    assert "[spec-logits] req=a pos=1 row=1:" in t.findings[1].message

