"""Drafting kinds, variable draft length and steps that draft nothing, judged end to end.

Each pair of traces is written by `difftest.emit.Tracer` (the way an engine would print them)
and judged by `difftest compare --trace-a --trace-b`, so the CSV and JSON contracts are what
the assertions read.
"""

from __future__ import annotations

import csv
import io
import re
import json
from pathlib import Path
from collections.abc import Iterator

import numpy as np
import pytest
from typer.testing import CliRunner

from difftest.cli import app
from difftest.emit import Tracer
from difftest.core.kinds import DraftingKind

runner = CliRunner()
VOCAB = 64


def row_logits(top: int, margin: float, rng: np.random.Generator, second: int | None = None
               ) -> np.ndarray:
    """A logit row whose argmax is `top`, `margin` above the runner-up (`second` if given)."""
    row = rng.uniform(0.0, 1.0, VOCAB).astype(np.float32)
    if second is None:
        second = int(np.argsort(row)[-1]) if int(np.argsort(row)[-1]) != top else int(
            np.argsort(row)[-2])
    row[second] = 3.0
    row[top] = np.float32(3.0 + margin)
    return row


class Arm:
    """Writes one arm's trace: shared varied steps plus what a test puts in between."""

    def __init__(self, path: Path, drafting: str | None = None) -> None:
        self.path = path
        self.buf = io.StringIO()
        self.tracer = Tracer(level=3, file=self.buf, top_k=4, drafting=drafting)

    def step(self, req: str, pos: int, drafted: list[int], emitted: list[int],
             logits: np.ndarray | None) -> None:
        self.tracer.step(req, pos, drafted, emitted, logits=logits)

    def close(self) -> Path:
        self.path.write_text(self.buf.getvalue())
        return self.path


def shared_steps(seed: int = 0) -> Iterator[tuple[int, list[int], list[int], np.ndarray]]:
    """Eight varied blocks (k=3, clear margins) both arms draft identically, from pos 10."""
    rng = np.random.default_rng(seed)
    pos = 10
    for _ in range(8):
        drafted = [int(t) for t in rng.choice(VOCAB - 1, 3, replace=False)]
        logits = np.stack([row_logits(t, 0.5, rng) for t in drafted])
        emitted = drafted[:1] + [int(rng.integers(VOCAB))]
        yield pos, drafted, emitted, logits
        pos += len(emitted)


Special = tuple[list[int], list[int], list[int], np.ndarray | None, np.ndarray | None]


def pair(tmp_path: Path, special: list[Special], drafting: str | None = None
         ) -> tuple[Path, Path]:
    """Shared steps, then per special step (draft_a, draft_b, emitted, logits_a, logits_b)."""
    a, b = Arm(tmp_path / "a.log", drafting), Arm(tmp_path / "b.log", drafting)
    pos = 10
    for pos, drafted, emitted, logits in shared_steps():
        a.step("r0", pos, drafted, emitted, logits)
        b.step("r0", pos, drafted, emitted, logits)
    pos += len(emitted)
    for draft_a, draft_b, emitted, la, lb in special:
        a.step("r0", pos, draft_a, emitted, la)
        b.step("r0", pos, draft_b, emitted, lb)
        pos += len(emitted)
    return a.close(), b.close()


def judge(a: Path, b: Path, tmp_path: Path, *flags: str) -> tuple[int, dict, list[dict[str, str]], str]:  # type: ignore[type-arg]
    csv_path = tmp_path / "diff.csv"
    r = runner.invoke(app, ["compare", "--trace-a", str(a), "--trace-b", str(b), "--format",
                            "json", "--csv", str(csv_path), *flags])
    report = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text()))) if csv_path.exists() else []
    text = runner.invoke(app, ["compare", "--trace-a", str(a), "--trace-b", str(b),
                               *flags]).output
    return r.exit_code, report, rows, text


def flip_block(near: bool) -> tuple[list[int], list[int], list[int], np.ndarray, np.ndarray]:
    """Row 1 agrees; row 2 flips (a near-tie when `near`, margins 0.01, else 0.8); row 3, drafted
    after the flip, has nothing in common. Both arms emit the same (lossless verify)."""
    rng = np.random.default_rng(7)
    margin = 0.01 if near else 0.8
    la = np.stack([row_logits(40, 0.5, rng), row_logits(41, margin, rng, second=42),
                   row_logits(50, 0.5, rng, second=51)])
    lb = la.copy()
    lb[1] = la[1].copy()
    lb[1][41], lb[1][42] = la[1][42], la[1][41]  # the two leaders swap places
    lb[2] = row_logits(55, 0.5, rng, second=56)
    lb[2][50] = lb[2][51] = 0.0  # B's row 3 shares no top entry with A's
    la[2][55] = la[2][56] = 0.0
    return [40, 41, 50], [40, 42, 55], [40, 7], la, lb


def statuses(rows: list[dict[str, str]], pos: int) -> list[str]:
    return [r["status"] for r in rows if int(r["pos"]) == pos]


