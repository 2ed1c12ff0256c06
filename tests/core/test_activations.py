"""Capture folders read by `localize --dumps`: non-finite values differ as `compare` takes them,
a dump of a dtype with no |A - B| is refused, and an .npy header is checked against its file's
size before anything is allocated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy

from conftest import cli_in
from difftest.core.activations import (BACKGROUND_FACTOR, LocalizeOutcome, abs_diff,
                                       read_dumps)
from difftest.core.errors import ExitCode, UsageError
from difftest.flow.localize import RunLocalization, localize_dumps, saved_localizations

BASE = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def folder(tmp_path: Path, name: str, *arrays: np.ndarray) -> Path:
    out = tmp_path / name
    out.mkdir()
    for i, arr in enumerate(arrays):
        np.save(out / f"{i:03d}-m{i}.npy", arr)
    return out


def with_value(value: float, at: tuple[int, int] = (1, 2)) -> np.ndarray:
    out = BASE.copy()
    out[at] = value
    return out


def test_a_nan_in_one_arm_differs_whatever_the_atol(tmp_path: Path) -> None:
    """Before, nan > atol was false: a nan in B was 'every captured module agrees', exit 0."""
    a = folder(tmp_path, "a", BASE, BASE)
    b = folder(tmp_path, "b", BASE, with_value(np.nan))
    rep = localize_dumps(a, b, atol=1.0)
    first = rep.localization.first
    assert rep.exit_code is ExitCode.DIFFER and first is not None and first.module == "m1"
    assert first.max_abs_diff == np.inf and first.nonfinite == 1 and first.where == (1, 2)
    assert rep.localization.rows == (1,)
    assert "1 value(s) non-finite in one arm only" in rep.render()
    out = cli_in(tmp_path, "localize", "--dumps", str(a), str(b), "--atol", "1")
    assert out.returncode == ExitCode.DIFFER, out.stdout + out.stderr
    assert out.stdout.startswith("first differing module: m1")


@pytest.mark.parametrize("x, y, differs", [
    (np.nan, np.nan, False), (np.inf, np.inf, False), (-np.inf, -np.inf, False),
    (np.inf, -np.inf, True), (np.inf, np.nan, True), (1.0, np.inf, True), (np.nan, 0.5, True)])
def test_non_finite_values_are_compared_as_compare_does(x: float, y: float,
                                                        differs: bool) -> None:
    d, odd = abs_diff(with_value(x), with_value(y))
    assert (odd, bool(np.isinf(d).any())) == (int(differs), differs)
    assert not np.isnan(d).any()
    assert d[0, 0] == 0.0 and (d[1, 2] == (np.inf if differs else 0.0))


def test_an_infinite_difference_survives_localize_json(tmp_path: Path) -> None:
    """JSON has no inf: the module's max |diff| is null there with its count of non-finite
    values, and the report section read back still shows an infinite difference."""
    from difftest.core.atomic import write_json_atomic

    a = folder(tmp_path, "a", BASE, BASE)
    b = folder(tmp_path, "b", BASE, with_value(np.inf))
    rep = localize_dumps(a, b)
    where = tmp_path / "run" / "localize" / "r0-3"
    where.mkdir(parents=True)
    write_json_atomic(where / "localize.json",
                      RunLocalization(tmp_path / "run", ("r0", 3), where, rep).to_json())
    assert json.loads((where / "localize.json").read_text())["modules"][1]["max_abs_diff"] is None
    (saved,) = saved_localizations(tmp_path / "run")
    assert saved.localization.first is not None
    assert saved.localization.first.max_abs_diff == np.inf
    assert saved.localization.first.nonfinite == 1


@pytest.mark.parametrize("arr, why", [
    (BASE.astype(np.complex64), "dtype complex64"),
    (np.array(["a", "b"]), "dtype <U1"),
    (np.zeros((2, 2), dtype=[("x", "f4")]), "dtype")])
def test_a_dump_that_is_not_real_numbers_is_refused(tmp_path: Path, arr: np.ndarray,
                                                    why: str) -> None:
    """Before, complex dumps were compared by their magnitudes and 'agreed'."""
    bad = folder(tmp_path, "bad", BASE, arr)
    with pytest.raises(UsageError, match=f"001-m1.npy: {why}.*real numbers"):
        read_dumps(bad)


def huge_header(path: Path, shape: tuple[int, ...], payload: bytes = b"\0" * 64) -> Path:
    with open(path, "wb") as fh:
        npy.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False,
                                        "shape": shape})
        fh.write(payload)
    return path


def test_a_header_is_checked_against_the_file_size_before_reading(tmp_path: Path) -> None:
    """A 200-byte .npy claiming 100 G float32 elements was a MemoryError from np.load."""
    a = folder(tmp_path, "a", BASE)
    b = tmp_path / "b"
    b.mkdir()
    path = huge_header(b / "000-m0.npy", (100_000, 1_000_000))
    assert path.stat().st_size < 300
    with pytest.raises(UsageError, match=r"header says shape \[100000, 1000000\] of float32 "
                                         r"\(400000000000 bytes\), the file holds 64 bytes"):
        read_dumps(b)
    huge_header(b / "000-m0.npy", (3, 4), b"\0" * 47)  # one byte short: truncated
    with pytest.raises(UsageError, match="truncated or not a dump"):
        read_dumps(b)
    out = cli_in(tmp_path, "localize", "--dumps", str(a), str(b))
    assert out.returncode == ExitCode.USAGE and "truncated" in out.stderr
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stderr


def test_a_dump_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    b = tmp_path / "b"
    (b / "000-m0.npy").mkdir(parents=True)
    with pytest.raises(UsageError, match="not a regular file"):
        read_dumps(b)


def chain(tmp_path: Path, name: str, *changes: tuple[int, np.ndarray]) -> Path:
    """Four modules of BASE's shape, some replaced."""
    arrays = [BASE * (i + 1) for i in range(4)]
    for i, arr in changes:
        arrays[i] = arr
    return folder(tmp_path, name, *arrays)


