"""The parser against golden traces: every line kind, both list forms, extremes, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from difftest.core.errors import TraceError, UsageError
from difftest.trace import parse_lines, parse_text, parse_trace

pytestmark = pytest.mark.usefixtures("each_reader")  # every test under both readers

DATA = Path(__file__).parents[1] / "data"


def test_every_line_kind_is_read() -> None:
    t = parse_trace(DATA / "all_kinds.log")
    assert t.requests == ("alpha", "beta")
    assert len(t.verifies) == 3
    assert len(t.proposes) == 3
    assert t.proposes.rows.tolist() == [2, 0, 1]
    assert t.proposes.num_reqs.tolist() == [-1, 2, -1]
    assert len(t.logits) == 3
    assert len(t.phases.line) == 3 and t.phases.logits.tolist() == [96, 96, 48]
    assert t.phases.dev_fwd.tolist() == [1.2]
    assert t.routes[0].counters == {"paged_seam": 3, "block_kernel": 0, "combined": 0,
                                    "last_combined_q": 0, "last_combined_k": 0}
    assert [n.req for n in t.notices] == ["beta"]
    assert len(t.engine_errors) == 1 and "scratch buffer" in t.engine_errors[0].message
    # the context-limit notice, graph lines, vt-dump-logits and the unrelated line
    assert t.lines_skipped == 5
    assert t.level == 3
    assert t.lines_total == 21


def test_trailing_space_and_trimmed_lists_read_alike() -> None:
    t = parse_trace(DATA / "all_kinds.log")
    assert t.proposes.first(0).tolist() == [11, -3, 70000]  # trailing-space form
    assert t.proposes.first(2).tolist() == [5, 6, 7]  # trimmed form
    assert t.verifies.draft(0).tolist() == [11, -3, 70000]
    assert t.verifies.emit(1).tolist() == [65536]
    assert t.logits.top_ids[1, :2].tolist() == [-3, 5]  # trimmed logits form


def test_int32_extremes_parse_exactly() -> None:
    t = parse_trace(DATA / "all_kinds.log")
    assert t.verifies.draft(1).tolist() == [2**31 - 1, -(2**31), 0]
    assert t.verifies.draft_ids.dtype == np.int32


def test_non_finite_logits_are_parsed_and_flagged() -> None:
    t = parse_trace(DATA / "all_kinds.log")
    vals = t.logits.top_vals
    assert vals[0, :3].tolist() == [9.5, 8.25, -1e6]
    assert np.isnan(vals[1, 1]) and vals[2, 0] == np.inf and vals[2, 1] == -np.inf
    assert t.logits.finite.tolist() == [True, False, False]
    flagged = [f.line for f in t.findings if f.kind == "non-finite"]
    assert flagged == [8, 9]
    # a row narrower than the widest is padded, not misread
    assert t.logits.width.tolist() == [3, 2, 2]
    assert t.logits.top_ids[1, 2] == -1 and np.isnan(t.logits.top_vals[1, 2])


def test_constant19_fixture() -> None:
    t = parse_trace(DATA / "constant19_level1.log")
    assert t.requests == ("req",)
    assert len(t.verifies) == 7 and len(t.proposes) == 8
    assert set(t.verifies.draft_ids.tolist()) == {19}
    assert t.verifies.pos.tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert t.findings == ()


def test_two_requests_logits() -> None:
    t = parse_trace(DATA / "two_requests_level3.log")
    assert t.logits.top_ids.shape == (36, 8)
    first = t.logits
    assert (t.requests[first.req[0]], first.pos[0], first.row[0]) == ("a", 5, 1)
    assert first.top_ids[0, :2].tolist() == [3747, 279]
    assert first.margins[0] == pytest.approx(9.1778 - 8.8792)
    assert t.findings == ()


def test_malformed_line_names_file_line_and_field() -> None:
    with pytest.raises(TraceError) as err:
        parse_trace(DATA / "malformed_pos.log")
    assert str(err.value) == (f"{DATA / 'malformed_pos.log'}:7: [SPECTRACE] field pos: "
                              "expected an integer, got '4x'")


@pytest.mark.parametrize("line, message", [
    ("[SPECTRACE] req=a pos=3 k=3 ns=1 acc=0 draft=[ 1 2 3 ]",
     "[SPECTRACE] missing field 'emit'"),
    ("[SPECTRACE] req=a pos=3 k=3 nx=1 acc=0 draft=[ 1 ] emit=[ 1 ]",
     "[SPECTRACE] expected field 'ns', got 'nx'"),
    ("[SPECTRACE] req=a pos=3 k=1 ns=1 acc=0 draft=[ 1 x ] emit=[ 2 ]",
     "[SPECTRACE] field draft: item 2: expected an integer id, got 'x'"),
    ("[SPECTRACE] req=a pos=3 k=1 ns=1 acc=0 draft=[ 2147483648 ] emit=[ 2 ]",
     "[SPECTRACE] field draft: item 1: 2147483648 is outside int32"),
    ("[spec-propose] rows=1 nqpr=4 drafts/row=3 first=[1 2 3] extra=1",
     "[spec-propose] unexpected field 'extra'"),
    ("[spec-propose] NO proposing rows this step (num_reqs=x)",
     "[spec-propose] field num_reqs: expected an integer, got 'x'"),
    ("[spec-phase] pre=0.1 backbone=0.2ms sample=0.3ms logits=4",
     "[spec-phase] field pre: expected milliseconds like '0.17ms', got '0.1'"),
    ("[spec-logits] req=a pos=3 row=1 top=[ 1:2.0 3 ]",
     "[spec-logits] field top: item 2: expected 'id:logit', got '3'"),
    ("[spec-logits] req=a pos=3 row=1 top=[ 1:2.03:4 ]",
     "[spec-logits] field top: item 1: expected 'id:logit', got '1:2.03:4'"),
    ("[spec-logits] req=a pos=3 row=1 top=[ 99999999999:1.0 2:0.5 ]",
     "[spec-logits] field top: item 1: id 99999999999 is outside int32"),
    ("[dflash-route] paged_seam=x", "[dflash-route] field paged_seam: expected an integer, got 'x'"),
    # integers beyond what the arrays and alignment keys hold are errors, not overflows
    ("[SPECTRACE] req=a pos=99999999999999999999 k=1 ns=1 acc=0 draft=[ 1 ] emit=[ 1 ]",
     "[SPECTRACE] field pos: expected at most 1099511627775, got 99999999999999999999"),
    ("[SPECTRACE] req=a pos=-1 k=1 ns=1 acc=0 draft=[ 1 ] emit=[ 1 ]",
     "[SPECTRACE] field pos: expected at least 0, got -1"),
    ("[spec-logits] req=a pos=2000000000000 row=1 top=[ 1:2 2:1 ]",
     "[spec-logits] field pos: expected at most 1099511627775, got 2000000000000"),
    ("[spec-logits] req=a pos=99999999999999 row=1 top=[ 1:2 2:1 ]",
     "[spec-logits] field pos: expected at most 1099511627775, got 99999999999999"),
    ("[spec-logits] req=a pos=3 row=3000000000 top=[ 1:2 2:1 ]",
     "[spec-logits] field row: 3000000000 is outside int32"),
    ("[spec-logits] req=a pos=3 row=-1 top=[ 1:2 2:1 ]",
     "[spec-logits] field row: expected at least 0, got -1"),
    ("[spec-propose] NO proposing rows this step (num_reqs=99999999999)",
     "[spec-propose] field num_reqs: 99999999999 is outside int32"),
    ("[spec-phase] pre=0.1ms backbone=0.2ms sample=0.3ms logits=99999999999999999999999",
     "[spec-phase] field logits: expected at most 9223372036854775807, got "
     "99999999999999999999999"),
    ("[SPECTRACE] req=r\x01 pos=1 k=1 ns=1 acc=0 draft=[ 1 ] emit=[ 1 ]",
     "[SPECTRACE] field req: control character in 'r\\x01'"),
    ("[spec-logits] req=r\x01 pos=1 row=1 top=[ 1:2 2:1 ]",
     "[spec-logits] field req: control character in 'r\\x01'"),
])
def test_malformed_lines(line: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        parse_lines(["ignored noise", line], path="t.log")
    assert str(err.value) == f"t.log:2: {message}"


def test_truncated_file_is_read_up_to_the_cut() -> None:
    t = parse_trace(DATA / "truncated_level3.log")
    assert t.truncated
    assert [f.kind for f in t.findings] == ["truncated"]
    assert t.findings[0].line == 23
    whole = parse_trace(DATA / "two_requests_level3.log")
    assert len(t.verifies) == 4
    assert t.verifies.draft_ids.tolist() == whole.verifies.draft_ids[:12].tolist()
    assert len(t.logits) == 14  # the logits lines before the cut are all kept


def test_chunked_reading_matches_whole_reading(tmp_path: Path) -> None:
    # Chunk boundaries fall inside lines; the result must not depend on them.
    whole = parse_trace(DATA / "two_requests_level3.log")
    for chunk in (7, 64, 1000):
        t = parse_trace(DATA / "two_requests_level3.log", chunk_bytes=chunk)
        assert np.array_equal(t.logits.top_vals, whole.logits.top_vals)
        assert t.logits.line.tolist() == whole.logits.line.tolist()
        assert t.verifies.emit_ids.tolist() == whole.verifies.emit_ids.tolist()
        assert t.lines_total == whole.lines_total


def test_invariant_violations_are_findings_with_lines() -> None:
    t = parse_trace(DATA / "invariants.log")
    messages = {(f.line, f.message) for f in t.findings}
    assert (1, "[spec-propose] drafts/row=3 but first has 2 ids") in messages
    assert (2, "[SPECTRACE] req=r pos=3: k=3 but draft has 2 ids") in messages
    assert (3, "[SPECTRACE] req=r pos=5: acc=1 but max(ns-1, 0)=2") in messages
    assert (4, "[SPECTRACE] req=r pos=9: acc=2 but max(ns-1, 0)=2") not in messages
    assert (4, "[SPECTRACE] req=r pos=9: emit[:acc] [7, 0] differs from draft[:acc] [7, 8]") \
        in messages
    assert (4, "[SPECTRACE] req=r: pos=9, but the previous verify (line 3) leads to pos=8") \
        in messages
    assert (5, "[spec-logits] top list is not ordered highest first") in messages
    assert (6, "[spec-logits] row=0: rows are 1..k (row 0 is the anchor)") in messages
    assert len(t.findings) == 7


def test_crlf_and_empty_input() -> None:
    t = parse_text("[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 5 ]\r\n")
    assert t.verifies.draft_ids.tolist() == [4] and t.findings == ()
    empty = parse_text("")
    assert len(empty.verifies) == 0 and empty.level == 0 and not empty.has_drafts


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such trace file"):
        parse_trace(tmp_path / "absent.log")
    with pytest.raises(UsageError, match="is a directory"):
        parse_trace(tmp_path)


def test_bulk_number_reader_reads_exactly_and_rejects_what_is_no_number() -> None:
    """Each chunk's logits go through one numpy call; it must agree with float() exactly."""
    lines = []
    for pos in range(1, 41):
        lines.append(f"[spec-logits] req=r pos={pos} row=1 top=[ {pos}:{pos * 0.37:.6g} "
                     f"-2147483648:nan 2147483647:-inf 70000:-1.5e-07 ]")
    t = parse_lines(lines)
    assert [t.logits.top_vals[i, 0] for i in range(40)] == \
        [float(f"{(i + 1) * 0.37:.6g}") for i in range(40)]
    assert t.logits.top_ids[0].tolist() == [1, -(2**31), 2**31 - 1, 70000]
    assert np.isnan(t.logits.top_vals[:, 1]).all() and (t.logits.top_vals[:, 2] == -np.inf).all()
    assert (t.logits.top_vals[:, 3] == -1.5e-07).all()
    # spellings the line regex lets through but no number reader should: named by the field reader
    for bad in ("1e", "NA", "1.2.3"):
        wrong = lines[:5] + [f"[spec-logits] req=r pos=99 row=1 top=[ 1:2.5 2:{bad} 3:0 4:0 ]"]
        with pytest.raises(TraceError, match=r"^<lines>:6: \[spec-logits\] field top: item 2"):
            parse_lines(wrong)


