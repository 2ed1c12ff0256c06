"""Arms isolated from the caller's shell: difftest's own variables reach an arm only through its
definition or its role, one inherited is removed and named, and an arm whose trace shows
forcing, a fault or a mutation nothing asked for makes the comparison INERT. Real arms: a small
engine script that reads the variables as the runners do, and the reference runner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from difftest import api
from difftest.core.kinds import VerdictKind
from difftest.execute.supervise import ARM_VARIABLES, PLACE_VARIABLES, arm_environment
from test_switch import steps, trace_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "difftest" / "configs" / "default.toml"

# An engine that honours difftest's variables the way the runners do: it prints a planted fault
# and a mutation in its `[spec-config]` line and a `[spec-forced]` line when forced.
ENGINE = """\
import os, sys
fault = os.environ.get("DIFFTEST_FAULT", "")
mutation = os.environ.get("DIFFTEST_MUTATION", "") or "none"
out = [f"[spec-config] mutation={mutation}" + (f" fault={fault}" if fault else "")]
out.append(open(sys.argv[1]).read().rstrip("\\n"))
if os.environ.get("DIFFTEST_FORCE"):
    out.append("[spec-forced] req=r0 pos=10 commit=[ 1 2 ]")
sys.stderr.write("\\n".join(out) + "\\n")
"""

LEAKED = {"DIFFTEST_FAULT": "layers.1.mlp:scale:0.5", "DIFFTEST_MUTATION": "causal-mask",
          "DIFFTEST_FORCE": "/nonexistent/force.json", "DIFFTEST_CAPTURE": "r0:12",
          "DIFFTEST_CAPTURE_DIR": "/nonexistent/dumps"}


def _config(tmp_path: Path, env_a: str = "", env_b: str = "", wrap_b: str = "") -> Path:
    engine = tmp_path / "engine.py"
    engine.write_text(ENGINE)
    trace = trace_file(tmp_path, "steps.log", steps())
    argv = f'"{sys.executable}", "{engine}", "{trace}"'
    path = tmp_path / "difftest.toml"
    path.write_text(f"[arms.a]\ncommand = [{argv}]\nenv = {{ {env_a} }}\n"
                    f"[arms.b]\ncommand = [{wrap_b}{argv}]\nenv = {{ {env_b} }}\n"
                    '[comparisons.c]\narm_a = "a"\narm_b = "b"\n')
    return path


def test_arm_environment_keeps_only_the_arms_own_variables() -> None:
    env, removed = arm_environment({"PATH": "/bin", **LEAKED},
                                   {"DIFFTEST_MUTATION": "none", "X": "1"})
    assert removed == sorted(k for k in LEAKED if k != "DIFFTEST_MUTATION")
    assert env == {"PATH": "/bin", "DIFFTEST_MUTATION": "none", "X": "1"}
    assert set(LEAKED) <= set(ARM_VARIABLES)


def test_every_variable_a_runner_reads_is_an_arm_variable() -> None:
    """The runners, adapters and the emitter: each DIFFTEST_ name they read is isolated."""
    import re

    pkg = ROOT / "difftest"
    found: set[str] = set()
    for folder in ("runners", "adapters"):
        for path in (pkg / folder).rglob("*.py"):
            found |= set(re.findall(r"DIFFTEST_[A-Z_]+", path.read_text()))
    for name in ("emit.py", "core/force.py", "core/activations.py", "core/faults.py"):
        found |= set(re.findall(r"DIFFTEST_[A-Z_]+", (pkg / name).read_text()))
    assert found - {"DIFFTEST_ARM_TOKEN", *PLACE_VARIABLES} <= set(ARM_VARIABLES), found


def test_variables_in_the_callers_shell_never_reach_the_arms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in LEAKED.items():
        monkeypatch.setenv(key, value)
    rep = api.compare_arms(comparison="c", config=_config(tmp_path), run_root=tmp_path / "runs",
                           progress=False)
    assert rep.verdict.kind is VerdictKind.AGREE, rep.verdict.reasons
    for arm in (rep.arm_a, rep.arm_b):
        text = arm.trace_path.read_text()
        assert "fault=" not in text and "[spec-forced]" not in text and "mutation=none" in text
    names = ", ".join(sorted(LEAKED))
    for arm in ("a", "b"):
        assert (f"warning: {arm}: {names} set in difftest's environment was removed from the "
                "arm's") in " ".join(rep.verdict.reasons), rep.verdict.reasons
    assert rep.run_dir is not None
    meta = json.loads((rep.run_dir / "meta.json").read_text())
    assert meta["arms"]["a"]["env_removed"] == sorted(LEAKED)


def test_a_variable_the_arm_sets_itself_is_kept_and_not_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIFFTEST_MUTATION", "causal-mask")
    cfg = _config(tmp_path, env_a='DIFFTEST_MUTATION = "none"', env_b='DIFFTEST_MUTATION = "none"')
    rep = api.compare_arms(comparison="c", config=cfg, run_root=tmp_path / "runs", progress=False)
    assert rep.verdict.kind is VerdictKind.AGREE
    assert not any("removed" in r for r in rep.verdict.reasons), rep.verdict.reasons
    assert rep.arm_b.result is not None and rep.arm_b.result.env_removed == []


@pytest.mark.parametrize(("wrapper", "shown"), [
    ('"env", "DIFFTEST_FAULT=layers.1.mlp:scale", ', "fault=layers.1.mlp:scale"),
    ('"env", "DIFFTEST_MUTATION=causal-mask", ', "mutation=causal-mask"),
    ('"env", "DIFFTEST_FORCE=/x.json", ', "[spec-forced] lines (teacher forcing)"),
])
def test_a_free_arm_that_shows_a_role_it_was_not_given_is_inert(
        tmp_path: Path, wrapper: str, shown: str) -> None:
    """A wrapper that sets the variable behind difftest's back: B's trace shows it, its launch
    (config env, argv flags) never asked, and the comparison is about the free engine."""
    cfg = _config(tmp_path, wrap_b=wrapper)
    rep = api.compare_arms(comparison="c", config=cfg, run_root=tmp_path / "runs", progress=False)
    assert rep.verdict.kind is VerdictKind.INERT, rep.verdict.reasons
    first = rep.verdict.reasons[0]
    assert first.startswith(f"b: its trace shows {shown}"), first
    assert "its role in this comparison runs it free (" in first
    assert rep.verdict.reasons[-1].startswith("verdict inert, not ")


def test_a_fault_the_arm_is_configured_with_is_its_role(tmp_path: Path) -> None:
    cfg = _config(tmp_path, env_b='DIFFTEST_FAULT = "layers.1.mlp:scale"')
    rep = api.compare_arms(comparison="c", config=cfg, run_root=tmp_path / "runs", progress=False)
    assert "fault=layers.1.mlp:scale" in rep.arm_b.trace_path.read_text()
    assert not any("runs it free" in r for r in rep.verdict.reasons), rep.verdict.reasons


def test_the_reference_runner_under_a_leaked_fault_runs_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped `lanes` comparison with a fault and a capture exported in the shell: both
    arms run unfaulted (no `fault=` in their `[spec-config]`), the verdict is the usual AGREE,
    and a reason names what was removed."""
    monkeypatch.setenv("DIFFTEST_FAULT", "layers.1.mlp:scale:0.5")
    monkeypatch.setenv("DIFFTEST_CAPTURE", "r0:12")
    rep = api.compare_arms(comparison="lanes", config=SHIPPED, run_root=tmp_path / "runs",
                           progress=False, jobs=1)
    assert rep.verdict.kind is VerdictKind.AGREE, rep.verdict.reasons
    for arm in (rep.arm_a, rep.arm_b):
        assert arm.trace is not None and "fault" not in arm.trace.config.values
    assert any("DIFFTEST_CAPTURE, DIFFTEST_FAULT set in difftest's environment was removed"
               in r for r in rep.verdict.reasons), rep.verdict.reasons


