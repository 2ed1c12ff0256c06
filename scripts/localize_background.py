"""Localisation against a background, measured: planted single-module faults in a bf16 draft,
localised against the float32 draft (A) with and without the fault-free bf16 draft as the
baseline (B0), in the transformers runner.

    python scripts/localize_background.py [--runner hf|mlx] [--seeds 0 1 2] [--out FOLDER]

Per seed (the runner's input) it captures r0's first verify step of A (float32 assistant), B0
(bfloat16 assistant) and, per fault of the transformers runner's list, B (bfloat16 assistant,
fault planted), and judges each B as `difftest localize --baseline` does (`localize_dumps` with
the baseline's capture; `localize RUN_DIR --baseline ARM` reruns the arms and calls it on their
captures). It prints, per fault: the module named against the background (hit: the planted one
or a module inside it, in any draft forward; earlier: a module before it), its ratio there, the
outcome without a baseline, and the ratios that set `BACKGROUND_FACTOR`: the largest ratio of a
module before the fault (the benign side) and the planted module's own (the fault's side).
With `--runner mlx`: the mlx runner (float32 draft as A, bfloat16 draft as B0, `MLX_FAULTS`);
with `--runner reference`: the reference runner's default 2-layer draft and its 24 faults.
Per case it also shows where B first departs from B0, RMS |A - B| over RMS |A - B0| there and
RMS |B - B0| over RMS |A - B0| (`apart`: |A - B| the shortest side, a baseline that is no
background, refused), and the same against the bf16 draft of seed + 7, a baseline that is
not B's background; the summary gives RMS |A - B| over the shorter other side at the departure
(below 1: refused) for both. Needs the hf (or mlx) extra; about 2 s of CPU per capture.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAULTS = (  # the transformers runner's fault list (tests/runners/test_hf_force.py)
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


MLX_FAULTS = (
    "model.embed_tokens:noise",
    "model.layers.0.input_layernorm:scale",
    "model.layers.0.self_attn.o_proj:noise",
    "model.layers.0.mlp.down_proj:scale",
    "model.layers.1.self_attn:mask",
    "model.layers.1.mlp:scale",
    "model.norm:noise",
    "lm_head:scale",
)
RUNNER = {"name": "hf"}

if TYPE_CHECKING:
    from difftest.core.activations import Departure
OTHER_SEED = 7  # the not-a-background baseline: the bf16 draft of another seed (other weights,
#                 other prompts), against which no B here is a background


def reference_faults() -> tuple[str, ...]:
    """The reference runner's 24 faults of docs/localize.md: scale and noise on each module of
    its default 2-layer draft, and each layer's attention mask."""
    from difftest.runners.reference.faults import module_names

    return (*(f"{m}:{k}" for m in module_names(2) for k in ("scale", "noise")),
            *(f"layers.{i}.attn:mask" for i in range(2)))


def capture(folder: Path, seed: int, **options: object) -> Path:
    from difftest.emit import Tracer

    if RUNNER["name"] == "reference":
        from difftest.runners.reference.options import RunnerOptions
        from difftest.runners.reference.runner import run as run_reference

        ropts = RunnerOptions(requests=1, steps=1, seed=seed)
        if options.pop("assistant_dtype", None) is not None:
            ropts = ropts.with_(draft_dtype="bfloat16")
        if options.get("fault"):
            ropts = ropts.with_(fault=str(options["fault"]))
        if options.get("attn"):
            ropts = ropts.with_(attention_kernel="split")  # its other attention kernel
        run_reference(ropts, 1, capture=("r0", ropts.prompt_len + 1), capture_dir=folder)
        return folder
    if RUNNER["name"] == "mlx":
        from difftest.runners.mlx.options import MLXOptions
        from difftest.runners.mlx.runner import run as run_mlx

        if options.pop("assistant_dtype", None) is not None:
            options["draft_dtype"] = "bfloat16"
        if options.pop("attn", None) is not None:
            options["attn"] = "split-k"  # mlx's other attention path
        mopts = MLXOptions(requests=1, max_new_tokens=6, seed=seed,
                           **options)  # type: ignore[arg-type]
        run_mlx(mopts, Tracer(level=1, file=io.StringIO(), top_k=4),
                capture=("r0", mopts.prompt_len), capture_dir=str(folder))
        return folder
    from difftest.runners.hf.options import HFOptions
    from difftest.runners.hf.runner import run

    opts = HFOptions(requests=1, max_new_tokens=6, seed=seed, **options)  # type: ignore[arg-type]
    run(opts, Tracer(level=1, file=io.StringIO(), top_k=4), force=None,
        capture=("r0", opts.prompt_len), capture_dir=str(folder))
    return folder


def side(d: Departure) -> str:
    """A departure as the table shows it: the module, RMS |A - B| over RMS |A - B0|, and RMS
    |B - B0| over RMS |A - B0|; `apart` when |A - B| is the shortest side."""
    return (f"{d.module} {d.ratio:.4g} / {d.b_b0 / d.a_b0 if d.a_b0 else math.inf:.4g}"
            f"{' apart' if d.baseline_apart else ''}")


def inside(module: str, planted: str) -> bool:
    """`d1.model.layers.1.mlp.down_proj` is inside `model.layers.1.mlp` (any draft forward; the
    reference runner's modules carry no forward prefix)."""
    plain = module if RUNNER["name"] == "reference" else module.partition(".")[2]
    return plain == planted or plain.startswith(planted + ".")


