"""The transformers runner's sampled mode: transformers' own speculative sampling
(`generate(..., assistant_model=..., do_sample=True)`) and the target alone, on the tiny seeded
models, traced; and the shipped `configs/hf-sampled.toml` judged for real, spec against the
target alone (AGREE in distribution) and a known-wrong sampler (DIFFER). Sampler seeds are
fixed, so every verdict here is reproducible."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.config import load_config
from difftest.core.kinds import DecodingMode, KilledBy, VerdictKind
from difftest.emit import Tracer
from difftest.runners.hf.options import HFOptions
from difftest.trace.parser import parse_text
from planned import run_probe

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "difftest" / "configs" / "hf-sampled.toml"
SAMPLED = dict(requests=2, max_new_tokens=5, temperature=0.3, top_p=0.8, samples=3,
               sample_seed=11)


def traced(**options: object) -> tuple[str, dict[str, list[int]]]:
    from difftest.runners.hf.runner import run

    buf = io.StringIO()
    generated = run(HFOptions(**options), Tracer(level=1, file=buf))  # type: ignore[arg-type]
    return buf.getvalue(), generated


def lines_of(text: str, tag: str, req_prefix: str = "", pos: int | None = None) -> list[str]:
    """The trace's `tag` lines, of requests starting with `req_prefix`, at `pos` if given."""
    out = []
    for line in text.splitlines():
        if not line.startswith(tag + " "):
            continue
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if fields["req"].startswith(req_prefix) and (pos is None or int(fields["pos"]) == pos):
            out.append(line)
    return out


def first_draft(text: str, req: str, pos: int) -> int:
    (spec,) = [ln for ln in lines_of(text, "[SPECTRACE]", req, pos) if f"req={req} " in ln]
    return int(spec.split("draft=[", 1)[1].split()[0])


def probabilities(line: str, key: str) -> list[float]:
    """The values of one `key=[ ... ]` list of a `[spec-sample]` line."""
    inner = line.split(f"{key}=[", 1)[1].split("]", 1)[0]
    return [float(v) for v in inner.split()]


def test_speculative_sampling_traces_each_draw_and_its_rejection_tests() -> None:
    text, generated = traced(**SAMPLED)
    trace = parse_text(text)
    assert not trace.findings
    assert sorted(generated) == [f"r{i}~{j}" for i in range(2) for j in range(3)]
    assert all(len(ids) == 5 for ids in generated.values())  # exactly max_new_tokens
    config = trace.config.values
    assert (config["spec"], config["temperature"], config["top_p"], config["sample_seed"],
            config["samples"], config["max_tokens"]) == ("on", "0.3", "0.8", "11", "3", "5")
    v = trace.verifies
    sample_lines = [ln for ln in text.splitlines() if ln.startswith("[spec-sample] ")]
    # one rejection test per verify that drafted, in the same order, with its acc
    drafted = [i for i in range(len(v)) if int(v.k[i]) > 0]
    assert len(sample_lines) == len(drafted) > 0
    for i, line in zip(drafted, sample_lines, strict=True):
        k, acc = int(v.k[i]), int(v.acc[i])
        assert f" req={trace.requests[int(v.req[i])]} pos={int(v.pos[i])} acc={acc} " in line
        q, p, overlap = (probabilities(line, key) for key in ("q", "p", "overlap"))
        assert len(q) == k and len(p) == len(overlap) == (k if acc == k else acc + 1)
        assert all(0 < x <= 1 for x in q)  # each draft was drawn from its q
        assert all(0 <= x <= 1 for x in p + overlap)
        residual = line.rsplit("residual=", 1)[1]
        assert residual == ("-" if acc == k else str(int(v.emit(i)[acc])))
    # every draw's stream is the generated ids, step after step
    for req, ids in generated.items():
        steps = [i for i in range(len(v)) if trace.requests[int(v.req[i])] == req]
        assert [t for i in steps for t in v.emit(i).tolist()] == ids


