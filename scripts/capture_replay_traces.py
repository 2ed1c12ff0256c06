"""Record the reference-runner traces that tests replay where they are about difftest's judging
rather than the runner: rounds of `--until-decided`, noise reruns, repeated sampler seeds and a
probe of a sampled comparison (tests/data/sampled/, tests/flow/test_sampled_comparison.py), the
sequential acceptance test (tests/data/sequential/, tests/analysis/test_sequential.py),
calibration on held-out inputs (tests/data/calibrate/, tests/flow/test_calibrate.py), the
acceptance gate (tests/data/acceptance/, tests/analysis/test_acceptance.py), free runs that
teacher forcing is contrasted with and a harmless change teacher-forced (tests/data/force/,
tests/core/test_force.py) and arms of the shipped config that probes and the coverage gate run
(tests/data/shipped/, tests/flow/test_switch_gate.py, tests/flow/test_coverage_gate.py), the
runs a noise floor is judged on (tests/data/numerics/, tests/test_numerics_cli.py), and the runs
`difftest localize` reruns with capture (tests/data/localize/,
tests/flow/test_localize_baseline.py, tests/flow/test_localize_report.py): each arm's free run,
its teacher-forced run, and its capturing run with the dumps it wrote, taken from a real compare
(or probe) and localize of the reference runner's arms, which conftest.REPLAY_LOCALIZE arms
replay; and, of the transformers runner, the shipped fp32 and bf16 assistants teacher-forced
(tests/data/hf-force/, tests/runners/test_hf_force.py), replayed by the same arms.

Their replay arms print these captures; where an arm takes an input (`{seed}`), the file names
the input, so a round on the next input replays the next capture and a rerun on the same input
the same one, as the reference runner (deterministic at a fixed seed) would print. Each capture
is the runner's stderr under the arm's environment, as an arm started by difftest gets it. Run
this again when the reference runner's output changes.
Usage: python scripts/capture_replay_traces.py [SECTION ...]
(sections: sampled, sampled-probe, sequential, calibrate, acceptance, force, shipped, numerics,
localize, forced, hf-force; no argument: all)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from difftest.config import Config
from difftest.execute.supervise import arm_environment

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
REFERENCE = [sys.executable, "-m", "difftest.runners.reference"]

# test_sampled_comparison.py: rounds_config's arms (8 draws per prompt) by sampler seed, and
# the reference_trace of 4 draws
SAMPLED = ["--vocab", "32", "--steps", "6", "--requests", "2", "--temperature", "0.4",
           "--top-p", "0.8"]
SAMPLED_ENV = {"VT_SPEC_TRACE": "1", "OMP_NUM_THREADS": "1"}
SAMPLED_ARMS = {  # name: (extra argv, DIFFTEST_MUTATION, sampler seeds)
    "target": (["--no-spec"], "none", [7, *range(100, 110)]),
    "spec": ([], "none", [7, *range(100, 104)]),
    "wrong": ([], "temperature-draft-only", list(range(100, 110))),
}

# test_sequential.py: the nondeterministic pair of 30 requests, without and with an input
# (`--seed`: the gate input 5, then 6, 7, ...; the planted comparison holds 6 out, so its worse
# arm runs on 5 and 7), and the deterministic one of 6 requests
REF_INPUTS = list(range(5, 13))
WORSE_INPUTS = [5, 7]
REF6_INPUTS = [5, 6, 7]

# test_calibrate.py: `--requests 1 --steps 3` at level 3 on the gate input and the calibration
# inputs
CALIBRATE = [*REFERENCE, "--requests", "1", "--steps", "3"]
CALIBRATE_ENV = {"VT_SPEC_TRACE": "3"}
CALIBRATE_INPUTS = [0, 1, 2]


def capture(argv: list[str], env: dict[str, str], target: Path) -> None:
    own, _ = arm_environment(os.environ, env)
    out = subprocess.run(argv, env=own, capture_output=True, text=True, check=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(out.stderr, encoding="utf-8")
    print(target.relative_to(REPO))


def sampled() -> None:
    """rounds_config's three arms by sampler seed, and the runner's trace of 4 draws."""
    for name, (extra, mutation, seeds) in SAMPLED_ARMS.items():
        for seed in seeds:
            capture([*REFERENCE, *SAMPLED, "--samples", "8", "--sample-seed", str(seed), *extra],
                    {**SAMPLED_ENV, "DIFFTEST_MUTATION": mutation},
                    DATA / "sampled" / f"{name}-{seed}.log")
    for seed in (7, 8):
        capture([*REFERENCE, *SAMPLED, "--samples", "4", "--sample-seed", str(seed)],
                {"VT_SPEC_TRACE": "1"}, DATA / "sampled" / f"four-draws-{seed}.log")


def sampled_probe() -> None:
    """The probe of test_spec_agrees_with_the_target_alone_in_distribution_and_a_wrong_sampler_
    is_caught (tests/flow/test_sampled_comparison.py): its arms, 50 draws per prompt, the target
    alone at sampler seed 1, speculative sampling at seed 2, and at seed 2 with the draft-only
    temperature (its mutation)."""
    for name, extra, seed, mutation in (("target", ["--no-spec"], 1, "none"),
                                        ("spec", [], 2, "none"),
                                        ("spec", [], 2, "temperature-draft-only")):
        stem = name + ("" if mutation == "none" else f"+{mutation}")
        capture([*REFERENCE, *SAMPLED, "--samples", "50", *extra, "--sample-seed", str(seed)],
                {**SAMPLED_ENV, "DIFFTEST_MUTATION": mutation},
                DATA / "sampled" / f"probe-{stem}.log")


def sequential() -> None:
    """The pairs of 30 and of 6 requests, without an input and on each input."""
    nondet = [*REFERENCE, "--nondeterministic", "--requests", "30", "--steps", "6"]
    det = [*REFERENCE, "--requests", "6", "--steps", "6"]
    env = {"VT_SPEC_TRACE": "1"}
    noise = ["--draft-noise", "6"]
    seq = DATA / "sequential"
    capture(nondet, env, seq / "ref.log")
    capture([*nondet, *noise], env, seq / "worse.log")
    capture(det, env, seq / "ref6.log")
    for seed in REF_INPUTS:
        capture([*nondet, "--seed", str(seed)], env, seq / f"ref-{seed}.log")
    for seed in REF6_INPUTS:
        capture([*det, "--seed", str(seed)], env, seq / f"ref6-{seed}.log")
    for seed in WORSE_INPUTS:
        capture([*nondet, "--seed", str(seed), *noise], env, seq / f"worse-{seed}.log")


def calibrate() -> None:
    """The kernel arms on the gate input 0 and the calibration inputs 1 and 2, and on those the
    mutated B arms: the causal-mask bug (DIFFTEST_MUTATION) and a float reordering
    (`--nondeterministic`), named as tests/flow/test_calibrate.py's replay arm names them."""
    for kernel in ("single", "split"):
        for seed in CALIBRATE_INPUTS:
            capture([*CALIBRATE, "--seed", str(seed), "--attention-kernel", kernel],
                    {**CALIBRATE_ENV, "DIFFTEST_MUTATION": "none"},
                    DATA / "calibrate" / f"{kernel}-{seed}.log")
    for seed in CALIBRATE_INPUTS[1:]:
        capture([*CALIBRATE, "--seed", str(seed), "--attention-kernel", "split"],
                {**CALIBRATE_ENV, "DIFFTEST_MUTATION": "causal-mask"},
                DATA / "calibrate" / f"split+causal-mask-{seed}.log")
        capture([*CALIBRATE, "--seed", str(seed), "--attention-kernel", "split",
                 "--nondeterministic"], {**CALIBRATE_ENV, "DIFFTEST_MUTATION": "none"},
                DATA / "calibrate" / f"split+nondeterministic-{seed}.log")


