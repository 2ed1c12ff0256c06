"""Sequential stopping (`--until-decided`): nondeterministic arms rerun round after round until
the sequential acceptance test decides, at its alpha and beta, or reaches the maximum."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from difftest import api
from difftest.analysis.acceptance import AcceptanceCounts
from difftest.cli import app
from difftest.core.errors import ExitCode, UsageError
from difftest.core.kinds import VerdictKind
from difftest.core.limits import MAX_SEQUENTIAL_RUNS
from difftest.analysis.sequential import MIN_RUNS, Design, Tally, half_width, look
from conftest import TESTS, ctrl_c_reaches_it, replay_arm


def _counts(rng: np.random.Generator, requests: int, verifies: int, p: list[float],
            drop: float = 0.0) -> AcceptanceCounts:
    """Per request its own acceptance (clustered), k = 2 drafts per verify."""
    labels, accs = [], []
    for g in range(requests):
        base = min(1.0, max(0.0, p[g] - drop))
        first = rng.random(verifies) < base
        second = first & (rng.random(verifies) < 0.5)
        labels.append(np.full(verifies, f"r{g}"))
        accs.append(first.astype(np.int64) + second)
    acc = np.concatenate(accs)
    return AcceptanceCounts(np.concatenate(labels), np.full(acc.size, 2, np.int64), acc)


def _run(design: Design, drop: float, seed: int, requests: int = 20,
         verifies: int = 30) -> tuple[VerdictKind, int]:
    rng = np.random.default_rng(seed)
    p = list(rng.uniform(0.3, 0.8, requests))
    tally = Tally()
    for _ in range(design.max_runs + 5):  # a test that ran past its maximum fails, not hangs
        tally.add(_counts(rng, requests, verifies, p), _counts(rng, requests, verifies, p, drop))
        seen = look(tally, design)
        if seen.decision is not None:
            return seen.decision, seen.runs
    raise AssertionError(f"no decision after {tally.runs} runs (maximum {design.max_runs})")


def test_the_boundary_is_time_uniform_and_shrinks() -> None:
    rho = 0.05 ** 2
    widths = [half_width(v, 0.01, rho) for v in (1e-3, 1e-4, 1e-5)]
    assert widths[0] > widths[1] > widths[2] > 0.0
    # wider than the fixed-sample bound at the same level: the price of looking at every run
    assert half_width(1e-4, 0.01, rho) > 2.326 * math.sqrt(1e-4)
    assert half_width(0.0, 0.01, rho) == 0.0


def test_no_drop_agrees_and_a_drop_of_the_margin_differs() -> None:
    design = Design(0.1, 0.01, 20)
    same = [_run(design, 0.0, s) for s in range(10)]
    worse = [_run(design, 0.15, 100 + s) for s in range(10)]
    assert all(d is VerdictKind.AGREE for d, _ in same), same
    assert all(d is VerdictKind.DIFFER for d, _ in worse), worse
    # never before MIN_RUNS runs, and well before the maximum
    assert all(MIN_RUNS <= n <= 6 for _, n in same + worse)


def test_one_run_decides_nothing() -> None:
    """However plain the first run, the pair has not yet been seen to vary between runs."""
    assert MIN_RUNS == 2
    rng = np.random.default_rng(3)
    p = [0.7] * 20
    tally = Tally()
    tally.add(_counts(rng, 20, 30, p), _counts(rng, 20, 30, p, 0.6))
    first = look(tally, Design(0.1, 0.01, 5))
    assert first.decision is None
    assert first.positions[0].upper is not None and first.positions[0].upper < 0
    tally.add(_counts(rng, 20, 30, p), _counts(rng, 20, 30, p, 0.6))
    assert look(tally, Design(0.1, 0.01, 5)).decision is VerdictKind.DIFFER


def test_the_maximum_ends_an_undecided_test_uninformative() -> None:
    """A drop of half the margin with a tiny sample: neither bound is reached in 3 runs."""
    design = Design(0.1, 0.01, 3)
    decision, runs = _run(design, 0.05, 7, requests=3, verifies=4)
    assert (decision, runs) == (VerdictKind.UNINFORMATIVE, 3)


def test_the_design_refuses_what_it_cannot_state() -> None:
    for bad in (1, MAX_SEQUENTIAL_RUNS + 1, True):
        with pytest.raises(ValueError, match="maximum number of runs"):
            Design(0.1, 0.01, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        Design(0.1, 0.0, 5)


# -- real arms replaying the reference runner's captures --------------------------------------

SEQ = TESTS / "data" / "sequential"  # scripts/capture_replay_traces.py


def _config(tmp: Path, input_arm: bool = False, nondeterministic: bool = True) -> Path:
    """Arms `ref` and `worse` (ref with `--draft-noise 6`) that replay the reference runner's
    captures of `--nondeterministic --requests 30 --steps 6`, or with `nondeterministic=False`
    of `--requests 6 --steps 6` (ref alone: its tests compare ref with itself). An input arm
    takes `--seed {seed}`: each input replays the capture the runner printed on it, a rerun on
    the same input the same one."""
    size = "" if nondeterministic else "6"
    seed = "-{seed}" if input_arm else ""
    text = f"""{replay_arm("ref", SEQ / f"ref{size}{seed}.log")}
{replay_arm("worse", SEQ / f"worse{size}{seed}.log")}
[comparisons.planted]
arm_a = "ref"
arm_b = "worse"
acceptance = {{ max_drop = 0.1, alpha = 0.01 }}
noise_runs = 2
{'gate_input = "5"' if input_arm else ''}
{'calibration_inputs = ["6"]' if input_arm else ''}
[comparisons.aa]
arm_a = "ref"
arm_b = "ref"
acceptance = {{ max_drop = 0.1, alpha = 0.01 }}
noise_runs = 2
{'gate_input = "5"' if input_arm else ''}
[comparisons.nogate]
arm_a = "ref"
arm_b = "ref"
{'gate_input = "5"' if input_arm else ''}
"""
    path = tmp / "difftest.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_reruns_of_a_nondeterministic_pair_decide(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    planted = api.compare_arms(comparison="planted", config=cfg, run_root=tmp_path / "runs",
                               progress=False, until_decided=8)
    seq = planted.sequential
    assert seq is not None and seq.decision is VerdictKind.DIFFER
    assert seq.runs == 2  # a worse drafter is plain after the first two runs
    assert planted.verdict.kind is VerdictKind.DIFFER
    assert planted.exit_code is ExitCode.DIFFER
    said = " ".join(planted.verdict.reasons)
    assert "sequential test (--until-decided): differ after 2 run(s)" in said
    assert "DIFFER below" in said and "AGREE above" in said
    assert planted.run_dir is not None
    data = json.loads((planted.run_dir / "report.json").read_text(encoding="utf-8"))
    assert data["sequential"]["runs"] == 2 and data["sequential"]["decision"] == "differ"
    assert data["sequential"]["design"]["max_runs"] == 8
    assert "DIFFER below" in data["sequential"]["boundary"]
    assert len(data["sequential"]["looks"]) == 2
    assert "sequential test" in (planted.run_dir / "report.md").read_text(encoding="utf-8")
    assert "sequential test" in (planted.run_dir / "report.html").read_text(encoding="utf-8")
    # the second round ran into the same run directory, beside the first
    meta = json.loads((planted.run_dir / "meta.json").read_text(encoding="utf-8"))
    assert {"ref", "worse", "ref#run2", "ref#seq2", "worse#seq2"} <= set(meta["arms"])

    # --nondeterministic changes float rounding, seldom a token (the runner's reruns printed the
    # captured streams again): these reruns repeat the first run's streams, add nothing, and
    # the drop the first run shows decides
    assert seq.deterministic and seq.repeated == 30

    # on the next input each round, every round brings new requests
    cfg = _config(tmp_path, input_arm=True)
    aa = api.compare_arms(comparison="aa", config=cfg, run_root=tmp_path / "runs",
                          progress=False, until_decided=8)
    seq = aa.sequential
    assert seq is not None and seq.decision is VerdictKind.AGREE, aa.verdict.reasons
    assert MIN_RUNS <= seq.runs <= 8
    assert "acceptance" in aa.verdict.instruments
    assert aa.verdict.kind is not VerdictKind.DIFFER
    assert not seq.deterministic and seq.repeated == 0

    # re-judging (export) takes round 1 without the sequential gate: it says so, and gives no
    # agreement of its own
    assert aa.run_dir is not None
    again = api.rejudge(aa.run_dir)
    assert again.verdict.kind is not VerdictKind.AGREE
    assert "this run was sequential (--until-decided" in " ".join(again.verdict.reasons)


def test_reruns_of_a_deterministic_pair_add_nothing(tmp_path: Path) -> None:
    """Bit-identical reruns are one draw, not several: they end the test UNINFORMATIVE with
    the reason, never AGREE on the same verifies counted again."""
    cfg = _config(tmp_path, nondeterministic=False)
    aa = api.compare_arms(comparison="aa", config=cfg, run_root=tmp_path / "runs",
                          progress=False, until_decided=5)
    seq = aa.sequential
    assert seq is not None and seq.decision is VerdictKind.UNINFORMATIVE
    assert seq.deterministic and seq.runs == 2 and seq.repeated == 6
    assert aa.verdict.kind is VerdictKind.UNINFORMATIVE
    said = " ".join(aa.verdict.reasons)
    assert "the arms are deterministic on these inputs, so reruns add nothing" in said
    assert "run more requests instead" in said
    assert aa.run_dir is not None
    data = json.loads((aa.run_dir / "report.json").read_text(encoding="utf-8"))
    assert data["sequential"]["deterministic"] is True
    res = CliRunner().invoke(app, ["export", str(aa.run_dir)])
    assert res.exit_code == ExitCode.UNINFORMATIVE and "this run was sequential" in res.output


def test_deterministic_arms_on_new_inputs_do_add(tmp_path: Path) -> None:
    cfg = _config(tmp_path, input_arm=True, nondeterministic=False)
    aa = api.compare_arms(comparison="aa", config=cfg, run_root=tmp_path / "runs",
                          progress=False, until_decided=3)
    seq = aa.sequential
    assert seq is not None and not seq.deterministic and seq.repeated == 0
    assert seq.looks[-1].requests == 6 * seq.runs


def test_arms_that_take_an_input_run_each_round_on_the_next(tmp_path: Path) -> None:
    cfg = _config(tmp_path, input_arm=True)
    planted = api.compare_arms(comparison="planted", config=cfg, run_root=tmp_path / "runs",
                               progress=False, until_decided=4)
    seq = planted.sequential
    assert seq is not None and seq.decision is VerdictKind.DIFFER
    assert seq.inputs == ("5", "7")  # 6 is held out for calibration
    assert seq.looks[-1].requests == 60  # new requests every round: 30 per input
    assert planted.run_dir is not None
    meta = json.loads((planted.run_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["arms"]["worse#seq2"]["argv"][-1] == str(SEQ / "worse-7.log")  # on input 7


def test_until_decided_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    with pytest.raises(UsageError, match="acceptance gate"):
        api.compare_arms(comparison="nogate", config=cfg, run_root=tmp_path / "runs",
                         progress=False, until_decided=4)
    assert not (tmp_path / "runs").exists()  # refused before anything ran
    with pytest.raises(UsageError, match="integer from 2"):
        api.compare_arms(comparison="aa", config=cfg, run_root=tmp_path / "runs",
                         progress=False, until_decided=1)
    res = CliRunner().invoke(app, ["compare", "-c", "aa", "--config", str(cfg),
                                   "--until-decided", str(MAX_SEQUENTIAL_RUNS + 1)])
    assert res.exit_code == 2 and "--until-decided must be an integer" in res.output
    a = tmp_path / "a.log"
    a.write_text("x\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["compare", "--trace-a", str(a), "--trace-b", str(a),
                                   "--until-decided", "3"])
    assert res.exit_code == 2 and "needs arms" in res.output


# round 1 (input 5) prints the reference runner's capture on it; every later round waits to be
# interrupted
ROUND_ONE_ONLY = f"""import sys, time
if sys.argv[1] != "5":
    sys.stderr.write("started\\n"); sys.stderr.flush(); time.sleep(60)
