"""The rates a comparison reports, clustered by request: how often the compared drafts flipped,
how often the arms' top-1 logit ids agreed, and the smallest change of each that the comparison
could have detected (see `difftest.numerics.clustered` for the method).

Rows are grouped by request under position alignment; under ordinal alignment there are no
requests, and the proposing step is the group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftest.numerics.clustered import (POWER, ClusteredRate, clustered_rate, mde_two_sample,
                                mde_zero_events)
from difftest.analysis.compare import DIFFER, NEAR_TIE, NOISE_FLIP, Comparison, TakenRows
from difftest.core.kinds import AlignMode
from difftest.analysis.verdict import LOGITS, TOKENS

ALPHA = 0.01  # the level of the flip test, and of the detectable effects stated here


@dataclass(frozen=True)
class RateInstruments:
    """Clustered token flip rate and top-1 agreement, with their minimum detectable effects."""

    flip_rate: ClusteredRate | None
    flip_mde: float | None  # the smallest flip rate the comparison would have noticed
    flip_rule: str  # how flips are judged: "strict" (any flip counts) or "noise floor"
    top1_agreement: ClusteredRate | None
    top1_mde: float | None  # the smallest drop of top-1 agreement detectable at this size
    alpha: float = ALPHA
    power: float = POWER
    logit_note: str | None = None  # why KL or top-k overlap have wider request-clustered errors

    def to_json(self) -> dict[str, object]:
        return {
            "alpha": self.alpha, "power": self.power,
            "token_flip_rate": None if self.flip_rate is None else self.flip_rate.to_json(),
            "token_flip_rate_mde": self.flip_mde, "token_flip_rule": self.flip_rule,
            "top1_agreement": (None if self.top1_agreement is None
                               else self.top1_agreement.to_json()),
            "top1_agreement_mde": self.top1_mde,
        }

    def clustering_reasons(self) -> list[str]:
        """Where clustering widened an interval, the sentence that says so and why."""
        out = []
        for name, rate in (("token flip rate", self.flip_rate),
                           ("top-1 agreement", self.top1_agreement)):
            if (rate is not None and rate.wider and rate.clusters >= 2
                    and 0.0 < rate.value < 1.0):
                out.append(rate.describe(name))
        if self.logit_note is not None:
            out.append(self.logit_note)
        return out

    def mde_sentence(self, instruments: tuple[str, ...] = (TOKENS, LOGITS)) -> str | None:
        """What a green could have detected, per rate instrument among those that could have
        failed (a blind instrument detects nothing)."""
        parts = []
        if self.flip_rate is not None and TOKENS in instruments:
            rule = ("any flip counts" if self.flip_rule == "strict" else
                    "against the A/A flip rate")
            parts.append(f"token flip rate {_effect(self.flip_mde)} ({rule}; "
                         f"{self.flip_rate.clusters} requests, {self.flip_rate.rows} rows)")
        if self.top1_agreement is not None and LOGITS in instruments:
            parts.append(f"top-1 agreement {_effect(self.top1_mde)} "
                         f"({self.top1_agreement.clusters} requests, "
                         f"{self.top1_agreement.rows} rows)")
        if not parts:
            return None
        return (f"minimum detectable effects (alpha {self.alpha:g}, {self.power:.0%} power, "
                "request-clustered): " + ", ".join(parts))


def _effect(mde: float | None) -> str:
    return "none detectable" if mde is None else f"{mde:.3g}"


def _within(mde: float, room: float) -> float | None:
    """A detectable change only where the rate has room for it (None: no such change)."""
    return mde if mde <= room else None


def _groups(cmp: Comparison, req: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return req if cmp.mode is AlignMode.POSITION else pos


def rate_instruments(cmp: Comparison, alpha: float = ALPHA) -> RateInstruments:
    """The clustered rates of a comparison's compared rows and logit pairs."""
    r = cmp.rows
    compared = r.compared
    flipped = np.isin(r.status, (DIFFER, NEAR_TIE, NOISE_FLIP))[compared]
    flip = (clustered_rate(flipped, _groups(cmp, r.req[compared], r.pos[compared]))
            if compared.any() else None)
    floor = cmp.logits.floor if cmp.logits is not None else None
    strict = floor is None or floor.zero
    flip_mde = None
    if flip is not None:
        flip_mde = _within(mde_zero_events(flip.effective_rows) if strict
                           else mde_two_sample(flip, alpha, increase=True), 1.0 - flip.value)
    top1 = top1_mde = None
    lg = cmp.logits
    if lg is not None and lg.pairs is not None and lg.pair_req is not None and len(lg.pairs):
        p = lg.pairs
        first_a, first_b = (p.first_ids() if isinstance(p, TakenRows)
                            else (p.ids_a[:, 0], p.ids_b[:, 0]))
        same = (first_a >= 0) & (first_a == first_b)
        groups = lg.pair_req if cmp.mode is AlignMode.POSITION else np.zeros(len(p), np.int64)
        top1 = clustered_rate(same, groups)
        top1_mde = (_within(mde_two_sample(top1, alpha), top1.value) if top1 is not None
                    else None)
    note = lg.stats.clustering_note() if lg is not None and lg.stats is not None else None
    return RateInstruments(flip, flip_mde, "strict" if strict else "noise floor", top1, top1_mde,
                           alpha, logit_note=note)
