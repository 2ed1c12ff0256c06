"""`%.9g` logits round-trip every float32 through the parser exactly."""

from __future__ import annotations

import numpy as np

from difftest.runners.reference import trace
from difftest.trace.parser import parse_text


def test_nine_digits_round_trip_float32_through_the_parser() -> None:
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.isfinite(values)]
    # plus the values logits take, and the edges of the format
    extra = np.array([0.0, -0.0, 1.0, 2.87758, 2.8775799, 9.99999994, 1e-45, 3.4028235e38,
                      -1.17549435e-38, 16777217.0], dtype=np.float32)
    values = np.concatenate([values, extra, rng.normal(0, 10, 5000).astype(np.float32)])
    lines = []
    per_line = 8
    for i in range(0, values.size - per_line + 1, per_line):
        top = [(j, float(v)) for j, v in enumerate(values[i:i + per_line])]
        lines.append(trace.spec_logits("r0", i, 1, top))
    parsed = parse_text("\n".join(lines) + "\n")
    back = parsed.logits.top_vals[:, :per_line].astype(np.float32).ravel()
    want = values[:back.size]
    assert back.size == (values.size // per_line) * per_line
    assert np.array_equal(back.view(np.uint32) & 0x7FFFFFFF, want.view(np.uint32) & 0x7FFFFFFF)
    assert np.array_equal(np.signbit(back[want != 0]), np.signbit(want[want != 0]))


def test_six_digits_would_not_round_trip() -> None:
    v = np.nextafter(np.nextafter(np.float32(2.87758), np.float32(3)), np.float32(3))
    assert np.float32(float(f"{float(v):.6g}")) != v
    assert np.float32(float(f"{float(v):.9g}")) == v