def acceptance() -> None:
    """The reference drafter and the one made worse (`--draft-noise 6`) on 40 requests of 15
    steps, and the reference on 5 of 5."""
    env = {"VT_SPEC_TRACE": "1"}
    big = [*REFERENCE, "--requests", "40", "--steps", "15"]
    capture(big, env, DATA / "acceptance" / "ref.log")
    capture([*big, "--draft-noise", "6"], env, DATA / "acceptance" / "worse.log")
    capture([*REFERENCE, "--requests", "5", "--steps", "5"], env,
            DATA / "acceptance" / "ref-small.log")


def force() -> None:
    """test_force.py's arms run free: the reference drafter and the one with the causal-mask
    bug, `--requests 2 --steps 5` at level 3; and test_force_bf16.py's DFlash1 pair free."""
    small = [*REFERENCE, "--requests", "2", "--steps", "5"]
    for mutation in ("none", "causal-mask"):
        capture(small, {"VT_SPEC_TRACE": "3", "DIFFTEST_MUTATION": mutation},
                DATA / "force" / f"free-{mutation}.log")
    # tests/runners/test_force_bf16.py's pair run free: the float32 DFlash1 draft and the
    # bfloat16 one
    dflash1 = [*small, "--drafter", "dflash1"]
    capture(dflash1, {"VT_SPEC_TRACE": "3"}, DATA / "force" / "free-dflash1-f32.log")
    capture([*dflash1, "--draft-dtype", "bfloat16"], {"VT_SPEC_TRACE": "3"},
            DATA / "force" / "free-dflash1-bf16.log")


