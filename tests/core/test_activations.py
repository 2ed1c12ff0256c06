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

from difftest.core.activations import abs_diff, read_dumps
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
    out = subprocess.run([sys.executable, "-m", "difftest", "localize", "--dumps", str(a),
                          str(b), "--atol", "1"], capture_output=True, text=True, timeout=120)
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

    a = folder(tmp_path, "a", BASE)
    b = folder(tmp_path, "b", with_value(np.inf))
    rep = localize_dumps(a, b)
    where = tmp_path / "run" / "localize" / "r0-3"
    where.mkdir(parents=True)
    write_json_atomic(where / "localize.json",
                      RunLocalization(tmp_path / "run", ("r0", 3), where, rep).to_json())
    assert json.loads((where / "localize.json").read_text())["modules"][0]["max_abs_diff"] is None
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
    out = subprocess.run([sys.executable, "-m", "difftest", "localize", "--dumps", str(a),
                          str(b)], capture_output=True, text=True, timeout=120)
    assert out.returncode == ExitCode.USAGE and "truncated" in out.stderr
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stderr


def test_a_dump_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    b = tmp_path / "b"
    (b / "000-m0.npy").mkdir(parents=True)
    with pytest.raises(UsageError, match="not a regular file"):
        read_dumps(b)
