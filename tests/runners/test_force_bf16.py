"""A bfloat16 draft in the reference runner against the float32 one: free (its captured free
runs, replayed), the pair visits different positions; teacher-forced, with real runs, every step
of A is compared on A's context and what is left to judge are the draft forward's own
differences (bf16 rounding of the logits and the near-tie flips it causes). Faults and
activation capture keep working in bfloat16."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from difftest import api
from difftest.core.activations import LocalizeOutcome, read_dumps
from difftest.config import Config
from difftest.core.errors import ExitCode, UsageError
from difftest.core.kinds import VerdictKind
from difftest.flow.localize import localize_dumps
from difftest.runners.reference.faults import module_names
from difftest.runners.reference.options import RunnerOptions
from difftest.runners.reference.runner import run
from conftest import TESTS, replay_command
from tests.flow.test_pipeline import config

# DFlash1 drafts the argmax of each row, so a drafted-token flip is a flip of the logits'
# order and the near-tie rule (logit margins) applies to it; see the DFlash2 test for the walk.
SMALL = ["--requests", "2", "--steps", "5", "--drafter", "dflash1"]
REF = [sys.executable, "-m", "difftest.runners.reference", *SMALL]
LEVEL3 = {"VT_SPEC_TRACE": "3"}
BF16 = {"command": [*REF, "--draft-dtype", "bfloat16"], "env": LEVEL3}
STEPS = 10  # 2 requests x 5 steps
LOGIT = re.compile(r"(\d+):(-?[0-9.e+-]+)")


def judge(tmp_path: Path, b: dict[str, object], **spec: object) -> api.ComparisonReport:
    cfg: Config = config(tmp_path, {"f32": {"command": REF, "env": LEVEL3}, "bf16": b},
                         {"pair": {"arm_a": "f32", "arm_b": "bf16", **spec}})
    return api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                              progress=False)


def printed_logits(run_dir: Path, arm: str) -> list[float]:
    text = (run_dir / f"{arm}.stderr").read_text()
    return [float(v) for line in text.splitlines() if line.startswith("[spec-logits]")
            for _, v in LOGIT.findall(line.partition("top=")[2])]


def is_bf16(value: float) -> bool:
    return float(torch.tensor(value).to(torch.bfloat16).float()) == value


def assert_every_position_compared(rep: api.ComparisonReport) -> None:
    assert rep.forcing is not None and rep.forcing.honoured, rep.verdict.reasons
    c, a = rep.comparison, rep.arm_a.trace
    assert c is not None and a is not None
    assert (c.unmatched_a, c.unmatched_b, c.steps_lost_a, c.steps_lost_b) == (0, 0, 0, 0)
    assert (c.context_diverged, c.rows_context_diverged) == (0, 0)
    assert c.blocks_compared == len(a.verifies) == rep.forcing.steps == STEPS
    assert c.logit_rows_compared == int(a.verifies.k.sum())


def test_free_running_bf16_draft_leaves_positions_uncompared(tmp_path: Path) -> None:
    """The contrast: a bf16 flip changes what is accepted, and the arms part ways (the
    reference runner's free runs of the pair, replayed: tests/data/force/, captured by
    scripts/capture_replay_traces.py force)."""
    free = TESTS / "data" / "force"
    cfg = config(tmp_path, {
        "f32": {"command": replay_command(free / "free-dflash1-f32.log")},
        "bf16": {"command": replay_command(free / "free-dflash1-bf16.log")}},
        {"pair": {"arm_a": "f32", "arm_b": "bf16"}})
    rep = api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                             progress=False)
    c = rep.comparison
    assert rep.forcing is None and c is not None
    assert c.unmatched_a + c.unmatched_b + c.context_diverged > 0
    assert c.blocks_compared < STEPS


def test_forced_bf16_draft_bitwise_differs_by_its_logits(tmp_path: Path) -> None:
    """Bitwise, every block differs by its logits (bf16 rounding), and the verdict is DIFFER;
    the trace holds B's bf16 values exactly, A's float32 ones."""
    rep = judge(tmp_path, BF16, teacher_force=True)
    assert_every_position_compared(rep)
    c = rep.comparison
    assert c is not None and rep.run_dir is not None
    assert rep.verdict.kind is VerdictKind.DIFFER and rep.exit_code is ExitCode.DIFFER
    assert c.blocks_logit_differing == c.blocks_compared
    assert rep.arm_a.trace is not None and rep.arm_b.trace is not None
    assert rep.arm_a.trace.config.values["dtype_draft"] == "float32"
    assert rep.arm_b.trace.config.values["dtype_draft"] == "bfloat16"
    b_values, a_values = printed_logits(rep.run_dir, "bf16"), printed_logits(rep.run_dir, "f32")
    assert b_values and all(is_bf16(v) for v in b_values)
    assert not all(is_bf16(v) for v in a_values)
    # Judged again with a stated atol above the largest difference measured here (0.244):
    # the logits agree and the token flips are near-ties, so the pair agrees.
    assert c.max_abs_logit_diff is not None and c.max_abs_logit_diff < 0.3
    again = api.rejudge(rep.run_dir, atol=0.3)
    assert_every_position_compared(again)
    g = again.comparison
    assert g is not None
    assert (g.blocks_differing, g.blocks_logit_differing) == (0, 0) and g.blocks_near_tie > 0
    assert again.verdict.kind is VerdictKind.AGREE, again.verdict.reasons


def test_forced_bf16_draft_with_dtype_tolerance_flips_only_near_ties(tmp_path: Path) -> None:
    """`tolerance = "dtype"` reads bfloat16 from B's `[spec-config]`: every token flip is a
    near-tie; what still differs are logits beyond the table's single-op bf16 tolerance (a
    whole forward rounds more than one op), so the verdict is DIFFER by logits only."""
    rep = judge(tmp_path, BF16, teacher_force=True, tolerance="dtype")
    assert_every_position_compared(rep)
    c = rep.comparison
    assert c is not None
    assert c.rules.rtol == pytest.approx(1.6e-2)  # the bfloat16 row of the dtype table
    assert c.blocks_differing == 0 and c.blocks_near_tie > 0
    assert 0 < c.blocks_logit_differing < c.blocks_compared
    assert rep.verdict.kind is VerdictKind.DIFFER


def test_forced_bf16_dflash2_flips_are_walk_flips_not_logit_near_ties(tmp_path: Path) -> None:
    """DFlash2 picks by scaled candidate values plus edge scores along a walk, so a bf16
    rounding can flip a pick whose logit margin is wide: forced, every step is still compared,
    and the flips stay hard even with the logits inside the tolerance."""
    dflash2 = [*REF[:-2], "--drafter", "dflash2"]
    cfg = config(tmp_path, {"f32": {"command": dflash2, "env": LEVEL3},
                            "bf16": {"command": [*dflash2, "--draft-dtype", "bfloat16"],
                                     "env": LEVEL3}},
                 {"pair": {"arm_a": "f32", "arm_b": "bf16", "teacher_force": True, "atol": 0.3}})
    rep = api.run_comparison(cfg, cfg.comparisons["pair"], run_root=tmp_path / "runs",
                             progress=False)
    assert_every_position_compared(rep)
    c = rep.comparison
    assert c is not None and c.blocks_logit_differing == 0 and c.blocks_differing > 0
    assert rep.verdict.kind is VerdictKind.DIFFER


def test_bad_draft_dtype_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="draft_dtype"):
        RunnerOptions(draft_dtype="float16")
    out = subprocess.run([*REF, "--draft-dtype", "fp8"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == ExitCode.USAGE
    assert "--draft-dtype" in out.stderr and "Traceback" not in out.stderr


def test_bf16_draft_keeps_faults_and_capture(tmp_path: Path) -> None:
    """Capture dumps every module of the bf16 forward; localize names a fault planted in it,
    and between the float32 and bfloat16 drafts the first differing module is the first one
    (the embeddings, rounded to bf16): a difference of the whole model, no module named."""
    base = RunnerOptions(requests=1, steps=1, draft_dtype="bfloat16")
    at = ("r0", base.prompt_len + 1)
    order = list(module_names(base.layers))

    def capture(options: RunnerOptions, name: str) -> Path:
        result = run(options, 1, capture=at, capture_dir=tmp_path / name)
        assert sum(line.startswith("[spec-act]") for line in result.lines) == len(order)
        # the block logits come back widened, so selection and noise run in float32
        assert all(r.logits.dtype == torch.float32 for r in result.records)
        return tmp_path / name

    clean = capture(base, "clean")
    assert [d.module for d in read_dumps(clean)] == order
    for fault in ("layers.0.attn:noise", "layers.1.o_proj:scale", "layers.1.attn:mask"):
        first = localize_dumps(clean, capture(base.with_(fault=fault), fault)).localization.first
        assert first is not None and first.module == fault.split(":")[0]
    f32 = capture(base.with_(draft_dtype="float32"), "f32")
    loc = localize_dumps(f32, clean).localization
    assert loc.outcome is LocalizeOutcome.WHOLE_MODEL and loc.first is None  # never "embed"
    assert loc.start is not None and loc.start.module == "embed"
