"""llama.cpp as an engine, for real: llama-cpp-python's bindings over a llama.cpp built at install,
a tiny seeded GGUF pair written by the runner, the speculative loop of difftest.adapters.llamacpp
and the trace read back by difftest's parser.

Without the `[llamacpp]` extra these tests skip and say so; under CI (CI=true), which installs
the extra (.ci/run), they fail instead: a skip there would hide a broken runner."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from difftest.core.force import ForcedStep, ForceStream
from difftest.core.kinds import DraftingKind
from difftest.emit import Tracer
from difftest.runners.llamacpp.options import LlamaCppOptions
from difftest.trace.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def need_llama_cpp() -> None:
    """Skip without llama-cpp-python (fail under CI, which installs it)."""
    if importlib.util.find_spec("llama_cpp") is not None:
        return
    why = "llama-cpp-python is not installed (pip install -e '.[llamacpp]')"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why + " -- CI must install it (.ci/run does)")
    pytest.skip(why)


@pytest.fixture
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One GGUF cache for the whole module: the pair is written once per seed."""
    need_llama_cpp()
    return tmp_path_factory.getbasetemp() / "llamacpp-cache"


def traced(cache: Path, **options: Any) -> tuple[str, dict[str, list[int]]]:
    from difftest.runners.llamacpp.runner import run

    buf = io.StringIO()
    generated = run(LlamaCppOptions(cache_dir=cache, **options), Tracer(level=3, file=buf, top_k=4),
                    side=buf)
    return buf.getvalue(), generated


def plain_greedy(cache: Path, options: LlamaCppOptions) -> dict[str, list[int]]:
    """The target alone, one token per llama_decode call: what a lossless run must emit."""
    import numpy as np

    from difftest.adapters.llamacpp import ContextSettings, LlamaCppModel
    from difftest.runners.llamacpp.models import model_pair
    from difftest.runners.llamacpp.runner import prompts

    model = LlamaCppModel(model_pair(options.seed, cache).target, ContextSettings(n_ctx=options.n_ctx))
    out = {}
    try:
        for req, prompt in prompts(options).items():
            model.clear()
            row = model.extend(prompt)[0]
            ids = [int(np.argmax(row))]
            while len(ids) < options.max_new_tokens:
                ids.append(int(np.argmax(model.decode([ids[-1]])[0])))
            out[req] = ids
    finally:
        model.close()
    return out


def config_of(text: str) -> dict[str, str]:
    (line,) = [x for x in text.splitlines() if x.startswith("[spec-config]")]
    return dict(word.split("=", 1) for word in line.split()[1:])


def test_a_lossless_run_traces_every_verify_and_cuts_the_kv_cache_back(cache: Path) -> None:
    options = dict(requests=2, max_new_tokens=14)
    text, generated = traced(cache, **options)
    trace = parse_text(text)
    assert not trace.findings
    assert trace.drafting is DraftingKind.SEQUENTIAL
    # the output is the target's own greedy stream: every rejected draft's KV entries were
    # removed before the next verify (a stale entry would change the target's logits)
    assert generated == plain_greedy(cache, LlamaCppOptions(cache_dir=cache, **options))
    v = trace.verifies
    for req, ids in generated.items():
        steps = [i for i in range(len(v)) if trace.requests[v.req[i]] == req]
        assert [t for i in steps for t in v.emit(i).tolist()] == ids
        assert int(v.pos[steps[0]]) == 8 + int(req[1:])  # the prompt's length
    accepted = {int(v.acc[i]) for i in range(len(v)) if int(v.k[i]) == 4}
    assert 0 in accepted and max(accepted) >= 2  # some drafts taken, some rejected
    # one row per drafted id, the draft's own logits: greedy drafting took each row's top-1
    assert len(trace.logits) == int(v.k.sum())
    assert trace.logits.top_ids[:, 0].tolist() == v.draft_ids.tolist()
    # the target's verify rows (k + 1 per step) ride along on side lines the parser skips
    side = [x for x in text.splitlines() if x.startswith("[llamacpp-logits] model=target")]
    assert len(side) == int(v.k.sum()) + len(v)


def test_the_config_line_says_what_llama_cpp_took(cache: Path) -> None:
    text, _ = traced(cache, requests=1, max_new_tokens=4)
    config = config_of(text)
    for role in ("", "_draft"):
        assert config[f"type_k{role}"] == config[f"type_v{role}"] == "f16"
        assert config[f"flash_attn{role}"] == "off"
        assert (config[f"n_batch{role}"], config[f"n_ubatch{role}"]) == ("512", "512")
        assert config[f"n_threads{role}"] == "1"
    assert config["rope_base"] == config["rope_base_draft"] == "10000"
    assert config["verify"] == "block" and config["logits"] == "draft"
    assert config["cpu_features"] != "none"
    text, _ = traced(cache, requests=1, max_new_tokens=4, kv_type="f32", flash_attn="on",
                     n_ubatch=2, threads=2, mutation="rope-base")
    config = config_of(text)
    assert (config["type_k"], config["type_v_draft"], config["flash_attn_draft"]) == ("f32", "f32", "on")
    assert (config["n_ubatch"], config["n_threads_draft"]) == ("2", "2")
    assert (config["rope_base"], config["rope_base_draft"]) == ("10000", "100000")


