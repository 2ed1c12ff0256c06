"""The rules the shared corpus classes break, here once for the reference, transformers and mlx
runners: the window a mask reads, the verify width whose path is wrong, the draft-length cycle,
when a flipped causality can reach a sampled row, and the one --draft-lens parser."""

from __future__ import annotations

import pytest

from difftest.core.corpus import (Runner, StepCoverage, carried_by, cycled_len, flip_reaches,
                                  width_path_broken, window_read)
from difftest.core.errors import UsageError
from difftest.core.limits import MAX_WINDOW, check_window, parse_draft_lens


def test_each_runner_carries_its_records_and_the_shared_classes_are_one_record_each() -> None:
    hf = {m.name for m in carried_by(Runner.HF)}
    assert hf == {m.name for m in carried_by(Runner.MLX)}
    assert {"sliding-window-edge", "verify-width-path"} <= hf
    reference = {m.name for m in carried_by(Runner.REFERENCE)}
    assert hf & reference == {"sliding-window-edge", "verify-width-path"}
    assert "broken-mask" not in reference and "causal-mask" not in hf


def test_the_shared_rules() -> None:
    assert window_read("sliding-window-edge", 6) == 7 and window_read("none", 6) == 6
    assert [w for w in range(1, 7) if width_path_broken("verify-width-path", w)] == [3]
    assert not width_path_broken("none", 3)
    assert [cycled_len((1, 2, 3), 4, step, 1) for step in range(4)] == [2, 3, 1, 2]
    assert cycled_len((), 4, 7, 2) == 4


def test_a_flipped_causality_reaches_a_sampled_row_only_through_a_wide_enough_window() -> None:
    assert not flip_reaches(1, 0, 2, True)  # one query: nothing to flip
    assert flip_reaches(5, 0, 2, False)  # no window: every key is read
    # a prefill's rows are read by the next forward's first row, two past its last changed one
    assert not flip_reaches(5, 2, 2, False) and flip_reaches(5, 3, 2, False)
    assert flip_reaches(2, 2, 2, True) and not flip_reaches(2, 1, 2, True)
    cov = StepCoverage()
    cov.draft_forward("broken-mask", 2, 7, 7, layers=2, last_sampled=False)
    cov.draft_forward("sliding-window-edge", 2, 1, 3, layers=2, last_sampled=True)
    assert (cov.fired, cov.window_edges) == (1, 2)  # the broken mask reached no sampled row


@pytest.mark.parametrize("text", [",,,", "1,,2", "1,x", "-1", "１"])
def test_draft_lens_is_integers_or_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="expected comma-separated integers"):
        parse_draft_lens(text)


def test_draft_lens_and_window_bounds() -> None:
    assert parse_draft_lens("") == () and parse_draft_lens(" 1, 2 ") == (1, 2)
    assert check_window(MAX_WINDOW) == MAX_WINDOW
    for bad in (0, MAX_WINDOW + 1, True, 2.0):
        with pytest.raises(UsageError, match="must be an integer in 1.."):
            check_window(bad)
