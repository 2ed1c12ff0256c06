"""Parser paths the other tests never run: `[spec-logits]` lines only the field reader accepts,
every finding kind with its exact line and message, the ns != len(emit) invariant, and a last
line without a newline, in memory and from a file read in small chunks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from difftest.core.model import ArmTrace
from difftest.trace import parse_lines, parse_text, parse_trace

pytestmark = pytest.mark.usefixtures("each_reader")  # every test under both readers

LINES = [
    "[spec-logits] req=a pos=1 row=1 top=[ 5:2.0 3:1.0 ]",
    "[spec-logits] req=a  pos=1 row=2   top=[  6:3.50   1:1.25 ]",  # spaces: field reader only
    "[spec-logits] req=a pos=1 row=0 top=[ 7:1.0 ]",
    "[spec-logits] req=a pos=1 row=3 top=[ 7:1.0 8:2.0 9:nan ]",
    "[SPECTRACE] req=a pos=1 k=3 ns=3 acc=1 draft=[ 5 6 ] emit=[ 5 9 ]",
    "[SPECTRACE] req=a pos=5 k=2 ns=2 acc=1 draft=[ 4 6 ] emit=[ 5 9 ]",
    "[spec-propose] rows=1 nqpr=3 drafts/row=2 first=[1 ]",
    "vllm.cpp: request a has outgrown the draft speculative context (stops speculating)",
    "something else",
]

FINDINGS = [
    (3, "invariant", "[spec-logits] row=0: fewer than two entries, margin undefined"),
    (3, "invariant", "[spec-logits] row=0: rows are 1..k (row 0 is the anchor)"),
    (4, "non-finite", "[spec-logits] req=a pos=1 row=3: non-finite logit in the top list"),
    (4, "invariant", "[spec-logits] top list is not ordered highest first"),
    (5, "invariant", "[SPECTRACE] req=a pos=1: k=3 but draft has 2 ids"),
    (5, "invariant", "[SPECTRACE] req=a pos=1: ns=3 but emit has 2 ids"),
    (5, "invariant", "[SPECTRACE] req=a pos=1: acc=1 but max(ns-1, 0)=2"),
    (6, "invariant", "[SPECTRACE] req=a pos=5: emit[:acc] [5] differs from draft[:acc] [4]"),
    (6, "discontinuity", "[SPECTRACE] req=a: pos=5, but the previous verify (line 5) leads to pos=4"),
    (7, "invariant", "[spec-propose] drafts/row=2 but first has 1 ids"),
    (8, "outgrown", "vllm.cpp: request a has outgrown the draft speculative context (stops "
                    "speculating)"),
]


def _findings(t: ArmTrace) -> list[tuple[int, str, str]]:
    return [(f.line, f.kind, f.message) for f in t.findings]


def _logits(t: ArmTrace) -> list[tuple[int, int, list[int], list[float], int, int]]:
    lg = t.logits
    return [(int(lg.row[i]), int(lg.line[i]), lg.top_ids[i].tolist(),
             ["nan" if math.isnan(x) else x for x in lg.top_vals[i].tolist()],
             int(lg.width[i]), int(lg.sig_digits[i])) for i in range(len(lg))]


EXPECTED_LOGITS = [
    (1, 1, [5, 3, -1], [2.0, 1.0, "nan"], 2, 2),
    (2, 2, [6, 1, -1], [3.5, 1.25, "nan"], 2, 3),
    (0, 3, [7, -1, -1], [1.0, "nan", "nan"], 1, 2),
    (3, 4, [7, 8, 9], [1.0, 2.0, "nan"], 3, 2),
]


def test_every_finding_kind_with_its_line_and_message() -> None:
    t = parse_lines(LINES)
    assert _findings(t) == FINDINGS
    assert (t.lines_total, t.lines_skipped, t.truncated) == (9, 1, False)
    assert [n.req for n in t.notices] == ["a"]


def test_logit_lines_only_the_field_reader_accepts_keep_their_place_and_digits() -> None:
    t = parse_lines(LINES)
    assert _logits(t) == EXPECTED_LOGITS
    assert t.logits.req.tolist() == [0, 0, 0, 0] and t.logits.pos.tolist() == [1, 1, 1, 1]
    assert t.logits.margins[:2].tolist() == [1.0, 2.25]


def test_a_slow_logit_line_alone_reads_as_a_fast_one() -> None:
    slow = parse_lines(["[spec-logits] req=a   pos=7 row=1 top=[ 5:2.5 3:-1e-3 ]"])
    fast = parse_lines(["[spec-logits] req=a pos=7 row=1 top=[ 5:2.5 3:-1e-3 ]"])
    for t in (slow, fast):
        assert t.logits.top_ids.tolist() == [[5, 3]]
        assert t.logits.top_vals.tolist() == [[2.5, -0.001]]
        assert t.logits.pos.tolist() == [7] and t.logits.sig_digits.tolist() == [2]
    assert _findings(slow) == []


def test_a_file_read_in_small_chunks_gives_the_same_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    path.write_text("".join(line + "\n" for line in LINES))
    for chunk in (7, 64, 1 << 20):
        t = parse_trace(path, chunk_bytes=chunk)
        assert [(line, kind, msg) for line, kind, msg in _findings(t)] == FINDINGS, chunk
        assert _logits(t) == EXPECTED_LOGITS, chunk
        assert t.lines_total == 9


def test_the_last_line_without_a_newline_in_memory() -> None:
    plain = parse_text("[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 5 ] emit=[ 9 ]\nnoise")
    assert _findings(plain) == [(2, "no-final-newline", "the trace ends without a newline; its "
                                 "last line was read as it stands")]
    assert plain.truncated and len(plain.verifies) == 1 and plain.lines_skipped == 1
    cut = parse_text("[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 5 ] emit=[ 9 ]")
    assert _findings(cut) == [(1, "truncated", "the trace ends inside a trace line (runner "
                               "killed?); that line was read as it stands")]
    assert cut.truncated and len(cut.verifies) == 1


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_the_last_line_without_a_newline_in_a_file(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "t.log"
    path.write_bytes(b"[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 5 ] emit=[ 9 ]\n"
                     b"[SPECTRACE] req=a pos=2 k=1 ns=1 acc=0 draft=[ 5")
    t = parse_trace(path, chunk_bytes=chunk)
    assert _findings(t) == [(2, "truncated", "the trace ends mid-line (runner killed?); read up "
                             "to the cut, this last line dropped: [SPECTRACE] unexpected text "
                             "'draft=[ 5'")]
    assert t.truncated and len(t.verifies) == 1 and t.lines_total == 2
    path.write_bytes(b"[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 5 ] emit=[ 9 ]\nnoise")
    t = parse_trace(path, chunk_bytes=chunk)
    assert _findings(t) == [(2, "no-final-newline", "the trace ends without a newline; its last "
                             "line was read as it stands")]


def test_ns_not_matching_emit_is_the_only_finding_it_raises() -> None:
    t = parse_lines(["[SPECTRACE] req=r pos=3 k=2 ns=1 acc=0 draft=[ 4 5 ] emit=[ 4 7 ]"])
    assert _findings(t) == [(1, "invariant", "[SPECTRACE] req=r pos=3: ns=1 but emit has 2 ids")]
    assert t.verifies.ns.tolist() == [1] and t.verifies.emit_off.tolist() == [0, 2]
