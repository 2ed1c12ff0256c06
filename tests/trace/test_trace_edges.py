"""The parser's edges, under both readers: records of the lines only some traces have (notices,
engine errors, routes, `NO proposing` steps, device phases), the caps on repeated findings,
block and line boundaries, which reader a call uses, and the one stderr notice."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from difftest.core.errors import NoTraceLines, TraceError, UsageError
from difftest.trace import parse_lines, parse_text, parse_trace, require_trace_lines
from difftest.trace import parser

pytestmark = pytest.mark.usefixtures("each_reader")  # every test under both readers

VERIFY = "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]"


def test_notices_engine_errors_routes_and_no_propose_steps_are_recorded_exactly() -> None:
    t = parse_text(b"\n".join([
        VERIFY.encode(),
        b"vllm.cpp: request r\xff has outgrown the draft speculative context (stops)",
        b"vt: scratch buffer \xfe too small",
        b"[dflash-route] paged_seam=3 combined=0",
        b"[spec-propose] NO proposing rows this step (num_reqs=2)",
        b"[spec-phase-dev] pre=0.5ms fwd=1.25ms select=0.125ms walk=2.0ms",
        b"[spec-phase] pre=0.1ms backbone=0.2ms sample=0.3ms logits=96",
    ]) + b"\n", path="t.log")
    assert [(n.line, n.req, n.text) for n in t.notices] == [
        (2, "r\\xff", "vllm.cpp: request r\\xff has outgrown the draft speculative context "
         "(stops)")]
    assert [(f.path, f.line, f.kind.value, f.message) for f in t.engine_errors] == [
        ("t.log", 3, "engine-error", "vt: scratch buffer \\xfe too small")]
    assert [(f.line, f.kind.value) for f in t.findings] == [(2, "outgrown")]
    assert [(r.line, r.counters) for r in t.routes] == [(4, {"paged_seam": 3, "combined": 0})]
    p = t.proposes
    assert (p.rows.tolist(), p.nqpr.tolist(), p.k.tolist(), p.num_reqs.tolist(),
            p.line.tolist(), p.first_off.tolist()) == ([0], [-1], [-1], [2], [5], [0, 0])
    ph = t.phases
    assert (ph.dev_pre.tolist(), ph.dev_fwd.tolist(), ph.dev_select.tolist(),
            ph.dev_walk.tolist(), ph.dev_line.tolist()) == ([0.5], [1.25], [0.125], [2.0], [6])
    assert (ph.pre.tolist(), ph.backbone.tolist(), ph.sample.tolist(), ph.logits.tolist(),
            ph.line.tolist()) == ([0.1], [0.2], [0.3], [96], [7])
    assert t.lines_total == 7 and t.lines_skipped == 0


def test_a_request_name_that_is_not_utf8_is_kept_with_its_bytes_escaped() -> None:
    t = parse_text(b"[SPECTRACE] req=r\xff pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]\n"
                   b"[spec-logits] req=r\xff pos=1 row=1 top=[ 4:1.5 2:0.5 ]\n")
    assert t.requests == ("r\\xff",)
    assert t.verifies.req.tolist() == [0] and t.logits.req.tolist() == [0]


def _logits(values: str, pos: int, row: int = 1) -> str:
    return f"[spec-logits] req=a pos={pos} row={row} top=[ {values} ]"


def test_non_finite_rows_are_named_up_to_a_thousand_then_counted() -> None:
    lines = [_logits("1:nan 2:1", pos) for pos in range(1, 1003)]
    t = parse_lines(lines, path="t.log")
    found = [f for f in t.findings if f.kind.value == "non-finite"]
    assert len(found) == 1001
    assert found[999].line == 1000
    assert (found[-1].line, found[-1].message) == (
        1001, "... and 2 more rows with non-finite logits")
    assert found[0].message == "[spec-logits] req=a pos=1 row=1: non-finite logit in the top list"


def test_exactly_a_thousand_non_finite_rows_need_no_count() -> None:
    t = parse_lines([_logits("1:inf 2:1", pos) for pos in range(1, 1001)])
    found = [f for f in t.findings if f.kind.value == "non-finite"]
    assert len(found) == 1000 and not found[-1].message.startswith("...")


@pytest.mark.parametrize(("values", "row", "message"), [
    ("1:2", 1, "[spec-logits] row=1: fewer than two entries, margin undefined"),
    ("1:1 2:2", 1, "[spec-logits] top list is not ordered highest first"),
    ("1:2 2:1", 0, "[spec-logits] row=0: rows are 1..k (row 0 is the anchor)"),
])
def test_per_row_invariants_are_named_for_the_first_hundred_rows(values: str, row: int,
                                                                 message: str) -> None:
    t = parse_lines([_logits(values, pos, row) for pos in range(1, 103)])
    found = [f for f in t.findings if f.message == message]
    assert [f.line for f in found] == list(range(1, 101))


def test_equal_neighbours_are_ordered_highest_first() -> None:
    t = parse_lines([_logits("1:2 2:2 3:2", 1)])
    assert t.findings == ()


def test_a_pos_discontinuity_is_named_in_file_order() -> None:
    t = parse_lines(["[SPECTRACE] req=b pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]",
                     "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]",
                     "[SPECTRACE] req=a pos=5 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]",
                     "[SPECTRACE] req=b pos=7 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]"])
    assert [(f.line, f.kind.value) for f in t.findings] == [
        (3, "discontinuity"), (4, "discontinuity")]
    assert "previous verify (line 2) leads to pos=2" in t.findings[0].message


def test_a_name_only_a_dropped_last_line_used_is_not_a_request(tmp_path: Path) -> None:
    t = parse_text(VERIFY + "\n[spec-logits] req=gone pos=1 row=1 top=[ 4:x")
    assert t.requests == ("a",)
    assert t.truncated


@pytest.mark.parametrize(("text", "total", "line"), [
    ("\n" + VERIFY, 2, 2),
    (VERIFY + "\nx", 2, 2),
])
def test_the_last_line_without_a_newline_is_counted_and_numbered(text: str, total: int,
                                                                 line: int) -> None:
    t = parse_text(text)
    assert t.lines_total == total
    assert [f.line for f in t.findings if f.kind.value in ("no-final-newline", "truncated")] \
        == [line]


def test_errors_in_memory_name_the_text() -> None:
    with pytest.raises(TraceError) as err:
        parse_text("[SPECTRACE] req=a pos=x k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]\n")
    assert str(err.value).startswith("<text>:1: ")
    with pytest.raises(TraceError) as err:
        parse_lines(["[SPECTRACE] req=a pos=x"])
    assert str(err.value).startswith("<lines>:1: ")


def test_text_held_in_memory_without_trace_lines_is_not_called_compressed() -> None:
    with pytest.raises(NoTraceLines) as err:
        require_trace_lines(parse_text("noise\n"))
    assert "gzip" not in str(err.value)


# -- boundaries of blocks and lines --------------------------------------------------------------

@pytest.mark.parametrize("chunk", [1, 2, 3, 61, 62, 63, 64, 200])
def test_blocks_cut_anywhere_read_the_same(tmp_path: Path, chunk: int) -> None:
    text = "\n" + VERIFY + "\n\n" + _logits("4:1.5 2:0.5", 1) + "\nnoise\n"
    path = tmp_path / "t.log"
    path.write_text(text)
    whole = parse_text(text)
    cut = parse_trace(path, chunk_bytes=chunk)
    assert (cut.lines_total, cut.logits.line.tolist(), cut.verifies.line.tolist()) == \
        (whole.lines_total, whole.logits.line.tolist(), whole.verifies.line.tolist()) == \
        (5, [4], [2])


def test_a_line_of_exactly_the_cap_is_read_and_one_byte_more_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parser, "MAX_LINE_BYTES", 64)
    for chunk in (16, 20, 100):
        ok = tmp_path / f"ok{chunk}.log"
        ok.write_text(VERIFY + "\n" + "x" * 64 + "\n" + "y" * 64 + "\n")
        assert parse_trace(ok, chunk_bytes=chunk).lines_total == 3
        bad = tmp_path / f"bad{chunk}.log"
        bad.write_text(VERIFY + "\n" + "x" * 65 + "\n")
        with pytest.raises(TraceError) as err:
            parse_trace(bad, chunk_bytes=chunk)
        assert str(err.value) == (f"{bad}:2: line longer than 0 MiB (the cap on one trace "
                                  "line): is this a trace?")


def test_the_default_cap_is_named_in_mebibytes() -> None:
    assert str(parser._too_long("t.log", 3)) == (
        "t.log:3: line longer than 16 MiB (the cap on one trace line): is this a trace?")


def test_a_path_the_system_cannot_open_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / ("n" * 5000)
    with pytest.raises(UsageError) as err:
        parse_trace(path)
    assert str(err.value) == f"{path}: cannot read: File name too long"


def test_parsing_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    path.write_text(VERIFY + "\n")
    assert gc.isenabled()
    parse_trace(path)
    assert gc.isenabled()
    gc.disable()
    try:
        parse_trace(path)
        assert not gc.isenabled()
    finally:
        gc.enable()


# -- which reader a call uses --------------------------------------------------------------------

class _Counting:
    """Stands in for the compiled scanner and counts its calls."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls, self.N_COLS = real, 0, real.N_COLS
        self.KNOWN_TAGS, self.NOTED_TAGS = real.KNOWN_TAGS, real.NOTED_TAGS

    def scan(self, *args: Any) -> Any:
        self.calls += 1
        return self.real.scan(*args)


