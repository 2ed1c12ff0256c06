"""The Hugging Face transformers runner and adapter: real models (tiny, seeded, built from
configs), real `generate`, the trace read back by difftest's parser."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import runner_main
from difftest.emit import Tracer
from difftest.runners.hf.options import HFOptions
from difftest.core.kinds import DraftingKind
from difftest.trace.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]


def traced(**options: object) -> tuple[str, dict[str, list[int]]]:
    from difftest.runners.hf.runner import run

    buf = io.StringIO()
    generated = run(HFOptions(**options), Tracer(level=3, file=buf, top_k=4))  # type: ignore[arg-type]
    return buf.getvalue(), generated


def plain_greedy(options: HFOptions) -> dict[str, list[int]]:
    """The target alone, no drafts: what a lossless speculative run must emit."""
    import torch

    from difftest.runners.hf.models import load_pair
    from difftest.runners.hf.models import prompts

    target, _ = load_pair(options)
    out = {}
    with torch.no_grad():
        for req, prompt in prompts(options, 256).items():
            ids = torch.tensor([prompt])
            result = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=options.max_new_tokens)
            out[req] = result[0, len(prompt):].tolist()
    return out


@pytest.mark.parametrize("drafter, kind", [("assisted", DraftingKind.SEQUENTIAL),
                                           ("dflash", DraftingKind.BLOCK)])
def test_the_adapter_traces_every_verify_of_a_lossless_run(drafter: str, kind: DraftingKind
                                                           ) -> None:
    options = dict(drafter=drafter, requests=2, max_new_tokens=10)
    text, generated = traced(**options)
    trace = parse_text(text)
    assert not trace.findings
    assert trace.drafting is kind
    assert generated == plain_greedy(HFOptions(**options))  # type: ignore[arg-type]
    v = trace.verifies
    for req, ids in generated.items():
        steps = [i for i in range(len(v)) if trace.requests[v.req[i]] == req]
        # the verifies' emitted tokens are the generated stream, step after step
        assert [t for i in steps for t in v.emit(i).tolist()] == ids
        assert int(v.pos[steps[0]]) == 8 + int(req[1:])  # the prompt's length
    assert len(trace.logits) == int(v.k.sum())  # one logits row per drafted row
    if drafter == "dflash":
        # transformers drafts nothing on DFlash's first step: a k=0 verify per request
        firsts = [min(i for i in range(len(v)) if v.req[i] == r) for r in range(2)]
        assert [int(v.k[i]) for i in firsts] == [0, 0]
    assert int(v.k.min()) == 0  # the budget's last token is verified without drafts


def test_mutations_move_the_drafts_not_the_output() -> None:
    base_text, base = traced(requests=1, max_new_tokens=10)
    for mutation in ("broken-mask", "sliding-window-4"):
        text, generated = traced(requests=1, max_new_tokens=10, mutation=mutation)
        assert generated == base
        a, b = parse_text(base_text).verifies, parse_text(text).verifies
        assert a.draft_ids.tolist() != b.draft_ids.tolist(), mutation


def test_the_heuristic_schedule_and_the_confidence_threshold_vary_k_not_the_output() -> None:
    """Constant: k drafts every verify but the budget's last; heuristic (transformers' schedule)
    and a confidence threshold draft fewer where the draft is unsure or was wrong."""
    options = dict(requests=1, max_new_tokens=12)
    base_text, base = traced(**options)
    assert "schedule=constant" in base_text
    constant = parse_text(base_text).verifies.k.tolist()
    for extra in (dict(schedule="heuristic"), dict(confidence=0.02)):
        text, generated = traced(**options, **extra)
        assert generated == base, extra
        ks = parse_text(text).verifies.k.tolist()
        assert ks != constant and set(ks) - {0, 4}, (extra, ks)
    assert "schedule=heuristic" in traced(**options, schedule="heuristic")[0]


def test_the_level_comes_from_the_environment_and_zero_prints_nothing() -> None:
    """The command line without VT_SPEC_TRACE (run in this process: its `main`)."""
    out = runner_main("hf", "--requests", "1", "--max-new-tokens", "4",
                      env={"VT_SPEC_TRACE": None})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("r0: ")
    assert "[SPECTRACE]" not in out.stderr


@pytest.mark.parametrize("argv, message", [
    (["--requests", "0"], "requests must be an integer >= 1"),
    (["--model", "/nonexistent"], "give both --model and --assistant"),
    (["--model", "/nonexistent", "--assistant", "/nonexistent"], "not a model directory"),
    (["--drafter", "dflash", "--assistant-dtype", "bfloat16"], "dflash drafter runs in the"),
    (["--attn", "flash"], "invalid choice"),
    (["--schedule", "dynamic"], "invalid choice"),
    (["--seed", "99999999999999999999999"], "seed must be an integer >= 0 and <= 4294967295"),
    (["--seed", "-1"], "seed must be an integer >= 0"),
    (["--drafter", "dflash", "--schedule", "heuristic"], "apply to the assisted drafter only"),
    (["--drafter", "dflash", "--confidence", "0.4"], "apply to the assisted drafter only"),
])
def test_bad_options_exit_2_before_torch_loads(argv: list[str], message: str) -> None:
    code = ("import sys, runpy; sys.argv = ['difftest.runners.hf'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('difftest.runners.hf', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    print('torch' in sys.modules, 'transformers' in sys.modules); raise\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr
    assert out.stdout.strip() == "False False"


def test_a_folder_that_is_not_a_model_exits_2_naming_it(tmp_path: Path) -> None:
    """A directory transformers cannot load (no config.json): one line naming the flag and the
    folder, exit 2, no traceback."""
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello\n")
    out = subprocess.run([sys.executable, "-m", "difftest.runners.hf", "--model", str(folder),
                          "--assistant", str(folder)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"--model {folder}: transformers cannot load a model from this folder" in lines[0]


def test_local_model_directories_run_like_the_built_in_pair(tmp_path: Path) -> None:
    from difftest.runners.hf.models import builtin_assisted_draft, builtin_target

    target = builtin_target(HFOptions())
    target.save_pretrained(tmp_path / "target")
    builtin_assisted_draft(target).save_pretrained(tmp_path / "draft")
    text, generated = traced(model=tmp_path / "target", assistant=tmp_path / "draft",
                             requests=1, max_new_tokens=8)
    built_in_text, built_in = traced(requests=1, max_new_tokens=8)
    assert generated == built_in
    assert text == built_in_text
