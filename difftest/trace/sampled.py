"""Read the `[spec-sample]` lines of a sampled run: each verify's rejection test.

The line (docs/trace-format.md) follows a step's `[SPECTRACE]` line in sampled decoding:

    [spec-sample] req=r0 pos=17 acc=1 q=[ 0.41 0.2 0.9 0.3 ] p=[ 0.5 0.02 ] overlap=[ 0.8 0.3 ] residual=45

The main parser skips it as other output (old parsers and the compiled scanner keep working);
this reader is the one that reads it, with the same field reader and the same errors (file,
line and field). A line whose fields contradict each other (more tested rows than drafts, an
accepted count that does not fit the rows tested, a residual where every draft was accepted,
a probability outside [0, 1], a drafted token of q = 0, an overlap below the drafted token's
own min(p, q)) is an error too: the distribution instrument cannot use it; so is a line that
contradicts the `[SPECTRACE]` line of its verify (none at that request and position, another k,
acc or residual: `checked`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from difftest.core.errors import TraceError, UsageError
from difftest.core.model import ArmTrace
from difftest.trace import grammar as g

TAG_SAMPLE = b"[spec-sample]"
_FLOAT_ITEM = re.compile(g.FLOAT + rb"\Z", re.IGNORECASE)


def read_prob_list(name: str, raw: bytes) -> list[float]:
    """A bracketed list of probabilities, each finite and in [0, 1]."""
    if not (raw.startswith(b"[") and raw.endswith(b"]")):
        raise g.FieldError(f"field {name}: expected a bracketed list of probabilities, got "
                           f"{raw[:40].decode('utf-8', 'backslashreplace')!r}")
    out: list[float] = []
    for n, item in enumerate(raw[1:-1].split(), start=1):
        value = float(item) if _FLOAT_ITEM.match(item) else None
        if value is None or not 0.0 <= value <= 1.0:
            shown = item[:40].decode("utf-8", "backslashreplace")
            raise g.FieldError(f"field {name}: item {n}: expected a probability in [0, 1], "
                               f"got {shown!r}")
        out.append(value)
    return out


def read_residual(name: str, raw: bytes) -> int | None:
    """The residual draw's id, or `-` (None): every draft accepted, no residual drawn."""
    if raw == b"-":
        return None
    return g.read_int(name, raw, int32=True, minimum=0)


def _count(name: str, raw: bytes) -> int:
    return g.read_int(name, raw, int32=True, minimum=0)


def _pos(name: str, raw: bytes) -> int:
    return g.read_int(name, raw, minimum=0, maximum=g.POS_LIMIT - 1)


SCHEMA: tuple[tuple[str, g.Reader], ...] = (
    ("req", g.read_str), ("pos", _pos), ("acc", _count), ("q", read_prob_list),
    ("p", read_prob_list), ("overlap", read_prob_list), ("residual", read_residual))


@dataclass(frozen=True)
class SampleStep:
    """One sampled verify's test: the draft's (q) and the target's (p) probability of each
    drafted token, for p the tested rows only, each tested row's overlap sum(min(p, q)), the
    accepted prefix's length and the residual draw (None: all accepted)."""

    req: str
    pos: int
    acc: int
    q: tuple[float, ...]
    p: tuple[float, ...]
    overlap: tuple[float, ...]
    residual: int | None
    line: int

    @property
    def tested(self) -> int:
        """Rows the verify tested: the accepted ones and the rejected one, if any."""
        return len(self.p)


