"""`difftest calibrate`: the tolerance bound, thresholds measured on held-out inputs of the
reference runner (replayed from its captures, tests/data/calibrate/), a refusal when benign and
wrong overlap, and compare naming the file its thresholds came from."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.flow.calibrate import (chi2_even_quantile, nonparametric_confidence, upper_bound)
from difftest.config import load_config
from difftest.core.errors import ConfigError, ExitCode, RefusedOutput, UsageError
from difftest.core.kinds import DecodingMode
from planned import run_comparison
from difftest.flow.calibrate import calibrate
from difftest import api


def test_chi2_quantile_matches_its_closed_form_and_a_table_value() -> None:
    # 2 degrees of freedom: P(X <= x) = 1 - exp(-x/2), so x = -2 ln(1 - p)
    assert chi2_even_quantile(2, 0.05) == pytest.approx(-2 * math.log(0.95), rel=1e-9)
    assert chi2_even_quantile(6, 0.05) == pytest.approx(1.635383, rel=1e-5)  # standard tables


def test_the_distribution_free_bound_needs_299_samples() -> None:
    assert nonparametric_confidence(298) < 0.95 <= nonparametric_confidence(299)
    big = upper_bound([1.0] * 299)
    assert big.value == 1.0 and big.multiplier == 1.0 and "nonparametric" in big.method


def test_few_samples_get_the_exponential_bound_sized_by_n() -> None:
    three = upper_bound([1.0, 1.0, 1.0])
    assert three.multiplier == pytest.approx(2 * math.log(100) * 3 / 1.635383, rel=1e-5)
    assert "n = 3 < 299" in three.method
    ten = upper_bound([1.0] * 10)
    assert 1.0 < ten.multiplier < three.multiplier  # more inputs, a tighter bound


def test_a_zero_sample_stays_bitwise() -> None:
    assert upper_bound([0.0, 0.0]).value == 0.0


CAPTURES = Path(__file__).parents[1] / "data" / "calibrate"  # scripts/capture_replay_traces.py
# An arm replaying the reference runner's captures of `--requests 1 --steps 3 --seed INPUT
# --attention-kernel KERNEL` at level 3: it prints the capture of its kernel on its input, under
# the mutation its launch sets (DIFFTEST_MUTATION) and with `--nondeterministic` where a
# mutation appends it, as the runner printed them.
REPLAY_KERNEL = "; ".join([
    "import os, sys", "folder, seed, kernel, *extra = sys.argv[1:]",
    "mutation = os.environ.get('DIFFTEST_MUTATION', 'none')",
    "name = kernel + ('' if mutation == 'none' else '+' + mutation)"
    " + ('+nondeterministic' if '--nondeterministic' in extra else '')",
    "sys.stdout.write('generated\\n')",
    "sys.stderr.write(open(f'{folder}/{name}-{seed}.log', encoding='utf-8').read())"])
RUN = f'"{{python}}", "-c", {json.dumps(REPLAY_KERNEL)}, {json.dumps(str(CAPTURES))}, "{{seed}}"'
CONFIG = f"""
[arms.single]
command = [{RUN}, "single"]
env = {{ VT_SPEC_TRACE = "3", DIFFTEST_MUTATION = "none" }}
[arms.split]
command = [{RUN}, "split"]
env = {{ VT_SPEC_TRACE = "3", DIFFTEST_MUTATION = "none" }}
[mutations.reorder]
args = ["--nondeterministic"]
[comparisons.kernel]
arm_a = "single"
arm_b = "split"
gate_input = 0
calibration_inputs = [1, 2]
mutations = ["causal-mask"]
thresholds = "kernel.toml"
[comparisons.overlap]
arm_a = "single"
arm_b = "split"
gate_input = 0
calibration_inputs = [1, 2]
mutations = ["reorder"]
thresholds = "overlap.toml"
"""


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cal")
    (root / "difftest.toml").write_text(CONFIG)
    return root


def test_calibrate_sets_thresholds_on_held_out_inputs_and_compare_names_them(
        configured: Path) -> None:
    config = load_config(configured / "difftest.toml")
    spec = config.comparison("kernel")
    with pytest.raises(UsageError, match="kernel.toml does not exist yet; run `difftest "
                                         "calibrate -c kernel`"):
        run_comparison(config, spec, run_root=configured / "runs", progress=False)
    cal = calibrate(config, spec, run_root=configured / "runs", progress=False)
    assert cal.exit_code is ExitCode.OK, cal.summary()
    assert cal.inputs == ("1", "2") and len(cal.benign) == 2
    assert 0 < max(cal.benign) < 1e-4  # a float reordering, not a bug
    assert cal.atol.value == pytest.approx(max(cal.benign) * cal.atol.multiplier)
    assert cal.separation is not None and cal.separation > 1
    text = (configured / "kernel.toml").read_text()
    for key in ("atol =", "near_tie =", "inputs = [\"1\", \"2\"]", "n = 2", "multiplier =",
                "separation =", "git_sha =", "date ="):
        assert key in text, key
    # the gate runs on input 0 with the calibrated thresholds, and says where they came from
    config = load_config(configured / "difftest.toml")
    spec = config.comparison("kernel")
    assert spec.rules.atol == cal.atol.value
    rep = run_comparison(config, spec, run_root=configured / "runs", progress=False)
    assert rep.arm_a.trace is not None and rep.arm_a.trace.config.values["seed"] == "0"
    said = [r for r in rep.verdict.reasons if r.startswith("thresholds:")]
    assert len(said) == 1 and "kernel.toml (calibrated: inputs" in said[0], rep.verdict.reasons
    assert rep.exit_code is ExitCode.OK, rep.verdict.reasons


def test_calibrate_refuses_when_a_probe_hides_among_benign_differences(configured: Path) -> None:
    config = load_config(configured / "difftest.toml")
    cal = calibrate(config, config.comparison("overlap"), run_root=configured / "runs",
                    progress=False)
    assert cal.exit_code is ExitCode.UNINFORMATIVE, cal.summary()
    assert cal.separation is not None and cal.separation < 1
    assert any("cannot tell benign from wrong" in line for line in cal.summary())
    assert not (configured / "overlap.toml").exists()


@pytest.mark.parametrize(("extra", "expected"), [
    ("gate_input = 1\ncalibration_inputs = [1, 2]\n", "holds the gate input '1'"),
    ('thresholds = "t.toml"\natol = 0.1\n', "key 'atol': set by the thresholds file"),
    ("calibration_inputs = [1, 1]\n", "names an input twice"),
])
def test_bad_calibration_keys_name_the_key(tmp_path: Path, extra: str, expected: str) -> None:
    path = tmp_path / "d.toml"
    path.write_text('[arms.a]\ncommand = ["x", "{seed}"]\n[comparisons.c]\narm_a = "a"\n'
                    'arm_b = "a"\n' + extra)
    with pytest.raises(ConfigError, match="comparisons.c"):
        load_config(path)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value)


def test_a_broken_thresholds_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text("[thresholds]\natol = -1\nrtol = 0\nnear_tie = 0\n")
    path = tmp_path / "d.toml"
    path.write_text('[arms.a]\ncommand = ["x"]\n[comparisons.c]\narm_a = "a"\narm_b = "a"\n'
                    'thresholds = "t.toml"\n')
    with pytest.raises(ConfigError, match="key 'thresholds': .*t.toml: \\[thresholds\\]: key "
                                          "'atol': must be a finite number >= 0"):
        load_config(path)


PRINTED_ARM = Path(__file__).parents[1] / "data" / "arms" / "printed_arm.py"


def _printed_config(root: Path, shift: str, b_args: str = '"--noise", "2e-5"',
                    inputs: str = "[1, 2, 3]") -> Path:
    """Arms printing `%.6g` (a quantum of 1e-4 near 10), B off by at most 2e-5, so each benign
    difference prints as one quantum; the probe moves large top-1 logits by `shift`."""
    arm = f'"{{python}}", "{PRINTED_ARM}", "--seed", "{{seed}}"'
    path = root / "difftest.toml"
    path.write_text(f"""
