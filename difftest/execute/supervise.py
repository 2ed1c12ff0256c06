"""Run arms side by side (up to a cap) and keep everything they printed, whatever happens next.

Each arm leads its own process group (a timeout, Ctrl-C, SIGTERM or SIGHUP takes its
grandchildren down with it), and its stdout and stderr are copied into the run directory by
reader threads. When an arm exits, whatever is left in its group is ended (TERM, then KILL after
a grace period) and only then are its captures closed: from that moment nothing can append to
them. `meta.json` is written before the arms start, whenever one starts or ends, and when the run
ends however it ends, all before any analysis, so a crash in a later stage never costs a re-run.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from difftest import __version__
from difftest.config import ArmSpec
from difftest.core.errors import RunSignal, UsageError, interrupt, raise_pending, take_signals
from difftest.execute import launcher as launchers
from difftest.core.atomic import write_json_atomic
from difftest.execute.capture import Budget, Capture
from difftest.execute.gitprep import Placement, git_placement, local_placement
from difftest.core.procgroup import (
    KILL_GRACE_S, POLL_S, group_alive, processes_with_env, signal_group,
)
from difftest.execute.progress import ArmState, ArmStatus, Progress
from difftest.execute.records import META_FORMAT, META_NAME, ArmResult, RunStatus, utc_now
from difftest.execute.rundir import capture_stems

TOKEN_VAR = "DIFFTEST_ARM_TOKEN"  # lets us find an arm's daemons after they leave its group
# The variables difftest's runners and adapters read: each switches an arm into a role
# (teacher forcing, activation capture, a planted fault, a mutation). An arm gets one only from
# its own definition (the config's env, a role difftest gives it), never from the shell difftest
# was started in: one left exported there would reach both arms of a comparison alike.
ARM_VARIABLES = ("DIFFTEST_FORCE", "DIFFTEST_CAPTURE", "DIFFTEST_CAPTURE_DIR", "DIFFTEST_FAULT",
                 "DIFFTEST_MUTATION")
# Variables a runner may read that say where, never what: the cache folder of difftest's own
# files (the llama.cpp runner's seeded GGUF pair). They reach both arms alike and change no float.
PLACE_VARIABLES = ("DIFFTEST_CACHE",)
_HANDLED = (signal.SIGTERM, signal.SIGHUP)


class ArmsEnded(KeyboardInterrupt):
    """A signal that came after every arm had ended and meta.json said so: nothing was
    stopped, and what follows (the analysis) is what the signal ended."""

    def __init__(self, signum: int, run_dir: Path) -> None:
        super().__init__(signum)
        self.signum = signum
        self.run_dir = run_dir


def signal_of(exc: KeyboardInterrupt) -> int:
    return exc.signum if isinstance(exc, (RunSignal, ArmsEnded)) else int(signal.SIGINT)


@dataclass(frozen=True)
class JobLimits:
    """How many arms may run at once: in all, and per kind (local / through a launcher)."""

    total: int | None = None
    local: int | None = None
    launched: int | None = None


def arm_environment(inherited: Mapping[str, str], own: Mapping[str, str]
                    ) -> tuple[dict[str, str], list[str]]:
    """The environment an arm starts in: difftest's own, less the arm variables the arm does not
    set itself, with the arm's variables over it; and the names of those removed."""
    removed = sorted(k for k in ARM_VARIABLES if k in inherited and k not in own)
    kept = {k: v for k, v in inherited.items() if k not in removed}
    return {**kept, **own}, removed


