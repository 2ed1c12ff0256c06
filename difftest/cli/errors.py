"""The command line's one error translator (`said`): every usage error, bad parameter, failure
of difftest and unwritable standard output becomes one `difftest: error: ...` line on stderr and
its exit code (exit 1 is for "differ" only), without click's usage banner or a traceback.
The command group (`Group`) applies it once: `invoke` to what a command raises, `main` to the
rest (click's own errors, an interrupt, a failed standard output)."""

import contextlib
import errno
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from difftest.core.deprecation import one_line_on_stderr
from difftest.core.errors import DifftestError, ExitCode, stopped_by

if TYPE_CHECKING:
    from typer._click import Context  # the click typer vendors, whose Group this is

R = TypeVar("R")
STDOUT_ERRNOS = (errno.EPIPE, errno.ENOSPC, errno.EDQUOT)  # standard output itself failed
# the exceptions of the click typer raises: its own copy where it vendors one, else click's
CLICK = sys.modules[typer.BadParameter.__module__]


def said(exc: BaseException, *, stdout: bool = False) -> tuple[str, ExitCode]:
    """An error's line on stderr and its exit code. Exit 1 means "differ" and nothing else, so
    not even a bug in difftest may exit 1. `stdout`: an OSError writing standard output."""
    if isinstance(exc, DifftestError):
        from difftest.report.text import strip_ansi

        return f"difftest: error: {strip_ansi(str(exc))}", exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", 2)  # SIGTERM and SIGHUP outside a run's stages
        what, code = stopped_by(signum if isinstance(signum, int) else 2)
        return f"difftest: {what}", code
    if isinstance(exc, OSError) and stdout:
        where = exc.filename or "standard output"
        return f"difftest: error: cannot write to {where}: {exc.strerror or exc}", ExitCode.USAGE
    if isinstance(exc, OSError):
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
    with contextlib.suppress(OSError):
        typer.echo(line, err=True)
    sys.exit(int(code))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again at exit."""
    with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation is both
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class Group(TyperGroup):
    """The command group: what a command raises (`invoke`), click's own errors, an interrupt
    and a failed standard output (`main`) are said the one way (`said`)."""

    def invoke(self, ctx: "Context") -> object:
        """Run the command; what it raises is said on stderr and exits with its code (a
        failed standard output too: click would exit 1 on a closed pipe, and 1 is "differ").
        Click's own errors and exits go on to `main`."""
        one_line_on_stderr()  # an old config key a command meets says so in one line
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, CLICK.ClickException):
            raise
        except (Exception, KeyboardInterrupt) as exc:
            stdout = isinstance(exc, OSError) and exc.filename is None and \
                exc.errno in STDOUT_ERRNOS
            if stdout:
                _quiet_stdout()
            line, code = said(exc, stdout=stdout)
            with contextlib.suppress(OSError):
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
        try:
            try:
                code = super().main(args, prog_name or "difftest", complete_var, False,
                                    windows_expand_args, **extra)
            except typer.Exit as exc:
                code = exc.exit_code
            sys.stdout.flush()  # a full device or a closed pipe shows here, not at exit
        except (typer.Abort, KeyboardInterrupt):
            die(*said(KeyboardInterrupt()))
        except CLICK.NoArgsIsHelpError as exc:
            typer.echo(exc.format_message())  # the help text itself
            sys.exit(int(ExitCode.USAGE))
        except CLICK.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "difftest"
            die(f"difftest: error: {exc.format_message()} (see '{where} --help')",
                ExitCode.USAGE)
        except CLICK.ClickException as exc:
            die(f"difftest: error: {exc.format_message()}", ExitCode.USAGE)
        except OSError as exc:  # standard output: a full disk, a closed pipe
            _quiet_stdout()
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
