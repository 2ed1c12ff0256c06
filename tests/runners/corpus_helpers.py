"""The transformers and mlx runners with the bug corpus's mutations, and their traces judged as
the runner's config judges them (difftest.flow.evaluate.judge_planted): the helpers of
tests/runners/test_hf_corpus.py and test_mlx_corpus.py. A run is the runner's command line run
in this process (conftest.runner_main: its `main`, real models, DIFFTEST_MUTATION read from the
environment as an arm's is), so that each run does not import torch or mlx again; the tests of
the command itself (bad options, exit 2, --list-mutations) start it as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import runner_main
from difftest.analysis.bugclass import classify
from difftest.config import load_config
from difftest.core.corpus import BY_NAME, Runner, names_of
from difftest.core.kinds import VerdictKind
from difftest.core.limits import MAX_WINDOW
from difftest.flow.evaluate import ComparisonReport, judge_planted

__all__ = [
    "correct_run",
    "test_list_mutations_reads_the_records_it_carries",
    "test_a_bad_corpus_option_is_one_line_and_exit_2",
    "test_a_mutation_it_does_not_carry_is_one_line_and_exit_2",
    "test_a_plain_run_prints_what_it_printed_before",
    "test_a_window_no_query_passes_leaves_the_edge_bug_silent",
    "test_without_a_window_the_edge_bug_is_silent",
    "test_without_width_3_the_width_bug_is_silent",
    "test_the_window_edge_bug_is_caught_past_the_edge",
    "test_the_width_bug_is_caught_as_a_state_bug",
    "test_draft_lens_cycle_per_request",
    "test_broken_mask_is_caught",
    "test_the_explicit_mask_control_agrees",
]

ROOT = Path(__file__).resolve().parents[2]
# two short requests: enough verifies for every width of a 1..4 cycle, seconds per run
SHORT = ("--requests", "2", "--max-new-tokens", "12")


def runner_env(mutation: str | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", VT_SPEC_TRACE="3")
    env.pop("DIFFTEST_MUTATION", None)
    if mutation:
        env["DIFFTEST_MUTATION"] = mutation
    return env


def launch(runner: str, *args: str, mutation: str | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", f"difftest.runners.{runner}", *args],
                          env=runner_env(mutation), capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def arm(runner: str, folder: Path, *args: str, mutation: str | None = None) -> Path:
    """One run of the runner (SHORT, then `args`) in this process, under the environment an arm
    of it gets (runner_env), its trace written to a file in `folder`."""
    proc = runner_main(runner, *SHORT, *args,
                       env={**runner_env(mutation), "DIFFTEST_MUTATION": mutation})
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = folder / f"{runner}-{len(list(folder.iterdir()))}.log"
    path.write_text(proc.stderr + "".join(f"# {line}\n" for line in proc.stdout.splitlines()))
    return path


@pytest.fixture(scope="session")
def correct_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`correct_run(runner, *args)`: the capture of the runner's run without a mutation, made
    once per session for each runner and arguments (several tests compare a mutation with it;
    none writes to it)."""
    folder = tmp_path_factory.mktemp("correct")
    runs: dict[tuple[str, ...], Path] = {}

    def run(runner: str, *args: str) -> Path:
        if (runner, *args) not in runs:
            runs[(runner, *args)] = arm(runner, folder, *args)
        return runs[(runner, *args)]

    return run


def judged(runner: str, a: Path, b: Path, mutations: tuple[str | None, str | None],
           tolerance_of: str | None = None) -> ComparisonReport:
    """The runner's `rerun` comparison of two captures with these mutations planted;
    `tolerance_of`: judged under that comparison's tolerance instead of bit for bit."""
    config = load_config(ROOT / "difftest" / "configs" / f"{runner}.toml")
    return judge_planted(a, b, config.comparison("rerun"), config, mutations, tolerance_of)


