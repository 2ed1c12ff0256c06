"""Shared pieces of the reference-runner tests: the trace grammar, written from TRACE-FORMAT.md's
producer formats, and a cache of direct runs so that each option set runs once per session.

A plain module with a name of its own (pytest puts this folder on sys.path), not a conftest, so
that it cannot be confused with another folder's conftest."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.runners.reference.options import RunnerOptions
    from difftest.runners.reference.setup import RunResult

ID = r"-?\d+"
IDS = rf"(?:{ID} )*"  # every id followed by exactly one space, as the engine prints them
MS = r"\d+\.\d{2}ms"
NUM = r"(?:-?\d+(?:\.\d+)?(?:e[+-]\d+)?|-?inf|nan)"

GRAMMAR: dict[str, re.Pattern[str]] = {
    "phase_dev": re.compile(rf"\[spec-phase-dev\] pre={MS} fwd={MS} select={MS} walk={MS}"),
    "phase": re.compile(rf"\[spec-phase\] pre={MS} backbone={MS} sample={MS} logits=(\d+)"),
    "propose": re.compile(rf"\[spec-propose\] rows=(\d+) nqpr=(\d+) drafts/row=(\d+) first=\[({IDS})\]"),
    "spectrace": re.compile(rf"\[SPECTRACE\] req=(\S+) pos=(\d+) k=(\d+) ns=(\d+) acc=(\d+) "
                            rf"draft=\[ ({IDS})\] emit=\[ ({IDS})\]"),
    "logits": re.compile(rf"\[spec-logits\] req=(\S+) pos=(\d+) row=(\d+) top=\[ ((?:{ID}:{NUM} )+)\]"),
    "route": re.compile(r"\[dflash-route\] paged_seam=(\d+) block_kernel=(\d+) combined=(\d+) "
                        r"last_combined_q=(\d+) last_combined_k=(\d+)"),
    # what the runner applied, once per process before its first step (docs/switch.md)
    "config": re.compile(r"\[spec-config\]((?: [a-z_]+=\S+)+)"),
    # what state the run exercised, once per process after its last step (difftest.core.corpus)
    "coverage": re.compile(r"\[spec-coverage\]((?: [a-z_]+=\S+)+)"),
}


def ids(text: str) -> list[int]:
    return [int(t) for t in text.split()]


@dataclass
class Parsed:
    kinds: list[str] = field(default_factory=list)  # grammar name of each line, in order
    verifies: list[dict] = field(default_factory=list)
    proposes: list[dict] = field(default_factory=list)
    logits: dict[tuple[str, int, int], list[tuple[int, float]]] = field(default_factory=dict)
    phases: list[int] = field(default_factory=list)  # the logits= element counts
    route: dict[str, int] | None = None
    config: dict[str, str] | None = None

    def blocks(self) -> dict[tuple[str, int], list[int]]:
        return {(v["req"], v["pos"]): v["draft"] for v in self.verifies}

    def drafted(self) -> list[int]:
        return [i for v in self.verifies for i in v["draft"]]


def parse(lines: list[str]) -> Parsed:
    """Every line must match exactly one grammar entry in full; anything else fails the test."""
    out = Parsed()
    for line in lines:
        hits = [(name, m) for name, rx in GRAMMAR.items() if (m := rx.fullmatch(line))]
        assert len(hits) == 1, f"line matches {len(hits)} grammar entries: {line!r}"
        name, m = hits[0]
        out.kinds.append(name)
        if name == "spectrace":
            out.verifies.append(dict(req=m[1], pos=int(m[2]), k=int(m[3]), ns=int(m[4]),
                                     acc=int(m[5]), draft=ids(m[6]), emit=ids(m[7])))
        elif name == "propose":
            out.proposes.append(dict(rows=int(m[1]), nqpr=int(m[2]), k=int(m[3]), first=ids(m[4])))
        elif name == "logits":
            pairs = [(int(a), float(b)) for a, b in (p.split(":") for p in m[4].split())]
            out.logits[(m[1], int(m[2]), int(m[3]))] = pairs
        elif name == "phase":
            out.phases.append(int(m[1]))
        elif name == "config":
            out.config = dict(w.split("=", 1) for w in m[1].split())
        elif name == "route":
            out.route = dict(zip(("paged_seam", "block_kernel", "combined", "last_combined_q",
                                  "last_combined_k"), map(int, m.groups()), strict=False))
    return out


def entropy_bits(values: list[int]) -> float:
    """Shannon entropy of the empirical distribution of values."""
    counts = Counter(values)
    n = len(values)
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


def without_timings(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("[spec-phase")]


_RUNS: dict = {}


def cached_run(options: RunnerOptions, level: int = 3) -> RunResult:
    """A direct run, computed once per test session for each (options, level)."""
    from difftest.runners.reference.runner import run

    key = (options, level)
    if key not in _RUNS:
        _RUNS[key] = run(options, level)
    return _RUNS[key]