LAST = 10 + 8 * 2  # the pos of the first special step


# -- sequential drafting ------------------------------------------------------------------------

def test_sequential_first_flip_a_near_tie_agrees_and_later_rows_are_context_diverged(
        tmp_path: Path) -> None:
    a, b = pair(tmp_path, [flip_block(near=True)])
    code, report, rows, text = judge(a, b, tmp_path, "--drafting", "sequential",
                                     "--near-tie", "0.05", "--atol", "0.05")
    assert code == 0, text
    assert report["verdict"] == "agree"
    assert report["drafting"] == "sequential"
    assert statuses(rows, LAST) == ["same", "near-tie", "context-diverged"]
    assert report["blocks_differing"] == 0
    assert report["blocks_near_tie"] == 1


def test_sequential_first_flip_hard_differs(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [flip_block(near=False)])
    code, report, rows, text = judge(a, b, tmp_path, "--drafting", "sequential",
                                     "--near-tie", "0.05", "--atol", "0.05")
    assert code == 1, text
    assert report["verdict"] == "differ"
    assert statuses(rows, LAST) == ["same", "differ", "context-diverged"]
    assert report["first_difference"]["row"] == 2


def test_block_drafting_compares_every_row_as_before(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [flip_block(near=True)])
    code, report, rows, text = judge(a, b, tmp_path, "--near-tie", "0.05", "--atol", "0.05")
    assert code == 1, text
    assert report["drafting"] == "block"
    assert statuses(rows, LAST) == ["same", "near-tie", "differ"]


def test_the_trace_header_decides_when_no_flag_or_config_does(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [flip_block(near=True)], drafting="sequential")
    code, report, rows, _ = judge(a, b, tmp_path, "--near-tie", "0.05", "--atol", "0.05")
    assert (code, report["drafting"]) == (0, "sequential")
    code, report, rows, _ = judge(a, b, tmp_path, "--near-tie", "0.05", "--atol", "0.05",
                                  "--drafting", "block")
    assert (code, report["drafting"]) == (1, "block")
    assert statuses(rows, LAST)[-1] == "differ"


def test_drafting_from_a_config_comparison(tmp_path: Path) -> None:
    from difftest import api
    from difftest.core.errors import ConfigError

    a, b = pair(tmp_path, [flip_block(near=True)])
    config = tmp_path / "c.toml"
    config.write_text('[arms.x]\ncommand = ["true"]\n[arms.y]\ncommand = ["true"]\n'
                      '[comparisons.seq]\narm_a = "x"\narm_b = "y"\ndrafting = "sequential"\n'
                      'near_tie = 0.05\natol = 0.05\n')
    report = api.compare_traces(a, b, comparison="seq", config=config)
    assert report.verdict.kind == "agree"
    assert report.comparison is not None
    assert (report.comparison.drafting, report.comparison.drafting_source) == (
        DraftingKind.SEQUENTIAL, "comparison")
    # the flag overrides the config, and says so
    report = api.compare_traces(a, b, comparison="seq", config=config, drafting="block")
    assert report.verdict.kind == "differ"
    assert report.comparison is not None
    assert (report.comparison.drafting, report.comparison.drafting_source) == (
        DraftingKind.BLOCK, "flag")
    config.write_text(config.read_text().replace('"sequential"', '"tree"'))
    with pytest.raises(ConfigError, match=r"c.toml.*comparisons.seq.*drafting"):
        api.compare_traces(a, b, comparison="seq", config=config)


def test_where_the_drafting_kind_came_from_is_reported(tmp_path: Path) -> None:
    """--drafting reads "flag", a header "traces", nothing "default"; the verdict says which."""
    a, b = pair(tmp_path, [flip_block(near=True)], drafting="sequential")
    for flags, kind, source in ((("--drafting", "sequential"), "sequential", "flag"),
                                ((), "sequential", "traces")):
        _, report, _, text = judge(a, b, tmp_path, "--near-tie", "0.05", "--atol", "0.05", *flags)
        assert (report["drafting"], report["drafting_from"]) == (kind, source), text
        assert f"{kind} drafting (from the {source})" in text
    a, b = pair(tmp_path, [flip_block(near=True)])
    _, report, _, _ = judge(a, b, tmp_path, "--near-tie", "0.05", "--atol", "0.05")
    assert (report["drafting"], report["drafting_from"]) == ("block", "default")


def test_traces_that_disagree_on_their_kind_are_bad_input(tmp_path: Path) -> None:
    a, _ = pair(tmp_path, [], drafting="block")
    b = Arm(tmp_path / "b2.log", "sequential")
    for pos, drafted, emitted, logits in shared_steps():
        b.step("r0", pos, drafted, emitted, logits)
    r = runner.invoke(app, ["compare", "--trace-a", str(a), "--trace-b", str(b.close())])
    assert r.exit_code == 2
    assert "disagree" in r.output and "--drafting" in r.output