def kind_named(report: ComparisonReport) -> str | None:
    """The bug kind a DIFFER is named by (None: another verdict, or logits only)."""
    a, b = report.arm_a.trace, report.arm_b.trace
    if report.verdict.kind is not VerdictKind.DIFFER or a is None or b is None:
        return None
    found = classify(a, b).kind
    return found.value if found else None


def coverage(path: Path) -> dict[str, str]:
    (line,) = [x for x in path.read_text().splitlines() if x.startswith("[spec-coverage]")]
    return dict(w.split("=", 1) for w in line.split()[1:])


def widths(path: Path) -> dict[int, int]:
    text = coverage(path)["widths"]
    return {} if text == "-" else {int(w): int(n) for w, n in
                                   (x.split(":") for x in text.split(","))}


def computed(path: Path) -> list[str]:
    """What a run computed: every line but its settings and coverage (a mutation that never
    acted leaves these equal to the correct run's)."""
    return [x for x in path.read_text().splitlines()
            if not x.startswith(("[spec-config]", "[spec-coverage]"))]


def drafted_per_step(path: Path, req: str) -> list[int]:
    return [int(x.split(" k=")[1].split()[0]) for x in path.read_text().splitlines()
            if x.startswith(f"[SPECTRACE] req={req} ")]


# The tests both runners pass: test_hf_corpus.py and test_mlx_corpus.py import them (`__all__`),
# each with a `runner` fixture naming its runner (and so each under its own file's markers).

BAD_OPTIONS = [
    (("--draft-lens", ",,,"), "--draft-lens ',,,': expected comma-separated integers"),
    (("--draft-lens", "1,x"), "expected comma-separated integers"),
    (("--draft-lens", "5"), "draft_lens entries must be integers in 1..k (4), got 5"),
    (("--sliding-window", "-1"), "sliding-window must be an integer in 1..2147483647"),
    (("--sliding-window", "2147483648"), "sliding-window must be an integer in 1..2147483647"),
]


def bad_option(runner: str, argv: tuple[str, ...], message: str,
               mutation: str | None = None) -> None:
    proc = launch(runner, *argv, mutation=mutation)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_list_mutations_reads_the_records_it_carries(runner: str) -> None:
    proc = launch(runner, "--list-mutations")
    assert proc.returncode == 0, proc.stderr
    names = [x.split()[0] for x in proc.stdout.splitlines()[1:]]
    assert names == list(names_of(Runner(runner)))


@pytest.mark.parametrize("argv, message", BAD_OPTIONS)
def test_a_bad_corpus_option_is_one_line_and_exit_2(runner: str, argv: tuple[str, ...],
                                                    message: str) -> None:
    bad_option(runner, argv, message)


def test_a_mutation_it_does_not_carry_is_one_line_and_exit_2(runner: str) -> None:
    bad_option(runner, (), "DIFFTEST_MUTATION='causal-mask' is not a mutation",
               mutation="causal-mask")


def test_a_plain_run_prints_what_it_printed_before(runner: str,
                                                   correct_run: Callable[..., Path]) -> None:
    """No new option, no corpus mutation: no coverage line, no new settings."""
    text = correct_run(runner).read_text()
    assert "[spec-coverage]" not in text
    assert "sliding_window=" not in text and "draft_lens=" not in text


def unreached(runner: str, folder: Path, good: Path, mutation: str, args: tuple[str, ...],
              state: str) -> None:
    """A run that never reaches the bug's state computes what the correct run does, and the
    comparison is uninformative, naming the state or fired=0, whichever arm carries the bug."""
    bad = arm(runner, folder, *args, mutation=mutation)
    assert computed(bad) == computed(good)
    assert coverage(bad)["fired"] == "0"
    for mutations, (a, b) in (((None, mutation), (good, bad)), ((mutation, None), (bad, good))):
        report = judged(runner, a, b, mutations)
        assert report.verdict.kind is VerdictKind.UNINFORMATIVE, report.verdict.reasons
        said = " ".join(report.verdict.reasons)
        assert state in said or "fired=0" in said, said


