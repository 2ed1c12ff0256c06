"""Measuring arm A's A/A noise floor from N reruns: every pair of reruns compared bitwise, the
largest logit difference and the token flips pooled (see `difftest.numerics.noise` for what the floor
then decides)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import combinations

import numpy as np

from difftest.analysis.compare import DIFFER, NEAR_TIE, Comparison, compare
from difftest.config import ArmSpec
from difftest.core.errors import UsageError
from difftest.core.kinds import DraftingKind
from difftest.core.names import rerun_name
from difftest.core.model import ArmTrace
from difftest.numerics.noise import (NoiseFloor, RerunPair, noise_floor, request_flips,
                                     request_names)
from difftest.numerics.stats import LogitStats, PairedRows, logit_stats


def reruns(arm: ArmSpec, runs: int, taken: Collection[str] = ()) -> list[ArmSpec]:
    """Runs 2..N of an arm, under names no configured arm may have."""
    out = []
    for i in range(2, runs + 1):
        name = rerun_name(arm.name, i)
        if name in taken:
            raise UsageError(f"an arm is named {name!r}, the name difftest gives run {i} of "
                             f"{arm.name!r}: rename it to measure a noise floor")
        out.append(arm.with_changes(name=name))
    return out


def _pair(i: int, j: int, cmp: Comparison) -> RerunPair:
    r = cmp.rows
    flips = int(np.isin(r.status, (DIFFER, NEAR_TIE)).sum())
    identical = (not flips and not cmp.blocks_logit_differing and not cmp.unmatched_a
                 and not cmp.unmatched_b and not cmp.divergences and not cmp.coverage_gaps)
    keep = r.compared
    by_request = request_flips(r.req[keep], request_names(cmp.requests, r.req),
                               np.isin(r.status[keep], (DIFFER, NEAR_TIE)))
    return RerunPair(i, j, int(r.compared.sum()), flips, cmp.logit_rows_compared,
                     cmp.max_abs_logit_diff, identical, by_request)


def _pooled(cmps: Sequence[Comparison]) -> LogitStats | None:
    parts = [c.logits.pairs.widened() for c in cmps
             if c.logits is not None and c.logits.pairs is not None and len(c.logits.pairs)]
    if not parts:
        return None
    width = max(p.ids_a.shape[1] for p in parts)

    def pad(x: np.ndarray, fill: float) -> np.ndarray:
        return np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=fill)

    lg = next(c.logits for c in cmps if c.logits is not None)
    # the same request in every pair of reruns is one cluster: its context is shared. A row's
    # cluster is its request name's rank among every pair's names (the order the names sort
    # in), so a long name is held once, not once per row
    named = [(c.requests, c.logits.pair_req) for c in cmps
             if c.logits is not None and c.logits.pairs is not None and len(c.logits.pairs)
             and c.logits.pair_req is not None and c.requests]
    cluster = None
    if len(named) == len(parts):
        rank = {name: i for i, name in enumerate(sorted({str(n) for r, _ in named for n in r}))}
        cluster = np.concatenate([np.array([rank[str(n)] for n in r], np.int64)[at]
                                  for r, at in named])
    return logit_stats(PairedRows(
        np.concatenate([pad(p.ids_a, -1) for p in parts]),
        np.concatenate([pad(p.vals_a, np.nan) for p in parts]),
        np.concatenate([pad(p.ids_b, -1) for p in parts]),
        np.concatenate([pad(p.vals_b, np.nan) for p in parts])),
        digits=(lg.resolution_a.digits, lg.resolution_b.digits), cluster=cluster)


def measure_floor(arm: str, traces: Sequence[ArmTrace],
                  drafting: DraftingKind = DraftingKind.BLOCK) -> NoiseFloor:
    """Compare every pair of reruns bitwise and pool what moved, under the drafting rules of
    the comparison the floor is for: with sequential drafting, the rows after a rerun's flip
    ran on another token, so they are no measure of noise and stay out of the floor."""
    cmps = [(i, j, compare(traces[i], traces[j], drafting=drafting))
            for i, j in combinations(range(len(traces)), 2)]
    return noise_floor(arm, len(traces), [_pair(i, j, c) for i, j, c in cmps],
                       _pooled([c for _, _, c in cmps]))