def assistant_law(logits: object, steps: tuple[tuple[str, float], ...]) -> object:
    """The law transformers' assistant samples its drafts from: its `generate` is handed the
    target's logits processors and merges them with its own before it appends its own config's
    warpers (temperature "t", then top-p "p"), so with the target's temperature T and top-p P
    the draft's logits go through t T, p P, t T, p P: tempered twice (the verify tests against
    this same q: still lossless, with a sharper draft)."""
    import torch

    from difftest.runners.reference.sampling import warp

    z = logits
    for kind, value in steps:
        if kind == "t":
            z = z / value  # type: ignore[operator]
        else:
            z = torch.log(warp(z, 1.0, value))  # type: ignore[arg-type]
    return torch.softmax(z, dim=-1)  # type: ignore[arg-type]


def test_the_traced_p_and_q_are_each_models_law_as_transformers_tests_them() -> None:
    """The first verify of each draw, recomputed outside transformers: p of the first draft is
    the target's law on the prompt at temperature 0.3 with top-p 0.8 (the reference runner's
    `warp`), q the draft model's law as its `generate` samples (`assistant_law`); equal to
    float32 softmax precision."""
    import torch

    from difftest.runners.hf.models import load_pair
    from difftest.runners.hf.models import prompts
    from difftest.runners.reference.sampling import warp

    options = HFOptions(**SAMPLED)  # type: ignore[arg-type]
    text, _ = traced(**SAMPLED)
    target, draft = load_pair(options)
    checked = 0
    with torch.no_grad():
        for name, prompt in prompts(options, 256).items():
            ids = torch.tensor([prompt])
            q_law = assistant_law(draft(ids).logits[0, -1],
                                  (("t", 0.3), ("p", 0.8), ("t", 0.3), ("p", 0.8)))
            p_law = warp(target(ids).logits[0, -1], 0.3, 0.8)
            overlap = float(torch.minimum(p_law, q_law).sum())
            for line in lines_of(text, "[spec-sample]", f"{name}~", len(prompt)):
                req = line.split()[1].removeprefix("req=")
                x = first_draft(text, req, len(prompt))
                assert probabilities(line, "q")[0] == pytest.approx(float(q_law[x]), rel=1e-4)
                assert probabilities(line, "p")[0] == pytest.approx(float(p_law[x]), rel=1e-4,
                                                                    abs=1e-7)
                assert probabilities(line, "overlap")[0] == pytest.approx(overlap, rel=1e-4)
                checked += 1
    assert checked == 6  # every draw's first verify drafted


def test_a_fixed_sampler_seed_repeats_the_draws_and_a_fresh_one_is_printed() -> None:
    first, a = traced(**SAMPLED)
    again, b = traced(**SAMPLED)
    assert a == b and first == again
    fresh = dict(SAMPLED, sample_seed=None)
    text, c = traced(**fresh)
    seed = parse_text(text).config.values["sample_seed"]
    assert seed.isdigit() and int(seed) != 11


def test_the_target_alone_traces_one_token_per_step() -> None:
    text, generated = traced(**SAMPLED, no_spec=True)
    trace = parse_text(text)
    v = trace.verifies
    assert trace.config.values["spec"] == "off" and trace.config.values["k"] == "0"
    assert len(v) == 2 * 3 * 5 and int(v.k.max()) == 0
    assert not lines_of(text, "[spec-sample]")
    assert all(len(ids) == 5 for ids in generated.values())


