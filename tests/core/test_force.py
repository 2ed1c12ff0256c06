"""Teacher forcing with real reference-runner arms: B replays A's committed stream, so every
position is compared; a runner that ignores DIFFTEST_FORCE (an arm replaying the runner's
captured free run) is refused, not judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from difftest import api
from difftest.config import Config
from difftest.core.errors import DifftestError, ExitCode, UsageError
from difftest.core.force import (FORCE_ENV, ForcedStep, ForceStream, committed_stream, forced_line,
                            read_force_file, read_forced_lines, write_force_file)
from difftest.core.kinds import VerdictKind
from difftest.trace import parse_trace
from conftest import TESTS, cli_in, replay_command, replay_localize_command
from tests.flow.test_pipeline import config

SMALL = ["--requests", "2", "--steps", "5"]
REF = [sys.executable, "-m", "difftest.runners.reference", *SMALL]
LEVEL3 = {"VT_SPEC_TRACE": "3"}
COMPARE = TESTS / "data" / "compare"


def pair(tmp_path: Path, b: dict[str, object], **spec: object) -> Config:
    return config(tmp_path, {"base": {"command": REF, "env": LEVEL3}, "cand": b},
                  {"pair": {"arm_a": "base", "arm_b": "cand", **spec}})


def judge(tmp_path: Path, cfg: Config) -> api.ComparisonReport:
    return api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                              progress=False)


MUTATED = {"command": REF, "env": {**LEVEL3, "DIFFTEST_MUTATION": "causal-mask"}}


# The reference runner's free runs of the arms above (`REF` at level 3, and `MUTATED`), captured
# by scripts/capture_replay_traces.py force: replay arms that print them run free whatever
# DIFFTEST_FORCE says.
FORCE = TESTS / "data" / "force"
LOCALIZED = TESTS / "data" / "localize" / "force"  # scripts/capture_replay_traces.py localize
FREE = {"command": replay_command(FORCE / "free-none.log")}
FREE_MUTATED = {"command": replay_command(FORCE / "free-causal-mask.log"),
                "env": {"DIFFTEST_MUTATION": "causal-mask"}}  # the launch it was captured with


def replayed_pair(tmp_path: Path, **spec: object) -> Config:
    return config(tmp_path, {"base": FREE, "cand": FREE_MUTATED},
                  {"pair": {"arm_a": "base", "arm_b": "cand", **spec}})


def test_free_run_of_a_changed_drafter_leaves_positions_uncompared(tmp_path: Path) -> None:
    """The baseline the forcing is for: different acceptance visits different positions (the
    runner's free runs of the arms the next test forces)."""
    rep = judge(tmp_path, replayed_pair(tmp_path))
    assert rep.comparison is not None and rep.forcing is None
    c = rep.comparison
    assert c.unmatched_a + c.unmatched_b + c.context_diverged > 0


def test_forced_changed_drafter_compares_every_position(tmp_path: Path) -> None:
    rep = judge(tmp_path, pair(tmp_path, MUTATED, teacher_force=True))
    assert rep.forcing is not None and rep.forcing.honoured, rep.verdict.reasons
    assert rep.comparison is not None
    c = rep.comparison
    a = rep.arm_a.trace
    assert a is not None
    assert (c.unmatched_a, c.unmatched_b, c.context_diverged, c.rows_context_diverged) == (
        0, 0, 0, 0)
    assert c.blocks_compared == len(a.verifies) == rep.forcing.steps == 10
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.exit_code is ExitCode.DIFFER
    assert rep.forcing.acceptance_a != rep.forcing.acceptance_b
    assert any("teacher-forced" in r for r in rep.verdict.reasons)
    assert rep.run_dir is not None
    meta = json.loads((rep.run_dir / "meta.json").read_text())
    assert set(meta["arms"]) == {"base", "cand"}
    assert meta["arms"]["cand"]["env_overrides"][FORCE_ENV].endswith("force.json")
    report = json.loads((rep.run_dir / "report.json").read_text())
    assert report["teacher_forcing"]["honoured"] is True
    # the run judges again from its directory alike
    again = api.rejudge(rep.run_dir)
    assert again.verdict.kind is VerdictKind.DIFFER and again.forcing is not None


# The runner's free run of REF and its run with split attention forced on that run's stream,
# captured from a teacher-forced compare: scripts/capture_replay_traces.py forced
SPLIT = TESTS / "data" / "force" / "split"


def test_forced_harmless_change_agrees_on_every_position(tmp_path: Path) -> None:
    """A change equal in exact arithmetic (split attention) under forcing: every step of A is
    paired, none diverged, and the verdict follows from the drafts alone. The arms replay the
    runner's captures (B refuses a stream other than the one it was forced on:
    conftest.REPLAY_LOCALIZE); the test above forces the runner itself."""
    cfg = config(tmp_path, {
        "base": {"command": replay_localize_command(SPLIT / "base", *SMALL), "env": LEVEL3},
        "cand": {"command": replay_localize_command(SPLIT / "split", *SMALL, "--attention-kernel",
                                                    "split"), "env": LEVEL3}},
        {"pair": {"arm_a": "base", "arm_b": "cand", "teacher_force": True, "atol": 1e-4}})
    rep = judge(tmp_path, cfg)
    assert rep.forcing is not None and rep.forcing.honoured
    assert rep.comparison is not None
    c = rep.comparison
    assert (c.unmatched_a, c.unmatched_b, c.context_diverged, c.blocks_compared) == (0, 0, 0, 10)
    assert rep.verdict.kind is VerdictKind.AGREE, rep.verdict.reasons


def test_runner_that_ignores_the_variable_is_refused(tmp_path: Path) -> None:
    """B prints its free run whatever DIFFTEST_FORCE says: the reference runner's free run of
    the mutated drafter, replayed."""
    rep = judge(tmp_path, replayed_pair(tmp_path, teacher_force=True))
    assert rep.forcing is not None and not rep.forcing.honoured
    assert rep.verdict.kind is VerdictKind.UNINFORMATIVE
    assert rep.exit_code is ExitCode.UNINFORMATIVE
    assert "ignores DIFFTEST_FORCE" in rep.verdict.reasons[0]
    assert "did not commit base's stream" in rep.verdict.reasons[1]


def test_force_file_round_trip_and_bad_files(tmp_path: Path) -> None:
    stream = ForceStream({"r0": (ForcedStep(5, (1, 2)), ForcedStep(7, (3,), (3, 4)))})
    path = write_force_file(stream, tmp_path / "force.json")
    assert read_force_file(path) == stream
    for text, why in (("{", "not valid JSON"), ('{"format": "x"}', "key 'format'"),
                      ('{"format": "difftest-force/1", "requests": {"r0": [[5, []]]}}',
                       r"requests\.r0\[0\]")):
        path.write_text(text)
        with pytest.raises(UsageError, match=why):
            read_force_file(path)


def test_forced_line_reader_names_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "b.trace"
    trace.write_text(f"x\n{forced_line('r0', 4, [1, 2])}\n[spec-forced] req=r0 pos=x\n")
    with pytest.raises(UsageError, match=r"b.trace:3: \[spec-forced\]"):
        read_forced_lines(trace)
    trace.write_text(f"x\n{forced_line('r0', 4, [1, 2])}\n")
    assert [(f.req, f.pos, f.tokens, f.line) for f in read_forced_lines(trace)] == [
        ("r0", 4, (1, 2), 2)]


def test_reference_runner_rejects_a_bad_force_file(tmp_path: Path) -> None:
    bad = tmp_path / "force.json"
    bad.write_text('{"format": "difftest-force/1", "requests": {"r0": [[999, [1]]]}}')
    env = {**os.environ, FORCE_ENV: str(bad), "VT_SPEC_TRACE": "1"}
    out = subprocess.run(REF, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == ExitCode.USAGE
    assert "no step of request r0 at position" in out.stderr
    assert "Traceback" not in out.stderr


def test_committed_stream_reads_the_emits(tmp_path: Path) -> None:
    trace = tmp_path / "a.trace"
    trace.write_text("[SPECTRACE] req=r0 pos=3 k=2 ns=2 acc=1 draft=[ 5 6 ] emit=[ 5 9 ]\n"
                     "[SPECTRACE] req=r0 pos=5 k=2 ns=1 acc=0 draft=[ 1 1 ] emit=[ 4 ]\n")
    stream = committed_stream(parse_trace(trace))
    assert stream.requests == {"r0": (ForcedStep(3, (5, 9), (5, 6)), ForcedStep(5, (4,), (1, 1)))}


def test_teacher_force_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(DifftestError, match="teacher_force.*true or false"):
        pair(tmp_path, MUTATED, teacher_force="yes")


def test_teacher_force_needs_arms_not_traces(tmp_path: Path) -> None:
    trace = tmp_path / "a.trace"
    trace.write_text("[SPECTRACE] req=r0 pos=3 k=1 ns=1 acc=0 draft=[ 5 ] emit=[ 4 ]\n")
    out = cli_in(tmp_path, "compare", "--trace-a", str(trace), "--trace-b", str(trace),
                 "--teacher-force")
    assert out.returncode == ExitCode.USAGE and "--teacher-force" in out.stderr


def test_forced_alignment_marks_no_step_context_diverged(tmp_path: Path) -> None:
    """B's would-be emit differs from A's at pos 4 (another target): free, its later step is
    context-diverged; forced, its context was A's and the step is compared."""
    from difftest.trace.align import align

    a, b = tmp_path / "a.trace", tmp_path / "b.trace"
    a.write_text("[SPECTRACE] req=r0 pos=3 k=2 ns=2 acc=1 draft=[ 5 6 ] emit=[ 5 9 ]\n"
                 "[SPECTRACE] req=r0 pos=5 k=2 ns=1 acc=0 draft=[ 1 1 ] emit=[ 4 ]\n")
    b.write_text("[SPECTRACE] req=r0 pos=3 k=2 ns=2 acc=1 draft=[ 5 7 ] emit=[ 5 8 ]\n"
                 f"{forced_line('r0', 3, [5, 9])}\n"
                 "[SPECTRACE] req=r0 pos=5 k=2 ns=1 acc=0 draft=[ 1 2 ] emit=[ 4 ]\n"
                 f"{forced_line('r0', 5, [4])}\n")
    ta, tb = parse_trace(a), parse_trace(b)
    assert align(ta, tb).diverged_a.size == 1
    forced = align(ta, tb, forced=True)
    assert (forced.diverged_a.size, len(forced)) == (0, 2)


def test_localize_run_names_the_planted_module(tmp_path: Path) -> None:
    """A red run of a planted fault; `difftest localize RUN_DIR` reruns both arms with capture
    at the first differing step, B forced, and names the faulty module. The arms replay the
    reference runner's free, forced and capturing runs of them (tests/data/localize/force/,
    scripts/capture_replay_traces.py localize); localize on the runner itself is
    tests/flow/test_localize_baseline.py's and tests/flow/test_localize_report.py's."""
    from difftest.flow.localize import localize_run

    fault = ["--fault", "layers.1.mlp:scale:0.05"]
    cfg = config(tmp_path, {
        "base": {"command": replay_localize_command(LOCALIZED / "base", *SMALL), "env": LEVEL3},
        "cand": {"command": replay_localize_command(LOCALIZED / "mlp-scale", *SMALL, *fault),
                 "env": LEVEL3}},
        {"pair": {"arm_a": "base", "arm_b": "cand", "teacher_force": True}})
    rep = judge(tmp_path, cfg)
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.run_dir is not None
    result = localize_run(rep.run_dir)
    first = result.report.localization.first
    assert first is not None and first.module == "layers.1.mlp"
    assert result.exit_code is ExitCode.DIFFER
    assert (result.folder / "localize.md").read_text().startswith("## Localisation at ")
    # a run that agreed (replay arms of two agreeing captures) has no step to localise
    same = tmp_path / "same"
    same.mkdir()
    agreed = config(same, {"base": {"command": replay_command(COMPARE / "agree_a.log")},
                           "cand": {"command": replay_command(COMPARE / "agree_b.log")}},
                    {"pair": {"arm_a": "base", "arm_b": "cand"}})
    with pytest.raises(UsageError, match="no differing step"):
        localize_run(judge(same, agreed).run_dir)  # type: ignore[arg-type]
