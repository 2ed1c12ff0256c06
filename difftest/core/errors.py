"""One exception tree and one exit-code enum; the CLI maps the first onto the second in one place."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """The documented exit codes of every difftest command."""

    OK = 0  # met its expectation and was informative
    DIFFER = 1  # failed its expectation
    USAGE = 2  # usage error or bad input
    UNINFORMATIVE = 3  # agreed, but could not have failed
    ARM_FAILED = 4  # an arm crashed, timed out or drafted nothing
    HANGUP = 129  # SIGHUP (128 + 1): handled like Ctrl-C
    INTERRUPTED = 130  # Ctrl-C: both arms stopped, what they printed kept
    TERMINATED = 143  # SIGTERM (128 + 15): handled like Ctrl-C


# Severity for the worst-of rule (check's comparisons, probes and sweeps; a sweep's inputs): an
# arm that failed hides everything else. A probe whose mutation never reached the runner (exit 2)
# is a set-up error: it outranks a difference, since the gate's coverage claim is unfounded,
# but not a failed arm.
SEVERITY = {ExitCode.ARM_FAILED: 4, ExitCode.USAGE: 3, ExitCode.DIFFER: 2,
            ExitCode.UNINFORMATIVE: 1, ExitCode.OK: 0}


def worst(codes: Sequence[ExitCode]) -> ExitCode:
    """The most severe of these exit codes (OK for none)."""
    return max(codes, key=lambda c: SEVERITY[c], default=ExitCode.OK)


def stopped_by(signum: int) -> tuple[str, ExitCode]:
    """What a signal that stopped difftest is called, and the exit code it ends with: 128 +
    the signal's number where that is documented (SIGHUP, SIGINT, SIGTERM), else 130."""
    what = {1: "hangup (SIGHUP)", 15: "terminated (SIGTERM)"}.get(signum, "interrupted")
    code = 128 + signum
    return what, ExitCode(code) if code in set(ExitCode) else ExitCode.INTERRUPTED


class RunSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP while arms run: handled exactly like Ctrl-C, remembering which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# Signals whose interrupt was raised and not yet taken (`take_signals`, `raise_pending`). Python drops an
# exception raised where it cannot propagate (a weakref callback or __del__ run by the garbage
# collector), and a signal handler's exception can land there: such a signal stays here until
# `raise_pending` raises it again, so a Ctrl-C is never lost to a collection that happened to run.
_PENDING: list[int] = []


def _interrupt_of(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else RunSignal(signum)


def interrupt(signum: int) -> KeyboardInterrupt:
    """The interrupt a handled signal raises (kept until taken: `raise_pending`)."""
    _PENDING.append(signum)
    return _interrupt_of(signum)


def take_signals() -> None:
    """Every signal raised so far is on its way out as an exception, or acted on."""
    _PENDING.clear()


def raise_pending() -> None:
    """Raise again, once, a signal whose interrupt was dropped where it was raised: the arms'
    polling loop, the end of judging and the end of a block of `signals_as_interrupts` call
    this."""
    if _PENDING:
        signum = _PENDING[-1]
        take_signals()
        raise _interrupt_of(signum)


class DifftestError(Exception):
    """Base of every error difftest reports to a user as a message, not a traceback."""

    exit_code: ExitCode = ExitCode.USAGE


class UsageError(DifftestError):
    """A bad option, a missing file, an unknown arm name."""


class RefusedOutput(UsageError):
    """An output path difftest will not write: not a regular file, a link, a file the run reads,
    or a place outside the run directory. Nothing there was touched."""


class InternalError(DifftestError):
    """difftest contradicted itself (a self-check failed): a bug in difftest, not in the arms."""


class ConfigError(DifftestError):
    """A config file that does not load or validate; the message names file, table and key."""

    def __init__(self, path: object, message: str, key: str | None = None) -> None:
        self.path = str(path)
        self.key = key
        where = f"{self.path}: [{key}]" if key else self.path
        super().__init__(f"{where}: {message}")


class TraceError(DifftestError):
    """A line that starts with a known tag but does not parse."""

    def __init__(self, path: object, line: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        super().__init__(f"{self.path}:{line}: {message}")


@dataclass(frozen=True)
class ArmFailure:
    """Why an arm produced nothing to compare: a record, so a report can hold it as data."""

    arm: str
    message: str
    returncode: int | None = None
    stderr_tail: str = ""
    cause: str = ""  # one line shared by every arm that failed the same way (a missing module)

    def __str__(self) -> str:
        text = f"arm {self.arm!r}: {self.message}"
        if self.returncode is not None:
            text += f" (exit code {self.returncode})"
        if self.stderr_tail:
            text += "\n--- last lines of its stderr ---\n" + self.stderr_tail
        return text


class NoTraceLines(TraceError):
    """A file without a single VT_SPEC_TRACE line: empty, binary, compressed, or the wrong
    stream."""

    HINT = "is VT_SPEC_TRACE set, is this the runner's stderr?"

    def __init__(self, path: object, compressed: bool = False) -> None:
        hint = "it is gzip-compressed: decompress it first" if compressed else self.HINT
        DifftestError.__init__(self, f"no VT_SPEC_TRACE lines in {path} ({hint})")
        self.path = str(path)
        self.line = 0
        self.reason = str(self)


class ArmFailedError(DifftestError):
    """An arm that crashed, timed out, could not start, or drafted nothing."""

    exit_code = ExitCode.ARM_FAILED

    def __init__(self, arm: str, message: str, returncode: int | None = None,
                 stderr_tail: str = "", cause: str = "") -> None:
        self.failure = ArmFailure(arm, message, returncode, stderr_tail, cause)
        self.arm = arm
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(str(self.failure))


class BuildError(ArmFailedError):
    """The build of a git-ref arm failed; `log_path` is the build log."""

    def __init__(self, arm: str, message: str, returncode: int | None = None,
                 stderr_tail: str = "", *, log_path: Path | None = None) -> None:
        super().__init__(arm, message, returncode, stderr_tail)
        self.log_path = log_path


class GitError(DifftestError):
    """A git ref that does not resolve, or a repository difftest cannot use."""


class InterruptedRun(DifftestError):
    """Ctrl-C, SIGTERM or SIGHUP during a run: the arms were stopped and their captures kept."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, run_dir: object, signum: int = 2) -> None:
        self.run_dir = str(run_dir)
        self.signum = signum
        what, self.exit_code = stopped_by(signum)
        super().__init__(f"{what}: the arms were stopped; what they printed is kept in "
                         f"{self.run_dir}")



class InterruptedAnalysis(InterruptedRun):
    """Ctrl-C, SIGTERM or SIGHUP after the arms ended, while their output was judged and the
    run directory's reports written: the captures are whole, the reports already complete are
    kept, and the rest are named (`difftest export RUN` writes them)."""

    def __init__(self, run_dir: object, signum: int, kept: Sequence[str],
                 missing: Sequence[str]) -> None:
        super().__init__(run_dir, signum)
        what, _ = stopped_by(signum)
        said = [f"{what} during the analysis: the arms had finished and their captures are "
                f"kept in {self.run_dir}"]
        if kept:
            said.append(f"reports complete: {', '.join(kept)}")
        if missing:
            said.append(f"not written: {', '.join(missing)} (difftest export {self.run_dir} "
                        "judges the run again)")
        self.args = ("; ".join(said),)
