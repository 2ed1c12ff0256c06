"""The run record: what each arm did (frozen `ArmResult`) and the `meta.json` that holds them.

meta.json is read back by `export` from run directories that may come from elsewhere (a CI
artifact), so reading it trusts nothing: capture paths must be plain names inside the run
directory, every field has the type it should, and a record nested absurdly deep is bad input.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from difftest.core.atomic import write_json_atomic
from difftest.core.errors import ArmFailedError, UsageError
from difftest.execute.hints import missing_module

META_NAME = "meta.json"
META_FORMAT = 1
META_MAX_BYTES = 64 * 1024 * 1024


class RunStatus(StrEnum):
    """How far a run got; the last value written to meta.json says how it ended."""

    PREPARING = "preparing"
    RUNNING = "running"
    DONE = "done"
    INTERRUPTED = "interrupted"  # SIGINT (Ctrl-C)
    TERMINATED = "terminated"  # SIGTERM (a cancelled CI job, `timeout`)
    HANGUP = "hangup"  # SIGHUP (a closed terminal)
    FAILED = "failed"  # difftest itself failed while the arms ran

    @classmethod
    def for_signal(cls, signum: int) -> RunStatus:
        return {signal.SIGTERM: cls.TERMINATED, signal.SIGHUP: cls.HANGUP}.get(
            signal.Signals(signum), cls.INTERRUPTED)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True)
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
    launcher: list[str] | None = None  # the argv prefix the command ran through (srun ...)
    job_id: str | None = None  # the launcher's job id, where it could be learnt
    warnings: list[str] = field(default_factory=list)
    git_dirty: bool | None = None  # git_ref "HEAD" with uncommitted edits to tracked files
    line_prefix: str | None = None  # the arm's own line-prefix pattern, for re-reading its trace
    # arm variables (DIFFTEST_FAULT, ...) set in difftest's environment and kept from the arm's
    env_removed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.error is None and self.returncode == 0 and not self.timed_out
                and not self.interrupted)

    def stderr_tail(self, lines: int = 20) -> str:
        """The end of the arm's stderr, where a crash explains itself."""
        return tail(self.stderr_path, lines)

    def failure(self) -> ArmFailedError | None:
        """The error to report for this arm, or None when it ran cleanly."""
        if self.ok:
            return None
        err = self.stderr_tail()
        if self.error is not None:
            return ArmFailedError(self.name, self.error, self.returncode, err)
        if self.interrupted:
            return ArmFailedError(self.name, "interrupted (Ctrl-C or a signal to difftest) "
                                  "before it finished", self.returncode, err)
        if self.timed_out:
            limit = f"{self.timeout_s:g} s" if self.timeout_s is not None else "its limit"
            return ArmFailedError(self.name, f"timed out after {limit}", self.returncode, err)
        if self.returncode is None:
            return ArmFailedError(self.name, "did not finish (the run that started it was cut "
                                  "short)", None, err)
        if self.returncode < 0:
            return ArmFailedError(self.name, f"was killed by {signal_name(-self.returncode)}",
                                  self.returncode, err)
        missing = missing_module(err, self.argv)
        if missing is not None:  # the cause in one line; the traceback stays in the capture
            return ArmFailedError(self.name, f"{missing.cause}; its whole stderr is in "
                                  f"{self.stderr_path}", self.returncode, cause=missing.cause)
        return ArmFailedError(self.name, "exited with an error", self.returncode, err)

    def to_json(self, run_dir: Path) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["stdout_path"] = _relative(self.stdout_path, run_dir)
        data["stderr_path"] = _relative(self.stderr_path, run_dir)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], run_dir: Path) -> ArmResult:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: data[k] for k in fields if k in data}
        for key, kinds in _RECORD_TYPES.items():
            if key in values and (not isinstance(values[key], kinds) or (
                    isinstance(values[key], bool) and bool not in kinds)):
                raise TypeError(f"{key} is {type(values[key]).__name__} {values[key]!r}")
        missing = [k for k, f in fields.items() if k not in values
                   and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise KeyError(", ".join(missing))
        for key in ("stdout_path", "stderr_path"):
            values[key] = run_dir / _inside(values[key], key)
        return cls(**values)


# What each recorded field must be when meta.json is read back (bool is an int: listed apart).
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "argv": (list,), "cwd": (str,), "env_overrides": (dict,),
    "stdout_path": (str,), "stderr_path": (str,), "returncode": (int, type(None)),
    "timed_out": (bool,), "interrupted": (bool,), "started_at": (str,), "ended_at": (str,),
    "duration_s": (int, float), "git_ref": (str, type(None)), "git_sha": (str, type(None)),
    "error": (str, type(None)), "timeout_s": (int, float, type(None)),
    "build_log": (str, type(None)), "launcher": (list, type(None)),
    "job_id": (str, type(None)), "warnings": (list,), "git_dirty": (bool, type(None)),
    "line_prefix": (str, type(None)), "env_removed": (list,),
}


def _inside(name: str, key: str) -> str:
    """A capture path from meta.json: a plain file name in the run directory, nothing else."""
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
            or os.path.isabs(name)):
        raise ValueError(f"{key} {name!r} is not a file name inside the run directory")
    return name


