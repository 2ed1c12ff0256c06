"""Teacher forcing, one-step activation capture and planted faults in the transformers runner
(real tiny seeded models, real `generate`): forced replays, the fp32 vs bf16 assistant pair
compared at every step, and `localize` naming planted modules."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from difftest import api
from difftest.config import load_config
from difftest.emit import Tracer
from difftest.core.errors import ExitCode
from difftest.core.force import FORCE_ENV, committed_stream, write_force_file
from difftest.runners.hf.options import HFOptions
from difftest.core.kinds import VerdictKind
from difftest.flow.localize import foreign_settings, localize_dumps
from difftest.trace.parser import parse_text
from conftest import replay_localize_command
from planned import run_comparison

ROOT = Path(__file__).resolve().parents[2]
HF_TOML = ROOT / "difftest" / "configs" / "hf.toml"
SMALL = dict(requests=1, max_new_tokens=6)
AT = ("r0", HFOptions().prompt_len)  # r0's first verify: the prompt's draft forward


def traced(force: object = None, capture: tuple[str, int] | None = None,
           folder: Path | None = None, **options: object) -> str:
    from difftest.runners.hf.runner import run

    buf = io.StringIO()
    run(HFOptions(**options), Tracer(level=3, file=buf, top_k=4),  # type: ignore[arg-type]
        force=force, capture=capture,  # type: ignore[arg-type]
        capture_dir=str(folder) if folder else None)
    return buf.getvalue()


def own_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if not line.startswith(("[spec-forced]", "[spec-config]"))]


@pytest.mark.parametrize("drafter", [{}, {"confidence": 0.02}])
def test_a_forced_replay_of_its_own_stream_is_the_free_run(drafter: dict[str, object]) -> None:
    """Forced on the stream it committed free (and along its own drafts), the pair computes the
    same drafts to the bit: forced steps keep the assistant's cache as a free run does, and a
    confidence threshold stops the draft where it stopped free."""
    free = traced(requests=2, max_new_tokens=12, **drafter)
    stream = committed_stream(parse_text(free))
    forced = traced(force=stream, requests=2, max_new_tokens=12, **drafter)
    assert own_lines(forced) == own_lines(free)
    assert forced.count("[spec-forced]") == stream.steps() > 4
    assert "forced=1" in forced and "forced=1" not in free


def test_a_forced_run_commits_the_forced_tokens_not_its_own(tmp_path: Path) -> None:
    """A stream with one token the target would not pick (step 3): the pair traces what it would
    have emitted there, commits the forced token, and drafts its next step on that context."""
    from difftest.core.force import ForcedStep, ForceStream, read_forced_lines

    a = parse_text(traced(requests=1, max_new_tokens=8))
    steps = list(committed_stream(a).requests["r0"])
    own = steps[3].tokens
    steps[3] = ForcedStep(steps[3].pos, ((own[0] + 1) % 256, *own[1:]))
    stream = ForceStream({"r0": tuple(steps)})
    text = traced(force=stream, requests=1, max_new_tokens=8)
    b = parse_text(text)
    assert [int(p) for p in b.verifies.pos] == [s.pos for s in steps]
    assert b.verifies.emit(3).tolist() == list(own)  # its would-be: the target's own token
    (tmp_path / "b.trace").write_text(text)
    assert [f.tokens for f in read_forced_lines(tmp_path / "b.trace")] == [s.tokens for s in steps]
    # before the changed token the drafts are the free run's; after it they see another context
    assert b.verifies.draft(3).tolist() == a.verifies.draft(3).tolist()
    assert b.verifies.draft(4).tolist() != a.verifies.draft(4).tolist()


def fresh_first_step(context: list[int], max_length: int) -> str:
    """The first step of a free run from `context` (a fresh assistant cache over all of it)."""
    import torch

    from difftest.adapters.hf import traced_generation
    from difftest.runners.hf.models import load_pair

    options = HFOptions()
    target, draft = load_pair(options)
    config = draft.generation_config
    config.num_assistant_tokens = options.k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = options.confidence
    buf = io.StringIO()
    ids = torch.tensor([context])
    with torch.no_grad(), traced_generation(Tracer(level=3, file=buf, top_k=4), req="r0"):
        target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                        do_sample=False, max_length=max_length)
    return buf.getvalue()


def logits_of(text: str, pos: int) -> list[list[tuple[int, float]]]:
    rows = []
    for line in text.splitlines():
        if line.startswith(f"[spec-logits] req=r0 pos={pos} "):
            top = line.split("top=[")[1].rstrip(" ]").split()
            rows.append([(int(t.split(":")[0]), float(t.split(":")[1])) for t in top])
    return rows


def test_after_a_forced_token_the_draft_sees_the_forced_context() -> None:
    """The assistant's cached keys of a position whose token was forced otherwise are dropped:
    the next step drafts as a fresh run on the forced context does (same ids, logits within
    float32 rounding of another schedule)."""
    from difftest.core.force import ForcedStep, ForceStream
    from difftest.runners.hf.models import prompts

    a = parse_text(traced(requests=1, max_new_tokens=8))
    free = list(committed_stream(a).requests["r0"])
    # step 3 commits two tokens, the first not the pair's draft there: the assistant's cache
    # holds its draft at that position, which its own crop (it drops only what was not
    # accepted, counted by length) would keep
    other = (int(a.verifies.draft(3)[0]) + 1) % 256
    steps = free[:3] + [ForcedStep(free[3].pos, (other, 7))] + [
        ForcedStep(s.pos + 1, s.tokens) for s in free[4:-1]]
    text = traced(force=ForceStream({"r0": tuple(steps)}), requests=1, max_new_tokens=8)
    prompt = prompts(HFOptions(), 256)["r0"]
    context = prompt + [t for s in steps[:4] for t in s.tokens]
    fresh = fresh_first_step(context, len(prompt) + 8)
    forced_rows, fresh_rows = logits_of(text, steps[4].pos), logits_of(fresh, steps[4].pos)
    assert len(forced_rows) == len(fresh_rows) > 0
    for got, want in zip(forced_rows, fresh_rows, strict=True):
        assert [i for i, _ in got] == [i for i, _ in want]
        assert max(abs(x - y) for (_, x), (_, y) in zip(got, want, strict=True)) < 1e-4


# hf.toml's assistant-dtype arms teacher-forced, captured from the runner:
# scripts/capture_replay_traces.py hf-force
HF_FORCE = ROOT / "tests" / "data" / "hf-force"


def test_bf16_assistant_teacher_forced_compares_every_step(tmp_path: Path) -> None:
    """The fp32 vs bf16 assistant pair of hf.toml, teacher-forced: every step of A has a B step
    on A's context (none unmatched, none context-diverged), every drafted row of A a B row on
    the same drafted tokens, and the verdict follows from the drafts: only near-tie flips, so
    it agrees. The arms replay the runner's captures of them (A's free run, B's run forced on
    A's stream, refusing another stream: conftest.REPLAY_LOCALIZE) under the launch hf.toml
    gives them; the runner is forced for real in test_localize_run_names_a_planted_hf_module."""
    cfg = load_config(HF_TOML)
    arms = {name: cfg.arm(name).with_changes(command=tuple(
        a.replace("{python}", sys.executable) for a in replay_localize_command(
            HF_FORCE / name, "--seed", "{seed}"))) for name in ("sdpa", "bf16-assistant")}
    cfg = dataclasses.replace(cfg, arms={**cfg.arms, **arms})
    spec = cfg.comparisons["assistant-dtype"].with_rules(teacher_force=True)
    rep = run_comparison(cfg, spec, run_root=tmp_path, progress=False)
    assert rep.forcing is not None and rep.forcing.honoured, rep.verdict.reasons
    c = rep.comparison
    assert c is not None and rep.arm_a.trace is not None
    assert (c.unmatched_a, c.unmatched_b, c.context_diverged) == (0, 0, 0)
    # B drafted along A's drafted tokens: no row after an in-block flip is left out either
    assert c.rows_context_diverged == 0 and c.blocks_near_tie > 0
    assert c.logit_rows_compared == int(rep.arm_a.trace.verifies.k.sum())
    v = rep.arm_a.trace.verifies
    assert len(v) == rep.forcing.steps
    assert c.blocks_compared == int((v.k > 0).sum())  # every step that drafted is compared
    assert rep.verdict.kind is VerdictKind.AGREE, rep.verdict.reasons
    assert any("teacher-forced" in r for r in rep.verdict.reasons)


# Planted single-module faults in the built-in assisted draft (2 layers): several modules,
# layers and kinds. A hit: the first differing module is the planted one or inside it (a mask
# change first shows in the attention's output projection).
HF_FAULTS = (
    "model.embed_tokens:noise",
    "model.layers.0.input_layernorm:scale",
    "model.layers.0.self_attn.q_proj:scale",
    "model.layers.0.self_attn.v_proj:noise",
    "model.layers.0.self_attn:mask",
    "model.layers.0.self_attn.o_proj:noise",
    "model.layers.0.mlp.down_proj:scale",
    "model.layers.0.mlp:noise",
    "model.layers.1.self_attn.k_proj:scale",
    "model.layers.1.self_attn:mask",
    "model.layers.1.self_attn:scale",
    "model.layers.1.mlp.act_fn:noise",
    "model.layers.1.mlp:scale",
    "model.norm:noise",
    "lm_head:scale",
)


def capture(tmp_path: Path, fault: str) -> Path:
    folder = tmp_path / (fault.replace(":", "_") or "clean")
    text = traced(capture=AT, folder=folder, fault=fault, **SMALL)
    assert text.count("[spec-act]") > 100
    return folder


def plain(module: str) -> str:
    """`d0.model.layers.1.mlp` -> `model.layers.1.mlp` (the draft forward's index dropped)."""
    return module.partition(".")[2]


def hf_fault_table(tmp_path: Path) -> list[tuple[str, str | None, bool]]:
    """(fault, named module, hit) per planted fault, against one clean capture."""
    clean = capture(tmp_path, "")
    rows = []
    for fault in HF_FAULTS:
        module = fault.split(":")[0]
        loc = localize_dumps(clean, capture(tmp_path, fault)).localization
        # the embedding's fault is a difference of the whole capture: it starts there
        named = plain(loc.start.module) if loc.start is not None else None
        hit = named is not None and (named == module or named.startswith(module + "."))
        order = [plain(m.module) for m in loc.modules]
        if named is not None and not hit:  # a miss must not name a module before the fault
            inside = [i for i, m in enumerate(order) if m == module or m.startswith(module + ".")]
            assert order.index(named) > min(inside), (fault, named)
        rows.append((fault, named, hit))
    return rows


def test_localize_names_planted_modules_in_the_hf_draft(tmp_path: Path) -> None:
    rows = hf_fault_table(tmp_path)
    assert len(rows) >= 12
    assert all(hit for _, _, hit in rows), [r for r in rows if not r[2]]


# a reduced version of scripts/localize_background.py's table (45 of 45 there, 3 seeds)
BACKGROUND_FAULTS = ("model.layers.0.self_attn.o_proj:noise", "model.layers.1.self_attn:mask",
                     "model.layers.1.mlp:scale", "model.norm:noise")


def test_localize_against_a_bf16_background_names_planted_modules(tmp_path: Path) -> None:
    """A: the float32 assistant; B0: the bfloat16 one; B: bfloat16 with a planted fault. Every
    module of B differs from A (bf16 rounding from the embeddings on): without the baseline no
    module is named (never the embedding); against it, the planted module is. The baseline is a
    background for each B: its [spec-config] differs from A's only where B's does too (the
    dtype), and where B departs from it B is no nearer to A than it is."""
    settings: dict[str, dict[str, str]] = {}

    def bf16(fault: str) -> Path:
        folder = tmp_path / (fault.replace(":", "_") or "b0")
        text = traced(capture=AT, folder=folder, fault=fault, assistant_dtype="bfloat16", **SMALL)
        settings[fault] = dict(parse_text(text).config.values)
        return folder

    a = tmp_path / "a"
    config_a = dict(parse_text(traced(capture=AT, folder=a, **SMALL)).config.values)
    b0 = bf16("")
    for fault in BACKGROUND_FAULTS:
        b = bf16(fault)
        assert foreign_settings(config_a, settings[fault], settings[""]) == ()
        plain_loc = localize_dumps(a, b).localization
        assert plain_loc.first is None and plain_loc.start is not None
        assert plain_loc.start.module == "d0.model.embed_tokens"  # where it starts, not a cause
        loc = localize_dumps(a, b, baseline=b0).localization
        assert loc.first is not None, (fault, loc.describe())
        named, module = plain(loc.first.module), fault.split(":")[0]
        assert named == module or named.startswith(module + "."), (fault, loc.describe())


def test_capture_lists_every_module_in_forward_order(tmp_path: Path) -> None:
    from difftest.core.activations import read_dumps

    dumps = read_dumps(capture(tmp_path, ""))
    names = [d.module for d in dumps]
    # forward order: a module's children finish before it, layers in turn, the head last
    assert names.index("d0.model.layers.0.self_attn.q_proj") < names.index(
        "d0.model.layers.0.self_attn") < names.index("d0.model.layers.1.input_layernorm")
    assert names[-1].endswith(".lm_head") and names[0] == "d0.model.embed_tokens"
    assert {n.split(".")[0] for n in names} == {f"d{i}" for i in range(HFOptions().k)}


def test_localize_run_names_a_planted_hf_module(tmp_path: Path) -> None:
    """A red hf comparison of a planted fault; `localize RUN_DIR` reruns both arms forced with
    capture at the first differing step and names the module."""
    from difftest.flow.localize import localize_run
    from tests.flow.test_pipeline import config

    hf = [sys.executable, "-m", "difftest.runners.hf", "--requests", "1", "--max-new-tokens", "8"]
    cfg = config(tmp_path, {"a": {"command": hf, "env": {"VT_SPEC_TRACE": "3"}},
                            "b": {"command": [*hf, "--fault", "model.layers.1.mlp:scale:0.05"],
                                  "env": {"VT_SPEC_TRACE": "3"}}},
                 {"pair": {"arm_a": "a", "arm_b": "b", "teacher_force": True}})
    rep = api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                             progress=False)
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.run_dir is not None
    result = localize_run(rep.run_dir)
    first = result.report.localization.first
    assert first is not None and plain(first.module) == "model.layers.1.mlp"


