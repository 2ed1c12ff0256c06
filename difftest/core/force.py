"""Teacher forcing: arm B replays arm A's committed stream, so every position is compared.

Without it, once two arms emit different tokens every later step of that request runs on
another context and is left out of the comparison (context-diverged). With it, arm A runs free;
difftest writes A's committed stream (per request, each verify step's position and the tokens
it emitted) to `force.json` in the run directory and hands its path to arm B in
`DIFFTEST_FORCE`. B drafts from its own model at every step, verifies as usual and traces what
it would have accepted on its `[SPECTRACE]` line, then commits A's tokens and says so on a
`[spec-forced]` line. B's committed stream must then equal A's; a runner that ignored the
variable commits its own, and the comparison is refused instead of judged.

Nothing here imports numpy or torch: runners read the file, difftest writes and checks it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.core.atomic import write_json_atomic
from difftest.core.errors import UsageError
from difftest.core.kinds import FindingKind

if TYPE_CHECKING:  # pragma: no cover - runners read force files without numpy
    from difftest.core.model import ArmTrace

FORCE_ENV = "DIFFTEST_FORCE"
FORCE_NAME = "force.json"
FORCE_FORMAT = "difftest-force/1"
FORCED_TAG = "[spec-forced]"
MAX_FORCE_BYTES = 256 << 20

_FORCED_RE = re.compile(r"\[spec-forced\] req=(\S+) pos=(\d{1,13}) commit=\[((?: *-?\d+)*) *\]\s*\Z")


@dataclass(frozen=True)
class ForcedStep:
    """One verify step of the stream: at `pos` (the anchor sits at pos - 1), commit `tokens`.
    `drafts`: what A drafted there, for a sequential drafter to draft along (each of its rows
    then runs on A's drafted tokens before it, as A's row did); empty when A drafted nothing."""

    pos: int
    tokens: tuple[int, ...]
    drafts: tuple[int, ...] = ()


@dataclass(frozen=True)
class ForceStream:
    """Per request, the verify steps in order. What arm B must commit."""

    requests: Mapping[str, tuple[ForcedStep, ...]]

    def step_at(self, req: str, pos: int) -> ForcedStep | None:
        for step in self.requests.get(req, ()):
            if step.pos == pos:
                return step
        return None

    def steps(self) -> int:
        return sum(len(s) for s in self.requests.values())


def committed_stream(trace: ArmTrace) -> ForceStream:
    """What an arm committed, from its `[SPECTRACE]` lines (a free arm commits what it emitted)."""
    v = trace.verifies
    out: dict[str, list[ForcedStep]] = {}
    for i in range(len(v)):
        req = trace.requests[int(v.req[i])]
        tokens = tuple(int(t) for t in v.emit_ids[int(v.emit_off[i]):int(v.emit_off[i + 1])])
        drafts = tuple(int(t) for t in v.draft(i))
        out.setdefault(req, []).append(ForcedStep(int(v.pos[i]), tokens, drafts))
    return ForceStream({r: tuple(s) for r, s in out.items()})


def write_force_file(stream: ForceStream, path: Path) -> Path:
    """The protocol file B reads: `{"format", "requests": {req: [[pos, [tokens...], [drafts...]],
    ...]}}` (the drafts left out where A drafted nothing)."""
    data = {"format": FORCE_FORMAT,
            "requests": {r: [[s.pos, list(s.tokens)] + ([list(s.drafts)] if s.drafts else [])
                             for s in steps]
                         for r, steps in stream.requests.items()}}
    write_json_atomic(path, data)
    return path


def read_force_file(path: Path) -> ForceStream:
    """Read a force file; a bad one is a UsageError naming the file and what is wrong."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FORCE_BYTES + 1)
        if len(raw) > MAX_FORCE_BYTES:
            raise UsageError(f"{FORCE_ENV}={path}: larger than {MAX_FORCE_BYTES} bytes")
        data = json.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise UsageError(f"{FORCE_ENV}={path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{FORCE_ENV}={path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORCE_FORMAT:
        raise UsageError(f"{FORCE_ENV}={path}: key 'format' must be {FORCE_FORMAT!r}")
    reqs = data.get("requests")
    if not isinstance(reqs, dict):
        raise UsageError(f"{FORCE_ENV}={path}: key 'requests' must be a table of requests")
    out: dict[str, tuple[ForcedStep, ...]] = {}
    for req, steps in reqs.items():
        out[req] = tuple(_step(path, req, i, s) for i, s in enumerate(_list(path, req, steps)))
    return ForceStream(out)


def _list(path: Path, req: str, value: object) -> list[object]:
    if not isinstance(value, list):
        raise UsageError(f"{FORCE_ENV}={path}: requests.{req}: must be a list of [pos, tokens]")
    return value


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _step(path: Path, req: str, i: int, value: object) -> ForcedStep:
    where = f"{FORCE_ENV}={path}: requests.{req}[{i}]"
    if not (isinstance(value, list) and len(value) in (2, 3) and _is_int(value[0])
            and isinstance(value[1], list) and value[1] and all(_is_int(t) for t in value[1])
            and (len(value) == 2 or (isinstance(value[2], list)
                                     and all(_is_int(t) for t in value[2])))):
        raise UsageError(f"{where}: must be [pos, [token, ...]] or [pos, [token, ...], "
                         f"[draft, ...]] with integers, got {value!r}")
    pos, tokens = value[0], value[1]
    drafts = value[2] if len(value) == 3 else []
    if pos < 1 or any(t < 0 for t in tokens) or any(t < 0 for t in drafts):
        raise UsageError(f"{where}: positions are >= 1 and token ids >= 0")
    return ForcedStep(int(pos), tuple(int(t) for t in tokens), tuple(int(t) for t in drafts))


def forced_line(req: str, pos: int, tokens: Sequence[int]) -> str:
    """The producer format: `[spec-forced] req=%s pos=%d commit=[ %s]`, after the step's
    `[SPECTRACE]` line, naming the tokens committed instead of the emitted ones."""
    return f"[spec-forced] req={req} pos={pos} commit=[ {''.join(f'{int(t)} ' for t in tokens)}]"


@dataclass(frozen=True)
class ForcedLine:
    req: str
    pos: int
    tokens: tuple[int, ...]
    line: int


def read_forced_lines(path: Path) -> list[ForcedLine]:
    """Every `[spec-forced]` line of a trace file; a malformed one is an error naming file:line.

    The trace parsers skip the tag as other output (noting only that a line holds it,
    ArmTrace.forced_lines), so this is its one reader."""
    out: list[ForcedLine] = []
    tag = FORCED_TAG.encode()
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            at = raw.find(tag)
            if at < 0:
                continue
            text = raw[at:].decode("utf-8", "replace")
            m = _FORCED_RE.match(text)
            if m is None:
                raise UsageError(f"{path}:{lineno}: {FORCED_TAG} expected "
                                 "'req=NAME pos=N commit=[ ids ]'")
            out.append(ForcedLine(m.group(1), int(m.group(2)),
                                  tuple(int(t) for t in m.group(3).split()), lineno))
    return out


@dataclass(frozen=True)
class ForceCheck:
    """Whether arm B committed arm A's stream, and what each arm accepted on it."""

    honoured: bool
    steps: int  # A's verify steps
    forced: tuple[ForcedLine, ...]  # B's `[spec-forced]` lines
    reasons: tuple[str, ...]
    acceptance_a: float | None  # mean accepted drafts per step
    acceptance_b: float | None  # B's would-be acceptance on A's context

    def to_json(self) -> dict[str, object]:
        return {"honoured": self.honoured, "steps": self.steps, "forced_lines": len(self.forced),
                "acceptance_a": self.acceptance_a, "acceptance_b": self.acceptance_b,
                "reasons": list(self.reasons)}


def _mean_acc(trace: ArmTrace) -> float | None:
    v = trace.verifies
    return float(v.acc.mean()) if len(v) else None


def check_forced(names: tuple[str, str], a: ArmTrace, b: ArmTrace, b_path: Path) -> ForceCheck:
    """B's committed stream (its `[spec-forced]` commits, else its emits) against A's."""
    want = committed_stream(a)
    own = committed_stream(b)
    forced = read_forced_lines(b_path)
    by_key = {(f.req, f.pos): f.tokens for f in forced}
    reasons: list[str] = []
    for req, steps in want.requests.items():
        got = own.requests.get(req, ())
        for i, step in enumerate(steps):
            if i >= len(got):
                reasons.append(f"{names[1]} stopped request {req} before position {step.pos} "
                               f"(it committed {len(got)} of {names[0]}'s {len(steps)} steps)")
                break
            committed = by_key.get((req, got[i].pos), got[i].tokens)
            if got[i].pos != step.pos or committed != step.tokens:
                reasons.append(
                    f"{names[1]} did not commit {names[0]}'s stream: request {req} step {i + 1} "
                    f"is at position {got[i].pos} committing {list(committed)}, {names[0]} "
                    f"committed {list(step.tokens)} at position {step.pos}")
                break
    extra = sorted(set(own.requests) - set(want.requests))
    if extra:
        reasons.append(f"{names[1]} traced requests {names[0]} never ran: {', '.join(extra)}")
    honoured = not reasons
    if reasons and not forced:
        reasons.insert(0, f"{names[1]} printed no {FORCED_TAG} line: its runner ignores "
                          f"{FORCE_ENV} (teacher forcing not implemented)")
    return ForceCheck(honoured, want.steps(), tuple(forced), tuple(reasons),
                      _mean_acc(a), _mean_acc(b))


def explain_forced(trace: ArmTrace, forced: Sequence[ForcedLine]) -> ArmTrace:
    """B's trace with the position jumps its forced commits explain taken off its findings.

    A forced step's `[SPECTRACE]` emits what B would have accepted, and the next step starts
    where the committed tokens end, so the parser sees a discontinuity that is the protocol."""
    ends = {(f.req, f.pos + len(f.tokens)) for f in forced}
    v = trace.verifies
    explained = {int(v.line[i]) for i in range(len(v))
                 if (trace.requests[int(v.req[i])], int(v.pos[i])) in ends}
    kept = tuple(f for f in trace.findings
                 if not (f.kind is FindingKind.DISCONTINUITY and f.line in explained))
    return replace(trace, findings=kept)