# -- variable k ---------------------------------------------------------------------------------

def test_a_row_only_one_arm_drafted_is_a_draft_length_difference(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    la = np.stack([row_logits(t, 0.5, rng) for t in (11, 12, 13)])
    a, b = pair(tmp_path, [([11, 12, 13], [11, 12], [11, 12, 5], la, la[:2])])
    code, report, rows, text = judge(a, b, tmp_path)
    assert code == 1, text
    assert report["verdict"] == "differ"
    assert report["blocks_differing"] == 0  # no token flipped
    assert report["draft_length_differences"] == {"blocks": 1, "of_blocks": 9, "rows_a": 1,
                                                  "rows_b": 0}
    assert any("draft length" in reason for reason in report["reasons"])
    assert statuses(rows, LAST) == ["same", "same", "unmatched-a"]
    row3 = [r for r in rows if int(r["pos"]) == LAST][2]
    assert (row3["token_a"], row3["token_b"]) == ("13", "")
    assert re.search(r"(?<![\w.-])-1(?![\w.])", text) is None  # no placeholder token


def test_draft_length_difference_under_sequential_drafting_after_a_flip_is_diverged(
        tmp_path: Path) -> None:
    block = flip_block(near=True)
    a, b = pair(tmp_path, [(block[0], block[1][:2], block[2], block[3], block[4][:2])])
    code, report, rows, text = judge(a, b, tmp_path, "--drafting", "sequential",
                                     "--near-tie", "0.05", "--atol", "0.05")
    assert statuses(rows, LAST) == ["same", "near-tie", "context-diverged"]
    assert code == 0, text


# -- k = 0 --------------------------------------------------------------------------------------

def second_capture(path: Path) -> Path:
    """The trace with a line of other program output added: a capture of its own, not a copy of
    the other arm's (a byte-identical copy is refused as one capture compared with itself)."""
    with path.open("a") as fh:
        fh.write("[spec-config] build=second\n")
    return path


def test_steps_that_draft_nothing_carry_the_stream_but_are_not_blocks(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [([], [], [9], None, None), ([], [], [10], None, None)])
    b = second_capture(b)
    code, report, rows, text = judge(a, b, tmp_path)
    assert code == 0, text
    assert report["blocks_compared"] == 8
    assert report["unmatched"] == {"a": 0, "b": 0}
    assert report.get("coverage_gaps", []) == []
    assert statuses(rows, LAST) == []
    arm = report["arms"][0]
    assert arm["blocks"] == 8


@pytest.mark.parametrize("drafting", ["block", "sequential"])
def test_identical_arms_agree_under_either_kind(tmp_path: Path, drafting: str) -> None:
    a, b = pair(tmp_path, [([], [], [9], None, None)])
    code, report, _, text = judge(a, second_capture(b), tmp_path, "--drafting", drafting)
    assert code == 0, text
    assert report["drafting"] == drafting


def test_k0_steps_are_never_unmatched_blocks_and_never_paired(tmp_path: Path) -> None:
    """A drafts nothing where B drafts (a draft-length difference), and reaches a position B
    never visits with a k=0 step (not an unmatched block)."""
    from difftest.trace.align import align
    from difftest.trace.parser import parse_trace

    rng = np.random.default_rng(5)
    lb = np.stack([row_logits(t, 0.5, rng) for t in (21, 22, 23)])
    a, b = pair(tmp_path, [([], [21, 22, 23], [30], None, lb)])
    more_a, more_b = io.StringIO(), io.StringIO()
    Tracer(level=3, file=more_a).step("r0", LAST + 1, [], [21])
    Tracer(level=3, file=more_a).step("r0", LAST + 2, [], [22])
    # B accepts 21, rejects its 23 and emits 22 instead: the positions A's k=0 steps visit
    lb2 = np.stack([row_logits(t, 0.5, rng) for t in (21, 23, 24)])
    Tracer(level=3, file=more_b).step("r0", LAST + 1, [21, 23, 24], [21, 22], lb2)
    a.write_text(a.read_text() + more_a.getvalue())
    b.write_text(b.read_text() + more_b.getvalue())
    code, report, rows, text = judge(a, b, tmp_path)
    assert report["unmatched"] == {"a": 0, "b": 0}, text
    assert report["draft_length_differences"] == {"blocks": 2, "of_blocks": 10, "rows_a": 0,
                                                  "rows_b": 6}
    assert report["coverage_gaps"] == []
    assert code == 1  # a different draft length is a different draft
    al = align(parse_trace(a), parse_trace(b))
    assert len(al) == 8 + 2  # the shared blocks and the two one-sided ones, no k=0 pair


def test_two_k0_steps_at_one_position_are_no_pair(tmp_path: Path) -> None:
    from difftest.trace.align import align
    from difftest.trace.parser import parse_trace

    a, b = pair(tmp_path, [([], [], [9], None, None)])
    assert len(align(parse_trace(a), parse_trace(b))) == 8
