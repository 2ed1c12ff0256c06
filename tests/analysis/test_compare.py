"""Row-level comparison on golden pairs: token flips, near-ties against hard flips, logit
differences under atol (and bitwise at atol = 0), and the rows of steps that were not compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from difftest.trace.align import EmitDivergence
from difftest.analysis.compare import STATUS_NAMES, Comparison, FirstDifference, compare
from difftest.core.model import ArmTrace
from difftest.trace import parse_text, parse_trace

DATA = Path(__file__).parents[1] / "data" / "compare"


def traces(a: str, b: str) -> tuple[ArmTrace, ArmTrace]:
    return parse_trace(DATA / a), parse_trace(DATA / b)


def edited(name: str, old: str, new: str) -> ArmTrace:
    """A golden trace with one line edited in memory (for one-off variants)."""
    text = (DATA / name).read_text()
    assert text.count(old) == 1, old
    return parse_text(text.replace(old, new), path=f"{name}(edited)")


def table(c: Comparison) -> dict[tuple[str, int, int], dict[str, object]]:
    """(req, pos, row) -> the row's cells, None where unknown."""
    r = c.rows
    out: dict[tuple[str, int, int], dict[str, object]] = {}
    for i in range(len(r)):
        key = (c.requests[int(r.req[i])], int(r.pos[i]), int(r.row[i]))
        assert key not in out, f"row {key} twice"
        out[key] = {
            "status": STATUS_NAMES[int(r.status[i])],
            "a": int(r.token_a[i]) if r.has_a[i] else None,
            "b": int(r.token_b[i]) if r.has_b[i] else None,
            "margin_a": None if np.isnan(r.margin_a[i]) else float(r.margin_a[i]),
            "margin_b": None if np.isnan(r.margin_b[i]) else float(r.margin_b[i]),
            "diff": None if np.isnan(r.abs_logit_diff[i]) else float(r.abs_logit_diff[i]),
            "logit_differs": bool(r.logit_differs[i]),
        }
    return out


def statuses(c: Comparison) -> dict[str, int]:
    names, counts = np.unique(np.array(STATUS_NAMES)[c.rows.status], return_counts=True)
    return dict(zip(names.tolist(), counts.tolist(), strict=False))


def test_identical_arms_compare_every_row_the_same_bit_for_bit() -> None:
    c = compare(*traces("agree_a.log", "agree_b.log"))
    assert (c.mode, c.blocks_compared, len(c.rows)) == ("position", 7, 21)
    assert statuses(c) == {"same": 21}
    assert c.blocks_differing == c.blocks_near_tie == c.blocks_logit_differing == 0
    assert c.logit_rows_compared == 21 and c.max_abs_logit_diff == 0.0
    assert c.first_difference is None and c.first_logit_difference is None
    row = table(c)[("b", 7, 2)]
    assert row["a"] == row["b"] == 70000 and row["margin_a"] == pytest.approx(3.5)


def test_hard_flips_are_counted_per_block_and_the_first_one_is_named() -> None:
    c = compare(*traces("agree_a.log", "differ_b.log"))
    assert c.blocks_differing == 2 and c.blocks_near_tie == 0
    assert statuses(c) == {"same": 19, "differ": 2}
    # first in the order the arms ran (b@7 ran before a@8), not in sorted order
    assert c.first_difference == FirstDifference(req="b", pos=7, row=3, token_a=5, token_b=77,
                                                 margin_a=2.25, margin_b=3.0)
    rows = table(c)
    assert rows[("a", 8, 2)]["status"] == "differ"
    assert (rows[("a", 8, 2)]["a"], rows[("a", 8, 2)]["b"]) == (42, 99)
    assert rows[("a", 8, 1)]["status"] == rows[("a", 8, 3)]["status"] == "same"


def test_acceptance_shift_is_unmatched_not_a_difference() -> None:
    a, b = traces("agree_a.log", "shift_b.log")
    c = compare(a, b, near_tie=0.05, atol=0.02)
    assert (c.unmatched_a, c.unmatched_b) == (0, 1)
    assert c.blocks_compared == 7
    assert c.blocks_differing == 0 and c.blocks_near_tie == 1 and c.blocks_logit_differing == 0
    rows = table(c)
    assert rows[("a", 9, 3)]["status"] == "near-tie"
    for r in (1, 2, 3):
        cell = rows[("a", 12, r)]
        assert cell["status"] == "unmatched-b" and cell["a"] is None
        assert cell["margin_a"] is None and cell["diff"] is None
    assert [rows[("a", 12, r)]["b"] for r in (1, 2, 3)] == [54, 55, 56]
    assert statuses(c) == {"same": 20, "near-tie": 1, "unmatched-b": 3}


def test_acceptance_shift_without_tolerance_counts_only_the_flip_that_caused_it() -> None:
    c = compare(*traces("agree_a.log", "shift_b.log"))
    assert c.blocks_differing == 1 and c.unmatched_b == 1
    assert c.first_difference is not None
    assert (c.first_difference.req, c.first_difference.pos, c.first_difference.row) == \
        ("a", 9, 3)