def test_first_bad_line_is_reported_whichever_reader_finds_it() -> None:
    lines = ["[spec-logits] req=r pos=1 row=1 top=[ 1:2.5 2:1e ]",  # number reader rejects
             "[SPECTRACE] req=r pos=1 k=1 ns=x acc=0 draft=[ 1 ] emit=[ 1 ]"]  # field reader
    with pytest.raises(TraceError, match=r"^<lines>:1: "):
        parse_lines(lines)


def test_rows_of_different_widths_across_chunks(tmp_path: Path) -> None:
    """Chunks are stitched into one padded matrix whether later rows are narrower or wider."""
    path = tmp_path / "widths.log"
    path.write_text("[spec-logits] req=r pos=1 row=1 top=[ 1:2 ]\n"
                    "[spec-logits] req=r pos=1 row=2 top=[ 1:3 2:2 3:1 ]\n"
                    "[spec-logits] req=r pos=1 row=3 top=[ 4:5 5:4 ]\n")
    for chunk in (8, 1 << 20):
        lg = parse_trace(path, chunk_bytes=chunk).logits
        assert lg.width.tolist() == [1, 3, 2]
        assert lg.top_ids.tolist() == [[1, -1, -1], [1, 2, 3], [4, 5, -1]]
        assert np.array_equal(lg.top_vals, np.array([[2, np.nan, np.nan], [3, 2, 1],
                                                     [5, 4, np.nan]]), equal_nan=True)
    whole = parse_trace(DATA / "all_kinds.log")
    tiny = parse_trace(DATA / "all_kinds.log", chunk_bytes=5)
    assert np.array_equal(tiny.logits.top_vals, whole.logits.top_vals, equal_nan=True)
    assert tiny.logits.top_ids.tolist() == whole.logits.top_ids.tolist()


