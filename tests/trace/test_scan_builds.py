"""The compiled scanner built the ways other platforms build it, here: with double arithmetic on
the x87 (i386's default: each operation rounded to 64 bits, then to 53 again) and with a long
double of 53 bits (no 64-bit path). Its exactness must not depend on the build: every float
reads as Python's float() reads it."""

from __future__ import annotations

import platform
import shutil
import struct
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests import c_builds

SOURCE = Path(__file__).resolve().parents[2] / "difftest" / "trace" / "_scan.c"
pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or platform.machine() not in ("x86_64", "AMD64"),
    reason="builds the scanner with gcc's x86 float options")


def built(tmp_path: Path, *flags: str) -> ModuleType:
    """The scanner compiled with `flags`, loaded under its own name."""
    return c_builds.built(SOURCE, "_scan", tmp_path, *flags)


def spellings() -> list[str]:
    """Mantissas up to 2**53 times or over powers of ten up to 22 (where one correctly rounded
    operation gives the double, and a double-rounded one is off in about 1 in 6,500), and 19
    digits near halfway points (the 64-bit path and the exact comparison)."""
    rng = np.random.default_rng(11)
    texts = [f"{m}e{'-' if neg else ''}{k}" for m, k, neg in zip(
        rng.integers(1, 2**53, 40_000).tolist(), rng.integers(1, 23, 40_000).tolist(),
        rng.integers(0, 2, 40_000).tolist(), strict=True)]
    texts += ["7208084381580777e9", "2.361474461572590", "1733344948225745e-8",
              "8208024915549111e-14"]  # read one unit off by a double-rounding build
    for x in (10.0 ** rng.uniform(-30, 30, 500)).tolist():
        head, exp = format(x, ".18e").split("e")
        texts += [f"{head[:-1]}{d}e{exp}" for d in range(10)]
    return texts


@pytest.mark.parametrize("flags", [("-mfpmath=387",), ("-mlong-double-64",)])
def test_each_build_reads_every_float_as_float_does(tmp_path: Path,
                                                    flags: tuple[str, ...]) -> None:
    scan = built(tmp_path, *flags)
    wrong = [t for t in spellings() if struct.pack("=d", scan.read_float(t.encode())[0])
             != struct.pack("=d", float(t))]
    assert not wrong, wrong[:5]
