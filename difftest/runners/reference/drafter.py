"""Turning block logits into drafted ids: DFlash's per-row argmax and DFlash2's candidate walk."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from difftest.runners.reference.model import Drafter


@dataclass
class Selection:
    draft: list[int]
    select_ms: float = 0.0  # candidates and scalars
    walk_ms: float = 0.0  # edge scores and the greedy walk


def top_entries(row: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n highest values of a row, highest first, lower id first among equals."""
    values, ids = torch.sort(row, descending=True, stable=True)
    return ids[:n], values[:n]


def dflash1(rows: torch.Tensor) -> Selection:
    """Per-row argmax of the sampled rows `[k, V]` (torch.argmax picks the first maximum)."""
    return Selection(draft=rows.argmax(dim=-1).tolist())


def apply_scalars(values: torch.Tensor, multiplier: float, softcap: float | None) -> torch.Tensor:
    """output_multiplier, then final_logit_softcapping (None: no cap)."""
    values = values * multiplier
    if softcap is not None:
        values = torch.tanh(values / softcap) * softcap
    return values


def dflash2(drafter: Drafter, rows: torch.Tensor, topk: int, multiplier: float,
            softcap: float | None) -> Selection:
    """Top-K candidates per row, scaled values plus edge scores, greedy walk from row 1's first."""
    t0 = time.perf_counter()
    cands, values = [], []
    for row in rows:
        ids, vals = top_entries(row, topk)
        cands.append(ids)
        values.append(apply_scalars(vals, multiplier, softcap))
    t1 = time.perf_counter()
    chosen = 0
    draft = [int(cands[0][0])]
    for i in range(1, rows.shape[0]):
        edges = drafter.edge_scores(cands[i - 1][chosen:chosen + 1], cands[i])[0]
        chosen = int(torch.argmax(values[i] + edges))
        draft.append(int(cands[i][chosen]))
    t2 = time.perf_counter()
    return Selection(draft=draft, select_ms=(t1 - t0) * 1e3, walk_ms=(t2 - t1) * 1e3)