@dataclass(frozen=True)
class SampleSteps:
    """Every `[spec-sample]` line of one trace, in file order."""

    path: str
    steps: tuple[SampleStep, ...]

    def __len__(self) -> int:
        return len(self.steps)

    def rows(self) -> VerifiedRows:
        """Every tested row of every step, in file order."""
        index, accepted, overlap, ratio, q = [], [], [], [], []
        for s in self.steps:
            for i, o in enumerate(s.overlap):
                index.append(i)
                accepted.append(1 if i < s.acc else 0)
                overlap.append(o)
                ratio.append(min(1.0, s.p[i] / s.q[i]) if s.q[i] > 0 else 1.0)
                q.append(s.q[i])
        return VerifiedRows(np.asarray(index, dtype=np.int64), np.asarray(accepted, dtype=np.int64),
                          np.asarray(overlap, dtype=np.float64), np.asarray(ratio, dtype=np.float64),
                          np.asarray(q, dtype=np.float64))


@dataclass(frozen=True)
class VerifiedRows:
    """The rows verifies tested, flat: what the acceptance check reads. Per row: its index in
    the block (0 for the first draft), whether it was accepted, its overlap sum(min(p, q)) (the
    probability of acceptance before the token is drawn), min(1, p(x)/q(x)) of its drafted
    token x (the probability of acceptance once x is drawn), and q(x)."""

    index: np.ndarray
    accepted: np.ndarray
    overlap: np.ndarray
    ratio: np.ndarray
    q: np.ndarray

    def __len__(self) -> int:
        return int(self.index.size)

    @staticmethod
    def joined(parts: Sequence[VerifiedRows]) -> VerifiedRows:
        """Several traces' rows, one after the other."""
        if not parts:
            empty = np.zeros(0)
            return VerifiedRows(empty.astype(np.int64), empty.astype(np.int64), empty, empty, empty)
        return VerifiedRows(*(np.concatenate([getattr(p, f) for p in parts])
                            for f in ("index", "accepted", "overlap", "ratio", "q")))


def read_sample_line(body: bytes) -> SampleStep:
    """One line's fields after the tag (line number 0: the caller sets it), or FieldError."""
    fields = g.split_fields(TAG_SAMPLE, body)
    out: dict[str, object] = {}
    for i, (name, reader) in enumerate(SCHEMA):
        if i >= len(fields):
            raise g.FieldError(f"[spec-sample] missing field {name!r}")
        got, raw = fields[i]
        if got != name:
            raise g.FieldError(f"[spec-sample] expected field {name!r}, got {got!r}")
        try:
            out[name] = reader(name, raw)
        except g.FieldError as exc:
            raise g.FieldError(f"[spec-sample] {exc}") from None
    if len(fields) > len(SCHEMA):
        raise g.FieldError(f"[spec-sample] unexpected field {fields[len(SCHEMA)][0]!r}")
    step = SampleStep(req=cast(str, out["req"]), pos=cast(int, out["pos"]),
                      acc=cast(int, out["acc"]), q=tuple(cast(list[float], out["q"])),
                      p=tuple(cast(list[float], out["p"])),
                      overlap=tuple(cast(list[float], out["overlap"])),
                      residual=cast("int | None", out["residual"]), line=0)
    _check(step)
    return step


def _check(s: SampleStep) -> None:
    k, tested = len(s.q), len(s.p)
    if any(x <= 0.0 for x in s.q):
        raise g.FieldError(f"[spec-sample] q={list(s.q)}: a drafted token was drawn from the "
                           "draft's law, so its q is above 0")
    if len(s.overlap) != tested:
        raise g.FieldError(f"[spec-sample] p has {tested} values but overlap {len(s.overlap)}: "
                           "both cover the rows the verify tested")
    if not 1 <= tested <= k:
        raise g.FieldError(f"[spec-sample] p has {tested} values for {k} drafts: a verify "
                           "tests 1 to k rows")
    for i, (p, q, o) in enumerate(zip(s.p, s.q, s.overlap, strict=False)):
        if o < min(p, q) - 1e-4 or o > 1.0 + 1e-4:  # float32 sums over a vocabulary
            raise g.FieldError(f"[spec-sample] row {i + 1}: overlap {o:.9g} is not within "
                               f"[min(p, q) = {min(p, q):.9g}, 1]: sum(min(p, q)) over the "
                               "vocabulary holds the drafted token's own min(p(x), q(x))")
    everything = s.acc == k
    if s.acc != (tested if everything else tested - 1):
        raise g.FieldError(f"[spec-sample] acc={s.acc} with {tested} rows tested of {k}: the "
                           "tested rows are the accepted ones and the first rejected one")
    if everything != (s.residual is None):
        raise g.FieldError(f"[spec-sample] residual={'-' if s.residual is None else s.residual}"
                           f" with acc={s.acc} of {k}: a residual is drawn exactly when a draft "
                           "was rejected")


