"""The target's verify with its rollback: where the corpus's verify-width, acceptance,
rollback and end-of-sequence bugs (difftest.runners.reference.bugs) act, counted in the run's
coverage."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from difftest.core.corpus import width_path_broken
from difftest.runners.reference.bugs import Coverage
from difftest.runners.reference.model import Target, TargetCache


def truncate(cache: TargetCache, rows: int) -> None:
    """Roll the target cache back to its first `rows` rows."""
    cache.k = [k[:rows] for k in cache.k]
    cache.v = [v[:rows] for v in cache.v]


@dataclass(frozen=True)
class Verified:
    """One verify: the tokens it commits, and whether the request ended there."""

    emitted: list[int]
    finished: bool


def verify_block(target: Target, cache: TargetCache, pending: list[torch.Tensor], anchor: int,
                 draft: list[int], mutation: str, coverage: Coverage, eos_id: int) -> Verified:
    """Greedy lossless verify in one pass of width 1 + len(draft), then the rollback.

    The target consumes the anchor and every drafted token (row by row, so each row is what it
    would be alone), accepts the longest prefix it agrees with, emits its own next id, and rolls
    its cache and the features for the drafter back to the accepted rows."""
    n = len(draft)
    width = 1 + n
    coverage.widths[width] += 1
    start, fed = len(cache), len(pending)
    want = []
    for tok in [anchor, *draft]:
        logits, feat = target.consume(cache, tok)
        want.append(int(logits.argmax()))
        pending.append(feat)
    if width_path_broken(mutation, width):
        # this width's path gathers its output rows at the offsets of the next padded width:
        # each row's logits are the next row's, the last row's its own
        want = [*want[1:], want[-1]]
        coverage.fired += 1
    limit = n - 1 if mutation == "last-draft-never-accepted" else n
    acc = 0
    while acc < limit and draft[acc] == want[acc]:
        acc += 1
    if acc < n and draft[acc] == want[acc]:
        coverage.fired += 1  # the loop stopped one short of a matching draft
    if acc < n and draft[acc] != want[acc]:
        coverage.rejections += 1
        if mutation == "accept-one-too-many":
            acc += 1
            coverage.fired += 1
    if acc == n:
        coverage.full_accepts += 1
    emitted = [*draft[:acc], want[acc]]
    keep = 1 + acc
    if keep < width:
        if mutation == "kv-not-rolled-back":
            coverage.fired += 1
        else:
            truncate(cache, start + keep)
            coverage.rollbacks += 1
        if mutation == "drafter-rejected-hidden":
            coverage.fired += 1
        else:
            del pending[fed + keep:]
    if eos_id >= 0 and eos_id in emitted:
        end = emitted.index(eos_id) + 1
        coverage.eos += 1
        coverage.eos_bonus += end == len(emitted)
        if mutation == "bonus-dropped-at-eos" and end == len(emitted):
            end -= 1  # the stop check ran before the step's own token was appended
            coverage.fired += 1
        return Verified(emitted[:end], True)
    return Verified(emitted, False)