sys.stdout.write("generated 7 blocks\\n")
sys.stderr.write(open({str(SEQ / "ref-5.log")!r}, encoding="utf-8").read())
"""


def test_an_interrupted_sequential_run_is_judged_on_its_first_round(tmp_path: Path) -> None:
    """Ctrl-C in round 2: meta.json keeps round 1's arms, and export judges them, says the run
    was sequential and interrupted, and never agrees on a test that did not decide."""
    import signal
    import subprocess
    import sys
    import time

    cfg = tmp_path / "difftest.toml"
    cfg.write_text(f"""
[arms.ref]
command = ["{{python}}", "-c", {json.dumps(ROUND_ONE_ONLY)}, "{{seed}}"]
env = {{ VT_SPEC_TRACE = "1" }}
[comparisons.aa]
arm_a = "ref"
arm_b = "ref"
acceptance = {{ max_drop = 0.1, alpha = 0.01 }}
gate_input = "5"
""", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "difftest", "compare", "-c", "aa",
                             "--config", str(cfg), "--run-root", str(tmp_path / "runs"),
                             "--no-progress", "--until-decided", "6"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    deadline = time.monotonic() + 60
    started: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        started = [p for p in (tmp_path / "runs").glob("*/ref_seq2.stderr") if p.read_text()]
        if started:
            break
        time.sleep(0.1)
    assert started, proc.communicate(timeout=30)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    run_dir = started[0].parent
    meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["status"] == "interrupted"
    assert {"ref", "ref#2", "ref#seq2", "ref#2#seq2"} <= set(meta["arms"])
    again = api.rejudge(run_dir)
    assert again.verdict.kind is VerdictKind.UNINFORMATIVE  # round 1 alone agreed
    said = " ".join(again.verdict.reasons)
    assert ("this run was sequential (--until-decided) and was interrupted in round 2, before "
            "the sequential test decided") in said
    res = CliRunner().invoke(app, ["export", str(run_dir)])
    assert res.exit_code == ExitCode.UNINFORMATIVE, res.output
    assert "was interrupted in round 2" in " ".join(res.output.split())


def test_identical_runs_keep_a_width_of_the_rates_resolution() -> None:
    """Two arms whose acceptance matched verify for verify have no paired spread; the bounds
    still have the width of one verify's change, not none."""
    rng = np.random.default_rng(5)
    same = _counts(rng, 20, 30, [0.6] * 20)
    tally = Tally()
    tally.add(same, same)
    tally.add(same, same)
    seen = look(tally, Design(0.1, 0.01, 5))
    first = seen.positions[0]
    assert first.diff == 0.0 and first.upper is not None and first.lower is not None
    assert first.upper > 1.0 / 1200 and first.lower < -1.0 / 1200
    assert seen.decision is VerdictKind.AGREE


