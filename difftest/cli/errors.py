"""The command line's one error translator (`said`): every usage error, bad parameter, failure
of difftest and unwritable standard output becomes one `difftest: error: ...` line on stderr and
its exit code (exit 1 is for "differ" only), without click's usage banner or a traceback.
The command group (`Group`) applies it once: `main` to what click raises, `invoke` to what a
command raises."""

from __future__ import annotations

import errno
import importlib
import io
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from difftest.core.deprecation import one_line_on_stderr
from difftest.core.errors import DifftestError, ExitCode

if TYPE_CHECKING:
    from typer._click import Context  # the click typer vendors, whose Group this is

R = TypeVar("R")
STDOUT_ERRNOS = (errno.EPIPE, errno.ENOSPC, errno.EDQUOT)  # standard output itself failed


def said(exc: BaseException, *, stdout: bool = False) -> tuple[str, ExitCode]:
    """An error's line on stderr and its exit code. Exit 1 means "differ" and nothing else, so
    not even a bug in difftest may exit 1. `stdout`: an OSError writing standard output."""
    if isinstance(exc, DifftestError):
        from difftest.report.text import strip_ansi

        return f"difftest: error: {strip_ansi(str(exc))}", exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", 2)  # SIGTERM and SIGHUP outside a run's stages
        code = 128 + signum if isinstance(signum, int) else 130
        what = {1: "hangup (SIGHUP)", 15: "terminated (SIGTERM)"}.get(code - 128, "interrupted")
        return f"difftest: {what}", ExitCode(code) if code in set(ExitCode) else \
            ExitCode.INTERRUPTED
    if isinstance(exc, OSError):
        if stdout:
            where = exc.filename or "standard output"
            return f"difftest: error: cannot write to {where}: {exc.strerror or exc}", \
                ExitCode.USAGE
        where = f"{exc.filename}: " if exc.filename is not None else ""
        why = ("the disk is full (no space left on device)" if exc.errno == errno.ENOSPC
               else exc.strerror or str(exc))
        return f"difftest: error: {where}{why}", ExitCode.USAGE
    if isinstance(exc, RecursionError):
        return "difftest: error: input nested too deep", ExitCode.USAGE
    if os.environ.get("DIFFTEST_TRACEBACK"):
        # the traceback is shown, the exit code stays the one for errors
        return "".join(traceback.format_exception(exc)).rstrip(), ExitCode.USAGE
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return (f"difftest: error: internal error {type(exc).__name__}: {exc} (at "
            f"{Path(frame.filename).name}:{frame.lineno}); a bug in difftest, please report it "
            "with the input that caused it (DIFFTEST_TRACEBACK=1 shows the traceback)",
            ExitCode.USAGE)


def die(line: str, code: ExitCode) -> NoReturn:
    try:
        typer.echo(line, err=True)
    except OSError:
        pass
    sys.exit(int(code))


def _click() -> ModuleType:
    """The click exceptions typer raises: its own copy of click where it vendors one."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


def _of(module: ModuleType, *names: str) -> tuple[type[BaseException], ...]:
    found = (getattr(module, name, None) for name in names)
    return tuple(f for f in found if isinstance(f, type) and issubclass(f, BaseException))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


class Group(TyperGroup):
    """The command group: what a command raises (`invoke`), click's own errors, an interrupt
    and a failed standard output (`main`) are said the one way (`said`)."""

    def invoke(self, ctx: Context) -> object:
        """Run the command; what it raises is said on stderr and exits with its code. Click's
        own errors and exits, and a failed standard output, go on to `main`."""
        one_line_on_stderr()  # an old config key a command meets says so in one line
        clicks: tuple[type[BaseException], ...] = (
            typer.Exit, typer.Abort, *_of(_click(), "Exit", "Abort", "ClickException"))
        try:
            return super().invoke(ctx)
        except clicks:
            raise
        except (Exception, KeyboardInterrupt) as exc:
            if isinstance(exc, OSError) and exc.filename is None and exc.errno in STDOUT_ERRNOS:
                raise  # standard output itself: `main` says so
            line, code = said(exc)
            typer.echo(line, err=True)
            raise typer.Exit(int(code)) from None

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: object) -> object:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode,
                                windows_expand_args, **extra)
        if sys.stdout is None:  # started with standard output closed (`>&-`)
            die("difftest: error: standard output is closed: the verdict and reports would be "
                "lost; run with standard output open (redirect it to a file or /dev/null)",
                ExitCode.USAGE)
        cx = _click()
        exits: tuple[type[BaseException], ...] = (typer.Exit, *_of(cx, "Exit"))
        aborts: tuple[type[BaseException], ...] = (typer.Abort, KeyboardInterrupt,
                                                   *_of(cx, "Abort"))
        try:
            try:
                code = super().main(args, prog_name or "difftest", complete_var, False,
                                    windows_expand_args, **extra)
                sys.stdout.flush()  # a full device or a closed pipe shows here, not at exit
            except exits as exc:
                sys.stdout.flush()
                code = getattr(exc, "exit_code", 0)
        except aborts:
            die(*said(KeyboardInterrupt()))
        except Exception as exc:
            if isinstance(exc, cx.NoArgsIsHelpError):
                typer.echo(exc.format_message())  # the help text itself
                sys.exit(int(ExitCode.USAGE))
            if isinstance(exc, cx.UsageError):
                ctx = getattr(exc, "ctx", None)
                where = ctx.command_path if ctx is not None else "difftest"
                die(f"difftest: error: {exc.format_message()} (see '{where} --help')",
                    ExitCode.USAGE)
            if isinstance(exc, cx.ClickException):
                die(f"difftest: error: {exc.format_message()}", ExitCode.USAGE)
            if not isinstance(exc, OSError):
                raise
            _quiet_stdout()  # standard output: a full disk, a closed pipe
            die(*said(exc, stdout=True))
        sys.exit(code if isinstance(code, int) else 0)


def kept(call: Callable[[], R]) -> tuple[R, bool]:
    """What a command produced, and whether some output it was to write was not written (each
    said on stderr): its verdict is still printed, and the command then exits 2."""
    from difftest.report.outputs import NotWritten

    try:
        return call(), False
    except NotWritten as exc:
        for path, why in exc.failures:
            typer.echo(f"difftest: error: {path}: {why}", err=True)
        return exc.result, True  # type: ignore[return-value]


def done(code: ExitCode, missing: bool = False) -> NoReturn:
    """The verdict's exit code, or 2 when an output was not written: exit 1 stays "differ"."""
    raise typer.Exit(int(ExitCode.USAGE if missing else code))
