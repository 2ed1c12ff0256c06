"""Naming a difference's kind from where each instrument first parted: drafts, the committed
stream, acceptance."""

from __future__ import annotations

from difftest.analysis.bugclass import acceptance_moved, classify, verify_finding
from difftest.core.corpus import BugKind
from difftest.trace import parse_text
from conftest import verify_line


# a second request that runs four steps in both arms: the run's length
OTHER = "".join(verify_line("r1", p, [7, 7], [7]) + "\n" for p in (4, 5, 6, 7))


def trace(*steps: tuple[int, list[int], list[int]]) -> object:
    return parse_text("".join(verify_line("r0", pos, d, e) + "\n" for pos, d, e in steps)
                      + OTHER, "t")


BASE = [(10, [1, 2, 3], [1, 2, 9]), (13, [4, 5, 6], [4, 7]), (15, [5, 8, 8], [5, 6])]


def test_identical_traces_name_nothing() -> None:
    found = classify(trace(*BASE), trace(*BASE))
    assert found.kind is None and found.drafts is found.committed is found.acceptance is None


def test_other_drafts_over_an_equal_stream_is_a_drafter_bug() -> None:
    # at 13 B drafts otherwise and accepts less; the stream goes on with the same tokens
    b = [BASE[0], (13, [4, 6, 6], [4, 7]), BASE[2]]
    found = classify(trace(*BASE), trace(*b))
    assert found.kind is BugKind.DRAFTER
    assert found.drafts is not None and found.drafts.where == "r0 pos 13"
    assert found.committed is None


def test_a_different_committed_token_is_a_state_bug_whatever_else_moved() -> None:
    b = [BASE[0], (13, [4, 6, 6], [4, 6]), BASE[2]]
    found = classify(trace(*BASE), trace(*b))
    assert found.kind is BugKind.STATE
    assert found.committed is not None and found.committed.where == "r0 pos 14"
    assert (found.committed.a, found.committed.b) == ("7", "6")


def test_acceptance_moving_under_identical_drafts_is_the_acceptance_path() -> None:
    # B verifies the same block at 10 and accepts one token less, then goes on from 12
    b = [(10, [1, 2, 3], [1, 2]), (12, [9, 4, 5], [9, 4, 7]), BASE[2]]
    found = classify(trace(*BASE), trace(*b))
    assert found.kind is BugKind.ACCEPTANCE
    assert found.acceptance is not None and found.acceptance.where == "r0 pos 10"
    assert (found.acceptance.a, found.acceptance.b) == ("ns=3", "ns=2")


def test_a_stream_that_ends_a_token_short_is_a_state_bug() -> None:
    # the last step: same drafts, B drops its final token and its request stops
    b = [*BASE[:2], (15, [5, 8, 8], [5])]
    found = classify(trace(*BASE), trace(*b))
    assert found.kind is BugKind.STATE
    assert found.committed is not None and found.committed.where == "r0 pos 16"
    assert (found.committed.a, found.committed.b) == ("6", "ended")


def test_the_same_last_step_a_token_short_in_a_full_length_run_is_acceptance() -> None:
    # every request ran the run's length: a shorter final emit is acceptance, not an early end
    a = parse_text("".join(verify_line("r0", p, [1, 1], [1, 1, 2]) + "\n" for p in (0, 3)), "a")
    b = parse_text(verify_line("r0", 0, [1, 1], [1, 1, 2]) + "\n"
                   + verify_line("r0", 3, [1, 1], [1, 1]) + "\n", "b")
    assert classify(a, b).kind is BugKind.ACCEPTANCE


def test_identical_blocks_verified_differently_are_a_difference() -> None:
    b = [(10, [1, 2, 3], [1, 2]), (12, [9, 4, 5], [9, 4, 7]), BASE[2]]
    moved = acceptance_moved(trace(*BASE), trace(*b))
    assert moved is not None and moved.where == "r0 pos 10"
    found = verify_finding(trace(*BASE), trace(*b), ("a", "b"))
    assert found is not None and found.kind.value == "differ"
    assert "at r0 pos 10 both arms drafted the same tokens" in found.reasons[0]
    # other drafts, or a committed stream that parted first: not this instrument's to call
    drafter = [BASE[0], (13, [4, 6, 6], [4, 7]), BASE[2]]
    assert acceptance_moved(trace(*BASE), trace(*drafter)) is None
    assert verify_finding(trace(*BASE), trace(*BASE), ("a", "b")) is None


def test_sampled_decoding_is_left_alone() -> None:
    b = [(10, [1, 2, 3], [1, 2]), (12, [9, 4, 5], [9, 4, 7]), BASE[2]]
    sampled = parse_text("[spec-config] temperature=0.8\n"
                         + "".join(verify_line("r0", p, d, e) + "\n" for p, d, e in b), "s")
    assert verify_finding(trace(*BASE), sampled, ("a", "b")) is None