def check_first_verify_laws(mutation: str, q_steps: tuple[tuple[str, float], ...],
                            p_temperature: float, p_top_p: float) -> dict[str, str]:
    """Run `mutation` on one draw of one prompt and check its first verify's traced q and p
    against the draft's law through `q_steps` (`assistant_law`) and the target's at
    `p_temperature` and `p_top_p` (the reference runner's `warp`); the trace's config."""
    import torch

    from difftest.runners.hf.models import load_pair
    from difftest.runners.hf.models import prompts
    from difftest.runners.reference.sampling import warp

    mutated = dict(SAMPLED, mutation=mutation, samples=1, requests=1)
    text, _ = traced(**mutated)
    options = HFOptions(**mutated)  # type: ignore[arg-type]
    target, draft = load_pair(options)
    (prompt,) = prompts(options, 256).values()
    (line,) = lines_of(text, "[spec-sample]", "r0", len(prompt))
    x = first_draft(text, "r0", len(prompt))
    with torch.no_grad():
        ids = torch.tensor([prompt])
        q_law = assistant_law(draft(ids).logits[0, -1], q_steps)
        p_law = warp(target(ids).logits[0, -1], p_temperature, p_top_p)
    assert probabilities(line, "q")[0] == pytest.approx(float(q_law[x]), rel=1e-4)
    assert probabilities(line, "p")[0] == pytest.approx(float(p_law[x]), rel=1e-4, abs=1e-7)
    return dict(parse_text(text).config.values)


def test_temperature_on_the_draft_only_moves_the_verify_to_the_untempered_law() -> None:
    """The mutation tempers only the assistant's law: the traced q of the first draft is the
    draft's law at 0.3 (once: the target hands it no temperature, only its top-p) while p is
    the target's at temperature 1."""
    config = check_first_verify_laws("temperature-draft-only", (("p", 0.8), ("t", 0.3), ("p", 0.8)),
                                     1.0, 0.8)
    assert config["mutation"] == "temperature-draft-only"


def test_top_p_on_the_draft_only_moves_the_verify_to_the_untruncated_law() -> None:
    """The mutation truncates only the assistant's law: the traced q of the first draft is the
    draft's law tempered twice and cut at top-p 0.8 once (the target hands it a temperature and
    no top-p) while p is the target's tempered law, not truncated."""
    config = check_first_verify_laws("top-p-draft-only", (("t", 0.3), ("t", 0.3), ("p", 0.8)),
                                     0.3, 1.0)
    assert (config["mutation"], config["top_p"]) == ("top-p-draft-only", "0.8")


@pytest.mark.parametrize("mutation", ["noise-reuse", "residual-unnormalised"])
def test_a_wrong_verify_traces_what_it_tested(mutation: str) -> None:
    """A known-wrong verify is transformers' run with one rule changed: the trace is read as
    any other (one `[spec-sample]` line per verify that drafted, no finding), says the
    mutation, and draws the same tokens at the same sampler seed."""
    text, generated = traced(**SAMPLED, mutation=mutation)
    trace = parse_text(text)
    assert not trace.findings and trace.config.values["mutation"] == mutation
    assert len(lines_of(text, "[spec-sample]")) == int((trace.verifies.k > 0).sum()) > 0
    assert all(len(ids) == 5 for ids in generated.values())
    assert traced(**SAMPLED, mutation=mutation)[1] == generated