def test_the_decision_folds_into_the_verdict() -> None:
    """A drop is a difference; an undecided test leaves no agreement; an agreement adds the
    instrument; an arm failure stands."""
    from difftest.core.kinds import Expect
    from difftest.analysis.sequential import Look, SequentialResult, fold
    from difftest.analysis.verdict import Verdict

    design = Design(0.1, 0.01, 4)

    def result(kind: VerdictKind) -> SequentialResult:
        return SequentialResult(design, (Look(2, (10, 10), 2, (), kind),))

    agree = Verdict(VerdictKind.AGREE, Expect.SAME, instruments=("tokens",))
    assert fold(agree, result(VerdictKind.DIFFER)).kind is VerdictKind.DIFFER
    assert fold(agree, result(VerdictKind.UNINFORMATIVE)).kind is VerdictKind.UNINFORMATIVE
    kept = fold(agree, result(VerdictKind.AGREE))
    assert kept.kind is VerdictKind.AGREE and kept.instruments == ("tokens", "acceptance")
    assert "sequential test (--until-decided): agree after 2 run(s)" in kept.reasons[-1]
    failed = Verdict(VerdictKind.ARM_FAILED, Expect.SAME)
    assert fold(failed, result(VerdictKind.DIFFER)) == failed


def test_an_agreement_where_a_accepts_nothing_says_why() -> None:
    """A accepting at most max_drop everywhere leaves no room for a larger drop: the AGREE is
    valid, and its reason says that is all it rests on."""
    from difftest.analysis.sequential import SequentialResult

    rng = np.random.default_rng(3)
    none = _counts(rng, 1, 4, [0.0])
    tally = Tally()
    tally.add(none, none)
    tally.add(none, none)
    design = Design(0.05, 0.01, 3)
    seen = look(tally, design)
    assert seen.decision is VerdictKind.AGREE
    text = SequentialResult(design, (seen,)).reasons()[0]
    assert "A accepted at most 0.0000 at every position: no drop larger than max_drop" in text


def test_no_drafted_verify_ends_the_test_at_once() -> None:
    from difftest.analysis.sequential import SequentialResult

    empty = AcceptanceCounts(np.zeros(0, dtype=str), np.zeros(0, np.int64), np.zeros(0, np.int64))
    tally = Tally()
    tally.add(empty, empty)
    design = Design(0.1, 0.01, 10)
    seen = look(tally, design)
    assert seen.decision is VerdictKind.UNINFORMATIVE and seen.runs == 1
    text = SequentialResult(design, (seen,)).reasons()[0]
    assert "neither arm traced a drafted verify" in text
