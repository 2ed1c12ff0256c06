"""The bug corpus's record: each known-wrong variant of a runner, the state it needs an input to
reach, which kind of difference it must show, where the class was seen, and which runners carry
it (a class that exists in the transformers or mlx runner is planted there too).

Plain data, no torch: the config loader, the runners' option checks, `sweep` and
`scripts/bug_recall.py` all read it; the implementations are
`difftest.runners.reference.bugs` and the hf and mlx runners' `corpus` modules. Each coverage
class is a counter of the runner's `[spec-coverage]` line (docs/trace-format.md) and its
threshold is here, once; so are the rules the shared classes break (the window a mask reads,
the verify width whose path is wrong, the draft-length cycle).
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class CoverageClass(StrEnum):
    """A kind of state a run can exercise, named by the `[spec-coverage]` counter that counts it."""

    PAGE_BOUNDARY = "page_cross"  # drafted blocks that reach or cross a page boundary
    PAGE_END = "page_end"  # drafted blocks whose last row is a page's last slot
    PAGE_ORDER = "page_order"  # block reads through a block table not in physical order
    VERIFY_WIDTHS = "widths"  # distinct verify widths (anchor + drafted tokens) seen
    REJECTION = "rejections"  # verifies that rejected a drafted token (and rolled back)
    FULL_ACCEPT = "full_accepts"  # verifies that accepted every drafted token (bonus emitted)
    BATCH = "batch"  # most requests drafted in one step
    WINDOW_EDGE = "window_edges"  # block reads where a sliding window excludes a key
    EOS = "eos"  # requests that ended at their end-of-sequence id
    EOS_BONUS = "eos_bonus"  # requests that ended at EOS as a verify's own token
    PREFIX_SHARED = "prefix_shared"  # requests that met another's prompt in the prefix cache
    PREFIX_PARTIAL = "prefix_partial"  # shared prefixes ending inside a page the donor holds

    @property
    def needed(self) -> int:
        """The count at which the class counts as exercised (widths: two different ones)."""
        return {CoverageClass.VERIFY_WIDTHS: 2, CoverageClass.BATCH: 2}.get(self, 1)

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    CoverageClass.PAGE_BOUNDARY: "page boundary inside a drafted block",
    CoverageClass.PAGE_END: "drafted block ending on a page's last slot",
    CoverageClass.PAGE_ORDER: "block table out of physical order",
    CoverageClass.VERIFY_WIDTHS: "verify widths",
    CoverageClass.REJECTION: "rejections and rollbacks",
    CoverageClass.FULL_ACCEPT: "fully accepted blocks",
    CoverageClass.BATCH: "requests per batch",
    CoverageClass.WINDOW_EDGE: "sliding-window edges",
    CoverageClass.EOS: "requests ended at EOS",
    CoverageClass.EOS_BONUS: "requests ended at EOS as the bonus token",
    CoverageClass.PREFIX_SHARED: "shared prompt prefixes met",
    CoverageClass.PREFIX_PARTIAL: "shared prefixes ending inside a page",
}


class BugKind(StrEnum):
    """Which kind of difference a bug shows (the issue's two opposite kinds, and a third): what a
    DIFFER is named by (difftest.analysis.bugclass)."""

    DRAFTER = "drafter"  # drafts differ, the committed stream is equal
    STATE = "verify-or-state"  # the committed stream differs
    ACCEPTANCE = "acceptance"  # acceptance moved where the drafts were identical


class Lane(StrEnum):
    """Which arm a mutation must be planted in to have its state: the paged lane's page tables,
    or any lane."""

    PAGED = "paged"
    ANY = "any"


class Runner(StrEnum):
    """A runner of this package that can carry corpus mutations (`python -m
    difftest.runners.NAME --list-mutations` lists the ones it carries)."""

    REFERENCE = "reference"
    HF = "hf"
    MLX = "mlx"


@dataclass(frozen=True)
class Mutation:
    """One corpus entry. `needs` is what an input must exercise for the bug to act at all;
    `inputs` are runner arguments that make such inputs (added to both arms by sweep and recall);
    `judged_by` the shipped comparison it is judged through (the reference runner's; the hf and
    mlx runners judge through their `rerun`, a control under `judged_by`'s tolerance where their
    config has that comparison); `runners` those that carry it; a control has no `shows`."""

    name: str
    bug_class: str
    needs: tuple[CoverageClass, ...]
    shows: BugKind | None
    source: str
    lane: Lane = Lane.ANY
    judged_by: str = "lanes"
    runners: tuple[Runner, ...] = (Runner.REFERENCE,)

    @property
    def control(self) -> bool:
        return self.shows is None


_P, _A = Lane.PAGED, Lane.ANY
_C = CoverageClass
_ALL = (Runner.REFERENCE, Runner.HF, Runner.MLX)
_HF_MLX = (Runner.HF, Runner.MLX)
CORPUS: tuple[Mutation, ...] = (
    # The three attention mutations the runner always had.
    Mutation("causal-mask", "draft mask made causal", (), BugKind.DRAFTER,
             "class seen in attention-mask fixes of block drafters"),
    Mutation("skip-kv-write", "block K/V written after it is read", (), BugKind.DRAFTER,
             "class seen in paged-attention write-order fixes"),
    Mutation("stale-seq-lens", "sequence length not extended by the block", (), BugKind.DRAFTER,
             "class seen in paged-attention seq_lens fixes"),
    # State and shape.
    Mutation("page-boundary-off-by-one", "page-boundary off-by-one", (_C.PAGE_END,),
             BugKind.DRAFTER, "class seen in paged-attention last-block length fixes (vLLM, SGLang)",
             _P),
    Mutation("block-crosses-page", "block written as if within one page", (_C.PAGE_BOUNDARY,),
             BugKind.DRAFTER, "class seen in paged KV slot-mapping fixes (vLLM, SGLang)", _P),
    Mutation("block-table-order", "block table read in the wrong order", (_C.PAGE_ORDER,),
             BugKind.DRAFTER, "class seen in paged KV block-table fixes (vLLM, SGLang)", _P),
    Mutation("batch-seq-lens-shift", "batch metadata one request off", (_C.BATCH,),
             BugKind.DRAFTER, "class seen in batched-metadata fixes of serving engines", _P),
    Mutation("prefix-cache-partial-page", "prefix-cache block reused across requests",
             (_C.PREFIX_PARTIAL,), BugKind.DRAFTER,
             "class seen in prefix-caching fixes (vLLM, SGLang)", _P),
    Mutation("sliding-window-edge", "sliding-window edge", (_C.WINDOW_EDGE,), BugKind.DRAFTER,
             "class seen in sliding-window fixes (vLLM, SGLang)", runners=_ALL),
    Mutation("kv-not-rolled-back", "KV not rolled back after a rejection", (_C.REJECTION,),
             BugKind.STATE, "class seen in speculative-decoding rollback fixes"),
    Mutation("verify-width-path", "kernel path wrong at one verify width",
             (_C.VERIFY_WIDTHS,), BugKind.STATE,
             "class seen as llama.cpp's batch-width divergences", runners=_ALL),
    Mutation("accept-one-too-many", "one token accepted too many", (_C.REJECTION,),
             BugKind.STATE, "class seen in accepted-count fixes, e.g. vLLM PR #50021"),
    Mutation("last-draft-never-accepted", "acceptance loop stops one short", (_C.FULL_ACCEPT,),
             BugKind.ACCEPTANCE,
             "class seen in acceptance-rate regressions, e.g. llama.cpp #26750"),
    Mutation("bonus-dropped-at-eos", "bonus token dropped at EOS", (_C.EOS_BONUS,), BugKind.STATE,
             "class seen in stop-token handling fixes of speculative decoding"),
    Mutation("drafter-stale-hidden", "drafter fed hidden states of the wrong step", (),
             BugKind.DRAFTER, "class seen in EAGLE-style hidden-state offset fixes"),
    Mutation("drafter-rejected-hidden", "drafter fed hidden states of rejected tokens",
             (_C.REJECTION,), BugKind.DRAFTER, "class seen in EAGLE-style hidden-state fixes"),
    # The draft mask's class in the transformers and mlx runners (the reference's causal-mask).
    Mutation("broken-mask", "draft mask of the wrong causality", (), BugKind.DRAFTER,
             "class seen in attention-mask fixes of block drafters", runners=_HF_MLX),
    # Harmless controls: each must stay AGREE.
    Mutation("control-page-layout", "a different but exact page layout", (), None,
             "control", _P),
    Mutation("control-request-order", "requests taken in reverse order each step", (), None,
             "control"),
    Mutation("control-reordered-reduction", "attention partials reduced in reverse order", (),
             None, "control", _A, "split"),
    # the draft's sdpa given an explicit causal mask instead of its causal flag: the same
    # attention, which transformers' sdpa may round otherwise (judged under `attn`'s tolerance)
    Mutation("control-explicit-mask", "sdpa with an explicit causal mask, not its causal flag",
             (), None, "control", _A, "attn", _HF_MLX),
)

BY_NAME: dict[str, Mutation] = {m.name: m for m in CORPUS}
NAMES: tuple[str, ...] = tuple(m.name for m in CORPUS)


def carried_by(runner: Runner) -> tuple[Mutation, ...]:
    """The records a runner carries, in corpus order."""
    return tuple(m for m in CORPUS if runner in m.runners)


def names_of(runner: Runner) -> tuple[str, ...]:
    return tuple(m.name for m in carried_by(runner))


def listing(runner: Runner) -> str:
    """The records a runner carries as a table, one a line (each runner's `--list-mutations`)."""
    rows = [("name", "class", "needs", "shows", "lane")]
    for m in carried_by(runner):
        rows.append((m.name, m.bug_class, ",".join(c.value for c in m.needs) or "-",
                     m.shows.value if m.shows else "control (must agree)", m.lane.value))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
                   for r in rows)


# Names a mutation for a runner that has no --mutation in its command (a config's `mutations`).
MUTATION_ENV = "DIFFTEST_MUTATION"


def mutation_from_env(allowed: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The mutation DIFFTEST_MUTATION names, one of a runner's `allowed`; unset or empty means
    none (a UsageError names a mutation the runner does not have)."""
    from difftest.core.errors import UsageError

    env = os.environ if env is None else env
    value = env.get(MUTATION_ENV, "").strip()
    if not value:
        return "none"
    if value not in allowed:
        raise UsageError(f"{MUTATION_ENV}={value!r} is not a mutation; choose one of "
                         f"{', '.join(allowed)}")
    return value


# The rules of the shared classes, here once for the three runners that plant them.
# The verify width (anchor + drafted tokens) whose kernel path `verify-width-path` breaks.
BUG_WIDTH = 3


def width_path_broken(mutation: str, width: int) -> bool:
    """Whether a verify of this width takes `verify-width-path`'s broken path: its output rows
    gathered at the offsets of the next padded width (each row's logits are the next row's)."""
    return mutation == "verify-width-path" and width == BUG_WIDTH


def window_read(mutation: str, window: int) -> int:
    """A sliding window (keys a query sees, itself included) as the mask reads it: one key too
    many under `sliding-window-edge`."""
    return window + 1 if mutation == "sliding-window-edge" else window


def window_edge(window: int, last_query: int) -> bool:
    """Whether a window of `window` keys leaves out a key of a forward whose last query sits at
    `last_query` (it sees furthest): only there does a window one key too wide read a key it
    must not."""
    return last_query >= window


def cycled_len(lens: Sequence[int], k: int, step: int, index: int) -> int:
    """Tokens request `index` drafts at its `step`: k, or its entry of the --draft-lens cycle
    (request i starts i entries on, so requests meet different widths at once)."""
    return lens[(step + index) % len(lens)] if lens else k


def flip_reaches(q_len: int, window: int, layers: int, last_sampled: bool) -> bool:
    """Whether flipping a forward's causality can change a sampled row. It changes the rows
    that have a later key in the forward (every row but the last); under a window a changed row
    p reaches a row s only through the later layers' keys, if s - p <= (layers - 1) *
    (window - 1). The nearest sampled row is the forward's last (1 past the last changed row),
    or the next forward's first (2 past) where this one's last is not sampled (a prefill)."""
    if q_len < 2:
        return False
    return not window or (1 if last_sampled else 2) <= (layers - 1) * (window - 1)


@dataclass
class StepCoverage:
    """What a transformers or mlx run exercised (the reference runner counts more, in its own
    `bugs.Coverage`): printed once as the `[spec-coverage]` line."""

    widths: Counter[int] = field(default_factory=Counter)
    rejections: int = 0
    full_accepts: int = 0
    window_edges: int = 0
    fired: int = 0

    def verified(self, drafted: int, accepted: int) -> None:
        """One verify of `drafted` tokens that accepted `accepted` of them."""
        self.widths[1 + drafted] += 1
        if accepted < drafted:
            self.rejections += 1
        elif drafted:
            self.full_accepts += 1

    def draft_forward(self, mutation: str, window: int, q_len: int, k_len: int, *,
                      layers: int, last_sampled: bool) -> None:
        """One draft forward (its first attention layer) of a draft with `layers` layers
        (`last_sampled`: its last row is sampled): whether the window left a key out, and
        whether a planted mask bug changed a row that a sampled row reads. A window one key too
        wide reads a key only past the edge (the sampled row past it too)."""
        edge = bool(window) and window_edge(window, k_len - 1)
        self.window_edges += edge
        self.fired += ((mutation == "sliding-window-edge" and edge)
                       or (mutation == "broken-mask"
                           and flip_reaches(q_len, window, layers, last_sampled)))

    def fields(self) -> dict[str, object]:
        return {CoverageClass.VERIFY_WIDTHS.value: ",".join(
                    f"{w}:{n}" for w, n in sorted(self.widths.items())) or "-",
                CoverageClass.REJECTION.value: self.rejections,
                CoverageClass.FULL_ACCEPT.value: self.full_accepts,
                CoverageClass.WINDOW_EDGE.value: self.window_edges,
                "fired": self.fired}


def add_corpus_arguments(p: argparse.ArgumentParser, window: bool = True) -> None:
    """A runner's options for the corpus's state: --draft-lens, --list-mutations and, with
    `window`, --sliding-window (the transformers and mlx runners'; the reference runner's
    windows are its --layer-masks). Parsed by core.limits: parse_draft_lens, check_window."""
    if window:
        p.add_argument("--sliding-window", type=int, default=0,
                       help="the draft's attention sees only its last W keys (0: no window); "
                            "window edges are counted in [spec-coverage]")
    p.add_argument("--draft-lens", default="",
                   help="comma-separated drafted tokens per verify (each 1..k), cycled, "
                        "request i starting i entries on: the verify widths exercised "
                        "(default: k every verify)")
    p.add_argument("--list-mutations", action="store_true",
                   help="print the bug corpus's records this runner carries (name, class, what "
                        "an input must exercise, the kind of difference it shows) and exit")