def test_serial_verify_settings_and_mutations_keep_the_output(cache: Path) -> None:
    base_text, base = traced(cache, requests=1, max_new_tokens=10)
    base_logits = parse_text(base_text).logits
    for option in (dict(verify="serial"), dict(kv_type="f32"), dict(flash_attn="on"),
                   dict(n_ubatch=2), dict(mutation="skip-position"), dict(mutation="corrupt-kv"),
                   dict(mutation="rope-base")):
        text, generated = traced(cache, requests=1, max_new_tokens=10, **option)
        assert generated == base, option  # lossless: only the drafts may move
        if "mutation" in option:  # a known-wrong draft moves its logits far
            # (the KV mutations touch the cache after the prefill that made row 1: row 2 moves)
            logits = parse_text(text).logits
            assert abs(logits.top_vals[:2, 0] - base_logits.top_vals[:2, 0]).max() > 1e-3, option


def test_target_logits_are_the_verify_rows_that_judged_each_draft(cache: Path) -> None:
    text, _ = traced(cache, requests=1, max_new_tokens=12, logits="target")
    trace = parse_text(text)
    assert not trace.findings and config_of(text)["logits"] == "target"
    v = trace.verifies
    rows = 0
    for i in range(len(v)):
        k, acc = int(v.k[i]), int(v.acc[i])
        top = trace.logits.top_ids[rows:rows + k, 0].tolist()
        # row j is the target's argmax at draft j's position: equal to the draft while accepted
        # and, at the first rejection, the target's own token
        assert top[:acc] == v.draft(i).tolist()[:acc]
        if acc < k:
            assert top[acc] == int(v.emit(i)[acc]) != int(v.draft(i)[acc])
        rows += k
    assert any(x.startswith("[llamacpp-logits] model=draft") for x in text.splitlines())


def test_teacher_forcing_commits_the_forced_stream(cache: Path) -> None:
    """Each forced step drafts and verifies from the forced context (traced as this pair's own
    verify), then commits the other arm's tokens."""
    from difftest.runners.llamacpp.runner import run

    _, free = traced(cache, requests=2, max_new_tokens=8)
    forced = {req: tuple(ForcedStep(8 + int(req[1:]) + j, ((7 * j + 3) % 256,)) for j in range(4))
              for req in free}
    buf = io.StringIO()
    generated = run(LlamaCppOptions(cache_dir=cache, requests=2, max_new_tokens=8),
                    Tracer(level=3, file=buf, top_k=4), force=ForceStream(forced), side=buf)
    assert generated == {req: [3, 10, 17, 24] for req in free}
    text = buf.getvalue()
    assert text.count("[spec-forced]") == 8 and config_of(text)["forced"] == "1"
    v = parse_text(text).verifies
    assert len(v) == 8
    # the first step of r0 ran from the prompt alone: it emitted what the free run did first
    assert int(v.emit(0)[0]) == free["r0"][0]


def test_the_gguf_pair_is_written_once_per_seed(cache: Path, tmp_path: Path) -> None:
    from difftest.runners.llamacpp.models import model_pair

    pair = model_pair(3, tmp_path)
    stamp = (pair.target.stat().st_mtime_ns, pair.draft.stat().st_mtime_ns)
    assert model_pair(3, tmp_path) == pair
    assert (pair.target.stat().st_mtime_ns, pair.draft.stat().st_mtime_ns) == stamp
    assert sorted(p.name for p in pair.target.parent.iterdir()) == ["draft.gguf", "target.gguf"]
    assert model_pair(4, tmp_path).target != pair.target


@pytest.mark.parametrize("argv, message", [
    (["--k", "0"], "k must be an integer >= 1"),
    (["--seed", "-1"], "seed must be an integer >= 0"),
    (["--kv-type", "q4_0"], "invalid choice"),
    (["--n-ubatch", "64", "--n-batch", "32"], "n-ubatch 64 is larger than n-batch 32"),
    (["--n-batch", "4", "--n-ubatch", "4"], "cannot carry a verify block of 5 tokens"),
    (["--mutation", "everything"], "invalid choice"),
])
def test_bad_options_exit_2_before_llama_cpp_loads(argv: list[str], message: str) -> None:
    code = ("import sys, runpy; sys.argv = ['difftest.runners.llamacpp'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('difftest.runners.llamacpp', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    print('llama_cpp' in sys.modules, 'numpy' in sys.modules); raise\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         env=ENV, cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stdout.strip() == "False False"


def test_capture_holds_the_draft_logits_of_the_named_step_only(cache: Path, tmp_path: Path) -> None:
    """llama-cpp-python exposes no module outputs: a capture is the step's draft logits rows."""
    from difftest.runners.llamacpp.runner import run

    buf = io.StringIO()
    run(LlamaCppOptions(cache_dir=cache, requests=2, max_new_tokens=6),
        Tracer(level=1, file=buf), capture=("r1", 9), capture_dir=str(tmp_path), side=buf)
    acts = [x for x in buf.getvalue().splitlines() if x.startswith("[spec-act]")]
    assert [x.split()[1:5] for x in acts] == [
        ["req=r1", "pos=9", f"n={j}", f"module=d{j}.logits"] for j in range(4)]
    assert all("shape=1x256" in x for x in acts)
    assert len(list(tmp_path.glob("*.npy"))) == 4
