"""The head of every report: what was observed, in words that cannot read as a pass when the
comparison failed, the same in the terminal table, markdown, JUnit and HTML; and which
instrument saw a difference."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from difftest import api
from difftest.core.errors import ExitCode
from difftest.flow.judge import CheckResult
from difftest.core.kinds import Expect, VerdictKind
from difftest.flow.evaluate import ComparisonReport
from difftest.report import comparison, gate_report, html
from difftest.report.headline import Headline, Tone, differed, headline, observed

COMPARE = Path(__file__).parents[1] / "data" / "compare"
CONFIG = Path(__file__).parents[2] / "difftest" / "configs" / "default.toml"


def _report(a: str, b: str, **kw: object) -> ComparisonReport:
    return api.compare_traces(COMPARE / a, COMPARE / b, config=CONFIG, **kw)  # type: ignore[arg-type]


def _check(rep: ComparisonReport) -> CheckResult:
    return CheckResult(Path("difftest.toml"), None, (rep,), {})


def test_a_failed_expect_differ_reads_no_difference_in_every_format() -> None:
    rep = _report("agree_a.log", "agree_b.log", expect="differ")
    assert (rep.verdict.kind, rep.exit_code) == (VerdictKind.AGREE, ExitCode.DIFFER)
    words = "NO DIFFERENCE (expect differ): FAILED, exit 1"
    table = comparison.render_table(rep)
    assert table.splitlines()[0] == f"traces: {words}"
    md = comparison.render_markdown(rep)
    assert md.splitlines()[0] == "### difftest `traces`: **NO DIFFERENCE** (expect differ): FAILED, exit 1"
    page = html.render_comparison(rep)
    assert ('<span class="verdict fail">NO DIFFERENCE</span> (expect differ): FAILED, exit 1'
            in page)
    result = _check(rep)
    failure = ET.fromstring(gate_report.junit_xml(result, hostname="h")).find(".//failure")
    assert failure is not None and failure.get("message", "").startswith(words)
    assert f"agree_b.log: {words}; nothing differed in 7 block(s)" in gate_report.check_lines(result)
    assert "| **NO DIFFERENCE** (expect differ): FAILED, exit 1 |" in gate_report.check_markdown(result)
    check_page = html.render_check(result)
    # nowhere does the failed comparison's head say AGREE
    for text in (table.splitlines()[0], md.splitlines()[0], failure.get("message", ""),
                 gate_report.check_lines(result), check_page, page):
        assert "AGREE" not in text


def test_the_same_traces_under_expect_same_read_agree() -> None:
    rep = _report("agree_a.log", "agree_b.log")
    assert comparison.render_table(rep).splitlines()[0] == "traces: AGREE (expect same): passed, exit 0"
    assert '<span class="verdict pass">AGREE</span>' in html.render_comparison(rep)


def test_summaries_name_the_instrument_that_differed() -> None:
    logits = _report("agree_a.log", "logitonly_b.log")
    assert logits.comparison is not None and logits.comparison.blocks_differing == 0
    assert differed(logits.comparison) == ("logits in 1/7 blocks",)
    line = gate_report.check_lines(_check(logits)).splitlines()[0]
    assert line.endswith("DIFFER (expect same): FAILED, exit 1; differed: logits in 1/7 blocks")
    tokens = _report("agree_a.log", "differ_b.log")
    assert differed(tokens.comparison) == ("tokens in 2/7 blocks", "logits in 2/7 blocks")
    ties = _report("agree_a.log", "shift_b.log", near_tie=0.05, atol=0.02)
    assert differed(ties.comparison) == ("near-tie flips in 1/7 blocks",)
    assert differed(None) == ()


def test_tone_follows_the_outcome_so_a_new_verdict_kind_gets_one() -> None:
    assert Headline("X", Expect.SAME, True, ExitCode.OK).tone is Tone.PASS
    assert Headline("X", Expect.SAME, False, ExitCode.DIFFER).tone is Tone.FAIL
    assert Headline("X", Expect.SAME, False, ExitCode.UNINFORMATIVE).tone is Tone.BLIND
    assert Headline("X", Expect.SAME, False, ExitCode.ARM_FAILED).tone is Tone.ERROR
    blind = _report("degenerate_a.log", "degenerate_b.log")
    assert str(headline(blind.verdict)) == "UNINFORMATIVE (expect same): FAILED, exit 3"
    assert observed(VerdictKind.DIFFER, Expect.DIFFER) == "DIFFER"
    assert observed(VerdictKind.AGREE, Expect.DIFFER) == "NO DIFFERENCE"


def _k0_pair(tmp: Path, b_drafts_on: set[int]) -> ComparisonReport:
    """Ten verifies of one request: A drafts two ids every step, B only on the steps given
    (k=0 elsewhere); both emit the same token, so positions stay aligned."""
    from conftest import verify_line

    a_lines, b_lines = [], []
    for s in range(10):
        emit = [50 + s]
        a_lines.append(verify_line("r0", s, [7, 8], emit))
        b_lines.append(verify_line("r0", s, [7, 8] if s in b_drafts_on else [], emit))
    (tmp / "a.log").write_text("\n".join(a_lines) + "\n")
    (tmp / "b.log").write_text("\n".join(b_lines) + "\n")
    return api.compare_traces(tmp / "a.log", tmp / "b.log", config=CONFIG)


def test_draft_lengths_are_counted_over_the_blocks_either_arm_drafted(tmp_path: Path) -> None:
    """A block B drafted with k=0 is a draft-length difference but no compared block: the
    count's denominator is the blocks either arm drafted, so it never exceeds it."""
    some = _k0_pair(tmp_path, {0, 5})
    c = some.comparison
    assert c is not None
    assert (c.blocks_compared, c.draft_length_blocks, c.blocks_drafted) == (2, 8, 10)
    assert differed(c) == ("draft lengths in 8/10 blocks",)
    assert "draft lengths in 8/10 blocks" in comparison.render_table(some)
    none = _k0_pair(tmp_path, set()).comparison
    assert none is not None and none.blocks_compared == 0
    assert differed(none) == ("draft lengths in 10/10 blocks",)
