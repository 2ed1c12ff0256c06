"""Run arms side by side and keep everything they printed, whatever happens next.

Each arm gets its own process group (so a timeout or Ctrl-C takes its grandchildren down with
it) and writes straight into files in the run directory (file descriptors, not pipes: a child
that outlives difftest, or a grandchild that keeps the descriptor open, can neither lose output
nor block us). `meta.json` is written before the arms start and again when they end, before any
analysis, so a crash in a later stage never costs a re-run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from difftest import __version__
from difftest.config import ArmSpec
from difftest.errors import ArmFailedError, BuildError, DifftestError, UsageError

META_NAME = "meta.json"
META_FORMAT = 1
KILL_GRACE_S = 2.0
POLL_S = 0.02
PROGRESS_S = 0.2
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass
class ArmResult:
    """What one arm did, as recorded in meta.json."""

    name: str
    argv: list[str]
    cwd: str
    env_overrides: dict[str, str]
    stdout_path: Path
    stderr_path: Path
    returncode: int | None
    timed_out: bool
    interrupted: bool
    started_at: str
    ended_at: str
    duration_s: float
    git_ref: str | None
    git_sha: str | None
    error: str | None
    timeout_s: float | None = None
    build_log: str | None = None

    @property
    def ok(self) -> bool:
        return (self.error is None and self.returncode == 0 and not self.timed_out
                and not self.interrupted)

    def stderr_tail(self, lines: int = 20) -> str:
        """The end of the arm's stderr, where a crash explains itself."""
        return _tail(self.stderr_path, lines)

    def failure(self) -> ArmFailedError | None:
        """The error to report for this arm, or None when it ran cleanly."""
        if self.ok:
            return None
        tail = self.stderr_tail()
        if self.error is not None:
            return ArmFailedError(self.name, self.error, self.returncode, tail)
        if self.interrupted:
            return ArmFailedError(self.name, "interrupted (Ctrl-C) before it finished",
                                  self.returncode, tail)
        if self.timed_out:
            limit = f"{self.timeout_s:g} s" if self.timeout_s is not None else "its limit"
            return ArmFailedError(self.name, f"timed out after {limit}", self.returncode, tail)
        if self.returncode is None:
            return ArmFailedError(self.name, "did not finish (the run that started it was cut "
                                  "short)", None, tail)
        if self.returncode < 0:
            try:
                sig = signal.Signals(-self.returncode).name
            except ValueError:
                sig = f"signal {-self.returncode}"
            return ArmFailedError(self.name, f"was killed by {sig}", self.returncode, tail)
        return ArmFailedError(self.name, "exited with an error", self.returncode, tail)

    def to_json(self, run_dir: Path) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["stdout_path"] = _relative(self.stdout_path, run_dir)
        data["stderr_path"] = _relative(self.stderr_path, run_dir)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], run_dir: Path) -> ArmResult:
        fields = cls.__dataclass_fields__
        values = {k: data[k] for k in fields if k in data}
        for key, kinds in _RECORD_TYPES.items():
            if key in values and (not isinstance(values[key], kinds) or (
                    isinstance(values[key], bool) and bool not in kinds)):
                raise TypeError(f"{key} is {type(values[key]).__name__} "
                                f"{values[key]!r}")
        missing = [k for k, f in fields.items() if k not in values
                   and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise KeyError(", ".join(missing))
        values["stdout_path"] = run_dir / values["stdout_path"]
        values["stderr_path"] = run_dir / values["stderr_path"]
        return cls(**values)


# What each recorded field must be when meta.json is read back (bool is an int: listed apart).
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "argv": (list,), "cwd": (str,), "env_overrides": (dict,),
    "stdout_path": (str,), "stderr_path": (str,), "returncode": (int, type(None)),
    "timed_out": (bool,), "interrupted": (bool,), "started_at": (str,), "ended_at": (str,),
    "duration_s": (int, float), "git_ref": (str, type(None)), "git_sha": (str, type(None)),
    "error": (str, type(None)), "timeout_s": (int, float, type(None)),
    "build_log": (str, type(None)),
}