def test_a_window_no_query_passes_leaves_the_edge_bug_silent(
        runner: str, tmp_path: Path, correct_run: Callable[..., Path]) -> None:
    # prompts of 8-9 ids and 12 new ones: no query is that far past a key (the widest window
    # there is, which the bug reads one key wider still)
    window = ("--sliding-window", str(MAX_WINDOW))
    unreached(runner, tmp_path, correct_run(runner, *window), "sliding-window-edge", window,
              "window_edges")


def test_without_a_window_the_edge_bug_is_silent(runner: str, tmp_path: Path,
                                                 correct_run: Callable[..., Path]) -> None:
    # the runner's default inputs: no window, so no edge for the bug to read past
    unreached(runner, tmp_path, correct_run(runner), "sliding-window-edge", (), "window_edges")


def test_without_width_3_the_width_bug_is_silent(runner: str, tmp_path: Path,
                                                 correct_run: Callable[..., Path]) -> None:
    unreached(runner, tmp_path, correct_run(runner, "--k", "1"), "verify-width-path",
              ("--k", "1"), "widths")


def test_the_window_edge_bug_is_caught_past_the_edge(runner: str, tmp_path: Path) -> None:
    good = arm(runner, tmp_path, "--sliding-window", "6")
    bad = arm(runner, tmp_path, "--sliding-window", "6", mutation="sliding-window-edge")
    cov = coverage(bad)
    assert int(cov["window_edges"]) > 0 and cov["fired"] == cov["window_edges"]
    # the correct run meets the edges too (as many as its own drafts make), and never fires
    assert int(coverage(good)["window_edges"]) > 0 and coverage(good)["fired"] == "0"
    report = judged(runner, good, bad, (None, "sliding-window-edge"))
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons


def test_the_width_bug_is_caught_as_a_state_bug(runner: str, tmp_path: Path,
                                                correct_run: Callable[..., Path]) -> None:
    """At widths 2..5 in turn the width-3 verify's shifted rows change the committed stream."""
    good = correct_run(runner, "--draft-lens", "1,2,3,4")
    bad = arm(runner, tmp_path, "--draft-lens", "1,2,3,4", mutation="verify-width-path")
    assert {2, 3, 4, 5} <= set(widths(good))
    assert int(coverage(bad)["fired"]) == widths(bad)[3] > 0
    report = judged(runner, good, bad, (None, "verify-width-path"))
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons
    assert kind_named(report) == "verify-or-state"


def test_draft_lens_cycle_per_request(runner: str, correct_run: Callable[..., Path]) -> None:
    """Each request drafts the cycle's lengths in turn, request i starting i entries on."""
    path = correct_run(runner, "--draft-lens", "1,2,3,4")
    assert drafted_per_step(path, "r0")[:4] == [1, 2, 3, 4]
    assert drafted_per_step(path, "r1")[:4] == [2, 3, 4, 1]
    assert "draft_lens=1,2,3,4" in path.read_text()


def test_broken_mask_is_caught(runner: str, tmp_path: Path, correct_run: Callable[..., Path]) -> None:
    good = correct_run(runner)
    bad = arm(runner, tmp_path, mutation="broken-mask")
    assert int(coverage(bad)["fired"]) > 0
    report = judged(runner, good, bad, (None, "broken-mask"))
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons


def test_the_explicit_mask_control_agrees(runner: str, tmp_path: Path,
                                          correct_run: Callable[..., Path]) -> None:
    """Judged under its `judged_by` comparison's tolerance where the runner's config has it
    (transformers' sdpa rounds an explicit mask otherwise than its causal flag), else bit for
    bit (mlx's fused kernel computes the same bits)."""
    control = BY_NAME["control-explicit-mask"]
    config = load_config(ROOT / "difftest" / "configs" / f"{runner}.toml")
    tolerance = control.judged_by if control.judged_by in config.comparisons else None
    good = correct_run(runner)
    bad = arm(runner, tmp_path, mutation=control.name)
    report = judged(runner, good, bad, (None, control.name), tolerance)
    assert report.verdict.kind is VerdictKind.AGREE, report.verdict.reasons
