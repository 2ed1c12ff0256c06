"""The trace the runner prints: grammar, order, invariants, levels and determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from difftest.runners.reference import trace
from difftest.runners.reference.options import RunnerOptions, trace_level_from_env
from reference_helpers import cached_run, parse, without_timings

DEFAULT = RunnerOptions()


@pytest.mark.parametrize("level, expected", [
    (0, set()),
    (1, {"config", "phase", "propose", "spectrace", "coverage", "route"}),
    (2, {"config", "phase_dev", "phase", "propose", "spectrace", "coverage", "route"}),
    (3, {"config", "phase_dev", "phase", "propose", "spectrace", "logits", "coverage", "route"}),
])
def test_each_level_prints_exactly_its_lines(level: int, expected: set[str]) -> None:
    parsed = parse(cached_run(DEFAULT, level).lines)
    assert set(parsed.kinds) == expected


def test_dflash1_prints_no_device_phases() -> None:
    parsed = parse(cached_run(DEFAULT.with_(drafter="dflash1"), 2).lines)
    assert "phase_dev" not in parsed.kinds and "phase" in parsed.kinds


def test_lines_come_in_step_order() -> None:
    """The applied configuration first; then per step: dev phase, phase, propose, then per
    request its k logits rows and its verify; last what the run exercised and the route."""
    opts = DEFAULT
    parsed = parse(cached_run(opts, 3).lines)
    per_request = ["logits"] * opts.k + ["spectrace"]
    step = ["phase_dev", "phase", "propose"] + per_request * opts.requests
    assert parsed.kinds == ["config"] + step * opts.steps + ["coverage", "route"]
    reqs = [v["req"] for v in parsed.verifies]
    assert reqs == [f"r{i}" for i in range(opts.requests)] * opts.steps
    lines = cached_run(opts, 3).lines
    for i, line in enumerate(lines):
        if line.startswith("[SPECTRACE]"):
            head = line.split(" k=")[0].replace("[SPECTRACE]", "[spec-logits]")
            assert [lines[i - j].startswith(head + " row=") for j in range(opts.k, 0, -1)] == \
                [True] * opts.k


def test_verify_invariants_hold() -> None:
    opts = DEFAULT
    parsed = parse(cached_run(opts, 3).lines)
    assert len(parsed.verifies) == opts.requests * opts.steps >= 8 * opts.requests
    last_pos: dict[str, int] = {}
    for v in parsed.verifies:
        assert v["k"] == opts.k and len(v["draft"]) == opts.k
        assert len(v["emit"]) == v["ns"] >= 1
        assert v["acc"] == max(v["ns"] - 1, 0)
        assert v["emit"][:v["acc"]] == v["draft"][:v["acc"]]
        if v["acc"] < opts.k:  # the first rejected draft is not what the target emitted
            assert v["emit"][v["acc"]] != v["draft"][v["acc"]]
        if v["req"] in last_pos:
            assert v["pos"] == last_pos[v["req"]]
        last_pos[v["req"]] = v["pos"] + v["ns"]
    first = {v["req"]: v["pos"] for v in reversed(parsed.verifies)}
    assert first == {f"r{i}": opts.prompt_len + i + 1 for i in range(opts.requests)}


def test_propose_and_phase_fields() -> None:
    opts = DEFAULT
    parsed = parse(cached_run(opts, 3).lines)
    r0_blocks = [v["draft"] for v in parsed.verifies if v["req"] == "r0"]
    assert len(parsed.proposes) == opts.steps
    for p, block in zip(parsed.proposes, r0_blocks, strict=False):
        assert (p["rows"], p["nqpr"], p["k"]) == (opts.requests, opts.k + 1, opts.k)
        assert p["first"] == block
    assert parsed.phases == [opts.requests * (opts.k + 1) * opts.vocab] * opts.steps


def test_logits_lines_are_the_raw_top8() -> None:
    result = cached_run(DEFAULT, 3)
    parsed = parse(result.lines)
    assert len(parsed.logits) == len(result.records) * DEFAULT.k
    for rec in result.records:
        for row in range(1, DEFAULT.k + 1):
            top = parsed.logits[(rec.req, rec.pos, row)]
            full = rec.logits[row - 1]
            assert len(top) == 8
            values = [v for _, v in top]
            assert values == sorted(values, reverse=True)
            for i, v in top:
                # 9 significant digits: the printed value is the float32 itself
                assert np.float32(v) == full[i].item()
            assert [i for i, _ in top] == \
                torch.sort(full, descending=True, stable=True).indices[:8].tolist()
    # dflash1 drafts the per-row argmax, which is the first entry of each traced row
    d1 = cached_run(DEFAULT.with_(drafter="dflash1"), 3)
    p1 = parse(d1.lines)
    for v in p1.verifies:
        assert v["draft"] == [p1.logits[(v["req"], v["pos"], r)][0][0] for r in range(1, 5)]


def test_two_runs_print_the_same_lines_but_timings() -> None:
    from difftest.runners.reference.runner import run

    opts = DEFAULT.with_(seed=5)
    a, b = run(opts, 3), run(opts, 3)
    assert without_timings(a.lines) == without_timings(b.lines)
    assert len(a.lines) == len(b.lines)
    assert a.generated == b.generated
    c = run(opts.with_(seed=6), 3)
    assert without_timings(c.lines) != without_timings(a.lines)


def test_id_lists_end_each_id_with_one_space() -> None:
    assert trace.spectrace("a", 5, 4, 2, 1, [11, -3, 70000, 5], [11, 2]) == \
        "[SPECTRACE] req=a pos=5 k=4 ns=2 acc=1 draft=[ 11 -3 70000 5 ] emit=[ 11 2 ]"
    assert trace.spec_propose(1, 4, 3, [19, 19, 19]) == \
        "[spec-propose] rows=1 nqpr=4 drafts/row=3 first=[19 19 19 ]"
    assert trace.spec_logits("r0", 3, 1, [(7, 9.17781234), (2, -1e-7), (3, float("-inf"))]) == \
        "[spec-logits] req=r0 pos=3 row=1 top=[ 7:9.17781234 2:-1e-07 3:-inf ]"
    assert trace.spec_phase(0.123, 1.5, 10.0, 96) == \
        "[spec-phase] pre=0.12ms backbone=1.50ms sample=10.00ms logits=96"


@pytest.mark.parametrize("value, level", [
    (None, 0), ("", 0), ("0", 0), (" 0 ", 0), ("1", 1), ("2", 2), ("3", 3), ("9", 3),
    ("-1", 0), ("yes", 1), ("on", 1), ("2x", 1),
])
def test_trace_level_from_environment(value: str | None, level: int) -> None:
    env = {} if value is None else {"VT_SPEC_TRACE": value}
    assert trace_level_from_env(env) == level


@pytest.mark.parametrize("options", [
    DEFAULT, DEFAULT.with_(fixture="degenerate"), DEFAULT.with_(mutation="stale-seq-lens"),
    DEFAULT.with_(drafter="dflash1", lane="materialized"),
], ids=["informative", "degenerate", "stale-seq-lens", "dflash1-materialized"])
def test_generated_text_is_the_targets_own_greedy_text(options: RunnerOptions) -> None:
    """Speculation is lossless: whatever was drafted, the ids are those the target alone picks."""
    from difftest.runners.reference.model import build
    from difftest.runners.reference.setup import max_positions

    result = cached_run(options, 1)
    target = build(options, max_positions(options)).target
    with torch.no_grad():
        for req, prompt in result.prompts.items():
            cache = target.new_cache()
            for tok in prompt:
                logits, _ = target.consume(cache, tok)
            greedy = []
            while len(greedy) < len(result.generated[req]):
                greedy.append(int(logits.argmax()))
                logits, _ = target.consume(cache, greedy[-1])
            assert result.generated[req] == greedy
            emitted = [i for v in parse(result.lines).verifies if v["req"] == req for i in v["emit"]]
            assert [greedy[0]] + emitted == greedy
