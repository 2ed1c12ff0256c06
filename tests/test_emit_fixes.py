"""Emitter fixes: bfloat16 logits from array libraries, a clear refusal of what cannot be read,
the drafting header kept when the first step is refused, and a verify that took every draft
with no bonus token."""

from __future__ import annotations

import io

import numpy as np
import pytest

from difftest.emit import Tracer
from difftest.trace import parse_text


def test_torch_bfloat16_logits_are_traced_exactly() -> None:
    torch = pytest.importorskip("torch")
    out = io.StringIO()
    logits = torch.tensor([[1.5, 4.46875, -2.0, 0.0078125]], dtype=torch.bfloat16)
    Tracer(level=3, file=out, top_k=2).step("r", 3, [1], [1, 9], logits)
    assert "1:4.46875 0:1.5" in out.getvalue()


def test_ml_dtypes_bfloat16_logits_are_read() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    out = io.StringIO()
    logits = np.array([[1.5, 4.46875, -2.0]], dtype=ml_dtypes.bfloat16)
    Tracer(level=3, file=out, top_k=2).step("r", 3, [1], [1, 9], logits)
    assert "1:4.46875 0:1.5" in out.getvalue()


@pytest.mark.parametrize("bad", [[["a", "b"]], {"rows": 1}, object()])
def test_unreadable_logits_are_refused_naming_what_was_given(bad: object) -> None:
    with pytest.raises(ValueError, match=r"logits: cannot read a builtins\.\w+ as float32"):
        Tracer(level=3, file=io.StringIO()).step("r", 3, [1], [1, 9], bad)


def test_the_header_is_written_even_when_the_first_step_is_refused() -> None:
    out = io.StringIO()
    t = Tracer(level=3, file=out, drafting="sequential")
    with pytest.raises(ValueError, match="1 rows for 2 drafted ids"):
        t.step("r", 3, [1, 2], [1, 9], np.zeros((1, 8), dtype=np.float32))
    t.step("r", 3, [1, 2], [1, 9], np.arange(16, dtype=np.float32).reshape(2, 8))
    lines = out.getvalue().splitlines()
    assert lines[0] == "[spec-drafting] kind=sequential"
    assert parse_text(out.getvalue(), path="t").drafting is not None


def test_a_verify_that_took_every_draft_without_a_bonus_token_parses_clean() -> None:
    out = io.StringIO()
    t = Tracer(level=1, file=out)
    t.step("r", 3, [4, 5, 6], [4, 5, 6], bonus=False)
    t.step("r", 6, [7, 8], [7, 2])
    assert "k=3 ns=3 acc=3" in out.getvalue()
    trace = parse_text(out.getvalue(), path="t")
    assert not trace.findings, trace.findings
    assert trace.verifies.acc.tolist() == [3, 1]


def test_no_bonus_with_a_rejected_draft_is_refused() -> None:
    with pytest.raises(ValueError, match="bonus=False"):
        Tracer(level=1, file=io.StringIO()).step("r", 3, [4, 5], [4, 9], bonus=False)


def test_a_cut_short_verify_without_bonus_false_names_the_fix() -> None:
    """A hook written before `bonus` existed closes mlx-lm's end-of-budget verify (every draft
    emitted, no target token) with the default bonus=True: the error says to pass
    bonus=False (before, it said the target's token equalled a draft)."""
    with pytest.raises(ValueError, match=r"step req=r pos=3: drafted \[4, 5\], emitted \[4, 5\]: "
                                         r"emitted is every drafted id .* is traced with "
                                         r"step\(\.\.\., bonus=False\)"):
        Tracer(level=1, file=io.StringIO()).step("r", 3, [4, 5], [4, 5])


def test_the_parser_still_flags_a_wrong_acc() -> None:
    text = "[SPECTRACE] req=r pos=3 k=3 ns=2 acc=2 draft=[ 4 5 6 ] emit=[ 4 5 ]\n"
    assert parse_text(text, path="t").findings