def test_context_diverged_steps_are_listed_but_not_compared() -> None:
    c = compare(*traces("agree_a.log", "diverge_b.log"))
    assert c.blocks_compared == 5 and c.context_diverged == 2
    # their drafts differ in every row, and none of that counts
    assert c.blocks_differing == 0 and c.first_difference is None
    assert c.divergences == (EmitDivergence(req="a", position=8, token_a=50, token_b=51),)
    rows = table(c)
    assert [(rows[("a", 9, r)]["a"], rows[("a", 9, r)]["b"]) for r in (1, 2, 3)] == \
        [(51, 81), (52, 82), (53, 83)]
    assert {rows[("a", p, r)]["status"] for p in (9, 13) for r in (1, 2, 3)} == \
        {"context-diverged"}
    assert rows[("a", 8, 1)]["status"] == "same"
    assert statuses(c) == {"same": 15, "context-diverged": 6}


@pytest.mark.parametrize("near_tie, tie_a8, tie_b9, differing, near", [
    (0.05, "near-tie", "differ", 1, 1),  # b@9: A's margin 0.03 is small, B's 0.53 is not
    (0.6, "near-tie", "near-tie", 0, 2),
    (0.0, "differ", "differ", 2, 0),
])
def test_a_flip_is_a_near_tie_only_when_both_margins_are_below_the_threshold(
        near_tie: float, tie_a8: str, tie_b9: str, differing: int, near: int) -> None:
    c = compare(*traces("agree_a.log", "ties_b.log"), near_tie=near_tie, atol=0.6)
    rows = table(c)
    assert rows[("a", 8, 3)]["status"] == tie_a8
    assert rows[("b", 9, 2)]["status"] == tie_b9
    assert (c.blocks_differing, c.blocks_near_tie) == (differing, near)


def test_margins_of_a_flip_are_reported_from_each_arms_logits() -> None:
    c = compare(*traces("agree_a.log", "ties_b.log"), near_tie=0.05, atol=0.6)
    cell = table(c)[("b", 9, 2)]
    assert cell["margin_a"] == pytest.approx(0.03) and cell["margin_b"] == pytest.approx(0.53)
    assert c.first_difference is not None and c.first_difference.row == 2
    assert c.first_difference.margin_b == pytest.approx(0.53)


def test_a_near_tie_still_moves_the_logits_and_atol_zero_sees_it() -> None:
    c = compare(*traces("agree_a.log", "shift_b.log"), near_tie=0.05, atol=0.0)
    assert c.blocks_near_tie == 1 and c.blocks_logit_differing == 1
    assert table(c)[("a", 9, 3)]["diff"] == pytest.approx(0.015)


def test_logit_only_difference_fails_bitwise_and_passes_within_atol() -> None:
    a, b = traces("agree_a.log", "logitonly_b.log")
    exact = compare(a, b)
    assert exact.blocks_differing == 0 and statuses(exact) == {"same": 21}
    assert exact.blocks_logit_differing == 1
    assert exact.first_logit_difference is not None
    assert {k: getattr(exact.first_logit_difference, k) for k in ("req", "pos", "row")} == \
        {"req": "a", "pos": 5, "row": 2}
    assert exact.first_logit_difference.abs_logit_diff == pytest.approx(1e-3)
    assert exact.max_abs_logit_diff == pytest.approx(1e-3)
    loose = compare(a, b, atol=0.01)
    assert loose.blocks_logit_differing == 0 and loose.first_logit_difference is None
    assert loose.max_abs_logit_diff == pytest.approx(1e-3)  # still measured, just tolerated


def test_a_changed_top_list_counts_only_when_bitwise() -> None:
    # B lists another 4th id with the same value: nothing shared moved, but the list changed
    a = parse_trace(DATA / "agree_a.log")
    b = edited("agree_b.log", "147:5.5 148:5 ]", "147:5.5 149:5 ]")
    exact = table(compare(a, b))[("b", 10, 3)]
    assert exact["logit_differs"] is True and exact["diff"] == 0.0
    loose = table(compare(a, b, atol=1e-9))[("b", 10, 3)]
    assert loose["logit_differs"] is False


def test_a_logit_row_traced_by_one_arm_only_is_a_logit_difference() -> None:
    a = parse_trace(DATA / "agree_a.log")
    b = edited("agree_b.log", "[spec-logits] req=b pos=10 row=2 top=[ 21:8.25 143:8 144:7 145:6 ]\n",
               "")
    c = compare(a, b, atol=1.0)
    assert c.logit_rows_compared == 20
    cell = table(c)[("b", 10, 2)]
    assert cell["logit_differs"] is True and cell["margin_b"] is None and cell["status"] == "same"
    assert c.blocks_logit_differing == 1


def test_nan_matches_nan_but_not_a_number() -> None:
    line = "[spec-logits] req=a pos=13 row=3 top=[ 62:5 156:4 157:3 158:2 ]"
    nan_a = edited("agree_a.log", line, line.replace("158:2", "158:nan"))
    nan_b = edited("agree_b.log", line, line.replace("158:2", "158:nan"))
    both = table(compare(nan_a, nan_b))[("a", 13, 3)]
    assert both["diff"] == 0.0 and both["logit_differs"] is False
    one = compare(nan_a, parse_trace(DATA / "agree_b.log"), atol=100.0)
    assert table(one)[("a", 13, 3)]["logit_differs"] is True
    # nan against a number counts as a difference, but never as an infinite one in the figures
    assert one.blocks_logit_differing == 1 and one.max_abs_logit_diff == 0.0