def test_phase_element_counts_keep_every_digit() -> None:
    t = parse_lines(["[spec-phase] pre=0.1ms backbone=0.2ms sample=0.3ms "
                     "logits=9223372036854775807"])
    assert t.phases.logits.tolist() == [2**63 - 1] and t.phases.pre.tolist() == [0.1]


# -- print resolution, steps that draft nothing, the drafting-kind header ----------------------

def test_sig_digits_count_the_printed_mantissa_per_row() -> None:
    t = parse_lines([
        "[spec-logits] req=a pos=1 row=1 top=[ 1:2.87758 2:1.23457e+01 ]",  # %.6g: 6
        "[spec-logits] req=a pos=1 row=2 top=[ 1:12.3457 2:5.5 ]",
        "[spec-logits] req=a pos=1 row=3 top=[ 1:5.5 2:-0.0025 ]",  # short values: 2
        "[spec-logits] req=a pos=1 row=4 top=[ 1:nan 2:inf ]",  # none finite: 0
        "[spec-logits] req=a pos=1 row=5 top=[ 1:2.87758123 2:-0.0025 ]",  # %.9g: 9
        "[spec-logits] req=a pos=1 row=6 top=[  1:2.87758123   2:1e-05 ]",  # careful reader's path
        "[spec-logits] req=a pos=1 row=7 top=[ 1:0 2:-0 ]",
        "[spec-logits] req=a pos=1 row=8 top=[ 1:120 2:.5 3:1E+300 4:-inf ]",
        "[spec-logits] req=a pos=1 row=9 top=[ ]",
    ])
    assert t.logits.sig_digits.dtype == np.int8
    assert t.logits.sig_digits.tolist() == [6, 6, 2, 0, 9, 9, 1, 3, 0]