def main() -> int:
    from difftest.core.activations import BACKGROUND_FACTOR, departure, read_dumps
    from difftest.core.errors import UsageError
    from difftest.flow.localize import localize_dumps

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--runner", choices=("hf", "mlx", "reference"), default="hf")
    args = parser.parse_args()
    RUNNER["name"] = args.runner
    faults = {"mlx": MLX_FAULTS, "hf": FAULTS, "reference": reference_faults()}[args.runner]
    out = args.out or Path(tempfile.mkdtemp(prefix="localize-background-"))
    print(f"factor {BACKGROUND_FACTOR}; captures in {out}\n")
    print("| seed | fault | named against B0 | ratio there | before the fault: max ratio | "
          "planted module: max ratio | without a baseline | B departs from B0: ratio / "
          "RMS |B - B0| over RMS |A - B0| | from the other seed's: the same |")
    print("|---|---|---|---|---|---|---|---|---|")
    hits = earlier = cases = embed_named = 0
    benign: list[float] = []
    own: list[float] = []
    starts: list[float] = []  # ratio where B first departs from its (right) baseline
    others: list[float] = []  # the same against the other seed's bf16 draft
    refused: list[str] = []  # other-seed cases refused before any ratio (module lists differ)
    apart = caught = 0  # |A - B| the shortest side where B departs: right baseline, other seed
    margins: list[float] = []  # Departure.margin (below 1: refused), right baseline
    wrong_margins: list[float] = []  # the same, the other seed's baseline
    for seed in args.seeds:
        a = capture(out / f"s{seed}-a", seed)
        b0 = capture(out / f"s{seed}-b0", seed, assistant_dtype="bfloat16")
        other = capture(out / f"s{seed}-other", seed + OTHER_SEED, assistant_dtype="bfloat16")
        for fault in faults:
            planted = fault.split(":")[0]
            b = capture(out / f"s{seed}-{fault.replace(':', '_')}", seed,
                        assistant_dtype="bfloat16", fault=fault)
            loc = localize_dumps(a, b, baseline=b0).localization
            mods = loc.modules
            dumps = read_dumps(a), read_dumps(b)
            begins = departure(*dumps, read_dumps(b0))
            starts.append(math.inf if begins is None else begins.ratio)
            apart += begins is not None and begins.baseline_apart
            margins.append(math.inf if begins is None else begins.margin)
            wrong = None
            try:
                wrong = departure(*dumps, read_dumps(other))
                others.append(math.inf if wrong is None else wrong.ratio)
                caught += wrong is not None and wrong.baseline_apart
                wrong_margins.append(math.inf if wrong is None else wrong.margin)
            except UsageError as exc:
                refused.append(f"{fault}: {exc}")
            start = next(i for i, m in enumerate(mods) if inside(m.module, planted))
            before = max((m.ratio or 0.0 for m in mods[:start]), default=1.0)
            mine = max(m.ratio or 0.0 for m in mods if inside(m.module, planted))
            benign.append(before)
            own.append(mine)
            first = loc.first
            hit = first is not None and inside(first.module, planted)
            early = first is not None and mods.index(first) < start
            cases += 1
            hits += hit
            earlier += early
            plain = localize_dumps(a, b).localization
            assert plain.outcome is not None
            if plain.first is not None and plain.first is mods[0] and start > 0:
                embed_named += 1
            named = "-" if first is None else first.module + (" (earlier)" if early else "")
            print(f"| {seed} | {fault} | {named} | "
                  f"{(first.ratio or 0.0) if first else 0.0:.4g} | {before:.4g} | {mine:.4g} | "
                  f"{plain.outcome.value}"
                  f"{'' if plain.first is None else ': ' + plain.first.module} | "
                  f"{'-' if begins is None else side(begins)} | "
                  f"{'refused' if wrong is None else side(wrong)} |")
    print(f"\nnamed against the background: {hits} of {cases}; an earlier module: {earlier}; "
          f"without a baseline, the embedding named for a fault elsewhere: {embed_named}")
    print(f"ratio of a module before its fault: max {max(benign):.6g}; of the planted module: "
          f"min {min(own):.6g}")
    print(f"ratio where B first departs from B0 (the change's start): min {min(starts):.4g} "
          f"over {len(starts)} cases; against the bf16 draft of seed + {OTHER_SEED} (not a "
          f"background): max {max(others, default=math.nan):.4g} over {len(others)} cases, "
          f"{len(refused)} refused before (module lists differ)")
    print(f"|A - B| the shortest side of A, B, B0 where B departs (refused as no background): "
          f"right baseline {apart} of {len(starts)}, RMS |A - B| over the shorter other side "
          f"min {min(margins):.4g}; other seed's {caught} of {len(others)}, max "
          f"{max(wrong_margins, default=math.nan):.4g}")
    # a harmless change B0 does not share: the other attention path in bf16 (hf: eager, mlx:
    # split-k), as B against B0 (sdpa)
    for seed in args.seeds:
        a = out / f"s{seed}-a"
        eager = capture(out / f"s{seed}-eager", seed, assistant_dtype="bfloat16", attn="eager")
        loc = localize_dumps(a, eager, baseline=out / f"s{seed}-b0").localization
        ratios = [m.ratio or 0.0 for m in loc.modules]
        begins = departure(read_dumps(a), read_dumps(eager), read_dumps(out / f"s{seed}-b0"))
        other_path = {"mlx": "split-k", "hf": "eager", "reference": "split-kernel"}[args.runner]
        print(f"seed {seed}: bf16 {other_path} against the "
              f"bf16 sdpa baseline: ratio {min(ratios):.3g}"
              f"..{max(ratios):.3g}, first beyond the factor: "
              f"{'-' if loc.first is None else loc.first.module}; departs from B0 at "
              f"{'-' if begins is None else side(begins)}")
    return 0 if hits >= 0.9 * cases and earlier == 0 and embed_named == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
