"""A runner for calibration tests: seeded top-4 block logits printed with `%.6g` (a quantum of
1e-4 at values near 10), arm B's noise of a fraction of that quantum, and a probe that raises
top-1 logits at or above 10.5 by `--mut`. A probe whose shift is just above the thresholds in
printed digits, and not above them once the print's rounding is taken off. `--part-on SEED`:
on that seed the committed stream of r0 parts at pos 4 (another token emitted, as a target
whose logits are not traced would flip one), every traced logit unchanged."""

from __future__ import annotations

import argparse
import random
import sys


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.0)
    p.add_argument("--mut", type=float, default=0.0)
    p.add_argument("--part-on", type=int, default=None)
    args = p.parse_args()
    shape = random.Random(args.seed)
    noise = random.Random(1234 + args.seed)
    for r in range(6):
        pos = 0
        for _ in range(8):
            rows = []
            for _ in range(4):
                top1, m = shape.uniform(5, 15), shape.uniform(0.5, 3)
                ids = shape.sample(range(100, 1000), 4)
                values = [top1, top1 - m, top1 - m - 1, top1 - m - 2]
                shifted = [v + noise.uniform(-args.noise, args.noise)
                           + (args.mut if j == 0 and top1 >= 10.5 else 0.0)
                           for j, v in enumerate(values)]
                rows.append(list(zip(ids, shifted, strict=True)))
            draft = " ".join(str(row[0][0]) for row in rows)
            emit = 8 if args.part_on == args.seed and r == 0 and pos == 4 else 7
            print(f"[SPECTRACE] req=r{r} pos={pos} k=4 ns=1 acc=0 draft=[ {draft} ] "
                  f"emit=[ {emit} ]", file=sys.stderr)
            for j, row in enumerate(rows, start=1):
                cells = " ".join(f"{i}:{v:.6g}" for i, v in row)
                print(f"[spec-logits] req=r{r} pos={pos} row={j} top=[ {cells} ]", file=sys.stderr)
            pos += 1


if __name__ == "__main__":
    main()
