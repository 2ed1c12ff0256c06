"""A `decoding = "sampled"` comparison through the one path (plan, run, judge) with arms
replaying the reference runner's captured sampled runs (its sampled arms run for real in the
shipped config's check, tests/flow/test_gate.py): the target alone against speculative sampling
agrees in distribution, the token comparison plays no part, and a known-wrong sampler is caught
by the distribution instrument in a probe. Sampler seeds are fixed, so the verdicts are
reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.config import parse_config
from difftest.core.kinds import DecodingMode, KilledBy, VerdictKind
from difftest.report.comparison import to_dict
from difftest.report.headline import report_differed
from difftest.report.html import figures
from conftest import REPLAY_MUTATED, TESTS, Ran, cli_in, replay_arm
from planned import run_probe

SAMPLED = TESTS / "data" / "sampled"  # scripts/capture_replay_traces.py


def replayed(capture: str) -> str:
    """The command of an arm printing the reference runner's capture `capture` of it (or, with
    DIFFTEST_MUTATION set, of it so mutated: conftest.REPLAY_MUTATED)."""
    return f'command = ["{{python}}", "-c", {json.dumps(REPLAY_MUTATED)}, ' \
           f'{json.dumps(str(SAMPLED / capture))}]\n'


# The target alone and speculative sampling, `--vocab 32 --steps 6 --requests 2 --temperature
# 0.4 --top-p 0.8 --samples 50` at sampler seeds 1 and 2 (the target with `--no-spec`), and the
# draft-only temperature as its mutation: replays of the reference runner's captures of them
# (scripts/capture_replay_traces.py sampled-probe), under the launch the runner's arms have.
ARMS = f"""
[arms.target]
{replayed("probe-target")}env = {{ VT_SPEC_TRACE = "1", DIFFTEST_MUTATION = "none", OMP_NUM_THREADS = "1" }}

[arms.spec]
{replayed("probe-spec")}env = {{ VT_SPEC_TRACE = "1", DIFFTEST_MUTATION = "none", OMP_NUM_THREADS = "1" }}

[comparisons.sampled]
arm_a = "target"
arm_b = "spec"
decoding = "sampled"
toggle = ["spec"]
mutations = ["temperature-draft-only"]