def run_cli(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`python -m difftest.runners.hf ARGS` with `env` added, as its `main` (what the module's
    `__main__` block exits with), in this process: the cases that reach the model would pay
    another torch and transformers import in a fresh interpreter. The environment is restored
    afterwards, the variables `main` sets for transformers included."""
    from difftest.runners.hf.__main__ import main

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS",
                 "TQDM_DISABLE", FORCE_ENV, "DIFFTEST_CAPTURE"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = main(["--requests", "1", "--max-new-tokens", "4", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args, env, message", [
    (["--fault", "model.layers.9.mlp:scale"], {}, "the draft has no module"),
    (["--fault", "model.norm:mask"], {}, "a mask fault applies to an attention"),
    (["--drafter", "dflash"], {FORCE_ENV: "FORCE"}, "teacher forcing needs --drafter assisted"),
    ([], {FORCE_ENV: "FORCE-OTHER"}, "no step of request r0 at position"),
    ([], {"DIFFTEST_CAPTURE": "r0"}, "expected REQ:POS"),
])
def test_bad_fault_force_or_capture_exit_2(tmp_path: Path, args: list[str],
                                           env: dict[str, str], message: str,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from difftest.core.force import ForcedStep, ForceStream

    good = write_force_file(ForceStream({"r0": (ForcedStep(8, (1,)),)}), tmp_path / "f.json")
    other = write_force_file(ForceStream({"r0": (ForcedStep(5, (1,)),)}), tmp_path / "o.json")
    env = {k: {"FORCE": str(good), "FORCE-OTHER": str(other)}.get(v, v) for k, v in env.items()}
    code, stderr = run_cli(args, env, monkeypatch, capsys)
    assert code == ExitCode.USAGE, stderr
    assert message in stderr and "Traceback" not in stderr


def test_the_runner_command_exits_2_on_a_bad_option_before_loading_a_model() -> None:
    """The module as a command: `main`'s code is its exit status, its message on stderr."""
    out = subprocess.run([sys.executable, "-m", "difftest.runners.hf", "--requests", "1",
                          "--fault", "model.norm:mask"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=300)
    assert out.returncode == ExitCode.USAGE, out.stderr
    assert "a mask fault applies to an attention" in out.stderr
    assert "Traceback" not in out.stderr


def test_would_have_follows_the_own_drafts_past_the_forced_ones() -> None:
    """The emit a draft-along step reports: the target's picks while the own drafts equal the
    forced ones; an own draft the target accepts but never saw gets its bonus from one more
    target forward (the real tiny target, greedy)."""
    import torch

    from difftest.adapters.hf import HFTrace, _Hook
    from difftest.runners.hf.models import load_pair
    from difftest.runners.hf.models import prompts

    target, _ = load_pair(HFOptions())
    prefix = prompts(HFOptions(), 256)["r0"]

    def greedy(ids: list[int], n: int) -> list[int]:
        out = list(ids)
        with torch.no_grad():
            for _ in range(n):
                out.append(int(target(torch.tensor([out])).logits[0, -1].argmax()))
        return out[len(ids):]

    g = greedy(prefix, 4)
    # the other arm's drafts: two right, then one the target rejects and after which it would
    # pick another token than after its own (so a bonus read off the forced verify is wrong)
    wrong = next(x for x in range(256) if x != g[2] and greedy([*prefix, g[0], g[1], x], 1)
                 != [g[3]])
    forced = [g[0], g[1], wrong]
    with torch.no_grad():
        scores = target(torch.tensor([prefix + forced])).logits[:, -4:]

    class Generator:  # what _Hook wraps: the two methods transformers' loop calls
        def get_candidates(self, *a: object) -> None: ...
        def update_candidate_strategy(self, *a: object) -> None: ...

    hook = _Hook(Generator(), Tracer(level=0), HFTrace("r0"))
    hook.target = target
    with torch.no_grad():
        # own drafts equal to the forced ones: the verify's own picks, bonus at the wrong one
        assert hook.would_have(prefix, forced, forced, scores) == g[:3]
        # the own row-3 draft is the target's pick, which the forced verify never saw: one
        # more forward gives the bonus after it
        assert hook.would_have(prefix, g[:3], forced, scores) == g
        # an own first draft the target rejects: its pick, nothing accepted
        first_wrong = [(g[0] + 1) % 256, g[1], g[2]]
        assert hook.would_have(prefix, first_wrong, forced, scores) == [g[0]]


def test_a_heuristic_draft_length_follows_its_own_would_be_acceptance() -> None:
    """A stream whose drafts are the target's own greedy tokens (every one accepted), replayed
    by the pair with transformers' heuristic schedule (k + 2 after a verify that took every
    draft, k - 1 otherwise): its draft length follows what its own drafts would have had
    accepted, not the forced drafts' verify."""
    from difftest.core.force import ForcedStep, ForceStream
    from difftest.runners.hf.models import prompts

    options = HFOptions(requests=1, max_new_tokens=16)
    prompt = prompts(options, 256)["r0"]
    tokens = plain_greedy(prompt, 16)
    steps, pos = [], len(prompt)
    for at in range(0, 16, 5):
        chunk = tuple(tokens[at:at + 5])
        steps.append(ForcedStep(pos, chunk, chunk[:-1] if len(chunk) == 5 else ()))
        pos += len(chunk)
    text = traced(force=ForceStream({"r0": tuple(steps)}), requests=1, max_new_tokens=16,
                  schedule="heuristic")
    v = parse_text(text).verifies
    ks, accs = [int(k) for k in v.k], [int(a) for a in v.acc]
    assert ks[0] == HFOptions().k and accs[0] < ks[0]  # its own drafts: not all accepted
    for i in range(len(ks) - 1):
        budget = len(prompt) + 16 - int(v.pos[i + 1]) - 1
        want = ks[i] + 2 if accs[i] == ks[i] else max(1, ks[i] - 1)
        if ks[i + 1] < budget:
            assert ks[i + 1] == want, (i, ks, accs)


def plain_greedy(prompt: list[int], n: int) -> list[int]:
    import torch

    from difftest.runners.hf.models import load_pair

    target, _ = load_pair(HFOptions())
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=n)
    return [int(t) for t in out[0, len(prompt):]]