def _relative(path: Path, run_dir: Path) -> str:
    try:
        return str(Path(path).relative_to(run_dir))
    except ValueError:
        return str(path)


def _tail(path: Path, lines: int) -> str:
    if lines <= 0:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            chunk = min(size, max(4096, 512 * lines))
            fh.seek(size - chunk)
            data = fh.read()
    except OSError:
        return ""
    if chunk < size:
        data = data.partition(b"\n")[2]  # the first line was cut by the seek
    text = data.decode("utf-8", errors="replace").rstrip("\n")
    return "\n".join(text.splitlines()[-lines:])


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def safe_name(name: str) -> str:
    """A file-name form of an arm name: only [A-Za-z0-9._+-], never empty or a dot name."""
    cleaned = _UNSAFE.sub("_", name).strip(".") or "arm"
    return cleaned


def write_text_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one, even if we die mid-write."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(path: Path, data: object) -> None:
    from difftest.jsonout import dumps

    write_text_atomic(path, dumps(data) + "\n")


def new_run_dir(root: Path | None = None, label: str = "") -> Path:
    """A fresh run directory; the random suffix keeps two runs in the same second apart."""
    root = Path(root) if root is not None else Path("traces") / "runs"
    root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    suffix = f"-{safe_name(label)}" if label else ""
    for _ in range(100):
        path = root / f"{stamp}-{secrets.token_hex(3)}{suffix}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise UsageError(f"cannot create a run directory under {root}")


