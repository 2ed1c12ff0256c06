"""Planted single-module faults in both runners and what `localize --dumps` names for each: a
markdown table (runner, module, kind, named module, hit) and the hit rate.

    python scripts/fault_table.py [--out FOLDER]

Each fault's draft forward at the first verify step of r0 is captured next to a clean one and
walked in forward order (tolerance 0). A hit: the named module is the planted one or inside it
(a changed mask first shows in its attention's output projection). A miss that names a module
before the planted one is marked `BEFORE`. Both runners are seeded: the table is reproducible.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

REF_KINDS = ("scale", "noise")
HF_FAULTS = (
    "model.embed_tokens:noise", "model.layers.0.input_layernorm:scale",
    "model.layers.0.self_attn.q_proj:scale", "model.layers.0.self_attn.v_proj:noise",
    "model.layers.0.self_attn:mask", "model.layers.0.self_attn.o_proj:noise",
    "model.layers.0.mlp.down_proj:scale", "model.layers.0.mlp:noise",
    "model.layers.1.self_attn.k_proj:scale", "model.layers.1.self_attn:mask",
    "model.layers.1.self_attn:scale", "model.layers.1.mlp.act_fn:noise",
    "model.layers.1.mlp:scale", "model.norm:noise", "lm_head:scale")


def _judge(runner: str, fault: str, clean: Path, faulty: Path, strip: bool
           ) -> tuple[str, str, str, str, str]:
    from difftest.flow.localize import localize_dumps

    module, kind = fault.split(":")[:2]
    loc = localize_dumps(clean, faulty).localization

    def name(m: str) -> str:
        return m.partition(".")[2] if strip else m

    # a fault in the first module: the whole capture differs, starting there (named as
    # where it starts, not as a cause)
    named = name(loc.start.module) if loc.start is not None else None
    order = [name(m.module) for m in loc.modules]
    inside = [i for i, m in enumerate(order) if m == module or m.startswith(module + ".")]
    if named is not None and (named == module or named.startswith(module + ".")):
        verdict = "hit"
    elif named is not None and inside and order.index(named) < min(inside):
        verdict = "BEFORE"
    else:
        verdict = "miss"
    return runner, module, kind, named or "(none)", verdict


def reference_rows(out: Path) -> list[tuple[str, str, str, str, str]]:
    from difftest.runners.reference.faults import module_names
    from difftest.runners.reference.options import RunnerOptions
    from difftest.runners.reference.runner import run

    base = RunnerOptions(requests=1, steps=1, layers=3)
    at = ("r0", base.prompt_len + 1)
    faults = ([f"{m}:{k}" for m in module_names(base.layers) for k in REF_KINDS]
              + [f"layers.{i}.attn:mask" for i in range(base.layers)])

    def capture(fault: str) -> Path:
        folder = out / "reference" / (fault.replace(":", "_") or "clean")
        run(base.with_(fault=fault), 1, capture=at, capture_dir=folder)
        return folder

    clean = capture("")
    return [_judge("reference", f, clean, capture(f), strip=False) for f in faults]


def hf_rows(out: Path) -> list[tuple[str, str, str, str, str]]:
    from difftest.emit import Tracer
    from difftest.runners.hf.options import HFOptions
    from difftest.runners.hf.runner import run

    at = ("r0", HFOptions().prompt_len)

    def capture(fault: str) -> Path:
        folder = out / "hf" / (fault.replace(":", "_") or "clean")
        run(HFOptions(requests=1, max_new_tokens=6, fault=fault),
            Tracer(level=1, file=io.StringIO()), capture=at, capture_dir=str(folder))
        return folder

    clean = capture("")
    return [_judge("hf", f, clean, capture(f), strip=True) for f in HF_FAULTS]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="capture folders (default: a temp dir)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        rows = reference_rows(out) + hf_rows(out)
    print("| runner | module | kind | named module | result |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(f"`{c}`" if i in (1, 3) else c for i, c in enumerate(row)) + " |")
    hits = sum(r[4] == "hit" for r in rows)
    before = sum(r[4] == "BEFORE" for r in rows)
    print(f"\n{hits} of {len(rows)} named ({100 * hits / len(rows):.0f}%); "
          f"{before} named a module before the planted one")
    return 0 if hits == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