def rounded(arr: np.ndarray) -> np.ndarray:
    """A whole-model background: every value rounded to bfloat16's 8 significant bits."""
    bits = arr.astype(np.float32).view(np.uint32)
    return ((bits + 0x8000) & 0xFFFF0000).view(np.float32)


def test_a_difference_from_the_first_module_on_names_no_module(tmp_path: Path) -> None:
    """Before, a bf16 background made localize name the first module (the embedding) whatever
    the fault; now it says that the whole model differs and names none."""
    a = chain(tmp_path, "a")
    b = chain(tmp_path, "b", *((i, rounded(BASE * (i + 1))) for i in range(4)))
    rep = localize_dumps(a, b)
    loc = rep.localization
    assert loc.outcome is LocalizeOutcome.WHOLE_MODEL and loc.first is None
    assert loc.start is not None and loc.start.module == "m0"
    assert rep.exit_code is ExitCode.DIFFER
    text = loc.describe()
    assert text.startswith("every captured module differs beyond 0, from the first one (m0")
    assert "no module is named as the cause" in text and "--baseline ARM" in text
    # a difference that starts later is named as before, its predecessor agreeing
    later = localize_dumps(a, chain(tmp_path, "later", (2, BASE * 3.5))).localization
    assert later.outcome is LocalizeOutcome.FIRST and later.first is not None
    assert later.first.module == "m2" and later.describe().endswith("m1 agreed")


def test_against_a_baseline_the_first_module_beyond_its_background_is_named(
        tmp_path: Path) -> None:
    """B0 carries the background (every module rounded), B the same plus a fault in m2: every
    module differs from A, and the first beyond its own background is m2."""
    a = chain(tmp_path, "a")
    background = [(i, rounded(BASE * (i + 1))) for i in range(4)]
    b0 = chain(tmp_path, "b0", *background)
    faulty = rounded(BASE * 3 * 1.01)
    b = chain(tmp_path, "b", *background[:2], (2, faulty), (3, rounded(BASE * 4 * 1.01)))
    rep = localize_dumps(a, b, baseline=b0)
    loc = rep.localization
    assert rep.exit_code is ExitCode.DIFFER and rep.baseline == b0
    assert loc.outcome is LocalizeOutcome.FIRST and loc.factor == BACKGROUND_FACTOR
    assert loc.first is not None and loc.first.module == "m2"
    assert [m.ratio for m in loc.modules[:2]] == [1.0, 1.0]
    assert loc.first.ratio is not None and loc.first.ratio > 2
    assert loc.describe().startswith("first module beyond its background: m2 (RMS |A - B|")
    assert "| ratio |" in rep.render()
    # without the baseline the same pair is a whole-model difference
    assert localize_dumps(a, b).localization.outcome is LocalizeOutcome.WHOLE_MODEL
    # B within B0's background (B0's rounding, but for one value of m3 that a change under
    # test moved back to A's, as bf16 rounding absorbs a small noise): exit 0
    last = rounded(BASE * 4)
    last[1, 2] = BASE[1, 2] * 4
    within = chain(tmp_path, "within", *background[:3], (3, last))
    same = localize_dumps(a, within, baseline=b0)
    assert same.localization.outcome is LocalizeOutcome.BACKGROUND
    assert same.exit_code is ExitCode.OK and same.localization.first is None
    assert same.localization.describe().startswith(
        f"every captured module is within {BACKGROUND_FACTOR:g} x its background")


