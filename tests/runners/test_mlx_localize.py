"""Teacher forcing, one-step activation capture and planted faults in the mlx runner (mlx's CPU
backend, tiny seeded models, mlx-lm's own speculative generation), and `localize` against a
bf16 background on it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from conftest import runner_main
from difftest.core.activations import read_dumps
from difftest.core.errors import ExitCode, UsageError
from difftest.core.force import ForcedStep, ForceStream, committed_stream
from difftest.emit import Tracer
from difftest.flow.localize import foreign_settings, localize_dumps
from difftest.runners.mlx.options import MLXOptions
from difftest.trace.parser import parse_text

AT = ("r0", MLXOptions().prompt_len)  # r0's first verify


def traced(force: ForceStream | None = None, capture: tuple[str, int] | None = None,
           folder: Path | None = None, **options: Any) -> tuple[str, dict[str, list[int]]]:
    from difftest.runners.mlx.runner import run

    buf = io.StringIO()
    generated = run(MLXOptions(**options), Tracer(level=3, file=buf, top_k=4), force=force,
                    capture=capture, capture_dir=str(folder) if folder else None)
    return buf.getvalue(), generated


def own_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if not line.startswith(("[spec-forced]", "[spec-config]"))]


def test_a_forced_replay_of_its_own_stream_traces_the_free_run() -> None:
    free, generated = traced(requests=2, max_new_tokens=12)
    stream = committed_stream(parse_text(free))
    forced, again = traced(force=stream, requests=2, max_new_tokens=12)
    assert again == generated
    assert forced.count("[spec-forced]") == stream.steps() > 4
    assert own_lines(forced) == own_lines(free)
    assert "forced=1" in forced and "forced=1" not in free
    assert not parse_text(forced).findings


def test_a_forced_run_commits_the_forced_tokens_not_its_own() -> None:
    a = parse_text(traced(requests=1, max_new_tokens=12)[0])
    steps = list(committed_stream(a).requests["r0"])
    own = steps[1].tokens
    steps[1] = ForcedStep(steps[1].pos, ((own[0] + 1) % 256, *own[1:]))
    text, generated = traced(force=ForceStream({"r0": tuple(steps)}), requests=1,
                             max_new_tokens=12)
    b = parse_text(text)
    assert [int(p) for p in b.verifies.pos] == [s.pos for s in steps]
    assert b.verifies.emit(1).tolist() == list(own)  # its would-be: the target's own token
    assert generated["r0"] == [t for s in steps for t in s.tokens]


def test_a_force_file_of_another_run_is_a_usage_error(tmp_path: Path) -> None:
    from difftest.core.force import write_force_file

    path = write_force_file(ForceStream({"r0": (ForcedStep(3, (1,)),)}), tmp_path / "f.json")
    out = runner_main("mlx", "--requests", "1", env={"DIFFTEST_FORCE": str(path)})
    assert out.returncode == ExitCode.USAGE, out.stderr
    assert "DIFFTEST_FORCE=" in out.stderr and "no step of request r0 at position 8" in out.stderr


def capture(tmp_path: Path, name: str, **options: Any) -> Path:
    folder = tmp_path / name
    text, _ = traced(capture=AT, folder=folder, requests=1, max_new_tokens=6, **options)
    assert text.count("[spec-act]") == len(read_dumps(folder)) > 100
    (tmp_path / f"{name}.trace").write_text(text)  # beside the folder: no dump
    return folder


def settings(tmp_path: Path, name: str) -> dict[str, str]:
    """The [spec-config] settings of a capture's run."""
    return dict(parse_text((tmp_path / f"{name}.trace").read_text()).config.values)


def test_capture_lists_every_module_in_forward_order(tmp_path: Path) -> None:
    names = [d.module for d in read_dumps(capture(tmp_path, "clean"))]
    assert names[0] == "d0.model.embed_tokens" and names[-1].endswith(".lm_head")
    assert names.index("d0.model.layers.0.self_attn.q_proj") < names.index(
        "d0.model.layers.0.self_attn") < names.index("d0.model.layers.1.input_layernorm")
    # at a request's first verify mlx-lm's draft forwards are the prompt's prefill and then
    # one per drafted token
    assert {n.split(".")[0] for n in names} == {f"d{i}" for i in range(MLXOptions().k + 1)}


# planted faults over a bf16 background: against the baseline each is named; without it the
# whole model differs and the embedding is never named
FAULTS = ("model.layers.0.self_attn.o_proj:noise", "model.layers.1.self_attn:mask",
          "model.layers.1.mlp:scale", "model.norm:noise")


def test_localize_names_planted_mlx_modules_against_a_bf16_background(tmp_path: Path) -> None:
    a = capture(tmp_path, "a")
    b0 = capture(tmp_path, "b0", draft_dtype="bfloat16")
    for fault in FAULTS:
        module = fault.split(":")[0]
        alone = localize_dumps(a, capture(tmp_path, fault + "-f32", fault=fault)).localization
        b = capture(tmp_path, fault, draft_dtype="bfloat16", fault=fault)
        plain = localize_dumps(a, b).localization
        assert plain.first is None and plain.start is not None
        assert plain.start.module == "d0.model.embed_tokens"  # where it starts, not a cause
        # the baseline is a background for B: its settings differ from A's only where B's do
        assert foreign_settings(settings(tmp_path, "a"), settings(tmp_path, fault),
                                settings(tmp_path, "b0")) == ()
        against = localize_dumps(a, b, baseline=b0).localization
        for loc in (alone, against):
            assert loc.first is not None, (fault, loc.describe())
            named = loc.first.module.partition(".")[2]
            assert named == module or named.startswith(module + "."), (fault, loc.describe())


@pytest.mark.parametrize("text, why", [
    ("model.layers.9.mlp:scale", "the draft has no module 'model.layers.9.mlp'"),
    ("model.layers.0.mlp:mask", "a mask fault applies to an attention module"),
    ("model.norm:warp", "unknown kind")])
def test_a_bad_fault_is_a_usage_error(text: str, why: str) -> None:
    out = runner_main("mlx", "--requests", "1", "--fault", text)
    assert out.returncode == ExitCode.USAGE and why in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    if "9" not in text:
        with pytest.raises(UsageError, match=why):
            MLXOptions(fault=text)