def test_an_explicit_reader_wins_over_the_setting(tmp_path: Path, each_reader: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if not parser.fast_path_available():
        pytest.skip("the compiled scanner is not built")
    counting = _Counting(parser._scan)
    monkeypatch.setattr(parser, "_scan", counting)
    path = tmp_path / "t.log"
    path.write_text(VERIFY + "\n")
    for call in (lambda **kw: parse_text(VERIFY + "\n", **kw),
                 lambda **kw: parse_lines([VERIFY], **kw),
                 lambda **kw: parse_trace(path, **kw)):
        before = counting.calls
        call(pure=True)
        assert counting.calls == before
        call(pure=False)
        assert counting.calls > before
        before = counting.calls
        call()  # the setting: DIFFTEST_PURE_PARSER as each_reader set it
        assert (counting.calls > before) == (each_reader == "compiled")


def test_the_slow_path_is_announced_once_for_a_large_trace(
        tmp_path: Path, each_reader: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(parser, "_scan", None)  # as if built without a compiler
    monkeypatch.setattr(parser, "_noticed", False)
    monkeypatch.setenv(parser.PURE_ENV, "0")
    text = VERIFY + "\n"
    monkeypatch.setattr(parser, "SLOW_NOTICE_BYTES", len(text) + 1)
    path = tmp_path / "t.log"
    path.write_text(text)
    parse_trace(path)
    assert capsys.readouterr().err == ""  # one byte under the size
    monkeypatch.setattr(parser, "SLOW_NOTICE_BYTES", len(text))
    parse_trace(path, pure=True)  # the reader was asked for: nothing to announce
    monkeypatch.setenv(parser.PURE_ENV, "1")
    parse_trace(path)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(parser.PURE_ENV, "0")
    parse_trace(path)
    parse_trace(path)
    assert capsys.readouterr().err == (
        "difftest: the compiled trace scanner is not built (no C compiler at install time?); "
        "reading with the pure-Python parser, several times slower. Reinstall with a C "
        "compiler to build it.\n")
    assert not parser.fast_path_available()


def test_no_announcement_when_the_scanner_is_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    if not parser.fast_path_available():
        pytest.skip("the compiled scanner is not built")
    monkeypatch.setattr(parser, "_noticed", False)
    monkeypatch.setattr(parser, "SLOW_NOTICE_BYTES", 1)
    path = tmp_path / "t.log"
    path.write_text(VERIFY + "\n")
    parse_trace(path)
    assert capsys.readouterr().err == ""
    assert np.array_equal(parse_trace(path, pure=True).verifies.pos, [1])
