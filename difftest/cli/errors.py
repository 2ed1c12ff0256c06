"""The command line's one error translator: the command group's `main` runs a command and says
whatever ends it (a usage error, a bad parameter, a failure of difftest, an interrupt, an
unwritable standard output, a bug) as one `difftest: error: ...` line on stderr with its exit
code (`said`; exit 1 is for "differ" only), without click's usage banner or a traceback."""

import contextlib
import errno
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from difftest.core.deprecation import one_line_on_stderr
from difftest.core.errors import DifftestError, ExitCode, stopped_by

R = TypeVar("R")
# standard output itself failed: a closed pipe, a full device, a descriptor not open to write
STDOUT_ERRNOS = (errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EBADF)
# the exceptions of the click typer raises: its own copy where it vendors one, else click's
CLICK = sys.modules[typer.BadParameter.__module__]


def said(exc: BaseException, *, stdout: bool = False) -> tuple[str, ExitCode]:
    """An error's line on stderr and its exit code. Exit 1 means "differ" and nothing else, so
    not even a bug in difftest may exit 1. `stdout`: an OSError writing standard output."""
    if isinstance(exc, DifftestError):
        from difftest.report.text import strip_ansi

        return f"difftest: error: {strip_ansi(str(exc))}", exc.exit_code
    if isinstance(exc, CLICK.UsageError):
        where = exc.ctx.command_path if exc.ctx is not None else "difftest"
        return f"difftest: error: {exc.format_message()} (see '{where} --help')", ExitCode.USAGE
    if isinstance(exc, CLICK.ClickException):
        return f"difftest: error: {exc.format_message()}", ExitCode.USAGE
    if isinstance(exc, KeyboardInterrupt | typer.Abort):
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


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again at exit."""
    with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation is both
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class Group(TyperGroup):
    """The command group, whose `main` is the one place an error is said (`said`)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: object) -> object:
        """Run the command and exit with its code; what ends it otherwise is said once, here
        (click's own `main` would exit 1 on a closed pipe or an abort, and 1 is "differ").
        A caller that handles exits itself (`standalone_mode=False`) gets click's `main`."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        name = prog_name or "difftest"
        one_line_on_stderr()  # an old config key a command meets says so in one line
        try:
            if sys.stdout is None:  # started with standard output closed (`>&-`)
                raise DifftestError("standard output is closed: the verdict and reports would "
                                    "be lost; run with standard output open (redirect it to a "
                                    "file or /dev/null)")
            try:
                self._main_shell_completion(extra, name, complete_var)
            except SystemExit as exc:  # a completion request, answered; 1: a shell it lacks
                sys.exit(ExitCode.USAGE if exc.code == 1 else exc.code)
            try:
                with self.make_context(name, list(sys.argv[1:] if args is None else args),
                                       None, **extra) as ctx:
                    self.invoke(ctx)
                code = 0
            except typer.Exit as exc:
                code = exc.exit_code
            except CLICK.NoArgsIsHelpError as exc:
                typer.echo(exc.format_message())  # the help text itself
                code = ExitCode.USAGE
            sys.stdout.flush()  # a full device or a closed pipe shows here, not at exit
        except (Exception, KeyboardInterrupt) as exc:
            stdout = isinstance(exc, OSError) and exc.filename is None and \
                exc.errno in STDOUT_ERRNOS
            if stdout:
                _quiet_stdout()
            line, code = said(exc, stdout=stdout)
            with contextlib.suppress(OSError):
                typer.echo(line, err=True)
            try:  # what the command printed before: a flush failing at exit shows a traceback
                if sys.stdout is not None:
                    sys.stdout.flush()
            except OSError:
                _quiet_stdout()
        sys.exit(int(code))


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
