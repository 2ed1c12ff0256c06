"""The bug corpus's classes in the transformers runner, for real: the runner's subprocesses
with tiny seeded models, each mutation through the config's `rerun` comparison: caught where
an input reaches its state, computing the correct run's output and uninformative where none
does (in either arm); the draft-length cycle and the window as asked; bad options one line,
exit 2. The tests both runners pass are corpus_helpers'; this runner's own are below."""

from __future__ import annotations

import pytest

from corpus_helpers import (  # noqa: F401 - collected here, for this runner
    bad_option, test_a_bad_corpus_option_is_one_line_and_exit_2,
    test_a_mutation_it_does_not_carry_is_one_line_and_exit_2,
    test_a_plain_run_prints_what_it_printed_before,
    test_a_window_no_query_passes_leaves_the_edge_bug_silent, test_broken_mask_is_caught,
    test_draft_lens_cycle_per_request, test_list_mutations_reads_the_records_it_carries,
    test_the_explicit_mask_control_agrees, test_the_width_bug_is_caught_as_a_state_bug,
    test_the_window_edge_bug_is_caught_past_the_edge, test_without_a_window_the_edge_bug_is_silent,
    test_without_width_3_the_width_bug_is_silent)


@pytest.fixture
def runner() -> str:
    return "hf"


@pytest.mark.parametrize("argv, message", [
    (("--sliding-window", "4", "--attn", "eager"), "use --attn sdpa"),
    (("--draft-lens", "1", "--drafter", "dflash"), "for greedy assisted drafting only"),
    (("--draft-lens", "1", "--temperature", "1"), "for greedy assisted drafting only"),
    (("--draft-lens", "1", "--schedule", "heuristic"), "drop --schedule"),
])
def test_the_corpus_state_needs_greedy_assisted_sdpa(argv: tuple[str, ...], message: str) -> None:
    bad_option("hf", argv, message)