@pytest.mark.parametrize("argv, env, said", [
    (["--top-p", "0.5"], {}, "top-p needs a temperature"),
    (["--samples", "3"], {}, "samples > 1 needs a temperature"),
    (["--temperature", "0"], {}, "temperature must be a finite number > 0"),
    (["--temperature", "0.5", "--top-p", "1.5"], {}, "top-p must be in (0, 1]"),
    (["--temperature", "0.5", "--no-spec", "--mutation", "temperature-draft-only"], {},
     "needs a draft (drop --no-spec)"),
    (["--mutation", "temperature-draft-only"], {}, "needs a temperature (--temperature T)"),
    (["--temperature", "0.5", "--no-spec", "--mutation", "noise-reuse"], {},
     "needs a draft (drop --no-spec)"),
    (["--mutation", "top-p-draft-only"], {}, "needs a temperature (--temperature T)"),
    (["--temperature", "0.5", "--drafter", "dflash", "--mutation", "residual-unnormalised"],
     {}, "needs --drafter assisted"),
    (["--temperature", "0.5", "--drafter", "dflash", "--mutation", "temperature-draft-only"],
     {}, "needs --drafter assisted"),
    (["--temperature", "0.5"], {"DIFFTEST_FORCE": "force.json"}, "replay greedy decoding"),
    (["--no-spec"], {"DIFFTEST_CAPTURE": "r0:9"}, "replay greedy decoding"),
])
def test_bad_sampled_options_are_usage_errors_before_torch_loads(
        argv: list[str], env: dict[str, str], said: str) -> None:
    out = subprocess.run([sys.executable, "-m", "difftest.runners.hf", *argv],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert out.returncode == 2, out.stderr
    assert said in out.stderr and "Traceback" not in out.stderr


def with_sample_seeds(seeds: dict[str, int]) -> object:
    """The shipped config, each arm's sampler seed fixed (the shipped arms draw fresh ones)."""
    config = load_config(CONFIG)
    arms = {name: dataclasses.replace(arm, command=(*arm.command, "--sample-seed",
                                                    str(seeds.get(name, 0))))
            for name, arm in config.arms.items()}
    return dataclasses.replace(config, arms=arms)


def test_the_shipped_config_agrees_spec_with_the_target_and_catches_the_draft_temperature(
        tmp_path: Path) -> None:
    config = with_sample_seeds({"sampled-target": 1, "sampled-spec": 2})
    spec = config.comparison("sampled")  # type: ignore[attr-defined]
    assert spec.rules.decoding is DecodingMode.SAMPLED
    for arm in config.arms.values():  # type: ignore[attr-defined]
        threads = arm.command[arm.command.index("--threads") + 1]
        assert threads == "1" and arm.env["OMP_NUM_THREADS"] == "1"
    probe = run_probe(config, spec, run_root=tmp_path / "runs", progress=False)  # type: ignore[arg-type]
    assert probe.baseline.verdict.kind is VerdictKind.AGREE, probe.baseline.verdict.reasons
    assert any("90 request pairs" in r for r in probe.baseline.verdict.reasons)
    (mutation,) = probe.mutations
    assert mutation.killed and mutation.killed_by is KilledBy.EMITTED
    assert mutation.report.verdict.kind is VerdictKind.DIFFER
    assert any(r.startswith("the token distributions differ")
               for r in mutation.report.verdict.reasons)


def test_the_shipped_warmer_comparison_catches_noise_reuse_and_the_unnormalised_residual(
        tmp_path: Path) -> None:
    """`sampled-t06` (temperature 0.6, 60 draws): speculative sampling agrees with the target
    alone; a verify reusing the draft's uniform is caught by the acceptance check, a residual
    drawn unnormalised by the token laws."""
    config = with_sample_seeds({"sampled-target-t06": 3, "sampled-spec-t06": 4})
    spec = config.comparison("sampled-t06")  # type: ignore[attr-defined]
    assert spec.rules.decoding is DecodingMode.SAMPLED
    probe = run_probe(config, spec, run_root=tmp_path / "runs", progress=False)  # type: ignore[arg-type]
    assert probe.baseline.verdict.kind is VerdictKind.AGREE, probe.baseline.verdict.reasons
    assert any("180 request pairs" in r for r in probe.baseline.verdict.reasons)
    killed = {m.name: m for m in probe.mutations}
    assert set(killed) == {"noise-reuse", "residual-unnormalised"}
    for m in killed.values():
        assert m.killed and m.report.verdict.kind is VerdictKind.DIFFER, m.report.verdict.reasons
    said = {name: " ".join(m.report.verdict.reasons) for name, m in killed.items()}
    assert "the verify does not accept what its own p and q say it should" in said["noise-reuse"]
    assert "the token distributions differ" in said["residual-unnormalised"]
    assert killed["noise-reuse"].killed_by is KilledBy.ACCEPTANCE  # the instrument that saw it
    assert killed["residual-unnormalised"].killed_by is KilledBy.EMITTED
