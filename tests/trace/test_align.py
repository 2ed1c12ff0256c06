"""Alignment of two arms' steps on hand-written golden pairs: pairing by (request, pos), steps only
one arm visited, the context-divergence cut, and the ordinal fallback for propose-only traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.trace.align import (POS_BITS, Alignment, EmitDivergence, _emitted_in_both, _Stream,
                                  align)
from difftest.core.model import ArmTrace
from difftest.trace import parse_lines, parse_trace

DATA = Path(__file__).parents[1] / "data" / "compare"


def pair(a: str, b: str) -> tuple[ArmTrace, ArmTrace, Alignment]:
    ta, tb = parse_trace(DATA / a), parse_trace(DATA / b)
    assert not ta.findings and not tb.findings  # the golden files keep every invariant
    return ta, tb, align(ta, tb)


def steps(al: Alignment) -> list[tuple[str, int]]:
    return [(al.requests[int(r)], int(p)) for r, p in zip(al.req, al.pos, strict=False)]


def verify_steps(trace: ArmTrace, index: np.ndarray) -> list[tuple[str, int]]:
    v = trace.verifies
    return [(trace.requests[int(v.req[i])], int(v.pos[i])) for i in index]


def test_identical_arms_pair_every_step_in_trace_order() -> None:
    a, b, al = pair("agree_a.log", "agree_b.log")
    assert al.mode == "position"
    assert al.requests == ("a", "b")
    # the order in which arm A ran them, not sorted by request
    assert steps(al) == [("a", 5), ("b", 7), ("a", 8), ("b", 9), ("a", 9), ("b", 10), ("a", 13)]
    assert verify_steps(a, al.a_index) == steps(al)
    assert verify_steps(b, al.b_index) == steps(al)
    assert al.unmatched_a.size == al.unmatched_b.size == 0
    assert al.diverged_a.size == al.diverged_b.size == 0
    assert al.divergences == () and al.notes == ()


def test_acceptance_shift_leaves_the_b_only_position_unmatched() -> None:
    # B accepted 2 drafts at a@9 where A accepted 3, so B visits a@12 and both meet again at a@13.
    a, b, al = pair("agree_a.log", "shift_b.log")
    assert len(al) == 7
    assert al.unmatched_a.size == 0
    assert verify_steps(b, al.unmatched_b) == [("a", 12)]
    assert ("a", 13) in steps(al)
    # the emitted streams agree (lossless verify): nothing is cut
    assert al.divergences == () and al.diverged_a.size == 0


def test_emitted_divergence_cuts_later_steps_of_that_request_only() -> None:
    a, b, al = pair("agree_a.log", "diverge_b.log")
    assert al.divergences == (EmitDivergence(req="a", position=8, token_a=50, token_b=51),)
    # a@8 drafted from context [0, 8), which both arms shared: it is still compared
    assert steps(al) == [("a", 5), ("b", 7), ("a", 8), ("b", 9), ("b", 10)]
    assert verify_steps(a, al.diverged_a) == [("a", 9), ("a", 13)]
    assert verify_steps(b, al.diverged_b) == [("a", 9), ("a", 13)]
    assert al.unmatched_a.size == al.unmatched_b.size == 0


def test_divergence_inside_an_accepted_run_is_found_at_its_token() -> None:
    a = parse_lines([
        "[SPECTRACE] req=r pos=0 k=2 ns=3 acc=2 draft=[ 1 2 ] emit=[ 1 2 3 ]",
        "[SPECTRACE] req=r pos=3 k=2 ns=1 acc=0 draft=[ 4 4 ] emit=[ 9 ]",
    ])
    b = parse_lines([
        "[SPECTRACE] req=r pos=0 k=2 ns=2 acc=1 draft=[ 1 2 ] emit=[ 1 7 ]",
        "[SPECTRACE] req=r pos=2 k=2 ns=1 acc=0 draft=[ 5 5 ] emit=[ 8 ]",
        "[SPECTRACE] req=r pos=3 k=2 ns=1 acc=0 draft=[ 6 6 ] emit=[ 9 ]",
    ])
    al = align(a, b)
    assert al.divergences == (EmitDivergence("r", 1, 2, 7),)
    assert steps(al) == [("r", 0)]
    assert verify_steps(a, al.diverged_a) == [("r", 3)]
    assert verify_steps(b, al.unmatched_b) == [("r", 2)]


def test_a_request_only_one_arm_ran_is_unmatched_under_one_numbering() -> None:
    base = ["[SPECTRACE] req=x pos=4 k=2 ns=1 acc=0 draft=[ 1 2 ] emit=[ 3 ]"]
    a = parse_lines(base)
    b = parse_lines(["[SPECTRACE] req=y pos=4 k=2 ns=1 acc=0 draft=[ 1 2 ] emit=[ 3 ]"] + base)
    al = align(a, b)
    assert al.requests == ("x", "y")
    assert steps(al) == [("x", 4)]
    assert verify_steps(b, al.unmatched_b) == [("y", 4)]


def test_a_position_verified_twice_pairs_the_last_and_the_parser_says_why() -> None:
    a = parse_lines([
        "[SPECTRACE] req=r pos=4 k=2 ns=1 acc=0 draft=[ 1 2 ] emit=[ 3 ]",
        "[SPECTRACE] req=r pos=4 k=2 ns=1 acc=0 draft=[ 5 6 ] emit=[ 3 ]",
    ])
    b = parse_lines(["[SPECTRACE] req=r pos=4 k=2 ns=1 acc=0 draft=[ 5 6 ] emit=[ 3 ]"])
    al = align(a, b)
    assert al.a_index.tolist() == [1]
    # whether the repeat matters is the parser's finding (tests/trace/test_trace_integrity.py)
    assert al.notes == ()
    assert [f.kind.value for f in a.findings] == ["conflicting-repeat"]


def test_propose_only_traces_fall_back_to_ordinals_with_the_single_request_note() -> None:
    a, b, al = pair("propose_a.log", "propose_b.log")
    assert al.mode == "ordinal"
    assert len(al.notes) == 1 and "only sound for a single request" in al.notes[0]
    # the NO-proposing line (index 2) is not a step: ordinals pair proposing steps only
    assert al.a_index.tolist() == [0, 1, 3, 4]
    assert al.b_index.tolist() == [0, 1, 3, 4]
    assert al.pos.tolist() == [0, 1, 2, 3]
    assert al.unmatched_a.size == 0 and al.unmatched_b.tolist() == [5]


def test_one_arm_without_verify_lines_is_enough_for_the_fallback() -> None:
    _, _, al = pair("agree_a.log", "propose_b.log")
    assert al.mode == "ordinal" and len(al) == 4


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12)), max_size=25),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12)), max_size=25),
       st.booleans())
def test_positions_emitted_in_both_are_numpys_intersection(a: list[tuple[int, int]],
                                                           b: list[tuple[int, int]],
                                                           in_order: bool) -> None:
    """Streams whose keys, grouped by request, come in order are intersected by binary search
    (and sorted without a sort); any other stream by np.intersect1d: the same keys, the same
    indices, the same sorted keys."""
    def stream(pairs: list[tuple[int, int]]) -> _Stream:
        if in_order:  # each position once, each request's in order, requests interleaved
            pairs = sorted(set(pairs), key=lambda p: p[1])
        keys = np.array([(r << POS_BITS) | p for r, p in pairs], dtype=np.int64)
        return _Stream(keys, np.arange(keys.size))

    sa, sb = stream(a), stream(b)
    got = _emitted_in_both(sa, sb)
    want = np.intersect1d(sa.keys, sb.keys, return_indices=True)
    assert all(x.tolist() == y.tolist() for x, y in zip(got, want, strict=True))
    assert sa.sorted_keys().tolist() == np.sort(sa.keys).tolist()
    if in_order:
        assert sa.ordered is not None