class _Arm:
    """Mutable state of one arm while it runs; frozen into an ArmResult at the end."""

    def __init__(self, spec: ArmSpec, stem: str, run_dir: Path) -> None:
        self.spec = spec
        self.stdout_path = run_dir / f"{stem}.stdout"
        self.stderr_path = run_dir / f"{stem}.stderr"
        self.stem = stem
        self.place = Placement(cwd=Path.cwd())
        self.launch = launchers.launch(spec.command, spec.launcher, spec.env,
                                       f"{secrets.token_hex(3)}-{stem}")
        self.token = secrets.token_hex(8)
        self.error: str | None = None
        self.warnings: list[str] = []
        self.env_removed: list[str] = []
        self.proc: Any = None  # subprocess.Popen[bytes]
        self.captures: list[Capture] = []
        self.budget = Budget(spec.max_capture_bytes)
        self.start = self.end = 0.0
        self.started_at = self.ended_at = ""
        self.deadline: float | None = None
        self.term_sent_at: float | None = None
        self.drain_until: float | None = None
        self.drain_killed = False
        self.timed_out = False
        self.interrupted = False
        self.returncode: int | None = None
        self.finished = False
        self.job_id: str | None = None

    @property
    def launched(self) -> bool:
        return self.launch.launcher is not None

    @property
    def running(self) -> bool:
        """Started and not yet finished (its process, or what it left in its group, lives)."""
        return self.proc is not None and not self.finished

    def state(self) -> ArmState:
        if self.finished:
            return ArmState.DONE if self.error is None else ArmState.FAILED
        if self.proc is None:
            return ArmState.FAILED if self.error is not None else ArmState.QUEUED
        if self.term_sent_at is not None or self.returncode is not None:
            return ArmState.STOPPING
        return ArmState.RUNNING

    def status(self, now: float) -> ArmStatus:
        elapsed = (self.end or now) - self.start if self.start else 0.0
        outcome = ""
        if self.finished:
            outcome = ("timed out" if self.timed_out else self.error and "failed"
                       or f"exit {self.returncode}")
        err = self.captures[1] if len(self.captures) > 1 else None
        return ArmStatus(self.spec.name, self.state(), max(elapsed, 0.0),
                         err.trace_lines if err else 0, err.blocks if err else 0, outcome)

    def result(self) -> ArmResult:
        duration = max(0.0, self.end - self.start) if self.start and self.end else 0.0
        return ArmResult(
            name=self.spec.name, argv=list(self.spec.command), cwd=str(self.place.cwd),
            env_overrides=dict(self.spec.env), stdout_path=self.stdout_path,
            stderr_path=self.stderr_path, returncode=self.returncode, timed_out=self.timed_out,
            interrupted=self.interrupted, started_at=self.started_at, ended_at=self.ended_at,
            duration_s=round(duration, 6), git_ref=self.spec.git_ref,
            git_sha=self.place.git_sha, error=self.error, timeout_s=self.spec.timeout_s,
            build_log=self.place.build_log, launcher=self.launch.launcher, job_id=self.job_id,
            warnings=list(self.warnings), git_dirty=self.place.dirty,
            line_prefix=self.spec.line_prefix, env_removed=list(self.env_removed))


# --- starting --------------------------------------------------------------------------------


def _open_capture(path: Path, budget: Budget, count: bool) -> Capture:
    if path.is_symlink() or path.exists():
        path.unlink()  # a name we own in our run directory; never write through a link
    return Capture(path, budget, count_trace=count)


def _start(arm: _Arm) -> None:
    import subprocess

    env, arm.env_removed = arm_environment(os.environ, arm.spec.env)
    env[TOKEN_VAR] = arm.token
    arm.start = time.monotonic()
    arm.started_at = utc_now()
    try:
        arm.captures = [_open_capture(arm.stdout_path, arm.budget, False),
                        _open_capture(arm.stderr_path, arm.budget, True)]
        arm.proc = subprocess.Popen(arm.launch.argv, stdin=subprocess.DEVNULL,
                                    stdout=arm.captures[0].write_fd,
                                    stderr=arm.captures[1].write_fd, env=env,
                                    cwd=arm.place.cwd, start_new_session=True)
    except (OSError, ValueError) as exc:
        for cap in arm.captures:
            cap.close()
        arm.error = _start_error(arm, exc)
        arm.end, arm.ended_at, arm.finished = arm.start, arm.started_at, True
        return
    for cap in arm.captures:
        cap.start()
    if arm.spec.timeout_s is not None:
        arm.deadline = arm.start + arm.spec.timeout_s
    if arm.launch.job_name is not None:
        threading.Thread(target=_watch_job_id, args=(arm,), daemon=True).start()


def _start_error(arm: _Arm, exc: Exception) -> str:
    if not isinstance(exc, OSError):
        return f"cannot start: {exc}"
    detail = exc.strerror or str(exc)
    what = exc.filename if exc.filename is not None else arm.launch.argv[0]
    if exc.filename is not None and str(exc.filename) == str(arm.place.cwd):
        what = f"working directory {arm.place.cwd}"
    return f"cannot start: {what}: {detail}"


def _watch_job_id(arm: _Arm) -> None:
    assert arm.launch.job_name is not None
    while arm.job_id is None and not arm.finished and arm.returncode is None:
        arm.job_id = launchers.find_job_id(arm.launch.job_name)
        time.sleep(0.3)


# --- watching --------------------------------------------------------------------------------