[mutations.temperature-draft-only]
env = {{ DIFFTEST_MUTATION = "temperature-draft-only" }}
"""


def test_spec_agrees_with_the_target_alone_in_distribution_and_a_wrong_sampler_is_caught(
        tmp_path: Path) -> None:
    cfg = parse_config(ARMS, tmp_path / "difftest.toml")
    spec = cfg.comparison("sampled")
    assert spec.rules.decoding is DecodingMode.SAMPLED
    assert spec.rules.echo()["decoding"] == "sampled"
    # the probe compares the two arms first (its baseline, judged as a compare of them is),
    # then the mutated spec arm against the target
    probe = run_probe(cfg, spec, run_root=tmp_path / "runs", progress=False)
    report = probe.baseline
    assert report.verdict.kind is VerdictKind.AGREE, report.verdict.reasons
    assert report.comparison is None  # tokens differ from draw to draw: not compared
    assert report_differed(report).startswith("compared in distribution")
    assert any("100 request pairs" in r and "would have been found in 90% of simulated tests" in r
               for r in report.verdict.reasons)
    data = to_dict(report)["sampled"]
    assert data["distribution"]["pairs"] == 100 and data["distribution"]["positions"] == 6
    (row1, *_) = data["acceptance"]["spec"]  # the target alone drafts nothing: no check
    assert set(data["acceptance"]) == {"spec"} and row1["row"] == 1 and not row1["flagged"]
    assert "Token laws and acceptance (sampled decoding)" in [f.title for f in figures(report)]
    (mutation,) = probe.mutations
    assert mutation.killed and mutation.killed_by is KilledBy.EMITTED
    assert any(r.startswith("the token distributions differ")
               for r in mutation.report.verdict.reasons)


def compare(tmp_path: Path, a: list[str], b: list[str]) -> Ran:
    """`difftest compare` of two traces under a sampled comparison whose arms do nothing."""
    (tmp_path / "cfg.toml").write_text('[arms.A]\ncommand = ["true"]\n[arms.B]\ncommand = ["true"]\n'
                                       '[comparisons.s]\narm_a = "A"\narm_b = "B"\n'
                                       'decoding = "sampled"\n')
    (tmp_path / "A").write_text("\n".join(a) + "\n")
    (tmp_path / "B").write_text("\n".join(b) + "\n")
    return cli_in(tmp_path, "compare", "--config", "cfg.toml", "-c", "s", "--trace-a", "A",
                  "--trace-b", "B")


def test_one_draw_per_prompt_of_different_tokens_differs(tmp_path: Path) -> None:
    def arm(token: int) -> list[str]:
        return [f"[SPECTRACE] req=r{i} pos=0 k=0 ns=1 acc=0 draft=[ ] emit=[ {token} ]"
                for i in range(30)]
    got = compare(tmp_path, arm(7), arm(9))
    # where the tokens of two sampled arms first part names no bug class
    assert got.returncode == 1 and "bug class" not in got.stdout, got.stdout


def test_a_sample_line_contradicting_its_verify_is_a_trace_error(tmp_path: Path) -> None:
    spec = "[SPECTRACE] req=r0 pos=3 k=2 ns=3 acc=2 draft=[ 5 6 ] emit=[ 5 6 8 ]"
    got = compare(tmp_path, [spec, "[spec-sample] req=r0 pos=3 acc=0 q=[ 0.5 0.5 ] p=[ 0.25 ] "
                                   "overlap=[ 0.5 ] residual=9"], [spec])
    assert got.returncode == 2 and "A:2:" in got.stderr and "says acc=2" in got.stderr


def test_a_stated_token_budget_cuts_each_draw_and_without_it_length_is_judged(
        tmp_path: Path) -> None:
    """Arm B's last verify passes the budget (its streams reach 6 positions, A's 4): with
    `max_tokens=4` in both arms' `[spec-config]` the draws are read up to the budget and agree;
    without it how far each draw reached is part of the law, and 4 against 6 differs."""
    import random

    rng = random.Random(3)
    a, b = [], []
    for i in range(30):
        for d in range(4):
            req = f"r{i}~{d}"
            mine = [rng.randrange(4) for _ in range(4)]
            a.append(f"[SPECTRACE] req={req} pos=0 k=3 ns=4 acc=3 draft=[ "
                     + " ".join(map(str, mine[:3])) + " ] emit=[ " + " ".join(map(str, mine))
                     + " ]")
            toks = [rng.randrange(4) for _ in range(6)]
            b.append(f"[SPECTRACE] req={req} pos=0 k=5 ns=6 acc=5 draft=[ "
                     + " ".join(map(str, toks[:5])) + " ] emit=[ " + " ".join(map(str, toks))
                     + " ]")
    budget = "[spec-config] max_tokens=4"
    assert compare(tmp_path, [budget, *a], [budget, *b]).returncode == 0
    assert compare(tmp_path, a, b).returncode == 1


def rounds_config(tmp_path: Path, seed: str = "{seed}") -> Path:
    """The target alone, speculative sampling and the draft-only temperature, 8 draws per
    prompt, as replays of the reference runner's captures (`--vocab 32 --steps 6 --requests 2
    --temperature 0.4 --top-p 0.8 --samples 8 --sample-seed SEED`, the target with
    `--no-spec`) under the launch the runner's arm has; with `{seed}` each round replays the
    next sampler seed's capture (the gate input, then the inputs after it), otherwise every
    run the one given."""
    def arm(name: str, mutation: str) -> str:
        return (replay_arm(name, SAMPLED / f"{name}-{seed}.log")
                + f'env = {{ VT_SPEC_TRACE = "1", DIFFTEST_MUTATION = "{mutation}" }}\n')
    text = (arm("target", "none") + arm("spec", "none") + arm("wrong", "temperature-draft-only")
            + "".join(f'[comparisons.{n}]\narm_a = "target"\narm_b = "{n}"\n'
                      'decoding = "sampled"\ngate_input = "100"\n' for n in ("spec", "wrong")))
    path = tmp_path / "difftest.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_until_decided_adds_draws_until_the_distribution_test_decides(tmp_path: Path) -> None:
    """8 draws per prompt leave the wrong sampler undecided; each round adds 8 more under the
    next sampler seed until the test says DIFFER, which stops the rounds; judging the run
    again replays them to the same decision."""
    from difftest import api

    cfg = rounds_config(tmp_path)
    first = api.compare_arms(comparison="wrong", config=cfg, run_root=tmp_path / "runs",
                             progress=False)
    assert first.verdict.kind is not VerdictKind.DIFFER, first.verdict.reasons
    report = api.compare_arms(comparison="wrong", config=cfg, run_root=tmp_path / "runs",
                              progress=False, until_decided=10)
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons
    (said,) = [r for r in report.verdict.reasons if r.startswith("--until-decided: decided")]
    runs = int(said.split("decided at run ", 1)[1].split()[0])
    assert 2 <= runs < 10 and "(at most 10)" in said
    assert report.run_dir is not None
    meta = json.loads((report.run_dir / "meta.json").read_text(encoding="utf-8"))
    assert f"wrong#seq{runs}" in meta["arms"] and f"wrong#seq{runs + 1}" not in meta["arms"]
    seeds = {meta["arms"][n]["argv"][-1] for n in meta["arms"]
             if n.startswith("wrong")}
    assert len(seeds) == runs  # a sampler seed of its own each round
    again = api.rejudge(report.run_dir)
    assert again.verdict.kind is VerdictKind.DIFFER
    assert f"--until-decided: decided at run {runs} of each arm;" in " ".join(
        again.verdict.reasons)


def test_until_decided_counts_no_round_that_repeats_a_sampler_seed(tmp_path: Path) -> None:
    """Fixed sampler seeds draw the same tokens every run: round 2 is not counted (counting
    it would make equal laws of too few draws look decided), and the first run's verdict
    stands with the reason."""
    from difftest import api

    cfg = rounds_config(tmp_path, seed="7")
    first = api.compare_arms(comparison="spec", config=cfg, run_root=tmp_path / "runs",
                             progress=False)
    report = api.compare_arms(comparison="spec", config=cfg, run_root=tmp_path / "runs",
                              progress=False, until_decided=4)
    assert report.verdict.kind is first.verdict.kind
    said = " ".join(report.verdict.reasons)
    assert "round 2 was not counted, target#seq2: its sampler seed 7 is an earlier run's" in said
    assert "not decided after 1 run(s) of each arm (at most 4)" in said


def test_until_decided_needs_no_acceptance_gate_on_a_sampled_comparison(tmp_path: Path) -> None:
    """The distribution instrument decides a sampled comparison: no acceptance gate asked; a
    greedy comparison still needs one."""
    from difftest.core.errors import UsageError
    from difftest.flow.plan import plan_compare

    cfg = parse_config(rounds_config(tmp_path).read_text(encoding="utf-8"),
                       tmp_path / "difftest.toml")
    plan = plan_compare(cfg, cfg.comparison("spec"), 3)
    assert plan.rounds is not None and plan.rounds.design is None
    assert plan.rounds.max_runs == 3 and len(plan.rounds.arms) == 2
    greedy = cfg.comparison("spec").with_rules(decoding=DecodingMode.GREEDY)
    with pytest.raises(UsageError, match="acceptance gate"):
        plan_compare(cfg, greedy, 3)


def test_a_rerun_that_repeats_a_sampler_seed_is_not_counted(tmp_path: Path) -> None:
    """A's noise reruns take the gate input as A does, so they draw with A's sampler seed: the
    same tokens again. Counted, they pair B's fresh draws with copies of draws the witness has
    already learned (a false DIFFER under --until-decided); they are left out, and said."""
    from difftest import api

    cfg = rounds_config(tmp_path)
    text = cfg.read_text(encoding="utf-8").replace(
        'arm_b = "spec"\n', 'arm_b = "spec"\nnoise_runs = 3\n')
    cfg.write_text(text, encoding="utf-8")
    report = api.compare_arms(comparison="spec", config=cfg, run_root=tmp_path / "runs",
                              progress=False)
    said = " ".join(report.verdict.reasons)
    for rerun in ("target#run2", "target#run3"):
        assert f"{rerun} not counted: its sampler seed 100 is an earlier run's" in said
    assert report.sampled is not None and report.sampled.test.pairs == 16  # A's one run of 8 x 2


def reference_trace(seed: int) -> str:
    """The reference runner's trace of 4 draws per prompt at a sampler seed (`--vocab 32
    --steps 6 --requests 2 --temperature 0.4 --top-p 0.8 --samples 4 --sample-seed SEED`,
    captured by scripts/capture_replay_traces.py)."""
    return (SAMPLED / f"four-draws-{seed}.log").read_text(encoding="utf-8")


def test_a_new_seed_printed_over_the_same_draws_is_a_repeat() -> None:
    """An engine that prints the seed it was given but draws with another (a per-request seed
    over the global one) repeats its draws under a new seed: the streams say so."""
    from difftest.analysis.repeats import repeated
    from difftest.trace.parser import parse_text

    first = reference_trace(7)
    assert "sample_seed=7" in first
    again = parse_text(first.replace("sample_seed=7", "sample_seed=8"))
    assert repeated([parse_text(first)], again) == (
        "it traced every request's stream an earlier run traced")
    assert repeated([parse_text(first)], parse_text(reference_trace(8))) is None
    assert repeated([parse_text(first)], parse_text(first)) == (
        "its sampler seed 7 is an earlier run's")


def test_export_of_a_run_interrupted_in_a_round_judges_the_rounds_it_completed(
        tmp_path: Path) -> None:
    """A run stopped in round r leaves round r's arms marked interrupted (as the supervisor
    marks them on SIGINT or SIGTERM; marked here by hand on a finished run): export judges
    rounds 1..r-1, which the test being valid at any stopping time allows, not ARM-FAILED. A
    record with a round after a missing one is refused, not judged around the gap."""
    from difftest import api
    from difftest.core.errors import UsageError

    cfg = rounds_config(tmp_path)
    report = api.compare_arms(comparison="spec", config=cfg, run_root=tmp_path / "runs",
                              progress=False, until_decided=3)
    assert report.run_dir is not None
    meta_path = report.run_dir / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    for name in ("target#seq3", "spec#seq3"):
        meta["arms"][name]["interrupted"] = True
    meta["status"] = "interrupted"
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    again = api.rejudge(report.run_dir)
    said = " ".join(again.verdict.reasons)
    assert again.verdict.kind is not VerdictKind.ARM_FAILED, said
    assert "not decided after 2 run(s) of each arm" in said
    assert "was interrupted in round 3: judged on the rounds it completed" in said
    assert again.sampled is not None and again.sampled.test.pairs == 32
    # round 2 struck from the record, round 3 left after the gap: not judged around it
    for name in ("target#seq2", "spec#seq2"):
        del meta["arms"][name]
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(UsageError, match=r"records round\(s\) 3 of --until-decided after "
                                         r"round 2, .* edited or damaged"):
        api.rejudge(report.run_dir)


def test_a_configured_arm_named_like_a_round_is_refused(tmp_path: Path) -> None:
    from difftest.core.errors import UsageError
    from difftest.flow.plan import plan_compare

    text = rounds_config(tmp_path).read_text(encoding="utf-8").replace(
        "[arms.spec]", '[arms."target#seq2"]').replace('arm_b = "spec"', 'arm_b = "target#seq2"')
    cfg = parse_config(text, tmp_path / "difftest.toml")
    spec = cfg.comparison("spec")
    plan_compare(cfg, spec)  # an ordinary compare of it is fine
    with pytest.raises(UsageError, match="an arm is named 'target#seq2', the name difftest gives "
                                         "round 2 of --until-decided"):
        plan_compare(cfg, spec, 3)
