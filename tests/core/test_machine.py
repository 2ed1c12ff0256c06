"""What a thresholds file records of its machine, and what `check` says of another one."""

from __future__ import annotations

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
