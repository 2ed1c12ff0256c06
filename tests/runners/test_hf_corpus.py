"""The bug corpus's classes in the transformers runner, for real: the runner's subprocesses
with tiny seeded models, each mutation through the config's `rerun` comparison: caught where
an input reaches its state, computing the correct run's output and uninformative where none
does; the draft-length cycle and the window as asked; bad options one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

import corpus_helpers as ch
from difftest.core.corpus import Runner, names_of
from difftest.core.kinds import VerdictKind

RUNNER = "hf"


def test_list_mutations_reads_the_records_it_carries() -> None:
    ch.check_lists_its_records(RUNNER, names_of(Runner.HF))


@pytest.mark.parametrize("argv, message", [
    *ch.BAD_OPTIONS,
    (("--sliding-window", "4", "--attn", "eager"), "use --attn sdpa"),
    (("--draft-lens", "1", "--drafter", "dflash"), "for greedy assisted drafting only"),
    (("--draft-lens", "1", "--schedule", "heuristic"), "drop --schedule"),
])
def test_a_bad_option_is_one_line_and_exit_2(argv: tuple[str, ...], message: str) -> None:
    ch.check_bad_option(RUNNER, argv, message)


def test_a_mutation_it_does_not_carry_is_one_line_and_exit_2() -> None:
    ch.check_bad_option(RUNNER, (), "DIFFTEST_MUTATION='causal-mask' is not a mutation",
                        mutation="causal-mask")


def test_a_plain_run_prints_what_it_printed_before(tmp_path: Path) -> None:
    ch.check_plain_run_prints_what_it_did(RUNNER, tmp_path)


def test_a_window_no_query_passes_leaves_the_edge_bug_silent(tmp_path: Path) -> None:
    # prompts of 8-9 ids and 12 new ones: no query is 64 positions past a key
    ch.check_unreached_is_correct_and_uninformative(
        RUNNER, tmp_path, "sliding-window-edge", ("--sliding-window", "64"), "window_edges")


def test_without_width_3_the_width_bug_is_silent(tmp_path: Path) -> None:
    ch.check_unreached_is_correct_and_uninformative(
        RUNNER, tmp_path, "verify-width-path", ("--k", "1"), "widths")


def test_the_window_edge_bug_is_caught_past_the_edge(tmp_path: Path) -> None:
    ch.check_window_edge_is_caught(RUNNER, tmp_path)


def test_the_width_bug_is_caught_as_a_state_bug(tmp_path: Path) -> None:
    ch.check_verify_width_is_caught(RUNNER, tmp_path)


def test_draft_lens_cycle_per_request(tmp_path: Path) -> None:
    ch.check_draft_lens_cycle(RUNNER, tmp_path)


def test_broken_mask_is_caught(tmp_path: Path) -> None:
    ch.check_broken_mask_is_caught(RUNNER, tmp_path)


def test_the_explicit_mask_control_agrees_under_the_attn_tolerance(tmp_path: Path) -> None:
    # sdpa with the causal mask as a tensor rounds otherwise than with its causal flag: the
    # same attention, judged as the attn comparison judges sdpa against eager
    good = ch.arm(RUNNER, tmp_path)
    control = ch.arm(RUNNER, tmp_path, mutation="control-explicit-mask")
    report = ch.judged(RUNNER, good, control, (None, "control-explicit-mask"), "attn")
    assert report.verdict.kind is VerdictKind.AGREE, report.verdict.reasons
