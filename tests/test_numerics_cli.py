"""Numerics beyond bitwise, end to end: mixed trace levels, the printed resolution, rtol, the
A/A noise floor (`difftest noise`, `noise_runs`) and the shipped `split` and `nondet` gates: the
noise command on real runs of the reference runner, the verdicts with a floor on arms replaying
its captured runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from difftest.cli import app
from conftest import REPLAY

DATA = Path(__file__).parent / "data"
LEVEL3 = DATA / "two_requests_level3.log"  # printed with %.6g
runner = CliRunner()


def cli(*args: object):  # noqa: ANN201 - a click Result
    return runner.invoke(app, [str(a) for a in args])


def as_json(result) -> dict:  # noqa: ANN001
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON literal {token}")
    return json.loads(result.output, parse_constant=refuse)


def edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = LEVEL3.read_text()
    assert old in text
    out = tmp_path / name
    out.write_text(text.replace(old, new, 1))
    return out


def test_a_level_three_trace_against_a_level_one_trace_compares_tokens(tmp_path: Path) -> None:
    level1 = tmp_path / "level1.log"
    level1.write_text("".join(line for line in LEVEL3.read_text().splitlines(keepends=True)
                              if not line.startswith("[spec-logits]")))
    for a, b in ((LEVEL3, level1), (level1, LEVEL3)):
        r = cli("compare", "--trace-a", a, "--trace-b", b, "-f", "json")
        # the tokens agree, but the arms did not trace the same quantity: no plain agreement
        assert r.exit_code == 3, r.output
        data = as_json(r)
        assert data["verdict"] == "uninformative" and data["instruments"] == ["tokens"]
        assert data["reasons"][0].startswith("not the same trace level: ")
        assert data["blocks_compared"] == 12 and data["logit_rows_compared"] == 0
        said = [x for x in data["reasons"] if x.startswith("logits could not be compared")]
        assert said == ["logits could not be compared: two_requests_level3.log traced block "
                        "logits (level 3) and level1.log did not (level 1); only tokens were "
                        "compared (set the same VT_SPEC_TRACE in both arms)"]
        assert data["logits_not_compared"]["traced_by"] == ("a" if a == LEVEL3 else "b")
    # a token difference is still seen
    moved = edited(tmp_path, "moved.log", "draft=[ 3747 1154 2531 ]", "draft=[ 3747 1154 2532 ]")
    moved1 = tmp_path / "moved1.log"
    moved1.write_text("".join(line for line in moved.read_text().splitlines(keepends=True)
                              if not line.startswith("[spec-logits]")))
    r = cli("compare", "--trace-a", LEVEL3, "--trace-b", moved1)
    assert r.exit_code == 1, r.output


def second_capture(tmp_path: Path) -> Path:
    """LEVEL3 with a line of other program output: a capture of its own (one capture compared
    with itself is refused)."""
    path = tmp_path / "second.log"
    path.write_text(LEVEL3.read_text() + "[spec-config] build=second\n")
    return path


def test_six_digit_traces_report_their_resolution(tmp_path: Path) -> None:
    twin = second_capture(tmp_path)
    r = cli("compare", "--trace-a", LEVEL3, "--trace-b", twin, "-f", "json")
    assert r.exit_code == 0, r.output
    data = as_json(r)
    assert [a["logit_resolution"] for a in data["arms"]] == [1e-4, 1e-4]
    assert [a["logit_digits"] for a in data["arms"]] == [6, 6]
    assert ("bitwise at 6 significant digits: agreement means equal to within the printed "
            "resolution 1e-04, not bit-identical (print logits with %.9g for bit-identity)"
            in data["reasons"])
    # a tolerance finer than the resolution is named, with what to do
    r = cli("compare", "--trace-a", LEVEL3, "--trace-b", twin, "--atol", "1e-5", "-f", "json")
    data = as_json(r)
    assert any(x.startswith("the tolerance (atol 1e-05) is finer than the logit resolution "
                            "1e-04 of ") and x.endswith("print 9 significant digits (%.9g) or "
                                                        "use a tolerance of at least 1e-04")
               for x in data["reasons"]), data["reasons"]
    r = cli("compare", "--trace-a", LEVEL3, "--trace-b", twin, "--atol", "1e-4", "-f", "json")
    assert not any("finer than" in x for x in as_json(r)["reasons"])


def test_one_quantum_is_never_silently_a_difference_of_that_size(tmp_path: Path) -> None:
    b = edited(tmp_path, "b.log", "3747:9.1778 ", "3747:9.17781 ")
    bitwise = cli("compare", "--trace-a", LEVEL3, "--trace-b", b, "-f", "json")
    assert bitwise.exit_code == 1  # printed text differs: the values differ
    data = as_json(bitwise)
    assert data["logit_rows_one_quantum"] == 1
    assert ("1 logit row(s) differ by one printed quantum only (the last printed digit, at most "
            "1e-04): real differences, of a true size anywhere between 0 and two quanta"
            in data["reasons"]), data["reasons"]
    # under a tolerance the one-quantum difference cannot be placed: not a difference
    tol = cli("compare", "--trace-a", LEVEL3, "--trace-b", b, "--atol", "2e-5", "-f", "json")
    assert tol.exit_code == 0, tol.output
    assert as_json(tol)["logit_rows_unresolved"] == 0
    fine = cli("compare", "--trace-a", LEVEL3, "--trace-b", b, "--atol", "1e-5", "-f", "json")
    data = as_json(fine)
    assert data["logit_rows_unresolved"] == 1 and data["blocks_logit_differing"] == 0
    assert any(x.startswith("1 logit row(s) differ by an amount the printed resolution")
               for x in data["reasons"])


def test_rtol_has_numpys_isclose_meaning_on_the_command_line(tmp_path: Path) -> None:
    # 9.1778 -> 9.1788: |a - b| = 1e-3, |b| = 9.1788
    b = edited(tmp_path, "b.log", "3747:9.1778 ", "3747:9.1788 ")
    assert cli("compare", "--trace-a", LEVEL3, "--trace-b", b, "--rtol", "1e-4").exit_code == 1
    assert cli("compare", "--trace-a", LEVEL3, "--trace-b", b, "--rtol", "1.2e-4").exit_code == 0
    assert cli("compare", "--trace-a", LEVEL3, "--trace-b", b, "--atol", "5e-4", "--rtol",
               "6e-5").exit_code == 0  # 5e-4 + 6e-5 * 9.1788 > 1e-3
    r = cli("compare", "--trace-a", LEVEL3, "--trace-b", b, "--rtol", "-1")
    assert r.exit_code == 2


@pytest.mark.parametrize("line, message", [
    ("rtol = -0.5", "key 'rtol': must be >= 0"),
    ('rtol = "1e-5"', "key 'rtol': must be a number"),
    ("noise_runs = 1", "key 'noise_runs': must be 0 (no floor) or at least 2"),
    ("noise_runs = 2.5", "key 'noise_runs': must be an integer"),
])
def test_config_rejects_bad_tolerances(tmp_path: Path, line: str, message: str) -> None:
    cfg = tmp_path / "difftest.toml"
    cfg.write_text('[arms.a]\ncommand = ["true"]\n[arms.b]\ncommand = ["true"]\n'
                   f'[comparisons.c]\narm_a = "a"\narm_b = "b"\n{line}\n')
    r = cli("compare", "-c", "c", "--config", cfg)
    assert r.exit_code == 2
    assert "[comparisons.c]" in r.output and message in r.output, r.output


SMALL = ["--requests", "2", "--steps", "4"]


def small_config(tmp_path: Path, b_mutation: str = "none") -> Path:
    def arm(name: str, lane: str, *extra: str, mutation: str = "none") -> str:
        argv = ", ".join(f'"{x}"' for x in ["{python}", "-m", "difftest.runners.reference", "--lane",
                                             lane, *SMALL, *extra])
        return (f"[arms.{name}]\ncommand = [{argv}]\n"
                f'env = {{ VT_SPEC_TRACE = "3", DIFFTEST_MUTATION = "{mutation}", '
                'OMP_NUM_THREADS = "1" }\n')
    cfg = tmp_path / "difftest.toml"
    cfg.write_text(arm("nd", "paged", "--nondeterministic") + arm("det", "paged")
                   + arm("mat", "materialized", mutation=b_mutation)
                   + '[comparisons.nondet]\narm_a = "nd"\narm_b = "mat"\nnoise_runs = 3\n'
                   + '[comparisons.strict]\narm_a = "nd"\narm_b = "mat"\n'
                   + '[comparisons.det]\narm_a = "det"\narm_b = "mat"\nnoise_runs = 2\n')
    return cfg


def test_noise_command_measures_the_floor(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    r = cli("noise", "--arm", "nd", "--noise-runs", "3", "--config", cfg, "--run-root", tmp_path / "r",
            "--no-progress", "-f", "json")
    assert r.exit_code == 0, r.output
    data = as_json(r)
    noise = data["noise"]
    assert noise["runs"] == 3 and len(noise["pairs"]) == 3
    assert not noise["bit_identical"] and not noise["zero_floor"]
    assert 0 < noise["floor"] < 1e-4
    assert noise["floor"] == max(p["max_abs"] for p in noise["pairs"])
    assert noise["logit_stats"]["rows"] == 3 * 2 * 4 * 4
    saved = json.loads((Path(data["run_dir"]) / "noise.json").read_text())
    assert saved == data
    det = cli("noise", "--arm", "det", "--noise-runs", "2", "--config", cfg, "--run-root",
              tmp_path / "r", "--no-progress")
    assert det.exit_code == 0, det.output
    assert det.output.startswith("noise det: A/A floor of det: zero (2 runs bit-identical)")
    assert cli("noise", "--arm", "nope", "--config", cfg).exit_code == 2
    assert cli("noise", "--arm", "nd", "--noise-runs", "1", "--config", cfg).exit_code == 2


# small_config's arms as the reference runner printed them (scripts/capture_replay_traces.py
# numerics): the nondeterministic lane's three runs differ from each other, so its replay arm
# prints the next capture at each run (the first run to claim a number in `state` prints it).
NUMERICS = DATA / "numerics"
NEXT_RUN = ("import os, sys\nstate, logs = sys.argv[1], sys.argv[2:]\nn = 0\nwhile True:\n"
            "    try:\n        os.close(os.open(os.path.join(state, str(n)), "
            "os.O_CREAT | os.O_EXCL))\n        break\n"
            "    except FileExistsError:\n        n += 1\n"
            "sys.stdout.write('generated 7 blocks\\n')\n"
            "sys.stderr.write(open(logs[n % len(logs)]).read())\n")


def replayed_config(tmp_path: Path, state: Path, b_mutation: str = "none") -> Path:
    """small_config with arms replaying the reference runner's captures of its arms; `state`:
    the folder where the nondeterministic arm counts its runs."""
    def arm(name: str, argv: list[str], mutation: str = "none") -> str:
        command = ", ".join(json.dumps(x) for x in ["{python}", "-c", *argv])
        return (f"[arms.{name}]\ncommand = [{command}]\n"
                f'env = {{ VT_SPEC_TRACE = "3", DIFFTEST_MUTATION = "{mutation}", '
                'OMP_NUM_THREADS = "1" }\n')
    state.mkdir(exist_ok=True)
    nd = [NEXT_RUN, str(state), *(str(NUMERICS / f"nd-{n}.log") for n in (1, 2, 3))]
    cfg = tmp_path / "difftest.toml"
    cfg.write_text(arm("nd", nd) + arm("det", [REPLAY, str(NUMERICS / "det.log")])
                   + arm("mat", [REPLAY, str(NUMERICS / f"mat+{b_mutation}.log")],
                         mutation=b_mutation)
                   + '[comparisons.nondet]\narm_a = "nd"\narm_b = "mat"\nnoise_runs = 3\n'
                   + '[comparisons.strict]\narm_a = "nd"\narm_b = "mat"\n'
                   + '[comparisons.det]\narm_a = "det"\narm_b = "mat"\nnoise_runs = 2\n')
    return cfg


def test_a_noise_floor_verdict_agrees_on_noise_and_differs_on_a_bug(tmp_path: Path) -> None:
    cfg = replayed_config(tmp_path, tmp_path / "nd-runs")
    strict = cli("compare", "-c", "strict", "--config", cfg, "--run-root", tmp_path / "r",
                 "--no-progress", "-f", "json")
    assert strict.exit_code == 1, strict.output  # bitwise against a nondeterministic arm
    r = cli("compare", "-c", "nondet", "--config", cfg, "--run-root", tmp_path / "r",
            "--no-progress", "-f", "json")
    assert r.exit_code == 0, r.output
    data = as_json(r)
    assert data["noise_floor"]["floor"] > 0 and data["noise_floor"]["runs"] == 3
    assert data["flip_test"]["rule"] == "exact-test"
    assert data["logit_excess_test"]["rule"] == "exact-test"
    assert data["blind_radius"]["logits_from"] == "noise band, 4 x its noise floor"
    assert any(x.startswith("A/A floor of nd: ") for x in data["reasons"])
    assert sorted(p.name for p in Path(data["run_dir"]).glob("*.stderr")) == [
        "mat.stderr", "nd.stderr", "nd_run2.stderr", "nd_run3.stderr"]
    # the zero floor of a deterministic arm is reported, and judged as strictly as without it
    det = as_json(cli("compare", "-c", "det", "--config", cfg, "--run-root", tmp_path / "r",
                      "--no-progress", "-f", "json"))
    assert det["verdict"] == "agree" and det["noise_floor"]["zero_floor"]
    assert det["logit_excess_test"]["rule"] == "strict"
    assert any(x.startswith("A/A floor of det: zero (2 runs bit-identical)")
               and x.endswith("the comparison is judged as strictly as without a floor")
               for x in det["reasons"]), det["reasons"]
    # the same floor does not hide a real bug in B
    (tmp_path / "bug").mkdir()
    bug = replayed_config(tmp_path / "bug", tmp_path / "nd-runs", b_mutation="causal-mask")
    r = cli("compare", "-c", "nondet", "--config", bug, "--run-root", tmp_path / "r",
            "--no-progress", "-f", "json")
    assert r.exit_code == 1, r.output
    data = as_json(r)
    assert data["logit_excess_test"]["counts"] and data["blocks_logit_differing"] > 0


def test_values_above_a_floor_count_only_when_a_rerun_would_not_show_them(tmp_path: Path) -> None:
    from difftest.analysis.compare import compare
    from difftest.numerics.noise import RerunPair, noise_floor
    from difftest.numerics.stats import PairedRows, logit_stats
    from difftest.trace.parser import parse_trace

    a = parse_trace(LEVEL3)
    n = len(a.logits)
    zeros = np.zeros((3 * n, 8))
    stats = logit_stats(PairedRows(zeros.astype(np.int32), zeros, zeros.astype(np.int32), zeros))
    floor = noise_floor("a", 3, [RerunPair(0, 1, 36, 0, n, 1e-3, False)], stats)
    # each value moves by 3x the floor: above it, inside the noise band (4x)
    edits = [("3747:9.1778 ", "3747:9.1808 "), ("3342:8.4464 ", "3342:8.4494 "),
             ("1154:6.1825 ", "1154:6.1855 "), ("2531:4.9608 ", "2531:4.9638 ")]
    one = edited(tmp_path, "one.log", *edits[0])
    c = compare(a, parse_trace(one), floor=floor)
    assert c.logits is not None and c.logits.excess is not None
    assert (c.logits.excess.exceed, c.logits.excess.counts) == (1, False)
    assert c.blocks_logit_differing == 0 and c.logits.rows_within_noise == 1
    text = LEVEL3.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    four = tmp_path / "four.log"
    four.write_text(text)
    c = compare(a, parse_trace(four), floor=floor)
    assert c.logits is not None and c.logits.excess is not None
    assert (c.logits.excess.exceed, c.logits.excess.counts) == (4, True)
    assert c.blocks_logit_differing >= 1 and c.logits.rows_within_noise == 0


def test_no_json_number_is_ever_a_string() -> None:
    from difftest.core.jsonout import dumps

    text = dumps({"max": float("inf"), "rows": [float("-inf"), float("nan"), 1.5, 2]})
    assert json.loads(text) == {"max": None, "rows": [None, None, 1.5, 2]}


def test_a_floor_comparison_on_two_traces_says_the_floor_is_not_applied(tmp_path: Path) -> None:
    twin = second_capture(tmp_path)
    r = cli("compare", "--trace-a", LEVEL3, "--trace-b", twin, "-c", "nondet", "-f", "json")
    # a named comparison applies to two traces with its toggle and its arms' evidence: these
    # traces show no lane, so they cannot stand for its arms
    assert r.exit_code == 3 and as_json(r)["verdict"] == "inert", r.output
    from difftest import api

    rep = api.compare_traces(LEVEL3, twin, comparison="nondet")
    assert rep.verdict.reasons[-1] == (
        "noise_runs = 3 not applied: a noise floor needs runs of paged-nondet, and two traces "
        "were given (judged without a floor)")
