"""The progress display on stderr: redrawn in place on a terminal, a plain heartbeat elsewhere.

On a terminal: a summary line (queued / running / done) and one line per running arm with the
trace lines and drafted blocks seen so far, cut to the terminal's size. Without one (CI logs),
`--progress` prints a plain line at most every HEARTBEAT_S seconds and never an escape sequence.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TextIO

REDRAW_S = 0.2
HEARTBEAT_S = 10.0


class ArmState(StrEnum):
    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    STOPPING = "stopping"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class ArmStatus:
    """One arm as the display shows it."""

    name: str
    state: ArmState
    elapsed_s: float
    trace_lines: int
    blocks: int
    outcome: str = ""  # "exit 0", "timed out", ...

    def text(self) -> str:
        what = self.outcome or self.state.value
        return (f"{self.name}: {what} {self.elapsed_s:.1f}s, {self.trace_lines} trace lines, "
                f"{self.blocks} blocks")


def summary(arms: Sequence[ArmStatus]) -> str:
    queued = sum(a.state is ArmState.QUEUED for a in arms)
    done = sum(a.state in (ArmState.DONE, ArmState.FAILED) for a in arms)
    running = len(arms) - queued - done
    return f"arms: {queued} queued, {running} running, {done} done"


class Progress:
    """Draws arm statuses; enabled=False draws nothing at all."""

    def __init__(self, enabled: bool, stream: TextIO | None = None,
                 tty: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self.last = 0.0 if self.tty else self.started
        self.drawn_lines = 0

    def draw(self, arms: Sequence[ArmStatus], force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < (REDRAW_S if self.tty else HEARTBEAT_S):
            return
        self.last = now
        if self.tty:
            self._redraw(arms)
        else:
            active = [a.text() for a in arms if a.state not in (ArmState.QUEUED, ArmState.DONE,
                                                                 ArmState.FAILED)]
            line = f"difftest: {now - self.started:.0f} s: {summary(arms)}"
            self.stream.write(line + (": " + "; ".join(active) if active else "") + "\n")
            self.stream.flush()

    def _redraw(self, arms: Sequence[ArmStatus]) -> None:
        size = shutil.get_terminal_size((100, 24))
        width = max(size.columns - 1, 10)
        room = max(size.lines - 2, 1)
        running = [a for a in arms if a.state not in (ArmState.QUEUED, ArmState.DONE,
                                                      ArmState.FAILED)]
        lines = [summary(arms)] if len(arms) > 2 else []
        if len(running) <= room:
            lines += [a.text() for a in running]
        else:
            lines += [a.text() for a in running[:room - 1]]
            lines.append(f"... and {len(running) - room + 1} more running")
        lines = [line[:width] for line in lines] or [summary(arms)[:width]]
        self._erase()
        self.stream.write("\n".join(lines))
        self.stream.flush()
        self.drawn_lines = len(lines)

    def _erase(self) -> None:
        if self.drawn_lines > 1:
            self.stream.write(f"\x1b[{self.drawn_lines - 1}F")
        if self.drawn_lines:
            self.stream.write("\r\x1b[J")

    def clear(self) -> None:
        if self.enabled and self.tty and self.drawn_lines:
            self._erase()
            self.stream.flush()
            self.drawn_lines = 0

    def phase(self, text: str) -> None:
        """A plain line that stays (e.g. 'analysing'), after clearing the live display."""
        if not self.enabled:
            return
        self.clear()
        self.stream.write(f"difftest: {text}\n")
        self.stream.flush()