@pytest.mark.parametrize("shown", ["mutation=causal-mask", "fault=layers.1.mlp:scale"])
def test_a_capture_showing_a_role_no_arm_asked_for_is_inert(tmp_path: Path, shown: str) -> None:
    """`compare --trace-a/--trace-b`: a capture whose `[spec-config]` shows a mutation or a
    fault is held to the config's arm of its name (here one that sets nothing), and with no
    comparison named to nothing at all: INERT, never the AGREE its drafts alone would give."""
    body = trace_file(tmp_path, "steps.log", steps()).read_text()
    a = tmp_path / "a.log"
    a.write_text("[spec-config] mutation=none\n" + body)
    b = tmp_path / "b.log"
    b.write_text(f"[spec-config] mutation=none {shown}\n".replace("mutation=none mutation",
                                                                   "mutation") + body)
    for rep in (api.compare_traces(a, b, comparison="c", config=_config(tmp_path)),
                api.compare_traces(a, b)):
        assert rep.verdict.kind is VerdictKind.INERT, rep.verdict.reasons
        first = rep.verdict.reasons[0]
        assert f"its trace shows {shown}" in first and "it is a capture" in first, first


def test_a_capture_of_an_arm_the_config_mutates_is_judged(tmp_path: Path) -> None:
    body = trace_file(tmp_path, "steps.log", steps()).read_text()
    a = tmp_path / "a.log"
    a.write_text("[spec-config] mutation=none\n" + body)
    b = tmp_path / "b.log"
    b.write_text("[spec-config] mutation=causal-mask\n" + body)
    cfg = _config(tmp_path, env_b='DIFFTEST_MUTATION = "causal-mask"')
    rep = api.compare_traces(a, b, comparison="c", config=cfg)
    assert rep.verdict.kind is VerdictKind.AGREE, rep.verdict.reasons


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("chunk", [12, 13, 14, 20, 64])
def test_a_forced_line_is_noted_wherever_the_reads_split_the_file(
        tmp_path: Path, chunk: int, pure: bool) -> None:
    """The parser notes a line of other output that holds the tag (ArmTrace.forced_lines) at
    any read size, by either reader; text without the whole tag is not noted."""
    from difftest.trace import parse_trace

    step = "[SPECTRACE] req=a pos=0 k=1 ns=1 acc=0 draft=[ 3 ] emit=[ 4 ]\n"
    tag = "[spec-forced]"
    for at in range(0, 40, 3):
        for text, want in ((step + "x" * at + tag + " req=a\n" + step, True),
                           ("x" * at + tag[:-1] + "y" + tag[1:] + "\n" + step, False),
                           ("0: " + "x" * at + tag + "\n" + step, True)):
            path = tmp_path / "trace.log"
            path.write_text(text)
            got = parse_trace(path, chunk_bytes=chunk, pure=pure).forced_lines
            assert got is want, (at, text)


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("line", [
    "vllm.cpp: request r0 has outgrown the draft speculative context [spec-forced] req=r0 pos=0",
    "[spec-forced] req=r0 pos=0 commit=[ 4 ] [spec-phase] pre=0.31ms backbone=0.52ms "
    "sample=2.91ms logits=8192",
    "[spec-config] note=[spec-forced]",
    "[SPECTRACE] req=[spec-forced] pos=9 k=0 ns=1 acc=0 draft=[ ] emit=[ 5 ]",
    "[spec-logits] req=x[spec-forced] pos=9 row=1 top=[ 5:1.5 ]",
])
def test_a_forced_tag_in_a_line_read_as_something_else_is_noted(
        tmp_path: Path, line: str, pure: bool) -> None:
    """A notice, a misplaced tag, a declaration or a request name holding the tag: the trace
    still shows forcing (the search of the whole file found it; so must the parser)."""
    from difftest.trace import parse_trace

    path = tmp_path / "trace.log"
    path.write_text("[SPECTRACE] req=r0 pos=0 k=1 ns=1 acc=0 draft=[ 3 ] emit=[ 4 ]\n" + line
                    + "\n")
    assert parse_trace(path, pure=pure).forced_lines


def test_a_forced_arm_behind_an_outgrown_notice_is_inert(tmp_path: Path) -> None:
    """Two captures that agree, arm B's holding a forced commit inside an outgrown notice (two
    processes writing one line): nothing asked B to be forced, so the comparison is INERT."""
    steps = "".join(f"[spec-logits] req=r0 pos={p} row=1 top=[ 10:9.25 30:7.5 ]\n"
                    f"[spec-logits] req=r0 pos={p} row=2 top=[ 11:8.5 31:6.125 ]\n"
                    f"[SPECTRACE] req=r0 pos={p} k=2 ns=3 acc=2 draft=[ 10 11 ] emit=[ 10 11 4 ]\n"
                    for p in (5, 8, 11))
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(steps)
    b.write_text(steps + "vllm.cpp: request r0 has outgrown the draft speculative context "
                         "[spec-forced] req=r0 pos=5 commit=[ 10 11 4 ]\n")
    rep = api.compare_traces(a, b)
    assert rep.verdict.kind is VerdictKind.INERT, rep.verdict.reasons