def _relative(path: Path, run_dir: Path) -> str:
    try:
        return str(Path(path).relative_to(run_dir))
    except ValueError:
        return str(path)


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a file, read from its end (captures can be huge)."""
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


def record_stopped(run_dir: Path, signum: int, stage: str) -> None:
    """meta.json of a run stopped by a signal after its arms ended: its status says how it
    ended and `stopped_in` when (the arms' records stay as they were)."""
    path = Path(run_dir) / META_NAME
    try:
        with open(path, "rb") as fh:
            meta = json.loads(fh.read(META_MAX_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError):
        return  # nothing to finalise: the error being raised says what happened
    if not isinstance(meta, dict):
        return
    meta.update(status=RunStatus.for_signal(signum).value, signal=signal_name(signum),
                stopped_in=stage, updated_at=utc_now())
    try:
        write_json_atomic(path, meta)
    except OSError as exc:
        print(f"difftest: error: cannot finalise meta.json: {exc.strerror or exc}",
              file=sys.stderr)


def load_run(run_dir: Path) -> tuple[dict[str, ArmResult], dict[str, Any]]:
    """The arms and meta of a past run, for re-judging or re-exporting without re-running."""
    run_dir = Path(run_dir)
    meta_path = run_dir / META_NAME
    meta = _read_meta(run_dir, meta_path)
    _check_record(meta, meta_path)
    results = _arm_results(meta["arms"], run_dir, meta_path)
    _check_distinct(results, meta_path)
    return results, meta


def _read_meta(run_dir: Path, meta_path: Path) -> Any:
    """meta.json's JSON, read only from a plain file of a run record's size: every way it
    cannot be read is a line naming the file, never a traceback."""
    try:
        if meta_path.is_symlink():
            raise UsageError(f"{meta_path}: is a symbolic link; a run record is a plain file")
        with open(meta_path, "rb") as fh:
            raw = fh.read(META_MAX_BYTES + 1)
        if len(raw) > META_MAX_BYTES:
            raise UsageError(f"{meta_path}: larger than {META_MAX_BYTES} bytes; not a run record")
        return json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{run_dir}: not a run directory (no {META_NAME})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{meta_path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{meta_path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"{meta_path}: nested too deep to be a run record") from None


def _check_record(meta: Any, meta_path: Path) -> None:
    """JSON that is a run record: a table of arms, in a format this difftest reads (a record
    a newer difftest wrote is refused rather than misread)."""
    if not isinstance(meta, dict) or not isinstance(meta.get("arms"), dict):
        raise UsageError(f"{meta_path}: not a difftest run record (no 'arms' table)")
    version = meta.get("format", META_FORMAT)  # absent in the oldest records
    if isinstance(version, bool) or not isinstance(version, int) or not (
            1 <= version <= META_FORMAT):
        raise UsageError(f"{meta_path}: key 'format': {version!r} is not a run record format "
                         f"this difftest reads (1 to {META_FORMAT}); a newer difftest wrote it, "
                         "or it was edited")


def _arm_results(arms: dict[str, Any], run_dir: Path,
                 meta_path: Path) -> dict[str, ArmResult]:
    """Each arm's recorded result, its captures held inside the run directory; a record that
    is not one says which arm."""
    results: dict[str, ArmResult] = {}
    for name, data in arms.items():
        if not isinstance(data, dict):
            raise UsageError(f"{meta_path}: arm {name!r}: not a record")
        try:
            results[name] = ArmResult.from_json(data, run_dir)
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{meta_path}: arm {name!r}: incomplete record ({exc})") from None
        except ValueError as exc:
            raise UsageError(f"{meta_path}: arm {name!r}: {exc}") from None
        _check_inside(results[name], run_dir, meta_path)
    return results


def _check_distinct(results: dict[str, ArmResult], meta_path: Path) -> None:
    """Two arms that name one capture (by name or through a link) would compare a capture with
    itself, which agrees whatever the engines did: a hand-edited record, refused."""
    seen: dict[tuple[int, int] | str, tuple[str, str]] = {}
    for name, result in results.items():
        for key, path in (("stdout_path", result.stdout_path), ("stderr_path", result.stderr_path)):
            try:
                st = os.stat(path)
                ident: tuple[int, int] | str = (st.st_dev, st.st_ino)
            except OSError:
                ident = os.path.realpath(path)
            if ident in seen and seen[ident][0] != name:
                other, other_key = seen[ident]
                raise UsageError(
                    f"{meta_path}: arms.{name}.{key} names {path.name}, the capture "
                    f"arms.{other}.{other_key} names: one capture compared with itself agrees "
                    "whatever the engines did; each arm's capture must be its own file")
            seen.setdefault(ident, (name, key))


def _check_inside(result: ArmResult, run_dir: Path, meta_path: Path) -> None:
    """A capture that is a link out of the run directory (e.g. to /etc/shadow) is not read."""
    top = os.path.realpath(run_dir)
    for path in (result.stdout_path, result.stderr_path):
        real = os.path.realpath(path)
        if os.path.dirname(real) != top:
            raise UsageError(f"{meta_path}: arm {result.name!r}: {path.name} leads outside the "
                             "run directory; not reading it")