[arms.a]
command = [{arm}]
[arms.b]
command = [{arm}, {b_args}]
[mutations.bump]
args = ["--mut", "{shift}"]
[comparisons.pair]
arm_a = "a"
arm_b = "b"
gate_input = 0
calibration_inputs = {inputs}
thresholds = "pair.thresholds.toml"
mutations = ["bump"]
""")
    return path


@pytest.mark.parametrize(("shift", "writes"), [("0.00165", False), ("0.0019", True)])
def test_separation_is_judged_as_the_gate_judges(tmp_path: Path, shift: str,
                                                 writes: bool) -> None:
    # atol is 16.9 x the 1e-4 benign print; the 0.00165 probe prints 0.0017 above it, but once
    # the half quanta are taken off (what the gate does) it is 0.0016, within atol: calibrate
    # must refuse, or `check` would find its own probe survive the thresholds it wrote
    path = _printed_config(tmp_path, shift)
    config = load_config(path)
    cal = calibrate(config, config.comparison("pair"), run_root=tmp_path / "runs",
                    progress=False)
    assert cal.atol.value == pytest.approx(16.8958e-4, rel=1e-4), cal.summary()
    assert (cal.exit_code is ExitCode.OK) is writes, cal.summary()
    assert (tmp_path / "pair.thresholds.toml").exists() is writes
    assert cal.separation is not None and (cal.separation >= 1) is writes
    if writes:
        # what calibrate wrote, the gate holds: its probe fails the comparison there
        result = api.check(load_config(path), run_root=tmp_path / "runs", progress=False)
        assert result.exit_code is ExitCode.OK, [r.verdict.reasons for r in result.reports]


@pytest.mark.parametrize(("inputs", "writes"), [("[1]", False), ("[1, 2]", True)])
def test_one_input_bounds_nothing_even_where_every_difference_is_a_certain_catch(
        tmp_path: Path, inputs: str, writes: bool) -> None:
    # a bitwise benign pair (atol 0): any difference of the probe's is a certain catch, of
    # strength inf; one input still says nothing of whether the probe moves the next one
    path = _printed_config(tmp_path, "0.0019", b_args='"--noise", "0"', inputs=inputs)
    config = load_config(path)
    cal = calibrate(config, config.comparison("pair"), run_root=tmp_path / "runs",
                    progress=False)
    said = "\n".join(cal.summary())
    assert cal.atol.value == 0.0 and cal.probes[0].strengths(0.0, 0.0) == [math.inf] * len(
        cal.inputs), said
    assert (cal.exit_code is ExitCode.OK) is writes, said
    assert (tmp_path / "pair.thresholds.toml").exists() is writes
    if writes:
        assert cal.separation == math.inf
        assert "2 catches of 2 bound the catch rate on an unseen input only from 0.22 up" in said
    else:
        assert cal.separation == 0.0
        assert ("one input shows no spread: the 95% lower bound of a probe's strength on an "
                "unseen input needs 2 inputs or more") in said, said
        assert "about 2 inputs would reach it" in said and "nothing written (exit 3)" in said


def test_calibrate_refuses_a_benign_pair_the_gate_fails_on_its_own_input(tmp_path: Path) -> None:
    # on input 2, B commits another token at r0 pos 4 (a target flip its traced logits do not
    # show); D_2 covers only the rows before the streams parted, so the separation holds, but
    # the gate at these thresholds is DIFFER on that input: the file would certify a pair its
    # own gate calls wrong
    path = _printed_config(tmp_path, "0.0019", b_args='"--noise", "2e-5", "--part-on", "2"')
    config = load_config(path)
    cal = calibrate(config, config.comparison("pair"), run_root=tmp_path / "runs",
                    progress=False)
    said = "\n".join(cal.summary())
    assert cal.caught and cal.bounded, said  # the separation alone would have written it
    assert cal.exit_code is ExitCode.UNINFORMATIVE, said
    assert not (tmp_path / "pair.thresholds.toml").exists()
    assert [(g.input, g.kind.value) for g in cal.gated] == [
        ("1", "agree"), ("2", "differ"), ("3", "agree")], said
    assert ("benign pair at these thresholds, input 2: differ: " in said
            and "the emitted streams of request r0 differ at position 4" in said), said
    assert "fails the benign pair on its own calibration input(s)" in said
    # the thresholds it measured are kept in the run directory: put in place, they make the
    # gate itself (compare of that input's captures) DIFFER, and AGREE on input 1
    (tmp_path / "pair.thresholds.toml").write_text(
        (cal.run_dir / "pair.thresholds.toml").read_text())
    for value, kind in (("2", "differ"), ("1", "agree")):
        rep = api.compare_traces(cal.run_dir / f"A_a_{value}.stderr",
                                 cal.run_dir / f"B_b_{value}.stderr", comparison="pair",
                                 config=path)
        assert rep.verdict.kind.value == kind, rep.verdict.reasons


def test_no_probe_is_exit_3_and_writes_nothing(tmp_path: Path) -> None:
    path = _printed_config(tmp_path, "0.0019")
    path.write_text(path.read_text().replace('mutations = ["bump"]', "mutations = []"))
    config = load_config(path)
    cal = calibrate(config, config.comparison("pair"), run_root=tmp_path / "runs",
                    progress=False)
    assert cal.exit_code is ExitCode.UNINFORMATIVE and cal.gated is None
    assert any("no probe configured" in line for line in cal.summary())
    assert not (tmp_path / "pair.thresholds.toml").exists()


def test_a_teacher_forced_comparison_is_not_judged_on_free_runs(tmp_path: Path) -> None:
    # calibrate runs every arm free; the gate of a teacher-forced comparison runs B on A's
    # stream, where it cannot part: a free run's parting is no reason to refuse, and calibrate
    # says it did not judge the pair at the gate
    path = _printed_config(tmp_path, "0.0019", b_args='"--noise", "2e-5", "--part-on", "2"')
    path.write_text(path.read_text() + "teacher_force = true\n")
    config = load_config(path)
    cal = calibrate(config, config.comparison("pair"), run_root=tmp_path / "runs",
                    progress=False)
    said = "\n".join(cal.summary())
    assert cal.gated is None and cal.exit_code is ExitCode.OK, said
    assert "the benign pair was not judged at the gate: the comparison is teacher-forced" in said


GOOD_PROVENANCE = ('[provenance]\ncomparison = "c"\ninputs = ["1", "2"]\nn = 2\n'
                   'separation = 3.5\n')


def _with_thresholds(tmp_path: Path, file_text: str, gate: str = "0") -> Path:
    (tmp_path / "t.toml").write_text("[thresholds]\natol = 0.002\nrtol = 0.0\nnear_tie = 0.004\n"
                                     + file_text)
    path = tmp_path / "d.toml"
    path.write_text('[arms.a]\ncommand = ["x", "{seed}"]\n[comparisons.c]\narm_a = "a"\n'
                    f'arm_b = "a"\ngate_input = {gate}\nthresholds = "t.toml"\n')
    return path


def test_a_calibrated_thresholds_file_is_read_with_its_provenance(tmp_path: Path) -> None:
    spec = load_config(_with_thresholds(tmp_path, GOOD_PROVENANCE)).comparison("c")
    assert (spec.rules.atol, spec.rules.near_tie) == (0.002, 0.004)
    assert "separation 3.5" in spec.threshold_origin


@pytest.mark.parametrize(("file_text", "gate", "expected"), [
    (GOOD_PROVENANCE.replace('"c"', '"other"'), "0",
     "[provenance]: key 'comparison': calibrated for comparison 'other', not 'c'"),
    (GOOD_PROVENANCE, "1", "[provenance]: key 'inputs': holds the gate input '1'"),
    (GOOD_PROVENANCE.replace('"1"', '"01"'), '"1"', "holds the gate input '1' (as '01')"),
    (GOOD_PROVENANCE.replace("3.5", "0.2"), "0",
     "[provenance]: key 'separation': 0.2 < 1: these thresholds cannot tell benign from wrong"),
    ("", "0", "[provenance]: missing: nothing says what these thresholds were calibrated for"),
    (GOOD_PROVENANCE + "[extra]\nx = 1\n", "0", "[extra]: unknown table"),
    (GOOD_PROVENANCE + "hand_tuned = true\n", "0", "[provenance]: key 'hand_tuned': unknown key"),
    (GOOD_PROVENANCE.replace("separation = 3.5\n", ""), "0",
     "[provenance]: key 'separation': missing"),
    (GOOD_PROVENANCE.replace('["1", "2"]', "[]"), "0",
     "[provenance]: key 'inputs': empty: thresholds are measured on held-out inputs"),
    # atol raised by hand (0.002 where calibrate's bound was 2 x 0.0005 = 0.001): refused
    (GOOD_PROVENANCE + "multiplier = 2.0\nlargest_benign = 0.0005\n", "0",
     "[thresholds]: key 'atol': 0.002 is not the bound calibrate wrote (multiplier 2 x "
     "largest_benign 0.0005 = 0.001)"),
    # the bound calibrate wrote (4 x 0.0005): read
    (GOOD_PROVENANCE + "multiplier = 4.0\nlargest_benign = 0.0005\n", "0", None),
])
def test_a_thresholds_file_not_calibrated_for_this_gate_is_refused(
        tmp_path: Path, file_text: str, gate: str, expected: str | None) -> None:
    if expected is None:  # the consistent file: read
        load_config(_with_thresholds(tmp_path, file_text, gate))
        return
    with pytest.raises(ConfigError) as info:
        load_config(_with_thresholds(tmp_path, file_text, gate))
    said = str(info.value)
    assert "comparisons.c" in said and "key 'thresholds'" in said and "t.toml" in said, said
    assert expected in said, said


@pytest.mark.parametrize(("kind", "said"), [("folder", "a folder"), ("fifo", "a FIFO")])
def test_a_thresholds_file_that_is_a_folder_or_fifo_is_refused_as_such(
        tmp_path: Path, kind: str, said: str) -> None:
    """Not "does not exist yet" (that is for a file calibrate has still to write), and a FIFO
    is never opened (reading it would wait for a writer)."""
    import os

    path = _with_thresholds(tmp_path, GOOD_PROVENANCE)
    (tmp_path / "t.toml").unlink()
    if kind == "folder":
        (tmp_path / "t.toml").mkdir()
    else:
        os.mkfifo(tmp_path / "t.toml")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"key 'thresholds': {tmp_path / 't.toml'} is {said}, not a thresholds file" in \
        str(info.value), str(info.value)


@pytest.mark.parametrize(("extra", "expected"), [
    ('gate_input = 0\ncalibration_inputs = ["00", 1, 2]\n', "holds the gate input '0' (as '00')"),
    ('gate_input = "+2"\ncalibration_inputs = [1, 2]\n', "holds the gate input '+2' (as '2')"),
    ('calibration_inputs = [1, "01"]\n', "names an input twice ('1' and '01')"),
])
def test_inputs_are_compared_as_the_runner_reads_them(tmp_path: Path, extra: str,
                                                      expected: str) -> None:
    path = tmp_path / "d.toml"
    path.write_text('[arms.a]\ncommand = ["x", "{seed}"]\n[comparisons.c]\narm_a = "a"\n'
                    'arm_b = "a"\n' + extra)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "comparisons.c" in str(info.value) and "key 'calibration_inputs'" in str(info.value)
    assert expected in str(info.value), str(info.value)
    # names that are no integers stay as written: "a" and "A" are two inputs
    path.write_text('[arms.a]\ncommand = ["x", "{seed}"]\n[comparisons.c]\narm_a = "a"\n'
                    'arm_b = "a"\ngate_input = "a"\ncalibration_inputs = ["A", "b"]\n')
    assert load_config(path).comparison("c").calibration_inputs == ("A", "b")


def test_calibrate_replaces_a_broken_thresholds_file(tmp_path: Path) -> None:
    # the documented fix for a bad file is to recalibrate: loading the config must not stop it
    path = _printed_config(tmp_path, "0.0019")
    target = tmp_path / "pair.thresholds.toml"
    target.write_text("[thresholds]\natol = -1\n")
    with pytest.raises(ConfigError, match="key 'thresholds'"):
        load_config(path)
    r = subprocess.run([sys.executable, "-m", "difftest", "calibrate", "--config", str(path),
                        "-c", "pair", "--run-root", str(tmp_path / "runs"), "--no-progress"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"thresholds written to {target}" in r.stdout
    assert load_config(path).comparison("pair").threshold_origin.startswith(str(target))


def test_calibrate_refuses_a_file_it_cannot_write_before_running_anything(
        tmp_path: Path) -> None:
    path = _printed_config(tmp_path, "0.0019")
    (tmp_path / "plain").write_text("a file, not a folder\n")
    path.write_text(path.read_text().replace('"pair.thresholds.toml"', '"plain/t.toml"'))
    config = load_config(path)
    with pytest.raises(RefusedOutput, match=f"{tmp_path / 'plain' / 't.toml'}: cannot be written: "
                                            f"{tmp_path / 'plain'} is not a folder"):
        calibrate(config, config.comparison("pair"), run_root=tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists()  # no arm ran


def test_a_flip_is_sized_by_the_margin_the_near_tie_rule_judges() -> None:
    # B drafts A's third token: A's top-1/top-2 margin is 0.1, but the gap between the two
    # flipped tokens, the margin a near-tie is judged on, is 2.0 in A (and 0.3 in B); a
    # calibration must measure what the gate compares, or its near_tie would not match the gate
    from spec_traces import Step, trace_lines

    from difftest.flow.calibrate import _flip_margin
    from difftest.analysis.compare import compare as compare_traces
    from difftest.core.rules import Rules
    from difftest.trace import parse_lines

    a = [Step("r", 0, (((5, 10.0), (6, 9.9), (7, 8.0)),))]
    b = [Step("r", 0, (((7, 10.0), (5, 9.7), (6, 9.6)),))]
    c = compare_traces(parse_lines(trace_lines(a)), parse_lines(trace_lines(b)),
                       Rules(near_tie=0.0))
    assert _flip_margin(c) == pytest.approx(2.0)


def test_calibrate_honours_jobs_and_takes_prompts_as_inputs(tmp_path: Path) -> None:
    from difftest.core.names import on_input
    path = tmp_path / "d.toml"
    path.write_text('[arms.a]\ncommand = ["x", "--prompt", "{seed}"]\n[comparisons.c]\n'
                    'arm_a = "a"\narm_b = "a"\ngate_input = "the gated prompt"\n'
                    'calibration_inputs = ["Once upon a time", "7"]\nthresholds = "t.toml"\n'
                    'mutations = ["causal-mask"]\n')
    config = load_config(path)
    spec = config.comparison("c")
    assert spec.calibration_inputs == ("Once upon a time", "7")
    # a prompt names its arm by its place, a word by itself
    assert (on_input("A", "a", "Once upon a time", 0), on_input("A", "a", "7", 1)) == (
        "A:a@input1", "A:a@7")
    with pytest.raises(UsageError, match="--jobs must be an integer from 1"):
        calibrate(config, spec, run_root=tmp_path / "runs", progress=False, jobs=0)


def test_a_sampled_comparison_has_no_thresholds_to_calibrate(configured: Path) -> None:
    """Its level is alpha: nothing is run, and the refusal says why (not that the arms print
    no block logits)."""
    config = load_config(configured / "difftest.toml")
    spec = config.comparison("kernel")
    sampled = dataclasses.replace(spec, rules=dataclasses.replace(spec.rules,
                                                                 decoding=DecodingMode.SAMPLED))
    with pytest.raises(UsageError, match="judged in distribution, with no atol, rtol or "
                                         "near_tie to calibrate"):
        calibrate(config, sampled, run_root=configured / "sampled-runs", progress=False)
    assert not (configured / "sampled-runs").exists()