def test_nine_digit_values_keep_float64_and_round_trip_float32() -> None:
    rng = np.random.default_rng(0)
    vals = (rng.standard_normal(200) * 10).astype(np.float32)
    texts = [f"{float(v):.9g}" for v in vals]
    lines = [f"[spec-logits] req=a pos=1 row={i + 1} top=[ 1:{t} 2:-40 ]"
             for i, t in enumerate(texts)]
    got = parse_lines(lines).logits.top_vals[:, 0]
    assert got.tolist() == [float(t) for t in texts]  # float64 of the text, not float32
    assert np.array_equal(got.astype(np.float32), vals)


def test_verifies_that_draft_nothing_are_read_in_both_list_forms() -> None:
    t = parse_lines([
        "[SPECTRACE] req=a pos=3 k=0 ns=1 acc=0 draft=[ ] emit=[ 7 ]",
        "[SPECTRACE] req=a pos=4 k=0 ns=1 acc=0 draft=[] emit=[ 8 ]",
        "[SPECTRACE] req=a pos=5 k=0 ns=2 acc=1 draft=[ ] emit=[ 8 9 ]",
    ])
    assert t.verifies.k.tolist() == [0, 0, 0]
    assert t.verifies.draft_off.tolist() == [0, 0, 0, 0]
    assert t.verifies.emit_ids.tolist() == [7, 8, 8, 9]
    # the invariants still hold them: emit[:acc] must come from an (empty) draft
    assert [(f.line, f.kind) for f in t.findings] == [(3, "invariant")]
    assert "emit[:acc]" in t.findings[0].message