def _git_head(cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(cwd), "rev-parse", "--verify", "-q", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def _git_toplevel(cwd: Path) -> Path:
    try:
        out = subprocess.run(["git", "-C", str(cwd), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=10, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return cwd
    top = out.stdout.strip()
    return Path(top) if out.returncode == 0 and top else cwd


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Arm:
    """Mutable state of one arm while it runs."""

    def __init__(self, spec: ArmSpec, file_stem: str, run_dir: Path) -> None:
        self.spec = spec
        self.stdout_path = run_dir / f"{file_stem}.stdout"
        self.stderr_path = run_dir / f"{file_stem}.stderr"
        self.argv = list(spec.command)
        self.cwd = Path(spec.cwd) if spec.cwd is not None else Path.cwd()
        if not self.cwd.is_absolute() and spec.git_ref is None:
            self.cwd = Path.cwd() / self.cwd
        self.git_sha: str | None = None
        self.build_log: str | None = None
        self.error: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.start = 0.0
        self.end = 0.0
        self.started_at = ""
        self.ended_at = ""
        self.deadline: float | None = None
        self.term_sent_at: float | None = None
        self.timed_out = False
        self.interrupted = False
        self.returncode: int | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None

    def finish(self, returncode: int | None) -> None:
        self.returncode = returncode
        self.end = time.monotonic()
        self.ended_at = utc_now()
        if self.proc is not None:
            # Stragglers in the group would keep writing into the capture after we read it.
            _signal_group(self.proc.pid, signal.SIGKILL if self.term_sent_at else signal.SIGTERM)

    def result(self) -> ArmResult:
        duration = max(0.0, self.end - self.start) if self.start else 0.0
        return ArmResult(
            name=self.spec.name, argv=self.argv, cwd=str(self.cwd),
            env_overrides=dict(self.spec.env), stdout_path=self.stdout_path,
            stderr_path=self.stderr_path, returncode=self.returncode, timed_out=self.timed_out,
            interrupted=self.interrupted, started_at=self.started_at, ended_at=self.ended_at,
            duration_s=round(duration, 6), git_ref=self.spec.git_ref, git_sha=self.git_sha,
            error=self.error, timeout_s=self.spec.timeout_s, build_log=self.build_log)


def _prepare_git_arm(arm: _Arm, cache_dir: Path | None) -> None:
    spec = arm.spec
    try:
        from difftest import worktree
    except ImportError as exc:
        arm.error = f"cannot start: git_ref arms need difftest.worktree ({exc})"
        return
    repo = Path(spec.repo) if spec.repo is not None else _git_toplevel(Path.cwd())
    try:
        checkout = worktree.checkout_for(repo, spec.git_ref or "", spec.build,
                                         cache_dir=cache_dir, env={**os.environ, **spec.env},
                                         timeout_s=spec.timeout_s)
    except DifftestError as exc:
        text = str(exc)
        if isinstance(exc, ArmFailedError):
            # worktree names the ref as the "arm"; the arm's own name is added by failure().
            text = text.removeprefix(f"arm {exc.arm!r}: ")
        arm.error = f"git ref {spec.git_ref!r}: {text}"
        log = exc.log_path if isinstance(exc, BuildError) else None
        arm.build_log = str(log) if log else None
        return
    except OSError as exc:
        arm.error = f"cannot prepare the checkout of {spec.git_ref!r}: {exc}"
        return
    arm.git_sha = checkout.sha
    arm.build_log = str(checkout.build_log) if checkout.build_log else None
    arm.cwd = Path(checkout.path) / (spec.cwd or "")


def _start(arm: _Arm) -> None:
    env = {**os.environ, **arm.spec.env}
    arm.start = time.monotonic()
    arm.started_at = utc_now()
    try:
        with open(arm.stdout_path, "wb") as out, open(arm.stderr_path, "wb") as err:
            arm.proc = subprocess.Popen(arm.argv, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=err, env=env, cwd=arm.cwd,
                                        start_new_session=True)
    except OSError as exc:
        detail = exc.strerror or str(exc)
        what = exc.filename if exc.filename is not None else arm.argv[0]
        if exc.filename is not None and str(exc.filename) == str(arm.cwd):
            what = f"working directory {arm.cwd}"
        arm.error = f"cannot start: {what}: {detail}"
        arm.end = arm.start
        arm.ended_at = arm.started_at
        return
    if arm.spec.timeout_s is not None:
        arm.deadline = arm.start + arm.spec.timeout_s


def _meta(arms: Sequence[_Arm], run_dir: Path, status: str, created_at: str,
          extra_meta: Mapping[str, object] | None) -> dict[str, Any]:
    return {
        "format": META_FORMAT,
        "difftest_version": __version__,
        "status": status,
        "created_at": created_at,
        "updated_at": utc_now(),
        "python": sys.executable,
        "extra": dict(extra_meta or {}),
        "arms": {a.spec.name: a.result().to_json(run_dir) for a in arms},
    }


class _Progress:
    """One status line on stderr, redrawn in place."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.last = 0.0
        self.drawn = False

    def draw(self, arms: Sequence[_Arm], force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_S:
            return
        self.last = now
        parts = []
        for arm in arms:
            if arm.error is not None and arm.proc is None:
                state, elapsed = "failed", 0.0
            elif arm.proc is None:
                state, elapsed = "waiting", 0.0
            elif arm.returncode is None:
                state = "stopping" if arm.term_sent_at else "running"
                elapsed = now - arm.start
            else:
                state = "timed out" if arm.timed_out else f"exit {arm.returncode}"
                elapsed = arm.end - arm.start
            try:
                size = arm.stderr_path.stat().st_size
            except OSError:
                size = 0
            parts.append(f"{arm.spec.name}: {state} {elapsed:.1f}s {_human(size)}")
        width = shutil.get_terminal_size((100, 20)).columns - 1
        line = " | ".join(parts)[:max(width, 10)]
        sys.stderr.write("\r\x1b[K" + line)
        sys.stderr.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.enabled and self.drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.drawn = False


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"


def _stop(arms: Sequence[_Arm], *, interrupted: bool) -> None:
    """TERM every running group, give them KILL_GRACE_S, then KILL what is left; reap all."""
    now = time.monotonic()
    for arm in arms:
        if arm.running and arm.proc is not None:
            if interrupted:
                arm.interrupted = True
            if arm.term_sent_at is None:
                arm.term_sent_at = now
                _signal_group(arm.proc.pid, signal.SIGTERM)
    deadline = now + KILL_GRACE_S
    while any(a.running for a in arms) and time.monotonic() < deadline:
        _reap(arms)
        time.sleep(POLL_S)
    for arm in arms:
        if arm.running and arm.proc is not None:
            _signal_group(arm.proc.pid, signal.SIGKILL)
            arm.finish(arm.proc.wait())


def _reap(arms: Sequence[_Arm]) -> None:
    for arm in arms:
        if arm.running and arm.proc is not None:
            code = arm.proc.poll()
            if code is not None:
                arm.finish(code)


def run_arms(specs: Sequence[ArmSpec], run_dir: Path, *, progress: bool | None = None,
             extra_meta: Mapping[str, object] | None = None,
             cache_dir: Path | None = None) -> dict[str, ArmResult]:
    """Run every arm at once; return when all ended. Ctrl-C stops them all, records, re-raises."""
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"arm names must be unique in one run: {', '.join(dupes)}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stems: set[str] = set()
    arms: list[_Arm] = []
    for spec in specs:
        stem = safe_name(spec.name)
        base, n = stem, 2
        while stem.lower() in stems or stem == Path(META_NAME).stem:
            stem, n = f"{base}-{n}", n + 1
        stems.add(stem.lower())
        arms.append(_Arm(spec, stem, run_dir))
    if progress is None:
        progress = sys.stderr.isatty()
    bar = _Progress(bool(progress))
    created_at = utc_now()
    meta_path = run_dir / META_NAME

    def record(status: str) -> None:
        write_json_atomic(meta_path, _meta(arms, run_dir, status, created_at, extra_meta))

    try:
        if any(a.spec.git_ref is not None for a in arms):
            record("preparing")
        heads: dict[Path, str | None] = {}
        for arm in arms:
            if arm.spec.git_ref is not None:
                _prepare_git_arm(arm, cache_dir)
            else:
                if arm.cwd not in heads:
                    heads[arm.cwd] = _git_head(arm.cwd)
                arm.git_sha = heads[arm.cwd]
        record("running")
        for arm in arms:
            if arm.error is None:
                _start(arm)
            else:
                arm.started_at = arm.ended_at = utc_now()
        record("running")
        while any(a.running for a in arms):
            _reap(arms)
            now = time.monotonic()
            for arm in arms:
                if not arm.running or arm.proc is None:
                    continue
                if arm.deadline is not None and now >= arm.deadline and not arm.term_sent_at:
                    arm.timed_out = True
                    arm.term_sent_at = now
                    _signal_group(arm.proc.pid, signal.SIGTERM)
                elif arm.term_sent_at and now - arm.term_sent_at >= KILL_GRACE_S:
                    _signal_group(arm.proc.pid, signal.SIGKILL)
            bar.draw(arms)
            time.sleep(POLL_S)
        bar.clear()
        record("done")
    except KeyboardInterrupt:
        previous = _ignore_sigint()
        try:
            _stop(arms, interrupted=True)
            bar.clear()
            for arm in arms:
                if arm.proc is None and arm.error is None:
                    arm.interrupted = True
            record("interrupted")
        finally:
            _restore_sigint(previous)
        raise
    except BaseException:
        # Any other failure in here must not leave children running unattended.
        _stop(arms, interrupted=False)
        bar.clear()
        try:
            record("failed")
        except OSError:
            pass
        raise
    return {a.spec.name: a.result() for a in arms}


def _ignore_sigint() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, signal.SIG_IGN)


def _restore_sigint(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def load_run(run_dir: Path) -> tuple[dict[str, ArmResult], dict[str, Any]]:
    """The arms and meta of a past run, for re-judging or re-exporting without re-running."""
    run_dir = Path(run_dir)
    meta_path = run_dir / META_NAME
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{run_dir}: not a run directory (no {META_NAME})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{meta_path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{meta_path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("arms"), dict):
        raise UsageError(f"{meta_path}: not a difftest run record (no 'arms' table)")
    results: dict[str, ArmResult] = {}
    for name, data in meta["arms"].items():
        try:
            results[name] = ArmResult.from_json(data, run_dir)
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{meta_path}: arm {name!r}: incomplete record ({exc})") from None
    return results, meta