def _send(arm: _Arm, sig: int) -> None:
    if arm.proc is not None:
        signal_group(arm.proc.pid, sig)


def _terminate(arm: _Arm, now: float) -> None:
    if arm.term_sent_at is None:
        arm.term_sent_at = now
        _send(arm, signal.SIGTERM)


def _watch(arm: _Arm, now: float) -> None:
    """One look at a running arm: deadline, capture budget, exit, and what its group left."""
    if arm.returncode is None:
        code = arm.proc.poll()
        if code is None:
            if arm.deadline is not None and now >= arm.deadline and arm.term_sent_at is None:
                arm.timed_out = True
                _terminate(arm, now)
            elif arm.budget.exceeded and arm.term_sent_at is None:
                arm.error = (f"printed more than max_capture_bytes = {arm.budget.limit} bytes; "
                             "stopped (the capture keeps the first bytes)")
                _terminate(arm, now)
            elif arm.term_sent_at is not None and now - arm.term_sent_at >= KILL_GRACE_S:
                _send(arm, signal.SIGKILL)
                arm.drain_killed = True
            return
        arm.returncode = code
        arm.end = now
        arm.ended_at = utc_now()
        # Stragglers in the group would keep writing into the capture: end them first.
        arm.drain_until = now + KILL_GRACE_S
        if group_alive(arm.proc.pid):
            _send(arm, signal.SIGTERM)
    if group_alive(arm.proc.pid):
        assert arm.drain_until is not None
        if now < arm.drain_until:
            return
        if not arm.drain_killed:
            _send(arm, signal.SIGKILL)
            arm.drain_killed = True
            arm.drain_until = now + 1.0
            return
        arm.warnings.append(f"processes of its group (pgid {arm.proc.pid}) survived SIGKILL")
    _finish(arm)


def _finish(arm: _Arm) -> None:
    """The group is gone: close the captures (final from here on) and look for daemons."""
    for cap in arm.captures:
        cap.close()
        if cap.write_error is not None and arm.error is None:
            arm.error = f"cannot write its capture {cap.path}: {cap.write_error.strerror}"
    if arm.budget.exceeded and arm.error is None:
        arm.error = (f"printed more than max_capture_bytes = {arm.budget.limit} bytes "
                     "(the capture keeps the first bytes)")
    if arm.drain_killed and arm.launch.job_name is not None:
        launchers.cancel_job(arm.launch.job_name)  # srun was killed before it could
    left = processes_with_env(f"{TOKEN_VAR}={arm.token}".encode())
    if left:
        arm.warnings.append(
            f"{len(left)} process(es) it started left its process group and still run "
            f"(pid {', '.join(map(str, left))}); difftest did not end them, and its capture "
            "was closed before they could write to it")
    arm.finished = True


def _stop_all(arms: Sequence[_Arm]) -> None:
    """TERM every running group, give them KILL_GRACE_S, then KILL what is left; reap all."""
    deadline = time.monotonic() + KILL_GRACE_S
    for arm in arms:
        if arm.running:
            arm.interrupted = True
            _send(arm, signal.SIGTERM)
        elif arm.proc is None and arm.error is None:
            arm.interrupted = True  # queued, never started
    _reap_until(arms, deadline)
    for arm in arms:
        if arm.running:
            _send(arm, signal.SIGKILL)
            arm.drain_killed = True
            if arm.returncode is None:
                arm.returncode = arm.proc.wait()
                arm.end, arm.ended_at = time.monotonic(), utc_now()
            _finish(arm)


def _reap_until(arms: Sequence[_Arm], deadline: float) -> None:
    """The grace a TERMed arm gets: each arm whose whole process group has ended is finished
    (its exit code and end time kept) as soon as it has, until none runs or `deadline`."""
    while any(a.running for a in arms) and time.monotonic() < deadline:
        for arm in arms:
            if arm.running and arm.returncode is None and arm.proc.poll() is not None:
                arm.returncode = arm.proc.returncode
                arm.end, arm.ended_at = time.monotonic(), utc_now()
            if arm.running and arm.returncode is not None and not group_alive(arm.proc.pid):
                _finish(arm)
        time.sleep(POLL_S)


# --- the run ---------------------------------------------------------------------------------


def _limit_ok(arms: Sequence[_Arm], arm: _Arm, limits: JobLimits) -> bool:
    running = [a for a in arms if a.running]
    if limits.total is not None and len(running) >= limits.total:
        return False
    cap = limits.launched if arm.launched else limits.local
    same = sum(a.launched == arm.launched for a in running)
    return cap is None or same < cap


