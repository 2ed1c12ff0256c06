"""The resolution of printed logits: digits per arm, quantum per value, coarsest over the rows."""

from __future__ import annotations

import numpy as np
import pytest

from difftest.resolution import LOSSLESS_DIGITS, coarsest, quanta, resolution


@pytest.mark.parametrize("value, digits, quantum", [
    (2.87758, 6, 1e-5), (9.99999, 6, 1e-5), (10.0, 6, 1e-4), (-23.4567, 6, 1e-4),
    (0.0123457, 6, 1e-7), (2.87758123, 9, 1e-8), (123.456789, 9, 1e-6), (-1e-7, 6, 1e-12)])
def test_quantum_of_a_value(value: float, digits: int, quantum: float) -> None:
    assert quanta(np.array([value]), digits)[0] == pytest.approx(quantum, rel=1e-12)


def test_zero_and_non_finite_have_no_quantum() -> None:
    assert np.isnan(quanta(np.array([0.0, np.inf, np.nan, -np.inf]), 6)).all()


def test_arm_resolution_is_the_coarsest_compared_quantum() -> None:
    vals = np.array([[12.5, 3.25, np.nan], [2.87758, 1.5, 0.25], [123.457, 99.0, 5.0]])
    width = np.array([2, 3, 3])
    digits = np.array([3, 6, 6], dtype=np.int8)
    compared = np.array([True, True, False])
    r = resolution(vals, width, digits, compared)
    assert r.digits == 6 and not r.lossless
    assert r.quantum == pytest.approx(1e-4)  # 12.5 in [10, 100) at 6 digits; row 3 not compared
    assert resolution(vals, width, digits, np.ones(3, bool)).quantum == pytest.approx(1e-3)
    assert "not lossless" in r.describe()


def test_nine_digits_are_lossless_and_empty_is_unknown() -> None:
    vals = np.array([[2.87758123, 1.0]])
    r = resolution(vals, np.array([2]), np.array([LOSSLESS_DIGITS], dtype=np.int8),
                   np.array([True]))
    assert r.lossless and r.quantum == pytest.approx(1e-8)
    empty = resolution(np.zeros((0, 2)), np.zeros(0, int), np.zeros(0, np.int8), np.zeros(0, bool))
    assert empty.digits is None and empty.quantum is None
    assert coarsest(r, empty) == pytest.approx(1e-8)
    assert coarsest(empty) is None