def test_level1_traces_compare_tokens_with_every_logit_cell_unknown() -> None:
    c = compare(*traces("degenerate_a.log", "degenerate_b.log"), near_tie=1.0)
    assert c.blocks_compared == 6 and c.logit_rows_compared == 0
    assert statuses(c) == {"same": 18}
    assert np.isnan(c.rows.margin_a).all() and np.isnan(c.rows.abs_logit_diff).all()
    assert c.max_abs_logit_diff is None


def test_ordinal_rows_carry_the_ordinal_of_the_proposing_step() -> None:
    c = compare(*traces("propose_a.log", "propose_b.log"))
    assert c.mode == "ordinal" and c.blocks_compared == 4
    assert c.first_difference == FirstDifference(req="", pos=2, row=2, token_a=30, token_b=31,
                                                 margin_a=None, margin_b=None)
    rows = table(c)
    # B's fifth proposing step has ordinal 4 (the NO-proposing line in between is no step)
    assert [rows[("", 4, r)]["b"] for r in (1, 2, 3)] == [12, 6, 33]
    assert {rows[("", 4, r)]["status"] for r in (1, 2, 3)} == {"unmatched-b"}
    assert sorted({p for (_, p, _) in rows}) == [0, 1, 2, 3, 4]
    assert any("single request" in n for n in c.notes)


def test_logit_rows_of_thousands_of_requests_are_keyed_apart() -> None:
    """Request codes and rows must not alias in the (request, pos, row) key."""
    def trace(bump: str | None) -> ArmTrace:
        lines = []
        for i in range(4097):
            top = 9.5 + (1.0 if f"r{i}" == bump else 0.0)
            lines.append(f"[spec-logits] req=r{i} pos=3 row=1 top=[ 7:{top} 8:1.5 ]")
            lines.append(f"[SPECTRACE] req=r{i} pos=3 k=1 ns=1 acc=0 draft=[ 7 ] emit=[ 2 ]")
        return parse_text("\n".join(lines) + "\n")

    base = trace(None)
    for bump in ("r0", "r4095", "r4096"):
        c = compare(base, trace(bump))
        assert c.blocks_logit_differing == 1, bump
        assert c.first_logit_difference.req == bump


def test_equal_infinite_logits_are_equal() -> None:
    text = ("[spec-logits] req=r pos=1 row=1 top=[ 5:inf 6:-inf 7:nan ]\n"
            "[SPECTRACE] req=r pos=1 k=1 ns=1 acc=0 draft=[ 5 ] emit=[ 2 ]\n")
    c = compare(parse_text(text), parse_text(text))
    # no finite value to measure a difference on: no size (as logit_stats.max_abs)
    assert c.blocks_logit_differing == 0 and c.max_abs_logit_diff is None
    moved = compare(parse_text(text), parse_text(text.replace("6:-inf", "6:inf")))
    assert moved.blocks_logit_differing == 1


def test_extreme_positions_and_rows_are_keyed_by_rank() -> None:
    """pos near 2**40 and row near 2**31 in one trace overflow value keys: ranks still pair."""
    def trace(top: float) -> ArmTrace:
        return parse_text(
            "[spec-logits] req=a pos=1 row=1 top=[ 4:2 5:1 ]\n"
            "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 6 ]\n"
            f"[spec-logits] req=a pos=1099511627775 row=2147483647 top=[ 4:{top} 5:1 ]\n")
    assert compare(trace(2.0), trace(2.0)).blocks_logit_differing == 0
    c = compare(trace(2.0), trace(3.0))
    assert c.blocks_compared == 1 and c.blocks_logit_differing == 0  # that row is not in a block
    moved = compare(trace(2.0), parse_text(
        "[spec-logits] req=a pos=1 row=1 top=[ 4:2.5 5:1 ]\n"
        "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 6 ]\n"
        "[spec-logits] req=a pos=1099511627775 row=2147483647 top=[ 4:2 5:1 ]\n"))
    assert moved.blocks_logit_differing == 1


def test_rank_keys_keep_requests_apart_when_value_keys_would_wrap() -> None:
    def trace(top_b: float) -> ArmTrace:
        return parse_text(
            "[spec-logits] req=a pos=1 row=1 top=[ 4:2 5:1 ]\n"
            "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 6 ]\n"
            f"[spec-logits] req=b pos=1 row=1 top=[ 4:{top_b} 5:1 ]\n"
            "[SPECTRACE] req=b pos=1 k=1 ns=1 acc=0 draft=[ 4 ] emit=[ 6 ]\n"
            "[spec-logits] req=a pos=1099511627775 row=2147483647 top=[ 4:2 5:1 ]\n")
    c = compare(trace(2.0), trace(2.5))
    assert c.blocks_logit_differing == 1 and c.first_logit_difference.req == "b"