def _arm(argv: list[str]) -> str:
    """The body of an [arms.*] table: `argv` at trace level 3."""
    return "command = [" + ", ".join(f'"{a}"' for a in argv) + ']\nenv = { VT_SPEC_TRACE = "3" }\n'


def _teacher_forced(folder: Path, arms: dict[str, list[str]], a: str, b: str,
                    extra: str = "") -> tuple[Config, Path]:
    """A teacher-forced compare in `folder` of arm `b` against arm `a` of `arms` (name: argv,
    at trace level 3), `extra` added to the comparison: its config and run directory."""
    from difftest import api
    from difftest.config import parse_config

    cfg = parse_config(
        "".join(f"[arms.{name}]\n{_arm(argv)}" for name, argv in arms.items())
        + f'[comparisons.pair]\narm_a = "{a}"\narm_b = "{b}"\nteacher_force = true\n' + extra,
        folder / "difftest.toml")
    rep = api.run_comparison(cfg, cfg.comparisons["pair"], run_root=folder / "runs",
                             progress=False)
    assert rep.run_dir is not None
    return cfg, rep.run_dir


def forced() -> None:
    """test_force.py's harmless change teacher-forced: the reference drafter (`--requests 2
    --steps 5` at level 3) free, and with split attention forced on its stream
    (tests/data/force/split/: base.log, split.forced.log, force.json)."""
    small = ["{python}", "-m", "difftest.runners.reference", "--requests", "2", "--steps", "5"]
    with tempfile.TemporaryDirectory() as tmp:
        _, run_dir = _teacher_forced(Path(tmp), {"base": small, "split": [
            *small, "--attention-kernel", "split"]}, "base", "split")
        _harvest(run_dir, {"base": "base", "split": "split"}, DATA / "force" / "split")


def shipped() -> None:
    """Arms of the shipped config (difftest/configs/default.toml) as it runs them: the lanes,
    the materialized one with the causal-mask bug, and the scalars on and off (for
    tests/flow/test_switch_gate.py); and the lanes on one short prompt whose drafted blocks
    never reach a page boundary, `--requests 1 --prompt-len 4 --steps 2` (for
    tests/flow/test_coverage_gate.py)."""
    from difftest.config import default_config_path, load_config

    cfg = load_config(default_config_path())
    short = ["--requests", "1", "--prompt-len", "4", "--steps", "2"]
    for name, mutation, extra in (
            ("paged", "none", []), ("materialized", "none", []),
            ("materialized", "causal-mask", []), ("scalars-on", "none", []),
            ("scalars-off", "none", []), ("paged", "none", short),
            ("materialized", "none", short)):
        arm = cfg.arm(name)
        stem = (name + ("" if mutation == "none" else f"+{mutation}")
                + ("-short" if extra else ""))
        capture([*arm.command, *extra], {**arm.env, "DIFFTEST_MUTATION": mutation},
                DATA / "shipped" / f"{stem}.log")


