"""Planted per-module faults and one-step activation capture in the reference runner, and how
often `localize --dumps` names the planted module (every fault: its module, never one before)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from difftest.core.activations import read_dumps
from difftest.core.errors import ExitCode, UsageError
from difftest.flow.localize import localize_dumps
from difftest.runners.reference.faults import module_names, parse_fault
from difftest.runners.reference.options import RunnerOptions
from difftest.runners.reference.runner import run

BASE = RunnerOptions(requests=1, steps=1, layers=3)
AT = ("r0", BASE.prompt_len + 1)  # r0's first verify step
FAULTS = ([f"{m}:{kind}" for m in module_names(BASE.layers) for kind in ("scale", "noise")]
          + [f"layers.{i}.attn:mask" for i in range(BASE.layers)])


def capture(tmp_path: Path, fault: str) -> Path:
    folder = tmp_path / (fault.replace(":", "_") or "clean")
    result = run(BASE.with_(fault=fault), 1, capture=AT, capture_dir=folder)
    acts = [line for line in result.lines if line.startswith("[spec-act]")]
    assert len(acts) == len(module_names(BASE.layers))
    return folder


def test_capture_dumps_every_module_in_forward_order(tmp_path: Path) -> None:
    dumps = read_dumps(capture(tmp_path, ""))
    assert [d.module for d in dumps] == list(module_names(BASE.layers))
    assert dumps[-1].array.shape == (1 + BASE.k, BASE.vocab)


def test_localize_names_every_planted_module(tmp_path: Path) -> None:
    """33 faults over 3 layers and 3 kinds; the figure is in docs/localize.md."""
    assert len(FAULTS) >= 20
    clean = capture(tmp_path, "")
    order = list(module_names(BASE.layers))
    named = {}
    for fault in FAULTS:
        rep = localize_dumps(clean, capture(tmp_path, fault))
        # a fault in the first module (embed) is a difference of the whole capture: it starts
        # there, and no module is named as its cause
        first = rep.localization.start
        named[fault] = first.module if first is not None else None
        assert first is None or order.index(first.module) >= order.index(fault.split(":")[0])
    hits = sum(named[f] == f.split(":")[0] for f in FAULTS)
    assert hits == len(FAULTS), {f: m for f, m in named.items() if m != f.split(":")[0]}


def test_no_fault_is_no_difference_and_cli_exit_codes(tmp_path: Path) -> None:
    clean, again = capture(tmp_path, ""), capture(tmp_path / "again", "")
    assert localize_dumps(clean, again).localization.first is None
    faulty = capture(tmp_path, "layers.2.mlp:scale:0.01")
    cli = [sys.executable, "-m", "difftest", "localize", "--dumps"]
    out = subprocess.run([*cli, str(clean), str(faulty)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == ExitCode.DIFFER
    assert out.stdout.startswith("first differing module: layers.2.mlp")
    out = subprocess.run([*cli, str(clean), str(again)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == ExitCode.OK


def test_a_fault_changes_drafted_logits_only_from_its_module_on(tmp_path: Path) -> None:
    clean = read_dumps(capture(tmp_path, ""))
    faulty = read_dumps(capture(tmp_path, "layers.1.o_proj:noise:0.01"))
    cut = [d.module for d in clean].index("layers.1.o_proj")
    for a, b in zip(clean[:cut], faulty[:cut], strict=True):
        assert np.array_equal(a.array, b.array), a.module
    assert not np.array_equal(clean[-1].array, faulty[-1].array)


@pytest.mark.parametrize("text, why", [
    ("bogus:scale", "no module 'bogus'"), ("head:warp", "unknown kind"),
    ("head:mask", "layers.N.attn"), ("head:scale:-1", "> 0"), ("head", "MODULE:KIND")])
def test_bad_fault_is_named(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        parse_fault(text, 2)
    with pytest.raises(UsageError, match=why):
        RunnerOptions(fault=text)


@pytest.mark.parametrize("args, why", [
    ([], "give a RUN_DIR or --dumps"), (["--dumps", "x", "y", "--at", "r0:3"], "--at picks"),
    (["--dumps", "nowhere-a", "nowhere-b"], "not a capture folder")])
def test_localize_usage_errors(args: list[str], why: str) -> None:
    out = subprocess.run([sys.executable, "-m", "difftest", "localize", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == ExitCode.USAGE and why in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_tracer_activation_prints_the_line_and_bounds_the_dumps(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    import io

    from difftest.core import activations
    from difftest.emit import Tracer

    out = io.StringIO()
    tracer = Tracer(level=1, file=out)
    arr = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0
    used = tracer.activation("r0", 13, 0, "layers.0.attn", arr, tmp_path)
    line = out.getvalue().strip()
    assert line.startswith("[spec-act] req=r0 pos=13 n=0 module=layers.0.attn shape=2x3 hash=")
    assert line.endswith(" absmax=3 sum=3")
    assert np.array_equal(np.load(tmp_path / "000-layers.0.attn.npy"), arr)
    monkeypatch.setattr(activations, "MAX_DUMP_BYTES", used + 10)
    assert tracer.activation("r0", 13, 1, "head", arr, tmp_path, used) == used
    assert not (tmp_path / "001-head.npy").exists() and out.getvalue().count("[spec-act]") == 2
