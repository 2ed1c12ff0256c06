"""Whether a run of an arm draws anything new: a rerun that repeats an earlier run's draws is the
same evidence again, and counting it twice makes a sampled comparison's test see pairs that are
not independent (a false DIFFER: the witness learned the very tokens it then scores) or a
greedy sequential test see more verifies than were drawn."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from difftest.core.model import ArmTrace


def streams(trace: ArmTrace) -> dict[str, bytes]:
    """Each request's traced stream, verify by verify (position, depth, accepted, drafted and
    emitted ids), as bytes: two runs that drafted and emitted alike give equal bytes."""
    v = trace.verifies
    parts: dict[str, list[bytes]] = {}
    for i in range(len(v)):
        name = str(trace.requests[int(v.req[i])]) if len(trace.requests) else ""
        row = np.array([v.pos[i], v.k[i], v.ns[i], v.acc[i]], dtype=np.int64).tobytes()
        parts.setdefault(name, []).append(
            row + b"|" + v.draft(i).astype(np.int32).tobytes() + b"|"
            + v.emit(i).astype(np.int32).tobytes() + b";")
    return {name: b"".join(rows) for name, rows in parts.items()}


def repeated(earlier: Sequence[ArmTrace], new: ArmTrace) -> str | None:
    """Why `new` adds no draws to the `earlier` runs of its arm, or None: its sampler seed
    (`[spec-config] sample_seed`) is one an earlier run printed, or every request's stream
    repeats one an earlier run traced (fixed seeds, or a seed printed but not used, draw the
    same tokens again)."""
    seed = new.config.values.get("sample_seed")
    if seed is not None and any(t.config.values.get("sample_seed") == seed for t in earlier):
        return f"its sampler seed {seed} is an earlier run's"
    before = [streams(t) for t in earlier]
    now = streams(new)
    if before and now and all(any(b.get(name) == stream for b in before)
                              for name, stream in now.items()):
        return "it traced every request's stream an earlier run traced"
    return None


def distinct(traces: Sequence[ArmTrace]) -> tuple[list[int], dict[int, str]]:
    """The runs (indices, in order) that each draw something the runs kept before them did not,
    and why each other one was left out."""
    kept: list[int] = []
    left: dict[int, str] = {}
    for i, t in enumerate(traces):
        why = repeated([traces[j] for j in kept], t)
        if why is None:
            kept.append(i)
        else:
            left[i] = why
    return kept, left