def numerics() -> None:
    """tests/test_numerics_cli.py's small_config arms (`--requests 2 --steps 4` at level 3, one
    thread): the nondeterministic paged lane three times (three runs, three different traces:
    its replay arm prints the next one at each run), the deterministic paged lane, and the
    materialized lane without and with the causal-mask bug."""
    small = [*REFERENCE, "--requests", "2", "--steps", "4"]
    env = {"VT_SPEC_TRACE": "3", "OMP_NUM_THREADS": "1"}
    out = DATA / "numerics"
    for run in (1, 2, 3):
        capture([*small, "--lane", "paged", "--nondeterministic"],
                {**env, "DIFFTEST_MUTATION": "none"}, out / f"nd-{run}.log")
    capture([*small, "--lane", "paged"], {**env, "DIFFTEST_MUTATION": "none"}, out / "det.log")
    for mutation in ("none", "causal-mask"):
        capture([*small, "--lane", "materialized"], {**env, "DIFFTEST_MUTATION": mutation},
                out / f"mat+{mutation}.log")


def _harvest(run_dir: Path, arms: dict[str, str], out: Path) -> None:
    """Copy what a run's arms printed (`arms`: the stem an arm's output is saved under, by the
    name it ran under: `f32`, `pair/noisy/cand` for a probe's mutated arm) into `out` as
    STEM.log, or STEM.forced.log where the arm was teacher-forced; and each localize rerun's
    trace and dumps (`localize/**/a-NAME.stderr` and capture-a/, b-, b0-) as
    STEM.capture-REQ-POS.log and STEM.capture-REQ-POS/; the stream they were forced on as
    force.json."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    for ran, arm in meta["arms"].items():
        stem = arms.get(arm.get("name", ran)) or arms.get(ran)
        if stem is None:
            continue
        stderr = next(run_dir.rglob(f"{ran.replace('/', '*')}.stderr"))
        forced = "DIFFTEST_FORCE" in arm.get("env_overrides", {})
        shutil.copyfile(stderr, out / f"{stem}{'.forced' if forced else ''}.log")
        print(out.relative_to(REPO) / stem)
    for force in run_dir.rglob("force.json"):
        shutil.copyfile(force, out / "force.json")
    for folder in run_dir.rglob("localize/**/meta.json"):
        step = folder.parent.name  # REQ-POS
        rerun = json.loads(folder.read_text(encoding="utf-8"))["arms"]
        for key, capture in (("a", "capture-a"), ("b", "capture-b"), ("b0", "capture-b0")):
            name = next((n.split("-", 1)[1] for n in rerun if n.split("-", 1)[0] == key), None)
            stem = arms.get(name) if name is not None else None
            if stem is None or not (folder.parent / capture).is_dir():
                continue
            shutil.copyfile(folder.parent / f"{key}-{name}.stderr",
                            out / f"{stem}.capture-{step}.log")
            shutil.copytree(folder.parent / capture, out / f"{stem}.capture-{step}",
                            dirs_exist_ok=True)
            print(out.relative_to(REPO) / f"{stem}.capture-{step}")


# faults tests/flow/test_localize_baseline.py localises on replays (the first of its three
# planted faults, layers.0.o_proj:scale, it localises on the runner itself)
PLANTED = ("layers.1.attn:mask", "layers.0.o_proj:noise")


def localize() -> None:
    """tests/flow/test_localize_baseline.py's mlp_run (f32 against the bf16 draft with
    layers.1.mlp scaled, teacher-forced) localised against the bf16 draft and against the bf16
    draft of seed 7 (refused after its rerun); its comparisons of f32 against a bf16 draft with a
    planted fault (`PLANTED`), localised against the bf16 draft; tests/core/test_force.py's
    teacher-forced comparison of a planted fault, localised; and
    tests/flow/test_localize_report.py's teacher-forced comparison of a planted fault and its probe
    of a self-pair with a noise fault as its mutation, localised at its mutation."""
    from difftest import api
    from difftest.core.errors import UsageError
    from difftest.flow.localize import localize_run

    ref = ["{python}", "-m", "difftest.runners.reference", "--requests", "1", "--steps", "3"]
    bf16 = [*ref, "--draft-dtype", "bfloat16"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg, run_dir = _teacher_forced(root, {
            "f32": ref, "bf16": bf16, "faulty": [*bf16, "--fault", "layers.1.mlp:scale"],
            "seed7": [*bf16, "--seed", "7"]}, "f32", "faulty")
        again = Path(shutil.copytree(run_dir, root / "again"))
        localize_run(run_dir, baseline="bf16", config=cfg)
        try:
            localize_run(again, baseline="seed7", config=cfg)
        except UsageError:
            pass  # refused after the rerun: its captures are what the test reads
        names = {"f32": "f32", "faulty": "faulty", "bf16": "bf16", "seed7": "seed7"}
        _harvest(run_dir, names, DATA / "localize" / "mlp")
        _harvest(again, {"seed7": "seed7"}, DATA / "localize" / "mlp")

        for fault in PLANTED:  # test_localize_run_names_the_planted_module_against_the_background
            planted = root / fault.replace(":", "-")
            planted.mkdir()
            cfg, run_dir = _teacher_forced(
                planted, {"f32": ref, "bf16": bf16, "faulty0": [*bf16, "--fault", fault]},
                "f32", "faulty0", 'localize_baseline = "bf16"\n')
            localize_run(run_dir, config=cfg)
            _harvest(run_dir, {"f32": "f32", "bf16": "bf16", "faulty0": "faulty0"},
                     DATA / "localize" / fault.replace(":", "-"))

        def forced_pair(name: str, runner: list[str], fault: str, cand: str) -> None:
            """The runner against itself with `fault` planted, teacher-forced, localised."""
            folder = root / name
            folder.mkdir()
            _, run_dir = _teacher_forced(folder, {"base": runner, "cand": [
                *runner, "--fault", fault]}, "base", "cand")
            localize_run(run_dir)
            _harvest(run_dir, {"base": "base", "cand": cand}, DATA / "localize" / name)

        # tests/core/test_force.py: layers.1.mlp scaled by 0.05
        small = ["{python}", "-m", "difftest.runners.reference", "--requests", "2", "--steps", "5"]
        forced_pair("force", small, "layers.1.mlp:scale:0.05", "mlp-scale")
        # tests/flow/test_localize_report.py: noise at layers.0.o_proj
        ref2 = ["{python}", "-m", "difftest.runners.reference", "--requests", "2", "--steps", "4"]
        forced_pair("report", ref2, "layers.0.o_proj:noise:0.01", "o_proj-noise")

        (root / "probe.toml").write_text(
            f"[arms.base]\n{_arm(ref2)}[arms.same]\n{_arm(ref2)}"
            '[comparisons.pair]\narm_a = "base"\narm_b = "same"\n'
            '[mutations.noisy]\nargs = ["--fault", "layers.0.o_proj:noise:0.01"]\n')
        probed = api.probe(comparison="pair", mutations=["noisy"], config=root / "probe.toml",
                           run_root=root / "probes", progress=False)
        assert probed.run_dir is not None
        localize_run(probed.run_dir, comparison="pair/noisy")
        _harvest(probed.run_dir, {"base": "base", "same": "same", "same+noisy": "same+noisy"},
                 DATA / "localize" / "probe")


def hf_force() -> None:
    """tests/runners/test_hf_force.py's teacher-forced comparison of the shipped fp32 and bf16
    assistants (difftest/configs/hf.toml's assistant-dtype with teacher_force, the transformers
    runner): sdpa's free run, bf16-assistant's run forced on sdpa's stream, and that stream
    (tests/data/hf-force/)."""
    from difftest import api
    from difftest.config import load_config

    cfg = load_config(REPO / "difftest" / "configs" / "hf.toml")
    spec = cfg.comparisons["assistant-dtype"].with_rules(teacher_force=True)
    with tempfile.TemporaryDirectory() as tmp:
        rep = api.run_comparison(cfg, spec, run_root=Path(tmp), progress=False)
        assert rep.run_dir is not None and rep.forcing is not None and rep.forcing.honoured
        _harvest(rep.run_dir, {"sdpa": "sdpa", "bf16-assistant": "bf16-assistant"},
                 DATA / "hf-force")


SECTIONS = {"sampled": sampled, "sampled-probe": sampled_probe, "sequential": sequential,
            "calibrate": calibrate, "acceptance": acceptance, "force": force, "shipped": shipped,
            "numerics": numerics, "localize": localize, "forced": forced, "hf-force": hf_force}


def main() -> None:
    for name in sys.argv[1:] or SECTIONS:
        SECTIONS[name]()


if __name__ == "__main__":
    main()
