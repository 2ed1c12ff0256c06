"""The `[spec-sample]` line: what the emitter writes the reader reads back, and every malformed
or self-contradicting line is an error naming file, line and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from difftest.core.errors import TraceError, UsageError
from difftest.emit import spec_sample
from difftest.trace.parser import parse_text
from difftest.trace.sampled import VerifiedRows, checked, parse_samples, samples_of


def test_the_emitted_line_reads_back_field_for_field() -> None:
    rejected = spec_sample("r0", 17, 1, [0.25, 0.5, 1.0], [0.75, 0.0], [0.8, 0.125], 45)
    accepted = spec_sample("r1", 3, 2, [0.5, 0.5], [1.0, 0.25], [1.0, 0.5], None)
    got = samples_of(("junk\n" + rejected + "\n" + accepted + "\n").encode(), "t.log")
    first, second = got.steps
    assert (first.req, first.pos, first.acc, first.residual, first.line) == ("r0", 17, 1, 45, 2)
    assert first.q == (0.25, 0.5, 1.0) and first.p == (0.75, 0.0) and first.overlap == (0.8, 0.125)
    assert (second.acc, second.residual, second.tested, second.line) == (2, None, 2, 3)
    rows = got.rows()
    assert rows.index.tolist() == [0, 1, 0, 1]
    assert rows.accepted.tolist() == [1, 0, 1, 1]
    assert rows.overlap.tolist() == [0.8, 0.125, 1.0, 0.5]
    assert rows.ratio.tolist() == [1.0, 0.0, 1.0, 0.5]  # min(1, p/q): 0.75/0.25, 0/0.5, ...
    assert len(VerifiedRows.joined([rows, rows])) == 8 and len(VerifiedRows.joined([])) == 0


def test_the_main_parser_skips_the_line_as_other_output() -> None:
    text = ("[SPECTRACE] req=r0 pos=3 k=2 ns=1 acc=0 draft=[ 5 6 ] emit=[ 7 ]\n"
            + spec_sample("r0", 3, 0, [0.5, 0.5], [0.25], [0.5], 7) + "\n")
    for pure in (True, False):
        trace = parse_text(text, pure=pure)
        assert len(trace.verifies) == 1 and trace.lines_skipped == 1 and not trace.findings


def test_known_prefixes_are_stripped_as_for_every_tag() -> None:
    line = "0: " + spec_sample("r0", 3, 0, [0.5], [0.25], [0.5], 7)
    assert samples_of(line.encode()).steps[0].residual == 7


@pytest.mark.parametrize(("line", "message"), [
    ("[spec-sample] req=r0 pos=x acc=0 q=[ 0.5 ] p=[ 0.5 ] overlap=[ 1 ] residual=3",
     "[spec-sample] field pos: expected an integer, got 'x'"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 1.5 ] p=[ 0.5 ] overlap=[ 1 ] residual=3",
     "field q: item 2: expected a probability in [0, 1], got '1.5'"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ nan ] p=[ 0.5 ] overlap=[ 1 ] residual=3",
     "field q: item 1: expected a probability in [0, 1], got 'nan'"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 ] p=[ 0.5 ] residual=3",
     "expected field 'overlap', got 'residual'"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 ] p=[ 0.5 ] overlap=[ 1 ]",
     "missing field 'residual'"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 ] p=[ 0.5 ] overlap=[ 1 ] residual=3 x=1",
     "unexpected field 'x'"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 ] p=[ 0.5 ] overlap=[ 1 ] residual=-2",
     "field residual: expected at least 0"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 0.5 ] p=[ 0.5 ] overlap=[ 1 0.5 ] residual=3",
     "p has 1 values but overlap 2"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 ] p=[ 0.5 0.5 ] overlap=[ 1 0.5 ] residual=3",
     "p has 2 values for 1 drafts"),
    ("[spec-sample] req=r0 pos=1 acc=2 q=[ 0.5 0.5 0.5 ] p=[ 0.5 0.5 ] overlap=[ 1 0.5 ] "
     "residual=3", "acc=2 with 2 rows tested of 3"),
    ("[spec-sample] req=r0 pos=1 acc=1 q=[ 0.5 ] p=[ 0.5 ] overlap=[ 1 ] residual=3",
     "residual=3 with acc=1 of 1: a residual is drawn exactly when a draft was rejected"),
    ("[spec-sample] req=r0 pos=1 acc=0 q=[ 0.5 ] p=[ 0.5 ] overlap=[ 1 ] residual=-",
     "residual=- with acc=0 of 1"),
])
def test_a_malformed_line_names_file_line_and_field(line: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        samples_of(("[SPECTRACE] whatever\n" + line + "\n").encode(), "run/a.log")
    assert err.value.line == 2 and err.value.path == "run/a.log"
    assert message in str(err.value)
    assert str(err.value).startswith("run/a.log:2: ")


def test_a_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such trace file"):
        parse_samples(tmp_path / "none.log")
    (tmp_path / "t.log").write_text(spec_sample("r0", 1, 0, [0.5], [0.0], [0.5], 4) + "\n")
    assert len(parse_samples(tmp_path / "t.log")) == 1


def test_the_emitter_refuses_rows_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="p and overlap cover the tested rows"):
        spec_sample("r0", 1, 0, [0.5], [0.5, 0.5], [0.5, 0.5], 3)


SPEC = "[SPECTRACE] req=r0 pos=3 k=2 ns=3 acc=2 draft=[ 5 6 ] emit=[ 5 6 8 ]"


@pytest.mark.parametrize(("sample", "message"), [
    (spec_sample("r0", 3, 0, [0.5, 0.5], [0.25], [0.5], 9), "acc=0 but its [SPECTRACE] line"),
    (spec_sample("r1", 3, 2, [0.5, 0.5], [1.0, 0.25], [1.0, 0.5], None), "no [SPECTRACE] line"),
    (spec_sample("r0", 3, 1, [0.5], [1.0], [1.0], None), "1 drafts but its [SPECTRACE] line"),
])
def test_a_sample_line_that_contradicts_its_verify_is_an_error(sample: str, message: str) -> None:
    text = SPEC + "\n" + sample + "\n"
    with pytest.raises(TraceError, match=r"run/a\.log:2: .*" + re.escape(message)):
        checked(samples_of(text.encode(), "run/a.log"), parse_text(text))


def test_a_residual_other_than_the_emitted_token_is_an_error() -> None:
    text = ("[SPECTRACE] req=r0 pos=3 k=2 ns=2 acc=1 draft=[ 5 6 ] emit=[ 5 8 ]\n"
            + spec_sample("r0", 3, 1, [0.5, 0.5], [1.0, 0.25], [1.0, 0.5], 9) + "\n")
    with pytest.raises(TraceError, match=r"t\.log:2: .*residual=9"):
        checked(samples_of(text.encode(), "t.log"), parse_text(text))
    fine = text.replace("residual=9", "residual=8")
    assert len(checked(samples_of(fine.encode(), "t.log"), parse_text(fine))) == 1


def test_a_drafted_token_of_draft_probability_zero_is_an_error() -> None:
    with pytest.raises(TraceError, match=r"t\.log:1: .*q"):
        samples_of(spec_sample("r0", 3, 0, [0.0, 0.5], [0.25], [0.5], 7).encode(), "t.log")


def test_a_second_sample_line_for_one_verify_is_an_error() -> None:
    """One verify is one test: 30 neutral copies of a line must not outweigh it."""
    line = spec_sample("r0", 3, 2, [0.5, 0.5], [1.0, 0.25], [1.0, 0.5], None)
    text = SPEC + "\n" + line + "\n" + line + "\n"
    with pytest.raises(TraceError, match=r"t\.log:3: .*a second line for this verify \(first at "
                                         r"line 2\)"):
        checked(samples_of(text.encode(), "t.log"), parse_text(text))


def test_an_overlap_below_the_drafted_tokens_own_min_is_an_error() -> None:
    """sum(min(p, q)) over the vocabulary holds min(p(x), q(x)) of the drafted token x."""
    bad = spec_sample("r0", 3, 0, [0.715, 0.5], [0.715], [0.122], 7)
    with pytest.raises(TraceError, match=r"t\.log:1: .*overlap 0.122 is not within"):
        samples_of(bad.encode(), "t.log")
    assert len(samples_of(bad.replace("overlap=[ 0.122 ]", "overlap=[ 0.8 ]").encode(), "t.log"))
