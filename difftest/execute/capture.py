"""An arm's stdout or stderr, copied from a pipe into its capture file by a reader thread.

Copying ourselves (instead of handing the child the file) is what lets a run promise that a
capture is final once the arm is over: when the reader is closed nothing can append to the
file, not even a daemon the arm left behind that still holds the pipe. The reader also counts
trace lines and drafted blocks for the progress display, and enforces `max_capture_bytes`.
"""

from __future__ import annotations

import os
import select
import threading
import time
from pathlib import Path

CHUNK = 1 << 20
DRAIN_S = 0.25  # after close(): how long to keep reading what was already written
_TRACE_TAGS = (b"\n[spec-", b"\n[SPECTRACE] ")
_BLOCK_TAG = b"\n[SPECTRACE] "
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Budget:
    """Bytes an arm may still write over all its captures; shared by its two readers."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self.exceeded = False
        self._lock = threading.Lock()

    def take(self, n: int) -> int:
        """How many of n bytes may be written; marks the budget exceeded when not all."""
        if self.limit is None:
            return n
        with self._lock:
            room = max(0, self.limit - self.used)
            allowed = min(n, room)
            self.used += allowed
            if allowed < n:
                self.exceeded = True
            return allowed


class Capture:
    """One pipe into one file, copied by a daemon thread until close()."""

    def __init__(self, path: Path, budget: Budget, count_trace: bool = False) -> None:
        self.path = path
        self.budget = budget
        self.count_trace = count_trace
        self.trace_lines = 0
        self.blocks = 0
        self.bytes = 0
        self.write_error: OSError | None = None  # e.g. the disk is full
        self._partial = b"\n"
        self._stop = threading.Event()
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.read_fd, False)
        self._out = os.open(path, _CREATE, 0o644)
        self._thread = threading.Thread(target=self._run, name=f"capture {path.name}",
                                        daemon=True)

    def start(self) -> None:
        """After the child has its copy of the write end: drop ours so EOF can come."""
        os.close(self.write_fd)
        self.write_fd = -1
        self._thread.start()

    def _count(self, data: bytes) -> None:
        text = self._partial + data
        cut = text.rfind(b"\n")
        whole, self._partial = text[:cut + 1], text[cut:]
        if len(whole) > 1:
            self.trace_lines += sum(whole.count(tag) for tag in _TRACE_TAGS)
            self.blocks += whole.count(_BLOCK_TAG)

    def _write(self, data: bytes) -> None:
        if self.write_error is not None:
            return  # keep draining the pipe so the arm never blocks on it
        allowed = self.budget.take(len(data))
        view = memoryview(data)[:allowed]
        try:
            while view:
                n = os.write(self._out, view)
                view = view[n:]
        except OSError as exc:
            self.write_error = exc
            return
        self.bytes += allowed
        if self.count_trace and allowed:
            self._count(data[:allowed])

    def _run(self) -> None:
        stop_at: float | None = None
        while True:
            if self._stop.is_set() and stop_at is None:
                stop_at = time.monotonic() + DRAIN_S
            wait = 0.1 if stop_at is None else 0.0
            ready, _, _ = select.select([self.read_fd], [], [], wait)
            if not ready:
                if stop_at is not None:
                    return  # nothing more is waiting in the pipe
                continue
            try:
                data = os.read(self.read_fd, CHUNK)
            except OSError:
                return
            if not data:
                return
            self._write(data)
            if stop_at is not None and time.monotonic() > stop_at:
                return  # somebody keeps writing after the arm ended: stop listening

    def close(self) -> None:
        """Finish copying what the pipe holds, then close: the file is final after this."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(DRAIN_S + 5.0)
        if self._thread.is_alive():
            return  # never close descriptors under a thread that still uses them
        for fd in (self.read_fd, self.write_fd, self._out):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.read_fd = self.write_fd = self._out = -1
