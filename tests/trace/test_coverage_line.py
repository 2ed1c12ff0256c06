"""The `[spec-coverage]` line: read by both readers into `ArmTrace.coverage`; a bad counter, a
bad width list or a second line is an error naming file and line."""

from __future__ import annotations

import pytest

from difftest.core.errors import TraceError
from difftest.emit import spec_coverage
from difftest.trace import parse_text
from conftest import verify_line

pytestmark = pytest.mark.usefixtures("each_reader")  # every test under both readers

STEP = verify_line("r0", 5, [1, 2], [1, 3])  # k = 2: a verify of width 3
ONE = verify_line("r0", 7, [4], [4, 6])  # k = 1: width 2


def test_the_line_is_read_with_its_widths_and_counters() -> None:
    line = spec_coverage({"blocks": 3, "page_cross": 2, "widths": "2:1,3:1", "new_counter": 7})
    trace = parse_text(f"{STEP}\n{ONE}\n{line}\n", "arm.log")
    assert trace.coverage.line == 3
    assert trace.coverage.widths == ((2, 1), (3, 1))
    assert trace.coverage.count("widths") == 2
    assert trace.coverage.count("page_cross") == 2
    assert trace.coverage.count("new_counter") == 7  # the set of counters may grow
    assert trace.coverage.count("eos") == 0  # not printed: nothing seen
    assert trace.lines_skipped == 0


def test_a_trace_without_the_line_has_no_coverage() -> None:
    trace = parse_text(f"{STEP}\n", "arm.log")
    assert not trace.coverage.present and trace.coverage.count("page_cross") == 0


def test_no_widths_is_a_dash() -> None:
    trace = parse_text("[spec-coverage] blocks=0 widths=-\n", "arm.log")
    assert trace.coverage.widths == () and trace.coverage.count("widths") == 0


@pytest.mark.parametrize("body, message", [
    ("page_cross=-1", "page_cross"),
    ("page_cross=x", "page_cross"),
    ("widths=5", "widths: expected W:N"),
    ("widths=5:1,,3:2", "widths: expected W:N"),
    ("widths=0:1,3:1", "widths: a verify's width is at least 1 (its anchor), got '0:1'"),
    # counts the trace contradicts: a width wider than any traced verify, more steps than it has
    ("widths=3:1,999999999:1", "widths: width 999999999 is wider than any traced verify (k + 1 "
                               "is at most 3 here)"),
    ("widths=3:30", "widths: 30 verify steps counted, and the trace holds 1 verifies"),
    ("blocks=1 blocks=2", "given twice"),
    ("", "expected counters"),
])
def test_a_bad_line_names_file_and_line(body: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        parse_text(f"{STEP}\n[spec-coverage] {body}\n", "arm.log")
    assert "arm.log:2" in str(err.value) and message in str(err.value)


def test_a_second_line_is_refused() -> None:
    text = f"[spec-coverage] blocks=1\n{STEP}\n[spec-coverage] blocks=1\n"
    with pytest.raises(TraceError, match=r"arm.log:3: .*second time \(first at line 1\)"):
        parse_text(text, "arm.log")


def test_the_emitter_refuses_a_value_with_spaces() -> None:
    with pytest.raises(ValueError, match="one-word"):
        spec_coverage({"widths": "2:1 5:2"})