def test_a_baseline_that_is_b_excuses_nothing(tmp_path: Path) -> None:
    """Before, B's own capture as the baseline made B's difference its own background: every
    module 'within its background', exit 0, whatever B computed. Its own folder is refused
    (exit 2); a copy, byte-identical at every module, measures nothing apart from B (exit 3)."""
    a = chain(tmp_path, "a")
    b = chain(tmp_path, "b", (2, BASE * 30))  # m2 far off: a fault no background excuses
    with pytest.raises(UsageError, match=r"--baseline .*b is arm B's capture \(.*b\): a baseline "
                                         "must be a run that differs from B only by benign"):
        localize_dumps(a, b, baseline=tmp_path / "." / "b")
    copy = folder(tmp_path, "copy", *(np.load(p) for p in sorted(b.iterdir())))
    rep = localize_dumps(a, b, baseline=copy)
    assert rep.localization.outcome is LocalizeOutcome.BASELINE_IS_B
    assert rep.exit_code is ExitCode.UNINFORMATIVE and not rep.localization.differs
    assert rep.render().startswith(f"baseline {copy} and B {b}: the baseline's capture is "
                                   "byte-identical to B's at every one of the 4 captured modules")
    # a baseline of its own (another m3, A's m2) names B's m2, beyond its background
    other = chain(tmp_path, "other", (3, BASE * 4.5))
    named = localize_dumps(a, b, baseline=other).localization
    assert named.outcome is LocalizeOutcome.FIRST and named.first is not None
    assert named.first.module == "m2"
    cli = ["localize", "--dumps", str(a), str(b), "--baseline"]
    out = cli_in(tmp_path, *cli, str(b))
    assert out.returncode == ExitCode.USAGE and "is arm B's capture" in out.stderr, out.stderr
    out = cli_in(tmp_path, *cli, str(copy))
    assert out.returncode == ExitCode.UNINFORMATIVE, out.stdout + out.stderr
    assert "byte-identical to B's at every one of the 4 captured modules" in out.stdout


def test_localize_dumps_takes_the_baseline_on_the_command_line(tmp_path: Path) -> None:
    a = chain(tmp_path, "a")
    background = [(i, rounded(BASE * (i + 1))) for i in range(4)]
    b0 = chain(tmp_path, "b0", *background)
    b = chain(tmp_path, "b", *background[:3], (3, rounded(BASE * 4 * 1.01)))
    cli = ["localize", "--dumps", str(a), str(b)]
    out = cli_in(tmp_path, *cli, "--baseline", str(b0))
    assert out.returncode == ExitCode.DIFFER, out.stdout + out.stderr
    assert out.stdout.startswith("first module beyond its background: m3 (RMS |A - B|")
    out = cli_in(tmp_path, *cli)
    assert out.returncode == ExitCode.DIFFER
    assert out.stdout.startswith("every captured module differs beyond 0, from the first")
    out = cli_in(tmp_path, *cli, "--config", "x.toml")
    assert out.returncode == ExitCode.USAGE and "--config names where the baseline" in out.stderr


def test_a_module_without_background_is_beyond_it_at_any_difference(tmp_path: Path) -> None:
    """Where B0 equals A to the bit there is no background: any difference of B is beyond."""
    a = chain(tmp_path, "a")
    b = chain(tmp_path, "b", (1, with_value(float(BASE[1, 2]) * 2 + 1e-3) * 2))
    loc = localize_dumps(a, b, baseline=a).localization
    assert loc.first is not None and loc.first.module == "m1" and loc.first.ratio == np.inf