def test_drafting_kind_header() -> None:
    from difftest.core.model import DraftingKind

    assert parse_lines(["[SPECTRACE] req=a pos=0 k=0 ns=1 acc=0 draft=[ ] emit=[ 1 ]"]).drafting is None
    t = parse_lines(["[spec-drafting] kind=block", "[spec-drafting] kind=block"])
    assert t.drafting is DraftingKind.BLOCK and t.lines_skipped == 0
    assert parse_lines(["[spec-drafting] kind=sequential"]).drafting is DraftingKind.SEQUENTIAL
    with pytest.raises(TraceError) as exc:
        parse_lines(["x", "[spec-drafting] kind=tree"], path="t.log")
    assert str(exc.value) == ("t.log:2: [spec-drafting] field kind: expected one of block, "
                              "sequential, got 'tree'")
    with pytest.raises(TraceError) as exc:
        parse_lines(["[spec-drafting] kind=block", "", "[spec-drafting] kind=sequential"],
                    path="t.log")
    assert str(exc.value) == ("t.log:3: [spec-drafting] kind=sequential contradicts kind=block "
                              "declared at line 1")


# -- hostile input: huge integers, endless lines, files that are no trace ----------------------

@pytest.mark.parametrize("pure", [True, False])
@pytest.mark.parametrize(("line", "message"), [
    ("[SPECTRACE] req=a pos={big} k=0 ns=1 acc=0 draft=[ ] emit=[ 1 ]",
     "[SPECTRACE] field pos: an integer of 5000 characters is out of range"),
    ("[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ -{big} ] emit=[ 1 ]",
     "[SPECTRACE] field draft: item 1: an id of 5001 characters is outside int32"),
    ("[spec-logits] req=a pos=1 row=1 top=[ {big}:1.5 2:1 ]",
     "[spec-logits] field top: item 1: id of 5000 characters is outside int32"),
    ("[spec-logits] req=a pos={big} row=1 top=[ 1:1.5 2:1 ]",
     "[spec-logits] field pos: an integer of 5000 characters is out of range"),
    ("[spec-phase] pre=1ms backbone=1ms sample=1ms logits={big}",
     "[spec-phase] field logits: an integer of 5000 characters is out of range"),
    ("[dflash-route] paged_seam={big}",
     "[dflash-route] field paged_seam: an integer of 5000 characters is out of range"),
    ("[spec-propose] rows=1 nqpr=2 drafts/row=1 first=[x{big}]",
     ("[spec-propose] field first: item 1: expected an integer id, got "
      "'x9999999999999999999'... (5001 characters)")),
])
def test_huge_integers_are_named_not_crashed(line: str, message: str, pure: bool) -> None:
    """int() refuses digit runs over 4300 characters; no field may ever hand it one."""
    with pytest.raises(TraceError) as err:
        parse_lines(["noise", line.format(big="9" * 5000)], path="t.log", pure=pure)
    assert str(err.value) == f"t.log:2: {message}"