def parse_samples(path: str | Path) -> SampleSteps:
    """Every `[spec-sample]` line of a trace file (behind the known prefixes, as the main parser
    reads tags); a malformed one is a TraceError naming file, line and field."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{p}: no such trace file") from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read: {exc.strerror}") from None
    return samples_of(data, str(p))


def samples_of(data: bytes, path: str = "<text>") -> SampleSteps:
    """`parse_samples` of text in memory."""
    steps: list[SampleStep] = []
    if TAG_SAMPLE not in data:
        return SampleSteps(path, ())
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if TAG_SAMPLE not in raw:
            continue
        line = g.strip_prefixes(raw.rstrip())
        if not line.startswith(TAG_SAMPLE):
            continue  # the tag past the line's start: the main parser's misplaced-tag finding
        try:
            step = read_sample_line(line[len(TAG_SAMPLE):])
        except g.FieldError as exc:
            raise TraceError(path, lineno, str(exc)) from None
        steps.append(SampleStep(step.req, step.pos, step.acc, step.q, step.p, step.overlap,
                                step.residual, lineno))
    return SampleSteps(path, tuple(steps))


def checked(steps: SampleSteps, trace: ArmTrace) -> SampleSteps:
    """The steps, each held against the `[SPECTRACE]` line of the same request and position in
    the same trace: the line must exist, and its k, acc and emitted residual must be the ones
    the `[spec-sample]` line states, and one verify has one such line; a contradiction is a
    TraceError at the sample's line (two lines about one verify cannot both be evidence)."""
    v = trace.verifies
    at: dict[tuple[str, int], int] = {}
    for i in range(len(v)):
        at.setdefault((trace.requests[int(v.req[i])], int(v.pos[i])), i)
    seen: dict[tuple[str, int], int] = {}
    for s in steps.steps:
        first = seen.setdefault((s.req, s.pos), s.line)
        if first != s.line:
            raise TraceError(steps.path, s.line, f"[spec-sample] req={s.req} pos={s.pos}: a "
                             f"second line for this verify (first at line {first}): one verify "
                             "is one test")
        found = at.get((s.req, s.pos))
        if found is None:
            raise TraceError(steps.path, s.line, f"[spec-sample] req={s.req} pos={s.pos}: no "
                             "[SPECTRACE] line for this verify")
        i = found
        k, acc = int(v.k[i]), int(v.acc[i])
        where = f"[spec-sample] req={s.req} pos={s.pos}"
        if len(s.q) != k:
            raise TraceError(steps.path, s.line, f"{where}: {len(s.q)} drafts but its "
                             f"[SPECTRACE] line (line {int(v.line[i])}) says k={k}")
        if s.acc != acc:
            raise TraceError(steps.path, s.line, f"{where}: acc={s.acc} but its [SPECTRACE] "
                             f"line (line {int(v.line[i])}) says acc={acc}")
        emit = v.emit(i)
        if s.residual is not None and (emit.size <= acc or int(emit[acc]) != s.residual):
            shown = int(emit[acc]) if emit.size > acc else "nothing"
            raise TraceError(steps.path, s.line, f"{where}: residual={s.residual} but its "
                             f"[SPECTRACE] line (line {int(v.line[i])}) emits {shown} after "
                             f"the {acc} accepted drafts")
    return steps