def _start_queued(arms: Sequence[_Arm], limits: JobLimits) -> bool:
    started = False
    for arm in arms:
        if arm.proc is None and arm.error is None and not arm.finished:
            if not _limit_ok(arms, arm, limits):
                continue
            _start(arm)
            started = True
    return started


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP raise RunSignal inside the block, Ctrl-C KeyboardInterrupt (main
    thread only: Python's rule): arms running, a bisect between rounds. Each is also kept
    until the block ends, so one Python dropped where it was raised (a weakref callback) is
    raised again by `raise_pending` inside the block, or at its end; a block ended by an
    exception (the interrupt itself, an error) forgets them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise interrupt(signum)

    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # started in the background
    previous = {s: signal.signal(s, handler)
                for s in (*(() if ignored else (signal.SIGINT,)), *_HANDLED)}
    try:
        yield
    except BaseException:
        take_signals()
        raise
    else:
        raise_pending()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """While we clean up, a second signal must not abort the cleanup."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, *_HANDLED)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _make_arms(specs: Sequence[ArmSpec], run_dir: Path) -> list[_Arm]:
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"arm names must be unique in one run: {', '.join(dupes)}")
    stems = capture_stems(names)
    return [_Arm(spec, stem, run_dir) for spec, stem in zip(specs, stems, strict=True)]


def _place(arms: Sequence[_Arm], cache_dir: Path | None,
           record: Callable[[RunStatus], None]) -> None:
    if any(a.spec.git_ref is not None for a in arms):
        record(RunStatus.PREPARING)
    heads: dict[Path, str | None] = {}
    for arm in arms:
        if arm.spec.git_ref is None:
            arm.place = local_placement(arm.spec, heads)
            continue
        arm.place = git_placement(arm.spec, cache_dir)
        arm.error = arm.place.error
        if arm.place.warning:
            arm.warnings.append(arm.place.warning)
            print(f"difftest: warning: arm {arm.spec.name!r}: {arm.place.warning}",
                  file=sys.stderr)
        if arm.error is not None:
            arm.started_at = arm.ended_at = utc_now()
            arm.finished = True


def _supervise(arms: Sequence[_Arm], limits: JobLimits, bar: Progress,
               record: Callable[[RunStatus], None]) -> None:
    if _start_queued(arms, limits):
        record(RunStatus.RUNNING)
    while any(a.running or (a.proc is None and not a.finished) for a in arms):
        now = time.monotonic()
        before = sum(a.finished for a in arms)
        for arm in arms:
            if arm.running:
                _watch(arm, now)
        changed = sum(a.finished for a in arms) != before
        if _start_queued(arms, limits) or changed:
            record(RunStatus.RUNNING)
        bar.draw([a.status(now) for a in arms])
        raise_pending()
        time.sleep(POLL_S)


def run_arms(specs: Sequence[ArmSpec], run_dir: Path, *, progress: bool | None = None,
             cache_dir: Path | None = None,
             limits: JobLimits | None = None,
             plan: Mapping[str, object] | None = None) -> dict[str, ArmResult]:
    """Run the arms (all at once unless `limits` caps them); return when all ended.
    `plan` (the run's one record, difftest.flow.plan) goes into meta.json.

    Ctrl-C, SIGTERM and SIGHUP stop every arm's whole process tree, record how the run ended
    in meta.json, and re-raise (KeyboardInterrupt, or RunSignal for the other two).
    """
    run_dir = Path(run_dir)
    arms = _make_arms(specs, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    bar = Progress(sys.stderr.isatty() if progress is None else bool(progress))
    created_at = utc_now()
    meta_path = run_dir / META_NAME

    reserve = _Reserve(run_dir / RESERVE_NAME)
    record = _Recorder(arms, run_dir, meta_path, created_at, plan, reserve)

    started = time.monotonic()
    ended = False
    try:
        with signals_as_interrupts():
            _place(arms, cache_dir, record)
            record(RunStatus.RUNNING)
            _supervise(arms, limits or JobLimits(), bar, record)
        bar.clear()
        lost = _lost_capture(arms)
        ended = lost is None  # every arm ended and its record was written when it did
        record(RunStatus.DONE if lost is None else RunStatus.FAILED)
        if lost is not None:
            raise UsageError(lost)
        bar.phase(f"arms done in {time.monotonic() - started:.1f} s; analysing")
    except KeyboardInterrupt as exc:
        if ended:  # the arms' record is complete: the signal ends what comes next
            raise ArmsEnded(signal_of(exc), run_dir) from None
        signum = signal_of(exc)
        _stop_and_record(arms, bar, record, RunStatus.for_signal(signum), signum)
        raise
    except UsageError:
        raise
    except BaseException:
        # Any other failure in here must not leave children running unattended.
        _stop_and_record(arms, bar, record, RunStatus.FAILED)
        raise
    finally:
        try:
            reserve.release()
        except KeyboardInterrupt as exc:
            if not ended:
                raise
            raise ArmsEnded(signal_of(exc), run_dir) from None
    try:
        _print_warnings(arms)
        return {a.spec.name: a.result() for a in arms}
    except KeyboardInterrupt as exc:
        raise ArmsEnded(signal_of(exc), run_dir) from None


@dataclass(frozen=True)
class _Recorder:
    """meta.json written again at each change of a run's state (what each arm did so far, the
    plan record beside it); when the disk is full, the space held back for this moment is
    given back and the write tried once more."""

    arms: Sequence[_Arm]
    run_dir: Path
    meta_path: Path
    created_at: str
    plan: Mapping[str, object] | None
    reserve: _Reserve

    def __call__(self, status: RunStatus, signum: int | None = None) -> None:
        meta = _meta(self.arms, self.run_dir, status, self.created_at, signum)
        if self.plan is not None:
            meta["plan"] = dict(self.plan)
        try:
            write_json_atomic(self.meta_path, meta)
        except OSError as exc:
            if exc.errno != errno.ENOSPC or not self.reserve.release():
                raise
            write_json_atomic(self.meta_path, meta)  # the space we kept for this moment


def _stop_and_record(arms: Sequence[_Arm], bar: Progress, record: _Recorder,
                     status: RunStatus, signum: int | None = None) -> None:
    """A run cut short leaves no arm running unattended: every arm stopped, then how the run
    ended recorded; signals are ignored meanwhile so a second Ctrl-C cannot cut this short."""
    with _signals_ignored():
        _stop_all(arms)
        bar.clear()
        _record_quietly(record, status, signum)


def _print_warnings(arms: Sequence[_Arm]) -> None:
    """What each arm warned about, once its run is recorded (a placement's own warning was
    printed when the arm was placed)."""
    for arm in arms:
        for warning in arm.warnings:
            if warning != arm.place.warning:
                print(f"difftest: warning: arm {arm.spec.name!r}: {warning}",
                      file=sys.stderr)


RESERVE_NAME = ".meta.reserve"
RESERVE_BYTES = 64 * 1024


class _Reserve:
    """Disk space held back so the final meta.json can be written even when the disk fills."""

    def __init__(self, path: Path) -> None:
        self.path: Path | None = path
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            finally:
                os.close(fd)
        except OSError:
            self.release()

    def release(self) -> bool:
        """Give the space back; False when there was none to give."""
        if self.path is None:
            return False
        try:
            self.path.unlink()
        except OSError:
            pass
        self.path = None
        return True


def _lost_capture(arms: Sequence[_Arm]) -> str | None:
    """Why a capture could not be kept (a full disk), or None."""
    for arm in arms:
        for cap in arm.captures:
            err = cap.write_error
            if err is not None:
                why = ("the disk is full" if err.errno == errno.ENOSPC
                       else err.strerror or str(err))
                return f"cannot keep what arm {arm.spec.name!r} printed: {cap.path}: {why}"
    return None


def _record_quietly(record: Callable[..., None], status: RunStatus,
                    signum: int | None = None) -> None:
    """Finalise meta.json if the disk lets us; the error being raised matters more."""
    try:
        record(status, signum)
    except OSError as exc:
        print(f"difftest: error: cannot finalise meta.json: {exc.strerror or exc}",
              file=sys.stderr)


def _meta(arms: Sequence[_Arm], run_dir: Path, status: RunStatus, created_at: str,
          signum: int | None) -> dict[str, Any]:
    from difftest.execute.records import signal_name

    meta: dict[str, Any] = {
        "format": META_FORMAT,
        "difftest_version": __version__,
        "status": status.value,
        "created_at": created_at,
        "updated_at": utc_now(),
        "python": sys.executable,
        "arms": {a.spec.name: a.result().to_json(run_dir) for a in arms},
    }
    if signum is not None:
        meta["signal"] = signal_name(signum)
    return meta