def test_a_line_past_the_cap_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from difftest.trace import parser

    monkeypatch.setattr(parser, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "spew.log"
    ok = "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]\n"
    path.write_text(ok + "x" * 999 + "\n" + ok + "y" * 5000)  # the last line has no newline
    with pytest.raises(TraceError) as err:
        parse_trace(path, chunk_bytes=64)
    assert str(err.value) == (f"{path}:4: line longer than 0 MiB (the cap on one trace line): "
                              "is this a trace?")
    path.write_text(ok + "z" * 1001 + "\n" + ok)  # a long line that does end
    with pytest.raises(TraceError, match=r":2: line longer than"):
        parse_trace(path, chunk_bytes=64)
    path.write_text(ok + "x" * 999 + "\n" + ok)  # at the cap: read, and skipped as noise
    assert parse_trace(path, chunk_bytes=64).lines_skipped == 1


def test_a_long_line_is_gathered_piecewise(tmp_path: Path) -> None:
    """An 8 MB line without newline read 4 KB at a time: pieces are joined once, not re-copied
    per chunk (linear time), and the cut-off line is noted."""
    path = tmp_path / "long.log"
    path.write_bytes(b"[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]\n"
                     + b"w" * (8 << 20))
    t = parse_trace(path, chunk_bytes=4096)
    assert len(t.verifies) == 1 and t.lines_total == 2 and t.truncated


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00compressed\x00\xff\n",
                                     b"\x00\x01\x02\xff" * 100, b"hello\nworld\n",
                                     b"[dflash-route] paged_seam=1\n"])
def test_a_file_without_trace_lines_is_named(tmp_path: Path, content: bytes) -> None:
    from difftest.core.errors import NoTraceLines

    path = tmp_path / "stream.log"
    path.write_bytes(content)
    assert parse_trace(path).level == 0  # readable as such ...
    with pytest.raises(NoTraceLines) as err:  # ... but not as a trace when one is required
        parse_trace(path, require_lines=True)
    hint = ("it is gzip-compressed: decompress it first" if content.startswith(b"\x1f\x8b")
            else "is VT_SPEC_TRACE set, is this the runner's stderr?")
    assert str(err.value) == f"no VT_SPEC_TRACE lines in {path} ({hint})"
    assert err.value.exit_code == 2


def test_without_the_scanner_a_large_parse_says_so_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from difftest.trace import parser

    monkeypatch.setattr(parser, "_scan", None)
    monkeypatch.setattr(parser, "_noticed", False)
    monkeypatch.setattr(parser, "SLOW_NOTICE_BYTES", 100)
    monkeypatch.delenv(parser.PURE_ENV, raising=False)
    assert not parser.fast_path_available()
    path = tmp_path / "t.log"
    path.write_text("[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]\n" * 10)
    for _ in range(2):
        assert len(parse_trace(path).verifies) == 10
    assert capsys.readouterr().err.count("the compiled trace scanner is not built") == 1


@pytest.mark.parametrize("pure", [True, False])
def test_requests_are_numbered_by_first_appearance_and_nan_keeps_its_sign(pure: bool) -> None:
    t = parse_lines(["[SPECTRACE] req=first pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 4 ]",
                     "[spec-logits] req=second pos=1 row=1 top=[ 1:-nan 2:nan 3:-0 ]",
                     "[spec-logits] req=first pos=2 row=1 top=[ 1:2 2:1 ]"], pure=pure)
    assert t.requests == ("first", "second")
    assert t.verifies.req.tolist() == [0] and t.logits.req.tolist() == [1, 0]
    signs = np.signbit(t.logits.top_vals[0]).tolist()
    assert signs == [True, False, True]  # as float() reads -nan, nan and -0
