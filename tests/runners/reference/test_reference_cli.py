"""`python -m difftest.runners.reference` as a real subprocess: environment defaults, stderr/stdout split,
bad options, and agreement with the direct Python API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.runners.reference.options import RunnerOptions
from reference_helpers import cached_run, parse, without_timings

ROOT = Path(__file__).resolve().parents[3]
CONTROL = ("VT_SPEC_TRACE", "VT_DFLASH_PAGED", "DIFFTEST_MUTATION")


def start(args: list[str], **env: str) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if k not in CONTROL}
    full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env)
    return subprocess.Popen([sys.executable, "-m", "difftest.runners.reference", *args], cwd=ROOT, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, list[str], list[str]]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.splitlines(), err.splitlines()


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[int, list[str], list[str]]]:
    """The full runs this file checks, started together so they share the wall clock."""
    procs = {
        "paged-env": start([], VT_SPEC_TRACE="3", VT_DFLASH_PAGED="1"),
        "materialized-env": start([], VT_SPEC_TRACE="3", VT_DFLASH_PAGED="0"),
        "flag-beats-env": start(["--lane", "paged"], VT_SPEC_TRACE="1", VT_DFLASH_PAGED="0"),
        "mutation-env": start([], VT_SPEC_TRACE="yes", DIFFTEST_MUTATION="stale-seq-lens"),
        "silent": start(["--fixture", "degenerate"]),
    }
    return {name: finish(p) for name, p in procs.items()}


def test_subprocess_matches_the_direct_run(runs) -> None:
    rc, out, err = runs["paged-env"]
    assert rc == 0
    direct = cached_run(RunnerOptions(), 3)
    assert without_timings(err) == without_timings(direct.lines)
    assert len(err) == len(direct.lines)
    assert out == direct.stdout_lines()
    assert out[0].startswith("r0: ") and len(out) == RunnerOptions().requests


def test_lane_from_environment_and_flag(runs) -> None:
    _, _, paged = runs["paged-env"]
    rc, _, mat = runs["materialized-env"]
    assert rc == 0
    assert parse(paged).route["paged_seam"] > 0 and parse(paged).route["combined"] == 0
    assert parse(mat).route["combined"] > 0 and parse(mat).route["paged_seam"] == 0
    assert parse(paged).blocks() == parse(mat).blocks()
    assert parse(paged).logits == parse(mat).logits
    rc, _, flagged = runs["flag-beats-env"]
    assert rc == 0 and parse(flagged).route["paged_seam"] > 0 and parse(flagged).route["combined"] == 0


def test_mutation_from_environment_and_word_level(runs) -> None:
    rc, _, err = runs["mutation-env"]
    assert rc == 0
    parsed = parse(err)
    assert "logits" not in parsed.kinds and "phase_dev" not in parsed.kinds  # "yes" is level 1
    baseline = parse(runs["paged-env"][2]).blocks()
    mutated = parsed.blocks()
    shared = set(baseline) & set(mutated)
    assert shared and sum(baseline[key] != mutated[key] for key in shared) >= 3


def test_no_trace_without_vt_spec_trace(runs) -> None:
    rc, out, err = runs["silent"]
    assert rc == 0 and err == []
    assert [line.split(":")[0] for line in out] == ["r0", "r1", "r2"]


@pytest.mark.parametrize("args, env, needle", [
    (["--mutation", "bogus"], {}, "invalid choice: 'bogus'"),
    (["--lane", "fused"], {}, "invalid choice: 'fused'"),
    (["--k", "0"], {}, "--k: must be >= 1"),
    (["--layer-masks", "full,diagonal"], {}, "bad layer mask 'diagonal'"),
    ([], {"DIFFTEST_MUTATION": "causal"}, "DIFFTEST_MUTATION='causal' is not a mutation"),
])
def test_bad_input_exits_2_with_one_line(args: list[str], env: dict[str, str], needle: str) -> None:
    rc, out, err = finish(start(args, VT_SPEC_TRACE="1", **env))
    assert rc == 2 and out == []
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0]


def test_bad_option_and_help_do_not_import_torch() -> None:
    code = ("import sys\n"
            "from difftest.runners.reference.__main__ import main\n"
            "for argv in (['--mutation', 'bogus'], ['--help']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit as exc:\n"
            "        assert exc.code in (0, 2), exc.code\n"
            "print(sorted(m for m in ('torch', 'numpy', 'pandas') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
