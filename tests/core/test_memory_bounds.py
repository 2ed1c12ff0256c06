"""Memory bounded by the input's size, not its shape: a row far wider than the rest, a top-k
of 1024, a count that asks for the moon. Each is either held in memory linear in the values
printed or refused with a clear error, where it is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from conftest import Ran, cli_in
from difftest.core.limits import MAX_JOBS, MAX_NOISE_RUNS, MAX_TOP_K
from difftest.numerics.stats import PairedRows, logit_stats
from difftest.numerics.tolerance import Tolerance, judge_rows
from difftest.trace import parse_text

TESTS = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(TESTS.parent)}


def _row(pos: int, width: int, req: str = "r") -> str:
    top = " ".join(f"{i}:{(width - i) / 8:g}" for i in range(width))
    return f"[spec-logits] req={req} pos={pos} row=1 top=[ {top} ]"


def _peak_rss_mib(*args: str, env: dict[str, str] | None = None) -> tuple[int, float, str]:
    """Run difftest in a child of a fresh interpreter; its exit code, peak RSS and stderr."""
    probe = ("import json, resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
             "print(json.dumps([r.returncode, peak, r.stderr]))\n")
    out = subprocess.run([PY, "-c", probe, PY, "-m", "difftest", *args], env=env or ENV,
                         capture_output=True, text=True, timeout=300, check=True)
    code, peak, err = json.loads(out.stdout)
    return int(code), float(peak), str(err)


@pytest.mark.parametrize("pure", ["1", "0"])
def test_one_200000_item_row_in_a_6mb_trace_is_refused_in_bounded_memory(
        tmp_path: Path, pure: str) -> None:
    trace = tmp_path / "wide.log"
    lines = [_row(p, 8) for p in range(1, 40000)]
    lines.insert(10000, _row(99999, 200_000))
    trace.write_text("\n".join(lines) + "\n")
    assert 5e6 < trace.stat().st_size < 8e6
    code, peak, err = _peak_rss_mib("parse", str(trace), "-f", "json",
                                    env={**ENV, "DIFFTEST_PURE_PARSER": pure})
    assert code == 2, err
    assert f"wide.log:10001: [spec-logits] row of 200000 ids: difftest reads at most " \
           f"{MAX_TOP_K} ids per row" in err
    assert peak < 1024, f"peak RSS {peak:.0f} MiB"


@pytest.mark.parametrize("pure", [True, False])
def test_rows_whose_padding_would_outgrow_the_values_are_refused(pure: bool) -> None:
    text = "\n".join([_row(1, 4000)] + [_row(p, 1) for p in range(2, 3000)]) + "\n"
    with pytest.raises(Exception, match="held at one width they would take") as info:
        parse_text(text, "ragged.log", pure=pure)
    assert str(info.value).startswith("ragged.log:1: ")
    # widths that vary a little (a last short row, a few ties) are fine
    ok = "\n".join([_row(p, 8 if p % 7 else 5) for p in range(1, 3000)]) + "\n"
    assert len(parse_text(ok, pure=pure).logits.width) == 2999


def _pairs(rows: int, k: int, seed: int) -> PairedRows:
    rng = np.random.default_rng(seed)
    ids_a = np.argsort(rng.random((rows, 4 * k)), axis=1)[:, :k].astype(np.int32)
    ids_b = ids_a.copy()
    swap = rng.random((rows, k)) < 0.25  # a quarter of B's ids are others
    ids_b[swap] += 4 * k
    vals_a = np.round(rng.normal(size=(rows, k)), 3)
    vals_b = vals_a + np.where(rng.random((rows, k)) < 0.1, 0.001, 0.0)
    return PairedRows(ids_a, vals_a, ids_b, vals_b)


def _peak_per_value(rows: int, k: int) -> float:
    pairs = _pairs(rows, k, seed=k)
    tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    judge_rows(pairs, Tolerance(atol=0.0), 6, 6)
    logit_stats(pairs)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return peak / (rows * k)


def test_topk_comparison_memory_per_value_does_not_grow_with_k() -> None:
    values = 200 * 1024
    small = _peak_per_value(values // 8, 8)
    large = _peak_per_value(values // 1024, 1024)
    assert large <= 2 * small, (small, large)


def test_topk_matching_agrees_with_the_pairwise_definition() -> None:
    from difftest.numerics.stats import match_ids

    rng = np.random.default_rng(7)
    for _ in range(200):
        n, ka, kb = (int(x) for x in rng.integers(1, 7, size=3))
        a = rng.integers(-2, 6, size=(n, ka)).astype(np.int32)
        b = rng.integers(-2, 6, size=(n, kb)).astype(np.int32)
        eq = (a[:, :, None] == b[:, None, :]) & (a[:, :, None] >= 0) & (b[:, None, :] >= 0)
        shared, where = match_ids(a, b)
        assert (shared == eq.any(axis=2)).all()
        assert (where == np.where(eq.any(axis=2), eq.argmax(axis=2), 0)).all()


def _difftest(cwd: Path, *args: str) -> Ran:
    """`difftest ARGS` from `cwd`, in this process (conftest.cli_in)."""
    return cli_in(cwd, *args)


ARMS = (f'[arms.a]\ncommand = [{json.dumps(PY)}, "-c", "pass"]\n'
        f'[arms.b]\ncommand = [{json.dumps(PY)}, "-c", "pass"]\n')


@pytest.mark.parametrize(("toml", "args", "message"), [
    (ARMS + '[comparisons.ab]\narm_a = "a"\narm_b = "b"\nnoise_runs = 1000000000\n',
     ("check",), f"[comparisons.ab]: key 'noise_runs': must be <= {MAX_NOISE_RUNS}"),
    (ARMS + '[comparisons.ab]\narm_a = "a"\narm_b = "b"\n',
     ("compare", "-c", "ab", "--noise-runs", "1000000000"),
     f"noise_runs: must be <= {MAX_NOISE_RUNS}"),
    (ARMS, ("noise", "--arm", "a", "--noise-runs", "1000000"),
     f"--noise-runs must be an integer from 2 to {MAX_NOISE_RUNS}"),
    (ARMS + '[comparisons.ab]\narm_a = "a"\narm_b = "b"\n', ("check", "-j", "10000000"),
     f"--jobs must be an integer from 1 to {MAX_JOBS}"),
    ("[defaults]\nlaunched_jobs = 100000000\n" + ARMS, ("check",),
     f"[defaults]: key 'launched_jobs': must be <= {MAX_JOBS}"),
])
def test_counts_have_upper_limits_checked_where_read(tmp_path: Path, toml: str,
                                                     args: tuple[str, ...],
                                                     message: str) -> None:
    (tmp_path / "difftest.toml").write_text(toml)
    r = _difftest(tmp_path, *args, "--run-root", "runs", "--no-progress")
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()