def test_a_baseline_with_values_non_finite_where_a_has_none_is_refused(tmp_path: Path) -> None:
    """Its background there would be infinite and excuse any difference of B."""
    a = chain(tmp_path, "a")
    b0 = chain(tmp_path, "b0", (1, with_value(np.nan)))
    b = chain(tmp_path, "b", (1, BASE * 5))
    with pytest.raises(UsageError, match=r"not finite at 1 module\(s\): m1 \(.*b0/001-m1.npy: 1 "
                                         r"value\(s\) non-finite in the baseline or A"):
        localize_dumps(a, b, baseline=b0)


def test_a_background_beyond_float64_excuses_nothing(tmp_path: Path) -> None:
    """Before, float64 dumps whose |A - B0| squares past float64 gave an infinite RMS
    background, a ratio of nan or 0, and 'every captured module is within its background',
    exit 0, whatever B held there. Every such module is named with its file, exit 2, and no
    warning escapes under -W error."""
    big = [np.asarray(BASE * (i + 1), dtype=np.float64) * 1e300 for i in range(3)]
    a = folder(tmp_path, "a", *big)
    b0 = folder(tmp_path, "b0", big[0], -big[1], big[2] * 2)
    b = folder(tmp_path, "b", big[0], big[1] * 3, big[2] * 1.5)
    with pytest.raises(UsageError) as err:
        localize_dumps(a, b, baseline=b0)
    said = str(err.value)
    assert said.startswith("the baseline's background |A - B0| is not finite at 2 module(s): "
                           f"m1 ({b0 / '001-m1.npy'}: RMS |A - B0| is inf, beyond float64); "
                           f"m2 ({b0 / '002-m2.npy'}: RMS |A - B0| is inf"), said
    assert "cannot excuse a difference" in said
    out = subprocess.run([sys.executable, "-W", "error", "-m", "difftest", "localize", "--dumps",
                          str(a), str(b), "--baseline", str(b0)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == ExitCode.USAGE, out.stdout + out.stderr
    assert "not finite at 2 module(s)" in out.stderr and "Traceback" not in out.stderr


def test_a_baseline_of_other_modules_is_refused(tmp_path: Path) -> None:
    a, b = chain(tmp_path, "a"), chain(tmp_path, "b")
    other = folder(tmp_path, "other", BASE, BASE)
    with pytest.raises(UsageError, match="the capture of A and the baseline's list different"):
        localize_dumps(a, b, baseline=other)


def test_a_baseline_that_is_no_background_for_b_is_refused(tmp_path: Path) -> None:
    """Before, a baseline of another model (other weights: B nearer to A than it at every
    module, every ratio far below 1) was 'every captured module is within 1.001 x its
    background', exit 0, whatever B computed. Where B first departs from it (the first module,
    here) |A - B| is the shortest side of the triangle A, B, B0: refused, exit 2, naming the
    module. A right baseline passes, with B's change anywhere, the first module included."""
    a = chain(tmp_path, "a")
    background = [(i, rounded(BASE * (i + 1))) for i in range(4)]
    b = chain(tmp_path, "b", *background[:2], *((i, rounded(BASE * (i + 1) * 1.05))
                                                for i in (2, 3)))
    other = chain(tmp_path, "other", *((i, rounded(BASE[::-1] * (i + 1) + 0.25))
                                       for i in range(4)))
    with pytest.raises(UsageError) as err:
        localize_dumps(a, b, baseline=other)
    said = str(err.value)
    assert said.startswith("the baseline is no background for B: where B first departs from it, "
                           f"at m0 ({b / '000-m0.npy'}), B is nearer to A (RMS |A - B| "), said
    assert "B lacks the baseline's difference from A" in said
    b0 = chain(tmp_path, "b0", *background)
    named = localize_dumps(a, b, baseline=b0).localization
    assert named.first is not None and named.first.module == "m2"
    # B's change in the first module (an embedding fault): B departs from B0 there too, away
    # from A, and the walk names it
    first = chain(tmp_path, "first", (0, rounded(BASE * 1.05)), *background[1:])
    at0 = localize_dumps(a, first, baseline=b0).localization
    assert at0.first is not None and at0.first.module == "m0"
    out = cli_in(tmp_path, "localize", "--dumps", str(a), str(b), "--baseline", str(other))
    assert out.returncode == ExitCode.USAGE, out.stdout + out.stderr
    assert "no background for B: where B first departs from it, at m0" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
