"""mlx-lm as a second engine, for real: mlx's CPU backend, tiny seeded models built from a
config, mlx-lm's own speculative generation, the trace read back by difftest's parser, and the
shipped configs/mlx.toml judged at its calibrated thresholds."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from difftest.emit import Tracer
from difftest.core.kinds import DraftingKind
from difftest.runners.mlx.options import MLXOptions
from difftest.core.thresholds import read_thresholds
from difftest.trace.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "difftest" / "configs" / "mlx.toml"
ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def traced(**options: Any) -> tuple[str, dict[str, list[int]]]:
    from difftest.runners.mlx.runner import run

    buf = io.StringIO()
    generated = run(MLXOptions(**options), Tracer(level=3, file=buf, top_k=4))
    return buf.getvalue(), generated


def plain_greedy(options: MLXOptions) -> dict[str, list[int]]:
    """The target alone, no drafts (mlx-lm's generate_step): what a lossless run must emit."""
    import importlib

    import mlx.core as mx

    from difftest.runners.mlx.models import load_pair
    from difftest.runners.mlx.runner import prompts

    generate = importlib.import_module("mlx_lm.generate")
    target, _ = load_pair(options)
    return {req: [int(t) for t, _ in generate.generate_step(
                mx.array(prompt, dtype=mx.uint32), target, max_tokens=options.max_new_tokens)]
            for req, prompt in prompts(options).items()}


def test_the_adapter_traces_every_verify_of_a_lossless_run() -> None:
    options = dict(requests=2, max_new_tokens=14)
    text, generated = traced(**options)
    trace = parse_text(text)
    assert not trace.findings
    assert trace.drafting is DraftingKind.SEQUENTIAL
    assert "dtype_draft=float32" in text and "attention_draft=sdpa" in text
    assert generated == plain_greedy(MLXOptions(**options))
    v = trace.verifies
    for req, ids in generated.items():
        steps = [i for i in range(len(v)) if trace.requests[v.req[i]] == req]
        # the verifies' emitted tokens are the generated stream, step after step
        assert [t for i in steps for t in v.emit(i).tolist()] == ids
        assert int(v.pos[steps[0]]) == 8 + int(req[1:])  # the prompt's length
    assert {int(a) for a in v.acc} > {0}  # some drafts were accepted, some rejected
    # a verify that took every draft is followed by one whose first draft forward reads two
    # tokens (the last draft and the target's): its row is the forward's last, not its first
    assert any(int(v.acc[i]) == int(v.k[i]) and v.req[i] == v.req[i + 1]
               for i in range(len(v) - 1))
    # one logits row per drafted id, and greedy drafting took each row's top-1
    assert len(trace.logits) == int(v.k.sum())
    assert trace.logits.top_ids[:, 0].tolist() == v.draft_ids.tolist()


def test_mutations_move_the_drafts_not_the_output() -> None:
    base_text, base = traced(requests=1, max_new_tokens=10)
    for mutation in ("broken-mask", "sliding-window-4", "zeroed-layer"):
        text, generated = traced(requests=1, max_new_tokens=10, mutation=mutation)
        assert generated == base, mutation
        a, b = parse_text(base_text).logits, parse_text(text).logits
        assert a.top_vals[0].tolist() != b.top_vals[0].tolist(), mutation


def test_split_k_attention_and_half_drafts_move_only_the_last_places() -> None:
    base_text, base = traced(requests=1, max_new_tokens=6)
    for option, bound in ((dict(attn="split-k"), 1e-4), (dict(draft_dtype="float16"), 0.05)):
        text, generated = traced(requests=1, max_new_tokens=6, **option)
        assert generated == base
        a, b = parse_text(base_text).logits, parse_text(text).logits
        diff = abs(a.top_vals[0, 0] - b.top_vals[0, 0])
        assert 0 < diff < bound, (option, diff)  # a reordering: moved, and only a little


def test_a_verify_that_took_every_draft_at_the_budget_is_traced_without_a_bonus() -> None:
    """The target drafting for itself accepts everything; a budget of k tokens ends the first
    verify before the target adds a token of its own."""
    import importlib

    import mlx.core as mx

    from difftest.adapters.mlx import traced_generation
    from difftest.runners.mlx.models import builtin_target

    generate = importlib.import_module("mlx_lm.generate")
    target = builtin_target(0)
    buf = io.StringIO()
    with traced_generation(Tracer(level=3, file=buf, top_k=4), req="r0") as record:
        out = [int(t) for t, _, _ in generate.speculative_generate_step(
            mx.array([1, 2, 3, 4, 5], dtype=mx.uint32), target, target, num_draft_tokens=3,
            max_tokens=3)]
    assert [(s.pos, list(s.drafted), list(s.emitted)) for s in record.steps] == [(5, out, out)]
    trace = parse_text(buf.getvalue())
    assert not trace.findings
    v = trace.verifies
    assert (int(v.k[0]), int(v.ns[0]), int(v.acc[0])) == (3, 3, 3)


@pytest.mark.parametrize("dtype, values, printed", [
    ("bfloat16", [1.5, 4.46875, -2.0], "1:4.46875 0:1.5 "),
    ("float16", [0.0999755859375, -1.0, 2.5], "2:2.5 0:0.0999755859 "),
])
def test_tracer_step_reads_a_real_mlx_half_array(dtype: str, values: list[float], printed: str
                                                 ) -> None:
    """numpy cannot read an mlx bfloat16 array (no buffer format): the emitter has mlx cast it."""
    import mlx.core as mx

    buf = io.StringIO()
    logits = mx.array([values], dtype=getattr(mx, dtype))
    Tracer(level=3, file=buf, top_k=2).step("r0", 4, [1], [7], logits=logits)
    assert f"top=[ {printed}]" in buf.getvalue()


@pytest.mark.parametrize("argv, message", [
    (["--k", "0"], "k must be an integer >= 1"),
    (["--seed", "-1"], "seed must be an integer >= 0"),
    (["--seed", "18446744073709551616"], "seed must be an integer >= 0 and <= 4294967295"),
    (["--draft-dtype", "float8"], "invalid choice"),
    (["--mutation", "everything"], "invalid choice"),
])
def test_bad_options_exit_2_before_mlx_loads(argv: list[str], message: str) -> None:
    code = ("import sys, runpy; sys.argv = ['difftest.runners.mlx'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('difftest.runners.mlx', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    print('mlx' in sys.modules, 'mlx_lm' in sys.modules); raise\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         env=ENV, cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stdout.strip() == "False False"


def difftest(*argv: str, run_root: Path) -> tuple[int, dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "difftest", *argv, "--config", str(CONFIG),
                          "--run-root", str(run_root), "--no-progress", "-f", "json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, env=ENV)
    try:
        return out.returncode, json.loads(out.stdout)
    except json.JSONDecodeError:
        raise AssertionError(out.stdout + out.stderr) from None


def test_the_shipped_thresholds_were_calibrated_away_from_the_gated_seed() -> None:
    config = tomllib.loads(CONFIG.read_text())
    for name, comparison in config["comparisons"].items():
        if "thresholds" not in comparison:
            continue
        thresholds = read_thresholds(CONFIG.parent / comparison["thresholds"])
        provenance = tomllib.loads((CONFIG.parent / comparison["thresholds"]).read_text())
        inputs = provenance["provenance"]["inputs"]
        assert str(comparison["gate_input"]) not in inputs, name
        assert inputs == [str(i) for i in comparison["calibration_inputs"]], name
        assert provenance["provenance"]["separation"] >= 1, name
        assert thresholds.atol > 0, name


def test_the_bf16_draft_agrees_and_a_broken_mask_differs_at_the_shipped_thresholds(
        tmp_path: Path) -> None:
    """bf16-draft is the shipped pair with the smallest separation; broken-mask its weakest
    probe. Bitwise, the pair differs (its logits move by ~0.03): the calibrated atol is what
    makes it agree, and the mutation still stands out above it. One probe: its baseline is the
    pair's comparison, judged as `compare -c bf16-draft` judges it (its report.json)."""
    code, probe = difftest("probe", "-c", "bf16-draft", "-m", "broken-mask",
                           run_root=tmp_path / "runs")
    report = json.loads((Path(probe["run_dir"]) / "report.json").read_text())
    assert (probe["baseline"]["verdict"], report["verdict"]) == ("agree", "agree"), \
        report["reasons"]
    atol = read_thresholds(CONFIG.parent / "mlx-bf16-draft.thresholds.toml").atol
    assert 0.001 < report["max_abs_logit_diff"] < atol == report["atol"]
    assert any("from " in r and "mlx-bf16-draft.thresholds.toml" in r for r in report["reasons"])
    (mutation,) = probe["mutations"]
    assert (code, mutation["name"], mutation["verdict"]) == (0, "broken-mask", "differ")
    assert mutation["killed"] and mutation["applied"]
