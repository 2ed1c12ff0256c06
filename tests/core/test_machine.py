"""What a thresholds file records of its machine, and what `check` says of another one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from difftest.core.machine import COMPARED, differences, this_machine
from difftest.core.thresholds import ThresholdError, read_thresholds

BASE = ('[thresholds]\natol = 0.0\nrtol = 0.0\nnear_tie = 0.0\n[provenance]\ncomparison = "c"\n'
        'inputs = ["1", "2"]\nseparation = inf\nlargest_benign = 0.0\n')


def test_this_machine_records_what_moves_a_float() -> None:
    m = this_machine()
    for key in COMPARED:
        assert key in m and isinstance(m[key], str), key
    assert m["numpy"] != "not installed"


def test_differences_name_the_key_and_the_simd_features_lost() -> None:
    here = {"cpu": "A", "numpy_simd": "AVX2 AVX512F", "torch": "2.1"}
    assert differences(here, here) == []
    other = {"cpu": "A", "numpy_simd": "AVX2", "torch": "2.2"}
    assert differences(here, other) == ["numpy_simd (lacks AVX512F here)",
                                        "torch (file: 2.1, here: 2.2)"]
    assert differences({"name": "x"}, {"name": "y"}) == []  # not a float-moving key


def test_a_file_whose_benign_samples_were_zero_is_bitwise_and_keeps_its_tables(
        tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(BASE + '[benign]\nlogit_level = 0.0\n[benign.near_tie_flips]\nevents = 0\n'
                    'rows = 90\nrequests = 6\neffective_rows = 90.0\n[machine]\ncpu = "X"\n')
    cal = read_thresholds(path).calibrated
    assert cal is not None and cal.bitwise and dict(cal.machine) == {"cpu": "X"}
    assert cal.near_tie_flips is not None and cal.near_tie_flips.rows == 90
    path.write_text(BASE.replace("largest_benign = 0.0", "largest_benign = 1e-6"))
    cal = read_thresholds(path).calibrated
    assert cal is not None and not cal.bitwise and cal.machine == ()


@pytest.mark.parametrize(("extra", "expected"), [
    ("[benign.near_tie_flips]\nevents = 5\nrows = 2\nrequests = 1\neffective_rows = 2.0\n",
     "[benign.near_tie_flips]: events and effective_rows must not exceed rows"),
    ("[benign.near_tie_flips]\nevents = 1\nrows = 2\n", "[benign.near_tie_flips]: key 'requests'"),
    ("[benign]\nlevel = 1\n", "[benign]: key 'level': unknown key"),
    ("[machine]\ncpu = 3\n", "[machine]: must be a table of strings"),
])
def test_a_bad_benign_or_machine_table_names_file_and_key(tmp_path: Path, extra: str,
                                                           expected: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(BASE + extra)
    with pytest.raises(ThresholdError) as info:
        read_thresholds(path)
    assert str(path) in str(info.value) and expected in str(info.value)


RATE = "[benign.{name}]\nevents = {events}\nrows = {rows}\nrequests = {requests}\n" \
       "effective_rows = {eff}\n"


@pytest.mark.parametrize(("table", "expected"), [
    # a benign interval over no independent row is [0, 1]: no gate rate could exceed it
    (RATE.format(name="near_tie_flips", events=10, rows=1000, requests=30, eff=0.0),
     "[benign.near_tie_flips]: key 'effective_rows': must be above 0"),
    (RATE.format(name="near_tie_flips", events=0, rows=0, requests=0, eff=0.0),
     "[benign.near_tie_flips]: key 'rows': must be at least 1"),
    (RATE.format(name="near_tie_flips", events=0.9, rows=1000, requests=30, eff=500.0),
     "[benign.near_tie_flips]: key 'events': must be an integer, got 0.9"),
    (RATE.format(name="near_tie_flips", events=1, rows=1000, requests=0, eff=500.0),
     "[benign.near_tie_flips]: key 'requests': must be between 1 and rows (1000), got 0"),
    (RATE.format(name="near_tie_flips", events=1, rows=10, requests=11, eff=5.0),
     "key 'requests': must be between 1 and rows (10), got 11"),
    # the rows above the benign level's 0.9 quantile are at most a tenth by construction
    ("[benign]\nlogit_level = 0.0\n"
     + RATE.format(name="above_level", events=1000, rows=1000, requests=30, eff=500.0),
     "[benign.above_level]: 1000 of 1000 rows above the benign level"),
    # every benign row an event: the benign bound is 1, no gate's rate can exceed it
    (RATE.format(name="near_tie_flips", events=1000, rows=1000, requests=30, eff=500.0),
     "[benign.near_tie_flips]: 1000 of 1000 rows over 500 effective rows: the benign rate's "
     "99% upper bound 1 reaches 0.5"),
    # a harmless-looking rate over almost no independent row: its interval is nearly [0, 1]
    (RATE.format(name="near_tie_flips", events=0, rows=1000, requests=30, eff=1e-9),
     "[benign.near_tie_flips]: 0 of 1000 rows over 1e-09 effective rows"),
    # so small that n * n underflows: still a refusal naming the key, not a division by zero
    (RATE.format(name="near_tie_flips", events=3, rows=1000, requests=30, eff=1e-300),
     "[benign.near_tie_flips]: 3 of 1000 rows over 1e-300 effective rows"),
    ("[benign]\nlogit_level = 0.0\n"
     + RATE.format(name="above_level", events=10, rows=1000, requests=30, eff=2.0),
     "[benign.above_level]: 10 of 1000 rows over 2 effective rows"),
    # a rate above a level the file does not state
    (RATE.format(name="above_level", events=10, rows=1000, requests=30, eff=500.0),
     "[benign.above_level]: a rate of rows above a level, and [benign] has no key "
     "'logit_level'"),
])
def test_an_impossible_benign_rate_is_refused_not_read_as_disarming(
        tmp_path: Path, table: str, expected: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(BASE + table)
    with pytest.raises(ThresholdError) as info:
        read_thresholds(path)
    assert str(path) in str(info.value) and expected in str(info.value)


@pytest.mark.parametrize("level", ["1e300", "0.5"])
def test_a_benign_level_above_the_largest_benign_difference_is_refused(
        tmp_path: Path, level: str) -> None:
    # calibrate's level is a quantile of the benign differences: never above their largest
    # (1e-6 here), nor above atol; a level of 1e300 would count no row of any arm above it
    path = tmp_path / "t.toml"
    path.write_text(BASE.replace("largest_benign = 0.0", "largest_benign = 1e-6")
                    .replace("atol = 0.0", "atol = 1.0") + f"[benign]\nlogit_level = {level}\n")
    with pytest.raises(ThresholdError) as info:
        read_thresholds(path)
    assert "[benign]: key 'logit_level': " in str(info.value)
    assert "above the largest benign difference 1e-06" in str(info.value)


def test_a_run_record_s_level_must_be_a_finite_number_too() -> None:
    from difftest.core.thresholds import Calibrated
    for level in (math.nan, -1.0, math.inf):
        with pytest.raises(ThresholdError, match="key 'logit_level'"):
            Calibrated.of({"path": "t.toml", "logit_level": level})


def test_an_environment_variable_every_arm_sets_itself_is_not_a_machine_difference() -> None:
    # calibrated from a shell without OMP_NUM_THREADS, checked from one that exports it: the
    # arms each set OMP_NUM_THREADS=1 themselves, so they ran alike (the bitwise gate holds)
    was = {"cpu": "A", "env": "unset"}
    now = {"cpu": "A", "env": "OMP_NUM_THREADS=1, ATEN_CPU_CAPABILITY=avx2"}
    assert differences(was, now, pinned=frozenset({"OMP_NUM_THREADS"})) == [
        "env (file: unset, here: ATEN_CPU_CAPABILITY=avx2)"]
    assert differences(was, now, pinned=frozenset({"OMP_NUM_THREADS",
                                                   "ATEN_CPU_CAPABILITY"})) == []
    assert differences(was, now) == [
        "env (file: unset, here: OMP_NUM_THREADS=1, ATEN_CPU_CAPABILITY=avx2)"]


def test_the_disarming_line_sits_above_every_rate_a_shipped_file_records() -> None:
    # the line is a choice: about twice the largest bound the shipped files carry
    from difftest.core.thresholds import DISARMING_BOUND
    shipped = Path(__file__).resolve().parents[2] / "difftest" / "configs"
    bounds = []
    for path in shipped.glob("*.thresholds.toml"):
        cal = read_thresholds(path).calibrated
        for rate in (cal.near_tie_flips, cal.above_level) if cal is not None else ():
            if rate is not None:
                bounds.append(rate.upper_bound)
    assert bounds and max(bounds) < DISARMING_BOUND / 1.5, max(bounds)


def test_a_run_record_with_a_disarming_rate_is_refused_too() -> None:
    from difftest.core.thresholds import Calibrated
    record = {"path": "t.toml", "near_tie_flips": {"events": 0, "rows": 100, "requests": 3,
                                                   "effective_rows": 1e-9}}
    with pytest.raises(ThresholdError, match=r"calibrated.near_tie_flips: 0 of 100 rows"):
        Calibrated.of(record)
