"""Sampled decoding in the reference runner: the rejection sampler reproduces the target's
distribution (and each known-wrong sampler does not), runs are reproducible from their sampler
seed, and the trace carries the test of every verify."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from difftest.core.errors import UsageError
from difftest.runners.reference.options import SAMPLED_MUTATIONS, RunnerOptions
from difftest.runners.reference.runner import run
from difftest.runners.reference.sampling import Sampler, draw, speculative_verify, warp
from difftest.trace.parser import parse_lines
from difftest.trace.sampled import samples_of

ROOT = Path(__file__).resolve().parents[3]
VOCAB = 6
# The target's and the draft's logits of one position: far enough apart that every sampler
# mistake moves the law of the emitted token by more than sampling noise.
P_LOGITS = torch.tensor([2.0, 1.5, 0.2, -0.5, 1.0, -1.0])
Q_LOGITS = torch.tensor([0.0, 2.2, 1.4, 0.3, -0.8, 0.9])
TRIALS = 6000


def first_token_law(sampler: Sampler, seed: int = 0) -> np.ndarray:
    """The law of the first token one verify of a single draft emits, over TRIALS verifies."""
    gen = torch.Generator().manual_seed(seed)

    def uniform() -> float:
        return float(torch.rand(1, generator=gen, dtype=torch.float64)[0])

    q = sampler.draft(Q_LOGITS)
    counts = np.zeros(VOCAB)
    for _ in range(TRIALS):
        u = uniform()
        x = draw(q, u)
        v = speculative_verify(sampler, q[None, :], [x], [u], lambda _tok: P_LOGITS, uniform)
        counts[v.emit[0]] += 1
    return counts / TRIALS


def tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


# Sampling noise of the TV between a law and its TRIALS-draw estimate: sum over 6 ids of
# sqrt(p(1-p)/n) * sqrt(2/pi) / 2 is about 0.01 here; the bound leaves 3x that.
NULL_TV = 0.03


def test_warp_keeps_the_smallest_top_p_set_and_renormalises() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    kept = warp(probs.log(), 1.0, 0.75)
    assert kept.tolist() == pytest.approx([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0])
    assert warp(probs.log(), 1.0, 0.85)[2] > 0  # the set must reach the mass
    hot = warp(probs.log(), 2.0, 1.0)
    assert float(hot.sum()) == pytest.approx(1.0) and hot[3] > probs[3]


def test_draw_is_the_inverse_cdf_most_probable_first_and_skips_ids_without_mass() -> None:
    probs = torch.tensor([0.25, 0.0, 0.75], dtype=torch.float64)  # most probable first: 2, 0
    assert [draw(probs, u) for u in (0.0, 0.7499, 0.75, 0.999999, 1.0)] == [2, 2, 0, 0, 0]
    residual = torch.tensor([0.1, 0.0, 0.1, 0.0], dtype=torch.float64)
    assert draw(residual, 0.6) == 2  # normalised: the mass is read as a whole
    assert draw(residual, 0.6, normalised=False) == 3  # past the mass: the least probable id


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9)])
def test_speculative_sampling_reproduces_the_targets_law(temperature: float, top_p: float) -> None:
    sampler = Sampler(temperature, top_p)
    assert tv(first_token_law(sampler), sampler.plain(P_LOGITS).numpy()) < NULL_TV


@pytest.mark.parametrize("mutation", SAMPLED_MUTATIONS)
def test_each_known_wrong_sampler_moves_the_law(mutation: str) -> None:
    sampler = Sampler(0.7, 0.9, mutation)
    assert tv(first_token_law(sampler), sampler.plain(P_LOGITS).numpy()) > 2 * NULL_TV


SMALL = RunnerOptions(requests=2, steps=4, vocab=64, temperature=0.8, top_p=0.95, sample_seed=5)


def test_a_sampled_run_is_reproducible_from_its_seed_and_traces_each_test() -> None:
    one, two = run(SMALL, 1), run(SMALL, 1)
    assert one.lines == two.lines and one.generated == two.generated
    other = run(SMALL.with_(sample_seed=6), 1)
    assert other.generated != one.generated
    config = [line for line in one.lines if line.startswith("[spec-config]")][0]
    assert "temperature=0.8 top_p=0.95 sample_seed=5 samples=1" in config and "spec=on" in config
    assert "max_tokens=4" in config
    trace = parse_lines(one.lines)
    samples = samples_of("\n".join(one.lines).encode())
    assert not trace.findings and len(samples) == len(trace.verifies) <= 8
    for req in range(len(trace.requests)):  # each draw verifies until it emitted its budget
        emitted = [len(trace.verifies.emit(i)) for i in range(len(trace.verifies))
                   if int(trace.verifies.req[i]) == req]
        assert sum(emitted) >= 4 and sum(emitted[:-1]) < 4, emitted
    for i, step in enumerate(samples.steps):
        emit = trace.verifies.emit(i).tolist()
        assert step.acc == int(trace.verifies.acc[i]) == len(emit) - 1
        assert (step.residual is None) == (step.acc == 4)
        if step.residual is not None:
            assert emit[-1] == step.residual


def test_the_target_alone_emits_one_token_per_step_and_samples_name_their_draws() -> None:
    result = run(SMALL.with_(no_spec=True, samples=2, requests=1), 1)
    trace = parse_lines(result.lines)
    assert trace.requests == ("r0~0", "r0~1")
    assert set(trace.verifies.k.tolist()) == {0} and set(trace.verifies.ns.tolist()) == {1}
    assert [len(v) for v in result.generated.values()] == [5, 5]
    assert not samples_of("\n".join(result.lines).encode()).steps


def test_greedy_target_alone_follows_the_greedy_speculative_stream() -> None:
    """Greedy speculative decoding is lossless token for token: the target alone emits the
    same stream."""
    greedy = RunnerOptions(requests=2, steps=6, vocab=64)
    spec, alone = run(greedy, 0), run(greedy.with_(no_spec=True), 0)
    for name, ids in alone.generated.items():
        assert spec.generated[name][:len(ids)] == ids


@pytest.mark.parametrize(("changes", "message"), [
    ({"temperature": 0.0}, "temperature must be a finite number > 0"),
    ({"top_p": 1.5, "temperature": 1.0}, "top_p must be in (0, 1]"),
    ({"top_p": 0.5}, "top_p needs a temperature"),
    ({"samples": 2}, "samples > 1 needs a temperature"),
    ({"mutation": "noise-reuse"}, "needs a temperature"),
    ({"sample_seed": 5}, "sample_seed needs a temperature"),
    ({"eos_id": 0, "temperature": 0.6}, "eos_id is honoured by greedy speculative decoding only"),
    ({"eos_id": 0, "no_spec": True}, "eos_id is honoured by greedy speculative decoding only"),
])
def test_bad_sampling_options_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunnerOptions(**changes)  # type: ignore[arg-type]


def test_the_command_line_refuses_bad_sampling_input_with_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VT_", "DIFFTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "difftest.runners.reference"]
    bad = subprocess.run([*cmd, "--top-p", "0.5"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "top_p needs a temperature" in bad.stderr
    force = tmp_path / "force.log"
    force.write_text("")
    forced = subprocess.run([*cmd, "--temperature", "1"], env={**env, "DIFFTEST_FORCE": str(force)},
                            capture_output=True, text=True, timeout=60)
    assert forced.returncode == 2 and "replay greedy decoding" in forced.stderr
