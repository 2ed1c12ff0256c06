"""The bug corpus's classes in the mlx runner, for real (mlx's CPU backend): the runner's
subprocesses with tiny seeded models, each mutation through the config's `rerun` comparison:
caught where an input reaches its state, computing the correct run's output and uninformative
where none does (in either arm); the draft-length cycle (one mlx-lm call per verify) and the
window as asked; bad options one line, exit 2. The tests both runners pass are corpus_helpers'."""

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
    return "mlx"


def test_a_mask_fault_takes_no_window() -> None:
    bad_option("mlx", ("--sliding-window", "4", "--fault", "model.layers.0.self_attn:mask"),
               "a mask fault needs no --mutation and no --sliding-window")
