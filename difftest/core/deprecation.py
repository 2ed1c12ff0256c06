"""Old config keys kept for one release (they are in users' files). Each says so once where it
is read, in one sentence naming the old spelling and the new one, so a user can move before the
old one goes."""

from __future__ import annotations

import sys
import warnings
from typing import TextIO

REMOVED_IN = "difftest 0.3"  # the release in which the old keys go


def sentence(old: str, new: str) -> str:
    """The one line every old spelling gets: what it was, when it goes, what to use."""
    return f"`{old}` is deprecated and goes in {REMOVED_IN}; use `{new}`"


class DeprecatedKey(FutureWarning):
    """A config key under its old spelling. A FutureWarning, which Python shows by default: the
    config's author, not a developer, is the one to act on it."""


def warn_config(path: object, table: str, old: str, new: str) -> None:
    """Names the file, the table and the key, as a config error does."""
    warnings.warn(f"{path}: [{table}]: key {sentence(old, new)}", DeprecatedKey, stacklevel=3)


def one_line_on_stderr() -> None:
    """Show difftest's old-key warnings as one `difftest: ...` line on stderr (the
    command line's form), leaving every other warning to Python's display."""
    shown = warnings.showwarning
    if getattr(shown, "__name__", "") == _ONE_LINE:
        return  # already in place (a display Python restores, after a test, is replaced again)

    def _show_ours(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, DeprecatedKey):
            print(f"difftest: {message}", file=sys.stderr)
            return
        shown(message, category, filename, lineno, file, line)

    _show_ours.__name__ = _ONE_LINE
    warnings.showwarning = _show_ours


_ONE_LINE = "difftest_one_line_display"  # the name that marks the display installed above
